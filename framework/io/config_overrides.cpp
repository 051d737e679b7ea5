// `--set key=value`: edits of the YAML tree before it is read, so that errors still name the
// key (see config_schema.h). Keys are dotted paths checked against the schema: list entries by
// index ("drafters.1.gamma" or "drafters[1].gamma"), "drafter.<key>" for every drafters entry,
// "sweep.<sweep key>" for one axis. Setting a key replaces an alias already written; the value
// is YAML text. Errors are Error(kConfig) located at "--set key=value".
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/utf8_check.h"
#include "framework/io/config_schema.h"
#include "framework/io/config_util.h"

namespace speclab::config {

namespace {

using yaml_util::describe;

struct SetOp {
  std::string label;             // "--set key=value" (error location)
  std::string key;               // the key as written (error field)
  YAML::Node value;
  YamlOrigin* origin = nullptr;  // where copies of `value` are registered as overrides (optional)
  // Nodes of the file that an alias makes appear at more than one path, with those paths.
  const std::vector<std::pair<YAML::Node, std::vector<std::string>>>* shared = nullptr;
};

[[noreturn]] void set_fail(const SetOp& op, const std::string& msg) {
  throw Error(ErrorKind::kConfig, msg, op.label, op.key);
}

// Every node that appears at two or more paths of `n` (a YAML anchor and its aliases: yaml-cpp
// gives them one node, and writing through either path changes both), with its paths. Nodes are
// compared only with those of the same mark (an alias is its anchor's node, mark and all), so the
// walk stays linear in the config (comparing each with every other took 30 s per --set on a config
// of 20,000 inline prompts).
void collect_shared(const YAML::Node& n, const std::string& path,
                    std::map<std::pair<int, int>, std::vector<std::pair<YAML::Node, std::string>>>& seen,
                    std::vector<std::pair<YAML::Node, std::vector<std::string>>>& shared) {
  const YAML::Mark m = n.Mark();
  auto& bucket = seen[{m.line, m.column}];
  for (const auto& [node, first] : bucket) {
    if (!node.is(n)) continue;
    for (auto& [s, paths] : shared) {
      if (s.is(n)) {
        paths.push_back(path);
        return;
      }
    }
    shared.push_back({n, {first, path}});
    return;  // its subtree is the one already walked
  }
  bucket.push_back({n, path});
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it)
      collect_shared(it->second, join_path(path, it->first.IsScalar() ? it->first.Scalar() : "?"), seen, shared);
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) collect_shared(n[i], path + "[" + std::to_string(i) + "]", seen, shared);
  }
}

// Refuses a write at or through `n` when an alias shares it: every path would change (a --set of
// sampling.seed also set every `*n` alias of its `&n` anchor, until 2026-12-07).
void check_unshared(const SetOp& op, const YAML::Node& n) {
  if (!op.shared || !n.IsDefined()) return;
  for (const auto& [node, paths] : *op.shared) {
    if (!node.is(n)) continue;
    set_fail(op, "expected a key that no YAML alias shares, found one that appears at " + join(paths, ", ") +
                     " (an anchor and its aliases are one value: setting it would change every place); "
                     "edit the file, or write the value in place of the alias there");
  }
}

// Sets `written` (naming `def`) in `map`, replacing an entry that names the same setting.
void set_entry(YAML::Node map, const KeyDef& def, const std::string& written, const YAML::Node& value) {
  const YAML::Node k = def.key_in(map);
  map[k.IsDefined() ? k.Scalar() : written] = value;
}

YAML::Node child_map(YAML::Node map, const KeyDef& def, const std::string& written, const SetOp& op,
                     const std::string& here) {
  const YAML::Node key = def.key_in(map);
  if (!key.IsDefined()) {
    map[written] = YAML::Node(YAML::NodeType::Map);
    return map[written];
  }
  const std::string k = key.Scalar();
  const YAML::Node v = def.value_in(map);
  if (v.IsNull()) {
    map[k] = YAML::Node(YAML::NodeType::Map);
    return map[k];
  }
  if (!v.IsMap()) set_fail(op, "expected " + here + " to be a map, found " + describe(v));
  return map[k];
}

