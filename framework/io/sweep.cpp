// The sweep: reading the `sweep` section, applying one value to a config, and expanding the
// product into points (see sweep.h and config_schema.h).
#include "framework/io/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>

#include "framework/core/error.h"
#include "framework/io/config_schema.h"
#include "framework/io/config_util.h"

namespace speclab {

namespace config {

namespace {

using yaml_util::describe;

void read_sweep(const YamlValue& v, std::vector<SweepAxis>& out) {
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
      // A layer list sweeps its string form, which its parser reads too. Other list-valued keys
      // have none: the hint sent `generation.stop` to a single stop string "a,b", and
      // `prompts.files` to a file named "a.jsonl,b.jsonl".
      if (item.node.IsSequence()) {
        const bool layers = key.size() >= 12 && key.compare(key.size() - 12, 12, "draft_layers") == 0;
        item.fail(layers ? "expected a single value per sweep point, found a list; a layer list sweeps its string "
                           "form (draft_layers: \"0-1\", \"0,2\")"
                         : "expected a single value per sweep point, found a list; a sweep sets one value per point, "
                           "so a list-valued key is swept by one config (or one --set " + key + "=[...]) per list");
      }
      std::string value = item.as_scalar_text("a single value");
      if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end())
        item.fail("expected distinct values (each is one sweep point), found " + squote(value) + " twice");
      axis.values.push_back(std::move(value));
    }
    out.push_back(std::move(axis));
  }
}

YAML::Node dump_sweep(const std::vector<SweepAxis>& axes, const Ctx&) {
  YAML::Node n(YAML::NodeType::Map);
  for (const SweepAxis& a : axes) {
    YAML::Node values(YAML::NodeType::Sequence);
    for (const std::string& v : a.values) values.push_back(v);
    n[a.key] = flow_list(values);
  }
  return n;
}

// The resolved YAML text of one sweep point: `base` (the experiment's resolved tree without its
// sweep, parsed once: parsing the whole text per point was quadratic in the sweep's size) with
// the values set. `resolved` as it is when it is not a map.
std::string point_yaml(const std::string& resolved, const YAML::Node& base,
                       const std::map<std::string, std::string>& values) {
  if (resolved.empty()) return {};
  if (!base.IsMap()) return resolved;
  YAML::Node root = YAML::Clone(base);
  for (const auto& [k, v] : values) set_key(root, k, YAML::Node(v), "sweep");
  return emit(root);
}

}  // namespace

Codec<std::vector<SweepAxis>> sweep_axes() {
  return {Shape::kSweep, nullptr, [](const YamlValue& v, const Ctx&, std::vector<SweepAxis>& out) { read_sweep(v, out); },
          dump_sweep};
}

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
      drafter_table().read(YamlValue(val.origin, m, val.key, "drafters[" + std::to_string(i) + "]"), ctx, c.drafters[i]);
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
  top_table().read(YamlValue(val.origin, tree, val.key, ""), ctx, c);
}

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
  // Each point starts from the config without its sweep and resolved text (copying them per point
  // made expansion quadratic in the number of values).
  ExperimentConfig base = config;
  base.sweep.clear();
  base.resolved_yaml.clear();
  YAML::Node base_tree;
  if (!config.resolved_yaml.empty()) {
    base_tree = YAML::Load(config.resolved_yaml);
    if (base_tree.IsMap()) base_tree.remove("sweep");
  }
  for (int64_t index = 0; index < total; ++index) {
    SweepPoint pt;
    pt.index = index;
    pt.config = base;
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
      pt.keys.push_back(ax.key);
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
    pt.config.resolved_yaml = point_yaml(config.resolved_yaml, base_tree, pt.values);
    out.push_back(std::move(pt));
  }
  return out;
}

}  // namespace config

std::vector<SweepPoint> expand_sweep(const ExperimentConfig& config) { return config::expand_points(config, nullptr); }

}  // namespace speclab
