// YAML -> ExperimentConfig: load_experiment_config and parse_experiment_config
// (experiment_config.h). The text is parsed, `--set` edits the tree (config_overrides.cpp), the
// field tables read it (config_schema.cpp), derived values are filled in (finalize), and then
// validate() runs; an error it reports by key path is located at that key in the file. A sweep
// is checked value by value (each value's error at its line and column) and point by point.
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/utf8_check.h"
#include "framework/draft/drafter_options.h"
#include "framework/io/config_schema.h"
#include "framework/io/config_util.h"

namespace speclab {

namespace config {

void finalize(ExperimentConfig& c) {
  for (auto& e : c.drafters) {
    // vLLM's "ngram" is prompt_lookup, as generate's --drafter: only without a plugin, which may
    // register a drafter of that name (a sweep's point sets the name again, so each point is
    // renamed here too).
    if (e.options.plugin.empty()) e.options.name = canonical_drafter_name(e.options.name);
    if (e.options.name == "draft_model" && c.models.draft && (e.options.draft_model.empty() || e.draft_from_models)) {
      e.options.draft_model = c.models.draft->path;
      e.options.draft_model_format = c.models.draft->format;
      e.options.draft_model_tokenizer = c.models.draft->tokenizer;
      e.draft_from_models = true;
    }
  }
  // Default labels are the drafter's name, except where a sweep sets the name: the label names
  // the entry at every point, so the name of one point would mislabel the others ("drafter"
  // then; the point's label says which drafter ran).
  bool name_swept = false;
  for (const SweepAxis& a : c.sweep) name_swept = name_swept || a.key == "drafter.name" || a.key == "drafter.method";
  std::set<std::string> taken;
  for (const auto& e : c.drafters)
    if (!e.label.empty()) taken.insert(e.label);
  for (auto& e : c.drafters) {
    if (!e.label.empty()) continue;
    const std::string base = name_swept ? std::string("drafter") : e.options.name;
    std::string label = base;
    for (int k = 2; taken.count(label); ++k) label = base + "_" + std::to_string(k);
    e.label = label;
    taken.insert(label);
  }
}

namespace {
constexpr size_t kMaxConfigBytes = size_t(16) << 20;
}  // namespace

std::string load_yaml_text(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::kIo, "cannot open the config file: no such file", path);
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::kIo, "expected a YAML file, found a directory or device", path);
  if (static_cast<size_t>(st.st_size) > kMaxConfigBytes)
    throw Error(ErrorKind::kBadInput,
                "expected a config file of at most 16 MiB, found " + std::to_string(st.st_size) + " bytes", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot open the config file", path);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

YAML::Node parse_config_root(const std::string& yaml_text, const std::string& source_name, YamlOrigin& origin,
                             const std::string& sections) {
  // YAML is Unicode text, and the config is stored in the output as an HDF5 UTF-8 string, which
  // h5py then cannot read: a Latin-1 byte in a prompt ran every point, then failed the report
  // (and every later one) with a UnicodeDecodeError (until 2026-12-06).
  if (const size_t bad = first_invalid_utf8(yaml_text); bad != std::string::npos) {
    const size_t nl = bad == 0 ? std::string::npos : yaml_text.rfind('\n', bad - 1);
    const size_t column = bad - (nl == std::string::npos ? 0 : nl + 1);
    const auto end = yaml_text.begin() + static_cast<std::ptrdiff_t>(bad);
    const size_t line = 1 + static_cast<size_t>(std::count(yaml_text.begin(), end, '\n'));
    throw Error(ErrorKind::kConfig,
                "expected UTF-8 text, found the byte " + byte_name(yaml_text, bad) +
                    ", which is not well-formed UTF-8 (save the file as UTF-8)",
                source_name + ":" + std::to_string(line) + ":" + std::to_string(column + 1));
  }
  const auto at_mark = [&](const YAML::Mark& m) {
    return m.is_null() ? source_name
                       : source_name + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  };
  std::vector<YAML::Node> documents;
  try {
    documents = yaml_util::load_all_documents(yaml_text);
  } catch (const YAML::Exception& e) {
    throw Error(ErrorKind::kConfig, "malformed YAML: " + e.msg, at_mark(e.mark));
  }
  // YAML::Load read the first document alone: a second one after a '---' line was dropped
  // without a word, its settings never run (found 2026-12-06).
  if (documents.size() > 1)
    throw Error(ErrorKind::kConfig,
                "expected one YAML document, found " + std::to_string(documents.size()) +
                    " (a '---' line starts another; put its settings in the first)",
                at_mark(documents[1].Mark()));
  YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
  if (!root.IsDefined() || root.IsNull())
    throw Error(ErrorKind::kConfig, "expected a map of sections (" + sections + "), found an empty document", source_name);
  if (!root.IsMap())
    throw Error(ErrorKind::kConfig, "expected a map of sections (" + sections + "), found " + yaml_util::describe(root),
                origin.where(root));
  return root;
}

void refuse_other_config_kind(const YAML::Node& root, const YamlOrigin& origin, ConfigKind expected) {
  static const std::vector<std::string> run_only = {"models", "drafters", "prompts", "sweep", "equivalence"};
  static const std::vector<std::string> train_only = {"target", "architecture", "head", "train"};
  const bool want_run = expected == ConfigKind::kExperiment;
  const std::vector<std::string>& other = want_run ? train_only : run_only;
  if (!root.IsMap()) return;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) continue;
    const std::string key = kv.first.Scalar();
    if (std::find(other.begin(), other.end(), key) == other.end()) continue;
    throw Error(ErrorKind::kConfig,
                want_run ? "expected a `speclab run` / `speclab check` config (models, drafters, prompts, ...), found a "
                           "`speclab train-draft` config (it has '" + key + "'); train it with `speclab train-draft`"
                         : "expected a `speclab train-draft` config (target, architecture, data, head, train, output), "
                           "found a `speclab run` config (it has '" + key + "'); run it with `speclab run`, and see "
                           "configs/train/ for training configs",
                origin.where(kv.first), key);
  }
}

