// validate() of the options structs declared in experiment_config.h: each section's own checks,
// then ExperimentConfig's cross-section checks (drafter labels and names, the sweep's keys).
// Errors are Error(kConfig, "expected ..., found ...", <section>, <key path>); the loader adds
// where the key is written (config_parse.cpp).
#include "framework/io/experiment_config.h"

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <map>
#include <set>

#include "framework/core/error.h"
#include "framework/io/config_schema.h"
#include "framework/io/config_util.h"
#include "framework/io/yaml_util.h"

namespace speclab {

using config::ends_with;
using config::join;
using config::split;
using config::squote;
using config::starts_with;
using config::to_text;

namespace {

// HDF5 keeps strings up to their first NUL: a text recorded with one would differ from the text run.
const char* const kNoNul = "expected text without NUL characters: the results file keeps strings up to their first NUL";

// Runs f, prefixing the key path of a config error with `prefix`.
template <class F>
void under(const std::string& prefix, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kConfig) throw;
    throw Error(ErrorKind::kConfig, e.message(), "", e.field().empty() ? prefix : prefix + "." + e.field());
  }
}

[[noreturn]] void bad(const std::string& section, const std::string& field, const std::string& msg) {
  throw Error(ErrorKind::kConfig, msg, section, field);
}

}  // namespace

void ModelsOptions::validate() const {
  under("target", [&] { target.validate(); });
  if (draft) under("draft", [&] { draft->validate(); });
}

namespace {

// Keys of the prompts section; `prefix` ("" or "sources[2].") goes before the key names.
void check_prompt_keys(const std::string& prefix, const std::string& field, const std::string& category_field,
                       const std::string& id_field) {
  for (const auto& [name, value] : {std::make_pair("field", field), std::make_pair("category_field", category_field),
                                    std::make_pair("id_field", id_field)}) {
    if (std::string(name) == "field" && value.empty()) bad("prompts", prefix + name, "expected a JSON key, found nothing");
    if (!value.empty())
      for (const auto& seg : split(value, '.'))
        if (seg.empty())
          bad("prompts", prefix + name, "expected a dotted key path such as turns.0, found " + squote(value));
  }
}

void check_jsonl_name(const std::string& key, const std::string& f) {
  if (!ends_with(f, ".jsonl") && !ends_with(f, ".jsonl.gz"))
    bad("prompts", key, "expected a .jsonl or .jsonl.gz file, found " + squote(f));
}

}  // namespace

void PromptSource::validate(const std::string& key) const {
  check_jsonl_name(key + ".file", file);
  check_prompt_keys(key + ".", field, category_field, id_field);
  if (!category_field.empty() && !category.empty())
    bad("prompts", key + ".category", "expected category_field or category, found both");
  if (per_category < 0)
    bad("prompts", key + ".per_category", "expected a count >= 0 (0 = all), found " + std::to_string(per_category));
}

void PromptsOptions::validate() const {
  if (files.empty() && sources.empty() && inline_prompts.empty())
    bad("prompts", "files", "expected at least one prompt source (files, sources or inline), found none");
  for (const auto& f : files) check_jsonl_name("files", f);
  check_prompt_keys("", field, category_field, id_field);
  for (size_t i = 0; i < sources.size(); ++i) sources[i].validate("sources[" + std::to_string(i) + "]");
  for (size_t i = 0; i < inline_prompts.size(); ++i) {
    const InlinePrompt& ip = inline_prompts[i];
    if (ip.text.empty())
      bad("prompts", "inline[" + std::to_string(i) + "].text", "expected non-empty prompt text, found nothing");
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"text", &ip.text}, {"id", &ip.id},
                                     {"category", &ip.category}})
      if (value->find('\0') != std::string::npos) bad("prompts", "inline[" + std::to_string(i) + "]." + key, kNoNul);
  }
  if (chat != "auto" && chat != "on" && chat != "off")
    bad("prompts", "chat", "expected auto, on or off, found " + squote(chat));
  if (chat == "off" && !system.empty())  // (chat: auto with a model without a template: when it is loaded)
    bad("prompts", "system",
        "expected no system message with chat: off (it goes into the chat template; it would be dropped), found " +
            squote(system.size() > 40 ? system.substr(0, 37) + "..." : system));
  if (limit < 0) bad("prompts", "limit", "expected a count >= 0 (0 = all), found " + std::to_string(limit));
}

