// speclab train-draft and the eagle, medusa, distilled draft_model and retrieval drafters on the real
// stories260K model (and medusa as the out-of-tree plugin experiments/plugins/medusa_drafter): a tiny EAGLE head trained for a few hundred steps (seconds), with feature
// noise on. Checks: the loss falls,
// training is deterministic given a seed (same bytes twice), an interrupted run resumed gives the
// uninterrupted result, a corrupt checkpoint and a draft for another target are refused,
// evaluation sets are refused as training prompts, greedy eagle decoding is token-identical to
// AR (sampling too runs through the engine's q checks), and the packed drafting forward equals
// the libtorch one.
#include "tests/torch_catch.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <H5Cpp.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <system_error>

#include <sys/wait.h>
#include <unistd.h>

#include "experiments/app/draft_training.h"
#include "experiments/app/equivalence_runner.h"
#include "experiments/app/evaluation_sets.h"
#include "experiments/app/experiment_runner.h"
#include "experiments/app/session_parts.h"
#include "framework/core/blas_core.h"
#include "framework/core/thread_pool.h"
#include "framework/core/token_tensor.h"
#include "framework/io/path_lock.h"
#include "framework/draft/builtin/eagle_drafter.h"
#include "framework/draft/builtin/eagle_packed.h"
#include "framework/draft/builtin/sources_first.h"
#include "framework/draft/builtin/medusa_drafter.h"
#include "framework/draft/builtin/retrieval_drafter.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/engine/ar_decode.h"
#include "framework/io/train_log.h"
#include "framework/train/small_draft.h"
#include "framework/train/train_data.h"
#include "framework/train/training_runtime.h"
#include "models/loaders/safetensors.h"
#include "models/model_loader.h"
#include "tests/support/catch_error.h"
#include "tests/support/plugin_build.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

// One directory per process: ctest runs each test case as its own process, two at a time, and a
// case that clears the directory (or rewrites prompts.jsonl) must not pull it from under another.
// Within one process the cases share it, and the target's cached answers with it.
const fs::path kDir = fs::path(SPECLAB_BINARY_DIR) / ("test_train_draft." + std::to_string(::getpid()));
const struct RemoveDirAtExit {
  ~RemoveDirAtExit() {
    std::error_code ec;
    fs::remove_all(kDir, ec);
  }
} remove_dir_at_exit;

// One compute thread for every case (the TrainingRuntime case sets its own): stories260K's
// matmuls, and the sgemms of a head trained for it, are too small to split. On two threads
// OpenBLAS's workers spent a third of the CPU in sched_yield: the distilled-draft case took 29 s
// and 40 CPU-seconds, on one thread 26 s and 25 (2-core AMD EPYC, 2026-12-07), and under CTest's
// two jobs the yielding took the other job's core.
const bool one_compute_thread = [] {
  set_compute_threads(1);
  return true;
}();

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A config over 24 story openings (4 held apart), 24-token answers, `steps` steps.
fs::path write_config(const std::string& name, int steps, const std::string& prompts_file = "prompts.jsonl",
                      const std::string& architecture = "eagle") {
  fs::create_directories(kDir);
  const char* openings[] = {"Once upon a time", "Lily went to", "The cat saw", "Tom had a big", "One day, a little",
                            "The sun was", "Ben and Mia", "There was a dog", "The bird flew", "Sue liked to",
                            "A boy named", "In the park", "The girl found", "Max wanted a", "It was a sunny",
                            "The tree was", "Mom said", "The ball was", "A frog", "They played",
                            "The car went", "A big bear", "The fish swam", "Anna made"};
  std::ofstream p(kDir / "prompts.jsonl");
  for (const char* o : openings) p << "{\"prompt\": \"" << o << "\"}\n";
  const fs::path cfg = kDir / (name + ".yaml");
  std::ofstream y(cfg);
  y << "target: {path: stories260K}\n"
    << "architecture: " << architecture << "\n"
    << "data:\n  prompts: {files: [" << prompts_file << "], chat: off}\n"
    << "  answer_tokens: 24\n  validation_fraction: 0.2\n  cache_dir: cache\n"
    << "head: {vocab_top_n: 0" << (architecture == "medusa" ? ", medusa_heads: 3" : "")
    << (architecture == "draft_model" ? ", draft_layers: [0, 4]" : "") << "}\n"
    << "output: {path: " << name << ".safetensors, dtype: float32}\n";
  // Retrieval trains nothing: a train.* key there is refused.
  if (architecture != "retrieval")
    y << "train: {steps: " << steps << ", batch_tokens: 256, lr: 0.003, warmup: 10, eval_every: 50, "
      << "checkpoint_every: 0, seed: 7" << (architecture == "eagle" ? ", feature_noise: 0.05" : "") << "}\n";
  return cfg;
}

// Runs `r` to the end on `s`, adding its accepted and drafted tokens to the counters.
GenerationResult run_counting(Session& s, const Request& r, int64_t& accepted, int64_t& drafted) {
  s.begin(r);
  while (!s.done()) {
    const SpecStep st = s.step();
    accepted += st.accepted;
    drafted += st.drafted;
  }
  return s.end();
}

// Another target: `target`'s file with one weight byte changed, copied to kDir/name.
LoadedModel other_target(const LoadedModel& target, const std::string& name) {
  const fs::path other = kDir / name;
  fs::copy_file(target.origin.path, other, fs::copy_options::overwrite_existing);
  {
    std::fstream f(other, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x11');
  }
  ModelSource osrc = target.origin;
  osrc.path = other.string();
  return load_model(osrc);
}

// Three story openings, 48 tokens each, with drafter `d`: greedy speculative output equals AR
// (CHECKed), and a sampled run at T 0.8 goes through the engine's q checks. Adds the greedy
// runs' accepted and drafted tokens to the counters.
void greedy_equals_ar(const LoadedTarget& target, SessionParts& parts, Drafter& d, const DrafterOptions& o,
                      int64_t& accepted, int64_t& drafted) {
  for (const char* text : {"Once upon a time", "The dog ran to", "Lily and Ben"}) {
    const TokenList ids = target.info.tokenizer->encode(text, true);
    GenerationOptions gen;
    gen.max_new_tokens = 48;
    Request greedy{ids, {&d, o}, gen, {}};
    Session s(*target.model, *target.info.tokenizer, parts.kv_target());
    const GenerationResult spec = run_counting(s, greedy, accepted, drafted);
    const GenerationResult ar = generate_ar(*target.model, *target.info.tokenizer, ids, gen, SamplingOptions{},
                                            KvMode::kCached, {}, parts.kv_target());
    CHECK(spec.tokens == ar.tokens);
    Request sampled = greedy;
    sampled.sampling.temperature = 0.8;
    sampled.sampling.seed = 3;
    s.begin(sampled);  // the engine checks every q row (>= 0, sums to 1)
    while (!s.done()) s.step();
    CHECK(s.end().tokens.size() > 0);
  }
}

// A 64 MiB KV budget: room for the target, a head's own KV and a draft model's.
KvOptions kv_64mib() {
  KvOptions k;
  k.budget_bytes = 64 << 20;
  return k;
}

// Drafter `name` (eagle, medusa, draft_model) on the trained draft at `path`, gamma tokens per step.
DrafterOptions trained_drafter(const std::string& name, const std::string& path, int gamma) {
  DrafterOptions o;
  o.name = name;
  o.draft_model = path;
  o.num_speculative_tokens = gamma;
  return o;
}

// Sets element 0 of float32 tensor `name` of the safetensors file at `path` to `value` (NaN by
// default); an empty name picks the first float32 tensor in the header whose name does not start
// with "log." (a checkpoint's log marks may be NaN). Returns the tensor's name.
std::string poison_tensor(const fs::path& path, std::string name = "", float value = NAN) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(&header[0], static_cast<std::streamsize>(n));
  const nlohmann::json j = nlohmann::json::parse(header);
  if (name.empty())
    for (const auto& kv : j.items())
      if (kv.key() != "__metadata__" && kv.key().rfind("log.", 0) != 0 && kv.value().at("dtype") == "F32") {
        name = kv.key();
        break;
      }
  REQUIRE(j.at(name).at("dtype") == "F32");
  f.seekp(static_cast<std::streamoff>(8 + n + j.at(name).at("data_offsets")[0].get<uint64_t>()));
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
  return name;
}

double mean(const std::vector<double>& v, size_t a, size_t b) {
  return std::accumulate(v.begin() + a, v.begin() + b, 0.0) / static_cast<double>(b - a);
}

}  // namespace

TEST_CASE("TrainingRuntime: OpenBLAS at the run's threads while training and both pools as before after",
          "[train]") {
  // A loaded model keeps both pools at one thread for its kernels (models/llama/llama_model.cpp);
  // training ran on one core because of it until 2026-12-06.
  at::set_num_threads(1);
  set_blas_threads(1);
  const bool openblas = blas_threads() > 0;  // Debian's libtorch runs its float32 matmuls on it
  if (!openblas) WARN("OpenBLAS is not loaded (another BLAS): only libtorch's own pool is checked");
  {
    const TrainingRuntime runtime(2);
    CHECK(at::get_num_threads() == 1);  // libgomp's spinning threads would take OpenBLAS's cores
    if (openblas) CHECK(blas_threads() == 2);
  }
  CHECK(at::get_num_threads() == 1);
  if (openblas) CHECK(blas_threads() == 1);
  at::set_num_threads(2);  // restored to what it was, not to one
  { const TrainingRuntime runtime(2); }
  CHECK(at::get_num_threads() == 2);
  // train-draft leaves the target's settings behind it (one thread each), whatever it trained with.
  at::set_num_threads(1);
  set_compute_threads(2);  // trains on two threads (the file's other cases on one)
  fs::remove_all(kDir);
  const TrainDraftConfig c = load_train_config(write_config("rt", 20).string());
  train_draft(c, false, {}, 10);
  CHECK(at::get_num_threads() == 1);
  if (openblas) CHECK(blas_threads() == 1);
  // The trained bits depend on the threads: a --resume with others is refused, naming --threads
  // (it went on silently, to weights neither thread count's uninterrupted run gives).
  const int threads = compute_threads();
  set_compute_threads(threads + 1);
  const Error other = test::catch_error([&] { train_draft(c, true); });
  set_compute_threads(threads);
  CHECK(other.field() == "--threads");
  CHECK_THAT(other.message(), Catch::Contains("expected " + std::to_string(threads) + " threads, as the checkpoint was "
                                              "trained with"));
  train_draft(c, true);  // control: the same threads resume
  CHECK(SafetensorsFile::open(c.output.path).metadata().at("train_threads") == std::to_string(threads));
  set_compute_threads(1);
}

TEST_CASE("validation counts the pairs labelled by answer rows, where a drafter drafts", "[train]") {
  // Two sequences: rows [0, 5) with a 2-token prompt, rows [5, 9) with a 3-token prompt.
  DraftTrainData d;
  d.offsets = {0, 5, 9};
  d.features = at::zeros({9, 4});
  d.tokens = at::arange(9, at::kLong);
  d.target_top1 = at::arange(9, at::kLong);
  d.prompt_lengths = {2, 3};
  REQUIRE_NOTHROW(check_train_data(d, 4, "data"));
  const PairRows p = pairs_of(d, {0, 1});
  // Pairs i = 0..3 and 5..7; answers start at rows 2 and 8.
  CHECK(p.answer_row.equal(at::tensor(std::vector<int64_t>{2, 2, 2, 2, 8, 8, 8}, at::kLong)));
  const auto counted = [](const at::Tensor& m) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < m.numel(); ++i) v.push_back(m[i].item<bool>() ? 1 : 0);
    return v;
  };
  // A draft model's pair i is labelled by row i; EAGLE's by row i + 1.
  CHECK(counted(answer_labels(p, p.in_rows)) == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0});
  CHECK(counted(answer_labels(p, p.in_rows + 1)) == std::vector<int64_t>{0, 1, 1, 1, 0, 0, 1});
  // Without prompt lengths (data cached before them) every pair counts.
  DraftTrainData old = d;
  old.prompt_lengths.clear();
  CHECK(counted(answer_labels(pairs_of(old, {0, 1}), p.in_rows)) == std::vector<int64_t>(7, 1));
  // One length per sequence, none past its sequence.
  DraftTrainData bad = d;
  bad.prompt_lengths = {2};
  CHECK_THROWS_AS(check_train_data(bad, 4, "data"), Error);
  bad.prompt_lengths = {2, 5};
  CHECK_THROWS_AS(check_train_data(bad, 4, "data"), Error);
}