namespace {

// A drafters entry that writes a key which a drafter.<key> sweep sets on every entry: the value
// written would never run (while the recorded config still shows it), so it is an error at the
// written key. (A top-level key such as sampling.temperature may be written and swept: the
// written value is the base that each point replaces, as documented in docs/config.md.)
void check_sweep_conflicts(const YAML::Node& root, const YamlOrigin& origin, const std::vector<SweepAxis>& sweep) {
  // Located at the written value: a --set override's value names the --set (a key node has no
  // such label, and the error blamed the file for a --set).
  auto conflict = [&](const YAML::Node& value, const std::string& written, const std::string& axis) {
    throw Error(ErrorKind::kConfig,
                "expected the drafters entries to leave this key to sweep." + axis +
                    ", which sets it on every entry at every point; found it written here (remove it here or "
                    "from the sweep)",
                origin.where(value), written);
  };
  const Schema& drafter = drafter_table().schema();
  const YAML::Node list = top_schema().find("drafters")->value_in(root);
  if (!list.IsSequence()) return;
  for (const SweepAxis& ax : sweep) {
    const std::vector<std::string> segs = split(ax.key, '.');
    if (segs.size() < 2 || segs[0] != "drafter") continue;
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node entry = list[i];
      const std::string at = "drafters[" + std::to_string(i) + "].";
      if (segs[1] == "params") {
        const YAML::Node params = drafter.find("params")->value_in(entry);
        const std::string name = ax.key.substr(std::string("drafter.params.").size());
        if (params.IsMap())
          for (auto it = params.begin(); it != params.end(); ++it)
            if (it->first.IsScalar() && it->first.Scalar() == name) conflict(it->second, at + "params." + name, ax.key);
        continue;
      }
      const KeyDef* def = drafter.find(segs[1]);
      const YAML::Node key = def ? def->key_in(entry) : YAML::Node();
      if (key.IsDefined() && !key.IsNull()) conflict(def->value_in(entry), at + key.Scalar(), ax.key);
    }
  }
}

