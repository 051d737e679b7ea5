#include "framework/engine/verifier.h"

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
  for (int64_t r = 0; r < rows; ++r) logits_to_probs(logits + r * vocab, vocab, use, p[static_cast<size_t>(r)]);
  return p;
}

}  // namespace speclab
