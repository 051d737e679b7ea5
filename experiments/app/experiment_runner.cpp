#include "experiments/app/experiment_runner.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <tuple>

#include "framework/core/error.h"
#include "framework/core/regular_file.h"
#include "framework/core/thread_pool.h"
#include "framework/engine/observers.h"
#include "framework/engine/spec_decode.h"
#include "framework/core/rng.h"
#include "framework/core/file_fingerprint.h"
#include "framework/io/config_util.h"
#include "framework/io/hdf5_journal.h"
#include "framework/io/hdf5_recorder.h"
#include "experiments/app/draft_training.h"
#include "experiments/app/prompt_render.h"
#include "experiments/app/session_parts.h"
#include "models/llama/gemv.h"
#include "models/model_loader.h"

#ifndef SPECLAB_TORCH_VERSION
#define SPECLAB_TORCH_VERSION "unknown"
#endif

namespace speclab {

namespace fs = std::filesystem;

namespace {

// " (sweep point #3: drafter.gamma=4)" for a point of a sweep, "" without one: the note an error
// about one point's settings ends with.
std::string point_note(const SweepPoint& p) {
  return p.values.empty() ? "" : " (sweep point #" + std::to_string(p.index) + ": " + point_label(p.values, p.keys) + ")";
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}


std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        if (!v.empty()) return v;
      }
    }
  }
  return "unknown";
}

// The files a run reads, by role, with their fingerprints (framework/core/file_fingerprint.h), for
// runtime.files: the target model (and its tokenizer file), and per drafter entry its draft file
// (a draft model or its tokenizer, a trained eagle / medusa / retrieval file, the default one for
// this target when none is named), a plugin's library, and retrieval_first's datastore. A role
// whose file differs between sweep points is listed per point ("<role>@<point>"). Paths differ
// between machines and are left out: a resumed run or another shard must read the same content.
YAML::Node run_files(const std::vector<SweepPoint>& points) {
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> roles;  // role -> (point, path)
  const auto add = [&](const std::string& role, int64_t point, const std::string& path) {
    if (!path.empty()) roles[role].emplace_back(point, path);
  };
  for (const SweepPoint& pt : points) {
    ModelSource target;
    try {
      target = resolve_model_source(pt.config.models.target);
    } catch (const Error&) {
      continue;  // a named model that is not installed: check_model_source reports it
    }
    add("target_model", pt.index, target.path);
    add("target_model.tokenizer", pt.index, target.tokenizer);
    for (const DrafterEntry& d : pt.config.drafters) {
      const DrafterOptions& o = d.options;
      const std::string role = "drafters." + d.label;
      add(role + ".plugin", pt.index, o.plugin);
      for (const auto& [key, value] : o.params)  // a plugin's file parameters (medusa_ext's params.file)
        if (!o.plugin.empty() && config::is_path_parameter(key)) add(role + ".params." + key, pt.index, value);
      if (o.plugin.empty() && (o.name == "eagle" || o.name == "medusa" || o.name == "retrieval")) {
        add(role + ".draft_model", pt.index, o.draft_model.empty() ? default_draft_path(target.path, o.name) : o.draft_model);
      } else if (!o.draft_model.empty()) {
        std::string path = o.draft_model;
        if (!is_trained_draft_file(path)) {
          ModelSource src;
          src.path = o.draft_model;
          src.format = o.draft_model_format;
          try {
            path = resolve_model_source(src).path;
          } catch (const Error&) {  // reported before the run (check_model_source)
          }
        }
        add(role + ".draft_model", pt.index, path);
      }
      add(role + ".draft_model_tokenizer", pt.index, o.draft_model_tokenizer);
      if (o.retrieval_first)
        add(role + ".retrieval_first", pt.index,
            o.retrieval_datastore.empty() ? default_draft_path(target.path, "retrieval") : o.retrieval_datastore);
    }
  }
  std::map<std::string, std::string> seen;  // path -> fingerprint
  const auto fingerprint = [&](const std::string& path) {
    auto it = seen.find(path);
    return it != seen.end() ? it->second : seen[path] = file_fingerprint(path);
  };
  YAML::Node out(YAML::NodeType::Map);
  for (const auto& [role, uses] : roles) {
    const bool one = std::all_of(uses.begin(), uses.end(), [&](const auto& u) { return u.second == uses.front().second; });
    if (one) {
      out[role] = fingerprint(uses.front().second);
      continue;
    }
    for (const auto& [point, path] : uses) out[role + "@" + std::to_string(point)] = fingerprint(path);
  }
  return out;
}

