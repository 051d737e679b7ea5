// YAML -> TrainDraftConfig: the field tables of `speclab train-draft` and its validate().
#include "framework/io/train_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/regular_file.h"
#include "framework/io/config_schema.h"
#include "framework/io/config_util.h"

namespace speclab {

namespace config {
namespace {

const Table<DraftDataOptions>& data_table() {
  using D = DraftDataOptions;
  static const Table<D> t("data", {
      field("prompts", {}, &D::prompts, section(prompt_options_table())),
      field("answer_tokens", {}, &D::answer_tokens),
      field("answer_batch", {}, &D::answer_batch),
      field("max_prompt_tokens", {}, &D::max_prompt_tokens),
      field("validation_fraction", {}, &D::validation_fraction),
      field("cache_dir", {}, &D::cache_dir, path()),
  });
  return t;
}

const Table<DraftHeadOptions>& head_table() {
  using H = DraftHeadOptions;
  static const Table<H> t("head", {field("vocab_top_n", {}, &H::vocab_top_n), field("medusa_heads", {}, &H::medusa_heads),
                                   field("draft_layers", {}, &H::draft_layers, layer_list()),
                                   field("aux_layers", {}, &H::aux_layers, layer_list()),
                                   field("layers", {}, &H::layers)});
  return t;
}

const Table<DraftTrainOptions>& train_table() {
  using T = DraftTrainOptions;
  static const Table<T> t("train", {
      field("steps", {}, &T::steps),
      field("batch_tokens", {}, &T::batch_tokens),
      field("lr", {}, &T::lr),
      field("warmup", {}, &T::warmup),
      field("weight_decay", {}, &T::weight_decay),
      field("grad_clip", {}, &T::grad_clip),
      field("token_loss_weight", {}, &T::token_loss_weight),
      field("feature_noise", {}, &T::feature_noise),
      field("unroll", {}, &T::unroll),
      field("unroll_decay", {}, &T::unroll_decay),
      field("medusa_decay", {}, &T::medusa_decay),
      field("init", {}, &T::init, path()),
      field("eval_every", {}, &T::eval_every),
      field("checkpoint_every", {}, &T::checkpoint_every),
      field("seed", {}, &T::seed),
  });
  return t;
}

const Table<TrainDraftOutput>& train_output_table() {
  using O = TrainDraftOutput;
  static const Table<O> t("output", {
      field("path", {}, &O::path, path()),
      field("log", {}, &O::log, path()),
      field("checkpoint", {}, &O::checkpoint, path()),
      field("dtype", {}, &O::dtype),
  });
  return t;
}

const Table<TrainDraftConfig>& train_top_table() {
  using C = TrainDraftConfig;
  static const Table<C> t("train-draft", {
      field("target", {}, &C::target, section(model_source_table())),
      field("architecture", {}, &C::architecture),
      field("data", {}, &C::data, section(data_table())),
      field("head", {}, &C::head, section(head_table())),
      field("train", {}, &C::train, section(train_table())),
      field("output", {}, &C::output, section(train_output_table())),
  });
  return t;
}

// The evaluation sets SpecLab measures on: training on them would flatter every figure.
const char* evaluation_set(const std::string& file) {
  std::string base = basename_of(file);  // in lower case: HumanEval.jsonl.gz is the official name
  std::transform(base.begin(), base.end(), base.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (base.find("mt_bench") != std::string::npos || base.find("mt-bench") != std::string::npos) return "MT-bench";
  if (base.find("humaneval") != std::string::npos) return "HumanEval";
  if (base.find("gsm8k_test") != std::string::npos || base.find("gsm8k-test") != std::string::npos) return "GSM8K test";
  return nullptr;
}

}  // namespace
}  // namespace config

std::string replace_extension(const std::string& path, const std::string& suffix) {
  const size_t slash = path.find_last_of('/'), dot = path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return (has_ext ? path.substr(0, dot) : path) + suffix;
}

namespace {

[[noreturn]] void bad(const std::string& key, const std::string& msg) { throw Error(ErrorKind::kConfig, msg, "", key); }

}  // namespace

void DraftDataOptions::validate() const {
  try {
    prompts.validate();
  } catch (const Error& e) {  // PromptOptions names its own section ("prompts"): here it is data.prompts
    if (e.file() != "prompts") throw;
    bad("data.prompts" + (e.field().empty() ? std::string() : "." + e.field()), e.message());
  }
  std::vector<std::string> files = prompts.files;
  for (const PromptSource& s : prompts.sources) files.push_back(s.file);
  for (const std::string& f : files)
    if (const char* set = config::evaluation_set(f))
      bad("data.prompts", "training prompts must not come from an evaluation set: " + f + " is " + set);
  if (answer_tokens < 1) bad("data.answer_tokens", "expected at least 1, found " + std::to_string(answer_tokens));
  if (answer_batch < 1 || answer_batch > 32)
    bad("data.answer_batch", "expected 1 to 32 prompts answered together, found " + std::to_string(answer_batch));
  if (max_prompt_tokens < 1) bad("data.max_prompt_tokens", "expected at least 1, found " + std::to_string(max_prompt_tokens));
  // Every K-th prompt is held out, K = round(1 / validation_fraction) >= 2: at most half.
  if (!(validation_fraction > 0 && validation_fraction <= 0.5))
    bad("data.validation_fraction", "expected a fraction in (0, 0.5] (every round(1 / fraction)-th prompt is held out), found " +
                                        config::to_text(validation_fraction));
}

void DraftHeadOptions::validate() const {
  if (vocab_top_n < 0) bad("head.vocab_top_n", "expected 0 (the full head) or a positive count");
  if (medusa_heads < 1 || medusa_heads > 16)
    bad("head.medusa_heads", "expected 1 to 16 heads, found " + std::to_string(medusa_heads));
  for (int64_t l : draft_layers)
    if (l < 0) bad("head.draft_layers", "expected layer indices >= 0, found " + std::to_string(l));
  if (layers < 1 || layers > 4) bad("head.layers", "expected 1 to 4 decoder layers, found " + std::to_string(layers));
  if (aux_layers.size() > 4)
    bad("head.aux_layers", "expected at most 4 target layer indices, found " + std::to_string(aux_layers.size()));
  for (size_t i = 0; i < aux_layers.size(); ++i) {
    if (aux_layers[i] < 0) bad("head.aux_layers", "expected layer indices >= 0, found " + std::to_string(aux_layers[i]));
    for (size_t j = 0; j < i; ++j)
      if (aux_layers[j] == aux_layers[i])
        bad("head.aux_layers", "layer " + std::to_string(aux_layers[i]) + " is listed twice");
  }
}

void DraftTrainOptions::validate() const {
  if (!(medusa_decay > 0 && medusa_decay <= 1))
    bad("train.medusa_decay", "expected a decay in (0, 1], found " + config::to_text(medusa_decay));
  if (steps < 1) bad("train.steps", "expected at least 1 step");
  if (batch_tokens < 1) bad("train.batch_tokens", "expected at least 1");
  if (!(lr > 0 && lr < 1)) bad("train.lr", "expected a learning rate in (0, 1), found " + config::to_text(lr));
  if (warmup < 0) bad("train.warmup", "expected 0 or more steps");
  if (!(weight_decay >= 0 && weight_decay < 1)) bad("train.weight_decay", "expected a value in [0, 1)");
  if (!(grad_clip >= 0)) bad("train.grad_clip", "expected 0 (off) or a positive norm");
  if (!(token_loss_weight >= 0 && std::isfinite(token_loss_weight)))
    bad("train.token_loss_weight", "expected a finite weight >= 0, found " + config::to_text(token_loss_weight));
  if (!(feature_noise >= 0 && feature_noise <= 1))
    bad("train.feature_noise", "expected a fraction of the features' RMS in [0, 1], found " + config::to_text(feature_noise));
  if (unroll < 1 || unroll > 8) bad("train.unroll", "expected 1 to 8 draft steps, found " + std::to_string(unroll));
  if (!(unroll_decay > 0 && unroll_decay <= 1))
    bad("train.unroll_decay", "expected a decay in (0, 1], found " + config::to_text(unroll_decay));
  // It weighs draft steps 2..unroll: with one step there is nothing to weigh (it was ignored).
  if (unroll == 1 && unroll_decay != DraftTrainOptions{}.unroll_decay)
    bad("train.unroll_decay", "expected train.unroll above 1 for a decay over its draft steps, found unroll 1");
  if (eval_every < 1) bad("train.eval_every", "expected at least 1");
  if (checkpoint_every < 0) bad("train.checkpoint_every", "expected 0 (only at the end) or more steps");
}

void TrainDraftOutput::validate() const {
  if (path.empty()) bad("output.path", "expected the path of the draft (.safetensors)");
  // The drafters take a trained draft by its extension: one named x.gguf was written and then
  // read as a GGUF model.
  if (path.size() < 12 || path.compare(path.size() - 12, 12, ".safetensors") != 0)
    bad("output.path", "expected a path ending in .safetensors, found '" + path + "'");
  // A directory's path ("logs/") names no file: refused here, before the run makes any directory
  // or --overwrite removes anything (the refusal came after both).
  for (const auto& [key, file] : {std::pair<const char*, const std::string*>{"output.checkpoint", &checkpoint},
                                  {"output.log", &log}}) {
    if (names_a_directory(*file))
      bad(key, "expected a file path, found a directory's path '" + *file + "'");
  }
  if (dtype != "float32" && dtype != "float16") bad("output.dtype", "expected float32 or float16, found '" + dtype + "'");
}

void TrainDraftConfig::validate() const {
  if (architecture != "eagle" && architecture != "medusa" && architecture != "draft_model" && architecture != "retrieval")
    bad("architecture", "expected eagle, medusa, draft_model or retrieval, found '" + architecture + "'");
  data.validate();
  head.validate();
  train.validate();
  output.validate();
  // Retrieval trains nothing (stage 1's answers become its datastore): any train.* or head.* key
  // set off its default would be ignored silently (they were until 2026-12-05). Compared through
  // the tables' dumps, so a key added to either table is covered without a line here.
  if (architecture == "retrieval") {
    const config::Ctx ctx{""};
    auto refuse_set = [&](const YAML::Node& given, const YAML::Node& defaults, const std::string& section) {
      for (const auto& kv : given) {
        const std::string key = kv.first.as<std::string>();
        if (YAML::Dump(kv.second) != YAML::Dump(defaults[key]))
          bad(section + "." + key, "a retrieval datastore is built from the target's answers, not trained: it reads no " +
                                       section + ".* key (remove it, or choose an architecture that trains)");
      }
    };
    refuse_set(config::train_table().dump(train, ctx), config::train_table().dump(DraftTrainOptions{}, ctx), "train");
    refuse_set(config::head_table().dump(head, ctx), config::head_table().dump(DraftHeadOptions{}, ctx), "head");
  }
  // What each architecture takes.
  if (architecture == "draft_model" && (head.draft_layers.empty() || head.draft_layers.size() > 8))
    bad("head.draft_layers", "expected 1 to 8 target layer indices (the distilled draft's layers start as copies of them)");
  if (!head.aux_layers.empty() && architecture != "eagle")
    bad("head.aux_layers", "only an eagle head reads aux layers; this architecture is " + architecture);
  if (head.layers != 1 && architecture != "eagle")
    bad("head.layers", "only an eagle head has this many decoder layers; this architecture is " + architecture);
  // Keys another architecture reads, set here off their defaults, would be ignored silently (they
  // were until 2026-11-29).
  const DraftTrainOptions train_defaults;
  const DraftHeadOptions head_defaults;
  auto only_for = [&](const char* arch, const char* key, bool set) {
    if (set && architecture != arch)
      bad(key, std::string("only ") + arch + " reads it; this architecture is " + architecture);
  };
  only_for("eagle", "train.feature_noise", train.feature_noise != train_defaults.feature_noise);
  only_for("eagle", "train.unroll", train.unroll != train_defaults.unroll);
  only_for("eagle", "train.unroll_decay", train.unroll_decay != train_defaults.unroll_decay);
  only_for("eagle", "train.token_loss_weight", train.token_loss_weight != train_defaults.token_loss_weight);
  only_for("medusa", "train.medusa_decay", train.medusa_decay != train_defaults.medusa_decay);
  only_for("medusa", "head.medusa_heads", head.medusa_heads != head_defaults.medusa_heads);
  if (!head.draft_layers.empty() && architecture != "draft_model")
    bad("head.draft_layers", "only draft_model reads it (the distilled draft's layers); this architecture is " + architecture);
  if (architecture == "retrieval" && output.dtype != "float32")
    bad("output.dtype", "expected float32 for a retrieval datastore (its token ids are exact in float32, not in float16), "
                        "found '" + output.dtype + "'");
}

std::string draft_file_stem(const std::string& target_source) {
  std::string p = target_source;
  if (const NamedModel* m = find_named_model(p)) p = m->file;
  while (p.size() > 1 && p.back() == '/') p.pop_back();  // an HF directory named with a slash
  const std::filesystem::path path(p);
  std::error_code ec;
  // A directory keeps its whole name ("Llama-3.2-1B", not "Llama-3"); a file loses its extension.
  return std::filesystem::is_directory(path, ec) ? path.filename().string() : path.stem().string();
}

std::string default_train_output(const ModelSource& target, const std::string& architecture) {
  return std::string(SPECLAB_SOURCE_DIR) + "/.cache/drafts/" + draft_file_stem(target.path) + "." + architecture +
         ".safetensors";
}

TrainDraftConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  using namespace config;
  YamlOrigin origin(path);
  YAML::Node root = parse_config_root(load_yaml_text(path), path, origin, "target, data, head, train, output");
  refuse_other_config_kind(root, origin, ConfigKind::kTrainDraft);
  for (const std::string& o : overrides) apply_override(root, o, origin, &train_top_table().schema());
  TrainDraftConfig cfg;
  cfg.source_path = path;
  const Ctx ctx{dirname_of(path)};
  train_top_table().read(YamlValue(&origin, root, YAML::Node(), ""), ctx, cfg);
  // A retrieval datastore writes no training log and no checkpoint: one given would be ignored.
  const std::string given_output = !cfg.output.log.empty()          ? "output.log"
                                   : !cfg.output.checkpoint.empty() ? "output.checkpoint"
                                                                    : "";
  // Without output.path, the draft goes where its drafter looks by default: it went to
  // ./.cache/drafts/eagle.safetensors under the working directory, for every architecture and target.
  const YAML::Node& const_root = root;
  // Without data.cache_dir, the checkout's .cache/draft_data, beside the default draft: it was
  // ".cache/draft_data" of the working directory, while the same value written in the file was the
  // YAML file's directory's (until 2026-12-07).
  const YAML::Node data = const_root["data"];
  if (!(data.IsDefined() && data.IsMap() && data["cache_dir"].IsDefined()))
    cfg.data.cache_dir = std::string(SPECLAB_SOURCE_DIR) + "/.cache/draft_data";
  const YAML::Node output = const_root["output"];  // invalid (not an error) when absent
  if (!(output.IsDefined() && output.IsMap() && output["path"].IsDefined()))
    cfg.output.path = default_train_output(cfg.target, cfg.architecture);
  if (cfg.output.log.empty()) cfg.output.log = replace_extension(cfg.output.path, ".h5");
  if (cfg.output.checkpoint.empty()) cfg.output.checkpoint = replace_extension(cfg.output.path, ".ckpt.safetensors");
  cfg.resolved_yaml = emit(train_top_table().dump(cfg, ctx));
  try {
    if (cfg.architecture == "retrieval" && !given_output.empty())
      throw Error(ErrorKind::kConfig,
                  "a retrieval datastore writes no training log and no checkpoint (it trains nothing): remove " +
                      given_output,
                  "", given_output);
    // The draft, its training log and its checkpoint are three files: one path for two of them
    // made each write replace the other (the checkpoint left in place of the draft, or the log lost).
    const auto same = [](const std::string& a, const std::string& b) {
      return std::filesystem::absolute(a).lexically_normal() == std::filesystem::absolute(b).lexically_normal();
    };
    const std::pair<const char*, const std::string*> files[] = {
        {"output.path", &cfg.output.path}, {"output.log", &cfg.output.log}, {"output.checkpoint", &cfg.output.checkpoint}};
    for (size_t i = 1; i < 3; ++i)
      for (size_t j = 0; j < i; ++j)
        if (cfg.architecture != "retrieval" && !files[i].second->empty() && !files[j].second->empty() &&
            same(*files[i].second, *files[j].second))
          throw Error(ErrorKind::kConfig,
                      std::string("expected a file of its own, found the path of ") + files[j].first + " (" +
                          *files[j].second + ")",
                      "", files[i].first);
    // Fine-tuning a draft in place: --overwrite moves output.path aside before the init is read,
    // which then failed as "cannot open: No such file or directory" (until 2026-12-07).
    for (const auto& [key, file] : files)
      if (!cfg.train.init.empty() && !file->empty() && same(cfg.train.init, *file))
        throw Error(ErrorKind::kConfig,
                    std::string("expected a draft other than ") + key + ", which this run replaces, found " +
                        cfg.train.init + "; copy it elsewhere and name the copy",
                    "", "train.init");
    cfg.validate();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kConfig) throw;
    const YamlValue at = locate(root, origin, e.field(), &train_top_table().schema());
    throw Error(ErrorKind::kConfig, e.message(), at.where(), at.path);
  }
  return cfg;
}

