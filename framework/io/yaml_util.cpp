#include "framework/io/yaml_util.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "framework/core/error.h"

namespace speclab {
namespace yaml_util {

namespace {

// The marks where documents start; the rest of the events are not needed.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::vector<YAML::Node> load_all_documents(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts events;
  while (parser.HandleNextDocument(events)) {
    const size_t n = events.starts.size();
    if (n >= 2 && events.starts[n - 1].pos == events.starts[n - 2].pos)
      throw YAML::ParserException(events.starts[n - 1],
                                  "a ',' outside [...] or {...} (quote a value that starts with a comma: \",\")");
  }
  return YAML::LoadAll(text);
}

namespace {

void collect(const YAML::Node& n, const std::string& label, std::vector<std::pair<YAML::Node, std::string>>& out,
             int depth) {
  out.emplace_back(n, label);
  if (depth > 64) return;  // a flow value written on one --set line cannot sensibly be deeper
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) collect(n[i], label, out, depth + 1);
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      collect(it->first, label, out, depth + 1);
      collect(it->second, label, out, depth + 1);
    }
  }
}

std::string lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void YamlOrigin::add_override(const YAML::Node& value, const std::string& label) {
  collect(value, label, overrides_, 0);
}

std::optional<std::string> YamlOrigin::override_label(const YAML::Node& node) const {
  if (!node.IsDefined()) return std::nullopt;
  for (const auto& [n, label] : overrides_)
    if (n.is(node)) return label;
  return std::nullopt;
}

