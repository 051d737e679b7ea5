#include "framework/engine/verifier.h"

#include <exception>
#include <vector>

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
  // A bad row's error is kept per row and the lowest row's rethrown, as the sequential loop would.
  const auto one = [&](int64_t r) { logits_to_probs(logits + r * vocab, vocab, use, p[static_cast<size_t>(r)]); };
  if (rows >= 2 && vocab >= 4096 && compute_threads() > 1) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(rows));
    parallel_chunks(rows, 1, compute_threads(), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) try {
          one(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
    });
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  } else {
    for (int64_t r = 0; r < rows; ++r) one(r);
  }
  return p;
}

}  // namespace speclab
