#include "framework/io/experiment_config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/io/yaml_util.h"

namespace speclab {

namespace {

using yaml_util::describe;
using yaml_util::YamlOrigin;
using yaml_util::YamlValue;

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxSweepPoints = 100000;
constexpr size_t kMaxConfigBytes = size_t(16) << 20;
constexpr size_t kMaxPromptFileBytes = size_t(1) << 30;

const std::vector<std::string> kBuiltinDrafters = {"prompt_lookup", "layer_skip", "draft_model"};

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}
std::string dirname_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}
std::string basename_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
std::string squote(const std::string& s) { return "'" + s + "'"; }

// Relative paths in a config are relative to the YAML file's directory.
std::string resolve_path(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || base_dir.empty() || base_dir == ".") return p;
  return base_dir + "/" + p;
}
// A model value with neither '/' nor '.' is a named entry (see models/model_loader.h) and is
// kept as written; anything else is a path.
bool is_named_model(const std::string& p) {
  return !p.empty() && p.find('/') == std::string::npos && p.find('.') == std::string::npos;
}
std::string resolve_model_path(const std::string& base_dir, const std::string& p) {
  return is_named_model(p) ? p : resolve_path(base_dir, p);
}

// ---- schema -------------------------------------------------------------------------------------
// The keys each section accepts (with their HF / vLLM aliases). Used for unknown-key errors and
// suggestions, for `--set` paths, for sweep keys, and to find the YAML node of a key path.

enum class Shape {
  kScalar,        // one value
  kScalarOrList,  // one value or a list of them (stop, files, draft_layers)
  kList,          // a list (equivalence grids)
  kSection,       // a map with its own schema
  kEntries,       // a list of maps with one schema (drafters, prompts.inline)
  kFreeMap,       // a map of free keys to scalars (drafter params)
  kSweep,         // the sweep map: "<section>.<key>" -> [values]
};

struct Schema;
struct KeyDef {
  std::string key;
  std::vector<std::string> aliases;
  Shape shape;
  const Schema* child = nullptr;
  bool names(const std::string& w) const {
    return w == key || std::find(aliases.begin(), aliases.end(), w) != aliases.end();
  }
  bool leaf() const { return shape == Shape::kScalar || shape == Shape::kScalarOrList || shape == Shape::kList; }
};

struct Schema {
  std::string what;  // "sampling", "a drafters entry", ...
  std::vector<KeyDef> keys;
  const KeyDef* find(const std::string& w) const {
    for (const auto& k : keys)
      if (k.names(w)) return &k;
    return nullptr;
  }
  std::vector<std::string> all_names() const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(k.key);
    for (const auto& k : keys) out.insert(out.end(), k.aliases.begin(), k.aliases.end());
    return out;
  }
  std::string key_list() const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(k.key);
    return join(out, ", ");
  }
};

const Schema& source_schema() {
  static const Schema s{"model source", {{"path", {}, Shape::kScalar}, {"format", {}, Shape::kScalar},
                                         {"tokenizer", {}, Shape::kScalar},
                                         {"weights", {}, Shape::kScalar}}};
  return s;
}
const Schema& models_schema() {
  static const Schema s{"models", {{"target", {}, Shape::kSection, &source_schema()},
                                   {"draft", {}, Shape::kSection, &source_schema()}}};
  return s;
}
const Schema& drafter_schema() {
  static const Schema s{
      "drafter",
      {{"label", {}, Shape::kScalar},
       {"name", {"method"}, Shape::kScalar},
       {"plugin", {}, Shape::kScalar},
       {"num_speculative_tokens", {"gamma", "num_assistant_tokens", "prompt_lookup_num_tokens"}, Shape::kScalar},
       {"schedule", {"num_assistant_tokens_schedule"}, Shape::kScalar},
       {"max_speculative_tokens", {}, Shape::kScalar},
       {"confidence_threshold", {"assistant_confidence_threshold"}, Shape::kScalar},
       {"prompt_lookup_min", {}, Shape::kScalar},
       {"prompt_lookup_max", {"max_matching_ngram_size"}, Shape::kScalar},
       {"draft_layers", {}, Shape::kScalarOrList},
       {"draft_layers_first", {"assistant_early_exit"}, Shape::kScalar},
       {"draft_model", {"model"}, Shape::kScalar},
       {"draft_model_format", {}, Shape::kScalar},
       {"params", {}, Shape::kFreeMap}}};
  return s;
}
const Schema& sampling_schema() {
  static const Schema s{"sampling", {{"temperature", {}, Shape::kScalar}, {"top_k", {}, Shape::kScalar},
                                     {"top_p", {}, Shape::kScalar}, {"seed", {}, Shape::kScalar}}};
  return s;
}
const Schema& generation_schema() {
  static const Schema s{"generation", {{"max_new_tokens", {"max_tokens"}, Shape::kScalar},
                                       {"stop", {"stop_strings"}, Shape::kScalarOrList},
                                       {"ignore_eos", {}, Shape::kScalar}}};
  return s;
}
const Schema& inline_schema() {
  static const Schema s{"inline prompt", {{"text", {"prompt"}, Shape::kScalar}, {"category", {}, Shape::kScalar},
                                          {"id", {}, Shape::kScalar}}};
  return s;
}
const Schema& prompts_schema() {
  static const Schema s{"prompts", {{"files", {"file"}, Shape::kScalarOrList},
                                    {"field", {}, Shape::kScalar},
                                    {"category_field", {}, Shape::kScalar},
                                    {"id_field", {}, Shape::kScalar},
                                    {"inline", {}, Shape::kEntries, &inline_schema()},
                                    {"chat", {}, Shape::kScalar},
                                    {"system", {}, Shape::kScalar},
                                    {"limit", {}, Shape::kScalar}}};
  return s;
}
const Schema& kv_schema() {
  static const Schema s{"kv", {{"block_size", {}, Shape::kScalar}, {"budget_bytes", {}, Shape::kScalar},
                               {"preemption", {}, Shape::kScalar}}};
  return s;
}
const Schema& output_schema() {
  static const Schema s{"output", {{"path", {}, Shape::kScalar}}};
  return s;
}
const Schema& equivalence_schema() {
  static const Schema s{"equivalence",
                        {{"greedy", {}, Shape::kScalar},
                         {"analytic", {}, Shape::kScalar},
                         {"sampling", {}, Shape::kScalar},
                         {"samples", {}, Shape::kScalar},
                         {"positions", {}, Shape::kList},
                         {"temperatures", {}, Shape::kList},
                         {"top_ps", {}, Shape::kList},
                         {"top_ks", {}, Shape::kList},
                         {"gammas", {}, Shape::kList},
                         {"alpha", {}, Shape::kScalar},
                         {"control_alpha", {}, Shape::kScalar},
                         {"negative_controls", {}, Shape::kScalar},
                         {"numerical_margin", {}, Shape::kScalar},
                         {"contexts", {}, Shape::kScalar}}};
  return s;
}
const Schema& top_schema() {
  static const Schema s{"top-level section",
                        {{"name", {}, Shape::kScalar},
                         {"models", {}, Shape::kSection, &models_schema()},
                         {"drafters", {}, Shape::kEntries, &drafter_schema()},
                         {"sampling", {}, Shape::kSection, &sampling_schema()},
                         {"generation", {}, Shape::kSection, &generation_schema()},
                         {"prompts", {}, Shape::kSection, &prompts_schema()},
                         {"sweep", {}, Shape::kSweep},
                         {"repeats", {}, Shape::kScalar},
                         {"warmup", {}, Shape::kScalar},
                         {"kv", {}, Shape::kSection, &kv_schema()},
                         {"output", {}, Shape::kSection, &output_schema()},
                         {"equivalence", {}, Shape::kSection, &equivalence_schema()}}};
  return s;
}

// Every key path in the schema ("sampling.temperature", "drafters[i].gamma"), aliases included.
void collect_paths(const Schema& s, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& k : s.keys) {
    std::vector<std::string> names = {k.key};
    names.insert(names.end(), k.aliases.begin(), k.aliases.end());
    for (const auto& n : names) out.emplace_back(n, join_path(prefix, k.key));
    if (k.child) collect_paths(*k.child, join_path(prefix, k.key) + (k.shape == Shape::kEntries ? "[i]" : ""), out);
  }
}

// "did you mean ..." for an unknown key: a near miss in the same section, else the same key in
// another section; otherwise the section's keys.
std::string unknown_key_message(const std::string& written, const Schema& schema, const std::string& section_path) {
  std::string msg = "unknown key " + squote(written);
  if (!section_path.empty()) msg += " in " + section_path;
  const std::string near = yaml_util::closest_match(written, schema.all_names());
  if (!near.empty()) return msg + "; did you mean " + squote(near) + "?";
  std::vector<std::pair<std::string, std::string>> all;
  collect_paths(top_schema(), "", all);
  for (const auto& [name, path] : all)
    if (name == written && path != join_path(section_path, written)) return msg + "; did you mean " + squote(path) + "?";
  return msg + "; expected one of: " + schema.key_list();
}

