// Generation options, stop criteria and results shared by AR and speculative decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/types.h"
#include "framework/core/token_decoder.h"

namespace speclab {

// Maps to the YAML `generation` section; names follow HF GenerationConfig.
struct GenerationOptions {
  int64_t max_new_tokens = 128;
  std::vector<std::string> stop;  // stop strings (HF `stop_strings`)
  bool ignore_eos = false;        // keep going past EOS ids (benchmarks)

  void validate() const;  // throws Error(kConfig, ..., "generation", <field>)
};

enum class StopReason { kNone, kEos, kLength, kStopString, kContext };
const char* to_string(StopReason r);

// Decides when to stop, token by token. The text is the decoded bytes of the new tokens, each as
// it reads after its predecessor (TokenDecoder::token_bytes_after; the first after `last_prompt`,
// the prompt's last token, or -1 for none); when a stop string appears, text() is cut just before
// it (the tokens are kept as generated).
class StopCriteria {
 public:
  StopCriteria(const TokenDecoder& tok, const GenerationOptions& opts, int64_t prompt_len, int64_t context_len,
               Token last_prompt = -1);
  // Appends one generated token; returns true when generation must stop after it.
  bool push(Token t);
  StopReason reason() const { return reason_; }
  const std::string& text() const { return text_; }
  int64_t n_generated() const { return n_; }

 private:
  const TokenDecoder& tok_;
  const GenerationOptions& opts_;
  int64_t prompt_len_, context_len_;
  int64_t n_ = 0;
  Token prev_;  // the token before the next one pushed
  std::string text_;
  size_t max_stop_len_ = 0;
  StopReason reason_ = StopReason::kNone;
};

struct GenerationResult {
  TokenList prompt;               // as fed to the model (BOS included when used)
  TokenList tokens;               // new tokens, including the one that triggered a stop
  std::string text;               // decoded new tokens (cut before a stop string)
  StopReason stop_reason = StopReason::kNone;
  double prefill_seconds = 0.0;   // first forward over the prompt (cached mode)
  // The drafter's begin() right after the prefill: a draft model's own prefill of the prompt, an
  // EAGLE head's first features; 0 without a drafter. Prompt processing, as llama.cpp's
  // speculative example counts the draft's prompt in its "encoded" time.
  double draft_prefill_seconds = 0.0;
  double decode_seconds = 0.0;    // everything after the prefill and the drafter's begin()
  int64_t forward_calls = 0;      // target forward passes
  int64_t kv_peak_bytes = 0;      // peak KvCacheManager::bytes_used() during the call (all pools)
  int64_t kv_seq_peak_bytes = 0;  // peak bytes referenced by the target's own sequence
};

using TokenCallback = std::function<void(Token)>;

}  // namespace speclab