TEST_CASE("train-draft: the loss falls, a seed gives the same bytes, resume equals uninterrupted", "[train]") {
  fs::remove_all(kDir);
  const TrainDraftConfig a = load_train_config(write_config("a", 200).string());
  const TrainDraftResult ra = train_draft(a, false);
  const TrainLog log = read_train_log(a.output.log);
  REQUIRE(log.loss.size() == 200);
  CHECK(mean(log.loss, 180, 200) < 0.7 * mean(log.loss, 0, 20));
  CHECK(ra.validation_agreement > 0.0);
  CHECK(log.agreement.size() == 4);
  // The log's wall time is the run's training time (it stopped at the last checkpoint's save).
  CHECK(log.wall_seconds == ra.train_seconds);
  const std::string first = read_bytes(a.output.path);

  // `speclab report` on the training log: the two curves and report.md with the last agreement.
  const fs::path rep = kDir / "a_report";
  REQUIRE(std::system((std::string(SPECLAB_CLI) + " report '" + a.output.log + "' --out '" + rep.string() + "'").c_str()) == 0);
  CHECK(fs::file_size(rep / "training_loss.png") > 1000);
  CHECK(fs::file_size(rep / "validation_agreement.png") > 1000);
  std::ostringstream agreement;
  agreement << std::fixed << std::setprecision(3) << log.agreement.back();
  CHECK_THAT(read_bytes(rep / "report.md"), Catch::Contains("| optimizer steps | 200 |") &&
                                                Catch::Contains("last evaluation | " + agreement.str()));

  train_draft(a, false);  // the same config and seed again: the same bytes
  CHECK(read_bytes(a.output.path) == first);
  // --overwrite with a request train-draft refuses (a --stop-after past train.steps, a log at a
  // directory's path): refused before the old draft is removed (it was removed, then refused).
  for (const char* bad : {"--stop-after 100000", "--set output.log=logs/"}) {
    INFO(bad);
    const int rc = std::system((std::string(SPECLAB_CLI) + " train-draft '" + (kDir / "a.yaml").string() +
                                "' --overwrite --quiet " + bad + " 2>/dev/null")
                                   .c_str());
    CHECK(WEXITSTATUS(rc) == 2);
    CHECK(read_bytes(a.output.path) == first);
  }
  // Another train-draft writing the same draft (the lock held here): refused before anything is
  // moved. Two at once both trained and the second reported the first's draft (until 2026-12-06).
  {
    const PathLock held = PathLock::acquire(a.output.path, "train-draft", "output.path");
    const fs::path err = kDir / "locked.err";
    const int rc = std::system((std::string(SPECLAB_CLI) + " train-draft '" + (kDir / "a.yaml").string() +
                                "' --overwrite --quiet 2>'" + err.string() + "'")
                                   .c_str());
    CHECK(WEXITSTATUS(rc) == 2);
    CHECK_THAT(read_bytes(err), Catch::Contains("output.path: expected no other process writing it, found another "
                                                "speclab train-draft holding " + a.output.path + ".lock"));
    CHECK(read_bytes(a.output.path) == first);
  }
  // The answers cache likewise, while a run writes it (two appended the same answers).
  {
    std::vector<PathLock> held;  // every answers file of the cache (other configs share it)
    for (const auto& e : fs::directory_iterator(fs::path(a.data.cache_dir)))
      if (e.path().filename().string().rfind("answers-", 0) == 0 && e.path().extension() == ".jsonl")
        held.push_back(PathLock::acquire(e.path().string(), "train-draft", "data.cache_dir"));
    REQUIRE_FALSE(held.empty());
    TrainDraftConfig r = a;
    r.architecture = "retrieval";  // reads the answers whatever features are cached
    r.output.path = (kDir / "locked_store.safetensors").string();
    const Error e = test::catch_error([&] { train_draft(r, false); });
    CHECK(e.field() == "data.cache_dir");
    CHECK_THAT(e.message(), Catch::Contains("found another speclab train-draft holding ") &&
                                Catch::Contains("/answers-"));
    CHECK_FALSE(fs::exists(r.output.path));
  }

  fs::remove(a.output.path);
  train_draft(a, false, {}, 90);  // interrupted after 90 steps
  CHECK_FALSE(fs::exists(a.output.path));
  CHECK(read_train_log(a.output.log).loss.size() == 90);
  // What the interruption left (training is deterministic: another run stopped there leaves the
  // same checkpoint and log), put back below wherever a case starts from an interrupted run.
  const std::string checkpoint_90 = read_bytes(a.output.checkpoint), log_90 = read_bytes(a.output.log);
  const auto interrupted_at_90 = [&] {
    for (const auto& [path, bytes] : {std::make_pair(a.output.checkpoint, &checkpoint_90), std::make_pair(a.output.log, &log_90)}) {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << *bytes;
      REQUIRE(f.good());
    }
  };
  // Its report says the run stopped before train.steps (it read as a finished run of 90 steps).
  const fs::path stopped = kDir / "a_stopped_report";
  REQUIRE(std::system((std::string(SPECLAB_CLI) + " report '" + a.output.log + "' --out '" + stopped.string() + "'").c_str()) == 0);
  CHECK_THAT(read_bytes(stopped / "report.md"), Catch::Contains("| optimizer steps | 90 of 200 (stopped before the end"));
  // Its checkpoint given as a draft is named as one (it failed on "the draft lacks tensor vocab_ids").
  const std::string ckpt_err = (kDir / "ckpt_as_draft.err").string();
  const int ckpt_rc = std::system((std::string(SPECLAB_CLI) + " generate -m stories260K --chat off -p Once -n 2 --drafter "
                                   "eagle --draft-model '" + a.output.checkpoint + "' 2> '" + ckpt_err + "' > /dev/null").c_str());
  CHECK(WEXITSTATUS(ckpt_rc) == 2);
  CHECK_THAT(read_bytes(ckpt_err), Catch::Contains("--draft-model: expected a draft, found a training checkpoint of one"));
  // --stop-after counts from the start: a step the checkpoint has passed is refused (it was
  // ignored, and the run went on to the end).
  const Error past = test::catch_error([&] { train_draft(a, true, {}, 50); });
  CHECK(past.field() == "--stop-after");
  // An --overwrite run killed before writing its own outputs leaves the checkpoint aside: --resume
  // points at it (it said only "no checkpoint to resume from").
  fs::rename(a.output.checkpoint, a.output.checkpoint + ".overwritten");
  const Error aside = test::catch_error([&] { train_draft(a, true); });
  CHECK_THAT(aside.message(), Catch::Contains("no checkpoint to resume from (an --overwrite run stopped before "
                                              "writing its own left the earlier one at " +
                                              a.output.checkpoint + ".overwritten: move it back"));
  fs::rename(a.output.checkpoint + ".overwritten", a.output.checkpoint);
  // The prompt file changed since the checkpoint: refused before the data stage (it trained on).
  const std::string prompts = read_bytes(kDir / "prompts.jsonl");
  {
    std::ofstream p(kDir / "prompts.jsonl", std::ios::app);
    p << "{\"prompt\": \"A new prompt\"}\n";
  }
  const Error data = test::catch_error([&] { train_draft(a, true); });
  CHECK(data.kind() == ErrorKind::kBadInput);
  CHECK_THAT(data.message(), Catch::Contains("trained on other data"));
  {
    std::ofstream p(kDir / "prompts.jsonl", std::ios::trunc);
    p << prompts;
  }
  // A setting that changes the weights: refused, naming it (the message named none).
  const TrainDraftConfig lr = load_train_config(write_config("a", 200).string(), {"train.lr=0.002"});
  const Error other = test::catch_error([&] { train_draft(lr, true); });
  CHECK(other.kind() == ErrorKind::kBadInput);
  CHECK_THAT(other.message(), Catch::Contains("1 different (checkpoint vs now: train.lr: "));
  // One that changes none (how often checkpoints are taken) does not block the resume, which
  // trains as the uninterrupted run did (the draft's metadata then records the new setting).
  const TrainDraftConfig cadence = load_train_config(write_config("a", 200).string(), {"train.checkpoint_every=7"});
  train_draft(cadence, true);
  CHECK(read_train_log(a.output.log).loss == log.loss);
  // Resumed from a data cache moved elsewhere (its contents are guarded by the data key; a moved
  // cache was refused as "data.cache_dir: cache vs ..." until 2026-12-06): trains as the
  // uninterrupted run did.
  interrupted_at_90();
  fs::remove_all(kDir / "cache_moved");
  fs::copy(kDir / "cache", kDir / "cache_moved", fs::copy_options::recursive);
  const TrainDraftConfig moved =
      load_train_config(write_config("a", 200).string(), {"data.cache_dir=" + (kDir / "cache_moved").string()});
  train_draft(moved, true);
  fs::remove_all(kDir / "cache_moved");
  CHECK(read_train_log(a.output.log).loss == log.loss);
  interrupted_at_90();  // interrupted again, resumed with the same settings: the same bytes
  train_draft(a, true);
  CHECK(read_bytes(a.output.path) == first);
  CHECK(read_train_log(a.output.log).loss == log.loss);

  // A NaN in a checkpoint's weights or optimizer state: refused by name. It was trained on, and the
  // NaN loss that followed was blamed on train.lr.
  const std::string intact = read_bytes(a.output.checkpoint);
  const std::string poisoned = poison_tensor(a.output.checkpoint);
  const Error nan = test::catch_error([&] { train_draft(a, true); });
  CHECK(nan.kind() == ErrorKind::kBadInput);
  CHECK(nan.file() == a.output.checkpoint);
  CHECK_THAT(nan.message(), Catch::Contains("tensor " + poisoned + " holds a NaN (element 0 of ") &&
                                Catch::Contains("train anew with --overwrite instead of --resume"));
  {
    std::ofstream f(a.output.checkpoint, std::ios::trunc | std::ios::binary);
    f << intact;
  }
  // A damaged step or second moment (2026-12-06): a step past the log's resumed over steps it
  // never trained (a gap in /train/step), one past train.steps wrote the draft untrained, and a
  // negative second moment turned the next update into NaN, blamed on train.lr. Each is refused
  // naming the checkpoint.
  for (const auto& [tensor, value, says] :
       {std::make_tuple(std::string("step"), 95.0f, std::string("expected its log to hold steps 1..95 (its step), found 90 rows")),
        std::make_tuple(std::string("step"), 1000.0f, std::string("expected a checkpoint step <= train.steps (200), found 1000")),
        std::make_tuple(std::string("step"), -3.0f, std::string("expected a whole number of steps >= 0")),
        std::make_tuple(std::string("step"), 2.5f, std::string("expected a whole number of steps >= 0")),
        std::make_tuple(std::string("log.wall_seconds"), NAN, std::string("expected 'log.wall_seconds' >= 0")),
        // The log's columns (a NaN or an infinity in them was resumed and copied into the new log).
        std::make_tuple(std::string("log.loss"), NAN, std::string("expected 'log.loss' row 0 in [0, ")),
        std::make_tuple(std::string("log.lr"), INFINITY, std::string("expected 'log.lr' row 0 in [0, 1], found inf")),
        std::make_tuple(std::string("log.agreement"), 7.0f,
                        std::string("expected 'log.agreement' row 0 in [0, 1] or NaN, found 7")),
        std::make_tuple(std::string(""), -1.0f, std::string("holds a negative or non-finite value"))}) {
    INFO(tensor << " = " << value);
    interrupted_at_90();
    std::string name = tensor;
    if (name.empty()) {  // the first second-moment tensor
      std::ifstream f(a.output.checkpoint, std::ios::binary);
      uint64_t n = 0;
      f.read(reinterpret_cast<char*>(&n), 8);
      std::string header(n, '\0');
      f.read(&header[0], static_cast<std::streamsize>(n));
      const nlohmann::json j = nlohmann::json::parse(header);
      for (const auto& kv : j.items())
        if (kv.key().rfind("adam_v.", 0) == 0) {
          name = kv.key();
          break;
        }
      REQUIRE_FALSE(name.empty());
    }
    poison_tensor(a.output.checkpoint, name, value);
    const Error damaged = test::catch_error([&] { train_draft(a, true); });
    CHECK(damaged.kind() == ErrorKind::kBadInput);
    CHECK(damaged.file() == a.output.checkpoint);
    CHECK_THAT(damaged.message(), Catch::Contains(says) && Catch::Contains("train anew with --overwrite instead of --resume"));
  }
  // A changed data setting: refused naming it (it was "trained on other data", with two hashes).
  interrupted_at_90();
  const TrainDraftConfig answers = load_train_config(write_config("a", 200).string(), {"data.answer_tokens=20"});
  const Error answer_tokens = test::catch_error([&] { train_draft(answers, true); });
  CHECK(answer_tokens.kind() == ErrorKind::kBadInput);
  CHECK_THAT(answer_tokens.message(), Catch::Contains("1 different (checkpoint vs now: data.answer_tokens: 24 vs 20)"));
  train_draft(a, true);  // control: the intact checkpoint resumes
  CHECK(read_bytes(a.output.path) == first);
  // A NaN in the features cache: refused by name (it too was blamed on train.lr).
  std::string features;
  for (const auto& e : fs::directory_iterator(kDir / "cache"))
    if (e.path().filename().string().rfind("features-", 0) == 0) features = e.path().string();
  REQUIRE_FALSE(features.empty());
  const std::string feature_name = poison_tensor(features);
  const Error nan_features = test::catch_error([&] { train_draft(a, false); });
  CHECK(nan_features.file() == features);
  CHECK_THAT(nan_features.message(),
             Catch::Contains("tensor " + feature_name + " holds a NaN") && Catch::Contains("delete it"));
  fs::remove(features);

  // An error after a progress line starts a line of its own (it was glued to the end of the
  // "\ranswers 24/24" or "\rstep ..." line): a fresh data cache prints the answers line, then
  // the first step's loss is infinite.
  {
    const fs::path err = kDir / "diverged.err";
    const int rc = std::system((std::string(SPECLAB_CLI) + " train-draft '" + (kDir / "a.yaml").string() +
                                "' --set output.path=diverged.safetensors --set train.token_loss_weight=1e38 --set data.cache_dir=cache_fresh 2>'" +
                                err.string() + "'")
                                   .c_str());
    CHECK(WEXITSTATUS(rc) == 2);
    const std::string text = read_bytes(err);
    CHECK_THAT(text, Catch::Contains("\ranswers ") && Catch::Contains("\nerror: ") &&
                         Catch::Contains("the loss is infinite at step 1"));
    fs::remove_all(kDir / "cache_fresh");
  }

  // A corrupt checkpoint: one clear error naming it.
  fs::resize_file(a.output.checkpoint, fs::file_size(a.output.checkpoint) / 2);
  const Error e = test::catch_error([&] { train_draft(a, true); });
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK(e.file() == a.output.checkpoint);
}

// The data stage's edges (2026-11-29): an answers cache cut mid-line is cut back before new
// answers are appended (they were glued to it, and every later run stopped reading there); a prompt
// that comes again is held out with its first copy (the split was by index, so one text could be
// trained on and validated on); max_prompt_tokens leaving no prompt is a config error (it was a
// libtorch error, exit 1).
TEST_CASE("train-draft data: a cut answers line is repaired, repeated prompts stay in one split", "[train]") {
  fs::create_directories(kDir);
  {
    std::ofstream p(kDir / "dup_prompts.jsonl");
    for (const char* o : {"Once upon a time", "Lily went to", "The cat saw", "Tom had a big", "Once upon a time",
                          "The sun was", "Ben and Mia", "There was a dog", "The bird flew", "Sue liked to"})
      p << "{\"prompt\": \"" << o << "\"}\n";
  }
  TrainDraftConfig c = load_train_config(write_config("dup", 1, "dup_prompts.jsonl").string());
  c.data.cache_dir = (kDir / "dup_cache").string();
  train_draft(c, false);
  std::string answers;
  for (const auto& e : fs::directory_iterator(c.data.cache_dir))
    if (e.path().filename().string().rfind("answers-", 0) == 0) answers = e.path().string();
  REQUIRE_FALSE(answers.empty());
  std::string features;
  for (const auto& e : fs::directory_iterator(c.data.cache_dir))
    if (e.path().filename().string().rfind("features-", 0) == 0) features = e.path().string();
  {
    // K = 5: prompt 4 would be held out by its index; it repeats prompt 0, which is trained on.
    const SafetensorsFile f = SafetensorsFile::open(features);
    const HostTensor split = f.read("validation");
    REQUIRE(split.data.size() == 10);
    CHECK(split.data[0] == 0.f);
    CHECK(split.data[4] == 0.f);
    CHECK(split.data[9] == 1.f);
  }
  // Cut the answers file inside its fourth line, as a kill would, and run the data stage again.
  const std::string whole = read_bytes(answers);
  size_t at = 0;
  for (int line = 0; line < 3; ++line) at = whole.find('\n', at) + 1;
  {
    std::ofstream f(answers, std::ios::trunc | std::ios::binary);
    f << whole.substr(0, at + 10);
  }
  fs::remove(features);
  train_draft(c, false);
  const std::string again = read_bytes(answers);
  std::istringstream lines(again);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK_NOTHROW(nlohmann::json::parse(line));
    ++n;
  }
  CHECK(n == 10);
  CHECK(again.back() == '\n');

  // A whole line whose answer holds a token the target does not have (damage, not an
  // interruption): refused naming the file and line. It failed inside the model, exit 1. Other
  // damage a whole line can carry: each was cut back or trained on without a word (a bad line
  // mid-file discarded every answer after it). Only a last line without its newline is an
  // interruption.
  std::vector<std::string> lines_of;
  {
    std::istringstream in(again);
    for (std::string l; std::getline(in, l);) lines_of.push_back(l);
  }
  REQUIRE(lines_of.size() == 10);
  const auto with_line = [&](size_t k, const std::string& text) {
    std::string out;
    for (size_t j = 0; j < lines_of.size(); ++j) out += (j == k ? text : lines_of[j]) + "\n";
    return out;
  };
  nlohmann::json second = nlohmann::json::parse(lines_of[1]);
  nlohmann::json bad_token = nlohmann::json::parse(lines_of[2]);
  bad_token["answer"].insert(bad_token["answer"].begin(), 99999999);
  nlohmann::json long_answer = second;
  long_answer["answer"] = std::vector<int64_t>(c.data.answer_tokens + 1, 5);
  nlohmann::json out_of_range = second;
  out_of_range["i"] = 999;
  nlohmann::json duplicate = second;
  duplicate["i"] = nlohmann::json::parse(lines_of[0]).at("i");
  const std::vector<std::pair<std::string, std::string>> damages = {
      {with_line(2, bad_token.dump()), "line 3: answer token 99999999 is outside the target's vocabulary of 512"},
      {with_line(2, "{\"answer\": [1, 2,"), "line 3: expected {\"i\": <prompt>, \"answer\": [<tokens>]}"},
      {with_line(1, out_of_range.dump()), "line 2: expected a prompt index in [0, 10), found 999"},
      {with_line(1, duplicate.dump()), "line 2: a second answer for prompt"},
      {with_line(1, long_answer.dump()), "line 2: expected at most data.answer_tokens"},
  };
  for (const auto& [text, says] : damages) {
    INFO(says);
    {
      std::ofstream f(answers, std::ios::trunc | std::ios::binary);
      f << text;
    }
    fs::remove(features);
    const Error e = test::catch_error([&] { train_draft(c, false); });
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.file() == answers);
    CHECK_THAT(e.message(), Catch::Contains(says) && Catch::Contains("the answer cache is damaged"));
    CHECK(read_bytes(answers) == text);  // refused, not cut back
  }
  {
    std::ofstream f(answers, std::ios::trunc | std::ios::binary);
    f << again;
  }

  c.data.max_prompt_tokens = 1;
  const Error none = test::catch_error([&] { train_draft(c, false); });
  CHECK(none.kind() == ErrorKind::kConfig);
  CHECK(none.field() == "data.max_prompt_tokens");
  // Refused into an empty cache, it writes no answers file (it left an empty one).
  c.data.cache_dir = (kDir / "dup_cache_refused").string();
  fs::remove_all(c.data.cache_dir);
  fs::create_directories(c.data.cache_dir);
  const Error none_fresh = test::catch_error([&] { train_draft(c, false); });
  CHECK(none_fresh.field() == "data.max_prompt_tokens");
  CHECK(fs::is_empty(c.data.cache_dir));
}