// Whether a canonical key path ("drafters[2].num_speculative_tokens") is set by a sweep key
// ("drafter.num_speculative_tokens").
bool set_by_axis(const std::string& field, const std::string& axis) {
  if (!starts_with(axis, "drafter.")) return field == axis;
  if (!starts_with(field, "drafters[")) return false;
  const size_t close = field.find("].");
  return close != std::string::npos && field.substr(close + 2) == axis.substr(8);
}

// A number or boolean sweep value as the setting holds it (0.0 -> 0, 1e3 -> 1000, 1MiB ->
// 1048576, on -> true), so that two spellings of one value are found to be one point; other
// values (paths, names) as written.
std::string canonical_sweep_value(const ExperimentConfig& c, const std::string& key, const std::string& written,
                                  std::string* held_out = nullptr) {
  const std::string path =
      starts_with(key, "drafter.") ? (c.drafters.empty() ? key : "drafters[0]." + key.substr(8)) : key;
  const std::optional<std::string> held = effective_value(c, path);
  if (held_out) *held_out = held ? *held : written;  // the setting as held: ngram is prompt_lookup, "0-1" is [0, 1]
  if (!held || held->empty()) return written;
  if (*held == "true" || *held == "false") return *held;
  char* end = nullptr;
  std::strtod(held->c_str(), &end);
  return end == held->c_str() + held->size() ? *held : written;
}

// Sweep values: types first, each located at its value in the sweep list (and recorded as the
// setting holds it); then every point of the product, since values are only valid together
// (gamma and max_speculative_tokens). A point's error is located at the value of the axis that
// sets the key at fault, else at that key in the file.
void check_sweep(const YAML::Node& root, const YamlOrigin& origin, const Ctx& ctx, ExperimentConfig& cfg) {
  check_sweep_conflicts(root, origin, cfg.sweep);
  const YAML::Node sweep_node = top_schema().find("sweep")->value_in(root);
  std::vector<std::string> written;
  std::vector<std::vector<YAML::Node>> value_nodes;
  // Each value is read into a copy of the config without its sweep (a copy with every value,
  // dumped per value, made loading quadratic in the sweep's size: 10,000 values took 14 min).
  ExperimentConfig base = cfg;
  base.sweep.clear();
  base.resolved_yaml.clear();
  size_t a = 0;
  for (auto it = sweep_node.begin(); it != sweep_node.end(); ++it, ++a) {
    written.push_back("sweep." + it->first.Scalar());
    value_nodes.emplace_back();
    std::vector<std::string> held;  // each value as the setting holds it
    for (size_t j = 0; j < it->second.size(); ++j) {
      value_nodes.back().push_back(it->second[j]);
      const YamlValue val(&origin, it->second[j], YAML::Node(), written.back());
      std::string canon, as_held;
      try {
        ExperimentConfig c = base;
        apply_sweep_value(c, cfg.sweep[a].key, val, ctx);
        if (starts_with(cfg.sweep[a].key, "drafter.")) finalize(c);  // the ngram alias
        canon = canonical_sweep_value(c, cfg.sweep[a].key, cfg.sweep[a].values[j], &as_held);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kConfig) throw;
        // The value's index, as the duplicate-value error names it (a bad value named the list).
        throw Error(ErrorKind::kConfig, e.message(), val.where(), written.back() + "[" + std::to_string(j) + "]");
      }
      // Values by the setting they make: 0 and 0.0, off and false, ngram and prompt_lookup, "0-1"
      // and "0,1" are one point each (numbers and booleans are recorded as held: 0.0 as 0).
      std::vector<std::string>& values = cfg.sweep[a].values;
      const auto same = std::find(held.begin(), held.end(), as_held);
      if (same != held.end())
        throw Error(ErrorKind::kConfig,
                    "expected distinct values (each is one sweep point), found " + squote(values[j]) +
                        (values[j] == values[static_cast<size_t>(same - held.begin())]
                             ? " again"
                             : ", the same setting as " + squote(values[static_cast<size_t>(same - held.begin())])),
                    val.where(), written.back() + "[" + std::to_string(j) + "]");
      held.push_back(as_held);
      values[j] = canon;
    }
  }
  double points = 1;
  for (const SweepAxis& ax : cfg.sweep) points *= static_cast<double>(ax.values.size());
  if (points > static_cast<double>(kMaxSweepPoints))
    throw Error(ErrorKind::kConfig,
                "expected at most " + std::to_string(kMaxSweepPoints) + " sweep points, found " + to_text(points),
                origin.where(sweep_node), "sweep");
  const PointErrorHandler locate_point = [&](const Error& e, const std::vector<size_t>& digit, const std::string& desc) {
    const std::string detail = " (" + e.field() + ", at sweep point " + desc + ")";
    for (size_t i = 0; i < cfg.sweep.size() && i < value_nodes.size(); ++i) {
      if (!set_by_axis(e.field(), cfg.sweep[i].key)) continue;
      const YamlValue val(&origin, value_nodes[i][digit[i]], YAML::Node(), written[i]);
      throw Error(ErrorKind::kConfig, e.message() + detail, val.where(),
                  written[i] + "[" + std::to_string(digit[i]) + "]");
    }
    const YamlValue at = locate(root, origin, e.field());
    throw Error(ErrorKind::kConfig, e.message() + " (at sweep point " + desc + ")", at.where(), at.path);
  };
  expand_points(cfg, &locate_point);
}

