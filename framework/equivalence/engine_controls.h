// The negative controls of the sampling check (`equivalence.controls`): deliberately wrong
// acceptance rules run through the real engine (the Session's AcceptanceRule) with the same
// drafter, N and tests as the lossless engine. Each applicable one must be caught; a control that
// is not caught means the tests have no demonstrated power there, and the check fails.
//
// The catalogue, in report order (the rules are in sampling_check.h):
//   always_accept        every draft token kept: the output follows q;
//   top_p_on_p_only      q drawn after top-p, verification handed q at top_p = 1;
//   replacement_from_p   the recovered token drawn from p instead of norm(max(0, p − q));
//   bonus_from_row_k-1   the bonus token drawn from row k − 1 of p instead of row k;
//   q_at_temperature_1   q drawn at T, verification handed q at temperature 1 (HF transformers #32867);
//   q_drawn_top_k        q drawn from the run's top-k, verification handed the full q;
//   residual_unnormalised the recovered token drawn from max(0, p − q) without normalising it;
//   p_row_off_by_one     draft token i judged against row i + 1 of p (misaligned logit rows);
//   shared_draws         the verifier's uniforms are the drafter's (two streams seeded alike per step).
// top_p_on_p_only, q_at_temperature_1 and q_drawn_top_k are drafter-side: they need the draft's raw
// logits, i.e. a model drafter (behind prompt_lookup_first / retrieval_first: the wrapped one; the
// sources' blocks, which carry no logits, are verified losslessly), except q_at_temperature_1,
// which a drafter that samples and reports q rows without logits (a sampling plugin) gets from the
// q rows themselves: q^T renormalised over q's support, which is q at temperature 1 where no
// top-p cut applies (softmax(l / T)^T is proportional to softmax(l); top-k keeps its set), and with
// top-p the temperature-1 law over the nucleus drawn from. shared_draws needs a drafter that draws
// from the host's stream (a model drafter, or one whose stream moved between proposals). A drafter-side control whose drawn and reported q differ by a mean
// TV below kMinControlQTv on the rows the engine visited changed (nearly) nothing: it is reported
// not applicable, with that TV, instead of missed (as in the verifier check, verifier_check.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/engine/verifier.h"
#include "framework/equivalence/sampling_check.h"

namespace speclab {

// Every control name, in report order. `equivalence.controls` defaults to all of them.
const std::vector<std::string>& engine_control_names();

// "always_accept, top_p_on_p_only, ...": the names for error messages.
std::string engine_control_list();

// What a drafter hands the verifier under sampling (equivalence_runner probes one step).
struct DrafterSampling {
  bool logits = false;  // raw draft logits (DraftBlock::logits): model drafters, eagle, plugins that fill them
  bool q_rows = false;  // q rows it drew its tokens from (DraftBlock::probs): it samples
  bool draws = false;   // it draws from the host's stream (which moved between its proposals)
};

// Why the control cannot change the recorded tokens in a cell, or "" when it can run there:
//   sampling        the cell's setting (top_p = 1 leaves top_p_on_p_only nothing to change;
//                   temperature 1 likewise q_at_temperature_1; top_k = 0 q_drawn_top_k); above
//                   temperature 1 with top_p < 1, q_at_temperature_1 reports a smaller nucleus
//                   than the one drawn from, so a drawn token may have q = 0 there, which the
//                   verifier refuses (as verifier_controls() marks it);
//   drafter         what the drafter supplies: the drafter-side controls need draft logits
//                   (q_at_temperature_1 q rows at least); shared_draws a drafter that draws
//                   from the host's stream (a plugin with a generator of its own draws none of it);
//   gamma, m_max    bonus_from_row_k-1 is seen only when the bonus of a full first block,
//                   position gamma + 2, is among the recorded positions 1..m_max.
std::string engine_control_skip_reason(const std::string& name, const SamplingOptions& sampling,
                                       const DrafterSampling& drafter, int gamma, int m_max);

struct EngineControl {
  std::string name;
  AcceptanceRule rule;
  std::shared_ptr<QDivergence> divergence;  // drafter-side controls: filled while drawing; else null
};

// The control called `name`; Error(kConfig, field "equivalence.controls") for an unknown name.
EngineControl make_engine_control(const std::string& name);

}  // namespace speclab
