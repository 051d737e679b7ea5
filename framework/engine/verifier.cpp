#include "framework/engine/verifier.h"

#include "framework/core/thread_pool.h"

namespace speclab {

Verdict lossless_acceptance(const VerifyInputs& in) {
  if (in.sampling->greedy()) return verify_greedy(in.draft->tokens, in.target_logits, in.vocab);
  return verify_rejection(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
}

std::vector<std::vector<float>> target_probs(const float* logits, int64_t rows, int64_t vocab,
                                             const SamplingOptions& s) {
  std::vector<std::vector<float>> p(static_cast<size_t>(rows));
  SamplingOptions plain;
  plain.temperature = 1.0;
  const SamplingOptions& use = s.greedy() ? plain : s;
  // Rows are independent (and each is computed the same way on any thread), so a verification
  // pass's rows go to the model's worker threads, which otherwise wait for the next forward: a
  // 49,152-token row without top-k takes ~35 us, 64 with top-p (sampling.h).
  const auto one = [&](int64_t r) { logits_to_probs(logits + r * vocab, vocab, use, p[static_cast<size_t>(r)]); };
  if (rows >= 2 && vocab >= 4096 && compute_threads() > 1)
    parallel_chunks(rows, 1, compute_threads(), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) one(r);
    });
  else
    for (int64_t r = 0; r < rows; ++r) one(r);
  return p;
}

}  // namespace speclab
