#include "experiments/app/draft_training.h"

#include <ATen/ATen.h>

#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "experiments/app/evaluation_sets.h"
#include "experiments/app/experiment_runner.h"
#include "framework/core/blas_core.h"
#include "framework/core/error.h"
#include "framework/core/fnv.h"
#include "framework/core/replace_file.h"
#include "framework/core/thread_pool.h"
#include "framework/core/token_tensor.h"
#include "framework/draft/drafter_options.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/batch_decode.h"
#include "framework/io/config_canonical.h"
#include "framework/io/config_util.h"
#include "framework/io/path_lock.h"
#include "framework/io/prompt_loader.h"
#include "framework/io/train_log.h"
#include "framework/io/yaml_util.h"
#include "framework/train/distill_trainer.h"
#include "framework/train/medusa_trainer.h"
#include "framework/train/small_draft.h"
#include "framework/train/training_runtime.h"
#include "models/loaders/dequant.h"
#include "models/llama/llama_model.h"
#include "models/loaders/safetensors.h"
#include "models/model_loader.h"

namespace speclab {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using Fnv = Fnv64;

at::Tensor to_tensor(const HostTensor& t) {
  return at::tensor(t.data, at::kFloat).view(t.shape).clone();
}

HostTensor to_host(const at::Tensor& t) {
  HostTensor h;
  const at::Tensor c = t.detach().to(at::kFloat).contiguous();
  h.shape.assign(c.sizes().begin(), c.sizes().end());
  h.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  return h;
}

// The tensors of a safetensors file SpecLab wrote (a draft, a checkpoint, a features cache), each
// finite but those whose name starts with `may_be_nan` (a log's "no value" marks): a NaN or an
// infinity is Error(kBadInput, path) naming the tensor and the element, with `remedy` appended.
// (A NaN weight trained on gave a NaN loss blamed on train.lr; one drafted with failed sampling
// with an unnamed "expected finite logits".)
std::map<std::string, at::Tensor> read_tensors(const std::string& path, std::map<std::string, std::string>* meta,
                                               const std::string& remedy = "", const std::string& may_be_nan = "") {
  const SafetensorsFile f = SafetensorsFile::open(path);
  if (meta) *meta = f.metadata();
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : f.tensors()) {
    const HostTensor h = f.read(kv.first);
    if (may_be_nan.empty() || kv.first.rfind(may_be_nan, 0) != 0) {
      const auto bad = std::find_if(h.data.begin(), h.data.end(), [](float x) { return !std::isfinite(x); });
      if (bad != h.data.end())
        throw Error(ErrorKind::kBadInput,
                    "tensor " + kv.first + " holds " + (std::isnan(*bad) ? "a NaN" : "an infinity") + " (element " +
                        std::to_string(bad - h.data.begin()) + " of " + std::to_string(h.data.size()) +
                        "): expected finite values; the file is corrupt" + (remedy.empty() ? "" : " (" + remedy + ")"),
                    path);
    }
    out[kv.first] = to_tensor(h);
  }
  return out;
}

// dtype float16: every tensor but the integer vocab_ids (kept float32, exact).
// An error names `path` and `field` (the config key that chose it), not the temporary file,
// which is gone by then (until 2026-12-06: "e.ckpt.safetensors.tmp.7633: write failed").
void write_tensors(const std::string& path, const std::string& field, const std::map<std::string, at::Tensor>& tensors,
                   const std::map<std::string, std::string>& meta, const std::string& dtype = "float32") {
  WeightMap w;
  for (const auto& kv : tensors) w[kv.first] = to_host(kv.second);
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  // A checkpoint is never half written (replace_file: the temporary is the process's own, so two
  // runs sharing a cache, the same features file say, never write into one).
  try {
    replace_file(path, [&](const std::string& tmp) {
      write_safetensors(tmp, w, dtype == "float16" ? SafetensorsDtype::kF16 : SafetensorsDtype::kF32, meta,
                        {"vocab_ids"});
    });
  } catch (const Error& e) {
    throw Error(e.kind(), "cannot write " + path + ": " + e.message(), path, field);
  }
}

// The target's frozen tensors a draft reuses (float32), and the tensors of the target layers a
// distilled draft starts from.
struct TargetTensors {
  ModelConfig config;
  at::Tensor embed;       // [V, d]
  at::Tensor final_norm;  // [d]
  at::Tensor lm_head;     // [V, d] (the embeddings when tied)
  std::map<std::string, at::Tensor> layers;  // "model.layers.<l>.*" of the layers asked for, and
                                             // "model.norm.weight" when any
};

TargetTensors target_tensors(const LoadedModel& target, const std::vector<int64_t>& layers = {}) {
  LoadedModel m = load_model(target.origin);
  auto take = [&](const std::string& name) {
    auto it = m.weights.find(name);
    if (it == m.weights.end()) throw Error(ErrorKind::kBadInput, "the target has no tensor " + name, target.source);
    unpack_to_f32(it->second, name);
    return to_tensor(it->second);
  };
  TargetTensors t;
  t.config = m.config;
  t.embed = take("model.embed_tokens.weight");
  t.final_norm = take("model.norm.weight");
  t.lm_head = m.config.tie_word_embeddings ? t.embed : take("lm_head.weight");
  for (int64_t l : layers) {
    if (l >= m.config.num_hidden_layers)
      throw Error(ErrorKind::kConfig,
                  "layer " + std::to_string(l) + " is out of range: the target has layers 0.." +
                      std::to_string(m.config.num_hidden_layers - 1),
                  target.source, "head.draft_layers");
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    for (auto& kv : m.weights)
      if (kv.first.compare(0, prefix.size(), prefix) == 0) t.layers[kv.first] = take(kv.first);
  }
  if (!layers.empty()) t.layers["model.norm.weight"] = t.final_norm;
  return t;
}

std::string layer_text(const std::vector<int64_t>& layers) {
  std::string s;
  for (int64_t l : layers) s += (s.empty() ? "" : ",") + std::to_string(l);
  return s;
}

// Whether l can be an aux layer of `target`: a layer below its last (which the head reads anyway).
bool valid_aux_layer(int64_t l, const ModelConfig& target) { return l >= 0 && l < target.num_hidden_layers - 1; }
std::string aux_range(const ModelConfig& target) { return "0.." + std::to_string(target.num_hidden_layers - 2); }

// An eagle draft's metadata aux_layers ("2,15"; absent or empty: none): distinct target layers
// below the last. Error(kBadInput, path) otherwise.
std::vector<int64_t> parse_aux_layers(const std::string& text, const ModelConfig& target, const std::string& path) {
  std::vector<int64_t> out;
  if (text.empty()) return out;
  size_t i = 0;
  while (true) {
    const size_t j = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, j - i);
    int64_t l = -1;
    try {
      size_t used = 0;
      l = std::stoll(item, &used);
      if (used != item.size()) l = -1;
    } catch (const std::exception&) {
    }
    if (!valid_aux_layer(l, target) || std::find(out.begin(), out.end(), l) != out.end())
      throw Error(ErrorKind::kBadInput,
                  "metadata aux_layers: expected distinct target layers " + aux_range(target) + ", found '" + text + "'",
                  path);
    out.push_back(l);
    if (j == text.size()) return out;
    i = j + 1;
  }
}

void set_frozen(EagleHead& head, const TargetTensors& t) {
  head.target = t.config;
  head.embed = t.embed;
  head.final_norm = t.final_norm;
  head.lm_head = t.lm_head;
}

// The decoder layers of an eagle draft whose tensor names `has` knows: the first ("layer.")
// and every "layers.<l>." after it (eagle_layer_prefix).
int64_t eagle_draft_layers(const std::function<bool(const std::string&)>& has) {
  int64_t l = 1;
  while (has(eagle_layer_prefix(l) + "self_attn.q_proj.weight")) ++l;
  return l;
}

void set_frozen(MedusaHeads& heads, const TargetTensors& t) {
  heads.target = t.config;
  heads.final_norm = t.final_norm;
  heads.lm_head = t.lm_head;
}

// The target token ids a reduced head keeps: the top_n most frequent target top-1 tokens,
// ascending (all ids when top_n is 0 or covers the vocabulary).
at::Tensor head_vocab_ids(const at::Tensor& top1 /*[N]*/, int64_t vocab, int64_t top_n) {
  if (top_n <= 0 || top_n >= vocab) return at::arange(vocab, at::kLong);
  const at::Tensor counts = at::bincount(top1, {}, vocab);
  // Stable: by count descending, ties by id; then the kept ids ascending.
  const at::Tensor order = std::get<1>(at::sort(counts, /*stable=*/true, 0, /*descending=*/true));
  return std::get<0>(at::sort(order.narrow(0, 0, top_n)));
}

// The LM head rows of `ids` (the whole head when it keeps every id).
at::Tensor head_rows(const at::Tensor& lm_head /*[V, d]*/, const at::Tensor& ids /*[V']*/) {
  return ids.size(0) < lm_head.size(0) ? lm_head.index_select(0, ids).contiguous() : lm_head;
}

struct Sample {
  TokenList prompt, answer;
  bool validation = false;
  // Stage 2's rows of prompt + answer when stage 1 already computed them (the answer was
  // generated in this run); undefined for a cached answer, which is teacher-forced.
  at::Tensor features, aux, top1;  // [n, d], [n, A d] (A > 0), [n] int64
};

