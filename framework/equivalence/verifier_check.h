// Monte-Carlo check of the real verifier: `verify_rejection` (framework/verify/acceptance.h)
// with its real Rng, run many times on real (p, q) rows, every emitted token observed and
// tested against its exact law. Unlike the closed-form analytic check (analytic_check.h,
// which enumerates a copy of the theorem and so equals p whatever the code does), this one
// calls the verifier the engine calls, so a bug in it (the recovered token, the bonus row,
// the uniform comparison, the RNG) changes the counts.
//
// The target law. Real rows (p_r, q_r) from model contexts are placed in a table indexed by
// (position j, class c): the target's next-token distribution at position j is
//   p(· | y_0..y_{j−1}) = P[j][c],  c = y_{j−1} mod C  (c = 0 at j = 0),
// and the drafter proposes from Q[j][c] with the same rule applied to its own draft prefix.
// So the rows depend on the prefix (through the class), as a real model's do, and the exact
// joint law of a generation y_0, y_1, ... is the Markov chain Π_j P[j][c(y_{j−1})](y_j).
//
// One draw is a multi-step generation from position 0: each step drafts k tokens
// x_i ~ Q[s+i][c_i] (c_i from the draft prefix), hands the verifier the k + 1 target rows
// P[s+i][c_i] and the k reported draft rows, emits x_0..x_{n−1} and the recovered or bonus
// token, and the next step starts after them (a rollback of the rejected suffix). Positions
// 0..positions−1 are recorded, so every kind of emitted token (accepted, recovered, bonus) and
// the step after a rejection are observed.
//
// The test. Given the prefix, y_j ~ P[j][c], so for each (j, c) the tokens of the draws that
// reach position j with class c are a multinomial sample of P[j][c] (the draws are
// independent, and which draws fall in (j, c) depends only on earlier positions). Each (j, c)
// gets a one-sample Pearson test (pooling and TV radius of sample_tests.h); this is the
// transition-count test of Anderson & Goodman, "Statistical inference about Markov chains",
// Ann. Math. Statist. 28 (1957), cell by cell. A (j, c) that no draw reaches, or whose pooled
// test has 0 degrees of freedom, tests nothing: it is counted as vacuous, never as a pass.
//
// The reported q may differ from the q the draft was drawn from (QRows below), which is how
// the drafter-side negative controls are modelled.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/core/rng.h"
#include "framework/equivalence/sample_tests.h"
#include "framework/sampling/sampling.h"
#include "framework/verify/acceptance.h"

