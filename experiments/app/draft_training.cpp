#include "experiments/app/draft_training.h"

#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "framework/core/error.h"
#include "framework/engine/ar_decode.h"
#include "framework/io/prompt_loader.h"
#include "framework/io/train_log.h"
#include "models/loaders/dequant.h"
#include "models/loaders/safetensors.h"
#include "models/model_loader.h"

namespace speclab {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void add(const std::string& s) {
    add(s.data(), s.size());
    add("\0", 1);
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

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

std::map<std::string, at::Tensor> read_tensors(const std::string& path, std::map<std::string, std::string>* meta) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  if (meta) *meta = f.metadata();
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : f.tensors()) out[kv.first] = to_tensor(f.read(kv.first));
  return out;
}

// dtype float16: every tensor but the integer vocab_ids (kept float32, exact).
void write_tensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                   const std::map<std::string, std::string>& meta, const std::string& dtype = "float32") {
  WeightMap w;
  for (const auto& kv : tensors) w[kv.first] = to_host(kv.second);
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp";
  write_safetensors(tmp, w, dtype == "float16" ? SafetensorsDtype::kF16 : SafetensorsDtype::kF32, meta, {"vocab_ids"});
  fs::rename(tmp, path);  // a checkpoint is never half written
}

// The target's frozen tensors: embeddings, final norm, full LM head (float32).
void set_target_tensors(EagleHead& head, const LoadedModel& target) {
  LoadedModel m = load_model(target.origin);
  auto take = [&](const std::string& name) {
    auto it = m.weights.find(name);
    if (it == m.weights.end()) throw Error(ErrorKind::kBadInput, "the target has no tensor " + name, target.source);
    unpack_to_f32(it->second, name);
    return to_tensor(it->second);
  };
  head.target = m.config;
  head.embed = take("model.embed_tokens.weight");
  head.final_norm = take("model.norm.weight");
  head.lm_head = m.config.tie_word_embeddings ? head.embed : take("lm_head.weight");
}

// Keeps the lm_head rows of the top_n most frequent target top-1 tokens (all when top_n is 0).
void reduce_head(EagleHead& head, const at::Tensor& top1 /*[N]*/, int64_t top_n) {
  const int64_t V = head.target.vocab_size;
  if (top_n <= 0 || top_n >= V) {
    head.vocab_ids = at::arange(V, at::kLong);
    return;
  }
  const at::Tensor counts = at::bincount(top1, {}, V);
  // Stable: by count descending, ties by id; then the kept ids ascending.
  const at::Tensor order = std::get<1>(at::sort(counts, /*stable=*/true, 0, /*descending=*/true));
  head.vocab_ids = std::get<0>(at::sort(order.narrow(0, 0, top_n)));
  head.lm_head = head.lm_head.index_select(0, head.vocab_ids).contiguous();
}

struct Sample {
  TokenList prompt, answer;
  bool validation = false;
};

std::string cache_key(const TrainDraftConfig& c, const std::string& target_hash, const std::vector<Prompt>& prompts) {
  Fnv f;
  f.add(target_hash);
  f.add(std::to_string(c.data.answer_tokens));
  f.add(std::to_string(c.data.max_prompt_tokens));
  f.add(c.data.prompts.chat);
  f.add(c.data.prompts.system);
  f.add(std::to_string(c.data.validation_fraction));
  for (const Prompt& p : prompts) f.add(p.text);
  return f.hex();
}