// Sweep keys: "<section>.<key>" naming a single-valued setting; "drafter.<key>" for every
// drafters entry (aliases allowed, e.g. drafter.gamma); "drafter.params.<name>" for plugins.
std::string canonical_sweep_key(const std::string& written) {
  if (starts_with(written, "drafter.params.") && written.size() > 15) return written;
  const std::vector<std::string> segs = split(written, '.');
  if (segs.size() == 2 && segs[0] == "drafter") {
    const KeyDef* d = drafter_schema().find(segs[1]);
    if (!d || !(d->shape == Shape::kScalar || d->shape == Shape::kScalarOrList) || d->key == "label") return {};
    return "drafter." + d->key;
  }
  const Schema* s = &top_schema();
  std::vector<std::string> canon;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (!s) return {};
    const KeyDef* d = s->find(segs[i]);
    if (!d) return {};
    canon.push_back(d->key);
    if (i + 1 == segs.size()) {
      if (d->shape != Shape::kScalar && d->shape != Shape::kScalarOrList) return {};
    } else if (d->shape == Shape::kSection) {
      s = d->child;
    } else {
      return {};
    }
  }
  return join(canon, ".");
}

// Canonical keys that exist but cannot vary between points: one run writes one file under one
// name, and the equivalence section belongs to `speclab check`. Empty when `key` may be swept.
std::string unsweepable_reason(const std::string& key) {
  if (key == "name" || starts_with(key, "output."))
    return "expected a per-point setting, found " + squote(key) +
           ": one run writes one HDF5 file under one name; run the config once per value instead";
  if (starts_with(key, "equivalence."))
    return "expected a per-point setting, found " + squote(key) +
           ": the equivalence section configures `speclab check`, which does not sweep";
  return {};
}

std::vector<std::string> sweepable_keys() {
  std::vector<std::string> out;
  std::function<void(const Schema&, const std::string&)> walk = [&](const Schema& s, const std::string& prefix) {
    for (const auto& k : s.keys) {
      if (k.shape == Shape::kScalar || k.shape == Shape::kScalarOrList) {
        if (!unsweepable_reason(join_path(prefix, k.key)).empty()) continue;
        out.push_back(join_path(prefix, k.key));
        for (const auto& a : k.aliases) out.push_back(join_path(prefix, a));
      } else if (k.shape == Shape::kSection) {
        walk(*k.child, join_path(prefix, k.key));
      }
    }
  };
  walk(top_schema(), "");
  for (const auto& k : drafter_schema().keys) {
    if ((k.shape != Shape::kScalar && k.shape != Shape::kScalarOrList) || k.key == "label") continue;
    out.push_back("drafter." + k.key);
    for (const auto& a : k.aliases) out.push_back("drafter." + a);
  }
  return out;
}

std::string unknown_sweep_key_message(const std::string& written) {
  std::string msg = "unknown sweep key " + squote(written);
  const std::string near = yaml_util::closest_match(written, sweepable_keys());
  if (!near.empty()) return msg + "; did you mean " + squote(near) + "?";
  return msg + "; expected \"<section>.<key>\" naming a single-valued setting (e.g. sampling.temperature, "
               "generation.max_new_tokens, drafter.num_speculative_tokens for every drafter)";
}

// ---- reading a map section ----------------------------------------------------------------------

class MapReader {
 public:
  MapReader(const YamlValue& v, const Schema& schema) : origin_(v.origin), path_(v.path) {
    if (v.is_null()) return;  // an empty section keeps the defaults
    if (!v.node.IsMap())
      v.fail("expected a map of " + schema.what + " keys (" + schema.key_list() + "), found " + describe(v.node));
    for (auto it = v.node.begin(); it != v.node.end(); ++it) {
      const YAML::Node k = it->first;
      YamlValue kv(origin_, k, YAML::Node(), path_);
      if (!k.IsScalar()) kv.fail("expected a key name, found " + describe(k));
      const std::string written = k.Scalar();
      const KeyDef* def = schema.find(written);
      const std::string kpath = join_path(path_, written);
      if (!def) throw Error(ErrorKind::kConfig, unknown_key_message(written, schema, path_), origin_->where(k), kpath);
      auto prev = entries_.find(def->key);
      if (prev != entries_.end()) {
        const std::string first = origin_->where(prev->second.key);
        const std::string msg = prev->second.written == written
                                    ? "expected each key once, found " + squote(written) + " again (first at " + first + ")"
                                    : "expected one of " + squote(prev->second.written) + " and " + squote(written) +
                                          " (they name the same setting), found both (first at " + first + ")";
        throw Error(ErrorKind::kConfig, msg, origin_->where(k), kpath);
      }
      entries_.emplace(def->key, Entry{written, k, it->second});
    }
  }

  template <class F>
  void with(const std::string& key, F&& f) const {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    const YamlValue v(origin_, it->second.value, it->second.key, join_path(path_, it->second.written));
    f(v);
  }

 private:
  struct Entry {
    std::string written;
    YAML::Node key, value;
  };
  const YamlOrigin* origin_;
  std::string path_;
  std::map<std::string, Entry> entries_;
};

struct Ctx {
  std::string base_dir;  // the YAML file's directory
};

int as_int32(const YamlValue& v) { return static_cast<int>(v.as_int(kI32Min, kI32Max)); }

// "0-5", "0-5,8,10-11", "3", or a list of integers.
std::vector<int64_t> read_layers(const YamlValue& v) {
  std::vector<int64_t> out;
  if (v.node.IsSequence()) {
    for (const YamlValue& x : v.items(false)) out.push_back(x.as_int(-(int64_t(1) << 20), int64_t(1) << 20));
    return out;
  }
  const std::string text = v.as_scalar_text("a list of layer indices or a range like \"0-5\"");
  const std::string expected = "expected layer indices as a list or a range like \"0-5\" or \"0-5,8\", found " + describe(v.node);
  for (const std::string& part : split(text, ',')) {
    const size_t dash = part.find('-', 1);
    int64_t a = 0, b = 0;
    std::string left = part.substr(0, dash), right = dash == std::string::npos ? part : part.substr(dash + 1);
    auto trim = [](std::string s) {
      const size_t b0 = s.find_first_not_of(' '), e0 = s.find_last_not_of(' ');
      return b0 == std::string::npos ? std::string() : s.substr(b0, e0 - b0 + 1);
    };
    left = trim(left);
    right = trim(right);
    if (!yaml_util::parse_int64(left, a) || !yaml_util::parse_int64(right, b) || a < 0 || b < a || b > (1 << 20) ||
        left.find_first_not_of("0123456789") != std::string::npos ||
        right.find_first_not_of("0123456789") != std::string::npos)
      v.fail(expected);
    if (b - a > 4096) v.fail("expected at most 4097 layers in one range, found " + part);
    for (int64_t l = a; l <= b; ++l) out.push_back(l);
  }
  return out;
}

