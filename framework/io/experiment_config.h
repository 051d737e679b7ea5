// ExperimentConfig — a YAML experiment file mapped one to one onto options structs.
//
// Sections (each a struct with validate(); docs/config.md maps the knobs to HF GenerationConfig
// and vLLM speculative_config names):
//   name:        free text
//   models:      target: {path, format, tokenizer}   draft: {...} (optional; for draft_model)
//   drafters:    list of {label, name | plugin, num_speculative_tokens (alias gamma), schedule,
//                max_speculative_tokens, confidence_threshold, confidence_from_token, prompt_lookup_min/max,
//                draft_layers (list or "0-5"), draft_layers_first, draft_model, params: {k: v}}
//                AR decoding is always run as the baseline ("ar") and needs no entry.
//   sampling:    {temperature, top_k, top_p, seed}
//   generation:  {max_new_tokens, stop: [..], ignore_eos}
//   prompts:     {files: [..], field, category_field, id_field, sources: [{file, field, category_field,
//                 category, id_field, categories, per_category}], inline: [{text, category, id}],
//                 chat: auto|on|off, system, limit}
//   sweep:       {"<section>.<key>": [v1, v2, ...]}: the cartesian product over all listed keys;
//                "drafter.<key>" applies to every drafter entry (e.g. drafter.gamma: [2, 4, 8])
//   repeats, warmup: integers
//   kv:          {block_size, budget_bytes, preemption: off|lowest_priority}
//   output:      {path}
//   equivalence: see EquivalenceOptions (used by `speclab check`)
// Paths: prompt files, plugin paths, tokenizer paths and model paths are relative to the YAML
// file's directory (load_* resolves them; a model value with neither '/' nor '.' is a named
// entry such as "stories260K" and is kept as written); output.path is relative to the working
// directory. docs/config.md lists every key, its aliases and its default.
// Unknown keys are errors with a "did you mean" suggestion; every error names the file, the key
// path and its line:column, and says what was expected. `--set key=value` overrides any scalar
// (or a list written in YAML flow syntax, e.g. --set "sweep.drafter.gamma=[1,2]").
//
// Each key is declared once, in the field tables of config_schema.cpp, which drive reading
// (config_parse.cpp), `--set` (config_overrides.cpp), sweep keys (sweep.cpp), the canonical text
// (config_canonical.cpp) and unknown-key errors. The validate() methods are in
// experiment_config.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/draft/drafter_options.h"
#include "framework/engine/generation.h"
#include "framework/kv/kv_options.h"
#include "framework/sampling/sampling.h"
#include "framework/core/model_source.h"

namespace speclab {

struct ModelsOptions {
  ModelSource target;
  std::optional<ModelSource> draft;
  void validate() const;
};

struct DrafterEntry {
  std::string label;  // unique; defaults to the drafter name (+ "_2", ... on clashes)
  DrafterOptions options;
  // True when options.draft_model/draft_model_format were filled in from models.draft (a
  // draft_model entry that names no model of its own); kept so that a sweep over models.draft.*
  // updates them.
  bool draft_from_models = false;
};

struct InlinePrompt {
  std::string id, category, text;
};

// One JSONL file with its own keys (prompts.sources[]): mixes datasets whose fields differ in one
// experiment (HumanEval `prompt`, MT-bench `turns.0` + `category`), read in place.
struct PromptSource {
  std::string file;                     // ".jsonl" or ".jsonl.gz", relative to the YAML file
  std::string field = "prompt";         // JSON key of the prompt text (dotted path allowed)
  std::string category_field;           // JSON key of the category (optional)
  std::string category;                 // the category of every prompt when category_field is empty
  std::string id_field;                 // JSON key of the id (optional; default: file:line)
  std::vector<std::string> categories;  // keep only prompts of these categories (empty = all)
  int64_t per_category = 0;             // keep the first N prompts of each category (0 = all)
  void validate(const std::string& key) const;  // key: "sources[<i>]", for error paths under prompts
};

struct PromptsOptions {
  std::vector<std::string> files;  // JSONL (".jsonl" or ".jsonl.gz"), relative to the YAML file
  std::string field = "prompt";    // JSON key holding the prompt text (dotted path "turns.0" allowed)
  std::string category_field;      // JSON key of the category (optional)
  std::string id_field;            // JSON key of the id (optional; default: file:line)
  std::vector<PromptSource> sources;  // after `files`, each with its own keys
  std::vector<InlinePrompt> inline_prompts;
  std::string chat = "auto";       // auto | on | off
  std::string system;              // system message in chat mode (optional)
  int64_t limit = 0;               // 0 = all
  void validate() const;
};

struct SweepAxis {
  std::string key;                  // e.g. "drafter.num_speculative_tokens", "sampling.temperature"
  std::vector<std::string> values;  // YAML scalars as written
};

struct OutputOptions {
  std::string path = "results/experiment.h5";  // relative paths are relative to the working directory
  void validate() const;
};

// What a config is loaded for: `speclab run` and the other commands draft at each drafter's own
// gamma; `speclab check` at each of equivalence.gammas.
enum class ConfigUse { kRun, kCheck };

// `equivalence` section (speclab check): distribution-equivalence checks.
struct EquivalenceOptions {
  bool greedy = true;                     // greedy exactness over the prompts
  bool analytic = true;                   // exact first-token distribution check
  bool sampling = true;                   // empirical sampling check
  int64_t samples = 20000;                // N draws per cell set
  std::vector<int> positions = {1, 2, 3};  // m: joint of the first m tokens
  std::vector<double> temperatures = {0.5, 1.0};
  std::vector<double> top_ps = {1.0, 0.9};
  std::vector<int64_t> top_ks = {0, 20};
  std::vector<int> gammas = {1, 4};
  double alpha = 0.001;                   // family-wise significance level (Holm-corrected)
  double control_alpha = 1e-6;            // negative controls must be rejected below this
  bool negative_controls = true;
  // The negative controls run through the engine (framework/equivalence/engine_controls.h),
  // when negative_controls is true. Empty (the default): all of them.
  std::vector<std::string> controls;
  // Sampling draws end at EOS and at generation.stop strings (an ended draw is padded with an
  // "ended" category); only the two-sample tests run then. false: ignore_eos, no stop strings.
  bool eos_and_stop = false;
  double numerical_margin = 0.0;          // 0 = the documented default tolerance
  int64_t contexts = 1;                   // fixed contexts (prompts) for the sampling check
  bool verifier = true;                   // Monte-Carlo check of the real verifier (verifier_check.h)
  int64_t verifier_samples = 200000;      // draws per verifier cell (10^7 by hand)
  std::vector<int> verifier_gammas = {1, 2, 3, 4, 5, 6, 7, 8};  // draft lengths k of the verifier check
  void validate() const;

