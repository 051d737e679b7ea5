#include "framework/engine/ar_decode.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <chrono>

#include "framework/core/error.h"
#include "framework/engine/observers.h"
#include "framework/kv/contiguous_kv.h"
#include "framework/sampling/logits_source.h"

namespace speclab {

PrivateKv::PrivateKv(const ModelConfig& c, KvTarget kv_target, size_t tokens) : target_(kv_target) {
  if (target_.kv) return;
  // Compared unsigned: prompt + max_new_tokens near INT64_MAX wrapped negative as an int64 (and
  // sized a cache of a few blocks, exhausted on the first step).
  const int64_t n = tokens > static_cast<size_t>(c.max_position_embeddings) ? c.max_position_embeddings
                                                                            : static_cast<int64_t>(tokens);
  own_ = std::make_unique<KvCacheManager>(kv_options_for(c, n));
  target_ = {own_.get(), own_->add_pool(c.kv_geometry())};
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// No cache: every token recomputes the whole sequence (the O(T^2) reference of the cached loop).
GenerationResult generate_naive(const Model& model, const TokenDecoder& decoder, const TokenList& prompt,
                                const GenerationOptions& gen, const SamplingOptions& sampling,
                                const TokenCallback& on_token) {
  gen.validate();
  sampling.validate();
  const ModelConfig& c = model.config();
  check_prompt_fits(prompt, c);
  GenerationResult res;
  res.prompt = prompt;
  StopCriteria stop(decoder, gen, static_cast<int64_t>(prompt.size()), c.max_position_embeddings,
                    prompt.empty() ? Token(-1) : prompt.back());
  Rng rng(sampling.seed);
  std::vector<float> scratch;
  TokenList seq = prompt;
  const auto t0 = Clock::now();
  auto t1 = t0;
  for (bool done = false; !done;) {
    const int64_t n = static_cast<int64_t>(seq.size());
    ContiguousKv scratch_kv(c.kv_geometry(), n);  // recomputed from scratch every step
    std::vector<int64_t> ids(seq.begin(), seq.end());
    at::Tensor logits = model.forward(at::tensor(ids, at::kLong), at::arange(n, at::kLong),
                                      scratch_kv.append_view(n), ForwardOptions{{}, 1});
    ++res.forward_calls;
    const Token t = naming_logits_source(kTargetModelSource, [&] {
      return pick_token(logits.data_ptr<float>(), c.vocab_size, sampling, rng, scratch);
    });
    seq.push_back(t);
    res.tokens.push_back(t);
    if (on_token) on_token(t);
    done = stop.push(t);
    if (res.forward_calls == 1) {
      res.prefill_seconds = seconds_since(t0);
      t1 = Clock::now();
    }
  }
  res.decode_seconds = seconds_since(t1);
  res.stop_reason = stop.reason();
  res.text = stop.text();
  return res;
}

}  // namespace

GenerationResult generate_ar(const Model& model, const TokenDecoder& decoder, const TokenList& prompt,
                             const GenerationOptions& gen, const SamplingOptions& sampling, KvMode mode,
                             const TokenCallback& on_token, KvTarget kv_target) {
  if (mode == KvMode::kNaive) return generate_naive(model, decoder, prompt, gen, sampling, on_token);
  PrivateKv own(model.config(), kv_target, prompt.size() + static_cast<size_t>(gen.max_new_tokens));
  Session session(model, decoder, own.target());
  PhaseTimer timer;
  TokenSink sink(on_token);
  session.add_observer(timer);
  if (on_token) session.add_observer(sink);
  const Method ar;  // no drafter
  session.begin({prompt, ar, gen, sampling});
  while (!session.done()) session.step();
  return session.end();
}

}  // namespace speclab
