// DraftLengthPolicy — how many tokens to draft next step; usable with any drafter.
//   constant:  always gamma
//   heuristic: HF's "heuristic" schedule for num_assistant_tokens: +2 after a step where every
//              draft token was accepted, -1 (not below 1) otherwise; capped at max.
//   cost:      the gamma in [0, num_speculative_tokens] with the most expected tokens per unit
//              of time (best_draft_length below), from costs measured in this sequence's own
//              steps: seconds of a target forward of n rows, for every n seen, and of propose()
//              per drafted token. gamma 0 is a plain AR step, so on hardware where verifying
//              costs more than the drafts earn (a CPU: each extra row is arithmetic) the schedule
//              falls back to AR instead of running slower than it.
// The confidence threshold (stop drafting early when the drafter's top probability falls
// below it, from draft position confidence_from_token on) is applied inside propose() through
// DraftContext::min_confidence and confidence_applies().
//
// `cost` and reproducibility: the draft lengths follow wall-clock timings, so under sampling
// the same seed can give different (equally distributed) samples from run to run; greedy output
// is AR's whatever the lengths are.
#pragma once

#include <vector>

#include "framework/draft/drafter_options.h"

namespace speclab {

// Leviathan, Kalman & Matias 2023, eq. (1): the expected number of tokens one step emits with
// gamma drafts whose tokens are each accepted with probability alpha, independently:
// (1 - alpha^(gamma + 1)) / (1 - alpha); gamma + 1 at alpha = 1. alpha in [0, 1], gamma >= 0.
double expected_tokens_per_step(double alpha, int gamma);

// The gamma in [0, max_gamma] that maximises expected_tokens_per_step(alpha, gamma) /
// (verify_cost[gamma] + gamma * draft_cost): Leviathan et al. section 3.5's choice of gamma,
// with the verification pass's measured cost in place of their assumption that it costs one
// step (as in hardware-aware tree sizing, Chen et al. 2024, "Sequoia"). verify_cost[g]: the time
// of one target forward of g + 1 rows in decode steps (verify_cost[0] = 1); size > max_gamma.
// draft_cost: the time of one draft token in decode steps. Ties go to the smaller gamma.
int best_draft_length(double alpha, const std::vector<double>& verify_cost, double draft_cost, int max_gamma);

class DraftLengthPolicy {
 public:
  explicit DraftLengthPolicy(const DrafterOptions& o);

  // Drafts to ask for next step (may be 0 under `cost`: an AR step).
  int next() const;

  // After a step: `drafted` tokens proposed, `accepted` kept; `verify_seconds`: the target
  // forward over drafted + 1 rows; `draft_seconds`: propose(). The timings matter to `cost` only.
  void update(int drafted, int accepted, double verify_seconds = 0.0, double draft_seconds = 0.0);

  // `cost`: the acceptance estimate and the cost model next() uses (for reports and tests).
  double alpha_estimate() const { return s_ / (s_ + f_); }
  std::vector<double> verify_cost_estimate() const;  // [gamma + 1], [0] = 1; empty before a one-row step
  double draft_cost_estimate() const;                 // 0 before a drafted step

  // `cost`: steps in a row at gamma 0 after which one step drafts a single token, so that the
  // acceptance estimate can recover when drafting would pay again. The wait doubles (up to
  // kProbeAfterMax) after each probe that leaves gamma at 0, and is reset when gamma leaves 0.
  static constexpr int kProbeAfter = 8;
  static constexpr int kProbeAfterMax = 128;

 private:
  enum class Mode { kConstant, kHeuristic, kCost };
  Mode mode_;
  int k_;
  int max_;
  // cost: exponentially weighted seconds of a forward of n rows (t_[n], seen_[n]) and of one
  // draft token; discounted counts of accepted (s_) and rejected (f_) draft positions.
  std::vector<double> t_;
  std::vector<bool> seen_;
  double draft_s_ = 0.0;
  bool draft_seen_ = false;
  // Prior alpha 0.5, worth eight observations. Worth two, a sequence whose first full-length
  // pass and first probe were rejected read 0.23 and stayed at gamma 0 (the probe wait doubling
  // with each failed probe) although its acceptance paid at gamma 1: EAGLE's head on MT-bench
  // ran 56-65% of its steps at gamma 0. Eight keep one unlucky start from deciding a sequence
  // (`speclab run`, two alternated rounds, 24 MT-bench prompts: EAGLE with schedule cost
  // 1.08-1.10x -> 1.15-1.18x, prompt lookup 1.22-1.25x -> 1.24-1.28x, layer skip 0.96-0.97x
  // either way).
  double s_ = 4.0, f_ = 4.0;
  int idle_ = 0;              // steps since the last one that drafted
  int probe_after_ = kProbeAfter;
};

}  // namespace speclab