// Byte counts: an integer, or a number with a unit (KB, MB, GB, TB: powers of 1000; KiB, MiB,
// GiB, TiB: powers of 1024; B).
int64_t read_bytes(const YamlValue& v) {
  const std::string text = v.as_scalar_text("a byte count");
  const std::string expected = "expected a byte count such as 2147483648, \"512MiB\" or \"2GiB\", found " + describe(v.node);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' || text[i] == 'e' ||
                             text[i] == 'E' || text[i] == '+' || text[i] == '-'))
    ++i;
  std::string num = text.substr(0, i), unit = text.substr(i);
  while (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  // "1e3" and "2E" are ambiguous only in theory: a unit never starts with e/E.
  double x = 0;
  if (!yaml_util::parse_double(num, x) || !std::isfinite(x) || x < 0) v.fail(expected);
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 0;
  if (u.empty() || u == "b") mult = 1;
  else if (u == "kb") mult = 1e3;
  else if (u == "mb") mult = 1e6;
  else if (u == "gb") mult = 1e9;
  else if (u == "tb") mult = 1e12;
  else if (u == "kib") mult = 1024.0;
  else if (u == "mib") mult = 1024.0 * 1024;
  else if (u == "gib") mult = 1024.0 * 1024 * 1024;
  else if (u == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else v.fail(expected);
  const double bytes = x * mult;
  if (bytes > 4.0e18 || bytes != std::floor(bytes)) v.fail(expected);
  return static_cast<int64_t>(bytes);
}

std::string canonical_drafter_name(const std::string& n) {
  if (n == "ngram") return "prompt_lookup";  // vLLM's method name
  return n;
}

void apply_source(const YamlValue& v, const Ctx& ctx, ModelSource& s) {
  MapReader r(v, source_schema());
  r.with("path", [&](const YamlValue& x) { s.path = resolve_model_path(ctx.base_dir, x.as_string()); });
  r.with("format", [&](const YamlValue& x) { s.format = x.as_string(); });
  r.with("tokenizer", [&](const YamlValue& x) { s.tokenizer = resolve_path(ctx.base_dir, x.as_string()); });
  r.with("weights", [&](const YamlValue& x) {
    s.weights = x.as_string();
    if (s.weights != "native" && s.weights != "f32") x.fail("expected native or f32, found '" + s.weights + "'");
  });
}

void apply_models(const YamlValue& v, const Ctx& ctx, ModelsOptions& m) {
  MapReader r(v, models_schema());
  r.with("target", [&](const YamlValue& x) { apply_source(x, ctx, m.target); });
  r.with("draft", [&](const YamlValue& x) {
    ModelSource s = m.draft.value_or(ModelSource{});
    apply_source(x, ctx, s);
    m.draft = s;
  });
}

void apply_drafter(const YamlValue& v, const Ctx& ctx, DrafterEntry& e) {
  MapReader r(v, drafter_schema());
  DrafterOptions& o = e.options;
  r.with("label", [&](const YamlValue& x) { e.label = x.as_string(); });
  r.with("name", [&](const YamlValue& x) { o.name = canonical_drafter_name(x.as_string()); });
  r.with("plugin", [&](const YamlValue& x) { o.plugin = resolve_path(ctx.base_dir, x.as_string()); });
  r.with("num_speculative_tokens", [&](const YamlValue& x) { o.num_speculative_tokens = as_int32(x); });
  r.with("schedule", [&](const YamlValue& x) { o.schedule = x.as_string(); });
  r.with("max_speculative_tokens", [&](const YamlValue& x) { o.max_speculative_tokens = as_int32(x); });
  r.with("confidence_threshold", [&](const YamlValue& x) { o.confidence_threshold = x.as_double(); });
  r.with("prompt_lookup_min", [&](const YamlValue& x) { o.prompt_lookup_min = as_int32(x); });
  r.with("prompt_lookup_max", [&](const YamlValue& x) { o.prompt_lookup_max = as_int32(x); });
  r.with("draft_layers", [&](const YamlValue& x) { o.draft_layers = read_layers(x); });
  r.with("draft_layers_first", [&](const YamlValue& x) { o.draft_layers_first = x.as_int(kI32Min, kI32Max); });
  r.with("draft_model", [&](const YamlValue& x) {
    o.draft_model = resolve_model_path(ctx.base_dir, x.as_string());
    e.draft_from_models = false;
  });
  r.with("draft_model_format", [&](const YamlValue& x) { o.draft_model_format = x.as_string(); });
  r.with("params", [&](const YamlValue& x) {
    if (x.is_null()) return;
    if (!x.node.IsMap()) x.fail("expected a map of parameter names to values, found " + describe(x.node));
    for (auto it = x.node.begin(); it != x.node.end(); ++it) {
      YamlValue k(x.origin, it->first, YAML::Node(), x.path);
      const std::string name = k.as_scalar_text("a parameter name");
      YamlValue val(x.origin, it->second, it->first, x.path + "." + name);
      o.params[name] = val.as_scalar_text("a single value (plugin parameters are passed as text)");
    }
  });
}

void apply_drafters(const YamlValue& v, const Ctx& ctx, std::vector<DrafterEntry>& out) {
  if (!v.is_null() && !v.node.IsSequence())
    v.fail("expected a list of drafter entries (e.g. - {name: prompt_lookup}), found " + describe(v.node));
  out.clear();
  for (const YamlValue& item : v.items(false)) {
    DrafterEntry e;
    apply_drafter(item, ctx, e);
    out.push_back(std::move(e));
  }
}

void apply_sampling(const YamlValue& v, SamplingOptions& o) {
  MapReader r(v, sampling_schema());
  r.with("temperature", [&](const YamlValue& x) { o.temperature = x.as_double(); });
  r.with("top_k", [&](const YamlValue& x) {
    const int64_t k = x.as_int(kI64Min, kI64Max);
    o.top_k = k == -1 ? 0 : k;  // vLLM writes "off" as -1
  });
  r.with("top_p", [&](const YamlValue& x) { o.top_p = x.as_double(); });
  r.with("seed", [&](const YamlValue& x) { o.seed = x.as_uint64(); });
}

void apply_generation(const YamlValue& v, GenerationOptions& o) {
  MapReader r(v, generation_schema());
  r.with("max_new_tokens", [&](const YamlValue& x) { o.max_new_tokens = x.as_int(kI64Min, kI64Max); });
  r.with("stop", [&](const YamlValue& x) { o.stop = x.as_string_list(true); });
  r.with("ignore_eos", [&](const YamlValue& x) { o.ignore_eos = x.as_bool(); });
}

void apply_prompts(const YamlValue& v, PromptsOptions& o) {
  MapReader r(v, prompts_schema());
  r.with("files", [&](const YamlValue& x) { o.files = x.as_string_list(true); });
  r.with("field", [&](const YamlValue& x) { o.field = x.as_string(); });
  r.with("category_field", [&](const YamlValue& x) { o.category_field = x.as_string(); });
  r.with("id_field", [&](const YamlValue& x) { o.id_field = x.as_string(); });
  r.with("inline", [&](const YamlValue& x) {
    if (!x.is_null() && !x.node.IsSequence())
      x.fail("expected a list of prompts (strings or {text, category, id}), found " + describe(x.node));
    o.inline_prompts.clear();
    for (const YamlValue& item : x.items(false)) {
      InlinePrompt p;
      if (item.node.IsScalar()) {
        p.text = item.node.Scalar();
      } else {
        MapReader pr(item, inline_schema());
        pr.with("text", [&](const YamlValue& y) { p.text = y.as_string(); });
        pr.with("category", [&](const YamlValue& y) { p.category = y.as_string(); });
        pr.with("id", [&](const YamlValue& y) { p.id = y.as_string(); });
      }
      o.inline_prompts.push_back(std::move(p));
    }
  });
  r.with("chat", [&](const YamlValue& x) {
    const std::string t = x.as_scalar_text("auto, on or off");
    bool b = false;
    o.chat = yaml_util::parse_bool(t, b) ? (b ? "on" : "off") : t;
  });
  r.with("system", [&](const YamlValue& x) { o.system = x.as_string(); });
  r.with("limit", [&](const YamlValue& x) { o.limit = x.as_int(kI64Min, kI64Max); });
}

void apply_kv(const YamlValue& v, KvOptions& o) {
  MapReader r(v, kv_schema());
  r.with("block_size", [&](const YamlValue& x) { o.block_size = as_int32(x); });
  r.with("budget_bytes", [&](const YamlValue& x) { o.budget_bytes = read_bytes(x); });
  r.with("preemption", [&](const YamlValue& x) {
    const std::string t = x.as_scalar_text("off or lowest_priority");
    bool b = true;
    if (t == "lowest_priority") o.preemption = Preemption::kLowestPriority;
    else if (yaml_util::parse_bool(t, b) && !b) o.preemption = Preemption::kOff;
    else x.fail("expected off or lowest_priority, found " + describe(x.node));
  });
}

void apply_output(const YamlValue& v, OutputOptions& o) {
  MapReader r(v, output_schema());
  r.with("path", [&](const YamlValue& x) { o.path = x.as_string(); });
}

void apply_equivalence(const YamlValue& v, EquivalenceOptions& o) {
  MapReader r(v, equivalence_schema());
  r.with("greedy", [&](const YamlValue& x) { o.greedy = x.as_bool(); });
  r.with("analytic", [&](const YamlValue& x) { o.analytic = x.as_bool(); });
  r.with("sampling", [&](const YamlValue& x) { o.sampling = x.as_bool(); });
  r.with("samples", [&](const YamlValue& x) { o.samples = x.as_int(kI64Min, kI64Max); });
  r.with("positions", [&](const YamlValue& x) {
    o.positions.clear();
    for (const YamlValue& i : x.items(true)) o.positions.push_back(as_int32(i));
  });
  r.with("temperatures", [&](const YamlValue& x) {
    o.temperatures.clear();
    for (const YamlValue& i : x.items(true)) o.temperatures.push_back(i.as_double());
  });
  r.with("top_ps", [&](const YamlValue& x) {
    o.top_ps.clear();
    for (const YamlValue& i : x.items(true)) o.top_ps.push_back(i.as_double());
  });
  r.with("top_ks", [&](const YamlValue& x) {
    o.top_ks.clear();
    for (const YamlValue& i : x.items(true)) o.top_ks.push_back(i.as_int(kI64Min, kI64Max));
  });
  r.with("gammas", [&](const YamlValue& x) {
    o.gammas.clear();
    for (const YamlValue& i : x.items(true)) o.gammas.push_back(as_int32(i));
  });
  r.with("alpha", [&](const YamlValue& x) { o.alpha = x.as_double(); });
  r.with("control_alpha", [&](const YamlValue& x) { o.control_alpha = x.as_double(); });
  r.with("negative_controls", [&](const YamlValue& x) { o.negative_controls = x.as_bool(); });
  r.with("numerical_margin", [&](const YamlValue& x) { o.numerical_margin = x.as_double(); });
  r.with("contexts", [&](const YamlValue& x) { o.contexts = x.as_int(kI64Min, kI64Max); });
}

void apply_sweep(const YamlValue& v, std::vector<SweepAxis>& out) {
  out.clear();
  if (v.is_null()) return;
  if (!v.node.IsMap())
    v.fail("expected a map of \"<section>.<key>\": [values] (e.g. drafter.gamma: [2, 4, 8]), found " + describe(v.node));
  std::map<std::string, YAML::Node> seen;
  for (auto it = v.node.begin(); it != v.node.end(); ++it) {
    YamlValue kv(v.origin, it->first, YAML::Node(), v.path);
    const std::string written = kv.as_scalar_text("a sweep key");
    const std::string path = "sweep." + written;
    const std::string key = canonical_sweep_key(written);
    if (key.empty()) throw Error(ErrorKind::kConfig, unknown_sweep_key_message(written), v.origin->where(it->first), path);
    if (const std::string why = unsweepable_reason(key); !why.empty())
      throw Error(ErrorKind::kConfig, why, v.origin->where(it->first), path);
    auto prev = seen.find(key);
    if (prev != seen.end())
      throw Error(ErrorKind::kConfig,
                  "expected each sweep key once, found " + squote(key) + " again (first at " +
                      v.origin->where(prev->second) + ")",
                  v.origin->where(it->first), path);
    seen.emplace(key, it->first);
    const YamlValue list(v.origin, it->second, it->first, path);
    if (!list.node.IsSequence()) list.fail("expected a non-empty list of values, found " + describe(list.node));
    if (list.node.size() == 0) list.fail("expected a non-empty list of values, found an empty list");
    SweepAxis axis;
    axis.key = key;
    for (const YamlValue& item : list.items(false)) {
      std::string value = item.as_scalar_text("a single value");
      if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end())
        item.fail("expected distinct values (each is one sweep point), found " + squote(value) + " twice");
      axis.values.push_back(std::move(value));
    }
    out.push_back(std::move(axis));
  }
}

