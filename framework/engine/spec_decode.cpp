#include "framework/engine/spec_decode.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "framework/core/error.h"
#include "framework/draft/draft_length.h"
#include "framework/verify/acceptance.h"

namespace speclab {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

at::Tensor as_tensor(const TokenList& ids) {
  std::vector<int64_t> v(ids.begin(), ids.end());
  return at::tensor(v, at::kLong);
}

// Target probabilities of every verification row: the processed p under sampling, or the plain
// softmax (temperature 1) under greedy decoding, where it is only logged.
std::vector<std::vector<float>> target_probs(const at::Tensor& logits, const SamplingOptions& s) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  std::vector<std::vector<float>> p(static_cast<size_t>(rows));
  SamplingOptions plain;
  plain.temperature = 1.0;
  const SamplingOptions& use = s.greedy() ? plain : s;
  const float* base = logits.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) logits_to_probs(base + r * vocab, vocab, use, p[static_cast<size_t>(r)]);
  return p;
}

}  // namespace

Verdict lossless_acceptance(const VerifyInputs& in) {
  if (in.sampling->greedy()) return verify_greedy(in.draft->tokens, in.target_logits, in.vocab);
  return verify_rejection(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
}

double SpecResult::mean_accepted_length() const {
  if (steps.empty()) return 0.0;
  double emitted = 0.0;
  for (const auto& s : steps) emitted += s.accepted + 1;
  return emitted / static_cast<double>(steps.size());
}

double SpecResult::acceptance_rate() const {
  double drafted = 0.0, accepted = 0.0;
  for (const auto& s : steps) {
    drafted += s.drafted;
    accepted += s.accepted;
  }
  return drafted > 0 ? accepted / drafted : 0.0;
}

SpecResult generate_speculative(const Model& target, const Tokenizer& tokenizer, const TokenList& prompt,
                                const GenerationOptions& gen, const SamplingOptions& sampling, Drafter& drafter,
                                const DrafterOptions& dopts, KvTarget kv_target, const TokenCallback& on_token,
                                const SpecHooks& hooks) {
  gen.validate();
  sampling.validate();
  dopts.validate();
  const ModelConfig& c = target.config();
  check_prompt_fits(prompt, c);
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());

  std::unique_ptr<KvCacheManager> own;
  if (!kv_target.kv) {
    own = std::make_unique<KvCacheManager>(
        kv_options_for(c, std::min<int64_t>(c.max_position_embeddings, n_prompt + gen.max_new_tokens + 64)));
    kv_target = {own.get(), own->add_pool(c)};
  }
  KvCacheManager& kv = *kv_target.kv;
  KvSequence seq_kv(kv, kv_target.pool);
  const SeqId sid = seq_kv.id();

  SpecResult res;
  res.prompt = prompt;
  StopCriteria stop(tokenizer, gen, n_prompt, c.max_position_embeddings);
  Rng rng(sampling.seed);                                // the verifier's stream (same as AR's)
  Rng draft_rng(sampling.seed ^ 0x9E3779B97F4A7C15ull);  // the drafter's own stream
  std::vector<float> scratch;
  TokenList seq = prompt;
  bool done = false;
  auto emit = [&](Token t) {
    seq.push_back(t);
    res.tokens.push_back(t);
    if (on_token) on_token(t);
    done = stop.push(t);
  };

  // Prefill, exactly as AR decoding does it.
  auto t0 = Clock::now();
  kv.reserve(sid, n_prompt);
  at::Tensor logits =
      target.forward(as_tensor(prompt), at::arange(n_prompt, at::kLong), kv.view(sid, n_prompt), ForwardOptions{{}, 1});
  SPECLAB_CHECK(kv.commit(sid, n_prompt) == KvStatus::kOk, "commit of the prompt");
  ++res.forward_calls;
  emit(pick_token(logits[0].contiguous().data_ptr<float>(), c.vocab_size, sampling, rng, scratch));
  res.prefill_seconds = since(t0);

  auto t1 = Clock::now();
  drafter.begin(sid, prompt);
  DraftLengthPolicy policy(dopts);
  while (!done) {
    SpecStep step;
    const int64_t n = kv.length(sid);  // position of the pending token seq.back()
    const int64_t room = std::min<int64_t>(gen.max_new_tokens - stop.n_generated(), c.max_position_embeddings - n) - 1;
    const int max_k = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(policy.next(), room)));

    // 1. propose
    auto ts = Clock::now();
    DraftBlock d;
    if (max_k > 0) {
      DraftContext ctx;
      ctx.seq = sid;
      ctx.tokens = &seq;
      ctx.n_prompt = n_prompt;
      ctx.sampling = &sampling;
      ctx.rng = &draft_rng;
      ctx.min_confidence = dopts.confidence_threshold;
      d = drafter.propose(ctx, max_k);
    }
    const int k = static_cast<int>(d.tokens.size());
    SPECLAB_CHECK(k <= max_k, drafter.name() + " proposed more than max_k tokens");
    SPECLAB_CHECK(d.probs.empty() || static_cast<int>(d.probs.size()) == k, "draft probs must have one row per token");
    step.draft_seconds = since(ts);

    // 2. reserve, 3. one target forward over [pending, drafts]
    ts = Clock::now();
    kv.reserve(sid, k + 1);
    step.kv_seconds += since(ts);
    ts = Clock::now();
    TokenList input(1, seq.back());
    input.insert(input.end(), d.tokens.begin(), d.tokens.end());
    logits = target.forward(as_tensor(input), at::arange(n, n + k + 1, at::kLong), kv.view_at(sid, n, k + 1));
    ++res.forward_calls;
    step.verify_seconds = since(ts);

    // 4. accept
    ts = Clock::now();
    // Under greedy decoding with the lossless rule p decides nothing; only p(draft token) is
    // logged, by softmax_prob (one row costs ~2% of a full logits_to_probs row).
    const bool full_p = !sampling.greedy() || static_cast<bool>(hooks.acceptance);
    const auto p = full_p ? target_probs(logits, sampling) : std::vector<std::vector<float>>();
    VerifyInputs vin;
    vin.draft = &d;
    vin.target_logits = logits.data_ptr<float>();
    vin.vocab = c.vocab_size;
    vin.p = &p;
    vin.sampling = &sampling;
    vin.rng = &rng;
    Verdict v = hooks.acceptance ? hooks.acceptance(vin) : lossless_acceptance(vin);
    std::vector<float> greedy_p;
    if (!full_p)
      for (int i = 0; i < k; ++i)
        greedy_p.push_back(static_cast<float>(
            softmax_prob(logits.data_ptr<float>() + i * c.vocab_size, c.vocab_size, d.tokens[static_cast<size_t>(i)])));
    step.accept_seconds = since(ts);

    // 5. commit the kept prefix and roll both caches back to it
    ts = Clock::now();
    SPECLAB_CHECK(kv.commit(sid, v.n_accepted + 1) == KvStatus::kOk, "commit of accepted tokens");
    SPECLAB_CHECK(kv.truncate(sid, n + 1 + v.n_accepted) == KvStatus::kOk, "rollback of rejected tokens");
    drafter.accept(sid, v.n_accepted);
    step.kv_seconds += since(ts);
    res.kv_peak_bytes = std::max(res.kv_peak_bytes, kv.bytes_used());
    res.kv_seq_peak_bytes = std::max(res.kv_seq_peak_bytes, kv.usage(sid).bytes_referenced);

    // 6. record and emit
    step.drafted = k;
    step.accepted = v.n_accepted;
    step.bonus = v.bonus;
    for (int i = 0; i < k; ++i) {
      const Token x = d.tokens[static_cast<size_t>(i)];
      step.p.push_back(full_p ? p[static_cast<size_t>(i)][static_cast<size_t>(x)] : greedy_p[static_cast<size_t>(i)]);
      step.q.push_back(d.probs.empty() ? 1.0f : d.probs[static_cast<size_t>(i)][static_cast<size_t>(x)]);
      step.accept_prob.push_back(i < static_cast<int>(v.accept_prob.size())
                                     ? static_cast<float>(v.accept_prob[static_cast<size_t>(i)])
                                     : std::numeric_limits<float>::quiet_NaN());
      step.accepted_mask.push_back(i < v.n_accepted ? 1 : 0);
    }
    policy.update(k, v.n_accepted);
    res.draft_seconds += step.draft_seconds;
    res.verify_seconds += step.verify_seconds;
    res.accept_seconds += step.accept_seconds;
    res.kv_seconds += step.kv_seconds;
    res.steps.push_back(std::move(step));
    for (int i = 0; i < v.n_accepted && !done; ++i) emit(d.tokens[static_cast<size_t>(i)]);
    if (!done) emit(v.next_token);
  }
  drafter.end(sid);
  res.decode_seconds = since(t1);
  res.stop_reason = stop.reason();
  res.text = stop.text();
  return res;
}

}  // namespace speclab
