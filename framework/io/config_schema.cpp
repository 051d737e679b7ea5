// The field tables (each config key declared once) and the queries over them: unknown-key
// suggestions, sweep keys, key-path lookup in a tree (see config_schema.h).
#include "framework/io/config_schema.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <limits>
#include <utility>

#include "framework/draft/drafter_options.h"
#include "framework/io/config_util.h"

namespace speclab::config {

namespace {

using yaml_util::describe;

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// ---- codecs of one key each ---------------------------------------------------------------------

// A string that must be one of `allowed`.
Codec<std::string> one_of(std::vector<std::string> allowed) {
  Codec<std::string> c = text();
  c.read = [allowed](const YamlValue& x, const Ctx&, std::string& m) {
    m = x.as_string();
    if (std::find(allowed.begin(), allowed.end(), m) != allowed.end()) return;
    x.fail("expected one of " + join(allowed, ", ") + ", found '" + m + "'");
  };
  return c;
}

// vLLM writes "off" as -1.
Codec<int64_t> top_k() {
  Codec<int64_t> c = default_codec<int64_t>();
  c.read = [](const YamlValue& x, const Ctx&, int64_t& m) {
    const int64_t k = x.as_int(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    m = k == -1 ? 0 : k;
  };
  return c;
}

// auto | on | off, with YAML's booleans read as on / off.
Codec<std::string> chat_mode() {
  Codec<std::string> c = text();
  c.read = [](const YamlValue& x, const Ctx&, std::string& m) {
    const std::string t = x.as_scalar_text("auto, on or off");
    bool b = false;
    m = yaml_util::parse_bool(t, b) ? (b ? "on" : "off") : t;
  };
  return c;
}

Codec<Preemption> preemption_mode() {
  return {Shape::kScalar, nullptr,
          [](const YamlValue& x, const Ctx&, Preemption& m) {
            const std::string t = x.as_scalar_text("off or lowest_priority");
            bool b = true;
            if (t == "lowest_priority") m = Preemption::kLowestPriority;
            else if (yaml_util::parse_bool(t, b) && !b) m = Preemption::kOff;
            else x.fail("expected off or lowest_priority, found " + describe(x.node));
          },
          [](const Preemption& m, const Ctx&) {
            return YAML::Node(std::string(m == Preemption::kLowestPriority ? "lowest_priority" : "off"));
          }};
}

// ---- the tables ---------------------------------------------------------------------------------

// Which model, in which format, with which llama2.c tokenizer: the keys of every model source.
std::vector<Field<ModelSource>> model_identity_fields() {
  using S = ModelSource;
  return {
      field("path", {}, &S::path, model_path()),
      field("format", {}, &S::format, one_of(S::formats())),
      field("tokenizer", {}, &S::tokenizer, path()),
  };
}

// models.draft: its placement and precision are its target's (draft_source_for), so it takes
// only the identity keys.
const Table<ModelSource>& draft_source_table() {
  static const Table<ModelSource> t("draft model source", model_identity_fields());
  return t;
}

const Table<ModelSource>& source_table() {
  using S = ModelSource;
  static const Table<S> t("model source", [] {
    std::vector<Field<S>> f = model_identity_fields();
    f.push_back(field("weights", {}, &S::weights, one_of(S::weights_kinds())));
    f.push_back(field("activations", {}, &S::activations, one_of(S::activations_kinds())));
    f.push_back(field("device", {}, &S::device));
    f.push_back(field("dtype", {}, &S::dtype, one_of(S::dtypes())));
    f.push_back(field("kv_dtype", {}, &S::kv_dtype, one_of(S::kv_dtypes())));
    return f;
  }());
  return t;
}

const Table<ModelsOptions>& models_table() {
  using M = ModelsOptions;
  static const Table<M> t("models", {
      field("target", {}, &M::target, section(source_table())),
      field("draft", {}, &M::draft, optional_section(draft_source_table())),
  });
  return t;
}

const Table<SamplingOptions>& sampling_table() {
  using S = SamplingOptions;
  static const Table<S> t("sampling", {
      field("temperature", {}, &S::temperature),
      field("top_k", {}, &S::top_k, top_k()),
      field("top_p", {}, &S::top_p),
      field("seed", {}, &S::seed),
  });
  return t;
}

const Table<GenerationOptions>& generation_table() {
  using G = GenerationOptions;
  static const Table<G> t("generation", {
      field("max_new_tokens", {"max_tokens"}, &G::max_new_tokens),
      field("stop", {"stop_strings"}, &G::stop),
      field("ignore_eos", {}, &G::ignore_eos),
  });
  return t;
}

// Read as text, category, id (the order messages list them in); written as id, category, text,
// the order results files already record.
const Table<InlinePrompt>& inline_table() {
  using P = InlinePrompt;
  static const Table<P> t("inline prompt",
                          {
                              field("text", {"prompt"}, &P::text),
                              field("category", {}, &P::category),
                              field("id", {}, &P::id),
                          },
                          {"id", "category", "text"});
  return t;
}

const Table<PromptSource>& prompt_source_table() {
  using P = PromptSource;
  static const Table<P> t("prompt source", {
      field("file", {}, &P::file, file_as_written()),
      field("field", {}, &P::field),
      field("category_field", {}, &P::category_field),
      field("category", {}, &P::category),
      field("id_field", {}, &P::id_field),
      field("categories", {}, &P::categories),
      field("per_category", {}, &P::per_category),
  });
  return t;
}

const Table<PromptsOptions>& prompts_table() {
  using P = PromptsOptions;
  static const Table<P> t("prompts", {
      field("files", {"file"}, &P::files, file_list()),
      field("field", {}, &P::field),
      field("category_field", {}, &P::category_field),
      field("id_field", {}, &P::id_field),
      field("sources", {}, &P::sources, entries(prompt_source_table(), "a list of {file, field, ...} maps")),
      field("inline", {}, &P::inline_prompts,
            entries(inline_table(), "a list of prompts (strings or {text, category, id})",
                    [](const std::string& text, InlinePrompt& p) { p.text = text; })),
      field("chat", {}, &P::chat, chat_mode()),
      field("system", {}, &P::system),
      field("limit", {}, &P::limit),
  });
  return t;
}

const Table<KvOptions>& kv_table() {
  using K = KvOptions;
  static const Table<K> t("kv", {
      field("block_size", {}, &K::block_size),
      // Declared in BlockManagerOptions, KvOptions' base.
      field<K, int64_t>("budget_bytes", {}, &K::budget_bytes, byte_count()),
      field<K, Preemption>("preemption", {}, &K::preemption, preemption_mode()),
  });
  return t;
}

const Table<OutputOptions>& output_table() {
  static const Table<OutputOptions> t("output", {field("path", {}, &OutputOptions::path)});
  return t;
}

const Table<EquivalenceOptions>& equivalence_table() {
  using Q = EquivalenceOptions;
  static const Table<Q> t("equivalence", {
      field("greedy", {}, &Q::greedy),
      field("analytic", {}, &Q::analytic),
      field("sampling", {}, &Q::sampling),
      field("samples", {}, &Q::samples),
      field("positions", {}, &Q::positions),
      field("temperatures", {}, &Q::temperatures),
      field("top_ps", {}, &Q::top_ps),
      field("top_ks", {}, &Q::top_ks),
      field("gammas", {}, &Q::gammas),
      field("alpha", {}, &Q::alpha),
      field("control_alpha", {}, &Q::control_alpha),
      field("negative_controls", {}, &Q::negative_controls),
      field("controls", {}, &Q::controls),
      field("eos_and_stop", {}, &Q::eos_and_stop),
      field("numerical_margin", {}, &Q::numerical_margin),
      field("contexts", {}, &Q::contexts),
      field("verifier", {}, &Q::verifier),
      field("verifier_samples", {}, &Q::verifier_samples),
      field("verifier_gammas", {}, &Q::verifier_gammas),
  });
  return t;
}

}  // namespace

const Table<ModelSource>& model_source_table() { return source_table(); }
const Table<PromptsOptions>& prompt_options_table() { return prompts_table(); }

const Table<DrafterEntry>& drafter_table() {
  using E = DrafterEntry;
  using O = DrafterOptions;
  static const Table<E> t(
      "drafter",
      {
          field("label", {}, &E::label),
          // vLLM's method name "ngram" becomes prompt_lookup in finalize(), where the entry has no plugin:
          field("name", {"method"}, &E::options, &O::name),
          field("plugin", {}, &E::options, &O::plugin, path()),
          field("num_speculative_tokens", {"gamma", "num_assistant_tokens", "prompt_lookup_num_tokens"}, &E::options,
                &O::num_speculative_tokens),
          field("schedule", {"num_assistant_tokens_schedule"}, &E::options, &O::schedule),
          field("max_speculative_tokens", {}, &E::options, &O::max_speculative_tokens),
          field("confidence_threshold", {"assistant_confidence_threshold"}, &E::options, &O::confidence_threshold),
          field("confidence_from_token", {}, &E::options, &O::confidence_from_token),
          field("prompt_lookup_min", {}, &E::options, &O::prompt_lookup_min),
          field("prompt_lookup_max", {"max_matching_ngram_size"}, &E::options, &O::prompt_lookup_max),
          field("prompt_lookup_first", {}, &E::options, &O::prompt_lookup_first),
          field("fallback_speculative_tokens", {}, &E::options, &O::fallback_speculative_tokens),
          field("retrieval_min", {}, &E::options, &O::retrieval_min),
          field("retrieval_max", {}, &E::options, &O::retrieval_max),
          field("retrieval_first", {}, &E::options, &O::retrieval_first),
          field("retrieval_datastore", {}, &E::options, &O::retrieval_datastore, path()),
          field("draft_layers", {}, &E::options, &O::draft_layers, layer_list()),
          field("draft_layers_first", {"assistant_early_exit"}, &E::options, &O::draft_layers_first,
                integer<int64_t>(kI32Min, kI32Max)),
          // A model named here is the entry's own: finalize() no longer fills it in from models.draft.
          also(field("draft_model", {"model"}, &E::options, &O::draft_model, model_path()),
               [](E& e) { e.draft_from_models = false; }),
          field("draft_model_format", {}, &E::options, &O::draft_model_format),
          field("draft_model_tokenizer", {}, &E::options, &O::draft_model_tokenizer, path()),
          field("draft_vocab", {}, &E::options, &O::draft_vocab, integer<int64_t>(0, kI32Max)),
          field("params", {}, &E::options, &O::params, parameter_map()),
      });
  return t;
}

const Table<ExperimentConfig>& top_table() {
  using C = ExperimentConfig;
  static const Table<C> t("top-level section", {
      field("name", {}, &C::name),
      field("models", {}, &C::models, section(models_table())),
      field("drafters", {}, &C::drafters, entries(drafter_table(), "a list of drafter entries (e.g. - {name: prompt_lookup})")),
      field("sampling", {}, &C::sampling, section(sampling_table())),
      field("generation", {}, &C::generation, section(generation_table())),
      field("prompts", {}, &C::prompts, section(prompts_table())),
      field("sweep", {}, &C::sweep, sweep_axes()),
      field("repeats", {}, &C::repeats),
      field("warmup", {}, &C::warmup),
      field("kv", {}, &C::kv, section(kv_table())),
      field("output", {}, &C::output, section(output_table())),
      field("equivalence", {}, &C::equivalence, optional_section(equivalence_table())),
  });
  return t;
}

const Schema& top_schema() { return top_table().schema(); }

// ---- unknown keys -------------------------------------------------------------------------------

namespace {

// Every key path in the schema ("sampling.temperature", "drafters[i].gamma"), aliases included.
void collect_paths(const Schema& s, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& k : s.keys) {
    std::vector<std::string> names = {k.key};
    names.insert(names.end(), k.aliases.begin(), k.aliases.end());
    for (const auto& n : names) out.emplace_back(n, join_path(prefix, k.key));
    if (k.child) collect_paths(*k.child, join_path(prefix, k.key) + (k.shape == Shape::kEntries ? "[i]" : ""), out);
  }
}

// Whether `s` is `tree` or one of its sections' or entries' schemas.
bool in_tree(const Schema& s, const Schema& tree) {
  if (&s == &tree) return true;
  for (const auto& k : tree.keys)
    if (k.child && in_tree(s, *k.child)) return true;
  return false;
}

}  // namespace

std::string unknown_key_message(const std::string& written, const Schema& schema, const std::string& section_path) {
  std::string msg = "unknown key " + squote(written);
  if (!section_path.empty()) msg += " in " + section_path;
  // HF's and vLLM's names that are not aliases here (docs/config.md's HF and vLLM columns): the
  // setting they name, which the key list alone did not point to.
  static const std::map<std::string, std::string> foreign = {
      {"do_sample", "HF's do_sample: SpecLab samples where sampling.temperature is above 0 (0 is greedy)"},
      {"torch_dtype", "HF's torch_dtype: SpecLab's key is dtype (models.target.dtype)"},
      {"kv_cache_dtype", "vLLM's kv_cache_dtype: SpecLab's key is kv_dtype (models.target.kv_dtype)"},
      {"assistant_model", "HF's assistant_model: SpecLab's key is draft_model (drafters[i].draft_model, or models.draft)"},
  };
  if (const auto f = foreign.find(written); f != foreign.end()) return msg + "; " + f->second;
  const std::string near = yaml_util::closest_match(written, schema.all_names());
  if (!near.empty()) return msg + "; did you mean " + squote(near) + "?";
  // A key that belongs elsewhere in a run config: only where `schema` is part of one (the
  // train-draft config's own sections are not, and a run config's paths would mislead there).
  if (in_tree(schema, top_schema())) {
    std::vector<std::pair<std::string, std::string>> all;
    collect_paths(top_schema(), "", all);
    for (const auto& [name, path] : all)
      if (name == written && path != join_path(section_path, written))
        // With the section's own keys: `output: {file: x.h5}` meant output.path, not prompts.files.
        return msg + "; did you mean " + squote(path) + "? (" + (section_path.empty() ? "the top level" : section_path) +
               " takes: " + schema.key_list() + ")";
  }
  return msg + "; expected one of: " + schema.key_list();
}

// ---- sweep keys ---------------------------------------------------------------------------------

namespace {

// A drafters entry key that a drafter.<key> sweep may set (not the label: labels name results).
bool drafter_sweepable(const KeyDef& d) { return d.single_valued() && d.key != "label"; }

std::vector<std::string> sweepable_keys() {
  std::vector<std::string> out;
  std::function<void(const Schema&, const std::string&)> walk = [&](const Schema& s, const std::string& prefix) {
    for (const auto& k : s.keys) {
      if (k.single_valued()) {
        if (!unsweepable_reason(join_path(prefix, k.key)).empty()) continue;
        out.push_back(join_path(prefix, k.key));
        for (const auto& a : k.aliases) out.push_back(join_path(prefix, a));
      } else if (k.shape == Shape::kSection) {
        walk(*k.child, join_path(prefix, k.key));
      }
    }
  };
  walk(top_schema(), "");
  for (const auto& k : drafter_table().schema().keys) {
    if (!drafter_sweepable(k)) continue;
    out.push_back("drafter." + k.key);
    for (const auto& a : k.aliases) out.push_back("drafter." + a);
  }
  return out;
}

}  // namespace

std::string canonical_sweep_key(const std::string& written) {
  if (starts_with(written, "drafter.params.") && written.size() > 15) return written;
  const std::vector<std::string> segs = split(written, '.');
  if (segs.size() == 2 && segs[0] == "drafter") {
    const KeyDef* d = drafter_table().schema().find(segs[1]);
    if (!d || !drafter_sweepable(*d)) return {};
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
      if (!d->single_valued()) return {};
    } else if (d->shape == Shape::kSection) {
      s = d->child;
    } else {
      return {};
    }
  }
  return join(canon, ".");
}

