// Tokenizer — text <-> token ids. Torch-free.
//
// Implementations: SentencePieceBpe (Llama 2, llama2.c tokenizer.bin, GGUF "llama" vocab; BPE by
// merge score with <0xXX> byte fallback) and ByteLevelBpe (GPT-2 style byte mapping and merges;
// SmolLM2, Qwen2, Llama 3; GGUF "gpt2" vocab and HF tokenizer.json).
//
// encode() recognises special/control tokens written literally in the text (e.g.
// "<|im_start|>") and emits their ids, so chat-templated text encodes as HF does with
// `add_special_tokens` semantics left to the caller (`add_bos`).
// decode() concatenates raw token bytes, so UTF-8 split across tokens decodes correctly; any
// invalid UTF-8 left at the very end is kept as-is (use StreamDecoder for incremental output).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/token_decoder.h"
#include "framework/core/types.h"

namespace speclab {

class Tokenizer : public TokenDecoder {
 public:

  virtual TokenList encode(std::string_view text, bool add_bos) const = 0;
  virtual std::string decode(const TokenList& tokens) const = 0;
  // The raw bytes one token stands for (may be a partial UTF-8 sequence). Control tokens:
  // empty in SentencePieceBpe (llama2.c, GGUF "llama"), their literal text ("<|im_end|>") in
  // ByteLevelBpe, as HF decodes them with skip_special_tokens=False; unused entries: empty.
  std::string token_bytes(Token id) const override = 0;
  // The vocabulary entry as stored (e.g. "Ġthe", "▁the", "<0x0A>", "<|im_end|>").
  virtual const std::string& token_text(Token id) const = 0;
  virtual int64_t vocab_size() const = 0;

  Token bos_id() const { return bos_id_; }  // -1 when the vocabulary has none
  const TokenList& eos_ids() const { return eos_ids_; }
  void set_bos_id(Token id) { bos_id_ = id; }
  void set_eos_ids(TokenList ids) { eos_ids_ = std::move(ids); }
  bool is_eos(Token id) const override;

 protected:
  Token bos_id_ = -1;
  TokenList eos_ids_;
};

// Incremental detokenizer: feed tokens one by one, get back the text that is complete UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  // Returns the printable text this token completes (possibly empty).
  std::string push(Token id);
  // Whatever bytes are still pending (an incomplete UTF-8 sequence at the end of output).
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace speclab
