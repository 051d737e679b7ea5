// The report of `speclab check` (experiments/app/equivalence_runner.h runs it): the rows of every
// check, the verdict policy (validate_equivalence_config, finalize_sampling_verdict) and the
// plain-text table. Pure data and functions; docs/equivalence.md describes the checks.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/equivalence/analytic_check.h"
#include "framework/equivalence/greedy_check.h"
#include "framework/equivalence/sampling_check.h"
#include "framework/equivalence/verifier_check.h"
#include "framework/io/experiment_config.h"

namespace speclab {


// Below this many draws per subject the sampling check refuses to run (see validate()).
constexpr int64_t kMinEquivalenceSamples = 1000;

// Knobs of the check that are not in the YAML section (defaults are the documented policy).
struct EquivalenceRunOptions {
  double min_expected = 5.0;       // pooling threshold of every chi-square test (Cochran's rule)
  int64_t min_samples = kMinEquivalenceSamples;
  int64_t power_start = 250;       // first N of the power grid (doubling)
  int64_t max_exact_prefixes = 256;  // cap on |S| of the exact joint (sampling_check.h)
  std::vector<int64_t> analytic_offsets = {0, 8, 16};  // context = prompt + this many greedy tokens
  std::function<void(const std::string&)> progress;  // optional progress lines (the CLI prints them)