// Errors name the config and the key that chose what is wrong (they named the target's model
// file for head.draft_layers, and no key, or drafter.draft_model, for train.init).
TEST_CASE("train-draft errors name the config key: head.draft_layers, train.init", "[train]") {
  TrainDraftConfig d = load_train_config(write_config("names_dm", 1, "prompts.jsonl", "draft_model").string());
  d.head.draft_layers = {0, 9};
  const Error layers = test::catch_error([&] { train_draft(d, false); });
  CHECK(layers.file() == d.source_path);
  CHECK(layers.field() == "head.draft_layers");
  TrainDraftConfig e = load_train_config(write_config("names_init", 1).string());
  e.train.init = (kDir / "no_such_init.safetensors").string();
  const Error init = test::catch_error([&] { train_draft(e, false); });
  CHECK(init.file() == e.train.init);
  CHECK(init.field() == "train.init");
}

// An HF checkpoint directory is hashed by its files (a directory read as a file gave no bytes,
// so every HF target had one hash, and a draft for one loaded for any other).
TEST_CASE("target_weights_hash: an HF directory by its files' names and bytes", "[train]") {
  auto dir = [](const std::string& name, const std::string& weights) {
    const fs::path d = kDir / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << "{}";
    std::ofstream(d / "model.safetensors") << weights;
    std::ofstream(d / "README.md") << name;  // not a model file: not hashed
    LoadedModel m;
    m.origin.path = d.string();
    m.source = d.string();
    return m;
  };
  const std::string a = target_weights_hash(dir("hf_a", "weights a"));
  CHECK(a != target_weights_hash(dir("hf_b", "weights b")));
  CHECK(a == target_weights_hash(dir("hf_a_copy", "weights a")));
  const fs::path empty = kDir / "hf_empty";
  fs::create_directories(empty);
  LoadedModel e;
  e.origin.path = empty.string();
  CHECK(test::catch_error([&] { target_weights_hash(e); }).kind() == ErrorKind::kIo);
}

// The data stage answers data.answer_batch prompts together (engine/batch_decode.h): the same
// answers as generate_ar one prompt at a time, at any width. Widths outside 1..32 are refused.
TEST_CASE("train-draft's answers are generate_ar's at any data.answer_batch", "[train]") {
  fs::remove_all(kDir);
  const std::string yaml = read_bytes(write_config("answers", 1));
  std::map<int64_t, std::string> answers;  // width -> the answer cache's lines, sorted
  for (int64_t width : {1, 5, 32}) {
    const std::string dir = "cache_w" + std::to_string(width);
    std::string y = yaml;
    y.replace(y.find("cache_dir: cache"), 16, "cache_dir: " + dir + "\n  answer_batch: " + std::to_string(width));
    const fs::path cfg = kDir / ("answers_w" + std::to_string(width) + ".yaml");
    std::ofstream(cfg) << y;
    const TrainDraftConfig c = load_train_config(cfg.string());
    REQUIRE(c.data.answer_batch == width);
    train_draft(c, false);
    std::vector<std::string> lines;
    for (const auto& e : fs::directory_iterator(kDir / dir))
      if (e.path().filename().string().rfind("answers-", 0) == 0) {
        std::ifstream in(e.path());
        for (std::string line; std::getline(in, line);) lines.push_back(line);
      }
    REQUIRE(lines.size() == 24);
    std::sort(lines.begin(), lines.end());
    std::string all;
    for (const std::string& l : lines) all += l + "\n";
    answers[width] = all;
  }
  CHECK(answers[5] == answers[1]);
  CHECK(answers[32] == answers[1]);
  // Width 1 is generate_ar's answer itself, prompt by prompt (the first prompt checked here).
  ModelSource src;
  src.path = "stories260K";
  auto target = load_target(src);
  GenerationOptions gen;
  gen.max_new_tokens = 24;
  const TokenList ids = encode_prompt(target->info, "Once upon a time", false, "");
  const TokenList ar = generate_ar(*target->model, *target->info.tokenizer, ids, gen, SamplingOptions{}).tokens;
  CHECK_THAT(answers[1], Catch::Contains(nlohmann::json{{"i", 0}, {"answer", ar}}.dump()));

  for (const char* bad : {"0", "33"}) {
    std::string y = yaml;
    y.replace(y.find("cache_dir: cache"), 16, std::string("cache_dir: cache\n  answer_batch: ") + bad);
    const fs::path cfg = kDir / "answers_bad.yaml";
    std::ofstream(cfg) << y;
    const Error e = test::catch_error([&] { load_train_config(cfg.string()); });
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK_THAT(e.what(), Catch::Contains("answer_batch"));
  }
}

TEST_CASE("train-draft refuses training prompts from an evaluation set", "[train]") {
  fs::create_directories(kDir);
  std::ofstream(kDir / "mt_bench_questions.jsonl") << "{\"prompt\": \"x\"}\n";
  const Error e = test::catch_error([] { load_train_config(write_config("eval", 10, "mt_bench_questions.jsonl").string()); });
  CHECK(e.kind() == ErrorKind::kConfig);
  CHECK_THAT(e.what(), Catch::Contains("evaluation set") && Catch::Contains("MT-bench"));
  // By name in any case: HumanEval's official file is HumanEval.jsonl.gz.
  std::ofstream(kDir / "HumanEval.jsonl") << "{\"prompt\": \"x\"}\n";
  const Error h = test::catch_error([] { load_train_config(write_config("eval2", 10, "HumanEval.jsonl").string()); });
  CHECK_THAT(h.what(), Catch::Contains("evaluation set") && Catch::Contains("HumanEval"));
}

TEST_CASE("train-draft refuses training prompts that contain an evaluation set's text, whatever the file's name",
          "[train]") {
  // The real evaluation files (../shared/datasets): a GSM8K test question inside a template, an
  // MT-bench first turn with its whitespace changed, a HumanEval prompt as it is.
  const fs::path datasets = fs::path(shared_data_dir()) / "datasets";
  auto first_line_field = [&](const std::string& file, const std::string& field) {
    std::ifstream in(datasets / file);
    std::string line;
    REQUIRE(std::getline(in, line));
    return nlohmann::json::parse(line).at(field).get<std::string>();
  };
  const std::string gsm8k = first_line_field("gsm8k_test.jsonl", "question");
  std::string mt_bench;
  {
    std::ifstream in(datasets / "mt_bench_questions.jsonl");
    std::string line;
    REQUIRE(std::getline(in, line));
    mt_bench = nlohmann::json::parse(line).at("turns").at(0).get<std::string>();
  }
  std::string spaced;  // every space doubled, a newline at the end
  for (char ch : mt_bench) spaced += ch == ' ' ? std::string("  ") : std::string(1, ch);
  spaced += "\n";
  struct Case {
    std::string text, set;
  };
  const std::vector<Case> cases = {{"Solve this: " + gsm8k + " Think step by step.", "GSM8K test"},
                                   {spaced, "MT-bench"}};
  for (const Case& k : cases) {
    INFO(k.set);
    fs::create_directories(kDir);
    {
      std::ofstream p(kDir / "innocent_name.jsonl");
      p << "{\"prompt\": \"Once upon a time\"}\n" << nlohmann::json{{"prompt", k.text}}.dump() << "\n";
    }
    const TrainDraftConfig c = load_train_config(write_config("overlap", 10, "innocent_name.jsonl").string());
    const Error e = test::catch_error([&] { train_draft(c, false); });
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK(e.field() == "data.prompts");
    CHECK_THAT(e.message(), Catch::Contains("expected training prompts outside the evaluation sets") &&
                                Catch::Contains("innocent_name.jsonl:2") && Catch::Contains(k.set));
  }
  // The default training data contains none of them (make draft-model must run): every alpaca
  // and GSM8K-train prompt passes, and the three sets were read.
  const EvaluationSets sets = EvaluationSets::load(datasets.string());
  CHECK(sets.missing().empty());
  CHECK_THAT(sets.describe(), Catch::Contains("MT-bench (160 texts)") && Catch::Contains("HumanEval (164 texts)") &&
                                  Catch::Contains("GSM8K test (1319 texts)"));
  for (const auto& [file, field] : std::vector<std::pair<std::string, std::string>>{
           {"alpaca_5000.jsonl", "prompt"}, {"gsm8k_train.jsonl", "question"}}) {
    std::ifstream in(datasets / file);
    std::string line;
    int64_t n = 0, hits = 0;
    while (std::getline(in, line)) {
      ++n;
      hits += sets.find(nlohmann::json::parse(line).at(field).get<std::string>()).has_value();
    }
    INFO(file);
    CHECK(n > 1000);
    CHECK(hits == 0);
  }
  CHECK(sets.find(gsm8k).has_value());
  CHECK_FALSE(sets.find(gsm8k.substr(0, gsm8k.size() / 2)).has_value());  // a part of one is not the question
}

TEST_CASE("train-draft refuses an output it could not write before loading anything, naming the key", "[train]") {
  fs::create_directories(kDir);
  TrainDraftConfig c = load_train_config(write_config("outputs", 10).string());
  const std::string file = (kDir / "a_plain_file").string();
  std::ofstream(file) << "x";
  struct Bad {
    const char* field;
    std::function<void(TrainDraftConfig&)> set;
  };
  const std::vector<Bad> bad = {
      {"output.path", [&](TrainDraftConfig& t) { t.output.path = kDir.string(); }},  // a directory
      {"output.path", [&](TrainDraftConfig& t) { t.output.path = file + "/draft.safetensors"; }},
      {"output.checkpoint", [&](TrainDraftConfig& t) { t.output.checkpoint = file + "/ckpt.safetensors"; }},
      {"output.log", [&](TrainDraftConfig& t) { t.output.log = file + "/log.h5"; }},
      {"data.cache_dir", [&](TrainDraftConfig& t) { t.data.cache_dir = file + "/cache"; }},
  };
  for (const Bad& b : bad) {
    TrainDraftConfig t = c;
    b.set(t);
    const Error e = test::catch_error([&] { train_draft(t, false); });
    INFO(b.field << ": " << e.what());
    CHECK(e.field() == b.field);
  }
  CHECK_NOTHROW(c.validate());  // the base config itself is fine
}

namespace {

// `inner` without its CPU kernels for drafters (Model::pack_matrix null, Model::attend_rows
// false), as a CUDA target is: the eagle drafter then runs its head on libtorch ops.
class NoKernels : public Model {
 public:
  explicit NoKernels(const Model& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  at::Tensor forward(const at::Tensor& t, const at::Tensor& p, const KvView& kv,
                     const ForwardOptions& o) const override {
    return inner_.forward(t, p, kv, o);
  }
  uint64_t weight_bytes() const override { return inner_.weight_bytes(); }
  int64_t row_exact_batch() const override { return inner_.row_exact_batch(); }

 private:
  const Model& inner_;
};

}  // namespace

TEST_CASE("the eagle drafter: greedy output equals AR, a draft for another target is refused", "[train][eagle]") {
  const TrainDraftConfig a = load_train_config(write_config("d", 120).string());
  train_draft(a, false);
  ModelSource src;
  src.path = "stories260K";
  auto target = load_target(src);

  const LoadedModel other_model = other_target(target->info, "stories260K_other.bin");
  const Error e = test::catch_error([&] { load_eagle_head(a.output.path, other_model); });
  CHECK(e.kind() == ErrorKind::kConfig);
  CHECK_THAT(e.what(), Catch::Contains("trained for stories260K.bin") && Catch::Contains("not for the target"));

  SessionParts parts(*target, kv_64mib());
  DrafterOptions o = trained_drafter("eagle", a.output.path, 4);
  Drafter& d = parts.add_drafter(o);
  DrafterOptions oc = o;  // greedy with a confidence threshold: fewer drafts, the same output
  oc.confidence_threshold = 0.6;
  Drafter& dc = parts.add_drafter(oc);
  int64_t accepted = 0, drafted = 0, drafted_confident = 0;
  for (const char* text : {"Once upon a time", "The dog ran to", "Lily and Ben"}) {
    const TokenList ids = target->info.tokenizer->encode(text, true);
    GenerationOptions gen;
    gen.max_new_tokens = 48;
    Request greedy{ids, {&d, o}, gen, {}};
    Session s(*target->model, *target->info.tokenizer, parts.kv_target());
    const GenerationResult spec = run_counting(s, greedy, accepted, drafted);
    const GenerationResult ar =
        generate_ar(*target->model, *target->info.tokenizer, ids, gen, SamplingOptions{}, KvMode::kCached, {},
                    parts.kv_target());
    CHECK(spec.tokens == ar.tokens);

    Request confident{ids, {&dc, oc}, gen, {}};
    s.begin(confident);
    while (!s.done()) drafted_confident += s.step().drafted;
    CHECK(s.end().tokens == ar.tokens);

    Request sampled = greedy;
    sampled.sampling.temperature = 0.8;
    sampled.sampling.seed = 3;
    s.begin(sampled);  // the engine checks every q row (>= 0, sums to 1)
    while (!s.done()) s.step();
    CHECK(s.end().tokens.size() > 0);
  }
  CHECK(parts.kv().bytes_used() == 0);
  {
    // The head's prefill over the prompt runs in the drafter's begin phase, timed as the draft's
    // prefill: after begin() the head holds the prompt pairs' K/V. It ran in the first propose()
    // and was timed as that step's drafting (an 8,184-token prompt: c = 6 at step 0).
    const TokenList ids = target->info.tokenizer->encode("Once upon a time there was a little dog", true);
    GenerationOptions gen;
    gen.max_new_tokens = 8;
    Session s(*target->model, *target->info.tokenizer, parts.kv_target());
    s.begin(Request{ids, {}, gen, {}});  // AR: the target's prompt alone
    const int64_t target_only = parts.kv().bytes_used();
    s.end();
    s.begin(Request{ids, {&d, o}, gen, {}});
    CHECK(parts.kv().bytes_used() > target_only);
    while (!s.done()) s.step();
    s.end();
    CHECK(parts.kv().bytes_used() == 0);
  }
  INFO("accepted " << accepted << " of " << drafted << "; drafted with the threshold " << drafted_confident);
  CHECK(accepted > 0);
  CHECK(drafted_confident > 0);
  CHECK(drafted_confident < drafted);
  {
    // Prompt lookup first, the head where the context has no match (sources_first.h): the head
    // keeps up with the target's features across the steps it did not draft.
    DrafterOptions ol = o;
    ol.prompt_lookup_first = true;
    ol.prompt_lookup_min = 2;
    ol.fallback_speculative_tokens = 1;
    Drafter& dl = parts.add_drafter(ol);
    auto* hybrid = dynamic_cast<SourcesFirstDrafter*>(&dl);
    REQUIRE(hybrid != nullptr);
    CHECK(hybrid->name() == "prompt_lookup+eagle");
    int64_t hybrid_accepted = 0, hybrid_drafted = 0;
    greedy_equals_ar(*target, parts, dl, ol, hybrid_accepted, hybrid_drafted);
    INFO("lookup steps " << hybrid->steps_from(0) << ", head steps " << hybrid->steps_from(1));
    CHECK(hybrid->steps_from(0) > 0);
    CHECK(hybrid->steps_from(1) > 0);
    CHECK(hybrid_accepted > 0);
    CHECK(parts.kv().bytes_used() == 0);
  }

  SECTION("on libtorch ops (a target without packed kernels, as on CUDA): greedy output equals AR, the head drafts") {
    const NoKernels bare(*target->model);
    EagleDrafter lt(load_eagle_head(a.output.path, target->info), DrafterEnv{&bare, &parts.kv(), parts.kv_target().pool,
                                                                              bare.config().vocab_size});
    int64_t lt_accepted = 0, lt_drafted = 0;
    for (const char* text : {"Once upon a time", "The dog ran to"}) {
      const TokenList ids = target->info.tokenizer->encode(text, true);
      GenerationOptions gen;
      gen.max_new_tokens = 32;
      Session s(bare, *target->info.tokenizer, parts.kv_target());
      const GenerationResult spec = run_counting(s, Request{ids, {&lt, o}, gen, {}}, lt_accepted, lt_drafted);
      CHECK(spec.tokens == generate_ar(*target->model, *target->info.tokenizer, ids, gen, SamplingOptions{},
                                       KvMode::kCached, {}, parts.kv_target())
                               .tokens);
    }
    INFO("libtorch ops: accepted " << lt_accepted << " of " << lt_drafted);
    CHECK(lt_accepted > 0);
  }
}

namespace {

// f^ of the libtorch head (eagle_head.h, what training differentiates) for pairs at positions
// [0, n): the reference the packed drafting forward must reproduce.
at::Tensor reference_forward(const EagleHead& h, const at::Tensor& f /*[n, d]*/, const at::Tensor& next /*[n]*/) {
  const int64_t n = f.size(0);
  return eagle_forward_packed(h, f, next, at::arange(n, at::kLong), at::zeros({n}, at::kLong));
}

// The same pairs through PackedEagleHead on `target`'s kernels: the first n - 1 in one call, the
// last alone (as propose() runs them), K/V in a pool of the head's layers in a fresh manager. aux: the
// rows' aux features [n, A d], or undefined (a = 0).
at::Tensor packed_forward(const EagleHead& h, const Model& target, const at::Tensor& f, const at::Tensor& next,
                          const at::Tensor& aux = {}) {
  std::unique_ptr<PackedEagleHead> p = PackedEagleHead::make(h, target);
  REQUIRE(p != nullptr);
  KvOptions kvo;
  kvo.budget_bytes = 16 << 20;
  KvCacheManager kv(kvo);
  KvGeometry g = target.config().kv_geometry();
  g.n_layers = h.n_layers();
  const PoolId pool = kv.add_pool(g);
  const SeqId seq = kv.create(pool);
  const int64_t n = f.size(0), d = f.size(1);
  kv.reserve(seq, n);
  at::Tensor out = at::empty({n, d}, at::kFloat);
  const at::Tensor fc = f.contiguous(), nc = next.contiguous(), ac = aux.defined() ? aux.contiguous() : at::Tensor();
  const int64_t w = h.aux_width();
  for (const auto& [a, b] : {std::pair<int64_t, int64_t>{0, n - 1}, {n - 1, n}}) {
    p->step(fc.data_ptr<float>() + a * d, ac.defined() ? ac.data_ptr<float>() + a * w : nullptr,
            nc.data_ptr<int64_t>() + a, b - a, a, kv.view_at(seq, a, b - a), out.data_ptr<float>() + a * d);
    REQUIRE(kv.commit(seq, b - a) == KvStatus::kOk);
  }
  return out;
}

// `inner`, with its attention kernel (Model::attend_rows) counted, or taken away so that the
// packed head falls back to its own loop.
class AttentionKernelProbe : public Model {
 public:
  AttentionKernelProbe(const Model& inner, bool kernel) : inner_(inner), kernel_(kernel) {}
  const ModelConfig& config() const override { return inner_.config(); }
  at::Tensor forward(const at::Tensor& t, const at::Tensor& p, const KvView& kv,
                     const ForwardOptions& o) const override {
    return inner_.forward(t, p, kv, o);
  }
  uint64_t weight_bytes() const override { return inner_.weight_bytes(); }
  std::shared_ptr<const PackedMatrix> pack_matrix(const at::Tensor& w) const override { return inner_.pack_matrix(w); }
  bool attend_rows(const AttentionRows& call) const override {
    if (!kernel_) return false;
    ++calls;
    return inner_.attend_rows(call);
  }
  mutable int calls = 0;