// The target layers stage 2 reads: the aux layers, then the last.
std::vector<int64_t> feature_layers(const Model& model, const std::vector<int64_t>& aux_layers) {
  std::vector<int64_t> layers = aux_layers;
  layers.push_back(model.config().num_hidden_layers - 1);
  return layers;
}

// A sample's stage-2 rows from the residual streams of feature_layers() (hidden[A] the last's)
// and the target's top-1 at each position.
void set_features(Sample& s, const std::vector<at::Tensor>& hidden /*[A + 1] of [n, d]*/, const at::Tensor& top1 /*[n]*/,
                  const TargetTensors& frozen) {
  const size_t A = hidden.size() - 1;
  s.features = target_features(hidden[A], frozen.final_norm, frozen.config.rms_norm_eps);
  if (A > 0) {
    std::vector<at::Tensor> a;
    for (size_t l = 0; l < A; ++l) a.push_back(eagle_aux_features(hidden[l], frozen.config.rms_norm_eps));
    s.aux = at::cat(a, 1);
  }
  s.top1 = top1;
}

std::string cache_key(const TrainDraftConfig& c, const std::string& target_hash, const std::vector<Prompt>& prompts) {
  Fnv f;
  f.add(target_hash);
  f.add(std::to_string(c.data.answer_tokens));
  f.add(std::to_string(c.data.max_prompt_tokens));
  f.add(c.data.prompts.chat);
  f.add(c.data.prompts.system);
  f.add(std::to_string(c.data.validation_fraction));
  for (const Prompt& p : prompts) f.add(p.text);
  // How the target was loaded changes its answers and features (a float32 run's cache must not
  // serve a bfloat16 one). Only settings off their defaults are added, so that caches written
  // before they were keyed stay valid for the default load.
  const ModelSource defaults;
  for (const auto& [name, value, fallback] :
       {std::make_tuple("weights", c.target.weights, defaults.weights),
        std::make_tuple("activations", c.target.activations, defaults.activations),
        std::make_tuple("dtype", c.target.dtype, defaults.dtype), std::make_tuple("kv_dtype", c.target.kv_dtype, defaults.kv_dtype),
        std::make_tuple("device", c.target.device, defaults.device),
        std::make_tuple("tokenizer", c.target.tokenizer, defaults.tokenizer)})
    if (value != fallback) f.add(std::string(name) + "=" + value);
  return f.hex();
}

// Stage 1: the target's greedy answers, appended to the cache as they come. An answer generated
// here also keeps its stage-2 rows (the passes that generated it computed them).
// AnswerRows::kDrop: only the answers (a retrieval datastore needs no features; `frozen` unused).
enum class AnswerRows { kKeep, kDrop };
std::vector<Sample> target_answers(const TrainDraftConfig& c, LoadedTarget& target, const std::vector<Prompt>& prompts,
                                   const std::string& path, const TargetTensors& frozen,
                                   const std::vector<int64_t>& aux_layers, const TrainDraftProgress& progress,
                                   AnswerRows rows = AnswerRows::kKeep) {
  const bool keep_rows = rows == AnswerRows::kKeep;
  // One writer of the answers cache at a time: two runs sharing data.cache_dir both appended the
  // same answers (15 lines for 12 prompts) until 2026-12-06.
  const PathLock answers_lock = PathLock::acquire(path, "train-draft", "data.cache_dir");
  std::map<int64_t, TokenList> cached;
  {
    std::ifstream in(path);
    std::string line;
    std::streamoff good = 0;  // bytes of whole, parsed lines
    bool cut = false;
    int64_t line_no = 0;
    // Damage is refused, not recomputed: only the last line can be cut by an interruption (a line's
    // newline is written last). A bad line mid-file discarded every answer after it, and an id out
    // of range, a second answer for one prompt or an answer longer than answer_tokens was trained
    // on (until 2026-12-07).
    const auto damaged = [&](const std::string& what) {
      throw Error(ErrorKind::kBadInput,
                  "line " + std::to_string(line_no) + ": " + what +
                      ": the answer cache is damaged; delete the file (the answers are recomputed)",
                  path);
    };
    while (std::getline(in, line)) {
      ++line_no;
      TokenList answer;
      int64_t i = -1;
      if (in.eof()) {  // no newline: the last line, cut short by an interruption; it is recomputed
        cut = true;
        break;
      }
      try {
        const nlohmann::json j = nlohmann::json::parse(line);
        answer = j.at("answer").get<TokenList>();
        i = j.at("i").get<int64_t>();
      } catch (const std::exception& e) {
        damaged(std::string("expected {\"i\": <prompt>, \"answer\": [<tokens>]}, found a line that is not (") +
                e.what() + ")");
      }
      if (i < 0 || i >= static_cast<int64_t>(prompts.size()))
        damaged("expected a prompt index in [0, " + std::to_string(prompts.size()) + "), found " + std::to_string(i));
      good += static_cast<std::streamoff>(line.size()) + 1;
      // A whole line with a token the target does not have is damage, not an interruption: it
      // reached the model as an internal check failure.
      for (const int64_t t : answer)
        if (t < 0 || t >= target.info.config.vocab_size)
          throw Error(ErrorKind::kBadInput,
                      "line " + std::to_string(line_no) + ": answer token " + std::to_string(t) +
                          " is outside the target's vocabulary of " + std::to_string(target.info.config.vocab_size) +
                          ": the answer cache is damaged; delete the file (the answers are recomputed)",
                      path);
      if (static_cast<int64_t>(answer.size()) > c.data.answer_tokens)
        damaged("expected at most data.answer_tokens = " + std::to_string(c.data.answer_tokens) + " tokens, found " +
                std::to_string(answer.size()));
      if (!cached.emplace(i, answer).second) damaged("a second answer for prompt " + std::to_string(i));
    }
    // Appending after a cut line would glue the next answer to it, and every later run would stop
    // reading there again: the cut is removed first.
    if (cut) {
      in.close();
      std::error_code ec;
      fs::resize_file(path, static_cast<std::uintmax_t>(good), ec);
      if (ec) throw Error(ErrorKind::kIo, "cannot remove an interrupted line from the answer cache: " + ec.message(), path);
    }
  }
  const bool chat = use_chat_template(target.info, c.data.prompts.chat);
  const int64_t K = std::max<int64_t>(2, std::llround(1.0 / c.data.validation_fraction));
  std::vector<Sample> samples;
  std::vector<size_t> prompt_of;                  // samples[s] answers prompts[prompt_of[s]]
  std::vector<TokenList> todo;                    // prompts without a cached answer
  std::vector<size_t> todo_sample;                // their samples
  // Every K-th prompt is held out, and a prompt that comes again goes where its first copy went,
  // so that no text is both trained on and validated on.
  std::map<std::string, bool> held_out;  // prompt text -> validation
  for (size_t i = 0; i < prompts.size(); ++i) {
    Sample s;
    s.prompt = encode_prompt(target.info, prompts[i].text, chat, c.data.prompts.system);
    if (static_cast<int64_t>(s.prompt.size()) > c.data.max_prompt_tokens) continue;
    s.validation = held_out.emplace(prompts[i].text, static_cast<int64_t>(i) % K == K - 1).first->second;
    auto it = cached.find(static_cast<int64_t>(i));
    if (it != cached.end()) {
      s.answer = it->second;
    } else {
      todo.push_back(s.prompt);
      todo_sample.push_back(samples.size());
    }
    prompt_of.push_back(i);
    samples.push_back(std::move(s));
  }
  if (samples.empty())
    throw Error(ErrorKind::kConfig,
                "expected prompts of at most " + std::to_string(c.data.max_prompt_tokens) + " tokens, found none among " +
                    std::to_string(prompts.size()),
                c.source_path, "data.max_prompt_tokens");
  // Opened only when there is an answer to append: a refused config left an empty cache file.
  std::ofstream out;
  if (!todo.empty()) {
    out.open(path, std::ios::app);
    if (!out) throw Error(ErrorKind::kIo, "cannot write the answer cache", path);
  }
  // The missing answers, data.answer_batch prompts decoded together (engine/batch_decode.h:
  // the same tokens as generate_ar's), each appended as it finishes, with the rows of
  // feature_layers() that stage 2 would otherwise compute again by teacher forcing.
  GenerationOptions gen;
  gen.max_new_tokens = c.data.answer_tokens;
  BatchDecodeOptions batch;
  batch.width = c.data.answer_batch;
  if (keep_rows) batch.hidden_layers = feature_layers(*target.model, aux_layers);
  size_t done = samples.size() - todo.size();
  at::NoGradGuard no_grad;
  generate_ar_batch(*target.model, *target.info.tokenizer, todo, gen, batch, [&](size_t t, const BatchAnswer& answer) {
    Sample& s = samples[todo_sample[t]];
    s.answer = answer.tokens;
    if (keep_rows) set_features(s, answer.hidden, answer.top1, frozen);
    out << nlohmann::json{{"i", prompt_of[todo_sample[t]]}, {"answer", s.answer}}.dump() << "\n" << std::flush;
    // A failed append (a full disk) lost the answer from the cache without a word until
    // 2026-12-07: the next run decoded it again, or a retrieval datastore was built on answers the
    // cache never kept.
    if (!out)
      throw Error(ErrorKind::kIo,
                  "cannot append to the answer cache (" + std::string(std::strerror(errno)) +
                      "); the answers appended before are kept, and the next run continues after them",
                  path, "data.cache_dir");
    if (progress.stage && ++done % 10 == 0)
      progress.stage("answers " + std::to_string(done) + "/" + std::to_string(samples.size()));
  });
  return samples;
}