// One run writes one file under one name, and the equivalence section belongs to `speclab check`.
std::string unsweepable_reason(const std::string& key) {
  if (key == "name" || starts_with(key, "output."))
    return "expected a per-point setting, found " + squote(key) +
           ": one run writes one HDF5 file under one name; run the config once per value instead";
  if (starts_with(key, "equivalence."))
    return "expected a per-point setting, found " + squote(key) +
           ": the equivalence section configures `speclab check`, which does not sweep";
  // Every value gives the same prompt ids other texts or categories, which one file's /prompts
  // cannot hold: such a sweep was accepted and then always refused at its second point (until
  // 2026-12-07).
  if (key == "prompts.field" || key == "prompts.category_field")
    return "expected a per-point setting, found " + squote(key) +
           ": each value reads the same prompts (the same ids) with other texts or categories, and one run's "
           "/prompts holds one text and category per id; run the config once per value instead";
  return {};
}

std::string unknown_sweep_key_message(const std::string& written) {
  std::string msg = "unknown sweep key " + squote(written);
  const std::string near = yaml_util::closest_match(written, sweepable_keys());
  if (!near.empty()) return msg + "; did you mean " + squote(near) + "?";
  return msg + "; expected \"<section>.<key>\" naming a single-valued setting (e.g. sampling.temperature, "
               "generation.max_new_tokens, drafter.num_speculative_tokens for every drafter)";
}

