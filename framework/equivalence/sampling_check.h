// Empirical sampling check: draw many independent continuations of one fixed context with the
// real engines (generate_ar and generate_speculative, end to end) and test that the speculative
// engine's tokens are distributed as the AR engine's and as the exact target distribution.
// Negative controls (deliberately wrong acceptance rules run through the same engine via
// the Session's AcceptanceRule) show that the tests can fail.
//
// What one draw is. A draw runs the engine on the context with its own seed (draw_seed) and
// records the first m emitted tokens. Position 1 is sampled from the prefill logits, before any
// draft exists, in both engines; verification produces positions 2, 3, ... So m = 1 checks the
// shared sampling path (temperature/top-k/top-p, seeding) and verification is exercised from
// m = 2 on; the negative controls can only be caught at m >= 2. A speculative draw is run with
// max_new_tokens = max(m, gamma + 2), so that its first verification step drafts the full gamma
// tokens (the engine never drafts past max_new_tokens), and is stopped as soon as m tokens were
// emitted: the callback throws, which unwinds the engine (its KV sequence is released by RAII)
// without changing any token it already emitted. AR draws use max_new_tokens = m. EOS does not
// stop a draw (ignore_eos), so every draw has m tokens.
//
// Seeds. Draw i of stream s under base seed b uses seed draw_seed(b, s, i) (splitmix64 mixing);
// every subject (AR, speculative, each control) of every cell has its own stream, so samples are
// independent and the whole check is a pure function of the base seed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/spec_decode.h"
#include "framework/equivalence/sample_tests.h"