 private:
  const Model& inner_;
  const bool kernel_;
};

}  // namespace

TEST_CASE("the packed eagle head computes the libtorch head's forward on the target's kernels", "[train][eagle]") {
  const int layers = GENERATE(1, 2);  // EAGLE's one decoder layer, and a head of two (head.layers)
  INFO("head.layers " << layers);
  const TrainDraftConfig a = load_train_config(write_config("packed" + std::to_string(layers), 60).string(),
                                               {"head.layers=" + std::to_string(layers)});
  train_draft(a, false);
  c10::InferenceMode guard;
  ModelSource src;
  src.path = "stories260K";
  const LoadedModel info = load_model(src);
  const std::shared_ptr<EagleHead> h = load_eagle_head(a.output.path, info);
  REQUIRE(h->n_layers() == layers);
  const int64_t d = h->target.hidden_size, n = 9;
  const at::Tensor f = eagle_features(*h, at::sin(at::arange(n * d, at::kFloat).view({n, d}) * 0.37) * 2.0);
  const at::Tensor next = (at::arange(n, at::kLong) * 7919 + 11) % h->target.vocab_size;
  const at::Tensor ref = reference_forward(*h, f, next);

  SECTION("float32 activations: float32 matrices, the same numbers up to summation order") {
    src.activations = "f32";
    auto target = load_target(src);
    const at::Tensor got = packed_forward(*h, *target->model, f, next);
    CHECK((got - ref).abs().max().item<double>() < 1e-4 * (1.0 + ref.abs().max().item<double>()));
  }
  SECTION("int8 activations: Q8_0 matrices, within their quantization error") {
    src.activations = "int8";
    auto target = load_target(src);
    const at::Tensor got = packed_forward(*h, *target->model, f, next);
    const double rel = ((got - ref).norm() / ref.norm()).item<double>();
    INFO("relative error " << rel);
    CHECK(rel < 0.02);
    CHECK(rel > 0.0);  // the int8 path really ran (Q8_0 rounding is never exact on trained weights)
  }
  SECTION("the target's attention kernel and the head's own loop (a target without one) give the same forward") {
    src.activations = "f32";
    auto target = load_target(src);
    const AttentionKernelProbe with(*target->model, true), without(*target->model, false);
    const at::Tensor got_kernel = packed_forward(*h, with, f, next);
    const at::Tensor got_loop = packed_forward(*h, without, f, next);
    CHECK(with.calls == 2 * layers);  // one per layer and step() call: the kernel really ran
    const double tol = 1e-4 * (1.0 + ref.abs().max().item<double>());
    CHECK((got_kernel - ref).abs().max().item<double>() < tol);
    CHECK((got_loop - ref).abs().max().item<double>() < tol);
  }
  SECTION("negative control: positions spaced by 2 (RoPE distances doubled) fail the float32 bound") {
    src.activations = "f32";
    auto target = load_target(src);
    const at::Tensor shifted = eagle_forward_packed(*h, f, next, at::arange(n, at::kLong) * 2, at::zeros({n}, at::kLong));
    const at::Tensor got = packed_forward(*h, *target->model, f, next);
    CHECK((got - shifted).abs().max().item<double>() > 10 * 1e-4 * (1.0 + shifted.abs().max().item<double>()));
  }
}

namespace {

// The k-th draft token's prediction as the drafter computes it (eagle_drafter.cpp's libtorch
// path): the head runs the true pairs of rows [0, s] (s = r - k + 1) with causal attention, then
// k - 1 steps on its own last prediction, each step's K/V appended to the context it attends to.
// f: [n, d] one sequence's features, next: [n] its next tokens. Returns f^ [d].
at::Tensor drafted_prediction(const EagleHead& h, const at::Tensor& f, const at::Tensor& next, int64_t r, int64_t k) {
  const int64_t s = r - k + 1, L = h.n_layers();
  const at::Tensor pos = at::arange(s + 1, at::kLong);
  const at::Tensor causal = pos.unsqueeze(0).le(pos.unsqueeze(1));
  std::vector<at::Tensor> kc(static_cast<size_t>(L)), vc(static_cast<size_t>(L));  // each layer's K/V so far
  at::Tensor x = eagle_input(h, f.narrow(0, 0, s + 1), next.narrow(0, 0, s + 1));
  for (int64_t l = 0; l < L; ++l) {
    const EagleQkv qkv = eagle_qkv(h, l, x, pos);
    kc[static_cast<size_t>(l)] = qkv.k;
    vc[static_cast<size_t>(l)] = qkv.v;
    x = eagle_attend(h, l, x, qkv, qkv.k, qkv.v, causal);
  }
  at::Tensor g = x.narrow(0, s, 1);
  for (int64_t m = 2; m <= k; ++m) {
    const int64_t row = s + m - 1;
    x = eagle_input(h, g, next.narrow(0, row, 1));
    for (int64_t l = 0; l < L; ++l) {
      at::Tensor& kl = kc[static_cast<size_t>(l)];
      at::Tensor& vl = vc[static_cast<size_t>(l)];
      const EagleQkv q = eagle_qkv(h, l, x, at::full({1}, row, at::kLong));
      kl = at::cat({kl, q.k}, 0);
      vl = at::cat({vl, q.v}, 0);
      x = eagle_attend(h, l, x, q, kl, vl, at::ones({1, kl.size(0)}, at::kBool));
    }
    g = x;
  }
  return g[0];
}

}  // namespace

TEST_CASE("train.unroll: the unrolled steps are the drafter's k-th drafts, training reports agreement by draft step",
          "[train][eagle]") {
  const int layers = GENERATE(1, 2);
  INFO("head.layers " << layers);
  const TrainDraftConfig a = load_train_config(write_config("unroll" + std::to_string(layers), 40).string(),
                                               {"train.unroll=3", "head.layers=" + std::to_string(layers)});
  const TrainDraftResult r = train_draft(a, false);
  REQUIRE(r.head_agreements.size() == 4);  // draft steps 1..max(4, unroll)
  CHECK(r.head_agreements[0] == r.validation_agreement);
  for (double x : r.head_agreements) CHECK((x >= 0.0 && x <= 1.0));
  // Top-k coverage of the first step (k = 1, 2, 4, 8): top 1 is the agreement itself (topk's
  // best row is argmax's), and a wider top never covers less.
  REQUIRE(r.first_step_topk.size() == 4);
  CHECK(r.first_step_topk[0] == r.validation_agreement);
  for (size_t i = 1; i < r.first_step_topk.size(); ++i) CHECK(r.first_step_topk[i] >= r.first_step_topk[i - 1]);
  CHECK(r.first_step_topk[3] <= 1.0);
  CHECK(r.first_step_topk[3] > r.first_step_topk[0]);  // a 40-step head is not that sure of itself

  c10::InferenceMode guard;
  ModelSource src;
  src.path = "stories260K";
  const LoadedModel info = load_model(src);
  const std::shared_ptr<EagleHead> h = load_eagle_head(a.output.path, info);
  REQUIRE(h->n_layers() == layers);
  const int64_t d = h->target.hidden_size, n1 = 7, n2 = 6, n = n1 + n2;
  const at::Tensor f = eagle_features(*h, at::sin(at::arange(n * d, at::kFloat).view({n, d}) * 0.37) * 2.0);
  const at::Tensor next = (at::arange(n, at::kLong) * 7919 + 11) % h->target.vocab_size;
  // Two packed sequences: rows [0, n1) and [n1, n).
  const at::Tensor positions = at::cat({at::arange(n1, at::kLong), at::arange(n2, at::kLong)});
  const at::Tensor segments = at::cat({at::zeros({n1}, at::kLong), at::ones({n2}, at::kLong)});
  const std::vector<at::Tensor> preds = eagle_forward_unrolled(*h, f, next, positions, segments, 3);
  REQUIRE(preds.size() == 3);
  auto tol = [](const at::Tensor& ref) { return 1e-5 * (1.0 + ref.abs().max().item<double>()); };

  SECTION("every row with a k-th draft token, in both sequences, matches the drafter's computation") {
    for (int64_t k = 1; k <= 3; ++k)
      for (int64_t seg = 0; seg < 2; ++seg) {
        const int64_t a0 = seg == 0 ? 0 : n1, len = seg == 0 ? n1 : n2;
        for (int64_t p = k - 1; p < len; ++p) {
          const at::Tensor ref = drafted_prediction(*h, f.narrow(0, a0, len), next.narrow(0, a0, len), p, k);
          INFO("step " << k << ", sequence " << seg << ", position " << p);
          CHECK((preds[static_cast<size_t>(k - 1)][a0 + p] - ref).abs().max().item<double>() < tol(ref));
        }
      }
  }
  SECTION("negative control: step 2 as a plain causal pass over the shifted predictions (no verified-prefix "
          "context) is not the drafter's") {
    const at::Tensor shifted = at::cat({f.narrow(0, 0, 1), preds[0].narrow(0, 0, n - 1)}, 0);
    const at::Tensor naive = eagle_forward_packed(*h, shifted, next, positions, segments);
    const at::Tensor ref = drafted_prediction(*h, f.narrow(0, 0, n1), next.narrow(0, 0, n1), 5, 2);
    CHECK((naive[5] - ref).abs().max().item<double>() > 10 * tol(ref));
  }
}

TEST_CASE("train.init starts from a trained draft's weights, a draft of another architecture is refused", "[train][eagle]") {
  const TrainDraftConfig a = load_train_config(write_config("init_a", 30).string());
  train_draft(a, false);
  // One step at a negligible learning rate from a's weights leaves them where they were.
  const TrainDraftConfig b =
      load_train_config(write_config("init_b", 1).string(), {"train.init=init_a.safetensors", "train.lr=1e-9", "train.warmup=0"});
  train_draft(b, false);
  const TrainDraftConfig fresh = load_train_config(write_config("init_fresh", 1).string(), {"train.lr=1e-9", "train.warmup=0"});
  train_draft(fresh, false);
  const SafetensorsFile fa = SafetensorsFile::open(a.output.path), fb = SafetensorsFile::open(b.output.path),
                        ff = SafetensorsFile::open(fresh.output.path);
  for (const char* name : {"fc.weight", "layer.mlp.down_proj.weight"}) {
    const std::vector<float> wa = fa.read(name).data, wb = fb.read(name).data, wf = ff.read(name).data;
    REQUIRE(wa.size() == wb.size());
    double db = 0, df = 0;
    for (size_t i = 0; i < wa.size(); ++i) {
      db = std::max(db, std::fabs(static_cast<double>(wa[i]) - wb[i]));
      df = std::max(df, std::fabs(static_cast<double>(wa[i]) - wf[i]));
    }
    INFO(name << ": from init " << db << ", fresh " << df);
    CHECK(db < 1e-6);
    CHECK(df > 1e-3);  // negative control: without init the weights are the seed's
  }
  const TrainDraftConfig m = load_train_config(write_config("init_medusa", 5, "prompts.jsonl", "medusa").string());
  train_draft(m, false);
  const TrainDraftConfig bad =
      load_train_config(write_config("init_bad", 1).string(), {"train.init=init_medusa.safetensors"});
  CHECK_THROWS_WITH(train_draft(bad, false), Catch::Contains("not an eagle draft"));

  // A draft holding a NaN weight: refused by name, as train.init (it trained into a NaN loss blamed
  // on train.lr) and as a drafter's draft (sampling failed on "expected finite logits").
  const fs::path nan_draft = kDir / "init_nan.safetensors";
  fs::copy_file(a.output.path, nan_draft, fs::copy_options::overwrite_existing);
  poison_tensor(nan_draft, "fc.weight");
  const TrainDraftConfig from_nan =
      load_train_config(write_config("init_from_nan", 1).string(), {"train.init=init_nan.safetensors"});
  const Error e = test::catch_error([&] { train_draft(from_nan, false); });
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK(fs::path(e.file()).filename() == "init_nan.safetensors");
  CHECK_THAT(e.message(), Catch::Contains("tensor fc.weight holds a NaN (element 0 of "));
  ModelSource src;
  src.path = "stories260K";
  const LoadedModel target = load_model(src);
  CHECK_THROWS_WITH(load_eagle_head(nan_draft.string(), target), Catch::Contains("tensor fc.weight holds a NaN"));
  CHECK_NOTHROW(load_eagle_head(a.output.path, target));  // control: the draft it was copied from loads
}

TEST_CASE("confidence_from_token: the threshold stops drafting only from that draft position on, greedy equals AR",
          "[train][eagle]") {
  const TrainDraftConfig a = load_train_config(write_config("conf", 120).string());
  train_draft(a, false);
  ModelSource src;
  src.path = "stories260K";
  auto target = load_target(src);
  SessionParts parts(*target, kv_64mib());
  DrafterOptions o = trained_drafter("eagle", a.output.path, 4);
  o.confidence_threshold = 0.98;  // a weak head: most tokens fall below it
  DrafterOptions o2 = o, o5 = o;
  o2.confidence_from_token = 2;
  o5.confidence_from_token = 5;  // past gamma: the threshold never applies
  REQUIRE_NOTHROW(o2.validate());
  Drafter& d1 = parts.add_drafter(o);
  Drafter& d2 = parts.add_drafter(o2);
  Drafter& d5 = parts.add_drafter(o5);
  int64_t empty1 = 0, empty2 = 0, steps2 = 0, drafted1 = 0, drafted2 = 0, drafted5 = 0;
  for (const char* text : {"Once upon a time", "The dog ran to", "Lily and Ben"}) {
    const TokenList ids = target->info.tokenizer->encode(text, true);
    GenerationOptions gen;
    gen.max_new_tokens = 48;
    const GenerationResult ar = generate_ar(*target->model, *target->info.tokenizer, ids, gen, SamplingOptions{},
                                            KvMode::kCached, {}, parts.kv_target());
    Session s(*target->model, *target->info.tokenizer, parts.kv_target());
    for (int which = 1; which <= 2; ++which) {
      s.begin(Request{ids, {which == 1 ? &d1 : &d2, which == 1 ? o : o2}, gen, {}});
      while (!s.done()) {
        const SpecStep st = s.step();
        (which == 1 ? drafted1 : drafted2) += st.drafted;
        // A step with one token left to emit drafts none whatever the threshold: not counted.
        if (st.drafted == 0 && !s.done()) ++(which == 1 ? empty1 : empty2);
        if (which == 2) ++steps2;
      }
      CHECK(s.end().tokens == ar.tokens);
    }
    s.begin(Request{ids, {&d5, o5}, gen, {}});
    while (!s.done()) drafted5 += s.step().drafted;
    CHECK(s.end().tokens == ar.tokens);
  }
  INFO("drafted with the threshold from token 5 (never): " << drafted5);
  INFO("steps without a draft: " << empty1 << " from token 1, " << empty2 << " from token 2 (of " << steps2
                                 << "); drafted " << drafted1 << " / " << drafted2);
  CHECK(empty1 > 3);   // negative control: the threshold from the first token leaves steps undrafted
  CHECK(empty2 == 0);  // from the second: every step drafts its first token
  CHECK(drafted2 > drafted1);
  CHECK(drafted2 < drafted5);  // and the threshold still cuts the later positions
  DraftContext ctx;
  ctx.min_confidence = 0.5;
  ctx.confidence_from_token = 2;
  CHECK_FALSE(ctx.confidence_applies(0));  // the first draft token
  CHECK(ctx.confidence_applies(1));
  CHECK(ctx.confidence_applies(3));
  ctx.min_confidence = 0.0;
  CHECK_FALSE(ctx.confidence_applies(3));

  DrafterOptions bad = o;
  bad.confidence_from_token = 0;
  CHECK(test::catch_error([&] { bad.validate(); }).field() == "confidence_from_token");
  bad.confidence_from_token = 2;
  bad.confidence_threshold = 0.0;
  CHECK_THAT(test::catch_error([&] { bad.validate(); }).what(), Catch::Contains("confidence_threshold > 0"));
}

namespace {

// A head reading stories260K's layers 1 and 2 (of 0..4) besides the last, trained 120 steps.
TrainDraftConfig aux_head_config() {
  return load_train_config(write_config("aux", 120).string(), {"head.aux_layers=[1, 2]"});
}

// Synthetic rows for a head of width d: [n, d] features, [n, 2 d] aux features, [n] next tokens.
struct AuxRows {
  at::Tensor f, aux, next, pos, seg;
};
AuxRows aux_rows(const EagleHead& h, int64_t n) {
  const int64_t d = h.target.hidden_size;
  AuxRows r;
  r.f = eagle_features(h, at::sin(at::arange(n * d, at::kFloat).view({n, d}) * 0.37) * 2.0);
  r.aux = eagle_aux_features(at::cos(at::arange(n * 2 * d, at::kFloat).view({2 * n, d}) * 0.11) * 3.0,
                             h.target.rms_norm_eps)
              .view({n, 2 * d});
  r.next = (at::arange(n, at::kLong) * 7919 + 11) % h.target.vocab_size;
  r.pos = at::arange(n, at::kLong);
  r.seg = at::zeros({n}, at::kLong);
  return r;
}

}  // namespace

TEST_CASE("head.aux_layers (EAGLE-3's fused features): the drafter reads them, greedy equals AR", "[train][eagle]") {
  const TrainDraftConfig c = aux_head_config();
  const TrainDraftResult rc = train_draft(c, false);
  CHECK(rc.validation_agreement > 0.0);
  CHECK(SafetensorsFile::open(c.output.path).metadata().at("aux_layers") == "1,2");
  ModelSource src;
  src.path = "stories260K";
  auto target = load_target(src);
  const std::shared_ptr<EagleHead> h = load_eagle_head(c.output.path, target->info);
  const int64_t d = h->target.hidden_size, V = h->target.vocab_size;
  REQUIRE(h->aux_layers == std::vector<int64_t>{1, 2});
  CHECK(h->fc_weight.sizes() == at::IntArrayRef{d, 4 * d});

  SessionParts parts(*target, kv_64mib());
  DrafterOptions o = trained_drafter("eagle", c.output.path, 4);
  Drafter& dr = parts.add_drafter(o);
  CHECK(dr.target_hidden_layers() == std::vector<int64_t>{1, 2, 4});
  int64_t accepted = 0, drafted = 0;
  greedy_equals_ar(*target, parts, dr, o, accepted, drafted);
  INFO("accepted " << accepted << " of " << drafted);
  CHECK(accepted > 0);
  CHECK(parts.kv().bytes_used() == 0);
  {  // the head on libtorch ops (a target without packed kernels)
    const NoKernels bare(*target->model);
    EagleDrafter lt(h, DrafterEnv{&bare, &parts.kv(), parts.kv_target().pool, bare.config().vocab_size});
    int64_t lt_accepted = 0, lt_drafted = 0;
    const TokenList ids = target->info.tokenizer->encode("Once upon a time", true);
    GenerationOptions gen;
    gen.max_new_tokens = 32;
    Session s(bare, *target->info.tokenizer, parts.kv_target());
    CHECK(run_counting(s, Request{ids, {&lt, o}, gen, {}}, lt_accepted, lt_drafted).tokens ==
          generate_ar(*target->model, *target->info.tokenizer, ids, gen, SamplingOptions{}, KvMode::kCached, {},
                      parts.kv_target())
              .tokens);
    CHECK(lt_accepted > 0);
  }

  // The drafter's first draft token from target hidden rows of layers 1, 2 and 4 (observe_target_hidden,
  // then propose, sampling so that its logits come back) against the libtorch head on the same rows.
  c10::InferenceMode guard;
  const int64_t n = 7;
  const at::Tensor h1 = at::sin(at::arange(n * d, at::kFloat).view({n, d}) * 0.23) * 4.0;
  const at::Tensor h2 = at::cos(at::arange(n * d, at::kFloat).view({n, d}) * 0.41) * 2.5;
  const at::Tensor hl = at::sin(at::arange(n * d, at::kFloat).view({n, d}) * 0.37) * 2.0;
  TokenList tokens;
  for (int64_t i = 0; i <= n; ++i) tokens.push_back(static_cast<Token>((i * 7919 + 11) % V));  // T = n + 1
  const at::Tensor next = at::tensor(std::vector<int64_t>(tokens.begin() + 1, tokens.end()), at::kLong);
  const auto reference = [&](const at::Tensor& a1, const at::Tensor& a2) {  // [V] logits, -inf outside the head
    const at::Tensor aux = at::cat({eagle_aux_features(a1, h->target.rms_norm_eps), eagle_aux_features(a2, h->target.rms_norm_eps)}, 1);
    const at::Tensor pred = eagle_forward_packed(*h, eagle_features(*h, hl), next, at::arange(n, at::kLong),
                                                 at::zeros({n}, at::kLong), aux);
    at::Tensor full = at::full({V}, -INFINITY, at::kFloat);
    full.index_put_({h->vocab_ids}, eagle_logits(*h, pred.narrow(0, n - 1, 1))[0]);
    return full;
  };
  const at::Tensor want = reference(h1, h2), swapped = reference(h2, h1);
  const auto finite = [](const at::Tensor& x) { return x.masked_fill(x.isinf(), 0.0); };
  const double tol = 1e-4 * (1.0 + finite(want).abs().max().item<double>());
  ModelSource f32 = src;
  f32.activations = "f32";  // the packed head in float32 matrices: the libtorch head's numbers
  auto t32 = load_target(f32);
  const NoKernels bare32(*t32->model);
  for (const Model* m : {static_cast<const Model*>(t32->model.get()), static_cast<const Model*>(&bare32)}) {
    KvCacheManager kv(kv_64mib());
    EagleDrafter e(h, DrafterEnv{m, &kv, -1, V});
    e.begin(0, tokens);
    e.observe_target_hidden(0, {h1.data_ptr<float>(), h2.data_ptr<float>(), hl.data_ptr<float>()}, n, d, 0);
    SamplingOptions warm;
    warm.temperature = 1.0;
    Rng rng(3);
    DraftContext ctx{0, &tokens, 1, &warm, &rng, 0.0};
    ctx.want_logits = true;
    const DraftBlock b = e.propose(ctx, 1);
    REQUIRE(b.logits.size() == 1);
    const at::Tensor got = at::tensor(b.logits[0]);
    INFO((m == &bare32 ? "libtorch ops" : "packed kernels"));
    CHECK(at::equal(got.isinf(), want.isinf()));
    CHECK((finite(got) - finite(want)).abs().max().item<double>() < tol);
    // negative control: layers 1 and 2 swapped give other logits
    CHECK((finite(got) - finite(swapped)).abs().max().item<double>() > 100 * tol);
    e.end(0);
  }
}

TEST_CASE("head.aux_layers: the packed head reads the aux rows as the libtorch head does, an EAGLE head starts one "
          "exactly",
          "[train][eagle]") {
  const TrainDraftConfig c = aux_head_config();
  train_draft(c, false);
  const TrainDraftConfig e = load_train_config(write_config("aux_base", 30).string());
  train_draft(e, false);
  const TrainDraftConfig g = load_train_config(
      write_config("aux_init", 1).string(),
      {"head.aux_layers=[1, 2]", "train.init=aux_base.safetensors", "train.lr=1e-9", "train.warmup=0"});
  train_draft(g, false);
  c10::InferenceMode guard;  // after the training runs (train_draft turns autograd on anyway)
  ModelSource src;
  src.path = "stories260K";
  src.activations = "f32";
  auto t32 = load_target(src);
  const std::shared_ptr<EagleHead> h = load_eagle_head(c.output.path, t32->info);
  const int64_t d = h->target.hidden_size;
  const AuxRows r = aux_rows(*h, 9);
  const at::Tensor ref = eagle_forward_packed(*h, r.f, r.next, r.pos, r.seg, r.aux);
  const double tol = 1e-4 * (1.0 + ref.abs().max().item<double>());
  CHECK((packed_forward(*h, *t32->model, r.f, r.next, r.aux) - ref).abs().max().item<double>() < tol);
  // negative control: the same pairs with a = 0 (a drafted pair's input) are another forward
  const at::Tensor zero_aux = eagle_forward_packed(*h, r.f, r.next, r.pos, r.seg);
  CHECK((packed_forward(*h, *t32->model, r.f, r.next) - zero_aux).abs().max().item<double>() < tol);
  CHECK((zero_aux - ref).abs().max().item<double>() > 100 * tol);

  // train.init from the EAGLE head without aux layers: zero columns over a, the same forward
  const std::shared_ptr<EagleHead> base = load_eagle_head(e.output.path, t32->info);
  const std::shared_ptr<EagleHead> grown = load_eagle_head(g.output.path, t32->info);
  CHECK(grown->fc_weight.narrow(1, 2 * d, 2 * d).abs().max().item<double>() < 1e-6);
  const at::Tensor want = eagle_forward_packed(*base, r.f, r.next, r.pos, r.seg);
  CHECK((eagle_forward_packed(*grown, r.f, r.next, r.pos, r.seg, r.aux) - want).abs().max().item<double>() < tol);
}

TEST_CASE("head.aux_layers refused: the last layer, a repeat, another architecture, an init with other aux layers",
          "[train][eagle]") {
  const TrainDraftConfig last = load_train_config(write_config("aux_last", 1).string(), {"head.aux_layers=[4]"});
  const Error e1 = test::catch_error([&] { train_draft(last, false); });
  CHECK(e1.kind() == ErrorKind::kConfig);
  CHECK(e1.field() == "head.aux_layers");
  CHECK_THAT(e1.what(), Catch::Contains("0..3"));
  const Error e2 =
      test::catch_error([] { load_train_config(write_config("aux_twice", 1).string(), {"head.aux_layers=[1, 1]"}); });
  CHECK(e2.field() == "head.aux_layers");
  CHECK_THAT(e2.what(), Catch::Contains("listed twice"));
  const Error e3 = test::catch_error(
      [] { load_train_config(write_config("aux_medusa", 1, "prompts.jsonl", "medusa").string(), {"head.aux_layers=[1]"}); });
  CHECK(e3.field() == "head.aux_layers");
  CHECK_THAT(e3.what(), Catch::Contains("only an eagle head"));
  // An init whose aux layers differ from the config's: refused before the data stage (no
  // features file for layer 0 is written).
  train_draft(aux_head_config(), false);
  const TrainDraftConfig other =
      load_train_config(write_config("aux_other", 1).string(), {"head.aux_layers=[0]", "train.init=aux.safetensors"});
  const Error e4 = test::catch_error([&] { train_draft(other, false); });
  CHECK(e4.kind() == ErrorKind::kConfig);
  CHECK(e4.field() == "train.init");
  CHECK_THAT(e4.what(), Catch::Contains("[1,2]") && Catch::Contains("[0]"));
  bool aux0_cached = false;
  for (const auto& entry : fs::directory_iterator(kDir / "cache"))
    aux0_cached = aux0_cached || entry.path().filename().string().find("-aux0") != std::string::npos;
  CHECK_FALSE(aux0_cached);
}

TEST_CASE("head.layers: a two-layer eagle head drafts through the engine (greedy equals AR, packed and libtorch), a "
          "one-layer head grows into it exactly, bad layer counts are refused",
          "[train][eagle]") {
  const TrainDraftConfig two = load_train_config(write_config("two_layers", 60).string(), {"head.layers=2"});
  const TrainDraftResult r = train_draft(two, false);
  CHECK(r.validation_agreement > 0.0);
  CHECK(SafetensorsFile::open(two.output.path).metadata().at("head_layers") == "2");
  CHECK(SafetensorsFile::open(two.output.path).contains("layers.1.mlp.down_proj.weight"));
  ModelSource src;
  src.path = "stories260K";
  auto target = load_target(src);
  const std::shared_ptr<EagleHead> h = load_eagle_head(two.output.path, target->info);
  REQUIRE(h->n_layers() == 2);

  SessionParts parts(*target, kv_64mib());
  DrafterOptions o = trained_drafter("eagle", two.output.path, 4);
  Drafter& dr = parts.add_drafter(o);
  int64_t accepted = 0, drafted = 0;
  greedy_equals_ar(*target, parts, dr, o, accepted, drafted);
  INFO("accepted " << accepted << " of " << drafted);
  CHECK(accepted > 0);
  CHECK(parts.kv().bytes_used() == 0);
  {
    // The head on libtorch ops (a target without packed kernels) against the packed head on a
    // float32-activation target (float32 matrices: the same numbers up to summation order):
    // greedy output equals AR, and both draft and accept as many tokens on the same prompts.
    ModelSource s32 = src;
    s32.activations = "f32";
    auto t32 = load_target(s32);
    SessionParts p32(*t32, kv_64mib());
    const NoKernels bare(*t32->model);
    EagleDrafter lt(load_eagle_head(two.output.path, t32->info),
                    DrafterEnv{&bare, &p32.kv(), p32.kv_target().pool, bare.config().vocab_size});
    Drafter& packed = p32.add_drafter(o);
    int64_t counts[2][2] = {{0, 0}, {0, 0}};  // [libtorch, packed][accepted, drafted]
    for (const char* text : {"Once upon a time", "The dog ran to", "Lily and Ben"}) {
      const TokenList ids = t32->info.tokenizer->encode(text, true);
      GenerationOptions gen;
      gen.max_new_tokens = 32;
      const TokenList ar = generate_ar(*t32->model, *t32->info.tokenizer, ids, gen, SamplingOptions{},
                                       KvMode::kCached, {}, p32.kv_target())
                               .tokens;
      Session sl(bare, *t32->info.tokenizer, p32.kv_target());
      CHECK(run_counting(sl, Request{ids, {&lt, o}, gen, {}}, counts[0][0], counts[0][1]).tokens == ar);
      Session sp(*t32->model, *t32->info.tokenizer, p32.kv_target());
      CHECK(run_counting(sp, Request{ids, {&packed, o}, gen, {}}, counts[1][0], counts[1][1]).tokens == ar);
    }
    INFO("libtorch: accepted " << counts[0][0] << " of " << counts[0][1] << "; packed: " << counts[1][0] << " of "
                               << counts[1][1]);
    CHECK(counts[0][0] > 0);
    CHECK(counts[0][0] == counts[1][0]);
    CHECK(counts[0][1] == counts[1][1]);
  }

  // Resume at two layers: interrupted after 25 steps and resumed, the same bytes.
  {
    const std::string whole = read_bytes(two.output.path);
    fs::remove(two.output.path);
    train_draft(two, false, {}, 25);
    CHECK_FALSE(fs::exists(two.output.path));
    train_draft(two, true);
    CHECK(read_bytes(two.output.path) == whole);
  }
  // Loading refuses a layer after a gap (layers.1's q projection gone: the head would count one
  // layer and leave the rest of layers.1 out) and metadata naming another depth.
  {
    WeightMap w = read_safetensors(two.output.path);
    const std::map<std::string, std::string> meta = SafetensorsFile::open(two.output.path).metadata();
    WeightMap gap = w;
    gap.erase("layers.1.self_attn.q_proj.weight");
    const std::string gap_path = (kDir / "gap_layers.safetensors").string();
    write_safetensors(gap_path, gap, SafetensorsDtype::kF32, meta, {"vocab_ids"});
    const Error eg = test::catch_error([&] { load_eagle_head(gap_path, target->info); });
    CHECK(eg.kind() == ErrorKind::kBadInput);
    CHECK(eg.file() == gap_path);
    CHECK_THAT(eg.what(), Catch::Contains("is not part of the head's 1 decoder layers"));
    // A layer index past int64 ended in "internal error: stoll".
    WeightMap huge = w;
    huge["layers.99999999999999999999.w"] = w.at("layers.1.self_attn.q_proj.weight");
    write_safetensors(gap_path, huge, SafetensorsDtype::kF32, meta, {"vocab_ids"});
    const Error eh = test::catch_error([&] { load_eagle_head(gap_path, target->info); });
    CHECK(eh.kind() == ErrorKind::kBadInput);
    CHECK_THAT(eh.what(), Catch::Contains("tensor layers.99999999999999999999.w is not part of the head's 2 decoder layers"));
    std::map<std::string, std::string> wrong = meta;
    wrong["head_layers"] = "3";
    const std::string meta_path = (kDir / "meta_layers.safetensors").string();
    write_safetensors(meta_path, w, SafetensorsDtype::kF32, wrong, {"vocab_ids"});
    const Error em = test::catch_error([&] { load_eagle_head(meta_path, target->info); });
    CHECK(em.kind() == ErrorKind::kBadInput);
    CHECK_THAT(em.what(), Catch::Contains("head_layers says 3"));
    write_safetensors(meta_path, w, SafetensorsDtype::kF32, meta, {"vocab_ids"});  // control: as written, it loads
    CHECK(load_eagle_head(meta_path, target->info)->n_layers() == 2);
  }

  // train.init from a one-layer head: the second layer starts as the identity (o and down 0), so
  // the grown head computes the one-layer head's forward; one step at lr 1e-9 keeps it there.
  const TrainDraftConfig one = load_train_config(write_config("one_layer", 30).string());
  train_draft(one, false);
  const TrainDraftConfig grow = load_train_config(
      write_config("grown_layers", 1).string(),
      {"head.layers=2", "train.init=one_layer.safetensors", "train.lr=1e-9", "train.warmup=0"});
  train_draft(grow, false);
  c10::InferenceMode guard;
  const std::shared_ptr<EagleHead> base = load_eagle_head(one.output.path, target->info);
  const std::shared_ptr<EagleHead> grown = load_eagle_head(grow.output.path, target->info);
  REQUIRE(grown->n_layers() == 2);
  CHECK(grown->layers[1].o_proj.abs().max().item<double>() < 1e-6);
  CHECK(grown->layers[1].down_proj.abs().max().item<double>() < 1e-6);
  CHECK(grown->layers[1].q_proj.abs().max().item<double>() > 1e-3);  // drawn, not zero
  const int64_t d = base->target.hidden_size, n = 9;
  const at::Tensor f = eagle_features(*base, at::sin(at::arange(n * d, at::kFloat).view({n, d}) * 0.37) * 2.0);
  const at::Tensor next = (at::arange(n, at::kLong) * 7919 + 11) % base->target.vocab_size;
  const at::Tensor pos = at::arange(n, at::kLong), seg = at::zeros({n}, at::kLong);
  const at::Tensor want = eagle_forward_packed(*base, f, next, pos, seg);
  const double tol = 1e-4 * (1.0 + want.abs().max().item<double>());
  CHECK((eagle_forward_packed(*grown, f, next, pos, seg) - want).abs().max().item<double>() < tol);
  // negative controls: the grown head with its second layer's o projection off 0, and the
  // trained two-layer head, are other forwards
  EagleHead perturbed = *grown;
  perturbed.layers[1].o_proj = at::full_like(grown->layers[1].o_proj, 0.1);
  CHECK((eagle_forward_packed(perturbed, f, next, pos, seg) - want).abs().max().item<double>() > 100 * tol);
  CHECK((eagle_forward_packed(*h, f, next, pos, seg) - want).abs().max().item<double>() > 100 * tol);

  // Refused: 0 or 5 layers, layers on another architecture, an init deeper than the head.
  for (const char* bad : {"head.layers=0", "head.layers=5"}) {
    const Error e = test::catch_error([&] { load_train_config(write_config("bad_layers", 1).string(), {bad}); });
    CHECK(e.field() == "head.layers");
    CHECK_THAT(e.what(), Catch::Contains("1 to 4"));
  }
  const Error em = test::catch_error(
      [] { load_train_config(write_config("layers_medusa", 1, "prompts.jsonl", "medusa").string(), {"head.layers=2"}); });
  CHECK(em.field() == "head.layers");
  CHECK_THAT(em.what(), Catch::Contains("only an eagle head"));
  const TrainDraftConfig shallow =
      load_train_config(write_config("shallow", 1).string(), {"train.init=two_layers.safetensors"});
  const Error ei = test::catch_error([&] { train_draft(shallow, false); });
  CHECK(ei.kind() == ErrorKind::kConfig);
  CHECK(ei.field() == "train.init");
  CHECK_THAT(ei.what(), Catch::Contains("has 2 decoder layers"));
}

TEST_CASE("a float16 draft: half the bytes, vocab_ids exact, the float32 draft's weights to f16 precision", "[train]") {
  const TrainDraftConfig f32 = load_train_config(write_config("w32", 20).string());
  const TrainDraftConfig f16 = load_train_config(write_config("w16", 20).string(), {"output.dtype=float16"});
  train_draft(f32, false);
  train_draft(f16, false);
  const SafetensorsFile file = SafetensorsFile::open(f16.output.path);
  CHECK(file.info("vocab_ids").dtype == "F32");
  CHECK(file.info("fc.weight").dtype == "F16");
  CHECK(fs::file_size(f16.output.path) < fs::file_size(f32.output.path) * 6 / 10);
  ModelSource src;
  src.path = "stories260K";
  const LoadedModel info = load_model(src);
  const auto a = load_eagle_head(f32.output.path, info), b = load_eagle_head(f16.output.path, info);
  CHECK(at::equal(a->vocab_ids, b->vocab_ids));
  {
    // A draft whose vocab_ids repeat a token (its second row made a copy of the first) is
    // refused: that token would get two rows' probability.
    const fs::path dup = fs::path(f32.output.path).parent_path() / "dup_ids.safetensors";
    fs::copy_file(f32.output.path, dup, fs::copy_options::overwrite_existing);
    const SafetensorsTensorInfo ids = file.info("vocab_ids");
    REQUIRE(ids.shape.size() == 1);
    REQUIRE(ids.shape[0] >= 2);
    const SafetensorsFile f32_file = SafetensorsFile::open(f32.output.path);
    const uint64_t at0 = f32_file.data_start() + f32_file.info("vocab_ids").begin;
    char first[4];
    {
      std::ifstream in(dup, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(at0));
      in.read(first, 4);
    }
    {
      std::fstream io(dup, std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(static_cast<std::streamoff>(at0 + 4));
      io.write(first, 4);
    }
    CHECK_THROWS_WITH(load_eagle_head(dup.string(), info), Catch::Contains("vocab_ids must not repeat a token id"));
  }
  for (const auto& [name, t] : a->trained()) {
    INFO(name);
    const at::Tensor& u = *b->trained().at(name);
    CHECK(!at::equal(*t, u));  // rounded (so the bound below is not vacuous)
    CHECK((*t - u).abs().max().item<double>() <= 1e-3 * (1.0 + t->abs().max().item<double>()));
  }
}

TEST_CASE("train-draft retrieval: the datastore is the training conversations, the retrieval drafter's greedy output "
          "equals AR and copies what it saw, a datastore for another target or a malformed one is refused",
          "[train][retrieval]") {
  const TrainDraftConfig a = load_train_config(write_config("ret", 1, "prompts.jsonl", "retrieval").string());
  const TrainDraftResult r = train_draft(a, false);
  ModelSource src;
  src.path = "stories260K";
  auto target = load_target(src);
  const Tokenizer& tok = *target->info.tokenizer;

  // The corpus: each training prompt (every 5th of the 24 is held out, validation_fraction 0.2)
  // followed by the target's greedy answer of at most 24 tokens, in prompt order.
  std::vector<float> want_tokens, want_offsets{0.f};
  std::vector<std::string> texts;
  {
    std::ifstream in(kDir / "prompts.jsonl");
    std::string line;
    while (std::getline(in, line)) texts.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
  }
  REQUIRE(texts.size() == 24);
  std::vector<TokenList> corpus;
  std::vector<std::pair<TokenList, TokenList>> held_out;  // (prompt, answer)
  GenerationOptions answer;
  answer.max_new_tokens = 24;
  for (size_t i = 0; i < texts.size(); ++i) {
    TokenList seq = encode_prompt(target->info, texts[i], false);
    const TokenList ans = generate_ar(*target->model, tok, seq, answer, SamplingOptions{}, KvMode::kCached, {}).tokens;
    if (i % 5 == 4) {
      held_out.push_back({seq, ans});
      continue;
    }
    seq.insert(seq.end(), ans.begin(), ans.end());
    for (Token t : seq) want_tokens.push_back(static_cast<float>(t));
    want_offsets.push_back(static_cast<float>(want_tokens.size()));
    corpus.push_back(seq);
  }
  REQUIRE(held_out.size() == 4);
  {
    const SafetensorsFile f = SafetensorsFile::open(a.output.path);
    CHECK(f.metadata().at("speclab.draft") == "retrieval");
    CHECK(f.metadata().at("target_weights_hash") == target_weights_hash(target->info));
    CHECK(f.read("tokens").data == want_tokens);
    CHECK(f.read("offsets").data == want_offsets);
  }
  CHECK(r.train_pairs == static_cast<int64_t>(want_tokens.size()));
  // The agreement by draft step, counted here on the held-out answers from the second token on
  // (the first is the prefill's): drafting with the default keys from the same corpus.
  {
    const Datastore store(corpus);
    int64_t tried[4] = {0, 0, 0, 0}, right[4] = {0, 0, 0, 0};
    for (const auto& [prompt, ans] : held_out) {
      for (size_t t = 1; t < ans.size(); ++t) {
        TokenList context = prompt;
        context.insert(context.end(), ans.begin(), ans.begin() + static_cast<long>(t));
        const TokenList d = store.draft(context, 1, 8, 4).tokens;
        for (size_t k = 0; k < 4 && t + k < ans.size(); ++k) {
          ++tried[k];
          if (k >= d.size() || d[k] != ans[t + k]) break;
          ++right[k];
        }
      }
    }
    CHECK(r.validation_pairs == tried[0]);
    REQUIRE(r.head_agreements.size() == 4);
    for (int k = 0; k < 4; ++k) {
      INFO("draft step " << k + 1 << ": " << right[k] << " of " << tried[k]);
      CHECK(tried[k] > 0);
      CHECK(r.head_agreements[static_cast<size_t>(k)] == Approx(static_cast<double>(right[k]) / static_cast<double>(tried[k])));
    }
    CHECK(r.validation_agreement == r.head_agreements[0]);
  }

  // The drafter passes the confidence threshold to the datastore as the support threshold, and
  // reports each token's support as its confidence.
  {
    RetrievalDrafter rd(std::make_shared<const Datastore>(std::vector<TokenList>{{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 3, 4, 6}}), 1, 8);
    const TokenList context = {9, 2, 3};
    DraftContext ctx;
    ctx.tokens = &context;
    DraftBlock b = rd.propose(ctx, 4);
    CHECK(b.tokens == TokenList{4, 6});
    REQUIRE(b.confidence.size() == 2);
    CHECK(b.confidence[0] == Approx(2.0 / 3.0));
    CHECK(b.confidence[1] == Approx(1.0));
    CHECK(b.probs.empty());  // deterministic: q one-hot
    ctx.min_confidence = 0.7;
    CHECK(rd.propose(ctx, 4).tokens.empty());
    ctx.confidence_from_token = 2;
    CHECK(rd.propose(ctx, 4).tokens == TokenList{4, 6});
    CHECK(rd.propose(ctx, 1).tokens == TokenList{4});
  }

  // Through the engine: greedy equals AR and a sampled run passes the engine's checks; on a
  // training prompt the drafter copies the answer it stored, so most drafts are kept.
  SessionParts parts(*target, kv_64mib());
  const DrafterOptions o = trained_drafter("retrieval", a.output.path, 4);
  Drafter& d = parts.add_drafter(o);
  CHECK(d.name() == "retrieval");
  int64_t accepted = 0, drafted = 0;
  greedy_equals_ar(*target, parts, d, o, accepted, drafted);
  INFO("accepted " << accepted << " of " << drafted);
  CHECK(accepted > 0);
  CHECK(accepted < drafted);
  {
    const TokenList ids = encode_prompt(target->info, texts[0], false);
    GenerationOptions gen;
    gen.max_new_tokens = 24;
    Session s(*target->model, tok, parts.kv_target());
    int64_t acc = 0, dr = 0;
    const GenerationResult spec = run_counting(s, Request{ids, {&d, o}, gen, {}}, acc, dr);
    CHECK(spec.tokens == generate_ar(*target->model, tok, ids, gen, SamplingOptions{}, KvMode::kCached, {}).tokens);
    INFO("on a training prompt: accepted " << acc << " of " << dr);
    CHECK(acc >= 18);  // 24 tokens in at most 6 steps: nearly every draft kept
  }
  {
    // Behind prompt lookup (sources_first.h), as configs/eagle_mt_bench.yaml's retrieval_lookup.
    DrafterOptions ol = o;
    ol.prompt_lookup_first = true;
    ol.prompt_lookup_min = 2;
    Drafter& dl = parts.add_drafter(ol);
    CHECK(dl.name() == "prompt_lookup+retrieval");
    int64_t acc = 0, dr = 0;
    greedy_equals_ar(*target, parts, dl, ol, acc, dr);
    CHECK(acc > 0);
  }
  CHECK(parts.kv().bytes_used() == 0);

  // Refused: another target (kConfig), another architecture's file and malformed tensors (kBadInput).
  const LoadedModel other_model = other_target(target->info, "stories260K_other_ret.bin");
  Error e = test::catch_error([&] { load_datastore(a.output.path, other_model); });
  CHECK(e.kind() == ErrorKind::kConfig);
  CHECK_THAT(e.what(), Catch::Contains("this retrieval draft was trained for stories260K.bin"));
  const TrainDraftConfig eagle = load_train_config(write_config("ret_eagle", 2).string());
  train_draft(eagle, false);
  e = test::catch_error([&] { load_datastore(eagle.output.path, target->info); });
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK_THAT(e.what(), Catch::Contains("not a retrieval draft") && Catch::Contains("it is eagle"));
  auto rewrite = [&](const std::string& name, std::vector<float> toks, std::vector<float> offs) {
    const fs::path p = kDir / (name + ".safetensors");
    const SafetensorsFile f = SafetensorsFile::open(a.output.path);
    WeightMap w;
    w["tokens"].shape = {static_cast<int64_t>(toks.size())};
    w["tokens"].data = std::move(toks);
    w["offsets"].shape = {static_cast<int64_t>(offs.size())};
    w["offsets"].data = std::move(offs);
    write_safetensors(p.string(), w, SafetensorsDtype::kF32, f.metadata());
    return test::catch_error([&] { load_datastore(p.string(), target->info); });
  };
  const float vocab = static_cast<float>(target->info.config.vocab_size);
  e = rewrite("ret_vocab", {1.f, vocab, 3.f}, {0.f, 3.f});
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK_THAT(e.what(), Catch::Contains("tokens[1] = 512: expected a token id of the target (0..511)"));
  e = rewrite("ret_fraction", {1.f, 2.5f}, {0.f, 2.f});
  CHECK_THAT(e.what(), Catch::Contains("tokens[1] = 2.5"));
  e = rewrite("ret_offsets", {1.f, 2.f, 3.f}, {0.f, 2.f});  // the last offset is not the token count
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK_THAT(e.what(), Catch::Contains("offsets[0..1]: expected ascending integers from 0 to the token count 3"));
  e = rewrite("ret_descending", {1.f, 2.f, 3.f}, {0.f, 2.f, 1.f, 3.f});
  CHECK_THAT(e.what(), Catch::Contains("offsets[1..2]"));
  CHECK_THAT(rewrite("ret_empty", {1.f}, {0.f}).what(), Catch::Contains("offsets [S + 1], S >= 1"));
  e = rewrite("ret_start", {1.f, 2.f, 3.f}, {1.f, 3.f});
  CHECK_THAT(e.what(), Catch::Contains("offsets[0..1]: expected ascending integers from 0"));
  {
    // float16 tensors would round token ids: refused by dtype, not only by value.
    const fs::path p = kDir / "ret_f16.safetensors";
    WeightMap w;
    w["tokens"].shape = {2};
    w["tokens"].data = {1.f, 2.f};
    w["offsets"].shape = {2};
    w["offsets"].data = {0.f, 2.f};
    write_safetensors(p.string(), w, SafetensorsDtype::kF16, SafetensorsFile::open(a.output.path).metadata());
    e = test::catch_error([&] { load_datastore(p.string(), target->info); });
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK_THAT(e.what(), Catch::Contains("tensor tokens is F16: expected F32"));
    // A missing tensor and a 2-D one.
    w.erase("offsets");
    write_safetensors(p.string(), w, SafetensorsDtype::kF32, SafetensorsFile::open(a.output.path).metadata());
    CHECK_THAT(test::catch_error([&] { load_datastore(p.string(), target->info); }).what(),
               Catch::Contains("the datastore lacks tensor offsets"));
    w["offsets"].shape = {1, 2};
    w["offsets"].data = {0.f, 2.f};
    write_safetensors(p.string(), w, SafetensorsDtype::kF32, SafetensorsFile::open(a.output.path).metadata());
    CHECK_THAT(test::catch_error([&] { load_datastore(p.string(), target->info); }).what(),
               Catch::Contains("expected 1-D tensors"));
  }
  // A float16 datastore would round token ids: the config refuses it.
  CHECK_THROWS_WITH(load_train_config(write_config("ret16", 1, "prompts.jsonl", "retrieval").string(),
                                      {"output.dtype=float16"}),
                    Catch::Contains("expected float32 for a retrieval datastore"));
}

TEST_CASE("the shipped SmolLM2 EAGLE head, Medusa heads and retrieval datastore: made for this target, greedy output "
          "equals AR, they draft", "[train][eagle][medusa][retrieval][smollm2]") {
  const std::string arch = GENERATE(as<std::string>{}, "eagle", "medusa", "retrieval");
  INFO(arch);
  const std::string head = std::string(SPECLAB_SOURCE_DIR) + "/assets/drafts/SmolLM2-135M-Instruct.Q4_1." + arch + ".safetensors";
  ModelSource src;
  src.path = "smollm2-135m-instruct";
  auto target = load_target(src);
  KvOptions kvo;
  kvo.budget_bytes = 256 << 20;
  SessionParts parts(*target, kvo);
  DrafterOptions o;
  o.name = arch;
  o.draft_model = head;
  o.num_speculative_tokens = 4;
  Drafter& d = parts.add_drafter(o);
  const Tokenizer& tok = *target->info.tokenizer;
  const TokenList ids = encode_prompt(target->info, "Write a short poem about the sea.", true);
  GenerationOptions gen;
  gen.max_new_tokens = 64;
  gen.ignore_eos = true;
  Session s(*target->model, tok, parts.kv_target());
  int64_t accepted = 0, drafted = 0;
  const GenerationResult spec = run_counting(s, Request{ids, {&d, o}, gen, {}}, accepted, drafted);
  const GenerationResult ar =
      generate_ar(*target->model, tok, ids, gen, SamplingOptions{}, KvMode::kCached, {}, parts.kv_target());
  CHECK(spec.tokens == ar.tokens);
  INFO("accepted " << accepted << " of " << drafted);
  // eagle: 30 of 125 here, alpha 0.34 on MT-bench; medusa: alpha 0.19 on MT-bench; retrieval: 25
  // of 143 here, alpha 0.29 on MT-bench; untrained ~0.
  CHECK(accepted >= drafted / (arch == "eagle" ? 10 : 20));
  if (arch == "eagle") {
    // Behind 2- to 3-gram prompt lookup, one head token where there is no match
    // (configs/eagle_mt_bench.yaml's eagle_lookup): the same output, drafted by both.
    DrafterOptions ol = o;
    ol.prompt_lookup_first = true;
    ol.prompt_lookup_min = 2;
    ol.fallback_speculative_tokens = 1;
    auto* hybrid = dynamic_cast<SourcesFirstDrafter*>(&parts.add_drafter(ol));
    REQUIRE(hybrid != nullptr);
    int64_t acc = 0, dr = 0;
    CHECK(run_counting(s, Request{ids, {hybrid, ol}, gen, {}}, acc, dr).tokens == ar.tokens);
    INFO("lookup steps " << hybrid->steps_from(0) << ", head steps " << hybrid->steps_from(1));
    CHECK(hybrid->steps_from(0) > 0);
    CHECK(hybrid->steps_from(1) > 0);
    // Then the shipped datastore where lookup has no match and the context's last 2+ tokens
    // occur in it (configs/sources_first_mt_bench.yaml's lookup_retrieval2_eagle): the same
    // output again, and every source drafts some steps.
    DrafterOptions orl = ol;
    orl.retrieval_first = true;
    orl.retrieval_min = 2;
    auto* chain = dynamic_cast<SourcesFirstDrafter*>(&parts.add_drafter(orl));
    REQUIRE(chain != nullptr);
    CHECK(chain->name() == "prompt_lookup+retrieval+eagle");
    acc = dr = 0;
    CHECK(run_counting(s, Request{ids, {chain, orl}, gen, {}}, acc, dr).tokens == ar.tokens);
    INFO("lookup " << chain->steps_from(0) << ", datastore " << chain->steps_from(1) << ", head "
                   << chain->steps_from(2) << " steps; accepted " << acc << " of " << dr);
    CHECK(chain->steps_from(0) > 0);
    CHECK(chain->steps_from(1) > 0);
    CHECK(chain->steps_from(2) > 0);
    CHECK(acc > 0);
    // retrieval_datastore names the datastore: the shipped one by its path drafts the same steps;
    // a file that is not a datastore (the EAGLE head) is refused, naming the key.
    DrafterOptions named = orl;
    named.retrieval_datastore = std::string(SPECLAB_SOURCE_DIR) + "/assets/drafts/SmolLM2-135M-Instruct.Q4_1.retrieval.safetensors";
    auto* by_path = dynamic_cast<SourcesFirstDrafter*>(&parts.add_drafter(named));
    REQUIRE(by_path != nullptr);
    CHECK(run_counting(s, Request{ids, {by_path, named}, gen, {}}, acc, dr).tokens == ar.tokens);
    CHECK(by_path->steps_from(1) > 0);
    named.retrieval_datastore = head;
    const Error e = test::catch_error([&] { parts.add_drafter(named); });
    CHECK(e.field() == "retrieval_datastore");
    CHECK_THAT(e.what(), Catch::Contains("not a retrieval draft"));
  }
}

// speclab check on the drafters on target features (eagle, medusa) uses the trained draft's own
// (p, q) rows for the analytic check and the verifier check [2b] (through the engine: one step at
// temperature 1, rows after the first sampled token), not a stand-in layer_skip draft (issue 14).
TEST_CASE("speclab check on eagle, medusa and the distilled draft: the analytic and verifier rows are the trained "
          "draft's own", "[train][eagle][medusa][distill][equivalence]") {
  const std::string arch = GENERATE(as<std::string>{}, "eagle", "medusa", "draft_model");
  INFO(arch);
  const TrainDraftConfig a = load_train_config(write_config("eq_" + arch, 60, "prompts.jsonl", arch).string());
  train_draft(a, false);
  ExperimentConfig c;
  c.name = arch + "_check";
  c.source_path = "test_train_draft";
  c.models.target.path = "stories260K";
  c.prompts.chat = "off";
  c.prompts.inline_prompts = {{"dog", "", "The little dog was happy. The little dog"}, {"lily", "", "Lily went to"}};
  DrafterEntry d;
  d.label = arch;
  d.options.name = arch;
  d.options.draft_model = a.output.path;
  d.options.num_speculative_tokens = 4;
  c.drafters = {d};
  c.generation.max_new_tokens = 16;
  EquivalenceOptions eq;
  eq.greedy = false;
  eq.sampling = false;
  eq.analytic = true;
  eq.verifier = true;
  eq.verifier_samples = 20000;
  eq.verifier_gammas = {2};
  eq.temperatures = {1.0};
  eq.top_ps = {1.0};
  eq.top_ks = {40};
  c.equivalence = eq;
  const EquivalenceReport r = run_equivalence(c);
  INFO(format_equivalence_report(r));
  REQUIRE(r.analytic.size() == 2 * 3);  // prompts x context lengths, one draft, one setting
  for (const AnalyticRow& row : r.analytic) {
    CHECK(row.draft == arch);
    CHECK(row.errors.lossless < 1e-6);
    CHECK(row.errors.always_accept > 1e-3);  // a real q, not p
  }
  REQUIRE(r.verifier.size() == 1);
  CHECK(r.verifier[0].draft == arch);
  CHECK(r.verifier[0].verdict.tested > 0);
  for (const VerifierControlRow& ctl : r.verifier_controls) CHECK(ctl.draft == arch);
  CHECK(r.pass());

  // The sampling check through the engine over a whole first block (positions 2..4 at gamma 2:
  // both drafts and the bonus), where the later draft rows come from the draft's own state (the
  // head's predicted features, the heads beyond the first, the draft model's own KV); the
  // verifier check [2b] above sees only the first draft row. The lossless engine must pass, and
  // controls that misreport every row's q or share the drafter's draws must be caught.
  c.prompts.inline_prompts.resize(1);
  EquivalenceOptions s;
  s.greedy = false;
  s.analytic = false;
  s.verifier = false;
  s.sampling = true;
  s.samples = 4000;
  s.positions = {2, 3, 4};
  s.temperatures = {0.7};
  s.top_ps = {1.0};
  s.top_ks = {5};
  s.gammas = {2};
  s.contexts = 1;
  s.controls = {"always_accept", "shared_draws", "q_at_temperature_1"};
  c.equivalence = s;
  const EquivalenceReport e = run_equivalence(c);
  INFO(format_equivalence_report(e));
  REQUIRE(e.cells.size() == 1);
  CHECK(e.cells[0].acceptance_rate > 0.05);
  CHECK(e.sampling_pass);
  for (const ControlOutcome& o : e.cells[0].controls) {
    INFO(o.name);
    CHECK(o.ran);
    WARN(arch << " through the engine, positions 2..4: " << o.name << " "
              << (o.caught ? "caught at N = " + std::to_string(o.power_n) : "missed, min p " + std::to_string(o.min_p)));
  }
  CHECK(e.cells[0].control("always_accept")->caught);
  CHECK(e.cells[0].control("shared_draws")->caught);
  // q at temperature 1 on every row: caught at N = 2000 for medusa and the draft model (2026-12-05,
  // Zen 4); this 60-step eagle head's rows give p = 0.003 at N = 4000 (q TV 0.10), not caught.
  if (arch != "eagle") CHECK(e.cells[0].control("q_at_temperature_1")->caught);
}

// Medusa heads (Cai et al. 2024) through the same pipeline: trained on the same teacher-forced
// data, drafting from the target's last-layer feature.
TEST_CASE("train-draft medusa: the loss falls, heads agree less the further they look, resume equals uninterrupted",
          "[train][medusa]") {
  const TrainDraftConfig m = load_train_config(write_config("m", 160, "prompts.jsonl", "medusa").string());
  const TrainDraftResult r = train_draft(m, false);
  const TrainLog log = read_train_log(m.output.log);
  REQUIRE(log.loss.size() == 160);
  CHECK(mean(log.loss, 140, 160) < 0.7 * mean(log.loss, 0, 20));
  CHECK(log.feature_loss == std::vector<double>(160, 0.0));
  REQUIRE(r.head_agreements.size() == 3);
  INFO("head agreements " << r.head_agreements[0] << " " << r.head_agreements[1] << " " << r.head_agreements[2]);
  CHECK(r.validation_agreement == r.head_agreements[0]);
  CHECK(r.head_agreements[0] > 0.2);                       // stories260K's continuations are predictable
  CHECK(r.head_agreements[0] >= r.head_agreements[2]);     // the 3rd token ahead is harder than the 1st
  const SafetensorsFile file = SafetensorsFile::open(m.output.path);
  CHECK(file.metadata().at("speclab.draft") == "medusa");
  CHECK(file.info("heads.2.weight").shape == std::vector<int64_t>{64, 64});
  const std::string first = read_bytes(m.output.path);

  fs::remove(m.output.path);
  train_draft(m, false, {}, 70);  // interrupted after 70 steps
  train_draft(m, true);
  CHECK(read_bytes(m.output.path) == first);
  CHECK(read_train_log(m.output.log).loss == log.loss);

  // train.init with fewer heads: its heads are taken, the rest start fresh (one step at a
  // negligible rate: heads 0-2 stay m's, head 3 is the fresh 4-head draft's); with more, refused.
  const std::vector<std::string> still = {"head.medusa_heads=4", "train.lr=1e-9", "train.warmup=0"};
  std::vector<std::string> grown_set = still;
  grown_set.push_back("train.init=m.safetensors");
  const TrainDraftConfig grown = load_train_config(write_config("m_grown", 1, "prompts.jsonl", "medusa").string(), grown_set);
  train_draft(grown, false);
  const TrainDraftConfig fresh4 = load_train_config(write_config("m_fresh4", 1, "prompts.jsonl", "medusa").string(), still);
  train_draft(fresh4, false);
  const SafetensorsFile fm = SafetensorsFile::open(m.output.path), fg = SafetensorsFile::open(grown.output.path),
                        f4 = SafetensorsFile::open(fresh4.output.path);
  const auto max_diff = [](const std::vector<float>& x, const std::vector<float>& y) {
    REQUIRE(x.size() == y.size());
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(x[i]) - y[i]));
    return d;
  };
  CHECK(max_diff(fg.read("heads.2.weight").data, fm.read("heads.2.weight").data) < 1e-6);
  CHECK(max_diff(fg.read("heads.2.weight").data, f4.read("heads.2.weight").data) > 1e-3);  // negative control
  CHECK(max_diff(fg.read("heads.3.weight").data, f4.read("heads.3.weight").data) < 1e-6);
  const TrainDraftConfig fewer = load_train_config(write_config("m_fewer", 1, "prompts.jsonl", "medusa").string(),
                                                   {"head.medusa_heads=2", "train.init=m.safetensors"});
  const Error e_fewer = test::catch_error([&] { train_draft(fewer, false); });
  CHECK(e_fewer.field() == "train.init");
  CHECK_THAT(e_fewer.what(), Catch::Contains("train.init has 3 Medusa heads") && Catch::Contains("expected at most 2"));

