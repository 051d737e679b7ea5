// Autoregressive (AR) decoding of a target model: the baseline every speculative method is
// measured against.
//
//   kCached: prefill the whole prompt in one forward pass (causal mask), then one token per
//            forward against the KV cache. O(T) work per token.
//   kNaive:  no cache; every step recomputes the whole sequence from scratch. O(T^2) per token.
//            Exists to measure the difference; greedy output equals kCached.
#pragma once

#include "framework/engine/generation.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/sampling/sampling.h"
#include "models/model.h"

namespace speclab {

enum class KvMode { kCached, kNaive };

// Where the cached mode keeps K/V: a pool of a shared manager, or (kv == nullptr) a private
// manager sized for this one sequence.
struct KvTarget {
  KvCacheManager* kv = nullptr;
  PoolId pool = 0;
};

// prompt: token ids including BOS when the model wants one. Throws Error(kBadInput, ...,
// "prompt") when the prompt is empty or does not fit the model context.
GenerationResult generate_ar(const Model& model, const Tokenizer& tokenizer, const TokenList& prompt,
                             const GenerationOptions& gen, const SamplingOptions& sampling,
                             KvMode mode = KvMode::kCached, const TokenCallback& on_token = {},
                             KvTarget kv_target = {});

// A private KV manager big enough for one sequence of `tokens` tokens of `config`'s model.
KvOptions kv_options_for(const ModelConfig& config, int64_t tokens, int32_t block_size = 16);

// Picks the next token from one row of logits: argmax when greedy, else a draw from the
// processed distribution. logits: [vocab] float32 (host memory).
Token pick_token(const float* logits, int64_t vocab, const SamplingOptions& sampling, Rng& rng,
                 std::vector<float>& scratch_probs);

// Checks prompt length against the context; shared by every decoder.
void check_prompt_fits(const TokenList& prompt, const ModelConfig& config);

}  // namespace speclab