// Applies the keys present in `v` onto `c` (keys that are absent keep their current values).
void apply_top(const YamlValue& v, const Ctx& ctx, ExperimentConfig& c) {
  MapReader r(v, top_schema());
  r.with("name", [&](const YamlValue& x) { c.name = x.as_string(); });
  r.with("models", [&](const YamlValue& x) { apply_models(x, ctx, c.models); });
  r.with("drafters", [&](const YamlValue& x) { apply_drafters(x, ctx, c.drafters); });
  r.with("sampling", [&](const YamlValue& x) { apply_sampling(x, c.sampling); });
  r.with("generation", [&](const YamlValue& x) { apply_generation(x, c.generation); });
  r.with("prompts", [&](const YamlValue& x) { apply_prompts(x, c.prompts); });
  r.with("sweep", [&](const YamlValue& x) { apply_sweep(x, c.sweep); });
  r.with("repeats", [&](const YamlValue& x) { c.repeats = x.as_int(kI64Min, kI64Max); });
  r.with("warmup", [&](const YamlValue& x) { c.warmup = x.as_int(kI64Min, kI64Max); });
  r.with("kv", [&](const YamlValue& x) { apply_kv(x, c.kv); });
  r.with("output", [&](const YamlValue& x) { apply_output(x, c.output); });
  r.with("equivalence", [&](const YamlValue& x) {
    EquivalenceOptions e = c.equivalence.value_or(EquivalenceOptions{});
    apply_equivalence(x, e);
    c.equivalence = e;
  });
}

// Derived values: draft_model drafters without a model of their own take models.draft; entries
// without a label get their drafter name (+ "_2", "_3", ... on clashes).
void finalize(ExperimentConfig& c) {
  for (auto& e : c.drafters) {
    if (e.options.name == "draft_model" && c.models.draft && (e.options.draft_model.empty() || e.draft_from_models)) {
      e.options.draft_model = c.models.draft->path;
      e.options.draft_model_format = c.models.draft->format;
      e.draft_from_models = true;
    }
  }
  std::set<std::string> taken;
  for (const auto& e : c.drafters)
    if (!e.label.empty()) taken.insert(e.label);
  for (auto& e : c.drafters) {
    if (!e.label.empty()) continue;
    std::string label = e.options.name;
    for (int k = 2; taken.count(label); ++k) label = e.options.name + "_" + std::to_string(k);
    e.label = label;
    taken.insert(label);
  }
}

// Applies one sweep value (`val.node`, a scalar) to every place the canonical `key` names.
void apply_sweep_value(ExperimentConfig& c, const std::string& key, const YamlValue& val, const Ctx& ctx) {
  if (starts_with(key, "drafter.")) {
    const std::string sub = key.substr(8);
    for (size_t i = 0; i < c.drafters.size(); ++i) {
      YAML::Node m(YAML::NodeType::Map);
      if (starts_with(sub, "params.")) {
        YAML::Node p(YAML::NodeType::Map);
        p[sub.substr(7)] = val.node;
        m["params"] = p;
      } else {
        m[sub] = val.node;
      }
      apply_drafter(YamlValue(val.origin, m, val.key, "drafters[" + std::to_string(i) + "]"), ctx, c.drafters[i]);
    }
    return;
  }
  const std::vector<std::string> segs = split(key, '.');
  YAML::Node tree = val.node;
  for (size_t j = segs.size(); j-- > 0;) {
    YAML::Node m(YAML::NodeType::Map);
    m[segs[j]] = tree;
    tree.reset(m);
  }
  apply_top(YamlValue(val.origin, tree, val.key, ""), ctx, c);
}

// ---- --set and tree edits -------------------------------------------------------------------

struct SetOp {
  std::string label;             // "--set key=value" (error location)
  std::string key;               // the key as written (error field)
  YAML::Node value;
  YamlOrigin* origin = nullptr;  // where copies of `value` are registered as overrides (optional)
};

[[noreturn]] void set_fail(const SetOp& op, const std::string& msg) {
  throw Error(ErrorKind::kConfig, msg, op.label, op.key);
}

// Sets `written` (naming `def`) in `map`, replacing an entry that names the same setting.
void set_entry(YAML::Node map, const KeyDef& def, const std::string& written, const YAML::Node& value) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && def.names(it->first.Scalar())) {
      map[it->first.Scalar()] = value;
      return;
    }
  }
  map[written] = value;
}

YAML::Node child_map(YAML::Node map, const KeyDef& def, const std::string& written, const SetOp& op,
                     const std::string& here) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar() || !def.names(it->first.Scalar())) continue;
    const std::string k = it->first.Scalar();
    const YAML::Node v = it->second;
    if (v.IsNull()) {
      map[k] = YAML::Node(YAML::NodeType::Map);
      return map[k];
    }
    if (!v.IsMap()) set_fail(op, "expected " + here + " to be a map, found " + describe(v));
    return map[k];
  }
  map[written] = YAML::Node(YAML::NodeType::Map);
  return map[written];
}

YAML::Node find_child(const YAML::Node& map, const KeyDef& def) {
  if (map.IsMap())
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && def.names(it->first.Scalar())) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

bool is_index(const std::string& s, size_t& idx) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  idx = static_cast<size_t>(std::stoul(s));
  return true;
}

// "drafters[1].gamma" -> {"drafters", "1", "gamma"}.
std::vector<std::string> split_key(const std::string& key) {
  std::string k;
  for (char ch : key) {
    if (ch == '[') k += '.';
    else if (ch != ']') k += ch;
  }
  return split(k, '.');
}

