// Autoregressive (AR) decoding of a target model: the baseline every speculative method is
// measured against.
//
//   kCached: the Session loop (framework/engine/session.h) without a drafter: prefill the whole
//            prompt in one forward pass (causal mask), then one token per forward against the KV
//            cache. O(T) work per token.
//   kNaive:  no cache; every step recomputes the whole sequence from scratch. O(T^2) per token.
//            Exists to measure the difference; greedy output equals kCached.
#pragma once

#include <memory>

#include "framework/engine/generation.h"
#include "framework/engine/session.h"
#include "framework/sampling/sampling.h"

namespace speclab {

enum class KvMode { kCached, kNaive };

// `kv_target` itself when it names a manager, else a private manager sized for one sequence of
// `tokens` tokens (the one-off callers: generate_ar / generate_speculative without a manager).
class PrivateKv {
 public:
  PrivateKv(const ModelConfig& config, KvTarget kv_target, size_t tokens);
  KvTarget target() const { return target_; }

 private:
  std::unique_ptr<KvCacheManager> own_;
  KvTarget target_;
};

// prompt: token ids including BOS when the model wants one. Throws Error(kBadInput, ...,
// "prompt") when the prompt is empty or does not fit the model context.
GenerationResult generate_ar(const Model& model, const TokenDecoder& decoder, const TokenList& prompt,
                             const GenerationOptions& gen, const SamplingOptions& sampling,
                             KvMode mode = KvMode::kCached, const TokenCallback& on_token = {},
                             KvTarget kv_target = {});

}  // namespace speclab
