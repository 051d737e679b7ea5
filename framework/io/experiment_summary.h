// Experiment summary — acceptance, accepted length, cost ratio and speedups per (sweep point,
// drafter), overall and per prompt category, computed from the recorded prompt-runs alone (so
// a resumed experiment summarises exactly like an uninterrupted one). Torch-free, pure.
//
// Definitions (docs/hdf5-schema.md, "summary"):
//   alpha     per-token acceptance probability, the alpha of Leviathan et al. 2023
//             (arXiv:2211.17192, §3.1): accepted draft tokens / examined draft positions, where a
//             step that drafted k tokens and kept n examined min(n + 1, k) positions (the
//             positions after the first rejection are never examined). Under the paper's i.i.d.
//             model this is the maximum-likelihood estimate of alpha. 95% Wilson score interval
//             (Wilson 1927) over the examined positions as Bernoulli trials. alpha and its
//             interval count the runs of independent_trials() only: greedy repeats of a (point,
//             prompt, method) decode the same tokens, so they are not new trials (until
//             2026-11-29 every repeat counted, and the interval narrowed with `repeats` alone).
//             The accepted / examined columns count every run.
//   alpha[i]  the same, conditional on reaching draft position i (0-based): trials = steps with
//             k > i and n >= i, successes = steps with n > i (independent_trials() runs only).
//   tau       mean accepted length: tokens per verification forward, mean of (n + 1) over the
//             steps (SpecResult::mean_accepted_length): what the verification kept, also on a
//             run's last step when EOS or a stop string cut some of them from the output.
//   c         cost ratio: (draft seconds / drafted tokens) / (seconds per AR decode forward),
//             the AR time per token being the ar runs' decode_seconds / (target_forwards - turns).
//   speedup   measured, decode phase, per decoded token: [sum of ar (wall - prefill) seconds /
//             sum of ar (n_generated - turns)] / [the same sums of the speculative runs], over the
//             (prompt, repeat) pairs that both methods completed (each turn's first token comes
//             from its prefill; one turn but for a conversation, RunRecord::turns). Per token because sampled pairs stop at EOS at different lengths (equal in
//             expectation, not per pair; until 2026-12-05 a ratio of total times, which counted
//             the difference as speed). NaN when either side decoded nothing. Prefill is prompt processing: the target's forward over the prompt (the
//             same in both methods) and, for a draft model, its own prefill of the prompt in the
//             drafter's begin() (as llama.cpp's speculative example counts the draft's prompt in
//             its encode time). It is outside what speculation (and the prediction, a per-token
//             formula) is about; end-to-end ratios follow from /runs wall_seconds.
//   predicted Leviathan et al. eq. (1) / Theorem 3.8: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)),
//             evaluated as (sum_{i=0..gamma} alpha^i) / (gamma c + 1), which is exact at alpha = 1,
//             over the draft lengths the steps ran (leviathan_speedup_mixed below: gamma on every
//             step only where every step drafted gamma).
//   efficiency = speedup / predicted.
// Undefined quantities (no trials, no drafted tokens, no matching ar run) are NaN.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "framework/io/experiment_records.h"