// Stage 2: features and top-1 of every position, and with aux layers their aux features
// ("aux_features", [N, A d]: eagle_aux_features of each layer, side by side): the rows stage 1
// kept, else teacher forcing prompt + answer through the target (an answer from the cache).
std::map<std::string, at::Tensor> teacher_force(std::vector<Sample>& samples, const LoadedTarget& target,
                                                const TargetTensors& frozen, const std::vector<int64_t>& aux_layers,
                                                const TrainDraftProgress& progress) {
  at::NoGradGuard no_grad;
  const Model& model = *target.model;
  const size_t A = aux_layers.size();
  std::vector<at::Tensor> feats, toks, top1, aux;
  std::vector<float> offsets{0}, split, prompt_lengths;
  int64_t forced = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    Sample& smp = samples[i];
    TokenList seq = smp.prompt;
    seq.insert(seq.end(), smp.answer.begin(), smp.answer.end());
    const int64_t n = static_cast<int64_t>(seq.size());
    if (!smp.features.defined()) {
      KvCacheManager kv(kv_options_for(model.config(), n));
      KvSequence s(kv, kv.add_pool(model.config().kv_geometry()));
      kv.reserve(s.id(), n);
      std::vector<at::Tensor> hidden;
      ForwardOptions fo;
      fo.hidden_layers = feature_layers(model, aux_layers);
      fo.hidden_out = &hidden;
      const at::Tensor logits = model.forward(token_tensor(seq), at::arange(n, at::kLong), kv.view(s.id(), n), fo);
      set_features(smp, hidden, logits.argmax(-1), frozen);
      if (progress.stage && ++forced % 20 == 0) progress.stage("features " + std::to_string(forced));
    }
    SPECLAB_CHECK(smp.features.size(0) == n && smp.top1.size(0) == n, "stage-2 rows of a training sequence");
    feats.push_back(smp.features);
    if (A > 0) aux.push_back(smp.aux);
    toks.push_back(token_tensor(seq));
    top1.push_back(smp.top1);
    smp.features = smp.aux = smp.top1 = at::Tensor();  // moved into the lists
    offsets.push_back(offsets.back() + static_cast<float>(n));
    split.push_back(smp.validation ? 1.f : 0.f);
    prompt_lengths.push_back(static_cast<float>(smp.prompt.size()));
  }
  std::map<std::string, at::Tensor> out = {{"features", at::cat(feats)},
                                            {"tokens", at::cat(toks).to(at::kFloat)},
                                            {"top1", at::cat(top1).to(at::kFloat)},
                                            {"offsets", at::tensor(offsets, at::kFloat)},
                                            {"validation", at::tensor(split, at::kFloat)},
                                            {"prompt_lengths", at::tensor(prompt_lengths, at::kFloat)}};
  if (A > 0) out["aux_features"] = at::cat(aux);
  return out;
}

// Splits the cached tensors into training and validation sequences.
void split_data(const std::map<std::string, at::Tensor>& d, DraftTrainData& train, DraftTrainData& val) {
  const at::Tensor off = d.at("offsets").to(at::kLong), is_val = d.at("validation");
  const at::Tensor tokens = d.at("tokens").to(at::kLong), top1 = d.at("top1").to(at::kLong);
  std::vector<int64_t> rows[2];
  // Caches written before prompt_lengths existed lack it: validation then counts every row.
  const auto lengths = d.find("prompt_lengths");
  const at::Tensor prompt_len = lengths == d.end() ? at::Tensor() : lengths->second.to(at::kLong);
  for (DraftTrainData* e : {&train, &val}) e->offsets = {0};
  for (int64_t s = 0; s < is_val.size(0); ++s) {
    const int v = is_val[s].item<float>() > 0.5f ? 1 : 0;
    const int64_t a = off[s].item<int64_t>(), b = off[s + 1].item<int64_t>();
    for (int64_t r = a; r < b; ++r) rows[v].push_back(r);
    DraftTrainData& e = v ? val : train;
    e.offsets.push_back(e.offsets.back() + (b - a));
    if (prompt_len.defined()) e.prompt_lengths.push_back(prompt_len[s].item<int64_t>());
  }
  for (int v = 0; v < 2; ++v) {
    DraftTrainData& e = v ? val : train;
    const at::Tensor idx = at::tensor(rows[v], at::kLong);
    e.features = d.at("features").index_select(0, idx);
    auto aux = d.find("aux_features");
    if (aux != d.end()) e.aux = aux->second.index_select(0, idx);
    e.tokens = tokens.index_select(0, idx);
    e.target_top1 = top1.index_select(0, idx);
  }
}

TrainLog log_from_state(const std::map<std::string, at::Tensor>& s) {
  TrainLog log;
  auto col = [&](const std::string& name) {
    std::vector<double> v;
    auto it = s.find("log." + name);
    if (it != s.end())
      for (int64_t i = 0; i < it->second.numel(); ++i) v.push_back(it->second[i].item<double>());
    return v;
  };
  log.step = col("step");
  log.loss = col("loss");
  log.feature_loss = col("feature_loss");
  log.token_loss = col("token_loss");
  log.lr = col("lr");
  log.eval_step = col("eval_step");
  log.agreement = col("agreement");
  return log;
}

void log_into_state(const TrainLog& log, std::map<std::string, at::Tensor>& s) {
  auto put = [&](const std::string& name, const std::vector<double>& v) {
    s["log." + name] = at::tensor(v, at::kDouble).to(at::kFloat);
  };
  put("step", log.step);
  put("loss", log.loss);
  put("feature_loss", log.feature_loss);
  put("token_loss", log.token_loss);
  put("lr", log.lr);
  put("eval_step", log.eval_step);
  put("agreement", log.agreement);
}

}  // namespace

std::string target_weights_hash(const LoadedModel& target) {
  static std::map<std::string, std::string> memo;  // paths + sizes + mtimes -> hash
  const std::string path = target.origin.path.empty() ? target.source : target.origin.path;
  // A model file, or an HF checkpoint directory: its weight, config and tokenizer files in name
  // order, each name then its bytes (a directory's own bytes are none: every HF target hashed
  // alike until 2026-11-29).
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file(ec) && (ext == ".safetensors" || ext == ".json" || ext == ".bin" || ext == ".model"))
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw Error(ErrorKind::kIo, "expected the target's weight files in its directory, found none", path);
  } else {
    files.push_back(path);
  }
  std::string key;
  for (const std::string& file : files) {
    struct stat st;
    if (::stat(file.c_str(), &st) != 0) throw Error(ErrorKind::kIo, "cannot read the target's weights", file);
    key += file + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtime) + "\n";
  }
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  Fnv f;
  std::vector<char> buf(1 << 20);
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorKind::kIo, "cannot read the target's weights", file);
    if (files.size() > 1) f.add(fs::path(file).filename().string());
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      f.add(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return memo[key] = f.hex();
}

bool is_trained_draft_file(const std::string& path) {
  return fs::path(path).extension() == ".safetensors" && fs::is_regular_file(path);
}

std::string default_draft_path(const LoadedModel& target, const std::string& architecture) {
  return default_draft_path(target.source, architecture);
}

std::string default_draft_path(const std::string& target_source, const std::string& architecture) {
  const std::string file = draft_file_stem(target_source) + "." + architecture + ".safetensors";
  const std::string trained = std::string(SPECLAB_SOURCE_DIR) + "/.cache/drafts/" + file;
  const std::string shipped = std::string(SPECLAB_SOURCE_DIR) + "/assets/drafts/" + file;
  return fs::exists(trained) || !fs::exists(shipped) ? trained : shipped;
}