void OutputOptions::validate() const {
  if (path.empty()) bad("output", "path", "expected an HDF5 file path, found nothing");
  if (!ends_with(path, ".h5") && !ends_with(path, ".hdf5"))
    bad("output", "path", "expected a path ending in .h5 or .hdf5, found " + squote(path));
}

const std::vector<std::string>& EquivalenceOptions::control_names() {
  static const std::vector<std::string> names = {"always_accept",         "top_p_on_p_only",    "replacement_from_p",
                                                 "bonus_from_row_k-1",    "q_at_temperature_1", "q_drawn_top_k",
                                                 "residual_unnormalised", "p_row_off_by_one",      "shared_draws"};
  return names;
}

void EquivalenceOptions::validate() const {
  const std::string s = "equivalence";
  const std::vector<std::string>& known = control_names();
  for (const std::string& c : controls)
    if (std::find(known.begin(), known.end(), c) == known.end())
      bad(s, "controls", "expected control names among " + config::join(known, ", ") + ", found '" + c + "'");
  if (!greedy && !analytic && !sampling && !verifier)
    bad(s, "greedy", "expected at least one of greedy, analytic, sampling, verifier to be true, found all false");
  if (verifier_samples < 1000 || verifier_samples > (int64_t(1) << 40))
    bad(s, "verifier_samples", "expected a draw count in [1000, 2^40], found " + std::to_string(verifier_samples));
  if (verifier_gammas.empty()) bad(s, "verifier_gammas", "expected a non-empty list, found an empty list");
  for (int g : verifier_gammas)
    if (g < 1 || g > 16) bad(s, "verifier_gammas", "expected draft lengths in 1..16, found " + std::to_string(g));
  // Each draw is a whole generation, and every draw's tokens are kept until the tests run: 10^7
  // draws of 16 positions hold about 1.3 GB per engine and take hours. At 10^12 the check ran its
  // greedy part, then failed on "out of memory".
  // (The sampling check's own minimum, 1000, is refused with its reason where it runs.)
  if (samples < 1 || samples > 10'000'000)
    bad(s, "samples", "expected a positive sample count of at most 10000000 (each draw is a generation, and the "
                      "draws are held in memory), found " + std::to_string(samples));
  if (positions.empty()) bad(s, "positions", "expected a non-empty list, found an empty list");
  for (int m : positions)
    if (m < 1 || m > 16) bad(s, "positions", "expected positions in 1..16, found " + std::to_string(m));
  if (temperatures.empty()) bad(s, "temperatures", "expected a non-empty list, found an empty list");
  for (double t : temperatures)
    if (!(t > 0.0) || !std::isfinite(t))
      bad(s, "temperatures",
          "expected finite temperatures > 0, found " + to_text(t) +
              (t == 0.0 ? std::string(": at temperature 0 both engines are deterministic, so a sampling check would "
                                      "compare one token sequence with itself; greedy decoding is checked by "
                                      "`greedy: true`")
                        : std::string()));
  if (top_ps.empty()) bad(s, "top_ps", "expected a non-empty list, found an empty list");
  for (double p : top_ps)
    if (!(p > 0.0 && p <= 1.0)) bad(s, "top_ps", "expected top_p values in (0, 1], found " + to_text(p));
  if (top_ks.empty()) bad(s, "top_ks", "expected a non-empty list, found an empty list");
  for (int64_t k : top_ks) {
    if (k < 0) bad(s, "top_ks", "expected top_k values >= 0 (0 = off), found " + std::to_string(k));
    // As temperature 0: one candidate per row makes both engines deterministic for every model, and
    // every test of the setting tested nothing (it ran to the end, then failed; until 2026-12-07).
    if (k == 1)
      bad(s, "top_ks",
          "expected top_k values of 0 (off) or at least 2, found 1: with one candidate per row both engines are "
          "deterministic, so a sampling check would compare one token sequence with itself; greedy decoding is "
          "checked by `greedy: true`");
  }
  if (gammas.empty()) bad(s, "gammas", "expected a non-empty list, found an empty list");
  for (int g : gammas)
    if (g < 1 || g > 64) bad(s, "gammas", "expected gamma values in 1..64, found " + std::to_string(g));
  if (!(alpha > 0.0 && alpha < 1.0)) bad(s, "alpha", "expected a significance level in (0, 1), found " + to_text(alpha));
  if (!(control_alpha > 0.0 && control_alpha < 1.0))
    bad(s, "control_alpha", "expected a significance level in (0, 1), found " + to_text(control_alpha));
  // A control counts as caught at p x tests < control_alpha: at or above alpha a "caught" control
  // would not even be rejected by the lossless family, so it would demonstrate no power.
  if (negative_controls && !(control_alpha < alpha))
    bad(s, "control_alpha",
        "expected a level below alpha (" + to_text(alpha) + "), found " + to_text(control_alpha) +
            ": a control is caught at p x tests < control_alpha, and one caught at alpha or above shows no power the "
            "lossless tests (at alpha, Holm-corrected) would have");
  if (!negative_controls && !controls.empty())
    bad(s, "controls", "expected no control list with negative_controls: false (no control runs), found " +
                           std::to_string(controls.size()) + " names");
  // A value given twice runs the same cells twice (the same seed streams), which only enlarges the
  // Holm family.
  auto unique = [&](const char* key, auto values) {
    std::sort(values.begin(), values.end());
    const auto dup = std::adjacent_find(values.begin(), values.end());
    if (dup == values.end()) return;
    std::string v;
    if constexpr (std::is_same_v<typename decltype(values)::value_type, std::string>)
      v = "'" + *dup + "'";
    else
      v = to_text(static_cast<double>(*dup));
    bad(s, key, "expected distinct values, found " + v + " twice");
  };
  unique("positions", positions);
  unique("temperatures", temperatures);
  unique("top_ps", top_ps);
  unique("top_ks", top_ks);
  unique("gammas", gammas);
  unique("verifier_gammas", verifier_gammas);
  unique("controls", controls);
  if (!(numerical_margin >= 0.0) || !std::isfinite(numerical_margin))
    bad(s, "numerical_margin", "expected a finite margin >= 0 (0 = the default tolerance), found " + to_text(numerical_margin));
  if (contexts < 1 || contexts > 100000)
    bad(s, "contexts", "expected a number of contexts in [1, 100000], found " + std::to_string(contexts));
}