void set_in(YAML::Node map, const Schema& schema, const std::vector<std::string>& segs, size_t i, const SetOp& op,
            const std::string& at) {
  const std::string& s = segs[i];
  size_t idx = 0;
  if (s.empty()) set_fail(op, "expected a dotted key such as sampling.temperature, found an empty part");
  if (&schema == &top_schema() && s == "drafter") {
    // drafter.<key>: every drafters entry
    if (i + 1 >= segs.size()) set_fail(op, "expected drafter.<key> (applied to every drafters entry), found 'drafter'");
    if (!drafter_schema().find(segs[i + 1]))
      set_fail(op, unknown_key_message(segs[i + 1], drafter_schema(), "drafter"));
    const YAML::Node list = find_child(map, *top_schema().find("drafters"));
    if (!list.IsSequence() || list.size() == 0)
      set_fail(op, "expected at least one drafters entry to apply " + squote(op.key) + " to, found none");
    for (size_t j = 0; j < list.size(); ++j) {
      YAML::Node e = list[j];
      if (!e.IsMap()) set_fail(op, "expected drafters[" + std::to_string(j) + "] to be a map, found " + describe(e));
      // One copy per entry: a node shared by several entries would be emitted as a YAML anchor.
      SetOp copy = op;
      copy.value.reset(YAML::Clone(op.value));
      if (op.origin) op.origin->add_override(copy.value, op.label);
      set_in(e, drafter_schema(), segs, i + 1, copy, "drafters[" + std::to_string(j) + "]");
    }
    return;
  }
  if (is_index(s, idx)) set_fail(op, "expected a key name after " + squote(at) + ", found index " + s);
  const KeyDef* def = schema.find(s);
  if (!def) set_fail(op, unknown_key_message(s, schema, at));
  const std::string here = join_path(at, s);
  if (i + 1 == segs.size()) {
    set_entry(map, *def, s, op.value);
    return;
  }
  const std::vector<std::string> rest_v(segs.begin() + static_cast<std::ptrdiff_t>(i) + 1, segs.end());
  const std::string rest = join(rest_v, ".");
  switch (def->shape) {
    case Shape::kSection:
      set_in(child_map(map, *def, s, op, here), *def->child, segs, i + 1, op, here);
      return;
    case Shape::kEntries: {
      if (!is_index(segs[i + 1], idx)) set_fail(op, "expected an entry index after " + squote(here) + " (e.g. " + here + ".0), found " + squote(segs[i + 1]));
      YAML::Node list = find_child(map, *def);
      const size_t n = list.IsSequence() ? list.size() : 0;
      if (idx >= n) set_fail(op, "expected an index below " + std::to_string(n) + " for " + here + ", found " + segs[i + 1]);
      const std::string item = here + "[" + segs[i + 1] + "]";
      if (i + 2 == segs.size()) {
        list[idx] = op.value;
        return;
      }
      YAML::Node e = list[idx];
      if (!e.IsMap()) set_fail(op, "expected " + item + " to be a map, found " + describe(e));
      set_in(e, *def->child, segs, i + 2, op, item);
      return;
    }
    case Shape::kFreeMap:
      child_map(map, *def, s, op, here)[rest] = op.value;
      return;
    case Shape::kSweep: {
      const std::string key = canonical_sweep_key(rest);
      if (key.empty()) set_fail(op, unknown_sweep_key_message(rest));
      if (const std::string why = unsweepable_reason(key); !why.empty()) set_fail(op, why);
      YAML::Node sw = child_map(map, *def, s, op, here);
      for (auto it = sw.begin(); it != sw.end(); ++it) {
        if (it->first.IsScalar() && canonical_sweep_key(it->first.Scalar()) == key) {
          sw[it->first.Scalar()] = op.value;
          return;
        }
      }
      sw[rest] = op.value;
      return;
    }
    default:
      set_fail(op, "expected " + here + " to be the last part of the key (it is a single setting), found more: " + squote(rest));
  }
}

void apply_override(YAML::Node root, const std::string& arg, YamlOrigin& origin) {
  const std::string label = "--set " + arg;
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(ErrorKind::kConfig, "expected key=value (e.g. sampling.temperature=0.7), found " + squote(arg), label);
  SetOp op;
  op.label = label;
  op.key = arg.substr(0, eq);
  try {
    op.value = YAML::Load(arg.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw Error(ErrorKind::kConfig, "expected a YAML value after '=', found malformed YAML: " + e.msg, label, op.key);
  }
  origin.add_override(op.value, label);
  op.origin = &origin;
  set_in(root, top_schema(), split_key(op.key), 0, op, "");
}

// ---- locating a key path in the tree ----------------------------------------------------------

// The node at a canonical key path ("drafters[1].num_speculative_tokens", "sweep.drafter.gamma")
// as written in the tree (aliases followed), or the deepest node that exists on the way; and the
// path with the keys spelled as written.
YamlValue locate(const YAML::Node& root, const YamlOrigin& origin, const std::string& path) {
  std::vector<std::string> segs = split_key(path);
  YAML::Node cur = root;
  YAML::Node key;
  std::string written;
  const Schema* schema = &top_schema();
  size_t i = 0;
  for (; i < segs.size(); ++i) {
    size_t idx = 0;
    if (is_index(segs[i], idx)) {
      if (!cur.IsSequence() || idx >= cur.size()) break;
      YAML::Node next = cur[idx];
      cur.reset(next);
      key.reset(YAML::Node());
      written += "[" + segs[i] + "]";
      continue;
    }
    if (!schema || !cur.IsMap()) break;
    const KeyDef* def = schema->find(segs[i]);
    if (!def) break;
    bool found = false;
    for (auto it = cur.begin(); it != cur.end(); ++it) {
      if (it->first.IsScalar() && def->names(it->first.Scalar())) {
        written = join_path(written, it->first.Scalar());
        key.reset(it->first);
        YAML::Node next = it->second;
        cur.reset(next);
        found = true;
        break;
      }
    }
    if (!found) break;
    if ((def->shape == Shape::kSweep || def->shape == Shape::kFreeMap) && i + 1 < segs.size()) {
      const std::string rest = join(std::vector<std::string>(segs.begin() + static_cast<std::ptrdiff_t>(i) + 1, segs.end()), ".");
      i = segs.size();
      if (!cur.IsMap()) {
        written += "." + rest;
        break;
      }
      for (auto it = cur.begin(); it != cur.end(); ++it) {
        if (!it->first.IsScalar()) continue;
        const std::string k = it->first.Scalar();
        if (def->shape == Shape::kSweep ? canonical_sweep_key(k) == rest : k == rest) {
          written += "." + k;
          key.reset(it->first);
          YAML::Node next = it->second;
          cur.reset(next);
          return YamlValue(&origin, cur, key, written);
        }
      }
      written += "." + rest;
      break;
    }
    schema = def->child;
  }
  for (; i < segs.size(); ++i) {
    size_t idx = 0;
    written += is_index(segs[i], idx) ? "[" + segs[i] + "]" : (written.empty() ? "" : ".") + segs[i];
  }
  return YamlValue(&origin, cur, key, written);
}

// ---- validation helpers ---------------------------------------------------------------------

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

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

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

std::string emit(const YAML::Node& n) {
  YAML::Emitter out;
  out << n;
  return std::string(out.c_str()) + "\n";
}

// The resolved YAML text of one sweep point: the experiment's with the values set and no sweep.
std::string point_yaml(const std::string& resolved, const std::map<std::string, std::string>& values) {
  if (resolved.empty()) return {};
  YAML::Node root = YAML::Load(resolved);
  if (!root.IsMap()) return resolved;
  root.remove("sweep");
  for (const auto& [k, v] : values) {
    SetOp op;
    op.label = "sweep";
    op.key = k;
    op.value = YAML::Node(v);
    set_in(root, top_schema(), split_key(k), 0, op, "");
  }
  return emit(root);
}

// ---- prompts ----------------------------------------------------------------------------------

std::string read_prompt_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(ErrorKind::kIo, "cannot open the prompt file: no such file (relative paths are relative to the config file)",
                path, "prompts.files");
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::kIo, "expected a JSONL file, found a directory or device", path, "prompts.files");
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are, and .gz files decompressed
  if (!f) throw Error(ErrorKind::kIo, "cannot open the prompt file", path, "prompts.files");
  std::string out;
  std::vector<char> buf(1 << 16);
  for (;;) {
    const int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw Error(ErrorKind::kBadInput, "cannot decompress the prompt file: " + msg, path, "prompts.files");
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > kMaxPromptFileBytes) {
      gzclose(f);
      throw Error(ErrorKind::kBadInput, "expected at most 1 GiB of prompt text, found more", path, "prompts.files");
    }
    out.append(buf.data(), static_cast<size_t>(n));
  }
  const int rc = gzclose(f);
  if (rc != Z_OK) throw Error(ErrorKind::kBadInput, "cannot decompress the prompt file (truncated?)", path, "prompts.files");
  return out;
}

// The value at a dotted path ("turns.0": key "turns", then array index 0), or nullptr.
const nlohmann::json* json_at(const nlohmann::json& j, const std::string& dotted) {
  const nlohmann::json* cur = &j;
  for (const std::string& seg : split(dotted, '.')) {
    size_t idx = 0;
    if (cur->is_object()) {
      auto it = cur->find(seg);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array() && is_index(seg, idx) && idx < cur->size()) {
      cur = &(*cur)[idx];
    } else {
      return nullptr;
    }
  }
  return cur;
}

std::string json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    default: return "a number";
  }
}

std::string json_keys(const nlohmann::json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end() && keys.size() < 12; ++it) keys.push_back(it.key());
  return keys.empty() ? "none" : join(keys, ", ");
}