namespace {

// The metadata checks of a draft of `architecture` for `target`: Error(kBadInput, path) when it is
// another kind of file, Error(kConfig, path, "drafter.draft_model") when it names another target.
void check_draft_metadata(std::map<std::string, std::string> meta, const std::string& path,
                          const std::string& architecture, const LoadedModel& target) {
  // A checkpoint carries the draft's metadata and a data key: given as a draft, it failed later
  // on a missing tensor ("the draft lacks tensor vocab_ids"; until 2026-12-06).
  if (meta.count("data_key"))
    throw Error(ErrorKind::kBadInput,
                "expected a draft, found a training checkpoint of one (train-draft writes the draft at the end of the "
                "run: continue it with --resume, and give the draft it writes)",
                path);
  if (meta["speclab.draft"] != architecture)
    throw Error(ErrorKind::kBadInput,
                "not " + std::string(architecture == "eagle" ? "an " : "a ") + architecture + " draft (no speclab.draft=" +
                    architecture + " in its metadata" + (meta["speclab.draft"].empty() ? "" : "; it is " + meta["speclab.draft"]) + ")",
                path);
  const std::string hash = target_weights_hash(target);
  if (meta["target_weights_hash"] != hash)
    throw Error(ErrorKind::kConfig,
                "this " + architecture + " draft was trained for " + meta["target"] + " (weights " + meta["target_weights_hash"] +
                    "), not for the target " + fs::path(target.source).filename().string() + " (weights " + hash + ")",
                path, "drafter.draft_model");
}

// The tensors of a draft of `architecture` trained for `target`, after the metadata checks;
// vocab_ids (int64) checked against the target's vocabulary.
std::map<std::string, at::Tensor> read_draft(const std::string& path, const std::string& architecture,
                                             const LoadedModel& target, const ModelConfig& config, at::Tensor& vocab_ids,
                                             std::map<std::string, std::string>* meta_out = nullptr) {
  std::map<std::string, std::string> meta;
  auto tensors = [&] {
    try {
      return read_tensors(path, &meta, "train it again with speclab train-draft");
    } catch (const Error& e) {  // a GGUF model or an HDF5 log read as safetensors: say what was expected
      if (e.kind() != ErrorKind::kBadInput || e.field().rfind("header", 0) != 0) throw;
      throw Error(e.kind(),
                  "expected " + std::string(architecture == "eagle" ? "an " : "a ") + architecture +
                      " draft written by speclab train-draft (a .safetensors file), found a file that is not "
                      "safetensors (" + e.field() + ": " + e.message() + ")",
                  e.file());
    }
  }();
  if (meta_out) *meta_out = meta;
  check_draft_metadata(meta, path, architecture, target);
  auto ids = tensors.find("vocab_ids");
  if (ids == tensors.end()) throw Error(ErrorKind::kBadInput, "the draft lacks tensor vocab_ids", path);
  // Token ids as the writer keeps them: F32 and whole numbers (an F16 copy rounds ids above 2048
  // to other ids, and 1.5 was truncated to token 1; the datastore's ids are checked alike).
  const std::string ids_dtype = SafetensorsFile::open(path).info("vocab_ids").dtype;
  if (ids_dtype != "F32")
    throw Error(ErrorKind::kBadInput,
                "tensor vocab_ids is " + ids_dtype + ": expected F32 (token ids are exact there)", path);
  if (!at::equal(ids->second, ids->second.floor()))
    throw Error(ErrorKind::kBadInput, "tensor vocab_ids holds a fraction: expected whole token ids", path);
  vocab_ids = ids->second.to(at::kLong);
  if (vocab_ids.dim() != 1 || vocab_ids.numel() < 1 || vocab_ids.min().item<int64_t>() < 0 ||
      vocab_ids.max().item<int64_t>() >= config.vocab_size)
    throw Error(ErrorKind::kBadInput, "vocab_ids must be target token ids", path);
  // Each row is one token: a repeated id would give that token two rows' probability.
  const at::Tensor flat = vocab_ids.contiguous();
  std::vector<int64_t> sorted(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw Error(ErrorKind::kBadInput, "vocab_ids must not repeat a token id", path);
  return tensors;
}

// Sets each trained tensor from `tensors`, checking it against the fresh draft's shape.
void take_trained(const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, at::Tensor*>& trained,
                  const std::map<std::string, const at::Tensor*>& fresh, const std::string& path) {
  for (const auto& kv : trained) {
    auto it = tensors.find(kv.first);
    if (it == tensors.end()) throw Error(ErrorKind::kBadInput, "the draft lacks tensor " + kv.first, path);
    if (it->second.sizes() != fresh.at(kv.first)->sizes())
      throw Error(ErrorKind::kBadInput, "tensor " + kv.first + " does not fit the target's shapes", path);
    *kv.second = it->second;
  }
}

// Token ids are stored as float32, exact below 2^24.
constexpr int64_t kMaxExactId = int64_t(1) << 24;

// architecture retrieval: stage 1 only. The training prompts' conversations (prompt + the
// target's answer) are the datastore's corpus; the validation prompts' answers, held out of it,
// measure it by draft step as the eagle trainer measures a head (the k-th drafted token right,
// its k - 1 predecessors right), drafting as the retrieval drafter does with its default keys
// wherever the engine drafts (every answer position after the first, which the prefill emits).
TrainDraftResult build_datastore(const TrainDraftConfig& c, LoadedTarget& target, const std::vector<Prompt>& prompts,
                                 const std::string& key, const std::string& hash, const TrainDraftProgress& progress) {
  const auto t_data = Clock::now();
  const std::vector<Sample> samples = target_answers(c, target, prompts, c.data.cache_dir + "/answers-" + key + ".jsonl",
                                                     TargetTensors{}, {}, progress, AnswerRows::kDrop);
  std::vector<TokenList> corpus;
  std::vector<const Sample*> validation;
  for (const Sample& s : samples) {
    if (s.validation) {
      validation.push_back(&s);
      continue;
    }
    TokenList seq = s.prompt;
    seq.insert(seq.end(), s.answer.begin(), s.answer.end());
    corpus.push_back(std::move(seq));
  }
  if (validation.empty() || corpus.empty())
    throw Error(ErrorKind::kConfig,
                std::string("no ") + (corpus.empty() ? "training" : "validation") +
                    " prompt: use more prompts or another validation_fraction",
                c.source_path, "data.validation_fraction");
  int64_t corpus_tokens = 0;
  for (const TokenList& seq : corpus) corpus_tokens += static_cast<int64_t>(seq.size());
  if (corpus_tokens >= kMaxExactId)
    throw Error(ErrorKind::kConfig,
                "the corpus holds " + std::to_string(corpus_tokens) + " tokens: expected fewer than 2^24 (stored as float32)",
                c.source_path, "data.prompts");
  TrainDraftResult r;
  r.data_seconds = since(t_data);
  const auto t_build = Clock::now();
  const Datastore store(corpus);
  const DrafterOptions drafting;  // retrieval_min / retrieval_max as the drafter's defaults
  constexpr int K = 4;            // the default gamma
  std::vector<int64_t> tried(K, 0), right(K, 0);
  for (const Sample* s : validation) {
    // The engine drafts after the prefill's token: from the answer's second token on.
    TokenList context = s->prompt;
    if (!s->answer.empty()) context.push_back(s->answer[0]);
    for (size_t t = 1; t < s->answer.size(); ++t) {
      const RetrievalDraft d = store.draft(context, drafting.retrieval_min, drafting.retrieval_max, K);
      for (size_t k = 0; k < static_cast<size_t>(K) && t + k < s->answer.size(); ++k) {
        ++tried[k];
        if (k >= d.tokens.size() || d.tokens[k] != s->answer[t + k]) break;
        ++right[k];
      }
      context.push_back(s->answer[t]);
    }
  }
  for (int k = 0; k < K; ++k)
    r.head_agreements.push_back(tried[k] > 0 ? static_cast<double>(right[k]) / static_cast<double>(tried[k]) : 0.0);
  r.validation_agreement = r.head_agreements[0];
  r.train_pairs = store.n_tokens();
  r.validation_pairs = tried[0];
  std::vector<float> tokens, offsets{0.f};
  for (const TokenList& seq : corpus) {
    for (Token t : seq) tokens.push_back(static_cast<float>(t));
    offsets.push_back(static_cast<float>(tokens.size()));
  }
  const std::map<std::string, std::string> meta = {{"speclab.draft", "retrieval"},
                                                   {"target_weights_hash", hash},
                                                   {"target", fs::path(target.info.source).filename().string()},
                                                   {"training_config", c.resolved_yaml}};
  write_tensors(c.output.path, "output.path", {{"tokens", at::tensor(tokens, at::kFloat)}, {"offsets", at::tensor(offsets, at::kFloat)}},
                meta);
  r.path = c.output.path;
  r.train_seconds = since(t_build);
  return r;
}

// Before any model is loaded: the directories of the draft, its checkpoint, its log and the data cache
// exist (made when missing) and take new files, and the draft's path is not a directory, so a
// bad output location fails now, naming its key, and not after the training.
void check_train_outputs(const TrainDraftConfig& c) {
  const auto writable_dir = [](const std::string& file, const std::string& field) {
    ensure_output_directory(file, field);
    const fs::path dir = fs::absolute(fs::path(file)).parent_path();
    if (::access(dir.c_str(), W_OK) != 0)
      throw Error(ErrorKind::kIo, "expected a directory that takes new files, found a read-only one: " +
                                      std::string(std::strerror(errno)), dir.string(), field);
    std::error_code ec;
    if (fs::is_directory(file, ec))
      throw Error(ErrorKind::kConfig, "expected a file path, found a directory", file, field);
  };
  writable_dir(c.output.path, "output.path");
  if (c.architecture != "retrieval") {
    writable_dir(c.output.checkpoint, "output.checkpoint");
    writable_dir(c.output.log, "output.log");
  }
  // The cache directory is made when the data stage starts (a run refused before, e.g. on a bad
  // target.path, made it until 2026-12-06): here its nearest existing ancestor must take it.
  std::error_code ec;
  fs::path dir = fs::absolute(fs::path(c.data.cache_dir)).lexically_normal();
  while (!dir.empty() && !fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
    dir = dir.parent_path();
  if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
    throw Error(ErrorKind::kIo, "expected a writable directory for the data cache (made when missing), found none",
                c.data.cache_dir, "data.cache_dir");
}

// Every training prompt against the evaluation sets' texts (experiments/app/evaluation_sets.h);
// Error(kConfig, config, "data.prompts") naming the first that contains one. Returns what was
// checked, for the run's closing lines.
std::string check_outside_evaluation_sets(const TrainDraftConfig& c, const std::vector<Prompt>& prompts) {
  const std::string dir = (fs::path(shared_data_dir()) / "datasets").string();
  const EvaluationSets sets = EvaluationSets::load(dir);
  for (const Prompt& p : prompts) {
    const std::optional<EvaluationText> hit = sets.find(p.text);
    if (!hit) continue;
    const std::string head = hit->text.size() > 60 ? hit->text.substr(0, 57) + "..." : hit->text;
    throw Error(ErrorKind::kConfig,
                "expected training prompts outside the evaluation sets, found prompt " + p.id + " containing " +
                    hit->set + " " + hit->id + " (\"" + head + "\"): a draft trained on it would flatter every "
                    "figure measured on " + hit->set,
                c.source_path, "data.prompts");
  }
  return "checked " + std::to_string(prompts.size()) + " training prompts against " + sets.describe() +
         " (" + dir + "): none contains one";
}

}  // namespace

void check_train_request(const TrainDraftConfig& c, bool resume, int64_t stop_after) {
  const bool retrieval = c.architecture == "retrieval";
  if (retrieval && stop_after > 0)
    throw Error(ErrorKind::kConfig,
                "expected no --stop-after for a retrieval datastore, found " + std::to_string(stop_after) +
                    ": it trains no steps (an interrupted data stage continues from its answers cache)",
                "command line", "--stop-after");
  // Past the end it never stopped: the run trained to train.steps and wrote the draft, silently.
  if (!retrieval && stop_after > c.train.steps)
    throw Error(ErrorKind::kConfig,
                "expected a step within train.steps (" + std::to_string(c.train.steps) + "), found " +
                    std::to_string(stop_after) + ": the run would train to the end and write the draft without stopping",
                "command line", "--stop-after");
  if (retrieval && resume)
    throw Error(ErrorKind::kConfig,
                "expected no --resume for a retrieval datastore: it trains no steps and writes no checkpoint (an "
                "interrupted data stage continues from its answers cache without it)",
                "command line", "--resume");
  // A missing target file, named by its key before anything is made or loaded, as `run` names
  // models.target.path (the load's error named the file alone until 2026-12-06).
  ModelSource resolved;
  try {
    resolved = resolve_model_source(c.target);
  } catch (const Error& e) {
    // A named model that is not installed (the message says how to get it), or a name that is
    // none: named by its key, as `run` names models.target.path (the load named neither).
    throw Error(e.kind(), (e.file().empty() ? std::string() : e.file() + ": ") + e.message(), c.source_path,
                "target.path");
  }
  std::error_code ec;
  if (resolved.format != "random" && !fs::exists(resolved.path, ec))
    throw Error(ErrorKind::kConfig, "expected an existing model file or directory, found none at " + resolved.path,
                c.source_path, "target.path");
  if (!resolved.tokenizer.empty() && !fs::exists(resolved.tokenizer, ec))
    throw Error(ErrorKind::kConfig, "expected the tokenizer file, found none at " + resolved.tokenizer, c.source_path,
                "target.tokenizer");
}

TrainDraftResult train_draft(const TrainDraftConfig& c, bool resume, const TrainDraftProgress& progress,
                             int64_t stop_after) {
  // Autograd on, even when called under a caller's InferenceMode or NoGradGuard: without it every
  // step would leave the weights where they are, silently.
  c10::InferenceMode grad_on(false);
  const auto t_data = Clock::now();
  const bool retrieval = c.architecture == "retrieval";  // no training: the answers cache is its resume
  check_train_request(c, resume, stop_after);
  if (resume && !retrieval && !fs::exists(c.output.checkpoint)) {
    // A run with --overwrite killed before it wrote its own outputs leaves the earlier ones aside.
    const std::string aside = c.output.checkpoint + ".overwritten";
    throw Error(ErrorKind::kIo,
                "--resume: no checkpoint to resume from" +
                    (fs::exists(aside) ? " (an --overwrite run stopped before writing its own left the earlier one at " +
                                             aside + ": move it back to resume it)"
                                       : std::string()),
                c.output.checkpoint);
  }
  check_train_outputs(c);
  // The prompts before the target (a bad prompt file is found without the wait for its load);
  // load_prompts names the keys of a run config's `prompts` section, here `data.prompts`.
  const std::vector<Prompt> prompts = [&] {
    ExperimentConfig pc;
    pc.source_path = c.source_path;
    pc.prompts = c.data.prompts;
    try {
      return load_prompts(pc);
    } catch (const Error& e) {
      if (e.file() != c.source_path || e.field().rfind("prompts.", 0) != 0) throw;
      throw Error(e.kind(), e.message(), e.file(), "data." + e.field());
    }
  }();
  // A conversation's later turns follow answers; training asks each prompt once, as one message
  // (and its /prompts text, a JSON array, is not what the evaluation-set check compares).
  for (const Prompt& p : prompts)
    if (!p.turns.empty())
      throw Error(ErrorKind::kConfig,
                  "expected one-message training prompts, found prompt '" + p.id + "', a conversation of " +
                      std::to_string(p.turns.size()) + " user turns (the field names a list); name one turn (turns.0)",
                  c.source_path, "data.prompts.field");
  auto target = [&] {
    try {
      return load_target(c.target);
    } catch (const Error& e) {  // the placement's errors (device, dtype) name the key that chose them
      if (e.file() != "model") throw;
      throw Error(e.kind(), e.message(), c.source_path, "target." + e.field());
    }
  }();
  check_chat_renders(target->info, c.data.prompts.chat, c.source_path, "data.prompts.chat", "chat: off");
  if (use_chat_template(target->info, c.data.prompts.chat) && !target->info.chat_template.available())
    throw Error(ErrorKind::kConfig,
                "expected a model with a chat template for chat: on, found none in " + target->info.source,
                c.source_path, "data.prompts.chat");
  const std::string hash = target_weights_hash(target->info);
  const std::string evaluation_check = check_outside_evaluation_sets(c, prompts);
  const std::string key = cache_key(c, hash, prompts);
  if (resume && !retrieval) {
    // The config names a prompt file by path: its content (and how the target answers) are the
    // data key's, checked before the data stage. (A checkpoint written before 2026-11-29 has none.)
    const auto ck = SafetensorsFile::open(c.output.checkpoint).metadata();
    const auto data_key = ck.find("data_key");
    if (data_key != ck.end() && data_key->second != key) {
      // Name the data and target settings that changed, where the config says which (a prompt
      // file's content, or the model file itself, changes the key with no setting changed).
      std::vector<std::string> changed;
      const auto written = ck.find("training_config");
      if (written != ck.end())
        for (const std::string& d : yaml_differences(written->second, c.resolved_yaml, {"data.answer_batch", "data.cache_dir"}))
          if (d.rfind("data.", 0) == 0 || d.rfind("target.", 0) == 0) changed.push_back(d);
      throw Error(ErrorKind::kBadInput,
                  changed.empty()
                      ? "the checkpoint was trained on other data (the prompts' content, or how the target is loaded, "
                        "changed since: data key " + data_key->second + ", now " + key + "); start again with --overwrite instead of --resume"
                      : "expected the data settings the checkpoint was trained on, found " +
                            std::to_string(changed.size()) + " different (checkpoint vs now: " +
                            differences_list(changed) + "); resume with those, or train anew with --overwrite instead of --resume",
                  c.output.checkpoint);
    }
  }
  fs::create_directories(c.data.cache_dir);
  if (retrieval) {
    TrainDraftResult r = build_datastore(c, *target, prompts, key, hash, progress);
    r.evaluation_check = evaluation_check;
    return r;
  }
  const bool distill = c.architecture == "draft_model";
  // A layer the target does not have is the config's error (head.draft_layers), not the model file's.
  const TargetTensors frozen = [&] {
    try {
      return target_tensors(target->info, distill ? c.head.draft_layers : std::vector<int64_t>{});
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kConfig) throw;
      throw Error(e.kind(), e.message(), c.source_path, e.field());
    }
  }();
  // A reduced head larger than the vocabulary would be the whole one, while a draft_model file
  // recorded the larger count as its draft_vocab (`--draft-vocab` above the vocabulary is refused).
  if (c.head.vocab_top_n > frozen.config.vocab_size)
    throw Error(ErrorKind::kConfig,
                "expected at most the target's vocabulary of " + std::to_string(frozen.config.vocab_size) +
                    " tokens (0 = all of them), found " + std::to_string(c.head.vocab_top_n),
                c.source_path, "head.vocab_top_n");
  for (int64_t l : c.head.aux_layers)
    if (!valid_aux_layer(l, frozen.config))
      throw Error(ErrorKind::kConfig,
                  "layer " + std::to_string(l) + " is out of range: aux layers are target layers " +
                      aux_range(frozen.config) + " (the last layer is read anyway)",
                  c.source_path, "head.aux_layers");
  // An eagle init with other aux layers is refused before the data stage (which can take minutes).
  std::vector<int64_t> init_aux;
  int64_t init_layers = 0;
  int64_t init_heads = 0;  // medusa: the init's heads
  if ((c.architecture == "eagle" || c.architecture == "draft_model" || c.architecture == "medusa") &&
      !c.train.init.empty()) {
    const SafetensorsFile init_file = [&] {
      try {
        return SafetensorsFile::open(c.train.init);
      } catch (const Error& e) {
        throw Error(e.kind(), e.message(), e.file().empty() ? c.train.init : e.file(), "train.init");
      }
    }();
    if (c.architecture == "medusa") {
      // Heads are independent of one another: an init with fewer heads starts the rest fresh
      // (below); one with more would have its last heads dropped, as eagle's extra layers are refused.
      // (Another kind of file is left to read_draft, which names what it is.)
      while (init_file.contains("heads." + std::to_string(init_heads) + ".weight")) ++init_heads;
      const auto kind = init_file.metadata().find("speclab.draft");
      if (kind != init_file.metadata().end() && kind->second == "medusa" && init_heads > c.head.medusa_heads)
        throw Error(ErrorKind::kConfig,
                    "train.init has " + std::to_string(init_heads) + " Medusa heads (heads.<k>.weight), this draft " +
                        std::to_string(c.head.medusa_heads) + " (head.medusa_heads): expected at most " +
                        std::to_string(c.head.medusa_heads) + " (fewer grow: the rest start fresh)",
                    c.source_path, "train.init");
    } else if (c.architecture == "draft_model") {
      // The init's layers replace the ones head.draft_layers would copy from the target: other
      // layers here trained the init's while the file recorded these.
      const auto meta = init_file.metadata();
      const auto listed = meta.find("draft_layers");
      if (listed != meta.end() && listed->second != layer_text(c.head.draft_layers))
        throw Error(ErrorKind::kConfig,
                    "train.init's layers were copied from target layers [" + listed->second + "], this draft's from [" +
                        layer_text(c.head.draft_layers) + "] (head.draft_layers): expected the same",
                    c.source_path, "train.init");
    } else {
      init_layers = eagle_draft_layers([&](const std::string& name) { return init_file.contains(name); });
      if (init_layers > c.head.layers)
        throw Error(ErrorKind::kConfig,
                    "train.init has " + std::to_string(init_layers) + " decoder layers, this head " +
                        std::to_string(c.head.layers) + " (head.layers): expected at most as many",
                    c.source_path, "train.init");
      const auto meta = init_file.metadata();
      const auto listed = meta.find("aux_layers");
      init_aux = parse_aux_layers(listed == meta.end() ? "" : listed->second, frozen.config, c.train.init);
      if (!init_aux.empty() && init_aux != c.head.aux_layers)
        throw Error(ErrorKind::kConfig,
                    "train.init reads aux layers [" + layer_text(init_aux) + "], this head [" +
                        layer_text(c.head.aux_layers) + "]: expected the same, or an init without aux layers",
                    c.source_path, "train.init");
    }
  }
  // The answers do not depend on the aux layers; the features file holds them.
  std::string aux_suffix;
  for (int64_t l : c.head.aux_layers) aux_suffix += "-aux" + std::to_string(l);
  const std::string features_path = c.data.cache_dir + "/features-" + key + aux_suffix + ".safetensors";
  std::map<std::string, at::Tensor> data;
  if (fs::exists(features_path)) {
    data = read_tensors(features_path, nullptr, "delete it, and train-draft builds it again");
  } else {
    auto samples = target_answers(c, *target, prompts, c.data.cache_dir + "/answers-" + key + ".jsonl", frozen,
                                  c.head.aux_layers, progress);
    data = teacher_force(samples, *target, frozen, c.head.aux_layers, progress);
    write_tensors(features_path, "data.cache_dir", data, {{"target_weights_hash", hash}});
  }
  DraftTrainData train, val;
  split_data(data, train, val);
  data.clear();  // the split holds copies (with aux layers, several GB on SmolLM2)
  if (val.n_sequences() < 1)
    throw Error(ErrorKind::kConfig, "no validation prompt: use more prompts or a larger validation_fraction",
                c.source_path, "data.validation_fraction");
  // A distilled draft's reduced head keeps the rows its drafter's draft_vocab keeps.
  const at::Tensor vocab_ids =
      distill ? at::tensor(frequent_head_ids(*target->info.tokenizer, frozen.config.vocab_size,
                                             c.head.vocab_top_n > 0 ? c.head.vocab_top_n : frozen.config.vocab_size),
                           at::kLong)
              : head_vocab_ids(train.target_top1, frozen.config.vocab_size, c.head.vocab_top_n);

  TrainDraftResult r;
  r.evaluation_check = evaluation_check;
  r.data_seconds = since(t_data);
  r.train_pairs = train.n_pairs();
  r.validation_pairs = val.n_pairs();
  r.agreement_on_answers = !val.prompt_lengths.empty();
  const auto t_train = Clock::now();
  // Both cores for libtorch's matmuls from here on, and freed tensors' memory kept for the next
  // step (framework/train/training_runtime.h); the target's kernels are done.
  const TrainingRuntime runtime(compute_threads());
  // The draft's trainer and its trained tensors (by safetensors name).
  EagleHead eagle;
  MedusaHeads medusa;
  SmallDraft small;
  std::unique_ptr<DraftTrainer> trainer;
  std::map<std::string, at::Tensor*> trained;
  if (distill) {
    small = init_small_draft(frozen.config, frozen.layers, c.head.draft_layers);
    small.embed = frozen.embed;
    small.vocab_ids = vocab_ids;
    small.lm_head = head_rows(frozen.lm_head, vocab_ids);
    trainer = std::make_unique<DistillTrainer>(small, train, val, c.train);
    trained = small.trained();
  } else if (c.architecture == "medusa") {
    medusa = init_medusa_heads(frozen.config, c.head.medusa_heads);
    set_frozen(medusa, frozen);
    medusa.vocab_ids = vocab_ids;
    medusa.lm_head = head_rows(frozen.lm_head, vocab_ids);
    trainer = std::make_unique<MedusaTrainer>(medusa, train, val, c.train);
    trained = medusa.trained();
  } else {
    eagle = init_eagle_head(frozen.config, c.train.seed, c.head.aux_layers, c.head.layers);
    set_frozen(eagle, frozen);
    eagle.vocab_ids = vocab_ids;
    eagle.lm_head = head_rows(frozen.lm_head, vocab_ids);
    trainer = std::make_unique<EagleTrainer>(eagle, train, val, c.train);
    trained = eagle.trained();
  }
  if (!c.train.init.empty()) {
    // Start from a trained draft's weights (the same architecture and target). Its reduced-head
    // vocabulary is not taken: the head rows are the target's, frozen, and this config's data
    // choose them; no trained tensor depends on which rows they are.
    at::Tensor init_ids;
    auto init = [&] {  // errors name train.init, the key that chose the file
      try {
        return read_draft(c.train.init, c.architecture, target->info, frozen.config, init_ids);
      } catch (const Error& e) {
        throw Error(e.kind(), e.message(), e.file().empty() ? c.train.init : e.file(), "train.init");
      }
    }();
    if (c.architecture == "eagle" && init_aux.empty() && !c.head.aux_layers.empty()) {
      // An EAGLE head without aux layers starts one with them: its fc gains zero columns over a,
      // so the new head starts out computing exactly what the old one did (eagle_head.h). A
      // misshapen fc is left to take_trained, which names it.
      auto fc = init.find("fc.weight");
      if (fc != init.end() && fc->second.dim() == 2)
        fc->second = at::cat({fc->second, at::zeros({fc->second.size(0), eagle.aux_width()}, fc->second.options())}, 1);
    }
    // A head with fewer layers (any fewer; more are refused above) grows: each new layer is the fresh one with its o and down
    // projections 0, so it adds nothing to its input (the identity), and the grown head starts out
    // computing exactly what the init did (eagle_head.h); training then moves them off 0.
    if (c.architecture == "eagle")
      for (int64_t l = init_layers; l < eagle.n_layers(); ++l) {
        DecoderLayerWeights& w = eagle.layers[static_cast<size_t>(l)];
        for (const auto& [name, t] : w.named(eagle_layer_prefix(l)))
          init[name] = t == &w.o_proj || t == &w.down_proj ? at::zeros_like(*t) : t->detach().clone();
      }
    // Medusa heads past the init's start as the fresh ones (checked above: at most as many).
    if (c.architecture == "medusa")
      for (const auto& [name, t] : medusa.trained())
        if (name.rfind("heads.", 0) == 0 && std::stoll(name.substr(6)) >= init_heads) init[name] = t->detach().clone();
    // take_trained checks names and shapes against the fresh tensors and hands over the init's;
    // they are then copied in place (the trainer holds the tensors it optimises).
    std::map<std::string, at::Tensor> loaded;
    std::map<std::string, at::Tensor*> into;
    std::map<std::string, const at::Tensor*> shapes;
    for (const auto& kv : trained) {
      into[kv.first] = &loaded[kv.first];
      shapes[kv.first] = kv.second;
    }
    take_trained(init, into, shapes, c.train.init);
    at::NoGradGuard no_grad;
    for (const auto& kv : trained) kv.second->copy_(loaded.at(kv.first));
  }
  std::map<std::string, std::string> meta = {{"speclab.draft", c.architecture},
                                             {"target_weights_hash", hash},
                                             {"target", fs::path(target->info.source).filename().string()},
                                             {"training_config", c.resolved_yaml}};
  // What the trained bits depend on besides the config and the data: the threads of training's
  // matmuls and OpenBLAS's kernels (training_runtime.h). A --resume with either changed went on
  // silently, to weights that neither setting's uninterrupted run gives (until 2026-12-06).
  meta["train_threads"] = std::to_string(compute_threads());
  meta["blas_core"] = loaded_blas_core() ? loaded_blas_core() : "";
  if (!c.head.aux_layers.empty()) meta["aux_layers"] = layer_text(c.head.aux_layers);
  if (c.head.layers > 1) meta["head_layers"] = std::to_string(c.head.layers);  // for readers; loading counts the tensors
  if (distill) {
    meta["draft_layers"] = layer_text(c.head.draft_layers);
    meta["draft_vocab"] = std::to_string(c.head.vocab_top_n);
  }
  TrainLog log;
  double prior_seconds = 0.0;
  if (resume) {
    std::map<std::string, std::string> ck_meta;
    const auto state = read_tensors(c.output.checkpoint, &ck_meta, "train anew with --overwrite instead of --resume", "log.");
    if (ck_meta["target_weights_hash"] != hash)
      throw Error(ErrorKind::kBadInput,
                  "the checkpoint belongs to another target (weights " + ck_meta["target_weights_hash"] + ", this one " +
                      hash + ")",
                  c.output.checkpoint);
    // The settings by value, less those that change no trained weight: where the outputs go and
    // in what dtype the draft is written, how often checkpoints are taken, how many prompts the
    // target answers at once (the answers are the same), and where the data cache lives (the data
    // key above guards its contents; a moved cache could not be resumed until 2026-12-06).
    const std::vector<std::string> diff =
        yaml_differences(ck_meta["training_config"], c.resolved_yaml,
                         {"output", "data.answer_batch", "train.checkpoint_every", "data.cache_dir"});
    if (!diff.empty()) {
      throw Error(ErrorKind::kBadInput,
                  "expected the training settings the checkpoint was written with, found " +
                      std::to_string(diff.size()) + " different (checkpoint vs now: " + differences_list(diff) +
                      "); resume with those, or train anew with --overwrite instead of --resume",
                  c.output.checkpoint);
    }
    // Written before 2026-12-06, a checkpoint records neither: it resumes as before.
    if (ck_meta.count("train_threads") && ck_meta["train_threads"] != meta["train_threads"])
      throw Error(ErrorKind::kConfig,
                  "expected " + ck_meta["train_threads"] + " threads, as the checkpoint was trained with (the trained "
                  "bits depend on them), found " + meta["train_threads"] + "; resume with --threads " +
                      ck_meta["train_threads"],
                  "command line", "--threads");
    if (ck_meta.count("blas_core") && ck_meta["blas_core"] != meta["blas_core"])
      throw Error(ErrorKind::kConfig,
                  "expected OpenBLAS's " + config::squote(ck_meta["blas_core"]) + " kernels, as the checkpoint was trained " +
                      "with (the trained bits depend on them), found " + config::squote(meta["blas_core"]) +
                      "; resume with OPENBLAS_CORETYPE=" + ck_meta["blas_core"] + " on a CPU that has them",
                  "environment", "OPENBLAS_CORETYPE");
    trainer->load_state(state, c.output.checkpoint);
    if (stop_after > 0 && stop_after <= trainer->steps_done())
      throw Error(ErrorKind::kConfig,
                  "expected a step after the checkpoint's " + std::to_string(trainer->steps_done()) + ", found " +
                      std::to_string(stop_after) + " (--stop-after counts steps from the start of training)",
                  "command line", "--stop-after");
    log = log_from_state(state);
    auto w = state.find("log.wall_seconds");
    if (w != state.end()) prior_seconds = w->second.item<double>();
    // The step and the log the checkpoint carries must agree: steps 1..step, one row each. A
    // damaged step resumed past the steps it never trained (a gap in /train/step) or wrote the
    // draft at once; a damaged clock went into the log's wall_seconds.
    const int64_t done = trainer->steps_done();
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorKind::kBadInput, why + "; the file is damaged, train anew with --overwrite instead of --resume", c.output.checkpoint);
    };
    if (done > c.train.steps)
      bad("expected a checkpoint step <= train.steps (" + std::to_string(c.train.steps) + "), found " +
          std::to_string(done));
    if (!log.step.empty() && (static_cast<int64_t>(log.step.size()) != done || log.step.front() != 1.0 ||
                              log.step.back() != static_cast<double>(done)))
      bad("expected its log to hold steps 1.." + std::to_string(done) + " (its step), found " +
          std::to_string(log.step.size()) + " rows");
    if (!std::isfinite(prior_seconds) || prior_seconds < 0)
      bad("expected 'log.wall_seconds' >= 0, found " + std::to_string(prior_seconds));
    // The log's columns, which read_tensors lets hold NaN (a "no value" mark): a NaN or an
    // infinity where every row has a value, or an impossible agreement, was resumed and copied
    // into the new training log (found by a probe, 2026-12-06).
    const auto check_column = [&](const std::vector<double>& v, const std::string& name, bool nan_ok, double lo,
                                  double hi) {
      for (size_t i = 0; i < v.size(); ++i)
        if (!(nan_ok && std::isnan(v[i])) && !(v[i] >= lo && v[i] <= hi))
          bad("expected 'log." + name + "' row " + std::to_string(i) + " in [" + config::to_text(lo) + ", " +
              config::to_text(hi) + "]" + (nan_ok ? " or NaN" : "") + ", found " + config::to_text(v[i]));
    };
    check_column(log.loss, "loss", false, 0.0, std::numeric_limits<double>::max());
    check_column(log.feature_loss, "feature_loss", true, 0.0, std::numeric_limits<double>::max());
    check_column(log.token_loss, "token_loss", true, 0.0, std::numeric_limits<double>::max());
    check_column(log.lr, "lr", false, 0.0, 1.0);
    check_column(log.eval_step, "eval_step", false, 1.0, static_cast<double>(done));
    check_column(log.agreement, "agreement", true, 0.0, 1.0);
    if (log.agreement.size() != log.eval_step.size())
      bad("expected one 'log.agreement' row per 'log.eval_step' row, found " + std::to_string(log.agreement.size()) +
          " and " + std::to_string(log.eval_step.size()));
  }
  log.config_yaml = c.resolved_yaml;
  log.target_weights_hash = hash;
  auto save = [&] {
    log.wall_seconds = prior_seconds + since(t_train);
    auto state = trainer->state();
    log_into_state(log, state);
    state["log.wall_seconds"] = at::full({1}, log.wall_seconds, at::kFloat);
    auto checkpoint_meta = meta;
    checkpoint_meta["data_key"] = key;
    write_tensors(c.output.checkpoint, "output.checkpoint", state, checkpoint_meta);
    write_train_log(c.output.log, log);
  };
  double agreement = log.agreement.empty() ? 0.0 : log.agreement.back();
  while (trainer->steps_done() < c.train.steps) {
    const TrainStepLog s = trainer->step();
    if (!std::isfinite(s.loss))
      throw Error(ErrorKind::kBadInput,
                  "the loss is " + std::string(std::isnan(s.loss) ? "NaN" : "infinite") + " at step " +
                      std::to_string(s.step) + ": training diverged (lower train.lr, or check the loss weights)",
                  c.source_path, "train.lr");
    log.step.push_back(static_cast<double>(s.step));
    log.loss.push_back(s.loss);
    log.feature_loss.push_back(s.feature_loss);
    log.token_loss.push_back(s.token_loss);
    log.lr.push_back(s.lr);
    if (s.step % c.train.eval_every == 0 || s.step == c.train.steps) {
      agreement = trainer->validation_agreement();
      log.eval_step.push_back(static_cast<double>(s.step));
      log.agreement.push_back(agreement);
    }
    if (progress.step) progress.step(s, log.agreement.empty() ? NAN : log.agreement.back(), c.train.steps);
    const bool stop = stop_after > 0 && s.step == stop_after && s.step < c.train.steps;  // at the end: the draft
    if ((c.train.checkpoint_every > 0 && s.step % c.train.checkpoint_every == 0) || s.step == c.train.steps || stop)
      save();
    if (stop) {
      r.stopped = true;
      r.steps = trainer->steps_done();
      r.train_seconds = since(t_train);
      r.validation_agreement = agreement;
      return r;
    }
  }
  if (log.agreement.empty()) {  // resumed at the end
    agreement = trainer->validation_agreement();
  }
  if (c.architecture == "medusa") r.head_agreements = static_cast<MedusaTrainer&>(*trainer).head_agreements();
  if (c.architecture == "eagle") {  // draft steps 1..max(4, unroll): 4 is the default gamma
    const auto& eagle = static_cast<const EagleTrainer&>(*trainer);
    r.head_agreements = eagle.step_agreements(std::max<int64_t>(4, c.train.unroll));
    r.first_step_topk = eagle.first_step_topk({1, 2, 4, 8});
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : trained) out[kv.first] = *kv.second;
  out["vocab_ids"] = vocab_ids.to(at::kFloat);
  write_tensors(c.output.path, "output.path", out, meta, c.output.dtype);
  r.path = c.output.path;
  r.train_seconds = since(t_train);
  // The log's clock ends with the run, as the printed training time does (it stopped at the last
  // checkpoint, before the final evaluations and the draft's write); it adds the time before a
  // --resume.
  log.wall_seconds = prior_seconds + r.train_seconds;
  write_train_log(c.output.log, log);
  r.validation_agreement = agreement;
  r.steps = trainer->steps_done();
  return r;
}


