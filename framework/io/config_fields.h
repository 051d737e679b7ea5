// Field tables: what lets each config key be declared once (internal to the config loader in
// framework/io; torch-free).
//
// A Table<T> lists the YAML keys of one options struct T. Each Field<T> holds
//   def:  the key, its aliases and its Shape: what `--set`, sweep keys, key-path lookups and
//         unknown-key messages see (Table::schema());
//   read: a YAML value -> the member; a wrong value throws Error(kConfig) through
//         YamlValue::fail, at the value's file:line:col and key path;
//   dump: the member -> its canonical YAML node (effective_config_yaml); an undefined node
//         leaves the key out (an absent optional section).
// field(key, aliases, &T::member[, codec]) binds a key to a member (or to a member of a member)
// through a Codec<M>, the read/dump pair of a member type; the default codec follows the
// member's type (default_codec), and the named codecs below cover paths, byte counts, layer
// ranges, sections and lists of entries.
//
// Table::read() reads the keys present in a map, in declaration order; absent keys keep their
// current values, and a null section keeps them all. It throws Error(kConfig) at an unknown key
// (with a "did you mean" suggestion, unknown_key_message), a key written twice, or a key written
// together with one of its aliases. Table::dump() writes every key, in declaration order unless
// the table gives a dump order.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/io/yaml_util.h"

namespace speclab::config {

using yaml_util::YamlOrigin;
using yaml_util::YamlValue;

// Where relative paths are resolved: the YAML file's directory.
struct Ctx {
  std::string base_dir;
};

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

// One key of a section, as written in YAML.
struct KeyDef {
  std::string key;
  std::vector<std::string> aliases;
  Shape shape = Shape::kScalar;
  const Schema* child = nullptr;  // kSection and kEntries

  bool names(const std::string& written) const;
  // A setting that takes one value (a sweep axis or a `--set` may set it).
  bool single_valued() const { return shape == Shape::kScalar || shape == Shape::kScalarOrList; }
  // The key node / value node of this setting in `map`, whichever name it is written under;
  // an undefined node when absent.
  YAML::Node key_in(const YAML::Node& map) const;
  YAML::Node value_in(const YAML::Node& map) const;
};

struct Schema {
  std::string what;  // "sampling", "drafter", ... (messages: "expected a map of <what> keys")
  std::vector<KeyDef> keys;

  const KeyDef* find(const std::string& written) const;  // by key or alias
  std::vector<std::string> all_names() const;             // keys, then aliases
  std::string key_list() const;                           // "a, b, c"
};

// config_schema.cpp: "unknown key 'x' in <section_path>" with a suggestion: a near miss in the
// same section, else the same key in another section, else the section's keys.
std::string unknown_key_message(const std::string& written, const Schema& schema, const std::string& section_path);

// The entries of one YAML map, checked against a schema (see Table::read).
class MapReader {
 public:
  MapReader(const YamlValue& v, const Schema& schema);
  // Calls f with the value of `key` (a canonical key) when it is present.
  void with(const std::string& key, const std::function<void(const YamlValue&)>& f) const;

