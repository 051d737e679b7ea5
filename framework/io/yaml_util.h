// Reading YAML config trees with exact error locations (internal to framework/io; torch-free).
//
// Every value is read through a `YamlValue`: the node, the key node it hangs from, and its key
// path ("drafters[1].num_speculative_tokens"). A wrong type throws
//   Error(kConfig, "expected <what>, found <what was there>", "<file>:<line>:<col>", "<key.path>")
// with 1-based line and column. Nodes inserted by `--set key=value` report "--set key=value"
// instead of a file position (see YamlOrigin::add_override).
//
// yaml-cpp gotcha kept in mind throughout: assigning one YAML::Node to another writes through to
// the tree the left side refers to; rebinding a variable needs Node::reset().
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace speclab {
namespace yaml_util {

// Where the nodes of one config tree come from.
class YamlOrigin {
 public:
  explicit YamlOrigin(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // Registers `value` and all of its descendants as coming from `label` (e.g. "--set a.b=1").
  void add_override(const YAML::Node& value, const std::string& label);
  // The label of an override node, or nullopt for a node parsed from the file.
  std::optional<std::string> override_label(const YAML::Node& node) const;
  // "<file>:<line>:<col>" (1-based) for a marked node, the override label for an override node,
  // "<file>" when neither is known.
  std::string where(const YAML::Node& node) const;

 private:
  std::string file_;
  std::vector<std::pair<YAML::Node, std::string>> overrides_;
};

// YAML::LoadAll(text), without its hang: yaml-cpp 0.7 (Debian's) never returns on a ',' outside a
// flow collection (",", ", " or "- a\n,"). Each document it starts there consumes nothing, and it
// allocated them until the kernel killed the process (a `--set generation.stop=,` took 24 GB). The
// text is first walked document by document (events only); a document that starts where the
// previous one started throws YAML::ParserException at that mark. Other malformed text throws as
// LoadAll does.
std::vector<YAML::Node> load_all_documents(const std::string& text);

// A short description of what a node holds, for "found ..." in messages:
// "\"hot\"" (quoted, escaped, truncated), "a list", "an empty list", "a map", "nothing".
std::string describe(const YAML::Node& node);

// Strict scalar text parsers: the whole text must be consumed.
//   int64: optional sign and digits; also an exactly integral float text such as "1e5", up to
//          below 2^53 in magnitude (from there on a double cannot tell the integer written: refused).
//   double: decimal / exponent notation, plus YAML's .inf, -.inf, .nan (and inf, nan).
//   bool: true/false, yes/no, on/off (any case).
bool parse_int64(const std::string& text, int64_t& out);
bool parse_uint64(const std::string& text, uint64_t& out);
// *out_of_range (optional): set when the text is a number a double cannot hold (1e400, 1e-400:
// what a stream turns into inf or 0), which parse_double refuses.
bool parse_double(const std::string& text, double& out, bool* out_of_range = nullptr);
// "expected a number a double can hold (...), found '<text>'": the one message for such a number.
std::string double_range_message(const std::string& text);
bool parse_bool(const std::string& text, bool& out);

// A node at a key path. `key` may be an undefined/null node when there is none (list items).
struct YamlValue {
  const YamlOrigin* origin = nullptr;
  YAML::Node node;
  YAML::Node key;
  std::string path;

  YamlValue(const YamlOrigin* o, const YAML::Node& n, const YAML::Node& k, std::string p)
      : origin(o), node(n), key(k), path(std::move(p)) {}
  YamlValue(const YamlValue&) = default;
  // Assignment would write through to the tree (yaml-cpp semantics): not allowed.
  YamlValue& operator=(const YamlValue&) = delete;

  // The location of the value; of its key when the value is null (yaml-cpp marks an empty
  // value at the start of the next token).
  std::string where() const;
  [[noreturn]] void fail(const std::string& message) const;

  bool is_null() const { return !node.IsDefined() || node.IsNull(); }
  std::string as_scalar_text(const char* expected) const;  // any scalar, else fail("expected <expected>")
  std::string as_string() const;
  int64_t as_int(int64_t lo, int64_t hi) const;
  uint64_t as_uint64() const;
  double as_double() const;
  bool as_bool() const;
  // The elements of a list, with paths "<path>[i]". A scalar counts as a one-element list when
  // `allow_scalar`; null counts as an empty list.
  std::vector<YamlValue> items(bool allow_scalar) const;
  std::vector<std::string> as_string_list(bool allow_scalar) const;
};

// Optimal-string-alignment distance (adjacent transpositions count 1), case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word` when it is close enough to be a plausible typo (distance <=
// max(1, min(3, len/3))); "" otherwise. Ties go to the earlier candidate.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace yaml_util
}  // namespace speclab
