// Text and path helpers shared by the config loader's files (internal to framework/io;
// header-only, torch-free).
//
// Paths in a config are relative to the YAML file's directory (resolve_path); a model value with
// neither '/' nor '.', or one of named_models() (framework/core/model_source.h), is a named entry
// (see models/model_loader.h) and is kept as written.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "framework/core/model_source.h"

namespace speclab::config {

inline bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
inline bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
inline std::string squote(const std::string& s) { return "'" + s + "'"; }
// A number in messages, as a stream writes it (6 significant digits).
inline std::string to_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// "a" + "b" -> "a.b"; "" + "b" -> "b".
inline std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
inline std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}
// Every part, empty ones included: "a..b" -> {"a", "", "b"}.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}
// A list index: 1 to 9 digits.
inline bool is_index(const std::string& s, size_t& idx) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  idx = static_cast<size_t>(std::stoul(s));
  return true;
}
// A key path as its parts: "drafters[1].gamma" -> {"drafters", "1", "gamma"}.
inline std::vector<std::string> split_key(const std::string& key) {
  std::string k;
  for (char ch : key) {
    if (ch == '[') k += '.';
    else if (ch != ']') k += ch;
  }
  return split(k, '.');
}

inline std::string dirname_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}
inline std::string basename_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
inline std::string resolve_path(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || base_dir.empty() || base_dir == ".") return p;
  return base_dir + "/" + p;
}
// A plugin parameter that names an input file (docs/plugins.md): `file`, or a key ending in
// `_file`. Its value is resolved against the YAML file's directory, as every input path of a
// config, and the run fingerprints the file with its model and draft files (so a file the plugin
// writes must not be named so: --resume would find it changed).
inline bool is_path_parameter(const std::string& key) {
  return key == "file" || (key.size() > 5 && key.compare(key.size() - 5, 5, "_file") == 0);
}
inline bool is_named_model(const std::string& p) {
  if (p.empty() || p.find('/') != std::string::npos) return false;
  return p.find('.') == std::string::npos || find_named_model(p) != nullptr;
}
inline std::string resolve_model_path(const std::string& base_dir, const std::string& p) {
  return is_named_model(p) ? p : resolve_path(base_dir, p);
}

}  // namespace speclab::config