std::string YamlOrigin::where(const YAML::Node& node) const {
  if (auto label = override_label(node)) return *label;
  if (node.IsDefined()) {
    const YAML::Mark m = node.Mark();
    if (!m.is_null()) return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  return file_;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return node.size() == 0 ? "an empty list" : "a list";
  if (node.IsMap()) return node.size() == 0 ? "an empty map" : "a map";
  const std::string& s = node.Scalar();
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (++n > 60) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool parse_int64(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  const char* b = text.data();
  const char* e = b + text.size();
  if (*b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  if (r.ec == std::errc() && r.ptr == e) return true;
  // "1e5", "100000.0": accepted when the value is exactly an integer in range. Beyond 2^53 a double
  // cannot tell the integer written from its neighbours ("9007199254740993.0" read as ...992): such
  // a value must be written in digits (it was rounded silently until 2026-12-07).
  constexpr double kExact = 9007199254740992.0;  // 2^53
  double d;
  if (!parse_double(text, d) || !std::isfinite(d) || d != std::floor(d)) return false;
  if (d <= -kExact || d >= kExact) return false;
  out = static_cast<int64_t>(d);
  return true;
}

bool parse_uint64(const std::string& text, uint64_t& out) {
  if (text.empty() || text[0] == '-') return false;
  const char* b = text.data();
  const char* e = b + text.size();
  if (*b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  if (r.ec == std::errc() && r.ptr == e) return true;
  double d;  // as parse_int64: a double form only up to 2^53, where every integer is exact
  if (!parse_double(text, d) || !std::isfinite(d) || d != std::floor(d) || d < 0 || d >= 9007199254740992.0)
    return false;
  out = static_cast<uint64_t>(d);
  return true;
}

std::string double_range_message(const std::string& text) {
  return "expected a number a double can hold (a magnitude from about 2.2e-308 to 1.8e308, or 0), found '" + text + "'";
}

bool parse_double(const std::string& text, double& out, bool* out_of_range) {
  if (out_of_range) *out_of_range = false;
  const std::string l = lower(text);
  if (l == ".inf" || l == "+.inf" || l == "inf" || l == "+inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (l == "-.inf" || l == "-inf") {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (l == ".nan" || l == "nan") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (text.empty()) return false;
  const char* b = text.data();
  const char* e = b + text.size();
  if (*b == '+') ++b;
  if (b == e) return false;
  // from_chars also accepts "inf"/"nan" spellings and hex floats only with chars_format::hex,
  // so the general format covers exactly decimal and exponent notation.
  auto r = std::from_chars(b, e, out, std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range && r.ptr == e && out_of_range) *out_of_range = true;
  return r.ec == std::errc() && r.ptr == e;
}

bool parse_bool(const std::string& text, bool& out) {
  const std::string l = lower(text);
  if (l == "true" || l == "yes" || l == "on") {
    out = true;
    return true;
  }
  if (l == "false" || l == "no" || l == "off") {
    out = false;
    return true;
  }
  return false;
}

std::string YamlValue::where() const {
  if (auto label = origin->override_label(node)) return *label;
  if (node.IsDefined() && !node.IsNull() && !node.Mark().is_null()) return origin->where(node);
  if (key.IsDefined() && !key.IsNull()) return origin->where(key);
  if (node.IsDefined()) return origin->where(node);
  return origin->file();
}

void YamlValue::fail(const std::string& message) const {
  throw Error(ErrorKind::kConfig, message, where(), path);
}

std::string YamlValue::as_scalar_text(const char* expected) const {
  if (!node.IsDefined() || !node.IsScalar()) fail(std::string("expected ") + expected + ", found " + describe(node));
  return node.Scalar();
}

std::string YamlValue::as_string() const { return as_scalar_text("a string"); }

int64_t YamlValue::as_int(int64_t lo, int64_t hi) const {
  const std::string t = as_scalar_text("an integer");
  int64_t v = 0;
  if (!parse_int64(t, v)) fail("expected an integer, found " + describe(node));
  if (v < lo || v > hi)
    fail("expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " + t);
  return v;
}

uint64_t YamlValue::as_uint64() const {
  const std::string t = as_scalar_text("a non-negative integer");
  uint64_t v = 0;
  if (!parse_uint64(t, v)) fail("expected a non-negative integer below 2^64, found " + describe(node));
  return v;
}

double YamlValue::as_double() const {
  const std::string t = as_scalar_text("a number");
  double v = 0;
  bool out_of_range = false;
  if (!parse_double(t, v, &out_of_range))
    fail(out_of_range ? double_range_message(t) : "expected a number, found " + describe(node));
  return v;
}

bool YamlValue::as_bool() const {
  const std::string t = as_scalar_text("true or false");
  bool v = false;
  if (!parse_bool(t, v)) fail("expected true or false, found " + describe(node));
  return v;
}

std::vector<YamlValue> YamlValue::items(bool allow_scalar) const {
  std::vector<YamlValue> out;
  // Nothing written in the file is no values. A --set of nothing ("stop=#", where '#' starts a YAML
  // comment) removed every value without a word, where a scalar key refuses it.
  if (is_null() && origin != nullptr && origin->override_label(node))
    fail(std::string(allow_scalar ? "expected a value or a list of values" : "expected a list") +
         ", found nothing (write [] for none; quote a value that YAML reads as nothing or as a comment: '\"#\"')");
  if (is_null()) return out;
  if (node.IsSequence()) {
    out.reserve(node.size());
    for (size_t i = 0; i < node.size(); ++i)
      out.emplace_back(origin, node[i], YAML::Node(), path + "[" + std::to_string(i) + "]");
    return out;
  }
  if (allow_scalar && node.IsScalar()) {
    out.push_back(*this);
    return out;
  }
  fail(std::string(allow_scalar ? "expected a value or a list of values" : "expected a list") + ", found " +
       describe(node));
}

std::vector<std::string> YamlValue::as_string_list(bool allow_scalar) const {
  std::vector<std::string> out;
  for (const YamlValue& v : items(allow_scalar)) out.push_back(v.as_string());
  return out;
}

size_t edit_distance(const std::string& a0, const std::string& b0) {
  const std::string a = lower(a0), b = lower(b0);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 200) return {};
  const size_t limit = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3));
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace yaml_util
}  // namespace speclab