void set_in(YAML::Node map, const Schema& schema, const std::vector<std::string>& segs, size_t i, const SetOp& op,
            const std::string& at) {
  const std::string& s = segs[i];
  size_t idx = 0;
  if (s.empty()) set_fail(op, "expected a dotted key such as sampling.temperature, found an empty part");
  if (&schema == &top_schema() && s == "drafter") {
    // drafter.<key>: every drafters entry
    const Schema& drafter = drafter_table().schema();
    if (i + 1 >= segs.size()) set_fail(op, "expected drafter.<key> (applied to every drafters entry), found 'drafter'");
    if (!drafter.find(segs[i + 1])) set_fail(op, unknown_key_message(segs[i + 1], drafter, "drafter"));
    const YAML::Node list = top_schema().find("drafters")->value_in(map);
    check_unshared(op, list);
    if (!list.IsSequence() || list.size() == 0)
      set_fail(op, "expected at least one drafters entry to apply " + squote(op.key) + " to, found none");
    for (size_t j = 0; j < list.size(); ++j) {
      YAML::Node e = list[j];
      if (!e.IsMap()) set_fail(op, "expected drafters[" + std::to_string(j) + "] to be a map, found " + describe(e));
      check_unshared(op, e);
      // One copy per entry: a node shared by several entries would be emitted as a YAML anchor.
      SetOp copy = op;
      copy.value.reset(YAML::Clone(op.value));
      if (op.origin) op.origin->add_override(copy.value, op.label);
      set_in(e, drafter, segs, i + 1, copy, "drafters[" + std::to_string(j) + "]");
    }
    return;
  }
  if (is_index(s, idx)) set_fail(op, "expected a key name after " + squote(at) + ", found index " + s);
  const KeyDef* def = schema.find(s);
  if (!def) set_fail(op, unknown_key_message(s, schema, at));
  const std::string here = join_path(at, s);
  if (i + 1 == segs.size()) {
    check_unshared(op, def->value_in(map));
    set_entry(map, *def, s, op.value);
    return;
  }
  const std::vector<std::string> rest_v(segs.begin() + static_cast<std::ptrdiff_t>(i) + 1, segs.end());
  const std::string rest = join(rest_v, ".");
  switch (def->shape) {
    case Shape::kSection:
      check_unshared(op, def->value_in(map));
      set_in(child_map(map, *def, s, op, here), *def->child, segs, i + 1, op, here);
      return;
    case Shape::kEntries: {
      if (!is_index(segs[i + 1], idx)) set_fail(op, "expected an entry index after " + squote(here) + " (e.g. " + here + ".0), found " + squote(segs[i + 1]));
      YAML::Node list = def->value_in(map);
      check_unshared(op, list);
      const size_t n = list.IsSequence() ? list.size() : 0;
      if (idx >= n) set_fail(op, "expected an index below " + std::to_string(n) + " for " + here + ", found " + segs[i + 1]);
      const std::string item = here + "[" + segs[i + 1] + "]";
      check_unshared(op, list[idx]);
      if (i + 2 == segs.size()) {
        list[idx] = op.value;
        return;
      }
      YAML::Node e = list[idx];
      if (!e.IsMap()) set_fail(op, "expected " + item + " to be a map, found " + describe(e));
      set_in(e, *def->child, segs, i + 2, op, item);
      return;
    }
    case Shape::kFreeMap: {
      const YAML::Node before = def->value_in(map);
      check_unshared(op, before);
      const bool made = !before.IsDefined() || before.IsNull();
      YAML::Node free = child_map(map, *def, s, op, here);
      check_unshared(op, free[rest]);
      free[rest] = op.value;
      // A map this override made is its own: errors about it name the --set, not the file (a
      // `--set drafters.0.params.x=1` was blamed on the YAML file, with no line; until 2026-12-07).
      if (made && op.origin) op.origin->add_override(free, op.label);
      return;
    }
    case Shape::kSweep: {
      const std::string key = canonical_sweep_key(rest);
      if (key.empty()) set_fail(op, unknown_sweep_key_message(rest));
      if (const std::string why = unsweepable_reason(key); !why.empty()) set_fail(op, why);
      check_unshared(op, def->value_in(map));
      YAML::Node sw = child_map(map, *def, s, op, here);
      for (auto it = sw.begin(); it != sw.end(); ++it) {
        if (it->first.IsScalar() && canonical_sweep_key(it->first.Scalar()) == key) {
          check_unshared(op, it->second);
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

}  // namespace

void apply_override(YAML::Node root, const std::string& arg, YamlOrigin& origin, const Schema* schema) {
  const std::string label = "--set " + arg;
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(ErrorKind::kConfig, "expected key=value (e.g. sampling.temperature=0.7), found " + squote(arg), label);
  SetOp op;
  op.label = label;
  op.key = arg.substr(0, eq);
  // As the config file's text (config_parse.cpp): stored as HDF5 UTF-8, which h5py must read back.
  if (const size_t bad = first_invalid_utf8(arg); bad != std::string::npos)
    throw Error(ErrorKind::kConfig,
                "expected UTF-8 text, found a byte that is not well-formed UTF-8 at offset " + std::to_string(bad) +
                    " of the argument",
                label, op.key);
  std::vector<YAML::Node> documents;
  try {
    documents = yaml_util::load_all_documents(arg.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw Error(ErrorKind::kConfig, "expected a YAML value after '=', found malformed YAML: " + e.msg, label, op.key);
  }
  if (documents.size() > 1)  // YAML::Load kept the first alone
    throw Error(ErrorKind::kConfig,
                "expected one YAML value after '=', found " + std::to_string(documents.size()) +
                    " documents (a '---' line starts another)",
                label, op.key);
  op.value = documents.empty() ? YAML::Node() : documents.front();
  origin.add_override(op.value, label);
  op.origin = &origin;
  std::map<std::pair<int, int>, std::vector<std::pair<YAML::Node, std::string>>> seen;
  std::vector<std::pair<YAML::Node, std::vector<std::string>>> shared;
  collect_shared(root, "", seen, shared);
  op.shared = &shared;
  set_in(root, schema ? *schema : top_schema(), split_key(op.key), 0, op, "");
}

void set_key(YAML::Node root, const std::string& key, const YAML::Node& value, const std::string& label) {
  SetOp op;
  op.label = label;
  op.key = key;
  op.value = value;
  set_in(root, top_schema(), split_key(key), 0, op, "");
}

}  // namespace speclab::config