 private:
  struct Entry {
    std::string written;
    YAML::Node key, value;
  };
  const YamlOrigin* origin_;
  std::string path_;
  std::map<std::string, Entry> entries_;
};

// ---- codecs -------------------------------------------------------------------------------------

template <class M>
struct Codec {
  Shape shape = Shape::kScalar;
  const Schema* child = nullptr;
  std::function<void(const YamlValue&, const Ctx&, M&)> read;
  std::function<YAML::Node(const M&, const Ctx&)> dump;
};

// Canonical text: doubles in the shortest text that reads back to the same value (0.7, not
// 0.69999999999999996); paths absolute and normalised, so that the text does not depend on how
// the config path was typed or on the working directory ("" and named models stay as written).
std::string real_text(double v);
std::string absolute_path(const std::string& p);
YAML::Node flow_list(YAML::Node seq);  // `seq` emitted in flow style: [a, b]
std::string emit(const YAML::Node& n);  // YAML text, ending in a newline
// A stored config's text (`yaml`, a YAML map) with output.path set to `path`, emitted: the file a
// run or a merge wrote. Throws YAML::Exception when `yaml` is malformed, std::invalid_argument
// when it is not a map.
std::string with_output_path(const std::string& yaml, const std::string& path);

// Scalars, read with YamlValue::as_string, as_bool, as_double (written in real_text), as_uint64
// and as_int (in [lo, hi]).
Codec<std::string> text();
Codec<bool> boolean();
Codec<double> number();
Codec<uint64_t> unsigned_integer();
template <class M>
Codec<M> integer(int64_t lo, int64_t hi) {
  return {Shape::kScalar, nullptr, [lo, hi](const YamlValue& x, const Ctx&, M& m) { m = static_cast<M>(x.as_int(lo, hi)); },
          [](const M& m, const Ctx&) { return YAML::Node(m); }};
}
// Paths relative to the YAML file, resolved on read, written absolute.
Codec<std::string> path();
Codec<std::string> model_path();  // the same, but a named model is kept as written
// Paths kept as written and resolved when used (prompts.files); written absolute.
Codec<std::vector<std::string>> file_list();
Codec<std::string> file_as_written();  // one such path (prompts.sources[].file)
// A byte count: an integer, or a number with a unit (KB, MB, GB, TB: powers of 1000; KiB, MiB,
// GiB, TiB: powers of 1024; B).
Codec<int64_t> byte_count();
// Layer indices: a list of integers, or "0-5", "0-5,8,10-11", "3".
Codec<std::vector<int64_t>> layer_list();
// Free keys to values kept as text (drafter plugin params).
Codec<std::map<std::string, std::string>> parameter_map();

// A list of `elem` values (one value counts as a list of one), written in flow style.
template <class E>
Codec<std::vector<E>> list_of(Codec<E> elem, Shape shape) {
  return {shape, nullptr,
          [r = elem.read](const YamlValue& x, const Ctx& ctx, std::vector<E>& out) {
            out.clear();
            for (const YamlValue& item : x.items(true)) {
              E e{};
              r(item, ctx, e);
              out.push_back(std::move(e));
            }
          },
          [d = elem.dump](const std::vector<E>& v, const Ctx& ctx) {
            YAML::Node n(YAML::NodeType::Sequence);
            for (const E& e : v) n.push_back(d(e, ctx));
            return flow_list(n);
          }};
}

// Keeps a template parameter out of deduction (a lambda passed as a std::function<...T...>).
template <class T>
struct NoDeduce {
  using type = T;
};

template <class T>
struct IsVector : std::false_type {};
template <class E>
struct IsVector<std::vector<E>> : std::true_type {};

// The codec of a member type: strings, booleans, doubles, integers in the type's range, and
// lists of them (a list of strings may also be one string).
template <class M>
Codec<M> default_codec() {
  if constexpr (std::is_same_v<M, std::string>) return text();
  else if constexpr (std::is_same_v<M, bool>) return boolean();
  else if constexpr (std::is_same_v<M, double>) return number();
  else if constexpr (std::is_same_v<M, uint64_t>) return unsigned_integer();
  else if constexpr (std::is_integral_v<M> && std::is_signed_v<M>)
    return integer<M>(std::numeric_limits<M>::min(), std::numeric_limits<M>::max());
  else if constexpr (IsVector<M>::value)
    return list_of(default_codec<typename M::value_type>(),
                   std::is_same_v<M, std::vector<std::string>> ? Shape::kScalarOrList : Shape::kList);
  else static_assert(IsVector<M>::value, "no default codec for this member type: pass one");
}

// ---- fields and tables --------------------------------------------------------------------------

template <class T>
struct Field {
  KeyDef def;
  std::function<void(const YamlValue&, const Ctx&, T&)> read;
  std::function<YAML::Node(const T&, const Ctx&)> dump;
};

template <class T, class M>
Field<T> field(std::string key, std::vector<std::string> aliases, M T::*m, Codec<M> c = default_codec<M>()) {
  return {{std::move(key), std::move(aliases), c.shape, c.child},
          [m, r = c.read](const YamlValue& x, const Ctx& ctx, T& t) { r(x, ctx, t.*m); },
          [m, d = c.dump](const T& t, const Ctx& ctx) { return d(t.*m, ctx); }};
}
template <class T, class S, class M>
Field<T> field(std::string key, std::vector<std::string> aliases, S T::*s, M S::*m, Codec<M> c = default_codec<M>()) {
  return {{std::move(key), std::move(aliases), c.shape, c.child},
          [s, m, r = c.read](const YamlValue& x, const Ctx& ctx, T& t) { r(x, ctx, t.*s.*m); },
          [s, m, d = c.dump](const T& t, const Ctx& ctx) { return d(t.*s.*m, ctx); }};
}
// `f`, followed on read by `then` (a side effect on the struct).
template <class T>
Field<T> also(Field<T> f, std::function<void(typename NoDeduce<T>::type&)> then) {
  f.read = [r = std::move(f.read), then = std::move(then)](const YamlValue& x, const Ctx& ctx, T& t) {
    r(x, ctx, t);
    then(t);
  };
  return f;
}

template <class T>
class Table {
 public:
  // `dump_order`: the keys in the order of the canonical text, when it is not the declaration
  // order (the declaration order is also the order of key lists in messages).
  Table(std::string what, std::vector<Field<T>> fields, const std::vector<std::string>& dump_order = {})
      : fields_(std::move(fields)) {
    schema_.what = std::move(what);
    for (const Field<T>& f : fields_) schema_.keys.push_back(f.def);
    for (const Field<T>& f : fields_) dump_order_.push_back(&f);
    for (size_t i = 0; i < dump_order.size(); ++i)
      for (const Field<T>& f : fields_)
        if (f.def.key == dump_order[i]) dump_order_[i] = &f;
  }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  const Schema& schema() const { return schema_; }