// effective_config_yaml plus what only the run knows: the `runtime` section of /resolved_config,
// for the first sweep point (`target` is its loaded target, null when none was): the model file,
// the placement the model resolved "auto" to (dtype, kv_dtype, device) and how its matrices are
// held (weight_storage); the CPU kernels' ISA;
// and, for every point, the fingerprints of the files the run reads (run_files).
std::string resolved_config(const ExperimentConfig& config, const std::vector<SweepPoint>& points,
                            const LoadedTarget* target) {
  const ExperimentConfig& first_point = points.front().config;
  YAML::Node n = YAML::Load(effective_config_yaml(config));
  YAML::Node rt;
  rt["threads"] = compute_threads();
  // The CPU kernels' instruction set (SPECLAB_KERNEL_ISA caps it): AVX2 and AVX-512 sum in other
  // orders, so sampled tokens may differ between them. Compared on --resume and by merge.
  rt["kernel_isa"] = kernel_isa_name(kernel_isa());
  rt["files"] = run_files(points);
  try {
    const ModelSource src = resolve_model_source(first_point.models.target);
    std::error_code ec;
    const fs::path abs = fs::absolute(src.path, ec);
    rt["target_model"]["path"] = ec ? src.path : abs.lexically_normal().string();
    rt["target_model"]["format"] = src.format;
    if (!src.tokenizer.empty()) rt["target_model"]["tokenizer"] = fs::absolute(src.tokenizer, ec).lexically_normal().string();
  } catch (const Error&) {
    // A named model that is not installed: check_model_source has reported it already.
  }
  if (target) {
    rt["chat_template"] = use_chat_template(target->info, first_point.prompts.chat) ? "on" : "off";
    const ModelConfig& mc = target->model->config();
    rt["target_model"]["device"] = mc.device;
    rt["target_model"]["dtype"] = mc.dtype;
    rt["target_model"]["kv_dtype"] = mc.kv_dtype.empty() ? mc.dtype : mc.kv_dtype;
    // What each matrix is held as: `activations` applies to the packed types only, float32 (or
    // float16 / bfloat16) matrices multiply float32 activations whatever it says.
    rt["target_model"]["weight_storage"] = target->model->weight_storage();
  }
  std::error_code ec;
  rt["working_directory"] = fs::current_path(ec).string();
  n["runtime"] = rt;
  YAML::Emitter e;
  e << n;
  return std::string(e.c_str()) + "\n";
}

ExperimentMetadata host_metadata(const ExperimentConfig& config, const std::vector<SweepPoint>& points,
                                 const RunnerOptions& options, const LoadedTarget* target) {
  ExperimentMetadata m;
  m.name = config.name;
  m.config_yaml = config.resolved_yaml;
  m.resolved_config_yaml = resolved_config(config, points, target);
  m.git_revision = options.git_revision.empty() ? "unknown" : options.git_revision;
  m.torch_version = SPECLAB_TORCH_VERSION;
  m.cpu_model = cpu_model();
  m.cpu_cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  m.memory_bytes = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  m.start_time = iso8601_now();
  m.shard_index = options.shard.index;
  m.shard_count = options.shard.count;
  m.config_hash = shard_config_hash(m.resolved_config_yaml);
  return m;
}

// The resolved config without its `output` section (a resumed run may be pointed at the file
// by another path), re-emitted so that formatting differences do not matter.
std::string config_without_output(const std::string& yaml) {
  if (yaml.empty()) return {};
  try {
    YAML::Node n = YAML::Load(yaml);
    if (n.IsMap()) n.remove("output");
    YAML::Emitter e;
    e << n;
    return e.c_str();
  } catch (const YAML::Exception&) {
    return yaml;
  }
}

// Everything one sweep point runs with.
struct PointContext {
  const SweepPoint* point = nullptr;
  LoadedTarget* target = nullptr;
  std::unique_ptr<SessionParts> parts;  // KV manager + pool + drafters ([drafters.size()], config order)
  std::vector<TokenList> prompts;        // [n_prompts] rendered ids (a conversation's first turn)
  std::vector<Prompt> sources;           // [n_prompts] what they were rendered from (later turns)
};

std::unique_ptr<PointContext> prepare_point(const SweepPoint& point, const std::vector<Prompt>& prompts,
                                            TargetCache& models) {
  auto ctx = std::make_unique<PointContext>();
  const ExperimentConfig& cfg = point.config;
  ctx->point = &point;
  // Every error below says which sweep point it is (a swept key's error pointed at its base value
  // in the file, with no point named).
  const std::string at = point_note(point);
  try {  // the placement's errors (device, dtype) name the key that chose them
    ctx->target = &models.get(cfg.models.target);
  } catch (const Error& e) {
    const Error named = in_config(e, "model", "models.target", cfg.source_path);
    throw Error(named.kind(), named.message() + at, named.file(), named.field());
  }
  const ModelConfig& mc = ctx->target->model->config();
  std::vector<TokenList> longest;  // per prompt, its longest turn's tokens (as many as the check needs)
  for (const Prompt& p : prompts) {
    TokenList ids, last;
    try {
      ids = render_config_prompt(ctx->target->info, cfg, p);
      last = ids;
      if (!p.turns.empty()) {
        // The last turn's prompt for the KV budget: every earlier answer counted at max_new_tokens
        // (they are not known yet; EOS may stop them sooner). check_budget_holds_ar_runs caps it
        // at the context.
        const std::vector<std::string> empty(p.turns.size() - 1);
        last = render_config_turn(ctx->target->info, cfg, p, empty);
        const int64_t cap = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : int64_t(1) << 24;
        const int64_t answers = std::min(cfg.generation.max_new_tokens, cap) * static_cast<int64_t>(empty.size());
        last.resize(static_cast<size_t>(std::min(static_cast<int64_t>(last.size()) + answers, cap)), 0);
      }
    } catch (const Error& e) {
      throw Error(e.kind(), e.message() + at, e.file(), e.field());
    }
    try {
      check_prompt_fits(ids, mc);  // a later turn that does not fit ends its conversation (decode_once)
    } catch (const Error& e) {
      throw Error(ErrorKind::kBadInput, "prompt '" + p.id + "': " + e.message() + at, cfg.source_path, "prompts");
    }
    ctx->prompts.push_back(std::move(ids));
    longest.push_back(std::move(last));
  }
  ctx->sources = prompts;
  // Settings that only the loaded model can check (the KV budget against its block size, a
  // layer range against its depth) fail here: the error names the config and the key path.
  try {
    ctx->parts = std::make_unique<SessionParts>(*ctx->target, cfg.kv);
  } catch (const Error& e) {
    throw in_config(e, "kv", "kv", cfg.source_path, at);
  }
  check_budget_holds_ar_runs(*ctx->parts, longest, cfg.generation.max_new_tokens, mc.max_position_embeddings,
                             cfg.source_path, at);
  for (size_t i = 0; i < cfg.drafters.size(); ++i) {
    try {
      ctx->parts->add_drafter(cfg.drafters[i].options);
    } catch (const Error& e) {
      throw in_config(e, "drafter", "drafters[" + std::to_string(i) + "]", cfg.source_path, at);
    }
  }
  return ctx;
}