// ---- locating a key path in a tree --------------------------------------------------------------

namespace {

// locate(); *complete: whether every part of `path` was found written.
YamlValue locate_written(const YAML::Node& root, const YamlOrigin& origin, const std::string& path,
                         const Schema* schema, bool* complete) {
  *complete = false;
  bool missing = false;
  std::vector<std::string> segs = split_key(path);
  YAML::Node cur = root;
  YAML::Node key;
  std::string written;
  if (!schema) schema = &top_schema();
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
    const YAML::Node k = def->key_in(cur);
    if (!k.IsDefined()) break;
    written = join_path(written, k.Scalar());
    key.reset(k);
    YAML::Node next = def->value_in(cur);
    cur.reset(next);
    if ((def->shape == Shape::kSweep || def->shape == Shape::kFreeMap) && i + 1 < segs.size()) {
      const std::string rest = join(std::vector<std::string>(segs.begin() + static_cast<std::ptrdiff_t>(i) + 1, segs.end()), ".");
      i = segs.size();
      missing = true;  // unless found below
      if (!cur.IsMap()) {
        written += "." + rest;
        break;
      }
      for (auto it = cur.begin(); it != cur.end(); ++it) {
        if (!it->first.IsScalar()) continue;
        const std::string k2 = it->first.Scalar();
        if (def->shape == Shape::kSweep ? canonical_sweep_key(k2) == rest : k2 == rest) {
          written += "." + k2;
          key.reset(it->first);
          YAML::Node value = it->second;
          cur.reset(value);
          *complete = true;
          return YamlValue(&origin, cur, key, written);
        }
      }
      written += "." + rest;
      break;
    }
    schema = def->child;
  }
  *complete = !missing && i == segs.size() && !segs.empty();
  for (; i < segs.size(); ++i) {
    size_t idx = 0;
    written += is_index(segs[i], idx) ? "[" + segs[i] + "]" : (written.empty() ? "" : ".") + segs[i];
  }
  return YamlValue(&origin, cur, key, written);
}

}  // namespace

YamlValue locate(const YAML::Node& root, const YamlOrigin& origin, const std::string& path, const Schema* schema) {
  bool complete = false;
  return locate_written(root, origin, path, schema, &complete);
}

std::optional<YamlValue> find_written(const YAML::Node& root, const YamlOrigin& origin, const std::string& path,
                                      const Schema* schema) {
  bool complete = false;
  YamlValue v = locate_written(root, origin, path, schema, &complete);
  if (!complete) return std::nullopt;
  return v;
}

}  // namespace speclab::config