namespace speclab {

// Two-sided 95% standard normal quantile.
constexpr double kZ95 = 1.959963984540054;

struct Proportion {
  int64_t successes = 0;
  int64_t trials = 0;
  double rate = 0.0;  // successes / trials (NaN when trials == 0)
  double lo = 0.0;    // Wilson score interval (NaN when trials == 0)
  double hi = 0.0;
};

// Wilson score interval for a binomial proportion. Throws Error(kBadInput) when successes < 0,
// trials < 0, successes > trials or z <= 0.
Proportion wilson_interval(int64_t successes, int64_t trials, double z = kZ95);

// Whether a run's steps are acceptance trials of their own: every sampled run (each repeat draws
// from its own seed, derived_seed() in framework/core/rng.h), and repeat 0 of a greedy one (greedy repeats are the same
// decoding again, there for timing). RunRecord::greedy is SamplingOptions::deterministic():
// temperature 0, or top_k 1 (until 2026-12-05 temperature 0 only, and top_k 1 repeats counted).
inline bool independent_trials(const RunRecord& r) { return !(r.greedy && r.key.repeat > 0); }

// Leviathan et al.'s expected walltime improvement factor for acceptance rate alpha in [0, 1],
// gamma >= 0 draft tokens per step and cost ratio c >= 0. NaN in -> NaN out. Throws
// Error(kBadInput) for values outside those ranges.
double leviathan_speedup(double alpha, int64_t gamma, double c);

// The same expectation for steps that draft different numbers of tokens (a draft-length schedule,
// a confidence threshold that stops drafting early): steps_by_gamma[k] steps drafted k tokens,
// each drafted token accepted with probability alpha as in Leviathan et al. (2023), section 3.
// Expected tokens over expected time, in AR decode steps:
//   sum_k n_k (1 + alpha + ... + alpha^k) / sum_k n_k (k c + 1).
// Equals leviathan_speedup(alpha, g, c) when every step drafted g tokens; NaN when there are no
// steps. Throws as leviathan_speedup, and Error(kBadInput) for a negative count.
double leviathan_speedup_mixed(double alpha, const std::vector<int64_t>& steps_by_gamma, double c);

struct PositionSummary {
  int64_t pos = 0;  // 0-based draft position
  Proportion alpha;
};

struct MethodSummary {
  int64_t point = 0;
  std::string category;  // "" = all prompts
  std::string method;    // drafter label
  std::string drafter;   // drafter name
  int64_t gamma = 0;
  int64_t n_runs = 0;    // speculative prompt-runs summarised
  int64_t n_steps = 0, drafted = 0, accepted = 0, examined = 0;  // over every run
  Proportion alpha;  // over the runs of independent_trials(): greedy repeats 1.. are left out
  double accepted_fraction = 0.0;  // accepted / drafted
  double mean_accept_prob = 0.0;   // mean of min(1, p/q) over examined positions (expected alpha)
  double tau = 0.0;
  double draft_seconds_per_token = 0.0, ar_seconds_per_token = 0.0, cost_ratio = 0.0;
  double spec_wall_seconds = 0.0, ar_wall_seconds = 0.0;  // over the matched (prompt, repeat) pairs
  int64_t spec_decode_tokens = 0, ar_decode_tokens = 0;   // the same pairs' n_generated - turns (decoded after the prefills')
  double speedup = 0.0, predicted_speedup = 0.0, efficiency = 0.0;
  // Time breakdown of the speculative runs (sums, seconds).
  double draft_seconds = 0.0, verify_seconds = 0.0, accept_seconds = 0.0, kv_seconds = 0.0, other_seconds = 0.0;
  int64_t lossless_checked = 0, lossless_failed = 0;
  int8_t lossless = -1;  // 1 all checked runs identical to ar, 0 some differ, -1 none checked
  std::vector<PositionSummary> positions;  // [max drafted]
};

struct ExperimentSummary {
  std::vector<MethodSummary> overall;      // one per (point, drafter), points then methods in order
  std::vector<MethodSummary> by_category;  // one per (point, drafter, category), categories sorted
};

ExperimentSummary summarize(const ExperimentData& data);

// The same summary built one prompt-run at a time, in bounded memory: what `speclab run` keeps
// while it records, so that the end of a sweep of 10^5 prompt-runs does not read them all back
// (docs/hdf5-schema.md). add() takes runs in run_id order (summarize() feeds data.runs); a
// speculative run whose ar run comes later is paired when it comes. Keeps per (point, method,
// category) sums, and per ar run 4 numbers.
class SummaryBuilder {
 public:
  // methods: ExperimentData::methods ("ar" first, then the drafter labels).
  explicit SummaryBuilder(std::vector<std::string> methods);
  ~SummaryBuilder();
  void add(const RunRecord& run);
  // points: ExperimentData::points (points without runs give no rows).
  ExperimentSummary finish(const std::vector<PointRecord>& points) const;

  struct Acc;  // the sums of one (point, method[, category]) (experiment_summary.cpp)

 private:
  struct ArRun {
    double decode_wall = 0.0, decode_seconds = 0.0;  // wall - prefill; decode_seconds
    int64_t forwards = 0;                            // target_forwards - turns (>= 0)
    int64_t decode_tokens = 0;                       // n_generated - turns (>= 0)
  };
  struct Pending {  // a speculative run waiting for its ar run
    std::vector<Acc*> accs;
    double decode_wall = 0.0;
    int64_t decode_tokens = 0;
  };
  using Group = std::tuple<int64_t, int64_t, int64_t>;  // point, prompt, repeat
  void pair(const std::vector<Acc*>& accs, double spec_decode_wall, int64_t spec_decode_tokens, const ArRun& ar);

  std::vector<std::string> methods_;
  std::set<int64_t> points_;
  std::set<std::string> categories_;
  // (point, method, 0, "") overall; (point, method, 1, category) by category.
  std::map<std::tuple<int64_t, std::string, int, std::string>, std::unique_ptr<Acc>> accs_;
  std::map<Group, ArRun> ar_;
  std::map<Group, std::vector<Pending>> pending_;
};

// A summary table as aligned text, one row per entry of `rows` (summary.overall or
// summary.by_category), columns: point, [category,] drafter, gamma, alpha [95% CI], tau, c,
// speedup, predicted, efficiency, lossless. The category column appears when a row has one.
// Numbers use fixed precision (alpha and tau 3 decimals) so the table can be parsed back.
std::string format_summary_table(const std::vector<MethodSummary>& rows, const std::vector<PointRecord>& points);

}  // namespace speclab