// Adds a conversation's turn to the result of the turns before it: tokens and steps appended,
// seconds and forwards added, KV peaks the largest, the stop reason the turn's.
void add_turn(SpecResult& sum, SpecResult&& turn) {
  sum.tokens.insert(sum.tokens.end(), turn.tokens.begin(), turn.tokens.end());
  sum.steps.insert(sum.steps.end(), std::make_move_iterator(turn.steps.begin()), std::make_move_iterator(turn.steps.end()));
  sum.stop_reason = turn.stop_reason;
  sum.prefill_seconds += turn.prefill_seconds;
  sum.draft_prefill_seconds += turn.draft_prefill_seconds;
  sum.decode_seconds += turn.decode_seconds;
  sum.forward_calls += turn.forward_calls;
  sum.kv_peak_bytes = std::max(sum.kv_peak_bytes, turn.kv_peak_bytes);
  sum.kv_seq_peak_bytes = std::max(sum.kv_seq_peak_bytes, turn.kv_seq_peak_bytes);
  sum.draft_seconds += turn.draft_seconds;
  sum.verify_seconds += turn.verify_seconds;
  sum.accept_seconds += turn.accept_seconds;
  sum.kv_seconds += turn.kv_seconds;
}

// Decodes prompt `j` of the point with one method (-1: AR, else the drafter of that index); fills
// the measurements of `rec` (not the key fields). A conversation runs turn by turn, each turn a
// sequence of its own over the whole conversation so far (its earlier answers as this method
// generated them), and its record adds the turns up; a turn whose prompt does not fit the
// context ends the conversation (stop reason "context").
void decode_once(PointContext& ctx, int64_t method_index, size_t j, int64_t repeat, RunRecord& rec) {
  const ExperimentConfig& cfg = ctx.point->config;
  // Each repeat samples from its own seed (repeat 0 from sampling.seed itself): repeats of a
  // sampled run are independent draws, counted as such by the summary (independent_trials()).
  SamplingOptions sampling = cfg.sampling;
  sampling.seed = derived_seed(cfg.sampling.seed, static_cast<uint64_t>(repeat));
  Method method;
  if (method_index >= 0) {
    method.drafter = &ctx.parts->drafter(static_cast<size_t>(method_index));
    method.options = cfg.drafters[static_cast<size_t>(method_index)].options;
  }
  Session session(*ctx.target->model, *ctx.target->info.tokenizer, ctx.parts->kv_target());
  PhaseTimer timer;
  ProbabilityLog log;
  session.add_observer(timer);
  session.add_observer(log);
  const Prompt& prompt = ctx.sources.at(j);
  const size_t turns = std::max<size_t>(1, prompt.turns.size());
  std::vector<std::string> answers;
  SpecResult s;
  rec.wall_seconds = 0.0;
  rec.n_prompt_tokens = 0;
  rec.turns = 0;
  for (size_t t = 0; t < turns; ++t) {
    TokenList ids = t == 0 ? ctx.prompts.at(j) : render_config_turn(ctx.target->info, cfg, prompt, answers);
    if (t > 0 && static_cast<int64_t>(ids.size()) >= ctx.target->model->config().max_position_embeddings &&
        ctx.target->model->config().max_position_embeddings > 0) {
      s.stop_reason = StopReason::kContext;
      break;
    }
    // Each turn samples from its own seed (turn 0 from the repeat's).
    if (t > 0) sampling.seed = derived_seed(sampling.seed, static_cast<uint64_t>(t));
    const auto t0 = Clock::now();
    session.begin({ids, method, cfg.generation, sampling});
    SpecResult turn = run_to_end(session);
    rec.wall_seconds += since(t0);
    rec.n_prompt_tokens += static_cast<int64_t>(ids.size());
    ++rec.turns;
    answers.push_back(turn.text);
    add_turn(s, std::move(turn));
  }
  // Deterministic decoding (temperature 0, or top_k 1): repeats are the same trials again, and
  // the speculative tokens must equal AR's (the lossless check below).
  rec.greedy = cfg.sampling.deterministic() ? 1 : 0;
  // Prompt processing of both models (the draft model's prefill runs in the drafter's begin()).
  rec.prefill_seconds = s.prefill_seconds + s.draft_prefill_seconds;
  rec.decode_seconds = s.decode_seconds;
  rec.tokens = std::move(s.tokens);
  rec.text = prompt.turns.empty() ? answers.front() : conversation_text(answers);
  rec.target_forwards = s.forward_calls;
  rec.kv_peak_bytes = s.kv_peak_bytes;
  rec.kv_seq_peak_bytes = s.kv_seq_peak_bytes;
  rec.stop_reason = to_string(s.stop_reason);
  if (method.drafter) {
    rec.draft_seconds = s.draft_seconds;
    rec.verify_seconds = s.verify_seconds + s.prefill_seconds;
    rec.accept_seconds = s.accept_seconds;
    rec.kv_seconds = s.kv_seconds;
    rec.steps = std::move(s.steps);
  } else {
    rec.verify_seconds = s.prefill_seconds + s.decode_seconds;  // AR: every second is a target step
  }
  rec.n_generated = static_cast<int64_t>(rec.tokens.size());
  rec.other_seconds =
      rec.wall_seconds - (rec.draft_seconds + rec.verify_seconds + rec.accept_seconds + rec.kv_seconds);
}

