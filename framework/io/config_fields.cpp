// Field-table machinery and the value codecs that several tables share (see config_fields.h).
#include "framework/io/config_fields.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "framework/core/error.h"
#include "framework/io/config_util.h"

namespace speclab::config {

using yaml_util::describe;

bool KeyDef::names(const std::string& w) const {
  return w == key || std::find(aliases.begin(), aliases.end(), w) != aliases.end();
}

YAML::Node KeyDef::key_in(const YAML::Node& map) const {
  if (map.IsMap())
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && names(it->first.Scalar())) return it->first;
  return YAML::Node(YAML::NodeType::Undefined);
}

YAML::Node KeyDef::value_in(const YAML::Node& map) const {
  if (map.IsMap())
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && names(it->first.Scalar())) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

const KeyDef* Schema::find(const std::string& w) const {
  for (const auto& k : keys)
    if (k.names(w)) return &k;
  return nullptr;
}

std::vector<std::string> Schema::all_names() const {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(k.key);
  for (const auto& k : keys) out.insert(out.end(), k.aliases.begin(), k.aliases.end());
  return out;
}

std::string Schema::key_list() const {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(k.key);
  return join(out, ", ");
}

MapReader::MapReader(const YamlValue& v, const Schema& schema) : origin_(v.origin), path_(v.path) {
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

void MapReader::with(const std::string& key, const std::function<void(const YamlValue&)>& f) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  const YamlValue v(origin_, it->second.value, it->second.key, join_path(path_, it->second.written));
  f(v);
}

// ---- canonical text -----------------------------------------------------------------------------

std::string real_text(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return std::string(buf);
}

std::string absolute_path(const std::string& p) {
  if (p.empty() || is_named_model(p)) return p;
  std::error_code ec;
  const std::filesystem::path a = std::filesystem::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

YAML::Node flow_list(YAML::Node seq) {
  seq.SetStyle(YAML::EmitterStyle::Flow);
  return seq;
}

std::string emit(const YAML::Node& n) {
  YAML::Emitter out;
  out << n;
  return std::string(out.c_str()) + "\n";
}

std::string with_output_path(const std::string& yaml, const std::string& path) {
  YAML::Node n = YAML::Load(yaml);
  if (!n.IsMap()) throw std::invalid_argument("not a YAML map");
  n["output"]["path"] = path;
  return emit(n);
}

// ---- codecs -------------------------------------------------------------------------------------

namespace {

YAML::Node string_node(const std::string& s, const Ctx&) { return YAML::Node(s); }

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

}  // namespace

Codec<std::string> text() {
  return {Shape::kScalar, nullptr, [](const YamlValue& x, const Ctx&, std::string& m) { m = x.as_string(); },
          string_node};
}

Codec<bool> boolean() {
  return {Shape::kScalar, nullptr, [](const YamlValue& x, const Ctx&, bool& m) { m = x.as_bool(); },
          [](const bool& m, const Ctx&) { return YAML::Node(m); }};
}

Codec<double> number() {
  return {Shape::kScalar, nullptr, [](const YamlValue& x, const Ctx&, double& m) { m = x.as_double(); },
          [](const double& m, const Ctx&) { return YAML::Node(real_text(m)); }};
}

Codec<uint64_t> unsigned_integer() {
  return {Shape::kScalar, nullptr, [](const YamlValue& x, const Ctx&, uint64_t& m) { m = x.as_uint64(); },
          [](const uint64_t& m, const Ctx&) { return YAML::Node(m); }};
}

Codec<std::string> path() {
  return {Shape::kScalar, nullptr,
          [](const YamlValue& x, const Ctx& ctx, std::string& m) { m = resolve_path(ctx.base_dir, x.as_string()); },
          [](const std::string& m, const Ctx&) { return YAML::Node(absolute_path(m)); }};
}

Codec<std::string> model_path() {
  Codec<std::string> c = path();
  c.read = [](const YamlValue& x, const Ctx& ctx, std::string& m) { m = resolve_model_path(ctx.base_dir, x.as_string()); };
  return c;
}

Codec<std::string> file_as_written() {
  Codec<std::string> file = text();
  file.dump = [](const std::string& f, const Ctx& ctx) { return YAML::Node(absolute_path(resolve_path(ctx.base_dir, f))); };
  return file;
}

Codec<std::vector<std::string>> file_list() { return list_of(file_as_written(), Shape::kScalarOrList); }

Codec<int64_t> byte_count() {
  return {Shape::kScalar, nullptr, [](const YamlValue& x, const Ctx&, int64_t& m) { m = read_bytes(x); },
          [](const int64_t& m, const Ctx&) { return YAML::Node(m); }};
}

Codec<std::vector<int64_t>> layer_list() {
  Codec<std::vector<int64_t>> c = list_of(default_codec<int64_t>(), Shape::kScalarOrList);
  c.read = [](const YamlValue& x, const Ctx&, std::vector<int64_t>& m) { m = read_layers(x); };
  return c;
}

Codec<std::map<std::string, std::string>> parameter_map() {
  return {Shape::kFreeMap, nullptr,
          [](const YamlValue& x, const Ctx& ctx, std::map<std::string, std::string>& m) {
            if (x.is_null()) return;
            if (!x.node.IsMap()) x.fail("expected a map of parameter names to values, found " + describe(x.node));
            for (auto it = x.node.begin(); it != x.node.end(); ++it) {
              YamlValue k(x.origin, it->first, YAML::Node(), x.path);
              const std::string name = k.as_scalar_text("a parameter name");
              // An empty name reached the plugin (generate's --param refuses "=x"; until 2026-12-07).
              if (name.empty()) k.fail("expected a parameter name, found an empty one");
              YamlValue val(x.origin, it->second, it->first, x.path + "." + name);
              // As MapReader refuses a repeated key: here the last value won without a word (until 2026-12-06).
              if (m.count(name)) k.fail("expected each parameter once, found " + squote(name) + " again");
              m[name] = val.as_scalar_text("a single value (plugin parameters are passed as text)");
              // A file parameter is an input path of the config: relative to the YAML file, as every
              // other (it was the working directory's, so one config read another file from
              // elsewhere; until 2026-12-07), and fingerprinted with the run's files.
              if (is_path_parameter(name) && !m[name].empty()) m[name] = resolve_path(ctx.base_dir, m[name]);
            }
          },
          [](const std::map<std::string, std::string>& m, const Ctx&) {
            YAML::Node n(YAML::NodeType::Map);
            for (const auto& [k, v] : m) n[k] = is_path_parameter(k) && !v.empty() ? absolute_path(v) : v;
            return n;
          }};
}

}  // namespace speclab::config
