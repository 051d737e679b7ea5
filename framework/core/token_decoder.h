// TokenDecoder — what the engine needs of a tokenizer: the bytes a token stands for and whether it
// ends a sequence. Stop criteria (framework/engine/generation.h) decide on these alone, so the
// framework never depends on a concrete tokenizer; models/tokenizers/tokenizer.h implements it.
#pragma once

#include <string>

#include "framework/core/types.h"

namespace speclab {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // The raw bytes one token stands for (may be a partial UTF-8 sequence). Control tokens:
  // empty in SentencePieceBpe (llama2.c, GGUF "llama"), their literal text ("<|im_end|>") in
  // ByteLevelBpe, as HF decodes them with skip_special_tokens=False; unused entries: empty.
  virtual std::string token_bytes(Token id) const = 0;
  // The bytes of `id` where it follows token `prev` in a sequence (prev < 0: none): token_bytes(id),
  // except in SentencePieceBpe, which drops one leading space of a piece right after BOS, as run.c
  // and its own decode() do (generated text after a BOS-only prompt began with a stray space).
  virtual std::string token_bytes_after(Token prev, Token id) const {
    (void)prev;
    return token_bytes(id);
  }
  // True for the model's end-of-sequence ids.
  virtual bool is_eos(Token id) const = 0;
};

}  // namespace speclab