// An empty label is refused. An entry that writes `plugin:` names the drafter the plugin exports in `name:` (or a drafter.name
// sweep does): without one, the error named the default, "found 'prompt_lookup'", which the user
// never wrote; an empty `plugin: ''` was taken as none, and the plugin's name as an unknown
// built-in (until 2026-12-07).
void refuse_empty_labels_and_unnamed_plugins(const YAML::Node& root, const YamlOrigin& origin, const ExperimentConfig& cfg) {
  bool name_swept = false;
  for (const SweepAxis& a : cfg.sweep) name_swept = name_swept || a.key == "drafter.name" || a.key == "drafter.method";
  for (size_t i = 0; i < cfg.drafters.size(); ++i) {
    const std::string entry = "drafters[" + std::to_string(i) + "]";
    // label: "" became the default label without a word (finalize fills in empty labels).
    if (const std::optional<YamlValue> label = find_written(root, origin, entry + ".label");
        label && label->node.IsScalar() && label->node.Scalar().empty())
      throw Error(ErrorKind::kConfig, "expected a non-empty label (or none: the drafter's name), found an empty one",
                  label->where(), label->path);
    const std::optional<YamlValue> plugin = find_written(root, origin, entry + ".plugin");
    if (!plugin) continue;
    if (cfg.drafters[i].options.plugin.empty())
      throw Error(ErrorKind::kConfig,
                  "expected the path of a drafter plugin (a .so file), found an empty one; leave plugin: out for a "
                  "built-in drafter",
                  plugin->where(), plugin->path);
    if (!name_swept && !find_written(root, origin, entry + ".name"))
      throw Error(ErrorKind::kConfig,
                  "expected name: beside plugin: (the drafter " + cfg.drafters[i].options.plugin +
                      " exports, e.g. name: my_drafter), found none",
                  plugin->where(), plugin->path);
  }
}

