// effective_config_yaml (the field tables' dump) and yaml_differences over flattened key paths
// (see config_canonical.h).
#include "framework/io/config_canonical.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

#include "framework/io/config_schema.h"
#include "framework/io/config_util.h"

namespace speclab {

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

// Key path -> scalar text ("{}" / "[]" for an empty map / list).
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

}  // namespace

std::string effective_config_yaml(const ExperimentConfig& c) {
  return config::emit(config::top_table().dump(c, config::Ctx{config::dirname_of(c.source_path)}));
}

std::optional<std::string> config::effective_value(const ExperimentConfig& c, const std::string& key_path) {
  const auto flat = flat_yaml(effective_config_yaml(c));
  const auto it = flat.find(key_path);
  if (it != flat.end()) return it->second;
  // A list or map: its flattened entries under the key, "[0]=0,[1]=1" (one text per value).
  std::string joined;
  for (auto e = flat.lower_bound(key_path); e != flat.end() && starts_with(e->first, key_path); ++e) {
    const std::string rest = e->first.substr(key_path.size());
    if (rest.empty() || (rest[0] != '[' && rest[0] != '.')) continue;
    joined += (joined.empty() ? "" : ",") + rest + "=" + e->second;
  }
  if (joined.empty()) return std::nullopt;
  return joined;
}

std::string default_config_yaml() {
  ExperimentConfig c;
  c.drafters.emplace_back();
  return effective_config_yaml(c);
}

std::vector<std::string> yaml_differences(const std::string& a, const std::string& b,
                                          const std::vector<std::string>& ignore, const std::string& defaults) {
  const auto fa = flat_yaml(a), fb = flat_yaml(b);
  const auto fd = defaults.empty() ? decltype(fa){} : flat_yaml(defaults);
  // The default of key k: its own, or for drafters[i].x that of drafters[0].x.
  auto default_of = [&](const std::string& k) -> const std::string* {
    auto it = fd.find(k);
    if (it == fd.end() && config::starts_with(k, "drafters[")) {
      const size_t close = k.find(']');
      if (close != std::string::npos) it = fd.find("drafters[0" + k.substr(close));
    }
    return it == fd.end() ? nullptr : &it->second;
  };
  auto ignored = [&](const std::string& k) {
    for (const auto& i : ignore)
      if (k == i || config::starts_with(k, i + ".") || config::starts_with(k, i + "[")) return true;
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
    if (va == vb) continue;
    if ((ia == fa.end()) != (ib == fb.end())) {  // absent from one: the same if the other is at its default
      const std::string* d = default_of(k);
      if (d && *d == (ia == fa.end() ? vb : va)) continue;
    }
    out.push_back(k + ": " + va + " vs " + vb);
  }
  return out;
}

std::string differences_list(const std::vector<std::string>& diff, size_t most) {
  std::string list;
  for (size_t i = 0; i < diff.size() && i < most; ++i) list += (i ? "; " : "") + diff[i];
  if (diff.size() > most) list += "; and " + std::to_string(diff.size() - most) + " more";
  return list;
}

}  // namespace speclab