void ExperimentConfig::validate() const {
  if (name.empty()) bad("", "name", "expected a non-empty experiment name, found nothing");
  // A name or label with a NUL was recorded, and printed in the summary table, cut short (2026-12-06).
  if (name.find('\0') != std::string::npos) bad("", "name", kNoNul);
  under("models", [&] { models.validate(); });
  // speclab check drafts at each of equivalence.gammas (its drafters' own gamma is refused there):
  // a drafter's max_speculative_tokens was compared with the default gamma 4, which check never
  // runs, and check raised it silently to a larger gamma it did run.
  const bool check_gammas = use == ConfigUse::kCheck && equivalence;
  int check_gamma = 0;
  if (check_gammas) {
    under("equivalence", [&] { equivalence->validate(); });
    check_gamma = *std::max_element(equivalence->gammas.begin(), equivalence->gammas.end());
  }
  std::map<std::string, size_t> labels;
  for (size_t i = 0; i < drafters.size(); ++i) {
    const DrafterEntry& d = drafters[i];
    const std::string p = "drafters[" + std::to_string(i) + "]";
    if (check_gammas) {
      if (d.options.schedule == "heuristic" && d.options.max_speculative_tokens < check_gamma)
        bad("", p + ".max_speculative_tokens",
            "expected at least the largest draft length `speclab check` runs (" + std::to_string(check_gamma) +
                ", of equivalence.gammas), found " + std::to_string(d.options.max_speculative_tokens) +
                (d.options.max_speculative_tokens == 16 ? " (16 is the default: a gamma above 16 needs it set too)"
                                                        : ""));
      DrafterOptions o = d.options;
      o.num_speculative_tokens = check_gamma;
      under(p, [&] { o.validate(); });
    } else if (use == ConfigUse::kCheck) {
      // No equivalence section (check names it once the config is read, after its other
      // refusals): check never drafts at the drafter's own gamma, so its cap is not compared
      // with it (the default gamma 4 refused a cap of 3 before the missing section was named).
      DrafterOptions o = d.options;
      o.num_speculative_tokens = std::min(o.num_speculative_tokens, o.max_speculative_tokens);
      under(p, [&] { o.validate(); });
    } else {
      under(p, [&] { d.options.validate(); });
    }
    if (d.label.empty()) bad("", p + ".label", "expected a non-empty label, found nothing");
    if (d.label.find('\0') != std::string::npos) bad("", p + ".label", kNoNul);
    if (d.label == "ar") bad("", p + ".label", "expected a label other than 'ar' (the AR baseline), found 'ar'");
    if (d.label.find('/') != std::string::npos || d.label == "." || d.label == "..")
      bad("", p + ".label", "expected a label without '/' (it names an HDF5 group), found " + squote(d.label));
    auto [it, fresh] = labels.emplace(d.label, i);
    if (!fresh)
      bad("", p + ".label",
          "expected unique labels, found " + squote(d.label) + " also on drafters[" + std::to_string(it->second) +
              "] (set label: on one of them)");
    const DrafterOptions& o = d.options;
    if (o.plugin.empty() &&
        std::find(builtin_drafter_names().begin(), builtin_drafter_names().end(), o.name) == builtin_drafter_names().end()) {
      const std::string near = yaml_util::closest_match(o.name, builtin_drafter_names());
      bad("", p + ".name",
          "expected a built-in drafter (" + join(builtin_drafter_names(), ", ") + ") or a plugin path in plugin:, found " +
              squote(o.name) + (near.empty() ? "" : "; did you mean " + squote(near) + "?"));
    }
    if (o.name == "draft_model" && o.plugin.empty() && o.draft_model.empty())
      bad("", p + ".draft_model",
          "expected a draft model path or named entry (here or in models.draft), found nothing");
  }
  under("sampling", [&] { sampling.validate(); });
  under("generation", [&] { generation.validate(); });
  under("prompts", [&] { prompts.validate(); });
  kv.validate();  // its errors name the full key path (kv.budget_bytes, ...), as BlockManager's do
  // The block manager can release other sequences to make room, but nothing in the engine resumes
  // one: a drafter whose cache was released failed later with "unknown id", and a target released
  // by a drafter's reservation likewise (found 2026-12-05). Until a caller rebuilds what it loses,
  // running out of budget is the clear kResource error naming kv.budget_bytes.
  if (kv.preemption != Preemption::kOff)
    bad("", "kv.preemption",
        "expected off: speclab run and check decode each sequence beside its drafters' caches and cannot rebuild one "
        "that preemption releases (lowest_priority is the block manager's, for callers that do; docs/kv-cache.md)");
  under("output", [&] { output.validate(); });
  if (equivalence && !check_gammas) under("equivalence", [&] { equivalence->validate(); });
  // The plan holds one entry per (point, prompt, method, repeat): a count beyond these bounds
  // would exhaust memory before the first run, not measure anything more.
  if (repeats < 1 || repeats > 100000)
    bad("", "repeats", "expected a count in 1..100000, found " + std::to_string(repeats));
  if (warmup < 0 || warmup > 100000) bad("", "warmup", "expected a count in 0..100000, found " + std::to_string(warmup));
  std::set<std::string> keys;
  for (const SweepAxis& a : sweep) {
    const std::string p = "sweep." + a.key;
    if (config::canonical_sweep_key(a.key) != a.key) bad("", p, config::unknown_sweep_key_message(a.key));
    if (const std::string why = config::unsweepable_reason(a.key); !why.empty()) bad("", p, why);
    if (!keys.insert(a.key).second) bad("", p, "expected each sweep key once, found it twice");
    if (a.values.empty()) bad("", p, "expected a non-empty list of values, found an empty list");
    if (starts_with(a.key, "drafter.") && drafters.empty())
      bad("", p, "expected at least one drafters entry to apply it to, found none");
  }
}

}  // namespace speclab
