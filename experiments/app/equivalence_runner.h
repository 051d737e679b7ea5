// `speclab check`: the distribution-equivalence checks of an experiment config's `equivalence`
// section (EquivalenceOptions in framework/io/experiment_config.h), run on the config's target
// model, drafters and prompts. docs/equivalence.md describes every check, the statistics, the
// multiple-testing policy and the HDF5 schema.
//
//   1. greedy    every prompt x drafter x gamma: speculative vs AR tokens (greedy_check.h);
//   2. analytic  every prompt at 3 context lengths x (temperature, top_p, top_k) x model draft:
//                exact first-token distribution vs p (analytic_check.h);
//   3. sampling  the first `contexts` prompts x (temperature, top_p, top_k) x drafter x gamma:
//                N draws per subject, two-sample tests vs AR and one-sample tests vs the exact
//                distributions (sampling_check.h), Holm-Bonferroni across the whole sweep;
//   4. controls  always-accept and top-p-on-p-only, through the same engine at the same N,
//                each required to be caught (Bonferroni over its cell's tests below
//                control_alpha), with the smallest N at which it is caught.
// Verdict: pass when no greedy divergence is a "bug", every analytic error is below
// kAnalyticTolerance, no Holm-adjusted p-value of the lossless engine is below alpha, and every
// applicable control is caught.
#pragma once

#include "framework/equivalence/equivalence_report.h"
#include "framework/io/experiment_config.h"

namespace speclab {

// Runs every enabled check. Throws Error (config, model loading, prompts) before any decoding
// when the input is bad; a failed check is a result (report.pass() == false), not an error.
EquivalenceReport run_equivalence(const ExperimentConfig& config, const EquivalenceRunOptions& options = {});

}  // namespace speclab