  // An eagle draft is not a medusa draft, and the reverse.
  const TrainDraftConfig e = load_train_config(write_config("m_eagle", 5).string());
  train_draft(e, false);
  ModelSource src;
  src.path = "stories260K";
  const LoadedModel info = load_model(src);
  const Error not_medusa = test::catch_error([&] { load_medusa_heads(e.output.path, info); });
  CHECK(not_medusa.kind() == ErrorKind::kBadInput);
  CHECK_THAT(not_medusa.what(), Catch::Contains("not a medusa draft") && Catch::Contains("it is eagle"));
  const Error not_eagle = test::catch_error([&] { load_eagle_head(m.output.path, info); });
  CHECK_THAT(not_eagle.what(), Catch::Contains("not an eagle draft"));
}

TEST_CASE("the medusa drafter: head k's tokens and q are the heads' own, greedy output equals AR", "[train][medusa]") {
  const TrainDraftConfig m = load_train_config(write_config("md", 160, "prompts.jsonl", "medusa").string());
  train_draft(m, false);
  ModelSource src;
  src.path = "stories260K";
  src.activations = "f32";  // float32 matrices: the packed heads equal the libtorch ones to rounding
  auto target = load_target(src);
  const std::shared_ptr<MedusaHeads> h = load_medusa_heads(m.output.path, target->info);
  REQUIRE(h->n_heads() == 3);

  SECTION("one propose() against medusa_logits on a synthetic feature row") {
    c10::InferenceMode guard;
    KvOptions kvo;
    kvo.budget_bytes = 16 << 20;
    KvCacheManager kv(kvo);
    DrafterEnv env;
    env.target = target->model.get();
    env.kv = &kv;
    MedusaDrafter d(h, env);
    const int64_t dim = h->target.hidden_size;
    const at::Tensor hidden = at::sin(at::arange(3 * dim, at::kFloat).view({3, dim}) * 0.37) * 2.0;  // positions 5..7
    const TokenList tokens(9, 1);  // T = 9: the feature at position 7 gave the pending token
    d.begin(0, tokens);
    d.observe_target_hidden(0, {hidden.data_ptr<float>()}, 3, dim, 5);
    const at::Tensor f = medusa_features(*h, hidden.narrow(0, 2, 1));
    SamplingOptions greedy;
    Rng rng(5);
    DraftContext ctx{0, &tokens, 1, &greedy, &rng, 0.0};
    const DraftBlock g = d.propose(ctx, 8);
    REQUIRE(g.tokens.size() == 3);  // K heads, whatever max_k beyond it
    SamplingOptions warm;
    warm.temperature = 1.0;
    DraftContext sctx{0, &tokens, 1, &warm, &rng, 0.0};
    const DraftBlock sb = d.propose(sctx, 2);
    REQUIRE(sb.tokens.size() == 2);
    REQUIRE(sb.probs.size() == 2);
    for (int64_t k = 1; k <= 3; ++k) {
      const at::Tensor logits = medusa_logits(*h, k, f)[0];
      CHECK(g.tokens[static_cast<size_t>(k - 1)] == logits.argmax().item<int64_t>());
      if (k > 2) continue;
      const at::Tensor p = at::softmax(logits, 0);
      const at::Tensor q = at::tensor(sb.probs[static_cast<size_t>(k - 1)]);
      CHECK((q - p).abs().max().item<double>() < 1e-5);
      // Negative control: head k's q against the next head's distribution.
      const at::Tensor other = at::softmax(medusa_logits(*h, k + 1, f)[0], 0);
      CHECK((q - other).abs().max().item<double>() > 1e-3);
    }
    const TokenList late(12, 1);  // position 10 was never observed
    DraftContext lctx{0, &late, 1, &greedy, &rng, 0.0};
    CHECK_THROWS_WITH(d.propose(lctx, 2), Catch::Contains("was not observed"));
  }

  SECTION("greedy speculative decoding equals AR; sampling passes the engine's q checks") {
    ModelSource src8;
    src8.path = "stories260K";
    auto target8 = load_target(src8);
    SessionParts parts(*target8, kv_64mib());
    DrafterOptions o = trained_drafter("medusa", m.output.path, 3);
    Drafter& d = parts.add_drafter(o);
    int64_t accepted = 0, drafted = 0;
    greedy_equals_ar(*target8, parts, d, o, accepted, drafted);
    CHECK(parts.kv().bytes_used() == 0);
    INFO("accepted " << accepted << " of " << drafted);
    CHECK(accepted > drafted / 10);
  }
}