std::vector<PointRecord> point_records(const std::vector<SweepPoint>& points) {
  std::vector<PointRecord> out;
  for (const SweepPoint& p : points) out.push_back({p.index, p.values, point_label(p.values, p.keys)});
  return out;
}

std::vector<PromptRecord> prompt_records(const std::vector<Prompt>& prompts) {
  std::vector<PromptRecord> out;
  for (const Prompt& p : prompts) out.push_back({p.id, p.category, p.text});
  return out;
}

// Resume: the file must describe the same experiment.
void check_same_experiment(const std::string& path, const ExperimentData& have, const ExperimentConfig& config,
                           const std::vector<SweepPoint>& sweep_points, const ShardSpec& shard,
                           const std::vector<PointRecord>& points, const std::vector<PromptRecord>& prompts,
                           const std::vector<std::string>& methods) {
  auto differs = [&](const std::string& what) {
    throw Error(ErrorKind::kConfig,
                "expected the same " + what + " as the experiment recorded in the file, found a different one; "
                "resume with the same config, or use --overwrite to start over",
                path, "--resume");
  };
  if (have.points.size() != points.size()) differs("sweep");
  for (size_t i = 0; i < points.size(); ++i)
    if (have.points[i].values != points[i].values) differs("sweep");
  if (have.prompts.size() != prompts.size()) differs("prompt set");
  for (size_t i = 0; i < prompts.size(); ++i)
    if (have.prompts[i].id != prompts[i].id || have.prompts[i].text != prompts[i].text ||
        have.prompts[i].category != prompts[i].category)
      differs("prompt set");
  if (have.methods != methods) differs("drafter list");
  if (have.meta.shard_index != shard.index || have.meta.shard_count != shard.count)
    throw Error(ErrorKind::kConfig,
                "expected shard " + shard.text() + ", found a file of shard " +
                    ShardSpec{have.meta.shard_index, have.meta.shard_count}.text() +
                    "; resume each shard into its own file with its own --shard",
                path, "--shard");
  if (have.resolved_config_yaml.empty()) {  // a file written before /resolved_config existed
    if (config_without_output(have.config_yaml) != config_without_output(config.resolved_yaml)) differs("config");
    return;
  }
  // Settings by value (0 and 0.0, key order and written-out defaults do not matter); the output
  // path may differ, and of the runtime facts only the thread count (it changes every timing).
  // A key the file lacks, at its default now, is no difference (a file written before the key
  // existed could not be resumed).
  std::vector<std::string> diff = yaml_differences(
      have.resolved_config_yaml, resolved_config(config, sweep_points, nullptr),
      shard_config_ignored_keys(), default_config_yaml());
  if (!diff.empty()) {
    throw Error(ErrorKind::kConfig,
                "expected the same settings as the experiment recorded in the file, found " +
                    std::to_string(diff.size()) + " different (file vs now: " + differences_list(diff) +
                    "); resume with the same config (and --threads), or use --overwrite to start over",
                path, "--resume");
  }
}

}  // namespace

std::string iso8601_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {
fs::path output_dir(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}
}  // namespace

std::vector<std::string> run_config_warnings(const ExperimentConfig& config) {
  std::vector<std::string> sampled, greedy;  // labels of cost-schedule entries, by the points' decoding
  const auto add = [](std::vector<std::string>& v, const std::string& l) {
    if (std::find(v.begin(), v.end(), l) == v.end()) v.push_back(l);
  };
  std::string same_text;  // the first two prompts of one text at a sampled point
  for (const SweepPoint& p : expand_sweep(config)) {
    for (const DrafterEntry& d : p.config.drafters)
      if (d.options.schedule == "cost") add(p.config.sampling.deterministic() ? greedy : sampled, d.label);
    // The seed does not depend on the prompt: two prompts of one text draw the same samples, and
    // alpha's interval counts them as two (said nowhere until 2026-12-07). Files that cannot be
    // read are left to the plan, which names them.
    if (!same_text.empty() || p.config.sampling.deterministic()) continue;
    std::vector<Prompt> prompts;
    try {
      prompts = load_prompts(p.config);
    } catch (const Error&) {
      continue;
    }
    std::map<std::string, const Prompt*> first;
    for (const Prompt& q : prompts) {
      const auto [it, fresh] = first.emplace(q.text, &q);
      if (fresh) continue;
      same_text = "prompts '" + it->second->id + "' and '" + q.id + "' have the same text: under sampling they " +
                  "draw the same samples (the seed does not depend on the prompt), and alpha's interval counts " +
                  "both; drop one, or count them as one";
      break;
    }
  }
  const auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& l : v) out += (out.empty() ? "" : ", ") + l;
    return out;
  };
  std::vector<std::string> out;
  if (!sampled.empty())
    out.push_back("drafters " + list(sampled) + ": schedule cost at a sampled point: the output is not reproducible "
                  "from the seed (each step's gamma follows the measured timings, and with it the verifier's random "
                  "draws); a rerun, --resume or shard draws other samples");
  // Greedy tokens are the target's whatever the draft lengths, but the steps are not: alpha, tau and
  // /steps differ between reruns, shards and a resumed file (said for sampling only until 2026-12-07).
  if (!greedy.empty())
    out.push_back("drafters " + list(greedy) + ": schedule cost: the steps follow the measured timings, so alpha, "
                  "tau and /steps differ between a rerun, --resume or shard (the greedy tokens do not)");
  if (!same_text.empty()) out.push_back(same_text);
  return out;
}

