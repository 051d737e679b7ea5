#include "framework/equivalence/engine_controls.h"


#include "framework/core/error.h"
#include "framework/io/config_util.h"
#include "framework/io/experiment_config.h"

namespace speclab {

const std::vector<std::string>& engine_control_names() { return EquivalenceOptions::control_names(); }

std::string engine_control_list() { return config::join(engine_control_names(), ", "); }

std::string engine_control_skip_reason(const std::string& name, const SamplingOptions& s, const DrafterSampling& drafter,
                                       int gamma, int m_max) {
  const bool drafter_side = name == "top_p_on_p_only" || name == "q_at_temperature_1" || name == "q_drawn_top_k";
  if (name == "top_p_on_p_only" && s.top_p >= 1.0) return "top_p = 1: nothing to apply";
  if (name == "q_at_temperature_1" && s.temperature == 1.0) return "temperature 1: q at temperature 1 is the right q";
  if (name == "q_at_temperature_1" && s.temperature > 1.0 && s.top_p < 1.0 && drafter.logits)
    return "temperature > 1 with top_p < 1: q at temperature 1 has a smaller nucleus, which misses drawn tokens "
           "(the verifier refuses q = 0 for a drafted token)";
  if (name == "q_drawn_top_k" && s.top_k <= 0) return "top_k = 0: the drafter draws from the full q";
  if (drafter_side && !drafter.logits && !drafter.q_rows)
    return "the drafter reports no q (a deterministic drafter: no q to misreport)";
  if (drafter_side && !drafter.logits && name != "q_at_temperature_1")
    return "the drafter reports q rows but no draft logits (DraftBlock::logits), from which this control "
           "recomputes q";
  if (name == "shared_draws" && !drafter.draws)
    return drafter.q_rows ? "the drafter draws nothing from the host's stream (a generator of its own: no draws to share)"
                          : "the drafter draws nothing (a deterministic drafter: no draws to share)";
  if (name == "bonus_from_row_k-1" && gamma + 2 > m_max)
    return "the bonus of a full first block is position gamma + 2 = " + std::to_string(gamma + 2) +
           ", beyond the recorded positions (max " + std::to_string(m_max) + ")";
  return "";
}

EngineControl make_engine_control(const std::string& name) {
  EngineControl c;
  c.name = name;
  if (name == "always_accept") {
    c.rule = always_accept_rule();
  } else if (name == "replacement_from_p") {
    c.rule = replacement_from_p_rule();
  } else if (name == "bonus_from_row_k-1") {
    c.rule = bonus_from_previous_row_rule();
  } else if (name == "residual_unnormalised") {
    c.rule = residual_unnormalised_rule();
  } else if (name == "p_row_off_by_one") {
    c.rule = p_row_off_by_one_rule();
  } else if (name == "shared_draws") {
    c.rule = shared_draws_rule();
  } else if (name == "top_p_on_p_only" || name == "q_at_temperature_1" || name == "q_drawn_top_k") {
    c.divergence = std::make_shared<QDivergence>();
    c.rule = name == "top_p_on_p_only"      ? top_p_on_p_only_rule(c.divergence)
             : name == "q_at_temperature_1" ? q_at_temperature_1_rule(c.divergence)
                                            : q_drawn_top_k_rule(c.divergence);
  } else {
    throw Error(ErrorKind::kConfig, "expected one of " + engine_control_list() + ", found '" + name + "'", "equivalence",
                "controls");
  }
  return c;
}

}  // namespace speclab
