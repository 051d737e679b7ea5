// ByteLevelBpe — GPT-2 style byte-level BPE (SmolLM2, Qwen2, Llama 3; GGUF "gpt2" vocabularies
// and HF tokenizer.json), matching HF `tokenizers`.
//
// encode():
//   1. control and user-defined tokens (GGUF token types 3 and 4; tokenizer.json
//      added_tokens) written literally in the text are split out and emitted as their ids
//      (leftmost, longest first);
//   2. every other stretch of text is pre-tokenized by the vocabulary's regex (PreTokenizer
//      below, hand-written matchers equivalent to the regexes);
//   3. each pre-token's bytes are mapped to characters with GPT-2's bytes_to_unicode table and
//      merged by BPE: repeatedly the adjacent pair with the lowest merge rank (leftmost on
//      ties) is merged. With ignore_merges (Llama 3), a pre-token that is a whole vocabulary
//      entry is emitted directly. Results per pre-token are cached (thread-safe).
//      A byte whose character has no token (SmolLM2 lacks e.g. 0x04 and 0xF1) is dropped, as
//      HF `tokenizers` drops it.
// decode() concatenates token_bytes(): normal tokens map their characters back to bytes;
// control and user-defined tokens decode to their literal text (as HF's decode with
// skip_special_tokens=False), so decode(encode(text)) == text for every text made of bytes
// the vocabulary has; unused entries (type 5, e.g. Qwen's 271 "[PAD...]" placeholders) decode
// to nothing, as in llama.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/tokenizers/special_tokens.h"
#include "models/tokenizers/tokenizer.h"

namespace speclab {

// The pre-tokenization regexes of the supported vocabularies.
enum class PreTokenizer {
  // GPT-2 / HF ByteLevel(use_regex=true):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // SmolLM / StarCoder: Digits(individual_digits=true) — every \p{N} character is its own
  // piece — then the GPT-2 regex inside each remaining piece.
  kSmolLM,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: as Llama 3 with \p{N} instead of \p{N}{1,3}.
  kQwen2,
};

// GGUF tokenizer.ggml.pre value -> PreTokenizer: "gpt2" and "default" -> kGpt2, "smollm" ->
// kSmolLM, "llama-bpe" and "llama3" -> kLlama3, "qwen2" -> kQwen2. Anything else throws
// Error(kUnsupported) naming the field tokenizer.ggml.pre.
PreTokenizer parse_pre_type(const std::string& pre_type);

// Splits `text` into pre-tokens (views into `text`, covering it exactly, in order). Invalid
// UTF-8 bytes count as characters that are neither letters, numbers nor white space.
std::vector<std::string_view> byte_level_pretokenize(std::string_view text, PreTokenizer kind);

// GPT-2 bytes_to_unicode: the character (UTF-8) that stands for byte b in vocabulary strings.
const std::string& byte_to_unicode(unsigned char b);

class ByteLevelBpe : public Tokenizer {
 public:
  // tokens: GPT-2 byte-mapped strings (e.g. "Ġthe"); merges: "a b" strings in rank order;
  // token_types as GGUF (may be empty: all normal); pre_type: see parse_pre_type.
  // ignore_merges is on for Llama 3 (as llama.cpp does for "llama-bpe").
  // Throws Error(kBadInput) naming the field when sizes disagree or a merge names an unknown
  // token, Error(kUnsupported) for an unknown pre_type.
  ByteLevelBpe(std::vector<std::string> tokens, std::vector<std::string> merges,
               std::vector<int32_t> token_types, std::string pre_type);

  // HF tokenizer.json: model.type "BPE" (vocab, merges as "a b" strings or [a, b] pairs,
  // ignore_merges), added_tokens, and a pre_tokenizer that is one of: ByteLevel (gpt2);
  // Sequence[Digits(individual_digits), ByteLevel] (smollm); Sequence[Split(Llama-3 or Qwen2
  // regex, Isolated), ByteLevel(use_regex=false)]. normalizer must be null or NFC; NFC
  // (nfc.h) is applied to the text between special tokens before pre-tokenizing, as HF
  // `tokenizers` does (the GGUF constructor applies none, as llama.cpp). BOS is the first special token of a
  // TemplateProcessing post_processor, if any; EOS is left to the caller.
  // Throws Error(kIo) when unreadable, Error(kBadInput)/Error(kUnsupported) naming the file and
  // the JSON field otherwise.
  static std::unique_ptr<ByteLevelBpe> from_tokenizer_json(const std::string& path);

  ByteLevelBpe(const ByteLevelBpe&) = delete;  // token_to_id_ views into tokens_
  ByteLevelBpe& operator=(const ByteLevelBpe&) = delete;

  TokenList encode(std::string_view text, bool add_bos) const override;
  std::string decode(const TokenList& tokens) const override;
  std::string token_bytes(Token id) const override;
  const std::string& token_text(Token id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }

  int32_t token_type(Token id) const;
  PreTokenizer pre_tokenizer() const { return pre_; }
  bool ignore_merges() const { return ignore_merges_; }
  // Whether encode() brings text into NFC first (a tokenizer.json normalizer of type NFC).
  bool normalizes_nfc() const { return nfc_; }
  // Token id of a vocabulary string, -1 when absent.
  Token find_token(std::string_view text) const;
  // Pads the vocabulary to n ids with unused entries (type 5: no text, never encoded, decoded to
  // nothing, as HF's decode skips ids its vocabulary lacks), for a model whose embedding has rows
  // past the tokenizer's last id (HF config.json's vocab_size rounded up: Qwen2.5's 151936 rows
  // over 151665 tokens). No-op when n <= vocab_size().
  void pad_vocab(int64_t n);

 private:
  struct AddedToken {  // tokenizer.json added_tokens entry
    Token id;
    std::string content;
    bool special, lstrip, rstrip;
  };
  ByteLevelBpe(std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
               std::vector<int32_t> token_types, PreTokenizer pre, bool ignore_merges,
               const std::vector<AddedToken>& added, const std::string& source,
               const std::string& merges_field);
  void check_id(Token id) const;
  void bpe_word(std::string_view word, TokenList& out) const;

  std::vector<std::string> tokens_;
  std::vector<int32_t> types_;
  std::vector<std::string> bytes_;  // token_bytes() of every id
  std::unordered_map<std::string_view, Token> token_to_id_;  // views into tokens_
  std::unordered_map<uint64_t, std::pair<int32_t, Token>> merges_;  // (left<<32|right) -> (rank, merged)
  Token byte_token_[256];           // id of each byte's single-character token, -1 when none
  PreTokenizer pre_;
  bool ignore_merges_;
  bool nfc_ = false;
  SpecialTokenMatcher specials_;

  static constexpr size_t kCacheCapacity = 1 << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, TokenList> cache_;
};

}  // namespace speclab