std::shared_ptr<EagleHead> load_eagle_head(const std::string& path, const LoadedModel& target) {
  const TargetTensors frozen = target_tensors(target);
  at::Tensor ids;
  std::map<std::string, std::string> meta;
  const auto tensors = read_draft(path, "eagle", target, frozen.config, ids, &meta);
  auto head = std::make_shared<EagleHead>();
  set_frozen(*head, frozen);
  const int64_t n_layers = eagle_draft_layers([&](const std::string& name) { return tensors.count(name) != 0; });
  // Every "layers.<l>." tensor belongs to a counted layer (a gap would leave later layers out),
  // and the metadata, where written, names the same depth.
  for (const auto& kv : tensors)
    if (kv.first.compare(0, 7, "layers.") == 0) {
      const size_t dot = kv.first.find('.', 7);
      const std::string index = kv.first.substr(7, dot == std::string::npos ? std::string::npos : dot - 7);
      if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos ||
          index.size() > 18 || std::stoll(index) >= n_layers)  // 19 digits could overflow stoll
        throw Error(ErrorKind::kBadInput,
                    "tensor " + kv.first + " is not part of the head's " + std::to_string(n_layers) +
                        " decoder layers (expected layers.1 .. layers.<L-1>, each with all its tensors)",
                    path);
    }
  const auto listed = meta.find("head_layers");
  if (listed != meta.end() && listed->second != std::to_string(n_layers))
    throw Error(ErrorKind::kBadInput,
                "metadata head_layers says " + listed->second + " decoder layers, the tensors hold " +
                    std::to_string(n_layers),
                path);
  const EagleHead fresh =
      init_eagle_head(frozen.config, 0, parse_aux_layers(meta["aux_layers"], frozen.config, path), n_layers);
  head->aux_layers = fresh.aux_layers;
  head->layers.resize(fresh.layers.size());
  take_trained(tensors, head->trained(), fresh.trained(), path);
  head->vocab_ids = ids;
  head->lm_head = head_rows(frozen.lm_head, ids);
  return head;
}