// A prompt field: the text must be a string; ids and categories may also be numbers.
std::string json_field(const nlohmann::json& j, const std::string& field, const std::string& setting, bool allow_number,
                       const std::string& where) {
  const nlohmann::json* v = json_at(j, field);
  if (!v)
    throw Error(ErrorKind::kBadInput,
                "expected a " + std::string(allow_number ? "string or number" : "string") + " at key " + squote(field) +
                    " (prompts." + setting + "), found no such key (keys on this line: " + json_keys(j) + ")",
                where, field);
  if (v->is_string()) return v->get<std::string>();
  if (allow_number && v->is_number()) return v->dump();
  throw Error(ErrorKind::kBadInput,
              "expected a " + std::string(allow_number ? "string or number" : "string") + " at key " + squote(field) +
                  " (prompts." + setting + "), found " + json_kind(*v),
              where, field);
}

// ---- sweep expansion -------------------------------------------------------------------------

// Called with a point's validation error, the point's value index per axis and "k=v, ..."; it
// throws. Without one, the error names the point's values.
using PointErrorHandler = std::function<void(const Error&, const std::vector<size_t>&, const std::string&)>;

std::vector<SweepPoint> expand_points(const ExperimentConfig& config, const PointErrorHandler* on_error) {
  std::vector<SweepPoint> out;
  int64_t total = 1;
  for (const SweepAxis& a : config.sweep) {
    if (a.values.empty())
      throw Error(ErrorKind::kConfig, "expected a non-empty list of values, found an empty list", config.source_path,
                  "sweep." + a.key);
    if (total > kMaxSweepPoints / static_cast<int64_t>(a.values.size()))
      throw Error(ErrorKind::kConfig, "expected at most " + std::to_string(kMaxSweepPoints) + " sweep points, found more",
                  config.source_path, "sweep");
    total *= static_cast<int64_t>(a.values.size());
  }
  YamlOrigin origin(config.source_path);
  const Ctx ctx{dirname_of(config.source_path)};
  out.reserve(static_cast<size_t>(total));
  for (int64_t index = 0; index < total; ++index) {
    SweepPoint pt;
    pt.index = index;
    pt.config = config;
    pt.config.sweep.clear();
    // Mixed radix, last axis fastest: the first listed axis is the outermost loop.
    std::vector<size_t> digit(config.sweep.size());
    int64_t rem = index;
    for (size_t a = config.sweep.size(); a-- > 0;) {
      const int64_t n = static_cast<int64_t>(config.sweep[a].values.size());
      digit[a] = static_cast<size_t>(rem % n);
      rem /= n;
    }
    std::string desc;
    for (size_t a = 0; a < config.sweep.size(); ++a) {
      const SweepAxis& ax = config.sweep[a];
      const std::string& v = ax.values[digit[a]];
      pt.values[ax.key] = v;
      desc += (desc.empty() ? "" : ", ") + ax.key + "=" + v;
    }
    try {
      for (size_t a = 0; a < config.sweep.size(); ++a) {
        const SweepAxis& ax = config.sweep[a];
        apply_sweep_value(pt.config, ax.key,
                          YamlValue(&origin, YAML::Node(ax.values[digit[a]]), YAML::Node(), "sweep." + ax.key), ctx);
      }
      finalize(pt.config);
      pt.config.validate();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kConfig) throw;
      if (on_error) (*on_error)(e, digit, desc);
      throw Error(ErrorKind::kConfig, e.message() + " (sweep point " + std::to_string(index) + ": " + desc + ")",
                  config.source_path, e.field());
    }
    pt.config.resolved_yaml = point_yaml(config.resolved_yaml, pt.values);
    out.push_back(std::move(pt));
  }
  return out;
}

// The key node (not the value) of `def` in `map`; null when absent.
YAML::Node find_key(const YAML::Node& map, const KeyDef& def) {
  if (map.IsMap())
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && def.names(it->first.Scalar())) return it->first;
  return YAML::Node(YAML::NodeType::Undefined);
}

// A drafter entry that writes a key which a drafter.<key> sweep sets on every entry: the value
// written would never run (while the recorded config still shows it), so it is an error at the
// written key. (A top-level key such as sampling.temperature may be written and swept: the
// written value is the base that each point replaces, as documented in docs/config.md.)
void check_sweep_conflicts(const YAML::Node& root, const YamlOrigin& origin, const std::vector<SweepAxis>& sweep) {
  auto conflict = [&](const YAML::Node& key, const std::string& written, const std::string& axis) {
    throw Error(ErrorKind::kConfig,
                "expected the drafters entries to leave this key to sweep." + axis +
                    ", which sets it on every entry at every point; found it written here (remove it here or "
                    "from the sweep)",
                origin.where(key), written);
  };
  const YAML::Node list = find_child(root, *top_schema().find("drafters"));
  if (!list.IsSequence()) return;
  for (const SweepAxis& ax : sweep) {
    const std::vector<std::string> segs = split(ax.key, '.');
    if (segs.size() < 2 || segs[0] != "drafter") continue;
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node entry = list[i];
      const std::string at = "drafters[" + std::to_string(i) + "].";
      if (segs[1] == "params") {
        const YAML::Node params = find_child(entry, *drafter_schema().find("params"));
        const std::string name = ax.key.substr(std::string("drafter.params.").size());
        if (params.IsMap())
          for (auto it = params.begin(); it != params.end(); ++it)
            if (it->first.IsScalar() && it->first.Scalar() == name) conflict(it->first, at + "params." + name, ax.key);
        continue;
      }
      const KeyDef* def = drafter_schema().find(segs[1]);
      const YAML::Node key = def ? find_key(entry, *def) : YAML::Node();
      if (key.IsDefined() && !key.IsNull()) conflict(key, at + key.Scalar(), ax.key);
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

}  // namespace

// ---- validate() -------------------------------------------------------------------------------

void ModelsOptions::validate() const {
  under("target", [&] { target.validate(); });
  if (draft) under("draft", [&] { draft->validate(); });
}

void PromptsOptions::validate() const {
  if (files.empty() && inline_prompts.empty())
    bad("prompts", "files", "expected at least one prompt source (files or inline), found none");
  for (const auto& f : files)
    if (!ends_with(f, ".jsonl") && !ends_with(f, ".jsonl.gz"))
      bad("prompts", "files", "expected a .jsonl or .jsonl.gz file, found " + squote(f));
  for (const auto& [name, value] : {std::make_pair("field", field), std::make_pair("category_field", category_field),
                                    std::make_pair("id_field", id_field)}) {
    if (std::string(name) == "field" && value.empty()) bad("prompts", name, "expected a JSON key, found nothing");
    if (!value.empty())
      for (const auto& seg : split(value, '.'))
        if (seg.empty()) bad("prompts", name, "expected a dotted key path such as turns.0, found " + squote(value));
  }
  for (size_t i = 0; i < inline_prompts.size(); ++i)
    if (inline_prompts[i].text.empty())
      bad("prompts", "inline[" + std::to_string(i) + "].text", "expected non-empty prompt text, found nothing");
  if (chat != "auto" && chat != "on" && chat != "off")
    bad("prompts", "chat", "expected auto, on or off, found " + squote(chat));
  if (limit < 0) bad("prompts", "limit", "expected a count >= 0 (0 = all), found " + std::to_string(limit));
}

void OutputOptions::validate() const {
  if (path.empty()) bad("output", "path", "expected an HDF5 file path, found nothing");
  if (!ends_with(path, ".h5") && !ends_with(path, ".hdf5"))
    bad("output", "path", "expected a path ending in .h5 or .hdf5, found " + squote(path));
}

void EquivalenceOptions::validate() const {
  const std::string s = "equivalence";
  if (!greedy && !analytic && !sampling)
    bad(s, "greedy", "expected at least one of greedy, analytic, sampling to be true, found all false");
  if (samples < 1 || samples > (int64_t(1) << 40))
    bad(s, "samples", "expected a sample count in [1, 2^40], found " + std::to_string(samples));
  if (positions.empty()) bad(s, "positions", "expected a non-empty list, found an empty list");
  for (int m : positions)
    if (m < 1 || m > 16) bad(s, "positions", "expected positions in 1..16, found " + std::to_string(m));
  if (temperatures.empty()) bad(s, "temperatures", "expected a non-empty list, found an empty list");
  for (double t : temperatures)
    if (!(t > 0.0) || !std::isfinite(t))
      bad(s, "temperatures", "expected finite temperatures > 0 (greedy is checked by `greedy`), found " + num(t));
  if (top_ps.empty()) bad(s, "top_ps", "expected a non-empty list, found an empty list");
  for (double p : top_ps)
    if (!(p > 0.0 && p <= 1.0)) bad(s, "top_ps", "expected top_p values in (0, 1], found " + num(p));
  if (top_ks.empty()) bad(s, "top_ks", "expected a non-empty list, found an empty list");
  for (int64_t k : top_ks)
    if (k < 0) bad(s, "top_ks", "expected top_k values >= 0 (0 = off), found " + std::to_string(k));
  if (gammas.empty()) bad(s, "gammas", "expected a non-empty list, found an empty list");
  for (int g : gammas)
    if (g < 1 || g > 64) bad(s, "gammas", "expected gamma values in 1..64, found " + std::to_string(g));
  if (!(alpha > 0.0 && alpha < 1.0)) bad(s, "alpha", "expected a significance level in (0, 1), found " + num(alpha));
  if (!(control_alpha > 0.0 && control_alpha < 1.0))
    bad(s, "control_alpha", "expected a significance level in (0, 1), found " + num(control_alpha));
  if (!(numerical_margin >= 0.0) || !std::isfinite(numerical_margin))
    bad(s, "numerical_margin", "expected a finite margin >= 0 (0 = the default tolerance), found " + num(numerical_margin));
  if (contexts < 1 || contexts > 100000)
    bad(s, "contexts", "expected a number of contexts in [1, 100000], found " + std::to_string(contexts));
}

void ExperimentConfig::validate() const {
  if (name.empty()) bad("", "name", "expected a non-empty experiment name, found nothing");
  under("models", [&] { models.validate(); });
  std::map<std::string, size_t> labels;
  for (size_t i = 0; i < drafters.size(); ++i) {
    const DrafterEntry& d = drafters[i];
    const std::string p = "drafters[" + std::to_string(i) + "]";
    under(p, [&] { d.options.validate(); });
    if (d.label.empty()) bad("", p + ".label", "expected a non-empty label, found nothing");
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
        std::find(kBuiltinDrafters.begin(), kBuiltinDrafters.end(), o.name) == kBuiltinDrafters.end()) {
      const std::string near = yaml_util::closest_match(o.name, kBuiltinDrafters);
      bad("", p + ".name",
          "expected a built-in drafter (" + join(kBuiltinDrafters, ", ") + ") or a plugin path in plugin:, found " +
              squote(o.name) + (near.empty() ? "" : "; did you mean " + squote(near) + "?"));
    }
    if (o.name == "draft_model" && o.plugin.empty() && o.draft_model.empty())
      bad("", p + ".draft_model",
          "expected a draft model path or named entry (here or in models.draft), found nothing");
    if (!o.draft_layers.empty() && o.draft_layers_first > 0)
      bad("", p + ".draft_layers", "expected either draft_layers or draft_layers_first, found both");
  }
  under("sampling", [&] { sampling.validate(); });
  under("generation", [&] { generation.validate(); });
  under("prompts", [&] { prompts.validate(); });
  under("kv", [&] { kv.validate(); });
  under("output", [&] { output.validate(); });
  if (equivalence) under("equivalence", [&] { equivalence->validate(); });
  if (repeats < 1) bad("", "repeats", "expected a count >= 1, found " + std::to_string(repeats));
  if (warmup < 0) bad("", "warmup", "expected a count >= 0, found " + std::to_string(warmup));
  std::set<std::string> keys;
  for (const SweepAxis& a : sweep) {
    const std::string p = "sweep." + a.key;
    if (canonical_sweep_key(a.key) != a.key) bad("", p, unknown_sweep_key_message(a.key));
    if (const std::string why = unsweepable_reason(a.key); !why.empty()) bad("", p, why);
    if (!keys.insert(a.key).second) bad("", p, "expected each sweep key once, found it twice");
    if (a.values.empty()) bad("", p, "expected a non-empty list of values, found an empty list");
    if (starts_with(a.key, "drafter.") && drafters.empty())
      bad("", p, "expected at least one drafters entry to apply it to, found none");
  }
}

