// Acceptance math of speculative decoding, as pure functions.
//
// References:
//   Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding",
//     ICML 2023, arXiv:2211.17192, Algorithm 1 (speculative sampling);
//   Chen, Borgeaud, Irving, Lespiau, Sifre & Jumper, "Accelerating Large Language Model
//     Decoding with Speculative Sampling", arXiv:2302.01318, Algorithm 2 (modified rejection
//     sampling).
//
// A drafter proposes k tokens draft[0..k) (each drawn from its distribution q_i, or chosen
// deterministically); the target scores all of them in one pass, giving k+1 distributions
// p_0..p_k, where p_i is the target distribution of the token that follows draft[0..i).
// Terms:
//   accepted  — draft[i] kept: with probability min(1, p_i(x) / q_i(x)) (rejection mode), or
//               when it equals argmax p_i (greedy mode);
//   recovered — at the first rejected position i, a token drawn from
//               norm(max(0, p_i − q_i)) (greedy: argmax p_i) replaces draft[i];
//   bonus     — when all k drafts are accepted, a token drawn from p_k (greedy: argmax p_k).
// Each step therefore emits n_accepted + 1 tokens: draft[0..n_accepted) and next_token.
// Rejection sampling makes every emitted token distributed exactly as p (lossless) for ANY
// q, provided q is the distribution the draft token was actually drawn from. A deterministic
// drafter (n-gram, greedy model drafter) passes no q: q is one-hot at its token, still
// lossless (accept with probability p(x); recovered from p with x removed).
//
// p and q must come from the same sampling transform (framework/sampling/sampling.h).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/rng.h"
#include "framework/core/types.h"

namespace speclab {

struct Verdict {
  int32_t n_accepted = 0;            // accepted draft tokens, in [0, k]
  Token next_token = -1;             // the recovered (bonus = false) or bonus token; always emitted
  bool bonus = false;                // true when all k drafts were accepted
  std::vector<double> accept_prob;   // [n_examined] min(1, p_i(x_i) / q_i(x_i)) per examined
                                     // draft position: n_accepted + 1 entries on a rejection,
                                     // k entries when all were accepted
};

// The two pieces of the rejection rule (Leviathan et al. Algorithm 1; Chen et al. Algorithm 2),
// which verify_rejection applies and first_token_distribution enumerates, so that the exact
// (analytic) check of a step tests the verifier's own rule:
//   acceptance_probability: draft token x with target probability p_x and draft probability
//     q_x > 0 is kept with probability min(1, p_x / q_x);
//   residual_weight: on a rejection the recovered token y is drawn with weight max(0, p_y − q_y)
//     (the residual, normalised by its sum).
double acceptance_probability(double p_x, double q_x);
double residual_weight(double p_y, double q_y);

// Greedy verification. draft: [k] tokens; target_logits: [k + 1, vocab] row-major, row i the
// target's logits for the token after draft[0..i). Accepts draft[i] while it equals
// argmax(row i) (lowest index wins ties); next_token is argmax at the first mismatch, or of
// row k (bonus). accept_prob holds 1.0 per accepted position and 0.0 for the rejected one.
// Throws Error(kBadInput) on vocab <= 0, a null pointer with k >= 0, a draft token outside
// [0, vocab), or a NaN logit in a row it takes the argmax of (rows after the first mismatch are
// not read; the engine's logits are checked before they get here).
Verdict verify_greedy(const TokenList& draft, const float* target_logits, int64_t vocab);

// Rejection-sampling verification (Leviathan et al. Algorithm 1; Chen et al. Algorithm 2).
// draft: [k]; target_probs: [k + 1][vocab] processed p rows; draft_probs: [k][vocab]
// processed q rows, or empty for a deterministic drafter (q one-hot at draft[i]).
// Random draws: exactly one rng.uniform() per examined position (accept iff u < min(1, p/q)),
// then exactly one more for the recovered or bonus token (inverse CDF), so a step makes
// n_examined + 1 draws. The recovered token is drawn from norm(max(0, p_i − q_i)); if that
// residual is all zero (only when p_i == q_i up to rounding) it is drawn from p_i.
// Throws Error(kBadInput) on row-count or row-length mismatches, empty rows, a draft token
// outside [0, vocab), a negative or NaN probability among the values it reads (p_i and q_i at
// draft[i] for an accepted position; every entry of the row it draws the recovered or bonus
// token from; rows after a rejection are not read), or q_i(draft[i]) == 0 (the token cannot
// have been drawn from q_i).
Verdict verify_rejection(const TokenList& draft, const std::vector<std::vector<float>>& target_probs,
                         const std::vector<std::vector<float>>& draft_probs, Rng& rng);

// Checks the shapes and token ids that verify_rejection requires (documented above) and
// returns vocab. Exposed so that callers and the negative controls validate identically.
int64_t check_rejection_inputs(const TokenList& draft,
                               const std::vector<std::vector<float>>& target_probs,
                               const std::vector<std::vector<float>>& draft_probs);

// Exact distribution of the token emitted at the first position of one verification step
// with one draft token x ~ q, by enumerating x with the verifier's own acceptance_probability
// and residual_weight:
//   P(out = y) = q(y)·min(1, p(y)/q(y)) + (Σ_x q(x)·(1 − min(1, p(x)/q(x)))) · residual(y),
//   residual = norm(max(0, p − q)) (p itself if that is all zero).
// p and q are first normalised in double (float rows sum to 1 only up to rounding), so the
// result equals p / Σp up to double rounding; a one-hot q models a deterministic drafter.
// p, q: [vocab]. Throws Error(kBadInput) on size mismatch, empty input, negative/NaN values
// or a zero sum.
std::vector<double> first_token_distribution(const std::vector<float>& p, const std::vector<float>& q);

}  // namespace speclab