// A drafter key its entry's drafter does not read (drafter_key_readers: prompt_lookup_max on a
// layer_skip entry, a confidence threshold on prompt_lookup, which copies tokens with no
// probability to gate on) would be ignored, and a `drafter.<key>` sweep that no entry reads gives
// identical points: both were accepted silently. Where the sweep sets what decides who reads a
// key (the name or the plugin: every key; prompt_lookup_first: the prompt_lookup_* keys;
// retrieval_first: the retrieval_* and confidence_* keys), the question is asked of every
// combination of those axes' values, the drafters the points run: a key is refused where no
// point's drafter reads it (until 2026-12-06 such a sweep waived the check, and a key no point
// read was ignored). A plugin's entry may read any key.
void refuse_unread_drafter_keys(const YAML::Node& root, const YamlOrigin& origin, const Ctx& ctx,
                                const ExperimentConfig& cfg) {
  std::set<std::string> swept;  // drafter keys the sweep sets ("params" for drafter.params.<k>)
  std::vector<const SweepAxis*> deciding;
  for (const SweepAxis& a : cfg.sweep) {
    if (!starts_with(a.key, "drafter.")) continue;
    const std::string key = a.key.substr(8);
    swept.insert(starts_with(key, "params.") ? "params" : key);
    if (key == "name" || key == "method" || key == "plugin" || key == "prompt_lookup_first" || key == "retrieval_first")
      deciding.push_back(&a);
  }
  // The entries as the points run them: one set per combination of the deciding axes' values.
  std::vector<std::vector<DrafterOptions>> runs;
  bool models_draft_read = false;  // by an entry at some point (finalize: draft_from_models)
  size_t combos = 1;
  for (const SweepAxis* a : deciding) combos *= a->values.size();
  for (size_t n = 0; n < combos; ++n) {
    ExperimentConfig c = cfg;
    c.sweep.clear();
    size_t rem = n;
    try {
      for (const SweepAxis* a : deciding) {
        const std::string& v = a->values[rem % a->values.size()];
        rem /= a->values.size();
        apply_sweep_value(c, a->key, YamlValue(&origin, YAML::Node(v), YAML::Node(), "sweep." + a->key), ctx);
      }
      finalize(c);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kConfig) throw;
      continue;  // not a point (expanding the sweep has refused it already)
    }
    runs.emplace_back();
    for (const DrafterEntry& e : c.drafters) {
      runs.back().push_back(e.options);
      models_draft_read = models_draft_read || e.draft_from_models;
    }
  }
  // models.draft is read by draft_model entries without a model of their own: with none at any
  // point it was loaded by nothing, silently (until 2026-12-07).
  if (cfg.models.draft && !runs.empty() && !models_draft_read) {
    const YamlValue at = locate(root, origin, "models.draft");
    throw Error(ErrorKind::kConfig,
                "expected models.draft only beside a draft_model drafter that names no draft_model of its own, found "
                "none (no entry at any point reads it)",
                at.where(), at.path);
  }
  // "read by: prompt_lookup, or any drafter with prompt_lookup_first: true"
  const auto readers_text = [](const std::string& key) {
    std::string by;
    for (const std::string& w : drafter_key_readers(key).readers) by += (by.empty() ? "" : ", ") + w;
    if (by.empty()) by = "a plugin's drafter";
    if (starts_with(key, "prompt_lookup_")) by += ", or any drafter with prompt_lookup_first: true";
    if (starts_with(key, "retrieval_") || starts_with(key, "confidence_")) by += ", or any drafter with retrieval_first: true";
    return "read by: " + by;
  };
  for (const SweepAxis& a : cfg.sweep) {
    if (!starts_with(a.key, "drafter.")) continue;
    const std::string key = starts_with(a.key, "drafter.params.") ? "params" : a.key.substr(8);
    if (!drafter_key_readers(key).listed) continue;
    bool read = false;
    for (const auto& run : runs)
      for (const DrafterOptions& o : run) read = read || drafter_reads_key(o, key);
    if (read) continue;
    const YamlValue at = locate(root, origin, "sweep." + a.key);
    throw Error(ErrorKind::kConfig,
                "expected a key that one of the drafters reads, found " + a.key.substr(8) + ", which no " +
                    (runs.size() > 1 ? "sweep point's" : "entry's") + " drafter reads (" + readers_text(key) +
                    "): the sweep's points would be identical",
                at.where(), at.path);
  }
  for (size_t i = 0; i < cfg.drafters.size(); ++i) {
    std::vector<std::string> unread;  // unread at every point
    std::set<std::string> run_names;
    for (size_t r = 0; r < runs.size(); ++r) {
      if (i >= runs[r].size()) continue;
      run_names.insert(runs[r][i].name);
      const std::vector<std::string> keys = unread_drafter_keys(runs[r][i]);
      if (r == 0) {
        unread = keys;
      } else {
        std::vector<std::string> both;
        for (const std::string& k : unread)
          if (std::find(keys.begin(), keys.end(), k) != keys.end()) both.push_back(k);
        unread.swap(both);
      }
    }
    for (const std::string& key : unread) {
      if (swept.count(key)) continue;  // the sweep's values, checked above
      const YamlValue at = locate(root, origin, "drafters[" + std::to_string(i) + "]." + key);
      // `--set drafter.<key>` writes every entry: the entries that do not read it ignore it, as
      // they ignore a `drafter.<key>` sweep (it was refused on the first such entry, so that a
      // config mixing drafters could not take it; until 2026-12-07). One entry must read it.
      if (const std::optional<std::string> label = origin.override_label(at.node);
          label && starts_with(*label, "--set drafter.")) {
        bool read = false;
        for (const auto& run : runs)
          for (const DrafterOptions& o : run) read = read || drafter_reads_key(o, key);
        if (read) continue;
        throw Error(ErrorKind::kConfig,
                    "expected a key that one of the drafters reads, found " + key + ", which no entry's drafter reads (" +
                        readers_text(key) + ")",
                    *label, "drafter." + key);
      }
      std::string names;
      for (const std::string& n : run_names) names += (names.empty() ? "" : ", ") + n;
      throw Error(ErrorKind::kConfig,
                  run_names.size() > 1 ? "expected none: no sweep point's drafter reads it (the points run " + names +
                                             "; " + readers_text(key) + ")"
                                       : "expected none with " + names + ", which does not read it (" +
                                             readers_text(key) + ")",
                  at.where(), at.path);
    }
  }
}