  // Error(kConfig, field "min_expected" / ...) on a non-positive or non-finite value.
  void validate() const;
};

// Checks that `config` can run the equivalence checks: an `equivalence` section, at least one
// drafter and one prompt, samples >= min_samples when sampling is on (below that the expected
// count N·p reaches 5 only for tokens of probability >= 5/N, so nearly every cell of a joint is
// pooled and the tests compare little more than the top token), contexts <= prompts, and at
// least one position m >= 2 when negative controls are on (position 1 is sampled from the
// prefill before any verification, so no faulty rule can change it), and no conversation (a prompt
// with turns: speclab run answers those, prompt_loader.h). Throws Error(kConfig,
// message, config.source_path, "equivalence.<key>"), or
// "prompts.field" for a conversation.
void validate_equivalence_config(const ExperimentConfig& config, const std::vector<Prompt>& prompts,
                                 const EquivalenceRunOptions& options);

struct GreedyRow {
  int64_t prompt = 0;
  std::string prompt_id, drafter;
  int gamma = 0;
  GreedyCheck check;
};

struct AnalyticRow {
  int64_t prompt = 0;
  std::string prompt_id;
  int64_t context_len = 0;  // tokens in the context
  std::string draft;        // drafter label (a model draft)
  SamplingOptions sampling;
  AnalyticErrors errors;
};

// A (context, temperature, top_p, top_k) group shares one AR sample and one exact reference.
struct SamplingGroup {
  int64_t index = 0;
  int64_t context = 0;      // prompt index
  std::string prompt_id;
  SamplingOptions sampling;
  int64_t n = 0;
  int64_t exact_prefixes = 0;  // |S|
  double exact_covered = 0.0;  // Σ_{S} p1
  double ar_seconds = 0.0;
  // Some verified position of the AR draws varies given the tokens before it
  // (verified_positions_vary, min count min_expected): else every cell of the group tests nothing.
  bool verified_positions_vary = true;
};

// A control is applicable when it ran, the drafter proposed tokens, and at least one of its tests
// has a degree of freedom (otherwise the target is (nearly) deterministic at every recorded
// position and no acceptance rule can change the tokens).
struct ControlOutcome {
  std::string name;           // engine_control_names()
  bool ran = false;           // its draws were made
  bool applicable = false;
  std::string note;           // why not applicable
  bool caught = false;        // at N
  double min_p = 1.0;         // at N, before the Bonferroni factor
  int64_t tests = 0;
  int64_t power_n = -1;       // smallest grid N at which it is caught (-1: not caught)
  double q_tv = std::numeric_limits<double>::quiet_NaN();  // drafter-side: mean TV(q drawn, q reported)
};

struct SamplingCell {
  int64_t index = 0;
  int64_t group = 0;
  std::string drafter;
  int gamma = 0;
  int64_t n = 0;
  uint64_t seed_base = 0;
  double acceptance_rate = 0.0;  // lossless engine, over all verification steps of the draws; NaN: no draft at all (a failure)
  double spec_seconds = 0.0;
  double min_holm_p = 1.0;       // over the cell's lossless tests
  // The smallest TV distance the cell's lossless tests can detect: the smallest BHC radius of its
  // speculative tests (at delta = alpha / tests of the sweep), NaN when it has none.
  double detectable_tv = std::numeric_limits<double>::quiet_NaN();
  bool pass = true;
  std::vector<ControlOutcome> controls;  // one per EquivalenceReport::control_names, in that order
  // The outcome of the control called `name`, or nullptr when the report has no such control.
  const ControlOutcome* control(const std::string& name) const {
    for (const ControlOutcome& c : controls)
      if (c.name == name) return &c;
    return nullptr;
  }
};

struct TestRow {
  int64_t group = 0;
  int64_t cell = -1;             // -1 for the AR engine's exact tests (per group)
  CellTest test;
  bool in_family = false;        // part of the Holm family: every lossless test (ar, speculative)
  double holm_p = 1.0;           // Holm-adjusted p (family members), else the raw p-value
  bool reject = false;           // holm_p < alpha (family) or p · tests < control_alpha (controls)
};

struct PowerRow {
  int64_t cell = 0;
  std::string control;
  PowerPoint point;
};

// Token frequencies for plots: the most frequent tokens per cell and position.
struct FrequencyRow {
  int64_t cell = 0;
  int position = 0;              // 1-based
  Token token = -1;
  std::string text;              // the token's text (tokenizer)
  int64_t ar = 0, speculative = 0;
  std::vector<int64_t> controls;  // per EquivalenceReport::control_names: counts (-1: not run)
  double exact = 0.0;            // exact probability (position 1; position 2 when S covers all), else NaN
};

struct EquivalenceReport {
  std::string name;
  double alpha = 0.0, control_alpha = 0.0, min_expected = 0.0;
  int64_t samples = 0;
  std::vector<int> positions;
  std::vector<std::string> control_names;  // the sampling check's controls (equivalence.controls)
  bool controls_listed = false;            // named in equivalence.controls (else the default: all of them)
  std::vector<GreedyRow> greedy;
  std::vector<AnalyticRow> analytic;
  std::vector<SamplingGroup> groups;
  std::vector<SamplingCell> cells;
  std::vector<TestRow> tests;
  std::vector<PowerRow> power;
  std::vector<FrequencyRow> frequencies;
  std::vector<VerifierCellRow> verifier;                   // [2b] lossless cells of the verifier check
  std::vector<VerifierControlRow> verifier_controls;       // [2b] its negative controls
  int64_t verifier_family = 0;                             // reachable (position, class) tests in [2b]
  int64_t family_size = 0;
  bool ran_greedy = false, ran_analytic = false, ran_sampling = false, ran_verifier = false;
  bool greedy_pass = true, analytic_pass = true, sampling_pass = true, controls_pass = true, verifier_pass = true;
  double analytic_max_error = 0.0;
  std::vector<std::string> failures;  // one line per failed item
  std::vector<std::string> notes;     // warnings that do not fail the check (e.g. a cell whose
                                      // tests all have 0 degrees of freedom)
  double seconds = 0.0;

  bool pass() const { return greedy_pass && analytic_pass && sampling_pass && controls_pass && verifier_pass; }
};

// Applies Holm to the report's family, sets in_family/holm_p/reject, the cells' pass and
// min_holm_p, sampling_pass, controls_pass, the failure lines of the sampling part and the notes
// (cells whose tests all have 0 degrees of freedom). Exposed for tests; run_equivalence calls it.
void finalize_sampling_verdict(EquivalenceReport& report);

// The verdict of the verifier check [2b]: Holm (at alpha) over the lossless cells' Bonferroni
// p-values; a cell whose (position, class) tests all test nothing (no draw or 0 degrees of
// freedom) is a failure, not a pass; every applicable control must be caught. Sets holm_p,
// verifier_pass and the failure lines. run_equivalence calls it.
void finalize_verifier_verdict(EquivalenceReport& report);

// The report as a plain-text table (what `speclab check` prints).
std::string format_equivalence_report(const EquivalenceReport& report);

// "T=<t> top_p=<p> top_k=<k>", as the report labels a sampling setting.
std::string sampling_label(const SamplingOptions& s);

}  // namespace speclab