void ensure_output_directory(const std::string& path, const std::string& field) {
  if (path.empty()) throw Error(ErrorKind::kConfig, "expected an output path, found an empty one", path, field);
  // A directory's path ("out/", "out/.") names no file: refused before its directories were made
  // (they were, and the refusal came after).
  if (names_a_directory(path))
    throw Error(ErrorKind::kConfig, "expected a file path, found a directory's path", path, field);
  const fs::path dir = output_dir(path);
  std::error_code ec;
  if (!fs::exists(dir, ec)) fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorKind::kIo,
                "expected a directory for the output file " + path + " (made when missing), found " +
                    (fs::exists(dir, ec) ? "a non-directory" : "none, and it could not be made"),
                dir.string(), field);
}

void check_output_path(const std::string& path, OutputMode mode) {
  ensure_output_directory(path);
  const fs::path p(path);
  std::error_code ec;
  if (fs::exists(p, ec)) {
    if (fs::is_directory(p, ec))
      throw Error(ErrorKind::kConfig, "expected an output file path, found a directory", path, "output.path");
    if (mode == OutputMode::kCreate)
      throw Error(ErrorKind::kConfig,
                  "the output file already exists; pass --resume to continue it or --overwrite to replace it", path,
                  "output.path");
    if (::access(path.c_str(), W_OK) != 0)
      throw Error(ErrorKind::kIo, "expected a writable output file, found a read-only one: " +
                                      std::string(std::strerror(errno)), path, "output.path");
  }
  // Before any model is loaded: a running writer of the file (or of the <path>.partial an
  // --overwrite run is writing) is left alone (Hdf5Recorder::create and open refuse it too).
  for (const std::string& held : {path, path + ".partial"})
    if (hdf5_writer_holds(held))
      throw Error(ErrorKind::kIo,
                  "expected no process writing the output file, found one holding its lock (a running speclab run?); "
                  "stop it or wait for it",
                  path, "output.path");  // the file the user named, even where its .partial is held
  // The recorder creates <path>.partial (renamed to <path>) and writes <path>.journal at every
  // commit: probe that the directory takes a new file now, before any model is loaded.
  const std::string probe = path + ".partial";
  const bool had_probe = fs::exists(probe, ec);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(ErrorKind::kIo,
                "expected a writable directory for the output file, cannot create " + probe + ": " +
                    std::strerror(errno),
                output_dir(path).string(), "output.path");
  ::close(fd);
  if (!had_probe) ::unlink(probe.c_str());
}

// A model source that resolves to an existing file or directory; errors name the config key
// (`key` = "models.target", "drafters[1].draft_model") and the sweep point.
void check_model_source(const ModelSource& src, const std::string& key, const SweepPoint& point,
                        const ExperimentConfig& config) {
  try {
    src.validate();
    const ModelSource r = resolve_model_source(src);
    std::error_code ec;
    if (r.format != "random" && !fs::exists(r.path, ec)) throw Error(ErrorKind::kIo, "expected an existing model file or directory, found none at " + r.path, "", "path");
    // A llama2.c file carries no vocabulary: its tokenizer file (default: tokenizer.bin beside it)
    // must exist too (the load's error named neither the config nor the key).
    if (r.format == "llama2c" && !r.tokenizer.empty() && !fs::exists(r.tokenizer, ec))
      throw Error(ErrorKind::kIo,
                  "expected the llama2.c tokenizer file, found none at " + r.tokenizer +
                      (src.tokenizer.empty() ? std::string(" (the default beside the model; set ") +
                                                   (key == "models.target" ? "tokenizer" : "draft_model_tokenizer") +
                                                   ": to another)"
                                             : std::string()),
                  "", "tokenizer");
  } catch (const Error& e) {
    const std::string at = point_note(point);
    const std::string where = e.file().empty() || e.file() == "model" ? "" : e.file() + ": ";
    throw Error(e.kind(), where + e.message() + at, config.source_path, key + "." + (e.field().empty() ? "path" : e.field()));
  }
}

void require_drafters(const ExperimentConfig& config) {
  if (config.drafters.empty())
    throw Error(ErrorKind::kConfig,
                "expected at least one drafter (a run measures drafters against AR decoding), found none",
                config.source_path, "drafters");
}