// A confidence_from_token beyond every draft position an entry reaches at any point never applies
// its threshold (it was accepted, inert). The positions an entry reaches: its gamma (under the
// constant and cost schedules) or max_speculative_tokens (heuristic), at every swept value of them;
// for `speclab check`, each of equivalence.gammas. A swept confidence_from_token is left to the
// points.
void refuse_inert_confidence_from_token(const YAML::Node& root, const YamlOrigin& origin, const ExperimentConfig& cfg) {
  const auto axis = [&](const std::string& key) -> const SweepAxis* {
    for (const SweepAxis& a : cfg.sweep)
      if (a.key == "drafter." + key) return &a;
    return nullptr;
  };
  if (axis("confidence_from_token") || axis("confidence_threshold") || axis("schedule")) return;
  const auto most = [&](const std::string& key, int64_t own) {
    const SweepAxis* a = axis(key);
    if (!a) return own;
    int64_t m = 0;
    for (const std::string& v : a->values) {
      int64_t x = 0;
      if (yaml_util::parse_int64(v, x)) m = std::max(m, x);
    }
    return m;
  };
  for (size_t i = 0; i < cfg.drafters.size(); ++i) {
    const DrafterOptions& o = cfg.drafters[i].options;
    if (o.confidence_threshold <= 0.0 || o.confidence_from_token <= 1 || !o.plugin.empty()) continue;
    int64_t reach = 0;
    std::string what;
    if (cfg.use == ConfigUse::kCheck && cfg.equivalence) {
      for (int g : cfg.equivalence->gammas) reach = std::max<int64_t>(reach, g);
      what = "the largest of equivalence.gammas";
    } else {
      // longest_draft()'s key, at its largest swept value.
      const bool by_gamma = o.schedule != "heuristic";
      const std::string key = by_gamma ? "num_speculative_tokens" : "max_speculative_tokens";
      reach = most(key, o.longest_draft());
      what = by_gamma ? (axis(key) ? "the largest swept gamma" : "its gamma")
                      : "its max_speculative_tokens (schedule heuristic)";
    }
    if (o.confidence_from_token <= reach) continue;
    const YamlValue at = locate(root, origin, "drafters[" + std::to_string(i) + "].confidence_from_token");
    throw Error(ErrorKind::kConfig,
                "expected a draft position the entry reaches, at most " + what + " (" + std::to_string(reach) +
                    "), found " + std::to_string(o.confidence_from_token) +
                    ": the confidence threshold would never apply",
                at.where(), at.path);
  }
}