namespace speclab {

// Negative controls, as acceptance rules for the Session (never used outside the checks).
//   always_accept_rule:    faulty::verify_always_accept — every draft token is kept, so the
//                          output follows q, not p.
//   top_p_on_p_only_rule:  the draft tokens were drawn from q' = the draft logits after the full
//                          transform (top-p included), but verification is handed
//                          q_raw = the same logits processed with top_p = 1, and runs the real
//                          verify_rejection(draft, p, q_raw): biased when top_p < 1. Needs
//                          DraftBlock::logits (model drafters fill it when sampling); throws
//                          Error(kConfig, field "negative_controls") at a step whose draft has
//                          tokens but no logits.
// Mean TV distance between the drawn and the reported q over the draft rows a drafter-side rule saw.
struct QDivergence {
  double tv_sum = 0.0;
  int64_t rows = 0;
  double mean() const { return rows > 0 ? tv_sum / static_cast<double>(rows) : 0.0; }
};
AcceptanceRule always_accept_rule();
AcceptanceRule top_p_on_p_only_rule(std::shared_ptr<QDivergence> divergence = {});
// The realistic bug classes of issue 14, through the engine (framework/verify/faulty_acceptance.h
// and framework/equivalence/verifier_check.h describe each):
//   replacement_from_p_rule:     the recovered token drawn from p_i instead of norm(max(0, p_i − q_i));
//   bonus_from_previous_row_rule: the bonus token drawn from row k − 1 of p instead of row k;
//   residual_unnormalised_rule:  the recovered token drawn from max(0, p_i − q_i) not normalised
//                                (an inverse CDF without the division by the sum);
//   p_row_off_by_one_rule:       draft token i judged against p row i + 1 (logit rows misaligned);
//   q_at_temperature_1_rule:     the draft drawn at the run's temperature, verification handed q
//                                from the draft logits at temperature 1 (same top-k / top-p; the
//                                warper skipped, HF transformers #32867);
//   q_drawn_top_k_rule:          the draft drawn from its top-k (the run's top_k > 0), verification
//                                handed q from the draft logits with top_k = 0 (a drafter whose
//                                sampler truncates but reports the full distribution; reporting a
//                                truncated, unnormalised q instead is refused by the host's q
//                                validation, framework/draft/draft_block_check.h).
//   shared_draws_rule:           the verifier's uniforms are the drafter's: each step the real
//                                rule draws from a copy of the drafter's stream as the step's
//                                proposal began (VerifyInputs::draft_rng_at_propose), so the
//                                uniform that tests draft token i is the one that drew it. The
//                                bug of two generators seeded alike per step (from the seed and
//                                the position, say, or one Philox offset). Needs a drafter that
//                                draws; with one that does not, the verifier replays the same
//                                uniforms at every step, a bug too, but not this one.
// q_drawn_top_k_rule needs DraftBlock::logits and throws as top_p_on_p_only_rule does;
// q_at_temperature_1_rule too, except for a block with q rows and no logits (a sampling plugin),
// whose rows it reports at temperature 1 over their own support (q^T renormalised; engine_controls.h).
// The drafter-side rules (top_p_on_p_only, q_at_temperature_1, q_drawn_top_k) add, when given a
// QDivergence, the TV distance between the q each draft token was drawn from and the q handed to
// the verifier, per draft row: how large the planted bug is on the rows the engine visited.
AcceptanceRule replacement_from_p_rule();
AcceptanceRule bonus_from_previous_row_rule();
AcceptanceRule residual_unnormalised_rule();
AcceptanceRule p_row_off_by_one_rule();
AcceptanceRule shared_draws_rule();
AcceptanceRule q_at_temperature_1_rule(std::shared_ptr<QDivergence> divergence = {});
AcceptanceRule q_drawn_top_k_rule(std::shared_ptr<QDivergence> divergence = {});

// A draw that stopped early (EOS or a stop string with DrawPlan::stop_active) is padded with
// this token up to m: "ended" is one more category of the two-sample tests.
constexpr Token kEndedDraw = -1;

uint64_t draw_seed(uint64_t base, uint64_t stream, int64_t index);

struct DrawPlan {
  TokenList context;          // prompt ids (BOS included when the model wants one)
  SamplingOptions sampling;   // temperature > 0; its seed is ignored (per-draw seeds)
  int m = 2;                  // tokens recorded per draw, >= 1
  int64_t n = 0;              // draws, >= 1
  uint64_t seed_base = 0;
  uint64_t stream = 0;
  int64_t first = 0;          // draw indices [first, first + n): a later chunk of the same stream
  // EOS and `stop` strings end a draw (padded with kEndedDraw); false: ignore_eos, no stop strings
  // (every draw has m tokens). Only the two-sample tests accept padded draws.
  bool stop_active = false;
  std::vector<std::string> stop;
  void validate() const;      // Error(kConfig) naming the field (temperature 0 is refused)
};

struct Draws {
  int m = 0;
  std::vector<Token> tokens;  // [n * m]: draw i's tokens are [i*m, (i+1)*m)
  int64_t drafted = 0;        // draft tokens proposed over all draws' steps (speculative)
  int64_t accepted = 0;       // of them accepted
  int64_t steps = 0;          // verification steps
  double seconds = 0.0;
  int64_t n() const { return m > 0 ? static_cast<int64_t>(tokens.size()) / m : 0; }
  void append(const Draws& more);  // the draws of a later chunk (same m) after these
  Token at(int64_t draw, int pos) const { return tokens[static_cast<size_t>(draw * m + pos)]; }
};

Draws draw_ar(const Model& target, const TokenDecoder& tokenizer, const DrawPlan& plan, KvTarget kv);
// `drafter` was built for `kv`'s manager with DrafterEnv::target == the model behind `target`
// (target may be a PrefillMemo around it). An empty rule means the lossless rule.
Draws draw_speculative(const Model& target, const TokenDecoder& tokenizer, const DrawPlan& plan, Drafter& drafter,
                       const DrafterOptions& dopts, KvTarget kv, const AcceptanceRule& rule = {});

// Raw target logits after the context and after context + [t0], computed as the AR engine
// computes them (the context prefilled once into a private cache, then one token at a time).
class NextTokenOracle {
 public:
  NextTokenOracle(const Model& target, TokenList context);
  ~NextTokenOracle();
  NextTokenOracle(const NextTokenOracle&) = delete;
  NextTokenOracle& operator=(const NextTokenOracle&) = delete;
  const std::vector<float>& first() const { return first_; }  // [vocab]
  const std::vector<float>& second(Token t0);                   // [vocab], memoized per t0
  int64_t vocab() const;