// Stage 1: the target's greedy answers, appended to the cache as they come.
std::vector<Sample> target_answers(const TrainDraftConfig& c, LoadedTarget& target, const std::vector<Prompt>& prompts,
                                   const std::string& path, const TrainDraftProgress& progress) {
  std::map<int64_t, TokenList> cached;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      try {
        const nlohmann::json j = nlohmann::json::parse(line);
        cached[j.at("i").get<int64_t>()] = j.at("answer").get<TokenList>();
      } catch (const std::exception&) {
        break;  // a line cut short by an interruption: the rest is recomputed
      }
    }
  }
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error(ErrorKind::kIo, "cannot write the answer cache", path);
  const bool chat = use_chat_template(target.info, c.data.prompts.chat);
  const int64_t K = std::max<int64_t>(2, std::llround(1.0 / c.data.validation_fraction));
  GenerationOptions gen;
  gen.max_new_tokens = c.data.answer_tokens;
  SamplingOptions greedy;
  std::vector<Sample> samples;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Sample s;
    s.prompt = encode_prompt(target.info, prompts[i].text, chat, c.data.prompts.system);
    if (static_cast<int64_t>(s.prompt.size()) > c.data.max_prompt_tokens) continue;
    s.validation = static_cast<int64_t>(i) % K == K - 1;
    auto it = cached.find(static_cast<int64_t>(i));
    if (it != cached.end()) {
      s.answer = it->second;
    } else {
      s.answer = generate_ar(*target.model, *target.info.tokenizer, s.prompt, gen, greedy).tokens;
      out << nlohmann::json{{"i", i}, {"answer", s.answer}}.dump() << "\n" << std::flush;
    }
    samples.push_back(std::move(s));
    if (progress.stage && (i + 1) % 10 == 0) progress.stage("answers " + std::to_string(i + 1) + "/" + std::to_string(prompts.size()));
  }
  return samples;
}

// Stage 2: teacher forcing; features and top-1 of every position.
std::map<std::string, at::Tensor> teacher_force(const std::vector<Sample>& samples, const LoadedTarget& target,
                                                const EagleHead& head, const TrainDraftProgress& progress) {
  at::NoGradGuard no_grad;
  const Model& model = *target.model;
  const int64_t last = model.config().num_hidden_layers - 1;
  std::vector<at::Tensor> feats, toks, top1;
  std::vector<float> offsets{0}, split;
  for (size_t i = 0; i < samples.size(); ++i) {
    TokenList seq = samples[i].prompt;
    seq.insert(seq.end(), samples[i].answer.begin(), samples[i].answer.end());
    const int64_t n = static_cast<int64_t>(seq.size());
    KvCacheManager kv(kv_options_for(model.config(), n));
    KvSequence s(kv, kv.add_pool(model.config().kv_geometry()));
    kv.reserve(s.id(), n);
    std::vector<at::Tensor> hidden;
    ForwardOptions fo;
    fo.hidden_layers = {last};
    fo.hidden_out = &hidden;
    const at::Tensor logits = model.forward(token_tensor(seq), at::arange(n, at::kLong), kv.view(s.id(), n), fo);
    feats.push_back(eagle_features(head, hidden[0]));
    toks.push_back(token_tensor(seq));
    top1.push_back(logits.argmax(-1));
    offsets.push_back(offsets.back() + static_cast<float>(n));
    split.push_back(samples[i].validation ? 1.f : 0.f);
    if (progress.stage && (i + 1) % 20 == 0)
      progress.stage("features " + std::to_string(i + 1) + "/" + std::to_string(samples.size()));
  }
  return {{"features", at::cat(feats)},
          {"tokens", at::cat(toks).to(at::kFloat)},
          {"top1", at::cat(top1).to(at::kFloat)},
          {"offsets", at::tensor(offsets, at::kFloat)},
          {"validation", at::tensor(split, at::kFloat)}};
}

// Splits the cached tensors into training and validation sequences.
void split_data(const std::map<std::string, at::Tensor>& d, EagleTrainData& train, EagleTrainData& val) {
  const at::Tensor off = d.at("offsets").to(at::kLong), is_val = d.at("validation");
  const at::Tensor tokens = d.at("tokens").to(at::kLong), top1 = d.at("top1").to(at::kLong);
  std::vector<int64_t> rows[2];
  for (EagleTrainData* e : {&train, &val}) e->offsets = {0};
  for (int64_t s = 0; s < is_val.size(0); ++s) {
    const int v = is_val[s].item<float>() > 0.5f ? 1 : 0;
    const int64_t a = off[s].item<int64_t>(), b = off[s + 1].item<int64_t>();
    for (int64_t r = a; r < b; ++r) rows[v].push_back(r);
    EagleTrainData& e = v ? val : train;
    e.offsets.push_back(e.offsets.back() + (b - a));
  }
  for (int v = 0; v < 2; ++v) {
    EagleTrainData& e = v ? val : train;
    const at::Tensor idx = at::tensor(rows[v], at::kLong);
    e.features = d.at("features").index_select(0, idx);
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
  static std::map<std::string, std::string> memo;  // path + size + mtime -> hash
  const std::string path = target.origin.path.empty() ? target.source : target.origin.path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::kIo, "cannot read the target's weights", path);
  const std::string key = path + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtime);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot read the target's weights", path);
  Fnv f;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    f.add(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return memo[key] = f.hex();
}