// A top-k or top-p cut where every point decodes greedily (temperature 0, not swept) is never
// applied, and a sweep of it gives identical points: refused, as generate refuses --top-k and
// --top-p under greedy decoding (it was accepted silently). Where the temperature is swept, the
// points above 0 apply it.
void refuse_cuts_under_greedy(const YAML::Node& root, const YamlOrigin& origin, const ExperimentConfig& cfg) {
  for (const SweepAxis& a : cfg.sweep)
    if (a.key == "sampling.temperature")
      for (const std::string& v : a.values)
        if (std::strtod(v.c_str(), nullptr) > 0.0) return;  // a point that samples
  bool temperature_swept = false;
  for (const SweepAxis& a : cfg.sweep) temperature_swept = temperature_swept || a.key == "sampling.temperature";
  if (!cfg.sampling.greedy() && !temperature_swept) return;
  const std::string why = "every point decodes greedily (sampling.temperature 0), where a cut changes nothing; set a "
                          "temperature above 0 to sample, or remove it";
  for (const char* key : {"sampling.top_k", "sampling.top_p"}) {
    const auto axis = std::find_if(cfg.sweep.begin(), cfg.sweep.end(), [&](const SweepAxis& a) { return a.key == key; });
    if (axis == cfg.sweep.end()) continue;
    const YamlValue at = locate(root, origin, "sweep." + std::string(key));
    throw Error(ErrorKind::kConfig, "expected no sweep of " + std::string(key) + ": " + why + " (its points would be identical)",
                at.where(), at.path);
  }
  auto refuse = [&](const std::string& key, const std::string& found) {
    const YamlValue at = locate(root, origin, key);
    throw Error(ErrorKind::kConfig, "expected no cut, found " + found + ": " + why, at.where(), at.path);
  };
  if (cfg.sampling.top_k > 0) refuse("sampling.top_k", "top_k " + std::to_string(cfg.sampling.top_k));
  if (cfg.sampling.top_p < 1.0) refuse("sampling.top_p", "top_p " + to_text(cfg.sampling.top_p));
}

}  // namespace

}  // namespace config

ExperimentConfig load_experiment_config(const std::string& path, const std::vector<std::string>& overrides,
                                        ConfigUse use) {
  return parse_experiment_config(config::load_yaml_text(path), path, overrides, use);
}

void set_output_path(ExperimentConfig& c, const std::string& path) {
  OutputOptions o = c.output;
  o.path = path;
  o.validate();
  c.output = o;
  if (!c.resolved_yaml.empty()) c.resolved_yaml = config::with_output_path(c.resolved_yaml, path);
}

namespace config {

WrittenConfig read_written_config(const std::string& path, const std::vector<std::string>& overrides,
                                  const std::string& sections, const Schema* schema) {
  WrittenConfig w{YamlOrigin(path), YAML::Node()};
  w.root = parse_config_root(load_yaml_text(path), path, w.origin, sections);
  for (const std::string& o : overrides) apply_override(w.root, o, w.origin, schema);
  return w;
}

}  // namespace config

WrittenKey written_key(const std::string& path, const std::vector<std::string>& overrides, const std::string& field) {
  try {
    using namespace config;
    const WrittenConfig w = read_written_config(path, overrides, "models, drafters, prompts, ...");
    const YamlValue at = locate(w.root, w.origin, field);
    // Found only when the key itself is written: locate() returns the nearest written section
    // otherwise, its key that section's and its path completed with the field's remaining keys.
    // A key written under an alias ends the path as written ("drafters[0].gamma").
    if (!at.key.IsDefined() || !at.key.IsScalar()) return {};
    const std::vector<std::string> got = split_key(at.path), want = split_key(field);
    if (got.size() != want.size() || got.back() != at.key.Scalar()) return {};
    return {at.where(), at.path};
  } catch (const Error&) {
    return {};
  }
}

