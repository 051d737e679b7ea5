// DELIBERATELY WRONG acceptance rules — negative controls only.
//
// The statistical equivalence checks (tests/unit/test_acceptance.cpp and the later
// spec-decode equivalence tests) must be shown able to fail: each one is run against these
// broken rules and has to REJECT them. Never call these from the engine or a drafter.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/rng.h"
#include "framework/core/types.h"
#include "framework/verify/acceptance.h"

namespace speclab {
namespace faulty {

// WRONG: accepts every draft token and emits a bonus token drawn from p_k. The emitted
// tokens follow q, not p. Same arguments, validation and Verdict layout as verify_rejection
// (accept_prob still reports min(1, p/q)); makes exactly one rng.uniform() draw (the bonus).
Verdict verify_always_accept(const TokenList& draft,
                             const std::vector<std::vector<float>>& target_probs,
                             const std::vector<std::vector<float>>& draft_probs, Rng& rng);

// WRONG: the recovered token at the first rejected position is drawn from p_i instead of
// norm(max(0, p_i − q_i)); everything else as verify_rejection (same validation, same draws:
// one uniform() per examined position, one for the recovered or bonus token). The emitted
// token then follows β·p + (1 − β)·... instead of p: the error is (1 − β)·(p − residual),
// between ~1e-4 and ~0.1 in TV on real rows (issue 14).
Verdict verify_replacement_from_p(const TokenList& draft,
                                  const std::vector<std::vector<float>>& target_probs,
                                  const std::vector<std::vector<float>>& draft_probs, Rng& rng);

// WRONG: when all k drafts are accepted, the bonus token is drawn from row k − 1 of p (the
// last draft's row, an off-by-one) instead of row k. Otherwise as verify_rejection. Only the
// bonus position is wrong, and only as far as p_{k−1} differs from p_k.
Verdict verify_bonus_from_previous_row(const TokenList& draft,
                                       const std::vector<std::vector<float>>& target_probs,
                                       const std::vector<std::vector<float>>& draft_probs, Rng& rng);

// WRONG: the recovered token at the first rejected position i is drawn from the residual
// max(0, p_i − q_i) WITHOUT normalising it: a uniform u in [0, 1) walks the residual's running
// sum, and where u is beyond the residual's total mass (the TV distance between p_i and q_i,
// often well below 1) the last token with residual mass is taken. A sampler written as an
// inverse CDF that forgets the division by the sum. Same draws as verify_rejection (u is the
// recovered token's draw); everything else as verify_rejection.
Verdict verify_residual_unnormalised(const TokenList& draft,
                                     const std::vector<std::vector<float>>& target_probs,
                                     const std::vector<std::vector<float>>& draft_probs, Rng& rng);

// WRONG: draft token i is judged against row i + 1 of p instead of row i (an off-by-one in
// the alignment of the target's logits, whose row i predicts the token after draft[0..i)): the
// acceptance test and the recovered token use p_{i+1}; the bonus row k stays p_k. Implemented
// as verify_rejection on the rows [p_1, ..., p_k, p_k]; the same draws.
Verdict verify_p_row_off_by_one(const TokenList& draft, const std::vector<std::vector<float>>& target_probs,
                                const std::vector<std::vector<float>>& draft_probs, Rng& rng);

// WRONG: the first-token distribution when top-p (or any truncation) is applied to p and to
// the drafter's sampling, but verification is handed the drafter's UNtruncated q: the draft
// token is drawn from q_drawn (truncated) while the acceptance test and the residual use
// q_raw. (Giving verification the q that x was really drawn from is lossless whatever p is;
// the bug is the mismatch.)
//   P(out = y) = q_drawn(y)·min(1, p(y)/q_raw(y))
//              + (Σ_x q_drawn(x)·(1 − min(1, p(x)/q_raw(x)))) · norm(max(0, p − q_raw))(y)
// p_processed, q_raw, q_drawn: [vocab], normalised in double first. Where q_raw(x) == 0 but
// q_drawn(x) > 0 the test treats min(1, p/q_raw) as 1. Equals first_token_distribution(p, q)
// when q_drawn == q_raw.
std::vector<double> first_token_distribution_top_p_on_p_only(const std::vector<float>& p_processed,
                                                             const std::vector<float>& q_raw,
                                                             const std::vector<float>& q_drawn);

}  // namespace faulty
}  // namespace speclab
