// The config key schema: one field table per options struct, where each YAML key, its aliases,
// its member and its codec are declared once (internal to the config loader in framework/io;
// torch-free). The tables drive reading (config_parse.cpp), `--set` (config_overrides.cpp),
// sweep keys (sweep.cpp), the canonical text (config_canonical.cpp) and unknown-key errors with
// their "did you mean" suggestion.
//
// The bottom half declares the loader's steps that its files share; each names its file.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/io/config_fields.h"
#include "framework/io/experiment_config.h"

namespace speclab::config {

// The top level: name, models (target, draft: model sources), drafters (entries), sampling,
// generation, prompts (with inline entries), sweep, repeats, warmup, kv, output, equivalence.
const Table<ExperimentConfig>& top_table();
const Table<DrafterEntry>& drafter_table();
const Schema& top_schema();  // top_table().schema()

// Sweep keys: "<section>.<key>" naming a single-valued setting; "drafter.<key>" for every
// drafters entry (aliases allowed, e.g. drafter.gamma); "drafter.params.<name>" for plugins.
// The canonical key ("drafter.num_speculative_tokens"), or "" when `written` is none.
std::string canonical_sweep_key(const std::string& written);
// Why a canonical key that exists cannot vary between points (name, output.*, equivalence.*);
// "" when it may be swept.
std::string unsweepable_reason(const std::string& key);
// "unknown sweep key ..." with the nearest sweepable key, or what a sweep key looks like.
std::string unknown_sweep_key_message(const std::string& written);

// The node at a canonical key path ("drafters[1].num_speculative_tokens", "sweep.drafter.gamma")
// as written in the tree (aliases followed), or the deepest node that exists on the way; its
// path has the keys spelled as written. `schema`: the file's keys (default: `speclab run`'s,
// top_schema()).
YamlValue locate(const YAML::Node& root, const YamlOrigin& origin, const std::string& path,
                 const Schema* schema = nullptr);
// The node at `path` as locate() finds it, where every part of the path is written (under any of
// its names); nullopt where a part is not.
std::optional<YamlValue> find_written(const YAML::Node& root, const YamlOrigin& origin, const std::string& path,
                                      const Schema* schema = nullptr);

// ---- the loader's shared steps ----------------------------------------------------------------

// config_parse.cpp: the text of a config file (at most 16 MiB; Error(kIo) naming it when unreadable).
std::string load_yaml_text(const std::string& path);
// config_parse.cpp: the YAML map at the top of a config text; Error(kConfig) at file:line:col when
// the text is not YAML or not a map ("expected a map of sections (<sections>)").
YAML::Node parse_config_root(const std::string& yaml_text, const std::string& source_name, YamlOrigin& origin,
                             const std::string& sections);
// config_parse.cpp: the config file `path` as its loader reads it, its text parsed and `overrides`
// (--set) applied, to locate an error found after loading (`schema`: the file's keys, as
// apply_override's). Throws Error as the loader does.
struct WrittenConfig {
  YamlOrigin origin;
  YAML::Node root;
};
WrittenConfig read_written_config(const std::string& path, const std::vector<std::string>& overrides,
                                  const std::string& sections, const Schema* schema = nullptr);
// config_parse.cpp: which command a config file is for, and the top-level keys that only that
// command's configs have (a run config: models, drafters, prompts, sweep, equivalence; a
// train-draft config: target, architecture, head, train).
enum class ConfigKind { kExperiment, kTrainDraft };
// Error(kConfig) at the first top-level key of `root` that belongs only to the other kind's
// configs ("expected a `speclab train-draft` config ..., found a `speclab run` config: it has
// 'drafters'"), before the keys are read, so that the error is not an unknown key with a
// suggestion from the wrong schema. Nothing when `root` has no such key.
void refuse_other_config_kind(const YAML::Node& root, const YamlOrigin& origin, ConfigKind expected);
// The tables `speclab train-draft` reuses (framework/io/train_config.cpp): models.target's and
// the prompts section's.
const Table<ModelSource>& model_source_table();
const Table<PromptsOptions>& prompt_options_table();

// config_parse.cpp: derived values. draft_model entries without a model of their own take
// models.draft; entries without a label get their drafter name (+ "_2", "_3", ... on clashes).
void finalize(ExperimentConfig& c);

// config_overrides.cpp: `--set key=value` applied to the tree (`arg` is "key=value"); the new
// nodes are registered in `origin` so that errors name the --set. Throws Error(kConfig).
// `schema`: the file's keys (default: `speclab run`'s, top_schema()).
void apply_override(YAML::Node root, const std::string& arg, YamlOrigin& origin, const Schema* schema = nullptr);
// The same edit without an origin: errors name `label`.
void set_key(YAML::Node root, const std::string& key, const YAML::Node& value, const std::string& label);

// sweep.cpp: the sweep section ("<section>.<key>": [values]), read with its keys canonical.
Codec<std::vector<SweepAxis>> sweep_axes();
// Applies one sweep value (`val.node`, a scalar) to every place the canonical `key` names.
void apply_sweep_value(ExperimentConfig& c, const std::string& key, const YamlValue& val, const Ctx& ctx);
// Called with a point's validation error, the point's value index per axis and "k=v, ..."; it
// throws. Without one, expand_points throws an error that names the point's values.
using PointErrorHandler = std::function<void(const Error&, const std::vector<size_t>&, const std::string&)>;
std::vector<SweepPoint> expand_points(const ExperimentConfig& config, const PointErrorHandler* on_error);
constexpr int64_t kMaxSweepPoints = 100000;

// config_canonical.cpp: the canonical text of the setting at `key_path` (as in
// effective_config_yaml: "sampling.temperature", "drafters[0].num_speculative_tokens"; a list or
// map as its flattened entries, "[0]=0,[1]=1"), or nullopt when there is none.
std::optional<std::string> effective_value(const ExperimentConfig& c, const std::string& key_path);

}  // namespace speclab::config