// ---- loading ----------------------------------------------------------------------------------

ExperimentConfig load_experiment_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_experiment_config(load_yaml_text(path), path, overrides);
}

namespace {
std::string canonical_sweep_value(const ExperimentConfig& c, const std::string& key, const std::string& written);
}  // namespace

ExperimentConfig parse_experiment_config(const std::string& yaml_text, const std::string& source_name,
                                         const std::vector<std::string>& overrides) {
  YamlOrigin origin(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const std::string loc = e.mark.is_null() ? source_name
                                             : source_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                                                   std::to_string(e.mark.column + 1);
    throw Error(ErrorKind::kConfig, "malformed YAML: " + e.msg, loc);
  }
  if (!root.IsDefined() || root.IsNull())
    throw Error(ErrorKind::kConfig, "expected a map of sections (models, drafters, prompts, ...), found an empty document",
                source_name);
  if (!root.IsMap())
    throw Error(ErrorKind::kConfig, "expected a map of sections (models, drafters, prompts, ...), found " + describe(root),
                origin.where(root));
  for (const std::string& o : overrides) apply_override(root, o, origin);

  ExperimentConfig cfg;
  cfg.source_path = source_name;
  cfg.resolved_yaml = emit(root);
  const Ctx ctx{dirname_of(source_name)};
  apply_top(YamlValue(&origin, root, YAML::Node(), ""), ctx, cfg);
  finalize(cfg);

  // Struct-level validation: the error names a canonical key path; add where it is written.
  try {
    cfg.validate();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kConfig) throw;
    const YamlValue at = locate(root, origin, e.field());
    throw Error(ErrorKind::kConfig, e.message(), at.where(), at.path);
  }

  if (cfg.sweep.empty()) return cfg;
  check_sweep_conflicts(root, origin, cfg.sweep);
  // Sweep values: types first, each located at its value in the sweep list...
  const YAML::Node sweep_node = find_child(root, *top_schema().find("sweep"));
  std::vector<std::string> written;
  std::vector<std::vector<YAML::Node>> value_nodes;
  size_t a = 0;
  for (auto it = sweep_node.begin(); it != sweep_node.end(); ++it, ++a) {
    written.push_back("sweep." + it->first.Scalar());
    value_nodes.emplace_back();
    for (size_t j = 0; j < it->second.size(); ++j) {
      value_nodes.back().push_back(it->second[j]);
      const YamlValue val(&origin, it->second[j], YAML::Node(), written.back());
      std::string canon;
      try {
        ExperimentConfig c = cfg;
        apply_sweep_value(c, cfg.sweep[a].key, val, ctx);
        canon = canonical_sweep_value(c, cfg.sweep[a].key, cfg.sweep[a].values[j]);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kConfig) throw;
        throw Error(ErrorKind::kConfig, e.message(), val.where(), written.back());
      }
      // Numbers by value: 0 and 0.0 are one point, recorded as 0.
      std::vector<std::string>& values = cfg.sweep[a].values;
      if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(j), canon) !=
          values.begin() + static_cast<std::ptrdiff_t>(j))
        throw Error(ErrorKind::kConfig,
                    "expected distinct values (each is one sweep point), found " + squote(values[j]) + ", which is " +
                        squote(canon) + " again",
                    val.where(), written.back() + "[" + std::to_string(j) + "]");
      values[j] = canon;
    }
  }
  // ...then every point of the product, since values are only valid together (gamma and
  // max_speculative_tokens). An error is located at the value of the axis that sets the key at
  // fault, else at the sweep section.
  double points = 1;
  for (const SweepAxis& ax : cfg.sweep) points *= static_cast<double>(ax.values.size());
  if (points > static_cast<double>(kMaxSweepPoints))
    throw Error(ErrorKind::kConfig,
                "expected at most " + std::to_string(kMaxSweepPoints) + " sweep points, found " + num(points),
                origin.where(sweep_node), "sweep");
  const PointErrorHandler locate_point = [&](const Error& e, const std::vector<size_t>& digit, const std::string& desc) {
    const std::string detail = " (" + e.field() + ", at sweep point " + desc + ")";
    for (size_t i = 0; i < cfg.sweep.size() && i < value_nodes.size(); ++i) {
      if (!set_by_axis(e.field(), cfg.sweep[i].key)) continue;
      const YamlValue val(&origin, value_nodes[i][digit[i]], YAML::Node(), written[i]);
      throw Error(ErrorKind::kConfig, e.message() + detail, val.where(), written[i]);
    }
    const YamlValue at = locate(root, origin, e.field());
    throw Error(ErrorKind::kConfig, e.message() + " (at sweep point " + desc + ")", at.where(), at.path);
  };
  expand_points(cfg, &locate_point);
  return cfg;
}

std::vector<SweepPoint> expand_sweep(const ExperimentConfig& config) { return expand_points(config, nullptr); }

