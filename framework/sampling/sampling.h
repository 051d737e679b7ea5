// Sampling transform: logits -> probabilities (temperature, top-k, top-p), and sampling.
//
// The same function must be applied to the target's logits (p) and to the drafter's logits
// (q): rejection sampling is lossless only with respect to the distribution it is given, so
// the drafter's q has to be exactly the distribution its tokens were drawn from (STYLE.md §4).
//
// Semantics follow Hugging Face transformers' logits warpers, applied in the order that
// `generate()` applies them: TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
// (min_tokens_to_keep = 1), then a softmax over the tokens that were kept.
//
// Performance contract (vocab ~ 50k): a few O(V) passes (one exp per surviving token); top-k
// uses a size-k heap (k <= 256) or nth_element; top-p buckets tokens by log-weight and orders
// only the bucket where the cumulative mass crosses top_p. Without top-k every token's weight is
// computed 8 (AVX-512) or 4 (AVX2) lanes of double at a time, with exp by a degree-13
// polynomial (within about 1 ulp of double): a 49,152-token row takes about 35 us, 64 with top-p
// (2026-11-27, Zen 5; 395 and 418 us with std::exp per token). The only heap memory is the
// output vector and per-thread scratch buffers reused across calls (they grow once to the
// largest vocab seen on that thread).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/rng.h"

namespace speclab {

// One section of the YAML config ("sampling"); validate() names the key at fault.
struct SamplingOptions {
  double temperature = 0.0;  // 0 = greedy (argmax); otherwise > 0 and finite
  int64_t top_k = 0;         // 0 = off; otherwise keep the top_k largest logits (ties kept; 1: the first maximum)
  double top_p = 1.0;        // 1 = off; otherwise in (0, 1): nucleus sampling
  uint64_t seed = 0;         // seed of the Rng that the engine creates for a run

  bool greedy() const { return temperature == 0.0; }
  // Every token is a function of the context: greedy, or top_k = 1 (one token kept at every
  // position, whatever the draws). Such runs decode the same tokens on every repeat, and a
  // speculative run the AR run's. (A top_p that keeps one token is data-dependent: not counted.)
  bool deterministic() const { return greedy() || top_k == 1; }

  // Throws Error(kConfig, "expected ..., found ...", "sampling", <key>) when temperature is
  // negative, NaN or infinite, top_p is not in (0, 1] (or NaN), or top_k is negative.
  void validate() const;
};

// Cumulative masses within this distance of top_p count as having reached it. Without it the
// nucleus boundary (e.g. probs {0.5, 0.3, ...} with top_p = 0.8) would be decided by the float
// rounding of the logits rather than by the exact arithmetic of HF's rule.
constexpr double kTopPTolerance = 1e-6;

// logits: [vocab] -> probs: [vocab] (resized to vocab; its old contents are ignored).
//
// Greedy (temperature 0) and top_k = 1: one-hot at argmax(logits), the first maximum (top_k = 1
// keeps no tie, unlike larger k, so that it is deterministic()); the rest is irrelevant.
// Otherwise, in this order:
//   1. temperature: z = logits / temperature;
//   2. top-k (top_k > 0 and < vocab): keep the tokens whose logit is >= the k-th largest
//      logit, so ties at the boundary are all kept (HF TopKLogitsWarper);
//   3. top-p (top_p < 1): over softmax(z) restricted to the top-k survivors, sorted by
//      probability descending, keep the smallest prefix whose cumulative probability reaches
//      top_p (always at least one token). Equivalently HF TopPLogitsWarper: drop a token when
//      the ascending cumulative sum up to and including it is <= 1 - top_p. HF leaves the
//      order of equal probabilities to torch.sort, which is not stable by default; here the
//      lower token id ranks first (as in argmax), so results are deterministic;
//   4. softmax over the kept tokens, accumulated in double; every other token gets exactly 0.
// Logits of -inf are allowed (probability 0). Throws Error(kBadInput, field "logits") on a
// NaN or +inf logit, on vocab <= 0, or when every logit is -inf; Error(kConfig) as validate().
void logits_to_probs(const float* logits, int64_t vocab, const SamplingOptions& opts,
                     std::vector<float>& probs);
// The same with the vector width of the no-top-k path capped (16: AVX-512, 8: AVX2, 1: scalar,
// std::exp per token), so tests can run every path this CPU has; the default above is the
// widest. The AVX-512 and AVX2 paths give the same bits; the scalar one agrees to float rounding.
void logits_to_probs(const float* logits, int64_t vocab, const SamplingOptions& opts, std::vector<float>& probs,
                     int max_lanes);

// The plain softmax probability of one token, exp(l[token] - max) / sum_i exp(l[i] - max): the
// value logits_to_probs gives at temperature 1 without top-k/top-p, for one token, without the
// [vocab] output. logits: [vocab]. For logging p(x) under greedy decoding, where p is not used
// to decide anything. Relative error < 1e-6 (exp by a degree-7 polynomial, sums in double);
// measured cost in docs/performance.md.
// Throws Error(kBadInput, field "logits") as logits_to_probs does, and on a token outside
// [0, vocab).
double softmax_prob(const float* logits, int64_t vocab, int32_t token);
// The same with the vector width capped (16: AVX-512, 8: AVX2, 1: scalar), so tests can run
// every path this CPU has; the default above is the widest.
double softmax_prob(const float* logits, int64_t vocab, int32_t token, int max_lanes);

// Checks one row of logits as logits_to_probs does, without computing anything from it: throws
// Error(kBadInput, field "logits") on a NaN or +inf logit or a row with no finite logit (and on
// vocab <= 0 or a null row). logits: [vocab]. For rows a check reads before any sampling does.
void check_logits(const float* logits, int64_t vocab);

// Index of the largest logit; the lowest index wins ties. logits: [vocab].
// Throws Error(kBadInput, field "logits") on vocab <= 0 or a NaN logit.
int32_t argmax(const float* logits, int64_t vocab);

// Inverse-CDF sampling from probs: [n] with exactly one rng.uniform() draw: returns the first
// index i with cumsum(probs)[i] > u * sum(probs) (double accumulation). A token of
// probability 0 is never returned. probs need not sum exactly to 1 (they are float).
// Throws Error(kBadInput, field "probs") when n <= 0, a value is negative or NaN, or the sum
// is not positive and finite.
int32_t sample(const float* probs, int64_t n, Rng& rng);
int32_t sample(const std::vector<float>& probs, Rng& rng);

// Picks the next token from one row of logits: argmax when greedy (no draw), else one draw from
// the processed distribution (logits_to_probs, then sample). logits: [vocab] float32.
int32_t pick_token(const float* logits, int64_t vocab, const SamplingOptions& sampling, Rng& rng,
                   std::vector<float>& scratch_probs);

}  // namespace speclab