TEST_CASE("train-draft draft_model: a distilled 2-layer draft, the runtime model computes the training forward, "
          "greedy output equals AR", "[train][distill]") {
  const TrainDraftConfig c = load_train_config(write_config("dm", 160, "prompts.jsonl", "draft_model").string());
  const TrainDraftResult r = train_draft(c, false);
  const TrainLog log = read_train_log(c.output.log);
  REQUIRE(log.loss.size() == 160);
  CHECK(mean(log.loss, 140, 160) < 0.5 * mean(log.loss, 0, 20));  // the KL to the target falls
  CHECK(log.feature_loss == std::vector<double>(160, 0.0));
  INFO("validation agreement " << r.validation_agreement);
  CHECK(r.validation_agreement > 0.4);
  const SafetensorsFile file = SafetensorsFile::open(c.output.path);
  CHECK(file.metadata().at("speclab.draft") == "draft_model");
  CHECK(file.metadata().at("draft_layers") == "0,4");
  CHECK(file.info("model.layers.1.mlp.down_proj.weight").shape == std::vector<int64_t>{64, 172});
  CHECK_FALSE(file.contains("model.layers.2.input_layernorm.weight"));
  // `speclab report` on its log names the architecture (and plots its KL, not eagle's terms).
  const fs::path rep = kDir / "dm_report";
  REQUIRE(std::system((std::string(SPECLAB_CLI) + " report '" + c.output.log + "' --out '" + rep.string() + "'").c_str()) == 0);
  CHECK_THAT(read_bytes(rep / "report.md"), Catch::Contains("| architecture | draft_model |"));
  const std::string first = read_bytes(c.output.path);
  fs::remove(c.output.path);
  train_draft(c, false, {}, 70);  // interrupted after 70 steps
  {
    // A reader holding the log open (h5py in a notebook) while training rewrites it: the log was
    // truncated in place until 2026-12-06, which failed the run and left the log empty.
    H5::Exception::dontPrint();
    const H5::H5File reader(c.output.log, H5F_ACC_RDONLY);
    train_draft(c, true);
  }
  CHECK(read_train_log(c.output.log).loss.size() == 160);
  CHECK(read_bytes(c.output.path) == first);
  // An init whose layers came from other target layers than head.draft_layers names: its weights
  // replaced the layers copied from [1, 2] while the file recorded [1, 2].
  const TrainDraftConfig other = load_train_config(
      write_config("dm_other", 1, "prompts.jsonl", "draft_model").string(),
      {"train.init=" + c.output.path, "head.draft_layers=[1, 2]", "train.lr=1e-9", "train.warmup=0"});
  const Error mixed = test::catch_error([&] { train_draft(other, false); });
  CHECK(mixed.field() == "train.init");
  CHECK_THAT(mixed.message(), Catch::Contains("copied from target layers [0,4], this draft's from [1,2]"));

  ModelSource src;
  src.path = "stories260K";
  src.activations = "f32";
  auto target = load_target(src);

  SECTION("the draft as a runtime model computes SmallDraft's libtorch forward") {
    c10::InferenceMode guard;
    DistilledDraft dd = load_distilled_draft(c.output.path, target->info);
    REQUIRE(dd.model.config.num_hidden_layers == 2);
    ModelSource dsrc;
    dsrc.path = c.output.path;
    dsrc.activations = "f32";
    std::unique_ptr<Model> runtime = build_model(dd.model, dsrc);
    // The same weights on libtorch ops: the trained tensors, the target's embeddings as the head.
    std::map<std::string, at::Tensor> w;
    for (const auto& kv : file.tensors()) {
      const HostTensor h = file.read(kv.first);
      w[kv.first] = at::tensor(h.data, at::kFloat).view(h.shape);
    }
    LoadedModel t = load_model(target->info.origin);
    const HostTensor& e = t.weights.at("model.embed_tokens.weight");
    SmallDraft ref = init_small_draft(t.config, w, {0, 1});
    ref.embed = at::tensor(e.data, at::kFloat).view(e.shape);
    ref.lm_head = t.config.tie_word_embeddings ? ref.embed : [&] {
      const HostTensor& l = t.weights.at("lm_head.weight");
      return at::tensor(l.data, at::kFloat).view(l.shape);
    }();
    const TokenList ids = target->info.tokenizer->encode("Once upon a time, a little dog", true);
    const int64_t n = static_cast<int64_t>(ids.size());
    KvOptions kvo;
    kvo.budget_bytes = 16 << 20;
    KvCacheManager kv(kvo);
    const SeqId seq = kv.create(kv.add_pool(runtime->config().kv_geometry()));
    kv.reserve(seq, n);
    ForwardOptions fo;
    fo.logits_last_n = n;
    const at::Tensor got = runtime->forward(token_tensor(ids), at::arange(n, at::kLong), kv.view_at(seq, 0, n), fo);
    const at::Tensor want =
        small_draft_logits_packed(ref, token_tensor(ids), at::arange(n, at::kLong), at::zeros({n}, at::kLong));
    const double scale = want.abs().max().item<double>();
    INFO("max |runtime - libtorch| " << (got - want).abs().max().item<double>() << " of " << scale);
    CHECK((got - want).abs().max().item<double>() < 1e-4 * scale);
    // Negative control: positions spaced by 2 (RoPE distances doubled) must not pass.
    const at::Tensor shifted =
        small_draft_logits_packed(ref, token_tensor(ids), at::arange(0, 2 * n, 2, at::kLong), at::zeros({n}, at::kLong));
    CHECK((got - shifted).abs().max().item<double>() > 1e-2 * scale);
  }

  SECTION("draft_model with the distilled file: greedy equals AR; another target's draft is refused") {
    ModelSource src8;
    src8.path = "stories260K";
    auto target8 = load_target(src8);
    SessionParts parts(*target8, kv_64mib());
    DrafterOptions o = trained_drafter("draft_model", c.output.path, 4);
    Drafter& d = parts.add_drafter(o);
    int64_t accepted = 0, drafted = 0;
    greedy_equals_ar(*target8, parts, d, o, accepted, drafted);
    INFO("accepted " << accepted << " of " << drafted);
    CHECK(accepted > drafted / 4);

    const LoadedModel other_model = other_target(target8->info, "stories260K_other_dm.bin");
    const Error e = test::catch_error([&] { load_distilled_draft(c.output.path, other_model); });
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK_THAT(e.what(), Catch::Contains("trained for stories260K.bin") && Catch::Contains("not for the target"));
    // `speclab run` with the file as a drafter's draft_model: recorded, lossless; a missing file
    // is refused before anything runs, naming the key.
    ExperimentConfig rc;
    rc.name = "distilled_run";
    rc.source_path = (kDir / "distilled_run.yaml").string();
    rc.models.target.path = "stories260K";
    rc.prompts.chat = "off";
    rc.prompts.inline_prompts = {{"dog", "", "The little dog"}};
    DrafterEntry de;
    de.label = "distilled";
    de.options = o;
    rc.drafters = {de};
    rc.generation.max_new_tokens = 24;
    rc.warmup = 0;
    rc.output.path = (kDir / "distilled_run.h5").string();
    fs::remove(rc.output.path);
    const ExperimentOutcome out = run_experiment(rc, {});
    REQUIRE(out.summary.overall.size() == 1);
    CHECK(out.summary.overall[0].method == "distilled");
    CHECK(out.summary.overall[0].lossless == 1);
    rc.drafters[0].options.draft_model = (kDir / "no_such_draft.safetensors").string();
    rc.output.path = (kDir / "distilled_run_missing.h5").string();
    const Error missing = test::catch_error([&] { run_experiment(rc, {}); });
    CHECK(missing.field() == "drafters[0].draft_model");
    CHECK_FALSE(fs::exists(rc.output.path));

    // draft_vocab in the metadata outside 0..vocab, or not a whole integer, is refused by name
    // (before, "12x" read as 12 and 10^9 as the whole head).
    {
      const WeightMap w = read_safetensors(c.output.path);
      const std::map<std::string, std::string> meta = SafetensorsFile::open(c.output.path).metadata();
      for (const std::string bad : {"-1", "1000000000", "12x", "1.5"}) {
        std::map<std::string, std::string> m = meta;
        m["draft_vocab"] = bad;
        const std::string p = (kDir / "dm_bad_vocab.safetensors").string();
        write_safetensors(p, w, SafetensorsDtype::kF32, m, {"vocab_ids"});
        const Error ev = test::catch_error([&] { load_distilled_draft(p, target8->info); });
        INFO(bad);
        CHECK(ev.kind() == ErrorKind::kBadInput);
        CHECK(ev.file() == p);
        CHECK_THAT(ev.what(), Catch::Contains("metadata draft_vocab: expected an integer from 0") &&
                                  Catch::Contains("found '" + bad + "'"));
      }
      // vocab_ids with a fraction (1.5 read as token 1) or stored F16 (ids above 2048 rounded).
      WeightMap frac = w;
      frac.at("vocab_ids").data.at(0) += 0.5f;
      const std::string fp = (kDir / "dm_frac_ids.safetensors").string();
      write_safetensors(fp, frac, SafetensorsDtype::kF32, meta, {"vocab_ids"});
      CHECK_THAT(test::catch_error([&] { load_distilled_draft(fp, target8->info); }).what(),
                 Catch::Contains("tensor vocab_ids holds a fraction"));
      write_safetensors(fp, w, SafetensorsDtype::kF16, meta);
      CHECK_THAT(test::catch_error([&] { load_distilled_draft(fp, target8->info); }).what(),
                 Catch::Contains("tensor vocab_ids is F16: expected F32"));
    }

    // An eagle draft is not a draft model.
    const TrainDraftConfig ec = load_train_config(write_config("dm_eagle", 5).string());
    train_draft(ec, false);
    const Error ne = test::catch_error([&] { load_distilled_draft(ec.output.path, target8->info); });
    CHECK_THAT(ne.what(), Catch::Contains("not a draft_model draft") && Catch::Contains("it is eagle"));
  }
}