std::shared_ptr<MedusaHeads> load_medusa_heads(const std::string& path, const LoadedModel& target) {
  const TargetTensors frozen = target_tensors(target);
  at::Tensor ids;
  const auto tensors = read_draft(path, "medusa", target, frozen.config, ids);
  int64_t k = 0;
  while (tensors.count("heads." + std::to_string(k) + ".weight")) ++k;
  if (k < 1) throw Error(ErrorKind::kBadInput, "the draft has no medusa head (heads.0.weight)", path);
  auto heads = std::make_shared<MedusaHeads>(init_medusa_heads(frozen.config, k));
  set_frozen(*heads, frozen);
  const MedusaHeads fresh = init_medusa_heads(frozen.config, k);
  take_trained(tensors, heads->trained(), fresh.trained(), path);
  heads->vocab_ids = ids;
  heads->lm_head = head_rows(frozen.lm_head, ids);
  return heads;
}

std::shared_ptr<const Datastore> load_datastore(const std::string& path, const LoadedModel& target) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  check_draft_metadata(f.metadata(), path, "retrieval", target);
  for (const char* name : {"tokens", "offsets"}) {
    if (!f.contains(name)) throw Error(ErrorKind::kBadInput, std::string("the datastore lacks tensor ") + name, path);
    // F16/BF16 would round token ids above 2048 / 256 to other ids, which the checks below accept.
    if (f.info(name).dtype != "F32")
      throw Error(ErrorKind::kBadInput,
                  std::string("tensor ") + name + " is " + f.info(name).dtype + ": expected F32 (token ids are exact there)",
                  path);
  }
  const HostTensor tokens = f.read("tokens"), offsets = f.read("offsets");
  const int64_t n = static_cast<int64_t>(tokens.data.size()), vocab = target.config.vocab_size;
  if (tokens.shape.size() != 1 || offsets.shape.size() != 1 || offsets.data.size() < 2)
    throw Error(ErrorKind::kBadInput, "expected 1-D tensors tokens [N] and offsets [S + 1], S >= 1", path);
  if (n == 0)  // it would load and never draft: every run would measure AR with extra steps
    throw Error(ErrorKind::kBadInput, "expected a datastore of at least one token (tokens [N], N >= 1), found none", path);
  auto id = [](float v) { return std::floor(v) == v && v >= 0.f && v < static_cast<float>(kMaxExactId); };
  for (int64_t i = 0; i < n; ++i)
    if (!id(tokens.data[i]) || static_cast<int64_t>(tokens.data[i]) >= vocab)
      throw Error(ErrorKind::kBadInput,
                  "tokens[" + std::to_string(i) + "] = " + config::to_text(tokens.data[i]) + ": expected a token id of the target (0.." +
                      std::to_string(vocab - 1) + ")",
                  path);
  std::vector<TokenList> sequences;
  for (size_t s = 0; s + 1 < offsets.data.size(); ++s) {
    const float a = offsets.data[s], b = offsets.data[s + 1];
    if (!id(a) || !id(b) || a > b || static_cast<int64_t>(b) > n || (s == 0 && a != 0.f) ||
        (s + 2 == offsets.data.size() && static_cast<int64_t>(b) != n))
      throw Error(ErrorKind::kBadInput,
                  "offsets[" + std::to_string(s) + ".." + std::to_string(s + 1) +
                      "]: expected ascending integers from 0 to the token count " + std::to_string(n),
                  path);
    sequences.emplace_back(tokens.data.begin() + static_cast<int64_t>(a), tokens.data.begin() + static_cast<int64_t>(b));
  }
  return std::make_shared<const Datastore>(sequences);
}