std::string default_eagle_path(const LoadedModel& target) {
  const std::string file = fs::path(target.source).stem().string() + ".eagle.safetensors";
  const std::string trained = std::string(SPECLAB_SOURCE_DIR) + "/.cache/drafts/" + file;
  const std::string shipped = std::string(SPECLAB_SOURCE_DIR) + "/assets/drafts/" + file;
  return fs::exists(trained) || !fs::exists(shipped) ? trained : shipped;
}

TrainDraftResult train_draft(const TrainDraftConfig& c, bool resume, const TrainDraftProgress& progress,
                             int64_t stop_after) {
  const auto t_data = Clock::now();
  if (resume && !fs::exists(c.output.checkpoint))
    throw Error(ErrorKind::kIo, "--resume: no checkpoint to resume from", c.output.checkpoint);
  auto target = load_target(c.target);
  const std::string hash = target_weights_hash(target->info);
  EagleHead head = init_eagle_head(target->model->config(), c.train.seed);
  set_target_tensors(head, target->info);

  ExperimentConfig pc;
  pc.source_path = c.source_path;
  pc.prompts = c.data.prompts;
  const std::vector<Prompt> prompts = load_prompts(pc);
  const std::string key = cache_key(c, hash, prompts);
  fs::create_directories(c.data.cache_dir);
  const std::string features_path = c.data.cache_dir + "/features-" + key + ".safetensors";
  std::map<std::string, at::Tensor> data;
  if (fs::exists(features_path)) {
    data = read_tensors(features_path, nullptr);
  } else {
    const auto samples = target_answers(c, *target, prompts, c.data.cache_dir + "/answers-" + key + ".jsonl", progress);
    data = teacher_force(samples, *target, head, progress);
    write_tensors(features_path, data, {{"target_weights_hash", hash}});
  }
  EagleTrainData train, val;
  split_data(data, train, val);
  if (val.n_sequences() < 1)
    throw Error(ErrorKind::kConfig, "no validation prompt: use more prompts or a larger validation_fraction",
                c.source_path, "data.validation_fraction");
  reduce_head(head, train.target_top1, c.head.vocab_top_n);

  TrainDraftResult r;
  r.data_seconds = since(t_data);
  r.train_pairs = train.n_pairs();
  r.validation_pairs = val.n_pairs();
  const auto t_train = Clock::now();
  EagleTrainer trainer(head, train, val, c.train);
  const std::map<std::string, std::string> meta = {{"speclab.draft", "eagle"},
                                                   {"target_weights_hash", hash},
                                                   {"target", fs::path(target->info.source).filename().string()},
                                                   {"training_config", c.resolved_yaml}};
  TrainLog log;
  double prior_seconds = 0.0;
  if (resume) {
    std::map<std::string, std::string> ck_meta;
    const auto state = read_tensors(c.output.checkpoint, &ck_meta);
    if (ck_meta["target_weights_hash"] != hash || ck_meta["training_config"] != c.resolved_yaml)
      throw Error(ErrorKind::kBadInput, "the checkpoint belongs to another target or training config", c.output.checkpoint);
    trainer.load_state(state, c.output.checkpoint);
    log = log_from_state(state);
    auto w = state.find("log.wall_seconds");
    if (w != state.end()) prior_seconds = w->second.item<double>();
  }
  log.config_yaml = c.resolved_yaml;
  log.target_weights_hash = hash;
  auto save = [&] {
    log.wall_seconds = prior_seconds + since(t_train);
    auto state = trainer.state();
    log_into_state(log, state);
    state["log.wall_seconds"] = at::full({1}, log.wall_seconds, at::kFloat);
    write_tensors(c.output.checkpoint, state, meta);
    write_train_log(c.output.log, log);
  };
  double agreement = log.agreement.empty() ? 0.0 : log.agreement.back();
  while (trainer.steps_done() < c.train.steps) {
    const TrainStepLog s = trainer.step();
    log.step.push_back(static_cast<double>(s.step));
    log.loss.push_back(s.loss);
    log.feature_loss.push_back(s.feature_loss);
    log.token_loss.push_back(s.token_loss);
    log.lr.push_back(s.lr);
    double a = NAN;
    if (s.step % c.train.eval_every == 0 || s.step == c.train.steps) {
      a = agreement = trainer.validation_agreement();
      log.eval_step.push_back(static_cast<double>(s.step));
      log.agreement.push_back(a);
    }
    if (progress.step) progress.step(s, a, c.train.steps);
    const bool stop = stop_after > 0 && s.step == stop_after;
    if ((c.train.checkpoint_every > 0 && s.step % c.train.checkpoint_every == 0) || s.step == c.train.steps || stop)
      save();
    if (stop) {
      r.steps = trainer.steps_done();
      r.train_seconds = since(t_train);
      r.validation_agreement = agreement;
      return r;
    }
  }
  if (log.agreement.empty()) {  // resumed at the end
    agreement = trainer.validation_agreement();
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : head.trained()) out[kv.first] = *kv.second;
  out["vocab_ids"] = head.vocab_ids.to(at::kFloat);
  write_tensors(c.output.path, out, meta, c.output.dtype);
  r.path = c.output.path;
  r.train_seconds = since(t_train);
  r.validation_agreement = agreement;
  r.steps = trainer.steps_done();
  return r;
}