namespace {

// One greedy or sampled run of the real engine on `target` with drafter options `o`; returns the
// tokens and each step's accepted count.
std::pair<TokenList, std::vector<int>> engine_run(const LoadedTarget& target, const DrafterOptions& o,
                                                  const SamplingOptions& sampling) {
  KvOptions kvo;
  kvo.budget_bytes = 64 << 20;
  SessionParts parts(target, kvo);
  Drafter& d = parts.add_drafter(o);
  GenerationOptions gen;
  gen.max_new_tokens = 48;
  gen.ignore_eos = true;
  Request r{target.info.tokenizer->encode("Once upon a time, a little dog", true), {&d, o}, gen, sampling};
  Session s(*target.model, *target.info.tokenizer, parts.kv_target());
  s.begin(r);
  std::vector<int> accepted;
  while (!s.done()) accepted.push_back(s.step().accepted);
  TokenList tokens = s.end().tokens;
  CHECK(parts.kv().bytes_used() == 0);
  return {tokens, accepted};
}

}  // namespace

TEST_CASE("medusa as an out-of-tree plugin (host services v2): the built-in medusa's drafts, token for token",
          "[train][medusa][plugins]") {
  const std::string plugin = [] {
    const testing::PluginBuildLock lock;
    return testing::build_example_plugin("medusa_drafter", "medusa_drafter") + "/medusa_ext.so";
  }();
  const TrainDraftConfig m = load_train_config(write_config("mp", 160, "prompts.jsonl", "medusa").string());
  train_draft(m, false);
  ModelSource src;
  src.path = "stories260K";
  src.activations = "f32";
  auto target = load_target(src);
  DrafterOptions built_in = trained_drafter("medusa", m.output.path, 3);
  DrafterOptions ext;
  ext.plugin = plugin;
  ext.name = "medusa_ext";
  ext.params["file"] = m.output.path;
  ext.num_speculative_tokens = 3;

  SamplingOptions sampled;
  sampled.temperature = 0.8;
  sampled.top_p = 0.9;
  sampled.seed = 11;
  const auto a = engine_run(*target, built_in, sampled), b = engine_run(*target, ext, sampled);
  REQUIRE(a.first.size() == 48);
  CHECK(b.first == a.first);
  CHECK(b.second == a.second);
  CHECK(std::accumulate(a.second.begin(), a.second.end(), 0) > 0);  // the heads do draft
  // Greedy: the same drafts as the built-in, and the output is AR's.
  const auto ga = engine_run(*target, built_in, SamplingOptions{}), gb = engine_run(*target, ext, SamplingOptions{});
  CHECK(gb == ga);
  GenerationOptions gen;
  gen.max_new_tokens = 48;
  gen.ignore_eos = true;
  CHECK(gb.first == generate_ar(*target->model, *target->info.tokenizer,
                                target->info.tokenizer->encode("Once upon a time, a little dog", true), gen,
                                SamplingOptions{})
                        .tokens);
  // The comparison can fail: heads one step off (head k drafting what head k + 1 would) differ.
  DrafterOptions fewer = ext;
  fewer.num_speculative_tokens = 2;
  CHECK(engine_run(*target, fewer, sampled) != a);

  // Refusals, each one line from the plugin's create(): no file, another architecture's file.
  DrafterOptions none = ext;
  none.params.clear();
  CHECK_THROWS_WITH(drafter_registry(&target->info).create(none, DrafterEnv{target->model.get(), nullptr, -1,
                                                                               target->model->config().vocab_size}),
                    Catch::Contains("params.file"));
  const TrainDraftConfig e = load_train_config(write_config("mp_eagle", 5).string());
  train_draft(e, false);
  DrafterOptions eagle_file = ext;
  eagle_file.params["file"] = e.output.path;
  CHECK_THROWS_WITH(drafter_registry(&target->info).create(eagle_file, DrafterEnv{target->model.get(), nullptr, -1,
                                                                                     target->model->config().vocab_size}),
                    Catch::Contains("not a medusa draft"));
}