DistilledDraft load_distilled_draft(const std::string& path, const LoadedModel& target) {
  LoadedModel m = load_model(target.origin);  // the embeddings and LM head as the target stores them
  at::Tensor ids;
  std::map<std::string, std::string> meta;
  const auto tensors = read_draft(path, "draft_model", target, m.config, ids, &meta);
  int64_t k = 0;
  while (tensors.count("model.layers." + std::to_string(k) + ".input_layernorm.weight")) ++k;
  if (k < 1) throw Error(ErrorKind::kBadInput, "the draft has no layer (model.layers.0.*)", path);
  // The target's shapes with k layers; the trained tensors replace the target's layers and norm.
  // Whether the target keeps any layer matrix in quantized blocks (until 2026-12-07 its layer 0 q
  // projection alone decided, whatever the other matrices were; F16 and BF16 matrices, packed
  // since then too, meet float32 activations and do not count).
  const bool packed = std::any_of(m.weights.begin(), m.weights.end(), [](const auto& kv) {
    return kv.first.compare(0, 13, "model.layers.") == 0 && kv.second.is_packed() &&
           is_int8_packable(kv.second.storage_type);
  });
  for (auto it = m.weights.begin(); it != m.weights.end();)
    it = it->first.compare(0, 13, "model.layers.") == 0 ? m.weights.erase(it) : std::next(it);
  m.config.num_hidden_layers = k;
  const std::map<std::string, std::vector<int64_t>> shapes = expected_weight_shapes(m.config);
  for (const auto& [name, shape] : shapes) {
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") continue;
    auto it = tensors.find(name);
    if (it == tensors.end()) throw Error(ErrorKind::kBadInput, "the draft lacks tensor " + name, path);
    if (std::vector<int64_t>(it->second.sizes().begin(), it->second.sizes().end()) != shape)
      throw Error(ErrorKind::kBadInput, "tensor " + name + " does not fit the target's shapes", path);
    HostTensor h = to_host(it->second);
    // Matrices run on the target's int8 kernels when the target's own are packed: Q8_0.
    if (packed && shape.size() == 2 && shape[1] % 32 == 0) {
      h.packed = quantize(GgmlType::Q8_0, h.data.data(), h.data.size(), name);
      h.storage_type = static_cast<uint32_t>(GgmlType::Q8_0);
      h.data.clear();
    }
    m.weights[name] = std::move(h);
  }
  validate_weights(m.config, m.weights, path);
  m.source = path;
  m.origin.path = path;
  m.storage_types = (packed ? "Q8_0 (distilled layers), " : "F32 (distilled layers), ") + m.storage_types;
  DistilledDraft d;
  // train-draft writes head.vocab_top_n here: 0 (the whole head) up to the target's vocabulary.
  const std::string& vocab_text = meta["draft_vocab"];
  d.head_vocab = 0;
  if (!vocab_text.empty() && (!yaml_util::parse_int64(vocab_text, d.head_vocab) || d.head_vocab < 0 ||
                              d.head_vocab > m.config.vocab_size))
    throw Error(ErrorKind::kBadInput,
                "metadata draft_vocab: expected an integer from 0 (the whole head) to the target's vocabulary " +
                    std::to_string(m.config.vocab_size) + ", found '" + vocab_text + "'",
                path);
  // The head it was trained with is the one its drafter rebuilds (frequent_head_ids).
  const int64_t rows = d.head_vocab > 0 ? d.head_vocab : m.config.vocab_size;
  const std::vector<int64_t> want = frequent_head_ids(*m.tokenizer, m.config.vocab_size, rows);
  if (ids.numel() != static_cast<int64_t>(want.size()) ||
      !at::equal(ids, at::tensor(want, at::kLong)))
    throw Error(ErrorKind::kBadInput, "vocab_ids do not match the head of draft_vocab " + std::to_string(d.head_vocab), path);
  d.model = std::move(m);
  return d;
}

}  // namespace speclab