std::vector<std::string> train_config_warnings(const TrainDraftConfig& c) {
  std::vector<std::string> out;
  if (c.architecture != "retrieval" && c.train.warmup > 0 && c.train.warmup >= c.train.steps)
    out.push_back("train.warmup (" + std::to_string(c.train.warmup) + ") is not below train.steps (" +
                  std::to_string(c.train.steps) + "): the learning rate rises for the whole run and peaks at " +
                  config::to_text(c.train.lr * static_cast<double>(c.train.steps) /
                                  static_cast<double>(c.train.warmup)) +
                  ", not train.lr, with no cosine decay");
  return out;
}

Error located_train_config_error(const Error& e, const std::string& path, const std::vector<std::string>& overrides) {
  if (e.kind() != ErrorKind::kConfig || e.file() != path || e.field().empty()) return e;
  try {
    using namespace config;
    const WrittenConfig w =
        read_written_config(path, overrides, "target, data, head, train, output", &train_top_table().schema());
    const std::optional<YamlValue> at = find_written(w.root, w.origin, e.field(), &train_top_table().schema());
    return at ? Error(e.kind(), e.message(), at->where(), at->path) : e;
  } catch (const Error&) {
    return e;  // the file no longer parses: the error as it was
  }
}

}  // namespace speclab