Error located_config_error(const Error& e, const std::string& path, const std::vector<std::string>& overrides) {
  if (e.file() != path || e.field().empty()) return e;
  // A key the sweep sets got its value from the sweep's list, at every point: that list is where
  // the value is written (a bad kv.budget_bytes of a sweep named the file alone, and a bad
  // models.target.path of a sweep the base entry's line).
  try {
    using namespace config;
    const WrittenConfig w = read_written_config(path, overrides, "models, drafters, prompts, ...");
    // drafters[i].<key> is set by a drafter.<key> sweep.
    std::string field = e.field();
    if (starts_with(field, "drafters[")) {
      const size_t close = field.find("].");
      if (close != std::string::npos) field = "drafter." + field.substr(close + 2);
    }
    const YAML::Node sweep = w.root["sweep"];
    if (sweep.IsDefined() && sweep.IsMap())
      for (const auto& kv : sweep)
        if (kv.first.IsScalar() && canonical_sweep_key(kv.first.Scalar()) == field)
          return Error(e.kind(), e.message(), w.origin.where(kv.second), "sweep." + kv.first.Scalar());
  } catch (const Error&) {
  }
  const WrittenKey at = written_key(path, overrides, e.field());
  return at.where.empty() ? e : Error(e.kind(), e.message(), at.where, at.path);
}

ExperimentConfig parse_experiment_config(const std::string& yaml_text, const std::string& source_name,
                                         const std::vector<std::string>& overrides, ConfigUse use) {
  using namespace config;
  YamlOrigin origin(source_name);
  YAML::Node root = parse_config_root(yaml_text, source_name, origin, "models, drafters, prompts, ...");
  refuse_other_config_kind(root, origin, ConfigKind::kExperiment);
  for (const std::string& o : overrides) apply_override(root, o, origin);

  ExperimentConfig cfg;
  cfg.use = use;
  cfg.source_path = source_name;
  cfg.resolved_yaml = emit(root);
  const Ctx ctx{dirname_of(source_name)};
  top_table().read(YamlValue(&origin, root, YAML::Node(), ""), ctx, cfg);
  // A --set of a key the sweep sets never runs (the sweep sets it at every point; it was
  // accepted silently, and /config_yaml showed its value). Found by where the swept key's value
  // came from, so that a --set under another of its names (generation.max_tokens) or of a section
  // holding it (generation={...}) is caught too (until 2026-12-06 only the canonical key's own
  // text was). A drafters entry's key that a drafter.<key> sweep sets is refused wherever it is
  // written (check_sweep_conflicts).
  if (!overrides.empty())
    for (const SweepAxis& a : cfg.sweep) {
      if (starts_with(a.key, "drafter.")) continue;
      const std::optional<YamlValue> at = find_written(root, origin, a.key);
      if (!at) continue;
      if (const std::optional<std::string> label = origin.override_label(at->node)) {
        const std::string axis = locate(root, origin, "sweep." + a.key).path;  // as written
        throw Error(ErrorKind::kConfig,
                    "expected a key the sweep does not set: " + axis + " sets " + at->path +
                        " at every point, so this value would never run; set " + axis + "=[...] instead",
                    *label, at->path);
      }
    }
  finalize(cfg);

  // Struct-level validation: the error names a canonical key path; add where it is written. With
  // a sweep only its points are settings that run: the config without the sweep's values may be
  // invalid where every point is valid (gamma 20 with max_speculative_tokens swept over 20 and 30,
  // or draft_model swept), so its error waits for check_sweep, which validates every point (an
  // error in a key no axis sets fails there too, located at that key). It was refused until
  // 2026-12-05.
  refuse_empty_labels_and_unnamed_plugins(root, origin, cfg);
  try {
    cfg.validate();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kConfig) throw;
    if (cfg.sweep.empty() || starts_with(e.field(), "sweep")) {  // the sweep's own shape: no point can mend it
      const YamlValue at = locate(root, origin, e.field());
      throw Error(ErrorKind::kConfig, e.message(), at.where(), at.path);
    }
  }
  if (!cfg.sweep.empty()) check_sweep(root, origin, ctx, cfg);
  refuse_cuts_under_greedy(root, origin, cfg);
  refuse_unread_drafter_keys(root, origin, ctx, cfg);
  refuse_inert_confidence_from_token(root, origin, cfg);
  return cfg;
}

}  // namespace speclab
