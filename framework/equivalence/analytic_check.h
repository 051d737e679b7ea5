// Analytic check of one verification step on real-model distributions.
//
// For the target's p and a draft's q at the same context (both after the run's temperature /
// top-k / top-p transform, framework/sampling/sampling.h), the exact distribution of the first
// token a verification step emits with one draft token x ~ q is obtained by enumerating x
// (first_token_distribution in framework/verify/acceptance.h, with the verifier's own
// acceptance_probability and residual_weight; Leviathan et al. 2023, arXiv:2211.17192,
// appendix A.1; Chen et al. 2023, arXiv:2302.01318, Theorem 1). Lossless means it equals p; the
// error is the largest |P(out = y) − p(y)| over the vocabulary. The same enumeration under the two faulty rules of
// framework/verify/faulty_acceptance.h (always-accept: the output is q; top-p applied to p but
// not to q) shows how large the error of a real bug is on the same p and q.
//
// Contexts come from real prompts; p is the target's next-token distribution and q is the
// draft's, computed the way the engine computes them (next_token_logits below).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/types.h"
#include "framework/sampling/sampling.h"
#include "framework/core/model.h"

namespace speclab {

// |error| above this fails the analytic check. The enumeration is done in double from float
// inputs normalised in double, so a correct rule is exact up to ~vocab · 1e-16.
constexpr double kAnalyticTolerance = 1e-6;

struct AnalyticErrors {
  double lossless = 0.0;        // max |P(out) − p| for the implemented rule with q = processed draft
  double deterministic = 0.0;   // the same with q one-hot at the draft's argmax (a greedy draft)
  double always_accept = 0.0;   // max |q − p|: the output distribution of always-accept
  double top_p_on_p_only = 0.0; // max error of faulty::first_token_distribution_top_p_on_p_only with
                                // q_raw = the draft logits processed with top_p = 1; NaN when top_p == 1
  double tv_pq = 0.0;           // total-variation distance between p and q
  int64_t support_p = 0;        // tokens with p > 0
  int64_t support_q = 0;        // tokens with q > 0
};

// target_logits, draft_logits: [vocab] raw logits at the same context. sampling.temperature must be
// > 0 (the check is about sampling). Throws Error(kConfig, field "temperature") at temperature 0,
// Error(kBadInput) as logits_to_probs / first_token_distribution do.
AnalyticErrors analytic_step_errors(const float* target_logits, const float* draft_logits, int64_t vocab,
                                    const SamplingOptions& sampling);

// Raw next-token logits [vocab] of `model` after `context` (at least 1 token), computed as the
// engines compute them: the context minus its last token is prefilled with every layer into a
// private KV cache, then the last token is run with `last_layers` (empty = all; a layer_skip
// draft's subset), reading the full-model K/V of the earlier positions. Throws Error(kBadInput,
// field "context") on an empty context or one that does not fit the model.
std::vector<float> next_token_logits(const Model& model, const TokenList& context,
                                     const std::vector<int64_t>& last_layers = {});

}  // namespace speclab