ExperimentPlan plan_experiment(const ExperimentConfig& config) {
  ExperimentPlan plan;
  // 1. Everything that can be checked without touching the output. With a sweep, each point is
  // validated as it is expanded (the config without the sweep's values may be invalid where
  // every point is valid: parse_experiment_config).
  if (config.sweep.empty()) config.validate();
  require_drafters(config);
  plan.points = expand_sweep(config);
  const std::vector<SweepPoint>& points = plan.points;
  if (points.empty()) throw Error(ErrorKind::kConfig, "expected at least one sweep point, found none", config.source_path, "sweep");
  // Every point's models exist before anything runs (a later point's missing file would
  // otherwise end the run after the earlier points).
  for (const SweepPoint& pt : points) {
    check_model_source(pt.config.models.target, "models.target", pt, config);
    for (size_t d = 0; d < pt.config.drafters.size(); ++d) {
      const DrafterOptions& o = pt.config.drafters[d].options;
      const std::string key = "drafters[" + std::to_string(d) + "]";
      std::error_code ec;
      if (!o.retrieval_datastore.empty() && !fs::is_regular_file(o.retrieval_datastore, ec))
        throw Error(ErrorKind::kIo,
                    "expected the retrieval datastore written by speclab train-draft, found no file at " +
                        o.retrieval_datastore +
                        point_note(pt),
                    config.source_path, key + ".retrieval_datastore");
      if (!o.plugin.empty() && !fs::is_regular_file(o.plugin, ec))
        throw Error(ErrorKind::kIo, "expected a drafter plugin (a .so file), found no file at " + o.plugin + point_note(pt),
                    config.source_path, key + ".plugin");
      if (!o.plugin.empty() || o.draft_model.empty()) continue;
      // A file `speclab train-draft` wrote (eagle, medusa, a distilled draft_model) is not a model
      // source of its own: it must exist; its drafter checks the rest against the target.
      const bool trained = o.name == "eagle" || o.name == "medusa" || o.name == "retrieval";  // whatever the file is called
      if ((trained || fs::path(o.draft_model).extension() == ".safetensors") && !fs::is_directory(o.draft_model)) {
        if (!fs::is_regular_file(o.draft_model, ec))
          throw Error(ErrorKind::kIo, "expected the trained draft written by speclab train-draft, found no file at " +
                                          o.draft_model, config.source_path, key + ".draft_model");
        continue;
      }
      ModelSource ds;
      ds.path = o.draft_model;
      ds.format = o.draft_model_format;
      ds.tokenizer = o.draft_model_tokenizer;
      try {
        check_model_source(ds, key, pt, config);
      } catch (const Error& e) {
        // "drafters[0].path" -> "drafters[0].draft_model", ".format" -> ".draft_model_format"
        std::string field = e.field();
        if (field == key + ".path") field = key + ".draft_model";
        if (field == key + ".format") field = key + ".draft_model_format";
        if (field == key + ".tokenizer") field = key + ".draft_model_tokenizer";
        throw Error(e.kind(), e.message(), e.file(), field);
      }
    }
  }
  // Prompts per point (prompts.* may be swept): the file's prompt table is their union, in
  // first-seen order, and each point runs its own list of indices into it.
  std::vector<Prompt>& prompts = plan.prompts;
  std::vector<std::vector<int64_t>>& point_prompts = plan.point_prompts;
  point_prompts.resize(points.size());
  {
    // Keyed by (id, category, text, k) for the k-th copy within a point: identical prompts in one
    // point stay separate rows, the same prompt in several points is one.
    std::map<std::tuple<std::string, std::string, std::string, int>, int64_t> index_of;
    // An id names one prompt over the whole file, as within one point (load_prompts): /runs
    // refers to prompts by id, and a swept prompts.files could bring two files of one name.
    std::map<std::string, std::pair<int64_t, size_t>> id_first;  // id -> (union row, point)
    for (size_t pi = 0; pi < points.size(); ++pi) {
      std::vector<Prompt> own;
      try {
        own = load_prompts(points[pi].config);
      } catch (const Error& e) {
        // A swept prompts.* key: the point whose prompts failed (the error named the file alone,
        // as if the config's own prompts were wrong; until 2026-12-07).
        bool swept = false;
        for (const auto& kv : points[pi].values) swept = swept || kv.first.rfind("prompts.", 0) == 0;
        if (!swept) throw;
        throw Error(e.kind(), e.message() + point_note(points[pi]), e.file(), e.field());
      }
      if (own.empty())
        throw Error(ErrorKind::kConfig, "expected at least one prompt, found none", config.source_path, "prompts");
      std::map<std::tuple<std::string, std::string, std::string>, int> copies;
      for (const Prompt& p : own) {
        const int k = copies[std::make_tuple(p.id, p.category, p.text)]++;
        auto [it, fresh] =
            index_of.emplace(std::make_tuple(p.id, p.category, p.text, k), static_cast<int64_t>(prompts.size()));
        if (fresh) {
          const auto [first, new_id] = id_first.emplace(p.id, std::make_pair(it->second, pi));
          const Prompt& a = prompts[static_cast<size_t>(first->second.first)];
          if (!new_id && (a.text != p.text || a.category != p.category))
            throw Error(ErrorKind::kConfig,
                        "expected each prompt id to name one prompt in all the sweep's points, found id '" + p.id +
                            "' for two different " + (a.text == p.text ? "categories" : "texts") + ", in sweep point #" +
                            std::to_string(points[first->second.second].index) + " (" +
                            point_label(points[first->second.second].values, points[first->second.second].keys) + ") and #" +
                            std::to_string(points[pi].index) + " (" + point_label(points[pi].values, points[pi].keys) +
                            "); give the files distinct names or set prompts.id_field to a unique key",
                        config.source_path, "prompts");
          prompts.push_back(p);
        }
        point_prompts[pi].push_back(it->second);
      }
    }
  }
  return plan;
}