  void read(const YamlValue& v, const Ctx& ctx, T& out) const {
    const MapReader r(v, schema_);
    for (const Field<T>& f : fields_) r.with(f.def.key, [&](const YamlValue& x) { f.read(x, ctx, out); });
  }

  YAML::Node dump(const T& value, const Ctx& ctx) const {
    YAML::Node n(YAML::NodeType::Map);
    for (const Field<T>* f : dump_order_) {
      const YAML::Node x = f->dump(value, ctx);
      if (x.IsDefined()) n[f->def.key] = x;
    }
    return n;
  }

 private:
  Schema schema_;
  std::vector<Field<T>> fields_;
  std::vector<const Field<T>*> dump_order_;
};

// A map with its own table.
template <class S>
Codec<S> section(const Table<S>& t) {
  return {Shape::kSection, &t.schema(), [&t](const YamlValue& x, const Ctx& ctx, S& s) { t.read(x, ctx, s); },
          [&t](const S& s, const Ctx& ctx) { return t.dump(s, ctx); }};
}
// A section that is absent unless written (then with defaults for the keys not written).
template <class S>
Codec<std::optional<S>> optional_section(const Table<S>& t) {
  return {Shape::kSection, &t.schema(),
          [&t](const YamlValue& x, const Ctx& ctx, std::optional<S>& o) {
            S s = o.value_or(S{});
            t.read(x, ctx, s);
            o = s;
          },
          [&t](const std::optional<S>& o, const Ctx& ctx) {
            return o ? t.dump(*o, ctx) : YAML::Node(YAML::NodeType::Undefined);
          }};
}
// A list of maps with one table; `expected` describes the list in "expected <expected>, found
// ...". `from_scalar`, when given, makes an entry of a scalar item.
template <class E>
Codec<std::vector<E>> entries(const Table<E>& t, const std::string& expected,
                              std::function<void(const std::string&, typename NoDeduce<E>::type&)> from_scalar = nullptr) {
  return {Shape::kEntries, &t.schema(),
          [&t, expected, from_scalar](const YamlValue& x, const Ctx& ctx, std::vector<E>& out) {
            if (!x.is_null() && !x.node.IsSequence())
              x.fail("expected " + expected + ", found " + yaml_util::describe(x.node));
            out.clear();
            for (const YamlValue& item : x.items(false)) {
              // A blank item ("-" with nothing after it, e.g. an entry whose keys were commented
              // out) is not an entry of defaults: a run would get a drafter nobody configured.
              if (item.is_null())
                item.fail("expected " + std::string(from_scalar ? "a value or " : "") + "a map of " + t.schema().what +
                          " keys (" + t.schema().key_list() + "), found nothing (a blank list item)");
              E e;
              if (from_scalar && item.node.IsScalar()) from_scalar(item.node.Scalar(), e);
              else t.read(item, ctx, e);
              out.push_back(std::move(e));
            }
          },
          [&t](const std::vector<E>& v, const Ctx& ctx) {
            YAML::Node n(YAML::NodeType::Sequence);
            for (const E& e : v) n.push_back(t.dump(e, ctx));
            return n;
          }};
}

}  // namespace speclab::config