namespace speclab {

// A verification rule with verify_rejection's signature: the real one, or a faulty one
// (framework/verify/faulty_acceptance.h).
using RejectionRule = std::function<Verdict(const TokenList& draft, const std::vector<std::vector<float>>& p,
                                            const std::vector<std::vector<float>>& q, Rng& rng)>;

// Raw logits of a target and a draft model at the same real context.
struct LogitPair {
  std::vector<float> target;  // [vocab]
  std::vector<float> draft;   // [vocab]
};

// How the draft rows are made from the draft logits: the drafter samples from `drawn` and
// reports `reported` to the verifier. Lossless: both equal the run's sampling transform.
struct DraftTransform {
  SamplingOptions drawn;
  SamplingOptions reported;
};

// One (position, class) entry of the chain, over the compact vocabulary.
struct ChainRow {
  std::vector<float> p;         // [vocab] target distribution
  std::vector<float> q_drawn;   // [vocab] what the draft token is drawn from
  std::vector<float> q_report;  // [vocab] what the verifier is handed
};

struct VerifierChain {
  int positions = 0;                // recorded positions per draw
  int table_positions = 0;          // rows exist for positions [0, table_positions)
  int classes = 0;                  // C
  int64_t vocab = 0;                // compact vocabulary: the union of every row's support
  std::vector<Token> token_ids;     // [vocab] compact index -> model token id
  std::vector<ChainRow> rows;       // [table_positions * classes]
  const ChainRow& row(int position, int cls) const { return rows[static_cast<size_t>(position * classes + cls)]; }
};

// Builds the chain for draft length k: positions recorded, table_positions = positions + k
// (a step that starts at the last recorded position still drafts k tokens), entry (j, c) made
// from pairs[(j·C + c) mod pairs.size()], p with `target` sampling, q with `draft`. The
// vocabulary is compacted to the union of the supports (tokens of probability 0 in every row
// are never drawn, emitted or used by the verifier). Throws Error(kBadInput) on no pairs,
// logits of different sizes, positions < 1, k < 1, classes < 1, or a reported q that is 0
// where the drawn q is not (the verifier would refuse that draft).
VerifierChain make_verifier_chain(const std::vector<LogitPair>& pairs, const SamplingOptions& target,
                                  const DraftTransform& draft, int positions, int k, int classes);

struct VerifierCounts {
  int k = 0;
  int64_t n = 0;                   // draws
  std::vector<int64_t> counts;     // [positions][classes][vocab]
  int64_t drafted = 0, accepted = 0, steps = 0;
  int64_t recovered = 0, bonus = 0;  // emitted at recorded positions
};

// n draws with draft length k (1 <= k <= table_positions − positions), the verifier stream
// Rng::stream(seed, 0) and the drafter stream Rng::stream(seed, 1). Throws Error(kBadInput)
// on n < 1 or k out of range; the rule's own errors pass through.
VerifierCounts run_verifier_chain(const VerifierChain& chain, int k, int64_t n, uint64_t seed,
                                  const RejectionRule& rule);

struct VerifierCellTest {
  int position = 0, cls = 0;
  TestStatistics stats;   // stats.n_a == 0: unreached
};

struct VerifierVerdict {
  std::vector<VerifierCellTest> tests;  // one per reachable (position, class): (0, 0), then
                                        // every class at positions >= 1
  int64_t tested = 0;     // tests with n > 0 and dof > 0
  int64_t vacuous = 0;    // the others: they test nothing
  double min_p = 1.0;
  int worst_position = -1, worst_class = -1;
  double p_bonferroni = 1.0;  // min(1, min_p · tested): the chain's p-value; 1 if nothing tested
  double max_tv = 0.0;        // largest empirical TV of a tested (j, c)
  double min_radius = 0.0, max_radius = 0.0;  // TV radii of the tested (j, c) at delta: the
                                              // smallest TV the test can detect there
};

// The number of reachable (position, class) entries: 1 + (positions − 1)·classes.
inline int64_t reachable_cells(const VerifierChain& c) { return 1 + static_cast<int64_t>(c.positions - 1) * c.classes; }

// Tests the counts against the chain's rows, each (j, c) at TV confidence delta (pass
// alpha / (number of tests in the caller's family) so that the radius accounts for them).
VerifierVerdict test_verifier_chain(const VerifierChain& chain, const VerifierCounts& counts, double delta,
                                    double min_expected = 5.0);

// The negative controls of this check: name -> (rule, draft transform from the run's sampling).
//   replacement_from_p: faulty::verify_replacement_from_p;
//   bonus_from_row_k-1: faulty::verify_bonus_from_previous_row;
//   always_accept:      faulty::verify_always_accept;
//   q_at_temperature_1: the drafter samples at the run's temperature, the verifier is handed q
//                       computed at temperature 1 (the warper skipped; HF transformers #32867);
//                       not applicable at temperature 1;
//   q_drawn_top_k:      the drafter samples from its top-k (renormalised) q, the verifier is
//                       handed the full q (a drafter whose own sampler truncates but reports
//                       the untruncated distribution; a truncated, unnormalised q would be
//                       refused by the host's q validation, draft_block_check.h);
//                       not applicable when the run's top_k is already <= that k.
struct VerifierControl {
  std::string name;
  RejectionRule rule;
  DraftTransform draft;
  bool applicable = true;
  std::string note;  // why not applicable
};
std::vector<VerifierControl> verifier_controls(const SamplingOptions& sampling, int64_t drawn_top_k = 10);

// One lossless cell of the sweep (draft, sampling setting, k) as `speclab check` reports it.
struct VerifierCellRow {
  std::string draft;          // label of the draft model whose q rows were used
  SamplingOptions sampling;
  int k = 0;
  int64_t n = 0, vocab = 0, cells = 0;  // draws, compact vocab, reachable (position, class) entries
  int64_t recovered = 0, bonus = 0;     // emitted at recorded positions
  double acceptance = 0.0;              // accepted / drafted
  VerifierVerdict verdict;              // verdict.tests left empty (the summary is kept)
  double holm_p = 1.0;                  // set by the caller's Holm step over the family
};

// One negative control at one (draft, sampling setting, k): the smallest N on the grid
// 1000, 2000, ... (< n_max) and n_max at which min p · tests < control_alpha.
struct VerifierControlRow {
  std::string draft, control, note;
  SamplingOptions sampling;
  int k = 0;
  bool applicable = false, caught = false;
  int64_t caught_n = -1;      // -1: not caught at n_max
  // At caught_n, or at n_max when not caught; NaN where the control did not run (not applicable).
  double p_bonferroni = std::numeric_limits<double>::quiet_NaN();
  // Mean TV(q drawn, q reported) over the chain's rows (0 for the verifier-side controls): how
  // large a drafter-side bug is here. NaN where it was not computed (not applicable before the
  // chain was built: temperature 1, a run's top_k at or below the control's).
  double q_tv = std::numeric_limits<double>::quiet_NaN();
};
// A drafter-side control whose q_tv is below this changes (nearly) nothing on these rows: it is
// reported as not applicable, with its q_tv, instead of counted as missed.
constexpr double kMinControlQTv = 0.015;
VerifierControlRow run_verifier_control(const std::vector<LogitPair>& pairs, const std::string& draft,
                                        const SamplingOptions& sampling, const VerifierControl& control, int k,
                                        int64_t n_max, double control_alpha, uint64_t seed);

// A control whose lossless cell (same draft, setting and draft length) tested nothing has nothing
// to show power against: n/a, with a note, as the engine controls say in such cells (it was
// reported as NOT caught, a power failure; until 2026-12-07). Decided by the cell, not by the
// control's own draws: a faulty rule may move every draw where no test has a degree of freedom,
// and that must stay a miss.
void mark_control_for_cell(VerifierControl& control, const VerifierCellRow& cell);

// The lossless cell: chain (positions k + 2, 2 classes), n draws, tests at TV confidence delta.
VerifierCellRow run_verifier_cell(const std::vector<LogitPair>& pairs, const std::string& draft,
                                  const SamplingOptions& sampling, int k, int64_t n, double delta, uint64_t seed);

// `speclab check` runs the verifier check at a setting without top_k only when the model's vocab is
// at most this (each verification draw walks the compact vocabulary).
constexpr int64_t kMaxVerifierFullVocab = 4096;

// Positions and classes of the chains of the sweep for draft length k.
constexpr int kVerifierClasses = 2;
inline int verifier_positions(int k) { return k + 2; }

}  // namespace speclab