  // Every negative control's name, in report order: what `controls` accepts (the rules are
  // framework/equivalence/engine_controls.h's).
  static const std::vector<std::string>& control_names();
};

struct ExperimentConfig {
  std::string name = "experiment";
  std::string source_path;    // the YAML file
  std::string resolved_yaml;  // the config after --set overrides, as YAML text (for HDF5)
  ModelsOptions models;
  std::vector<DrafterEntry> drafters;
  SamplingOptions sampling;
  GenerationOptions generation;
  PromptsOptions prompts;
  std::vector<SweepAxis> sweep;
  int64_t repeats = 1;
  int64_t warmup = 1;
  KvOptions kv;
  OutputOptions output;
  std::optional<EquivalenceOptions> equivalence;
  // Not a key: what the config was loaded for (load_experiment_config's `use`).
  ConfigUse use = ConfigUse::kRun;

  void validate() const;  // every section's validate() + cross-section checks
};

// Parses and validates. `overrides` are "key=value" strings (`--set`). Throws
// Error(kConfig, message, "<file>:<line>:<col>", "<key.path>"). With `use` kCheck each drafter
// is validated at the draft lengths `speclab check` runs it at (the largest of
// equivalence.gammas), not at its own gamma, which check refuses to be written.
ExperimentConfig load_experiment_config(const std::string& path, const std::vector<std::string>& overrides = {},
                                        ConfigUse use = ConfigUse::kRun);
ExperimentConfig parse_experiment_config(const std::string& yaml_text, const std::string& source_name,
                                         const std::vector<std::string>& overrides = {},
                                         ConfigUse use = ConfigUse::kRun);

// Sets c.output.path to `path` (a command's --output), in c.resolved_yaml too, so that the config
// the results file stores (/config_yaml) writes where this run wrote, as a --set output.path
// would. Validates the path (OutputOptions::validate's errors).
void set_output_path(ExperimentConfig& c, const std::string& path);

// Where the canonical key path `field` ("sampling.temperature", "drafters[1].num_speculative_tokens")
// is written in the config file `path` with `overrides` applied: `where` is "<file>:<line>:<col>"
// of the key, or the `--set` that wrote it, and `path` the key path as written (an alias, e.g.
// "drafters[1].gamma", as spelled). Both empty when the key is not written (a default, a value a
// sweep sets) or the file no longer parses.
struct WrittenKey {
  std::string where, path;
};
WrittenKey written_key(const std::string& path, const std::vector<std::string>& overrides, const std::string& field);

// `e` located where its field is written when it names the config file `path` without a line
// (an error found once models are loaded, e.g. draft_layers_first beyond the target's layers):
// "<file>:<line>:<col>" of the key, or the `--set` that wrote it. `e` itself when the key is not
// written (a default, a value a sweep sets) or the file no longer parses.
Error located_config_error(const Error& e, const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace speclab

// The rest of the config API, one concept per header (each includes this one):
#include "framework/io/config_canonical.h"  // effective_config_yaml, yaml_differences
#include "framework/io/prompt_loader.h"     // Prompt, load_prompts
#include "framework/io/sweep.h"             // SweepPoint, expand_sweep
