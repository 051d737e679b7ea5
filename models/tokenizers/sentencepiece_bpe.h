// SentencePieceBpe — the SentencePiece BPE tokenizer of Llama 2 / TinyStories models, as found
// in llama2.c `tokenizer.bin` files and GGUF "llama" vocabularies.
//
// encode() reproduces llama2.c run.c `encode`:
//   1. when add_space_prefix and the text is non-empty, a dummy " " is put in front;
//   2. the text is cut into UTF-8 characters (a lead byte plus at most 3 continuation bytes);
//      each character that is a vocabulary piece becomes that piece, any other character
//      becomes its bytes' "<0xXX>" tokens (byte fallback; the unknown token when the vocabulary
//      has no byte pieces);
//   3. repeatedly the adjacent pair whose concatenation is a piece with the highest score is
//      merged (leftmost on ties; byte-fallback tokens never merge), until no pair merges.
// A vocabulary whose pieces write the space as U+2581 "▁" (SentencePiece, GGUF) is detected,
// and spaces in the input are then written as "▁" before step 2; llama2.c's tokenizer.bin
// stores plain spaces. Control and user-defined pieces (GGUF token types 3 and 4) written
// literally in the text are emitted as their ids; text after such a token gets its own dummy
// space, as SentencePiece encodes each text chunk separately (llama.cpp does the same).
// Unlike the SentencePiece library, no normalisation is applied (white-space runs are kept),
// exactly like run.c.
//
// decode() concatenates token_bytes_after(): token_bytes(), except that — like run.c — one leading
// space of the piece right after a BOS token is dropped (when add_space_prefix), so
// decode(encode(text, true)) == text; the engine's generated text applies the same rule. token_bytes(): "<0xXX>" -> that byte, control -> "",
// "▁" -> " ", anything else -> the piece text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/tokenizers/special_tokens.h"
#include "models/tokenizers/tokenizer.h"

namespace speclab {

class SentencePieceBpe : public Tokenizer {
 public:
  // pieces/scores/types as in llama2.c tokenizer.bin or GGUF tokenizer.ggml.{tokens,scores,
  // token_type} (types: see token_type::k*; may be empty: then "<0xXX>" pieces are bytes,
  // "<unk>" is unknown and everything else is normal). Throws Error(kBadInput) when the sizes
  // disagree or a type is out of range.
  SentencePieceBpe(std::vector<std::string> pieces, std::vector<float> scores,
                   std::vector<int32_t> token_types, bool add_space_prefix);

  // llama2.c tokenizer.bin: int32 max_token_length, then per token: float score, int32 len,
  // len bytes. vocab_size comes from the model header. Sets BOS = 1 and EOS = {2} (run.c's
  // fixed ids) and marks ids 1 and 2 as control tokens. Throws Error(kIo) when the file cannot
  // be read and Error(kBadInput) naming `path` and the field when it is truncated or malformed.
  static std::unique_ptr<SentencePieceBpe> from_llama2c(const std::string& path,
                                                        int64_t vocab_size);

  SentencePieceBpe(const SentencePieceBpe&) = delete;  // piece_to_id_ views into pieces_
  SentencePieceBpe& operator=(const SentencePieceBpe&) = delete;

  TokenList encode(std::string_view text, bool add_bos) const override;
  std::string decode(const TokenList& tokens) const override;
  std::string token_bytes(Token id) const override;
  std::string token_bytes_after(Token prev, Token id) const override;  // decode()'s after-BOS rule
  const std::string& token_text(Token id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }

  float score(Token id) const;
  int32_t token_type(Token id) const;
  bool add_space_prefix() const { return add_space_prefix_; }
  // True when pieces write the space as "▁" (SentencePiece/GGUF), false for plain spaces.
  bool uses_space_marker() const { return space_marker_; }

 private:
  void check_id(Token id) const;
  void encode_chunk(std::string_view chunk, bool dummy_prefix, TokenList& out) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::vector<std::string> bytes_;  // token_bytes() of every id
  std::unordered_map<std::string_view, Token> piece_to_id_;  // views into pieces_
  Token byte_fallback_[256];        // id for each byte, -1 when none
  bool add_space_prefix_;
  bool space_marker_ = false;
  SpecialTokenMatcher specials_;
};

}  // namespace speclab