std::string effective_config_yaml(const ExperimentConfig& c) {
  // Paths absolute and normalised, so the text does not depend on how the config path was typed
  // or the working directory (named models stay as written).
  auto abs = [](const std::string& p) {
    if (p.empty() || is_named_model(p)) return p;
    std::error_code ec;
    const std::filesystem::path a = std::filesystem::absolute(p, ec);
    return ec ? p : a.lexically_normal().string();
  };
  // Doubles in the shortest text that reads back to the same value (0.7, not 0.69999999999999996).
  auto real = [](double v) {
    char buf[32];
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    return std::string(buf);
  };
  auto seq = [&](const auto& items) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& x : items) {
      if constexpr (std::is_floating_point_v<std::decay_t<decltype(x)>>)
        n.push_back(real(x));
      else
        n.push_back(x);
    }
    n.SetStyle(YAML::EmitterStyle::Flow);
    return n;
  };
  auto source = [&](const ModelSource& s) {
    YAML::Node m;
    m["path"] = abs(s.path);
    m["format"] = s.format;
    m["tokenizer"] = abs(s.tokenizer);
    m["weights"] = s.weights;
    return m;
  };
  YAML::Node n;
  n["name"] = c.name;
  n["models"]["target"] = source(c.models.target);
  if (c.models.draft) n["models"]["draft"] = source(*c.models.draft);
  n["drafters"] = YAML::Node(YAML::NodeType::Sequence);
  for (const DrafterEntry& e : c.drafters) {
    const DrafterOptions& o = e.options;
    YAML::Node d;
    d["label"] = e.label;
    d["name"] = o.name;
    d["plugin"] = abs(o.plugin);
    d["num_speculative_tokens"] = o.num_speculative_tokens;
    d["schedule"] = o.schedule;
    d["max_speculative_tokens"] = o.max_speculative_tokens;
    d["confidence_threshold"] = real(o.confidence_threshold);
    d["prompt_lookup_min"] = o.prompt_lookup_min;
    d["prompt_lookup_max"] = o.prompt_lookup_max;
    d["draft_layers"] = seq(o.draft_layers);
    d["draft_layers_first"] = o.draft_layers_first;
    d["draft_model"] = abs(o.draft_model);
    d["draft_model_format"] = o.draft_model_format;
    YAML::Node params(YAML::NodeType::Map);
    for (const auto& [k, v] : o.params) params[k] = v;
    d["params"] = params;
    n["drafters"].push_back(d);
  }
  n["sampling"]["temperature"] = real(c.sampling.temperature);
  n["sampling"]["top_k"] = c.sampling.top_k;
  n["sampling"]["top_p"] = real(c.sampling.top_p);
  n["sampling"]["seed"] = c.sampling.seed;
  n["generation"]["max_new_tokens"] = c.generation.max_new_tokens;
  n["generation"]["stop"] = seq(c.generation.stop);
  n["generation"]["ignore_eos"] = c.generation.ignore_eos;
  const PromptsOptions& p = c.prompts;
  std::vector<std::string> files;
  const std::string base = c.source_path.empty() ? std::string(".") : dirname_of(c.source_path);
  for (const std::string& f : p.files) files.push_back(abs(resolve_path(base, f)));
  n["prompts"]["files"] = seq(files);
  n["prompts"]["field"] = p.field;
  n["prompts"]["category_field"] = p.category_field;
  n["prompts"]["id_field"] = p.id_field;
  n["prompts"]["inline"] = YAML::Node(YAML::NodeType::Sequence);
  for (const InlinePrompt& ip : p.inline_prompts) {
    YAML::Node i;
    i["id"] = ip.id;
    i["category"] = ip.category;
    i["text"] = ip.text;
    n["prompts"]["inline"].push_back(i);
  }
  n["prompts"]["chat"] = p.chat;
  n["prompts"]["system"] = p.system;
  n["prompts"]["limit"] = p.limit;
  n["sweep"] = YAML::Node(YAML::NodeType::Map);
  for (const SweepAxis& a : c.sweep) n["sweep"][a.key] = seq(a.values);
  n["repeats"] = c.repeats;
  n["warmup"] = c.warmup;
  n["kv"]["block_size"] = c.kv.block_size;
  n["kv"]["budget_bytes"] = c.kv.budget_bytes;
  n["kv"]["preemption"] = c.kv.preemption == Preemption::kLowestPriority ? "lowest_priority" : "off";
  n["output"]["path"] = c.output.path;
  if (c.equivalence) {
    const EquivalenceOptions& q = *c.equivalence;
    YAML::Node e;
    e["greedy"] = q.greedy;
    e["analytic"] = q.analytic;
    e["sampling"] = q.sampling;
    e["samples"] = q.samples;
    e["positions"] = seq(q.positions);
    e["temperatures"] = seq(q.temperatures);
    e["top_ps"] = seq(q.top_ps);
    e["top_ks"] = seq(q.top_ks);
    e["gammas"] = seq(q.gammas);
    e["alpha"] = real(q.alpha);
    e["control_alpha"] = real(q.control_alpha);
    e["negative_controls"] = q.negative_controls;
    e["numerical_margin"] = real(q.numerical_margin);
    e["contexts"] = q.contexts;
    n["equivalence"] = e;
  }
  return emit(n);
}

namespace {

void flatten(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    if (n.size() == 0) out[path] = "{}";
    for (auto it = n.begin(); it != n.end(); ++it)
      flatten(it->second, path.empty() ? it->first.as<std::string>() : path + "." + it->first.as<std::string>(), out);
  } else if (n.IsSequence()) {
    if (n.size() == 0) out[path] = "[]";
    for (size_t i = 0; i < n.size(); ++i) flatten(n[i], path + "[" + std::to_string(i) + "]", out);
  } else {
    out[path] = n.IsScalar() ? n.Scalar() : "~";
  }
}

std::map<std::string, std::string> flat_yaml(const std::string& text) {
  std::map<std::string, std::string> out;
  if (text.empty()) return out;
  try {
    flatten(YAML::Load(text), "", out);
  } catch (const YAML::Exception&) {
    out["(unparsable YAML)"] = text;
  }
  return out;
}

// A numeric sweep value as the setting holds it (0.0 -> 0, 1e3 -> 1000); other values as written.
std::string canonical_sweep_value(const ExperimentConfig& c, const std::string& key, const std::string& written) {
  char* end = nullptr;
  std::strtod(written.c_str(), &end);
  if (written.empty() || end != written.c_str() + written.size()) return written;
  const std::string path =
      starts_with(key, "drafter.") ? (c.drafters.empty() ? key : "drafters[0]." + key.substr(8)) : key;
  const auto flat = flat_yaml(effective_config_yaml(c));
  const auto it = flat.find(path);
  return it == flat.end() ? written : it->second;
}

}  // namespace

std::vector<std::string> yaml_differences(const std::string& a, const std::string& b,
                                          const std::vector<std::string>& ignore) {
  const auto fa = flat_yaml(a), fb = flat_yaml(b);
  auto ignored = [&](const std::string& k) {
    for (const auto& i : ignore)
      if (k == i || starts_with(k, i + ".") || starts_with(k, i + "[")) return true;
    return false;
  };
  std::set<std::string> keys;
  for (const auto& kv : fa) keys.insert(kv.first);
  for (const auto& kv : fb) keys.insert(kv.first);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (ignored(k)) continue;
    auto ia = fa.find(k), ib = fb.find(k);
    const std::string va = ia == fa.end() ? "(absent)" : ia->second, vb = ib == fb.end() ? "(absent)" : ib->second;
    if (va != vb) out.push_back(k + ": " + va + " vs " + vb);
  }
  return out;
}

std::vector<Prompt> load_prompts(const ExperimentConfig& config) {
  const PromptsOptions& po = config.prompts;
  const std::string base = config.source_path.empty() ? std::string(".") : dirname_of(config.source_path);
  std::vector<Prompt> out;
  for (const std::string& file : po.files) {
    const std::string path = resolve_path(base, file);
    const std::string text = read_prompt_file(path);
    size_t line_no = 0, start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      ++line_no;
      if (line_no == 1 && starts_with(line, "\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 BOM
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(line_no);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        std::string msg = e.what();
        const size_t close = msg.find("] ");
        if (close != std::string::npos) msg = msg.substr(close + 2);
        throw Error(ErrorKind::kBadInput, "expected one JSON object per line, found invalid JSON (" + msg + ")", where);
      }
      if (!j.is_object())
        throw Error(ErrorKind::kBadInput, "expected one JSON object per line, found " + json_kind(j), where);
      Prompt p;
      p.text = json_field(j, po.field, "field", false, where);
      p.id = po.id_field.empty() ? basename_of(file) + ":" + std::to_string(line_no)
                                 : json_field(j, po.id_field, "id_field", true, where);
      if (!po.category_field.empty()) p.category = json_field(j, po.category_field, "category_field", true, where);
      out.push_back(std::move(p));
    }
  }
  for (size_t i = 0; i < po.inline_prompts.size(); ++i) {
    const InlinePrompt& ip = po.inline_prompts[i];
    Prompt p;
    p.text = ip.text;
    p.category = ip.category;
    p.id = ip.id.empty() ? "inline:" + std::to_string(i + 1) : ip.id;
    out.push_back(std::move(p));
  }
  if (po.limit > 0 && out.size() > static_cast<size_t>(po.limit)) out.resize(static_cast<size_t>(po.limit));
  if (out.empty())
    throw Error(ErrorKind::kBadInput, "expected at least one prompt, found none in " + join(po.files, ", "),
                config.source_path, "prompts");
  return out;
}

}  // namespace speclab