std::shared_ptr<EagleHead> load_eagle_head(const std::string& path, const LoadedModel& target) {
  std::map<std::string, std::string> meta;
  const auto tensors = read_tensors(path, &meta);
  if (meta["speclab.draft"] != "eagle")
    throw Error(ErrorKind::kBadInput, "not an eagle draft (no speclab.draft=eagle in its metadata)", path);
  const std::string hash = target_weights_hash(target);
  if (meta["target_weights_hash"] != hash)
    throw Error(ErrorKind::kConfig,
                "this eagle draft was trained for " + meta["target"] + " (weights " + meta["target_weights_hash"] +
                    "), not for the target " + fs::path(target.source).filename().string() + " (weights " + hash + ")",
                path, "drafter.draft_model");
  auto head = std::make_shared<EagleHead>();
  set_target_tensors(*head, target);
  for (auto& kv : head->trained()) {
    auto it = tensors.find(kv.first);
    if (it == tensors.end()) throw Error(ErrorKind::kBadInput, "the draft lacks tensor " + kv.first, path);
    *kv.second = it->second;
  }
  auto ids = tensors.find("vocab_ids");
  if (ids == tensors.end()) throw Error(ErrorKind::kBadInput, "the draft lacks tensor vocab_ids", path);
  head->vocab_ids = ids->second.to(at::kLong);
  if (head->vocab_ids.dim() != 1 || head->vocab_ids.numel() < 1 || head->vocab_ids.min().item<int64_t>() < 0 ||
      head->vocab_ids.max().item<int64_t>() >= head->target.vocab_size)
    throw Error(ErrorKind::kBadInput, "vocab_ids must be target token ids", path);
  if (head->vocab_ids.size(0) < head->target.vocab_size)
    head->lm_head = head->lm_head.index_select(0, head->vocab_ids).contiguous();
  const EagleHead fresh = init_eagle_head(head->target, 0);
  for (const auto& kv : fresh.trained())
    if ((*head->trained().at(kv.first)).sizes() != kv.second->sizes())
      throw Error(ErrorKind::kBadInput, "tensor " + kv.first + " does not fit the target's shapes", path);
  return head;
}

}  // namespace speclab