 private:
  struct Impl;
  Impl* impl_;
  std::vector<float> first_;
  std::map<Token, std::vector<float>> second_;
};

// Exact distributions of position 1 and of positions (1, 2) under `sampling`:
//   p1(t0) = processed target distribution after the context;
//   P(t0, t1) = p1(t0) · p2(t1 | t0) for t0 in S, the tokens with n · p1(t0) >= min_expected
//   (cells below that are pooled by the tests anyway), at most max_prefixes of them (largest
//   p1 first); the mass of the tokens outside S is one cell of known probability 1 − covered.
struct ExactReference {
  std::vector<double> p1;                // [vocab]
  std::vector<Token> prefixes;           // S
  std::vector<std::vector<double>> p2;   // [|S|][vocab]
  double covered = 0.0;                  // Σ_{t0 in S} p1(t0)
  bool has_joint = false;                // p2 computed
};
ExactReference exact_reference(NextTokenOracle& oracle, const SamplingOptions& sampling, int64_t n,
                               double min_expected, int64_t max_prefixes, bool joint);

// One statistical test of one subject in one cell.
struct CellTest {
  std::string subject;  // "ar", "speculative", "always_accept", "top_p_on_p_only"
  std::string test;     // "joint" (first m tokens, two-sample vs AR), "marginal" (position m,
                        // two-sample vs AR), "exact" (m = 1: position 1 vs p1; m = 2: positions
                        // 1-2 vs p1 · p2, one-sample)
  int m = 0;
  TestStatistics stats;
};

// Two-sample tests of the first n draws of `subject` against the first n of `ar`: the joint of
// the first m tokens for each m in `joints`, and the marginal of each position in `marginals`.
std::vector<CellTest> compare_with_ar(const Draws& ar, const Draws& subject, const std::string& name,
                                      const std::vector<int>& joints, const std::vector<int>& marginals, int64_t n,
                                      double min_expected, double delta);
// Whether some verified position (2 .. m, 1-based) of `draws` varies given the tokens before it:
// a prefix after which at least two different tokens each appear `min_count` times or more. When
// none does, every token after the first is (nearly) a function of the first: the degrees of
// freedom of the tests at positions >= 2 then come from position 1, the prefill's sample, and
// those tests cannot see verification (a cell that tests nothing; equivalence_report.h).
bool verified_positions_vary(const Draws& draws, int64_t min_count);
// One-sample tests of the first n draws against the exact distributions: position 1 always, the
// joint of positions 1-2 when ref.has_joint and the draws have m >= 2.
std::vector<CellTest> compare_with_exact(const Draws& subject, const ExactReference& ref, const std::string& name,
                                         int64_t n, double min_expected, double delta);

// Smallest draw count at which a negative control is caught: on the grid start, 2·start, 4·start,
// ... (< n_max) and n_max, the tests that `run_tests(n)` returns on the first n draws are run
// and the control counts as caught when min p · (number of tests) < control_alpha (Bonferroni
// over the cell's tests). Returns one point per grid value, in order.
struct PowerPoint {
  int64_t n = 0;
  double min_p = 1.0;
  int64_t tests = 0;
  bool caught = false;
};
std::vector<PowerPoint> power_curve(int64_t start, int64_t n_max, double control_alpha,
                                    const std::function<std::vector<CellTest>(int64_t)>& run_tests);

// Counts of each token at `position` (0-based) over the first n draws: token -> count.
std::map<Token, int64_t> position_counts(const Draws& d, int position, int64_t n);

}  // namespace speclab