ExperimentOutcome run_experiment(const ExperimentConfig& config, const RunnerOptions& options) {
  const ExperimentPlan checked = plan_experiment(config);
  const std::vector<SweepPoint>& points = checked.points;
  const std::vector<Prompt>& prompts = checked.prompts;
  const std::vector<std::vector<int64_t>>& point_prompts = checked.point_prompts;
  const std::string& path = config.output.path;
  check_output_path(path, options.mode);
  std::vector<std::string> methods = {kArMethod};
  for (const DrafterEntry& d : config.drafters) methods.push_back(d.label);
  {
    std::set<std::string> seen;
    for (const auto& m : methods)
      if (!seen.insert(m).second)
        throw Error(ErrorKind::kConfig, "expected unique drafter labels (and none named 'ar'), found '" + m + "' twice",
                    config.source_path, "drafters");
  }
  const std::vector<PointRecord> precs = point_records(points);
  const std::vector<PromptRecord> prrecs = prompt_records(prompts);
  const int64_t n_points = static_cast<int64_t>(points.size());
  const int64_t n_methods = static_cast<int64_t>(methods.size());
  // repeats and warmup may be swept too (validated per point by expand_sweep).
  auto repeats_of = [&](int64_t pi) { return points[static_cast<size_t>(pi)].config.repeats; };
  // The plan (framework/io/shard.h): every (point, prompt, repeat) group in run order. Group
  // (pi, j-th prompt of the point, r) is row plan_offset[pi] + j * repeats + r.
  std::vector<PlanGroup> plan;
  std::vector<int64_t> plan_offset(points.size());
  for (int64_t pi = 0; pi < n_points; ++pi) {
    plan_offset[static_cast<size_t>(pi)] = static_cast<int64_t>(plan.size());
    for (int64_t i : point_prompts[static_cast<size_t>(pi)])
      for (int64_t r = 0; r < repeats_of(pi); ++r) plan.push_back({pi, i, r});
  }
  auto mine = [&](int64_t pi, int64_t j, int64_t r) {
    return options.shard.owns(plan_offset[static_cast<size_t>(pi)] + j * repeats_of(pi) + r);
  };

  // 2. What the file already holds (resume).
  std::error_code ec;
  const bool resuming = options.mode == OutputMode::kResume && fs::exists(path, ec);
  std::unique_ptr<Hdf5Recorder> recorder;
  std::set<RunKey> done_keys;
  std::map<RunKey, TokenList> ar_tokens;  // key with method "ar"
  // The summary, built as prompt-runs are recorded (resumed ones first, in run_id order) rather
  // than from a read of the whole file at the end: the end of a long sweep then needs no memory
  // that grows with the file. Its runs are the file's, so it is summarize() of the file.
  SummaryBuilder summary(methods);
  if (resuming) {
    // Read-only first: a mismatch must leave the file untouched.
    ExperimentData have = read_experiment(path);
    check_same_experiment(path, have, config, points, options.shard, precs, prrecs, methods);
    // One file, one build: another binary's runs would mix two builds' results (and timings)
    // under the file's git_revision (merge refuses shards of two revisions for the same reason).
    const std::string built = options.git_revision.empty() ? "unknown" : options.git_revision;
    if (have.meta.git_revision != built && have.meta.git_revision != "unknown" && built != "unknown")
      throw Error(ErrorKind::kConfig,
                  "expected the build that wrote the file (revision " + have.meta.git_revision +
                      ") to resume it, found revision " + built +
                      ": its runs would mix two builds' results; resume with that build, or use --overwrite to start over",
                  path, "--resume");
    for (RunRecord& r : have.runs) {
      summary.add(r);
      done_keys.insert(r.key);
      if (r.key.method == kArMethod) ar_tokens[r.key] = std::move(r.tokens);
    }
  }
  auto pending = [&](int64_t point) {
    const std::vector<int64_t>& own = point_prompts[static_cast<size_t>(point)];
    for (size_t j = 0; j < own.size(); ++j)
      for (int64_t r = 0; r < repeats_of(point); ++r)
        for (const auto& m : methods)
          if (mine(point, static_cast<int64_t>(j), r) && !done_keys.count({point, own[j], m, r})) return true;
    return false;
  };

  // 3. Models, prompts and drafters of the first point with work left, before the file is made.
  TargetCache models;
  int64_t first = 0;
  while (first < n_points && !pending(first)) ++first;
  std::unique_ptr<PointContext> ctx;
  auto point_prompt_list = [&](int64_t pi) {
    std::vector<Prompt> own;
    for (int64_t i : point_prompts[static_cast<size_t>(pi)]) own.push_back(prompts[static_cast<size_t>(i)]);
    return own;
  };
  if (first < n_points) ctx = prepare_point(points[static_cast<size_t>(first)], point_prompt_list(first), models);
  // The other points with work left are prepared once and dropped, so that what only a loaded
  // model can check (KV budget, layer ranges, prompt lengths) fails before anything runs. Their
  // target models stay in the cache for later.
  for (int64_t pi = first + 1; pi < n_points; ++pi)
    if (pending(pi)) prepare_point(points[static_cast<size_t>(pi)], point_prompt_list(pi), models);
  auto stop = [&] { return options.stop_requested && options.stop_requested(); };
  ExperimentOutcome out;
  out.output_path = path;
  out.runs_resumed = static_cast<int64_t>(done_keys.size());
  if (stop()) {  // interrupted while loading: nothing made yet
    out.interrupted = true;
    return out;
  }
  if (resuming) {
    recorder = std::make_unique<Hdf5Recorder>(Hdf5Recorder::open_for_append(path));
  } else {
    ExperimentMetadata meta =
        host_metadata(config, points, options, ctx ? ctx->target : nullptr);
    meta.plan = plan;
    recorder = std::make_unique<Hdf5Recorder>(Hdf5Recorder::create(path, meta, precs, prrecs, methods));
  }

  ProgressEvent ev;
  ev.total = 0;
  for (size_t g = 0; g < plan.size(); ++g)
    if (options.shard.owns(static_cast<int64_t>(g))) ev.total += n_methods;
  ev.resumed = ev.done = static_cast<int64_t>(done_keys.size());
  ev.eta_seconds = std::numeric_limits<double>::quiet_NaN();
  auto report = [&](ProgressEvent::Kind kind) {
    ev.kind = kind;
    if (options.on_progress) options.on_progress(ev);
  };
  report(ProgressEvent::Kind::kStart);
  const auto t_start = Clock::now();
  int64_t recorded = 0;

  // One prompt-run: decode, check losslessness, append (committed before it returns). `j` is the
  // prompt's place in the point's own list, `i` its index in the file's prompt table.
  auto run_one = [&](const SweepPoint& point, int64_t pi, int64_t j, int64_t r, int64_t m) {
    const int64_t i = point_prompts[static_cast<size_t>(pi)][static_cast<size_t>(j)];
    const Prompt& prompt = prompts[static_cast<size_t>(i)];
    RunRecord rec;
    rec.key = {pi, i, methods[static_cast<size_t>(m + 1)], r};
    if (done_keys.count(rec.key)) return;
    rec.prompt_id = prompt.id;
    rec.category = prompt.category;
    if (m >= 0) {
      const DrafterOptions& o = point.config.drafters[static_cast<size_t>(m)].options;
      rec.drafter = o.name;
      rec.gamma = o.num_speculative_tokens;
    }
    try {
      decode_once(*ctx, m, static_cast<size_t>(j), r, rec);
    } catch (const Error& e) {
      throw Error(e.kind(),
                  "point #" + std::to_string(pi) + ", prompt '" + prompt.id + "', method '" + rec.key.method +
                      "': " + e.message() + " (" + std::to_string(recorded + ev.resumed) +
                      " prompt-runs recorded before are in " + path + ")",
                  e.file().empty() ? config.source_path : e.file(), e.field());
    }
    const RunKey ar_key{pi, i, kArMethod, r};
    if (m < 0) {
      ar_tokens[ar_key] = rec.tokens;
    } else if (rec.greedy) {
      auto it = ar_tokens.find(ar_key);
      rec.lossless = it == ar_tokens.end() ? -1 : (it->second == rec.tokens ? 1 : 0);
    }
    const Clock::time_point t_commit = Clock::now();
    const double cpu_commit = thread_cpu_seconds();
    recorder->append(rec);
    ev.commit_seconds = since(t_commit);
    ev.commit_cpu_seconds = thread_cpu_seconds() - cpu_commit;
    summary.add(rec);
    done_keys.insert(rec.key);
    ++recorded;
    ++ev.done;
    ev.tokens += rec.n_generated;
    ev.elapsed_seconds = since(t_start);
    ev.eta_seconds = ev.elapsed_seconds / static_cast<double>(recorded) * static_cast<double>(ev.total - ev.done);
    ev.run = &rec;
    report(ProgressEvent::Kind::kRunDone);
    ev.run = nullptr;
  };

  // The sweep; false when stop_requested() cut it short.
  auto run_sweep = [&]() -> bool {
    for (int64_t pi = first; pi < n_points; ++pi) {
      if (!pending(pi)) continue;
      if (stop()) return false;
      const SweepPoint& point = points[static_cast<size_t>(pi)];
      if (!ctx) ctx = prepare_point(point, point_prompt_list(pi), models);
      ev.point = pi;
      ev.point_label = precs[static_cast<size_t>(pi)].label;
      ev.run = nullptr;
      report(ProgressEvent::Kind::kPoint);
      if (point.config.warmup > 0) {
        report(ProgressEvent::Kind::kWarmup);
        for (int64_t w = 0; w < point.config.warmup; ++w)
          for (int64_t m = -1; m < static_cast<int64_t>(point.config.drafters.size()); ++m) {
            if (stop()) return false;
            RunRecord scratch;
            decode_once(*ctx, m, 0, 0, scratch);
          }
      }
      const int64_t n_own = static_cast<int64_t>(point_prompts[static_cast<size_t>(pi)].size());
      for (int64_t j = 0; j < n_own; ++j)
        for (int64_t r = 0; r < point.config.repeats; ++r) {
          if (!mine(pi, j, r)) continue;
          for (int64_t m = -1; m < static_cast<int64_t>(point.config.drafters.size()); ++m) {
            if (stop()) return false;
            run_one(point, pi, j, r, m);
          }
        }
      ctx.reset();
    }
    return true;
  };

  bool finished = false;
  try {
    finished = run_sweep();
  } catch (...) {
    // Best effort: a full disk may refuse this too, and the file then keeps status "running".
    try {
      recorder->set_root_attribute("status", "failed");
    } catch (const Error&) {
    }
    throw;
  }
  out.runs_recorded = recorded;
  out.runs_resumed = ev.resumed;
  out.points = precs;
  if (!finished) {
    recorder->set_root_attribute("end_time", iso8601_now());
    recorder->set_root_attribute("status", "interrupted");
    out.interrupted = true;
    return out;
  }

  // 4. The summary of the file's records (identical for resumed and uninterrupted runs). The
  // status becomes "complete" last, so a file that says complete holds the summary too.
  out.summary = summary.finish(precs);
  recorder->write_summary(out.summary);
  recorder->set_root_attribute("end_time", iso8601_now());
  recorder->set_root_attribute("status", "complete");
  return out;
}

}  // namespace speclab
