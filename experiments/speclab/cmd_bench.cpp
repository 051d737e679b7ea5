// speclab bench — runtime throughput, measured side by side in one run:
//   prefill tok/s; per-token decode rate at several context lengths, cached vs naive (the naive
//   mode's cost per token grows linearly with context, so its total is quadratic); decode rate
//   against the memory-bandwidth floor (weight bytes per token / measured read bandwidth);
//   peak RSS; model load time; tokenizer encode time, with a linearity ratio (a 2x longer input
//   should take about 2x, not 4x); and, when llama-cpp-python is installed, llama.cpp's decode at
//   the same contexts and its prefill on the same GGUF, ending in one table of the runtime
//   figures with their ratios and targets (tracker issue 12). --json prints it all as one object.
#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <c10/core/InferenceMode.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "framework/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "experiments/speclab/cli.h"
#include "framework/core/ab_variant.h"
#include "framework/core/error.h"
#include "framework/core/fnv.h"
#include "framework/core/step_profile.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/observers.h"
#include "framework/draft/builtin/model_drafter.h"
#include "framework/kv/contiguous_kv.h"
#include "experiments/app/loaded_target.h"
#include "experiments/app/pass_roof.h"
#include "models/llama/arith_peak.h"
#include "models/llama/attention_int8_vnni.h"
#include "models/llama/gemv.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"
#include "models/loaders/export.h"

#ifndef SPECLAB_SOURCE_DIR
#define SPECLAB_SOURCE_DIR "."
#endif

namespace speclab::cli {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

at::Tensor synthetic_tokens(int64_t n, int64_t vocab) {
  // Deterministic, spread over the vocabulary; avoids the low special ids.
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = 3 + (i * 7919 + 13) % (vocab - 3);
  return at::tensor(v, at::kLong);
}

// Seconds per decoded token at context length `ctx`, cached mode: the Session loop (AR, greedy,
// the paged KV cache) after a prefill of `ctx` synthetic tokens, as every command decodes.
// `kv_dtype` (non-empty) stores the cache in that dtype instead of the model's (the CPU backend
// reads and writes the cache as its storage says).
double cached_step_seconds(const Model& model, const TokenDecoder& decoder, int64_t ctx, int steps,
                           const std::string& kv_dtype = "") {
  ModelConfig c = model.config();
  if (!kv_dtype.empty()) c.kv_dtype = kv_dtype;
  PrivateKv kv(c, {}, static_cast<size_t>(ctx + steps + 1));
  Session session(model, decoder, kv.target());
  PhaseTimer timer;
  session.add_observer(timer);
  GenerationOptions gen;
  gen.max_new_tokens = steps + 1;  // the first token comes from the prefill
  gen.ignore_eos = true;
  at::Tensor ids = synthetic_tokens(ctx, c.vocab_size);
  const Method ar;  // no drafter
  if (c.device != "cpu") {
    // On a device the first steps at a context capture its CUDA graph: warm up, then time.
    const int warm = 4;
    gen.max_new_tokens = steps + 1 + warm;
    session.begin({TokenList(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ctx), ar, gen, SamplingOptions{}});
    for (int i = 0; i < warm; ++i) session.step();
    const auto t0 = Clock::now();
    int done = 0;
    for (; !session.done(); ++done) session.step();
    const double s = since(t0);
    session.end();
    return s / std::max(1, done);
  }
  session.begin({TokenList(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ctx), ar, gen, SamplingOptions{}});
  while (!session.done()) session.step();
  const GenerationResult r = session.end();
  return r.decode_seconds / static_cast<double>(std::max<size_t>(1, r.tokens.size() - 1));
}

// Seconds per decoded token at context length `ctx`, naive mode (full recompute of ctx tokens).
double naive_step_seconds(const Model& model, int64_t ctx, int steps) {
  const ModelConfig& c = model.config();
  at::Tensor seq = synthetic_tokens(ctx, c.vocab_size);
  auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    ContiguousKv kv(c.kv_geometry(), ctx);
    model.forward(seq, at::arange(ctx, at::kLong), kv.append_view(ctx), ForwardOptions{{}, 1});
  }
  return since(t0) / steps;
}

double prefill_seconds(const Model& model, int64_t n, int reps) {
  const ModelConfig& c = model.config();
  at::Tensor prompt = synthetic_tokens(n, c.vocab_size);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    ContiguousKv kv(c.kv_geometry(), n);
    auto t0 = Clock::now();
    model.forward(prompt, at::arange(n, at::kLong), kv.append_view(n), ForwardOptions{{}, 1});
    best = std::min(best, since(t0));
  }
  return best;
}

// One cache of `ctx` tokens (one prefill) and the inputs of a pass of each n in `ns`: pass(n)
// times one forward of n new tokens over the same uncommitted slots after the context.
// `kv_dtype` as for cached_step_seconds.
class PassTimer {
 public:
  PassTimer(const Model& model, int64_t ctx, const std::vector<int64_t>& ns, const std::string& kv_dtype)
      : model_(model), c_(model.config()) {
    SPECLAB_CHECK(!ns.empty(), "at least one pass size");
    if (!kv_dtype.empty()) c_.kv_dtype = kv_dtype;
    kv_ = std::make_unique<ContiguousKv>(c_.kv_geometry(), ctx + *std::max_element(ns.begin(), ns.end()));
    model.forward(synthetic_tokens(ctx, c_.vocab_size), at::arange(ctx, at::kLong), kv_->append_view(ctx),
                  ForwardOptions{{}, 1});
    kv_->commit(ctx);
    for (int64_t n : ns) {
      toks_[n] = synthetic_tokens(n, c_.vocab_size);
      pos_[n] = at::arange(ctx, ctx + n, at::kLong);
    }
  }
  // Seconds of one pass of n (one of `ns`); with `profile`, its time per layer-loop step is added.
  double pass(int64_t n, StepProfile* profile = nullptr) {
    ForwardOptions opts;
    opts.profile = profile;
    const auto t0 = Clock::now();
    model_.forward(toks_.at(n), pos_.at(n), kv_->append_view(n), opts);
    return since(t0);
  }

 private:
  const Model& model_;
  ModelConfig c_;
  std::unique_ptr<ContiguousKv> kv_;
  std::map<int64_t, at::Tensor> toks_, pos_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Verification passes of every n in `ns` (which starts with 1) over one cache of `ctx` tokens,
// in `rounds` rounds: each round times one pass of each n back to back, so a round's passes see
// the same state of a shared machine. cost[n] is the median over rounds of the round's
// t_n / t_1 (a drift between rounds, which moved a best-of ratio by 25% from run to run here,
// cancels in each round's ratio); best_s[n] the fastest pass of n. `kv_dtype` as for
// cached_step_seconds. With `profile`, every pass of n also adds its time per layer-loop step to
// (*profile)[n]. median_s[n]: the median pass of n.
struct VerificationTimes {
  std::map<int64_t, double> best_s, median_s, cost;
};
VerificationTimes verification_rounds(const Model& model, int64_t ctx, const std::vector<int64_t>& ns, int rounds,
                                      const std::string& kv_dtype = "",
                                      std::map<int64_t, StepProfile>* profile = nullptr) {
  SPECLAB_CHECK(!ns.empty() && ns.front() == 1 && rounds >= 1, "verification sizes start with 1, at least one round");
  PassTimer timer(model, ctx, ns, kv_dtype);
  VerificationTimes out;
  std::map<int64_t, std::vector<double>> ratios, times;
  for (int r = 0; r < rounds; ++r) {
    std::map<int64_t, double> t;
    for (int64_t n : ns) {
      t[n] = timer.pass(n, profile ? &(*profile)[n] : nullptr);
      out.best_s[n] = r == 0 ? t[n] : std::min(out.best_s[n], t[n]);
      times[n].push_back(t[n]);
    }
    for (int64_t n : ns) ratios[n].push_back(t[n] / t.at(1));
  }
  for (const auto& [n, v] : ratios) out.cost[n] = median(v);
  for (const auto& [n, v] : times) out.median_s[n] = median(v);
  return out;
}

// --ab (framework/core/ab_variant.h): every pass size timed with ab_variant() at 0 (A) and at 1
// (B), the two passes of a size back to back (A first in even rounds, B first in odd ones), so
// that both see the same state of a shared machine. Per size: the medians of A and of B, and the
// median of the rounds' B / A. The switch is back at 0 on return, also after an exception.
struct AbTimes {
  std::map<int64_t, double> a_s, b_s, ratio;
};
// `rounds` is even, so that each variant goes first equally often.
AbTimes ab_rounds(const Model& model, int64_t ctx, const std::vector<int64_t>& ns, int rounds,
                  const std::string& kv_dtype) {
  SPECLAB_CHECK(rounds >= 2 && rounds % 2 == 0, "an even number of A/B rounds");
  PassTimer timer(model, ctx, ns, kv_dtype);
  struct Reset {
    ~Reset() { set_ab_variant(0); }
  } reset;
  std::map<int64_t, std::vector<double>> a, b, ratio;
  for (int r = 0; r < rounds; ++r)
    for (int64_t n : ns) {
      double t[2];
      for (int k = 0; k < 2; ++k) {
        const int variant = (r % 2 == 0) ? k : 1 - k;
        set_ab_variant(variant);
        t[variant] = timer.pass(n);
      }
      set_ab_variant(0);
      a[n].push_back(t[0]);
      b[n].push_back(t[1]);
      ratio[n].push_back(t[1] / t[0]);
    }
  AbTimes out;
  for (int64_t n : ns) {
    out.a_s[n] = median(a[n]);
    out.b_s[n] = median(b[n]);
    out.ratio[n] = median(ratio[n]);
  }
  return out;
}

// --step-profile: where a verification pass's time goes, step by step of the layer loop
// (step_profile.h), for each n of `ns`: microseconds per forward (the mean over `reps` passes,
// run after the timed ones), then what each extra row adds over n = 1 per step, in decode steps
// (t_n - t_1) / (n - 1) / T_1, with T_1 the one-row pass's total. Fills report["step_profile"].
void print_step_profile(const Model& model, int64_t ctx, const std::vector<int64_t>& ns, int reps,
                        const std::string& kv_dtype, bool human, nlohmann::json& report) {
  constexpr int kSteps = static_cast<int>(LoopStep::kCount);
  std::map<int64_t, StepProfile> prof;
  verification_rounds(model, ctx, ns, reps, kv_dtype, &prof);
  const auto per_forward = [&](int64_t n, int k) {
    const StepProfile& p = prof.at(n);
    return p.seconds[static_cast<size_t>(k)] / static_cast<double>(std::max<int64_t>(1, p.forwards));
  };
  const auto total = [&](int64_t n) {
    double t = 0.0;
    for (int k = 0; k < kSteps; ++k) t += per_forward(n, k);
    return t;
  };
  const std::string cache = kv_dtype.empty() ? "the model's" : kv_dtype;
  if (human) {
    std::printf("\nwhere a pass's time goes (--step-profile), context %lld, %s K/V cache: us per forward, mean of %d\n",
                static_cast<long long>(ctx), cache.c_str(), reps);
    std::printf("%-4s", "n");
    for (int k = 0; k < kSteps; ++k) std::printf(" %10s", loop_step_name(static_cast<LoopStep>(k)));
    std::printf(" %10s\n", "total");
    for (int64_t n : ns) {
      std::printf("%-4lld", static_cast<long long>(n));
      for (int k = 0; k < kSteps; ++k) std::printf(" %10.1f", per_forward(n, k) * 1e6);
      std::printf(" %10.1f\n", total(n) * 1e6);
    }
  }
  const bool have_one = prof.count(1) != 0;
  if (human && have_one) {
    std::printf("added per extra row over n = 1, in one-row passes (%.1f us)\n", total(1) * 1e6);
    for (int64_t n : ns) {
      if (n == 1) continue;
      std::printf("%-4lld", static_cast<long long>(n));
      for (int k = 0; k < kSteps; ++k)
        std::printf(" %10.3f", (per_forward(n, k) - per_forward(1, k)) / static_cast<double>(n - 1) / total(1));
      std::printf(" %10.3f\n", (total(n) - total(1)) / static_cast<double>(n - 1) / total(1));
    }
  }
  nlohmann::json& out = report["step_profile"][kv_dtype.empty() ? "model" : kv_dtype];
  for (int64_t n : ns)
    for (int k = 0; k < kSteps; ++k)
      out[std::to_string(n)][loop_step_name(static_cast<LoopStep>(k))] = per_forward(n, k) * 1e6;
}

// The largest data cache of CPU 0 (Linux sysfs, e.g. index3: level 3, size "32768K"), in bytes;
// 0 when sysfs does not say.
int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream type(dir + "type"), size(dir + "size");
    std::string t, sz;
    if (!(type >> t) || !(size >> sz) || t == "Instruction" || sz.empty()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(sz.c_str(), &end, 10);
    const int64_t mult = *end == 'K' ? 1024 : *end == 'M' ? 1024 * 1024 : *end == 'G' ? int64_t(1) << 30 : 1;
    best = std::max<int64_t>(best, static_cast<int64_t>(v) * mult);
  }
  return best;
}

// Read bandwidth in bytes/s: summing a buffer much larger than the caches on the kernels'
// threads (the same pool the matmuls use). The sum is over 32-bit integers in 8 independent
// lanes, which the compiler vectorises: a float sum in 4 scalar chains was limited by its add
// latency (about 30 GB/s on 2 cores), and the int8 kernels read weights faster than that.
double read_bandwidth(int64_t bytes) {
  const int64_t n = bytes / 4;
  std::vector<uint32_t> buf(static_cast<size_t>(n), 1u);
  const int64_t chunk = int64_t(1) << 16;
  std::vector<uint64_t> partial(static_cast<size_t>((n + chunk - 1) / chunk));
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    parallel_chunks(n, chunk, compute_threads(), [&](int64_t b, int64_t e) {
      uint32_t lane[8] = {};
      int64_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int k = 0; k < 8; ++k) lane[k] += buf[static_cast<size_t>(i + k)];
      uint64_t s = 0;
      for (uint32_t v : lane) s += v;
      for (; i < e; ++i) s += buf[static_cast<size_t>(i)];
      partial[static_cast<size_t>(b / chunk)] = s;
    });
    volatile uint64_t total = 0;
    for (uint64_t p : partial) total = total + p;
    best = std::min(best, since(t0));
  }
  return static_cast<double>(bytes) / best;
}

// Device memory bandwidth in bytes/s, counting bytes read and written: the best of 5 copies of
// a `bytes` buffer into another on `device` (each copy waited for by a one-byte read back).
double device_copy_bandwidth(const std::string& device, int64_t bytes) {
  const at::TensorOptions o = at::TensorOptions().dtype(at::kByte).device(at::Device(device));
  at::Tensor a = at::ones({bytes}, o), b = at::empty({bytes}, o);
  b.copy_(a);
  (void)b.narrow(0, 0, 1).cpu();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    b.copy_(a);
    (void)b.narrow(0, 0, 1).cpu();
    best = std::min(best, since(t0));
  }
  return 2.0 * static_cast<double>(bytes) / best;
}

// A model that times its forwards (wall clock; a forward returns host logits, so device work is
// included). Owns the inner model when given one.
class TimedModel : public Model {
 public:
  explicit TimedModel(const Model& m) : m_(m) {}
  explicit TimedModel(std::unique_ptr<Model> m) : own_(std::move(m)), m_(*own_) {}
  const ModelConfig& config() const override { return m_.config(); }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                     const ForwardOptions& opts) const override {
    const auto t0 = Clock::now();
    at::Tensor r = m_.forward(tokens, positions, kv, opts);
    seconds += since(t0);
    ++calls;
    return r;
  }
  uint64_t weight_bytes() const override { return m_.weight_bytes(); }
  uint64_t step_weight_bytes() const override { return m_.step_weight_bytes(); }
  int64_t row_exact_batch() const override { return m_.row_exact_batch(); }
  std::string weight_storage() const override { return m_.weight_storage(); }
  std::shared_ptr<const PackedMatrix> pack_matrix(const at::Tensor& w) const override { return m_.pack_matrix(w); }
  bool attend_rows(const AttentionRows& call) const override { return m_.attend_rows(call); }
  at::Tensor final_norm(const at::Tensor& hidden) const override { return m_.final_norm(hidden); }
  at::Tensor lm_head(const at::Tensor& features) const override { return m_.lm_head(features); }
  mutable double seconds = 0.0;
  mutable int64_t calls = 0;

 private:
  std::unique_ptr<Model> own_;
  const Model& m_;
};

struct SpecTiming {
  double step_seconds = 0.0, target_seconds = 0.0, draft_seconds = 0.0, outside_share = 0.0, alpha = 0.0;
  int64_t steps = 0;
};

// Speculative decoding with `draft` (a draft_model drafter) at context `ctx`, gamma drafts per
// step, greedy: per-step wall time, the target's and the draft's forward time within it, and
// the share of the step spent outside model forwards (the engine's own cost).
SpecTiming spec_step_timing(const Model& target, std::unique_ptr<Model> draft, const TokenDecoder& decoder,
                            int64_t ctx, int gamma, int steps) {
  const ModelConfig& c = target.config();
  TimedModel timed_target(target);
  auto timed_draft_own = std::make_unique<TimedModel>(std::move(draft));
  TimedModel& timed_draft = *timed_draft_own;
  const int64_t tokens = ctx + static_cast<int64_t>(steps) * (gamma + 1) + gamma + 2;
  KvOptions ko = kv_options_for(c, tokens);
  ko.budget_bytes += kv_options_for(timed_draft.config(), tokens).budget_bytes;
  KvCacheManager kv(ko);
  const PoolId pool = kv.add_pool(c.kv_geometry());
  DrafterEnv env;
  env.target = &timed_target;
  env.kv = &kv;
  env.target_pool = pool;
  env.vocab_size = c.vocab_size;
  std::unique_ptr<Drafter> drafter = ModelDrafter::separate(std::move(timed_draft_own), env);
  Session session(timed_target, decoder, KvTarget{&kv, pool});
  GenerationOptions gen;
  gen.ignore_eos = true;
  at::Tensor ids = synthetic_tokens(ctx, c.vocab_size);
  Method method;
  method.drafter = drafter.get();
  method.options.num_speculative_tokens = gamma;
  method.options.max_speculative_tokens = std::max(gamma, method.options.max_speculative_tokens);  // else a gamma above 16 is refused
  SpecTiming out;
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up
    gen.max_new_tokens = pass == 0 ? 2 * (gamma + 1) : steps * (gamma + 1);
    session.begin({TokenList(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ctx), method, gen, SamplingOptions{}});
    // begin() ran the prefill: not timed
    timed_target.seconds = timed_draft.seconds = 0.0;
    int64_t n = 0, examined = 0, accepted = 0;
    const auto t0 = Clock::now();
    for (; !session.done() && n < steps; ++n) {
      const SpecStep rec = session.step();
      examined += std::min(rec.accepted + 1, rec.drafted);  // alpha as `run` defines it (SpecResult::alpha)
      accepted += rec.accepted;
    }
    const double wall = since(t0);
    session.end();
    out.steps = n;
    out.step_seconds = wall / std::max<int64_t>(1, n);
    out.target_seconds = timed_target.seconds / std::max<int64_t>(1, n);
    out.draft_seconds = timed_draft.seconds / std::max<int64_t>(1, n);
    out.outside_share = (wall - timed_target.seconds - timed_draft.seconds) / wall;
    out.alpha = examined > 0 ? static_cast<double>(accepted) / static_cast<double>(examined) : 0.0;
  }
  return out;
}

// Best-of-`reps` seconds for tok.encode(make(r)), r = 0..reps-1. Tokenizers cache per
// pre-token, so `make` should return a different text each rep to time cold encodes.
template <class Make>
double encode_seconds(const Tokenizer& tok, int reps, Make make, size_t& tokens) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const std::string text = make(r);
    const auto t0 = Clock::now();
    tokens = tok.encode(text, false).size();
    best = std::min(best, since(t0));
  }
  return best;
}

// One word of `bytes` letters with no spaces, different for each `variant`: the pre-tokenizer
// keeps it whole, so BPE merges over all of it (where a naive pair search is quadratic).
std::string long_word(size_t bytes, int variant) {
  std::string w(bytes, 'a');
  for (size_t i = 0; i < w.size(); i += 7) w[i] = 'b';
  w[3] = static_cast<char>('c' + variant % 20);
  return w;
}

// The process's peak resident set (VmHWM), in MiB; ru_maxrss where /proc is not mounted.
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  123456 kB"
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

// Resets the peak that peak_rss_mib() reads to the current resident set (Linux 4.0+); false where
// the kernel does not allow it.
bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

std::string run_capture(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    status = -1;
    return out;
  }
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  status = pclose(p);
  return out;
}

const std::string& llamacpp_script() {
  static const std::string script = std::string(SPECLAB_SOURCE_DIR) + "/scripts/llamacpp_bench.py";
  return script;
}

// Why llama-cpp-python cannot be imported by python_interpreter() (the last line it printed), or ""
// when it can: scripts/llamacpp_bench.py --probe.
std::string llama_cpp_unusable() {
  int status = 0;
  const std::string out = run_capture(shell_quote(python_interpreter()) + " " + shell_quote(llamacpp_script()) +
                                          " --probe 2>&1",
                                      status);
  if (status == 0) return "";
  std::string last;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) last = l;
  if (!last.empty()) return last;
  return WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "killed by a signal";
}

// llama.cpp (scripts/llamacpp_bench.py through llama-cpp-python, run by python_interpreter(); the
// script finds the peer `make peer` installs, scripts/peer.py) on `path`: its JSON report (version,
// model, decode_tok_s, prefill_tok_s, decode_at{context: tok/s}, flash_attn_used{figure: bool}), or
// null when llama-cpp-python is not usable. `flash_attn` is best (each figure the faster of
// llama.cpp's flash attention off and on), on or off.
nlohmann::json run_llama_cpp(const std::string& path, int64_t prefill_len, int steps, int threads,
                             const std::vector<int64_t>& contexts, const std::string& flash_attn) {
  int status = 0;
  std::ostringstream cmd;
  // Each word quoted: a path with a ' broke the command, and the error blamed the peer.
  cmd << shell_quote(python_interpreter()) << " " << shell_quote(llamacpp_script()) << " --model " << shell_quote(path)
      << " --n-prompt " << prefill_len << " --n-decode " << steps << " --threads " << threads
      << " --repeats 2 --flash-attn " << flash_attn;
  if (!contexts.empty()) {
    cmd << " --contexts";
    for (int64_t c : contexts) cmd << " " << c;
  }
  cmd << " 2>/dev/null";
  const std::string out = run_capture(cmd.str(), status);
  if (status != 0) return nullptr;
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("decode_tok_s")) return nullptr;
  return j;
}

// How llama.cpp's figures were run, for the "llama.cpp side" line: "on", "off", or for --flash-attn
// best the setting each figure came from ("best of off and on: on for decode at 64, 512, prefill;
// off for decode at 2048").
std::string flash_attn_summary(const nlohmann::json& lc, const std::vector<int64_t>& contexts) {
  const std::string mode = lc.value("flash_attn", std::string("off"));
  if (mode != "best" || !lc.contains("flash_attn_used")) return mode;
  std::string on, off;
  std::vector<std::string> figures;  // the table's order (json objects iterate alphabetically)
  for (int64_t ctx : contexts) figures.push_back(std::to_string(ctx));
  figures.push_back("prefill");
  for (const std::string& figure : figures) {
    if (!lc["flash_attn_used"].contains(figure)) continue;
    const std::string name = figure == "prefill" ? "prefill" : "decode at " + figure;
    std::string& list = lc["flash_attn_used"][figure].get<bool>() ? on : off;
    list += (list.empty() ? "" : ", ") + name;
  }
  std::string out = "best of off and on per figure:";
  if (!on.empty()) out += " on for " + on;
  if (!off.empty()) out += std::string(on.empty() ? "" : ";") + " off for " + off;
  return out;
}

// Float32 both: the same weights dequantized to F32 in a GGUF file (speclab export) for llama.cpp,
// and SpecLab with --weights f32, both decoding at context `ctx` (the first of --contexts), beside
// the quantized pair at that context. Ratios are SpecLab's rate / llama.cpp's, as in the table.
template <class Say>
void compare_float32(const ModelArgs& margs, const LoadedTarget& m, const nlohmann::json& lc, int64_t prefill_len,
                     int steps, int threads, int64_t ctx, double ours_quantized, const std::string& flash_attn,
                     nlohmann::json& report, Say say) {
  // Keyed by the source's canonical path, size and modification time: by its name alone, another
  // model of that name (a 2-layer export called SmolLM2-135M-Instruct.Q4_1.gguf) was compared
  // against the first one's float32 copy, and a changed file against its old copy.
  const std::string base = m.info.source.substr(m.info.source.find_last_of('/') + 1);
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(m.info.source, ec);
  const auto size = std::filesystem::file_size(m.info.source, ec);
  const auto mtime = std::filesystem::last_write_time(m.info.source, ec).time_since_epoch().count();
  Fnv64 key_hash;
  key_hash.add(canonical.string());
  key_hash.add(std::to_string(size) + "|" + std::to_string(mtime));
  const std::string f32_path =
      models_data_dir() + "/" + base + "." + key_hash.hex() + ".f32.gguf";  // $SPECLAB_MODELS_DIR, as named models
  if (std::FILE* probe = std::fopen(f32_path.c_str(), "rb")) {
    std::fclose(probe);
  } else {
    // Copies under other keys (an earlier version of the file, or another file of that name) would
    // pile up, about 0.5 GB each for SmolLM2: one copy per name is kept.
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(f32_path).parent_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(base + ".", 0) == 0 && name.size() > base.size() + 9 &&
          name.compare(name.size() - 9, 9, ".f32.gguf") == 0)
        std::filesystem::remove(e.path(), ec);
    }
    ExportOptions eo;
    eo.type = GgmlType::F32;
    export_gguf_layers(m.info.source, f32_path, eo);
  }
  const std::string key = std::to_string(ctx);
  const nlohmann::json lc32 = run_llama_cpp(f32_path, prefill_len, steps, threads, {ctx}, flash_attn);
  if (lc32.is_null() || !lc32["decode_at"].contains(key) || !lc["decode_at"].contains(key)) return;
  ModelArgs f32_args = margs;
  f32_args.weights = "f32";
  const std::unique_ptr<LoadedTarget> m32 = load_runtime_model(f32_args);
  cached_step_seconds(*m32->model, *m32->info.tokenizer, 16, 4);
  const double ours32 = 1.0 / cached_step_seconds(*m32->model, *m32->info.tokenizer, ctx, steps);
  const double theirs32 = lc32["decode_at"][key].get<double>(), theirs = lc["decode_at"][key].get<double>();
  say("\nfloat32 both, decode at context %s: SpecLab --weights f32 (%s) %.1f tok/s, llama.cpp on %s %.1f tok/s: "
      "ratio %.2f (as stored: %.1f / %.1f tok/s, ratio %.2f)\n",
      key.c_str(), m32->model->weight_storage().c_str(), ours32, f32_path.c_str(), theirs32, ours32 / theirs32,
      ours_quantized, theirs, ours_quantized / theirs);
  report["float32_both"] = {{"context", ctx},           {"speclab_tok_s", ours32},
                            {"llama_cpp_tok_s", theirs32}, {"ratio", ours32 / theirs32},
                            {"llama_cpp_model", f32_path}};
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  ModelArgs margs;
  std::vector<int64_t> contexts = {64, 512, 2048};
  int64_t prefill_len = 128, verify_ctx = 512;
  int verify_reps = 5;
  int steps = 16, naive_steps = 3;
  std::string llama_cpp = "auto", llama_cpp_flash_attn = "best", draft_model;
  int spec_gamma = 4, spec_steps = 24;
  bool json_out = false, f32_compare = false, step_profile = false, ab = false;
  po::options_description desc("speclab bench");
  margs.add_to(desc);
  desc.add_options()
      ("contexts", po::value(&contexts)->multitoken(), "context lengths for the decode rates (default 64 512 2048, less those beyond the model's context)")
      ("prefill", po::value(&prefill_len)->default_value(prefill_len), "prompt length for the prefill rate")
      ("verify-context", po::value(&verify_ctx)->default_value(verify_ctx), "context of the verification-cost passes")
      ("verify-reps", po::value(&verify_reps)->default_value(verify_reps),
       "rounds of verification passes (one pass of each size per round; the cost is the median of the "
       "rounds' ratios to n = 1, more rounds = steadier on a shared machine)")
      ("steps", po::value(&steps)->default_value(steps), "decode steps timed per context (cached)")
      ("naive-steps", po::value(&naive_steps)->default_value(naive_steps), "steps timed per context (naive)")
      ("llama-cpp", po::value(&llama_cpp)->default_value(llama_cpp),
       "compare with llama.cpp via llama-cpp-python: auto | on | off")
      ("llama-cpp-flash-attn", po::value(&llama_cpp_flash_attn)->default_value(llama_cpp_flash_attn),
       "llama.cpp's flash-attention kernel: best (run it off and on, each figure the faster) | on | off")
      ("f32-compare", po::bool_switch(&f32_compare), "also compare float32 both (an F32 copy of the GGUF for llama.cpp)")
      ("draft-model", po::value(&draft_model),
       "also time speculative steps with this draft_model (a path, named entry or random:<shape>; same device "
       "and dtype): the share of a step spent outside model forwards")
      ("spec-gamma", po::value(&spec_gamma)->default_value(spec_gamma), "drafts per speculative step (--draft-model)")
      ("spec-steps", po::value(&spec_steps)->default_value(spec_steps), "speculative steps timed (--draft-model)")
      ("step-profile", po::bool_switch(&step_profile),
       "also time each step of the layer loop (norms, matmuls, attention, ...) in the verification passes, "
       "over the model's cache and int8 (CPU only)")
      ("ab", po::bool_switch(&ab),
       "also time every verification pass size with ab_variant() at 0 and at 1, alternating pass by pass, and "
       "print B / A: for timing a kernel change in one process (framework/core/ab_variant.h)")
      ("json", po::bool_switch(&json_out), "print one JSON object instead of the tables");
  po::variables_map vm;
  if (!parse_or_help("usage: speclab bench [options]", desc, args, vm)) return kExitOk;
  // One flag per message (one message named all six, and no flag).
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--steps", steps}, {"--naive-steps", naive_steps},
                                    {"--prefill", prefill_len}, {"--verify-reps", verify_reps},
                                    {"--verify-context", verify_ctx}})
    if (value <= 0)
      throw Error(ErrorKind::kConfig, "expected a positive number, found " + std::to_string(value), "command line", flag);
  if (contexts.empty())
    throw Error(ErrorKind::kConfig, "expected at least one context length, found none", "command line", "--contexts");
  for (size_t i = 1; i < contexts.size(); ++i)
    if (contexts[i] <= contexts[i - 1])
      throw Error(ErrorKind::kConfig,
                  "expected increasing context lengths (the ratio is the last over the first), found " +
                      std::to_string(contexts[i]) + " after " + std::to_string(contexts[i - 1]),
                  "command line", "--contexts");
  for (const char* flag : {"spec-gamma", "spec-steps"})
    if (draft_model.empty() && !vm[flag].defaulted())
      throw Error(ErrorKind::kConfig, "only speculative steps use it: give --draft-model too", "command line",
                  std::string("--") + flag);
  if (!draft_model.empty() && (spec_gamma < 1 || spec_gamma > 64))
    throw Error(ErrorKind::kConfig, "expected 1 to 64 drafts per step, found " + std::to_string(spec_gamma),
                "command line", "--spec-gamma");
  if (!draft_model.empty() && spec_steps < 1)
    throw Error(ErrorKind::kConfig, "expected a positive number of steps, found " + std::to_string(spec_steps),
                "command line", "--spec-steps");
  if (llama_cpp != "auto" && llama_cpp != "on" && llama_cpp != "off")
    throw Error(ErrorKind::kConfig, "expected auto, on or off, found '" + llama_cpp + "'", "command line", "--llama-cpp");
  if (llama_cpp_flash_attn != "best" && llama_cpp_flash_attn != "on" && llama_cpp_flash_attn != "off")
    throw Error(ErrorKind::kConfig, "expected best, on or off, found '" + llama_cpp_flash_attn + "'", "command line",
                "--llama-cpp-flash-attn");
  if (llama_cpp == "off" && !vm["llama-cpp-flash-attn"].defaulted())
    throw Error(ErrorKind::kConfig, "configures the llama.cpp comparison: not with --llama-cpp off", "command line",
                "--llama-cpp-flash-attn");
  if (f32_compare && llama_cpp == "off")
    throw Error(ErrorKind::kConfig, "compares with llama.cpp: not with --llama-cpp off", "command line", "--f32-compare");

  const std::unique_ptr<LoadedTarget> target = load_runtime_model(margs);
  const LoadedTarget& m = *target;
  const Model& model = *m.model;
  const ModelConfig& c = model.config();
  const bool on_device = c.device != "cpu";  // CUDA: timings include the device work (logits come back to the host)
  const bool synthetic = m.info.format == "random";
  // The default contexts drop those beyond a small model's context (random:tiny holds 1,024), as the
  // default --verify-context shrinks; contexts given on the command line must fit.
  const bool contexts_given = !(vm["contexts"].empty() || vm["contexts"].defaulted());
  if (!contexts_given) {
    std::vector<int64_t> fit;
    for (int64_t ctx : contexts)
      if (ctx + steps + 1 <= c.max_position_embeddings) fit.push_back(ctx);
    if (!fit.empty()) contexts = fit;
  }
  for (int64_t ctx : contexts) {
    if (ctx <= 0)
      throw Error(ErrorKind::kConfig, "expected positive context lengths, found " + std::to_string(ctx), "command line",
                  "--contexts");
    // `steps` timed steps decode steps + 1 tokens after the context (the first from its prefill),
    // and a run stops where the tokens reach the model's context: one more than ctx + steps must
    // fit, or fewer steps were timed (none at all at context - 1: a made-up rate).
    if (ctx + steps + 1 > c.max_position_embeddings)
      throw Error(ErrorKind::kConfig,
                  "context " + std::to_string(ctx) + " and " + std::to_string(steps) + " steps need " +
                      std::to_string(ctx + steps + 1) + " positions (the prefill's token, then one a step), the model "
                      "context holds " + std::to_string(c.max_position_embeddings),
                  "command line", contexts_given ? "--contexts" : "--steps");
  }
  // The speculative steps run at the first context: each may take gamma + 1 positions, and a run
  // near the end of the context timed fewer steps (none at all, reporting a share of 1.00).
  if (!draft_model.empty()) {
    const int64_t need = contexts.front() + static_cast<int64_t>(spec_steps) * (spec_gamma + 1) + spec_gamma + 2;
    if (need > c.max_position_embeddings)
      throw Error(ErrorKind::kConfig,
                  "expected " + std::to_string(spec_steps) + " speculative steps of up to " +
                      std::to_string(spec_gamma + 1) + " tokens after context " + std::to_string(contexts.front()) +
                      " to fit the model context " + std::to_string(c.max_position_embeddings) + " (they need " +
                      std::to_string(need) + " positions); give fewer --spec-steps or a shorter first context",
                  "command line", "--spec-steps");
  }
  // The verification passes' row counts: up to 33 rows on a device, 17 on the CPU.
  const std::vector<int64_t> verify_ns =
      on_device ? std::vector<int64_t>{1, 2, 5, 9, 17, 33} : std::vector<int64_t>{1, 2, 3, 5, 9, 17};
  // The longest pass after verify_ctx tokens, and its next token: the default shrinks to a small
  // model's context, a value given is refused (it was shrunk silently). The room was 18 positions
  // on a device too, whose 33-row pass then ran past a small model's context (until 2026-12-06).
  const int64_t verify_room = verify_ns.back() + 1;
  if (vm["verify-context"].defaulted())
    verify_ctx = std::min<int64_t>(verify_ctx, c.max_position_embeddings - verify_room);
  if (verify_ctx < 1)  // shrunk to nothing: a model context of at most verify_room positions
    throw Error(ErrorKind::kConfig,
                "expected a model context above " + std::to_string(verify_room) + " positions for the " +
                    std::to_string(verify_ns.back()) + "-row verification passes, found " +
                    std::to_string(c.max_position_embeddings),
                "command line", "--verify-context");
  if (verify_ctx + verify_room > c.max_position_embeddings)
    throw Error(ErrorKind::kConfig,
                "expected at most " + std::to_string(c.max_position_embeddings - verify_room) +
                    " (the model context less the " + std::to_string(verify_room) + " positions of a " +
                    std::to_string(verify_ns.back()) + "-row pass and its next token), found " +
                    std::to_string(verify_ctx),
                "command line", "--verify-context");
  const bool peer_runs_it = m.info.format == "gguf" && !on_device;
  if (llama_cpp == "on" && !peer_runs_it)
    throw Error(ErrorKind::kConfig,
                "expected a GGUF model on the CPU for the llama.cpp comparison, found a " + m.info.format + " model on " +
                    c.device,
                "command line", "--llama-cpp");
  // Where llama.cpp cannot run the model (--llama-cpp auto), its flags were ignored without a word.
  for (const auto& [flag, given] : {std::pair<const char*, bool>{"--f32-compare", f32_compare},
                                    {"--llama-cpp-flash-attn", !vm["llama-cpp-flash-attn"].defaulted()}})
    if (given && !peer_runs_it)
      throw Error(ErrorKind::kConfig,
                  "configures the llama.cpp comparison, which runs GGUF models on the CPU only; found a " +
                      m.info.format + " model on " + c.device,
                  "command line", flag);
  // --llama-cpp on: a peer that cannot run is found now, not after every SpecLab figure.
  if (llama_cpp == "on") {
    const std::string why = llama_cpp_unusable();
    if (!why.empty())
      throw Error(ErrorKind::kConfig,
                  "llama-cpp-python is not usable by " + python_interpreter() + " (make peer installs it in .cache/peer): " +
                      why,
                  "command line", "--llama-cpp");
  }
  if (prefill_len >= c.max_position_embeddings)
    throw Error(ErrorKind::kConfig,
                "expected a prompt shorter than the model context " + std::to_string(c.max_position_embeddings) +
                    ", found " + std::to_string(prefill_len),
                "command line", "--prefill");
  // The draft is timed last; a missing or unfit one is found now, not after every other figure
  // (loaded once to check, then again where it is timed). The check's load is then taken out of
  // the peak, so that peak RSS stays the target's (until 2026-11-29 it counted the draft too).
  bool rss_without_draft = true;
  if (!draft_model.empty()) {
    try {
      const LoadedModel dl = load_model(draft_source_for(m.info, draft_model));
      if (dl.config.vocab_size != c.vocab_size)
        throw Error(ErrorKind::kConfig,
                    "expected a draft model with the target's vocabulary of " + std::to_string(c.vocab_size) +
                        " tokens (a draft model shares the target's tokenizer), found " +
                        std::to_string(dl.config.vocab_size),
                    draft_model);
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), e.file().empty() ? draft_model : e.file(),
                  e.field().empty() ? "--draft-model" : "--draft-model: " + e.field());
    }
    rss_without_draft = reset_peak_rss();
  }
  // Human-readable lines go to stdout unless --json, where one JSON object is printed at the end.
  auto say = [&](const char* fmt, auto... a) {
    if (!json_out) std::printf(fmt, a...);
  };
  nlohmann::json report;
  const int threads = compute_threads();
  say("SpecLab bench — %s (%s), libtorch %s, %d threads, --weights %s --activations %s, device %s, dtype %s, K/V %s: "
      "%s in memory (file: %s)\n",
      m.info.source.c_str(), m.info.format.c_str(), SPECLAB_TORCH_VERSION, threads, margs.weights.c_str(),
      margs.activations.c_str(), c.device.c_str(), c.dtype.c_str(), c.kv_geometry().dtype.c_str(),
      model.weight_storage().c_str(),
      m.info.storage_types.c_str());
  report["device"] = c.device;
  report["dtype"] = c.dtype;
  report["kv_dtype"] = c.kv_geometry().dtype;
  report["model"] = m.info.source;
  report["threads"] = threads;
  report["weights"] = margs.weights;
  report["activations"] = margs.activations;
  report["weight_storage"] = model.weight_storage();
  report["load_seconds"] = m.load_seconds;
  report["kernel_isa"] = kernel_isa_name(kernel_isa());
  if (on_device) {
    const auto* llama = dynamic_cast<const LlamaModel*>(&model);
    const bool graphs = llama != nullptr && llama->uses_cuda_graphs();
    say("model load: %.2f s; CUDA graphs %s\n", m.load_seconds,
        graphs ? "on (forwards of up to 64 rows replay captured graphs)" : "off (SPECLAB_CUDA_GRAPHS=0)");
    report["cuda_graphs"] = graphs;
  } else
    say("model load: %.2f s; kernels: %s (SPECLAB_KERNEL_ISA caps it)\n", m.load_seconds, kernel_isa_name(kernel_isa()));

  // Tokenizer: prose (pre-tokens repeat, so the per-word cache is used as in real prompts) and
  // one long word (no cache hits; linear vs quadratic shows in the 2x ratio).
  if (!synthetic) {
    const Tokenizer& tok = *m.info.tokenizer;
    auto prose = [](int variant) {
      std::string t;
      for (int i = 0; t.size() < 10 * 1024; ++i)
        t += "Speculative decoding drafts tokens cheaply and verifies them in one pass, step " +
             std::to_string(i) + "/" + std::to_string(variant) + ".\n";
      return t;
    };
    size_t n_prose = 0, n1 = 0, n2 = 0;
    const double tp = encode_seconds(tok, 3, prose, n_prose);
    const double t1 = encode_seconds(tok, 3, [](int r) { return long_word(10000, r); }, n1);
    const double t2 = encode_seconds(tok, 3, [](int r) { return long_word(20000, r); }, n2);
    say("tokenizer: 10 KB prose %.2f ms (%zu tokens, %.1f MB/s); one 10 000-byte word %.2f ms, "
        "20 000-byte word %.2f ms: ratio %.2f (linear ~2, quadratic ~4)\n",
        tp * 1e3, n_prose, 10.24e3 / tp / 1e6, t1 * 1e3, t2 * 1e3, t2 / t1);
    report["tokenizer"] = {{"prose_10kb_ms", tp * 1e3}, {"word_ratio_2x", t2 / t1}};
  }

  // Warm up allocator and caches.
  cached_step_seconds(model, *m.info.tokenizer, 16, 4);

  const double pf = prefill_seconds(model, prefill_len, 3);
  const double prefill_rate = prefill_len / pf;
  say("\nprefill: %lld tokens in %.4f s = %.1f tok/s\n", static_cast<long long>(prefill_len), pf, prefill_rate);
  report["prefill_tok_s"] = prefill_rate;

  say("\n%-10s %16s %16s %14s\n", "context", "cached tok/s", "naive tok/s", "naive/cached");
  std::vector<double> decode_rate;
  for (int64_t ctx : contexts) {
    const double tc = cached_step_seconds(model, *m.info.tokenizer, ctx, steps);
    decode_rate.push_back(1.0 / tc);
    report["decode_tok_s"][std::to_string(ctx)] = 1.0 / tc;
    if (ctx > 1024) {  // a naive step recomputes ctx tokens: seconds each beyond this
      say("%-10lld %16.1f %16s %14s\n", static_cast<long long>(ctx), 1.0 / tc, "-", "-");
      continue;
    }
    const double tn = naive_step_seconds(model, ctx, naive_steps);
    say("%-10lld %16.1f %16.2f %13.1fx\n", static_cast<long long>(ctx), 1.0 / tc, 1.0 / tn, tn / tc);
    report["naive_tok_s"][std::to_string(ctx)] = 1.0 / tn;
  }
  say("(per-token time at each context; naive recomputes all tokens every step, so generating T tokens "
      "costs O(T^2) naive vs O(T) cached)\n");
  // The same two contexts over an int8 cache (kv_dtype int8, CPU only), side by side with the
  // model's own cache: the long-context figure with (head_dim + 4) / (4 head_dim) of float32's
  // cache bytes (0.27 for SmolLM2).
  // With one context, that one (the int8 verification and step profile below were dropped with it).
  std::vector<double> decode_rate8;
  if (c.device == "cpu" && c.kv_geometry().dtype != "int8") {
    std::vector<int64_t> at = {contexts.front()};
    if (contexts.size() > 1) at.push_back(contexts.back());
    std::string line;
    for (int64_t ctx : at) {
      decode_rate8.push_back(1.0 / cached_step_seconds(model, *m.info.tokenizer, ctx, steps, "int8"));
      char part[96];
      std::snprintf(part, sizeof part, "%s%.1f tok/s at context %lld", line.empty() ? "" : ", ", decode_rate8.back(),
                    static_cast<long long>(ctx));
      line += part;
      report["decode_tok_s_kv_int8"][std::to_string(ctx)] = decode_rate8.back();
    }
    say("int8 K/V cache (--kv-dtype int8): %s\n", line.c_str());
  }

  // Verification cost: one forward of n = gamma + 1 tokens vs one decode step. Leviathan et al.'s
  // speedup formula assumes the ratio is 1; on a CPU it grows with n.
  say("\nverification batch at context %lld: forward time for n new tokens, %d rounds of one pass per n\n"
      "(ms: the fastest pass; vs n = 1: the median of each round's ratio)\n",
      static_cast<long long>(verify_ctx), verify_reps);
  say("%-6s %10s %14s\n", "n", "ms", "vs n = 1");
  const VerificationTimes vt = verification_rounds(model, verify_ctx, verify_ns, verify_reps);
  const std::map<int64_t, double>& verify_cost = vt.cost;
  for (int64_t n : verify_ns) {
    const double t = vt.best_s.at(n);
    say("%-6lld %10.2f %13.2fx\n", static_cast<long long>(n), t * 1e3, vt.cost.at(n));
    report["verify_cost"][std::to_string(n)] = vt.cost.at(n);
    report["verify_ms"][std::to_string(n)] = t * 1e3;
  }
  // The same passes over an int8 cache (beside the int8 decode rates above): on AVX-512 VNNI its
  // attention runs on integer dot products (models/llama/attention_int8_vnni.h).
  std::map<int64_t, double> verify_cost8;
  double verify_one_row8_s = 0;  // the median one-row pass over the int8 cache
  if (!decode_rate8.empty()) {
    const VerificationTimes v8 = verification_rounds(model, verify_ctx, {1, 5, 9, 17}, verify_reps, "int8");
    verify_one_row8_s = v8.median_s.at(1);
    say("over an int8 K/V cache (--kv-dtype int8): n = 1 %.2f ms", v8.best_s.at(1) * 1e3);
    report["verify_ms_kv_int8"]["1"] = v8.best_s.at(1) * 1e3;
    for (int64_t n : {5, 9, 17}) {
      verify_cost8[n] = v8.cost.at(n);
      say(", n = %lld %.2f ms (%.2fx)", static_cast<long long>(n), v8.best_s.at(n) * 1e3, v8.cost.at(n));
      report["verify_cost_kv_int8"][std::to_string(n)] = v8.cost.at(n);
      report["verify_ms_kv_int8"][std::to_string(n)] = v8.best_s.at(n) * 1e3;  // printed, not written, until 2026-12-06
    }
    say("\n");
  }
  if (ab) {
    const int ab_reps = verify_reps + verify_reps % 2;  // even: A and B go first equally often
    const AbTimes abt = ab_rounds(model, verify_ctx, verify_ns, ab_reps, "");
    say("\nA/B (--ab): passes at context %lld with ab_variant() 0 (A) and 1 (B), alternated pass by pass, %d rounds; "
        "B / A is the median of the rounds' ratios (nothing in the tree reads the switch: on committed code this is an "
        "A/A run, its ratios the noise)\n",
        static_cast<long long>(verify_ctx), ab_reps);
    say("%-6s %10s %10s %8s\n", "n", "A ms", "B ms", "B / A");
    report["ab"]["context"] = verify_ctx;
    report["ab"]["rounds"] = ab_reps;
    for (int64_t n : verify_ns) {
      say("%-6lld %10.3f %10.3f %8.3f\n", static_cast<long long>(n), abt.a_s.at(n) * 1e3, abt.b_s.at(n) * 1e3,
          abt.ratio.at(n));
      report["ab"]["passes"][std::to_string(n)] = {
          {"a_ms", abt.a_s.at(n) * 1e3}, {"b_ms", abt.b_s.at(n) * 1e3}, {"b_over_a", abt.ratio.at(n)}};
    }
  }
  if (step_profile) {
    if (on_device)
      say("--step-profile: skipped on %s (the steps are asynchronous launches there)\n", c.device.c_str());
    else {
      print_step_profile(model, verify_ctx, verify_ns, verify_reps, "", !json_out, report);
      if (!decode_rate8.empty()) print_step_profile(model, verify_ctx, verify_ns, verify_reps, "int8", !json_out, report);
    }
  }

  const double rss_mib = peak_rss_mib();
  const double bw = on_device ? device_copy_bandwidth(c.device, int64_t(2) << 30) : read_bandwidth(int64_t(1) << 30);
  const double wbytes = static_cast<double>(model.step_weight_bytes());
  const double floor_s = wbytes / bw;
  const double floor_share = decode_rate.front() * floor_s;
  if (on_device)
    say("\ndevice memory bandwidth (copy of 2 GiB on %s, bytes read + written): %.1f GB/s; weights %.1f MB read per "
        "token (as held on the device)\n",
        c.device.c_str(), bw / 1e9, wbytes / 1e6);
  else
    say("\nmemory bandwidth (sum over 1 GiB): %.2f GB/s; weights %.1f MB read per token (of %.1f MB held in memory: "
        "an untied embedding table is read only at the step's token rows)\n",
        bw / 1e9, wbytes / 1e6, static_cast<double>(model.weight_bytes()) / 1e6);
  say("bandwidth floor: %.2f ms/token = %.1f tok/s; measured cached decode at context %lld: %.1f tok/s "
      "(%.0f%% of the floor rate)\n",
      floor_s * 1e3, 1.0 / floor_s, static_cast<long long>(contexts.front()), decode_rate.front(), 100.0 * floor_share);
  // Weights that fit in the last-level cache are read from it, not from memory: the floor is then
  // no floor (stories260K's 1 MB decoded at 209% of it), and its share is no figure of merit.
  const int64_t llc = on_device ? 0 : last_level_cache_bytes();
  const bool floor_binds = llc == 0 || wbytes > static_cast<double>(llc);
  if (!floor_binds)
    say("  (the weights, %.1f MB, fit in the %.0f MB last-level cache: they are read from it, not from memory, so "
        "this floor does not bind and its share is no target)\n",
        wbytes / 1e6, static_cast<double>(llc) / 1e6);
  report["bandwidth_gb_s"] = bw / 1e9;
  report["floor_tok_s"] = 1.0 / floor_s;
  report["floor_share"] = floor_share;
  report["floor_binds"] = floor_binds;
  report["peak_rss_mib"] = rss_mib;

  // The arithmetic roof of the verification passes (experiments/app/pass_roof.h): what no pass of
  // n rows can beat on this CPU, from the bytes it reads and its MACs at the CPU's peak rates.
  std::map<int64_t, double> roof_cost, roof_cost8;
  const auto* llama_model = dynamic_cast<const LlamaModel*>(&model);
  if (!on_device && llama_model != nullptr && kernel_isa() != KernelIsa::kScalar) {
    const cpu::ArithPeak peak = cpu::measure_arith_peak(kernel_isa());
    const LlamaModel::RowMacs mm = llama_model->matmul_macs_per_row();
    const double att = attention_macs_per_row(c.num_hidden_layers, c.num_attention_heads, c.head_dim, verify_ctx);
    auto roof_for = [&](const std::string& dtype) {
      KvGeometry g = c.kv_geometry();
      g.dtype = dtype;
      PassRoof r;
      r.bytes = wbytes + static_cast<double>(g.bytes_per_token(g.element_bytes())) * static_cast<double>(verify_ctx);
      r.bandwidth = bw;
      const bool int8_attention = cpu::int8_vnni_attention(
          dtype == "int8" ? cpu::KvElement::kInt8 : cpu::KvElement::kFloat16, c.head_dim);
      r.int8_macs_per_row = mm.int8 + (int8_attention ? att : 0.0);
      r.f32_macs_per_row = mm.f32 + (int8_attention ? 0.0 : att);
      r.int8_macs_per_s = peak.int8_macs_per_s;
      r.f32_macs_per_s = peak.f32_macs_per_s;
      return std::make_pair(r, int8_attention);
    };
    // One cache's roof: the table of n, and the JSON under `key`; returns the roof as used.
    // one_row_s: that cache's measured one-row pass (the median). The roofline takes the best rates
    // seen as the machine's: where that pass read its bytes faster than the bandwidth test (the
    // kernels streamed faster than the test's sum, or the bytes sat in the caches), its own rate
    // is the memory's.
    auto print_roof = [&](PassRoof r, bool int8_attention, double one_row_s, const std::string& label,
                          std::map<int64_t, double>& cost, const std::string& key) {
      if (r.memory_seconds() > one_row_s) {
        say("%s: the one-row pass read its %.1f MB at %.2f GB/s, faster than the bandwidth test's %.2f: the roof takes "
            "its rate as the memory's\n",
            label.c_str(), r.bytes / 1e6, r.bytes / one_row_s / 1e9, r.bandwidth / 1e9);
        r.bandwidth = r.bytes / one_row_s;
      }
      report[key + "_bandwidth_gb_s"] = r.bandwidth / 1e9;
      say("%s: a row does %.1f M MACs of int8 matmuls, %.1f M of float32 matmuls and %.1f M of %s attention, at "
          "least %.3f ms; a pass reads %.1f MB, at least %.3f ms at %.2f GB/s; a pass of n rows takes at least "
          "max(%.3f, n x %.3f) ms\n",
          label.c_str(), mm.int8 / 1e6, mm.f32 / 1e6, att / 1e6, int8_attention ? "int8" : "float32",
          r.row_seconds() * 1e3, r.bytes / 1e6, r.memory_seconds() * 1e3, r.bandwidth / 1e9, r.memory_seconds() * 1e3,
          r.row_seconds() * 1e3);
      say("%-6s %10s %28s %24s\n", "n", "roof ms", "vs the measured one-row pass", "vs the one-row roof");
      for (int64_t n : {5, 9, 17}) {
        cost[n] = r.seconds(n) / one_row_s;
        const double at_roof = r.seconds(n) / r.seconds(1);
        say("%-6lld %10.2f %28.2f %24.2f\n", static_cast<long long>(n), r.seconds(n) * 1e3, cost[n], at_roof);
        report[key][std::to_string(n)] = cost[n];
        report[key + "_at_roof"][std::to_string(n)] = at_roof;
      }
      return r;
    };
    const auto [roof, att_int8] = roof_for(c.kv_geometry().dtype);
    if (roof.valid()) {
      say("\narithmetic roof at context %lld (lower bounds, experiments/app/pass_roof.h): peak rates on %d threads, "
          "float32 %.1f G MAC/s (%s), int8 %.1f G MAC/s (%s); the middle column is the least a pass can cost against "
          "the measured one-row pass (its median), the last what a runtime at the roof in both passes would measure\n",
          static_cast<long long>(verify_ctx), peak.threads, peak.f32_macs_per_s / 1e9, peak.f32_instruction.c_str(),
          peak.int8_macs_per_s / 1e9, peak.int8_instruction.c_str());
      const PassRoof used = print_roof(roof, att_int8, vt.median_s.at(1),
                                       "the model's cache (" + c.kv_geometry().dtype + ")", roof_cost, "verify_cost_roof");
      report["arith_peak"] = {{"threads", peak.threads},
                              {"f32_gmacs", peak.f32_macs_per_s / 1e9},
                              {"f32_instruction", peak.f32_instruction},
                              {"int8_gmacs", peak.int8_macs_per_s / 1e9},
                              {"int8_instruction", peak.int8_instruction}};
      report["pass_roof"] = {{"context", verify_ctx},
                             {"row_ms", used.row_seconds() * 1e3},
                             {"memory_ms", used.memory_seconds() * 1e3},
                             {"one_row_ms", vt.median_s.at(1) * 1e3},
                             {"matmul_int8_macs", mm.int8},
                             {"matmul_f32_macs", mm.f32},
                             {"attention_macs", att},
                             {"attention_int8", att_int8}};
      if (verify_one_row8_s > 0) {
        const auto [roof8, att8_int8] = roof_for("int8");
        const PassRoof used8 =
            print_roof(roof8, att8_int8, verify_one_row8_s, "an int8 K/V cache", roof_cost8, "verify_cost_roof_kv_int8");
        // Its own pass figures, as pass_roof's (docs/performance.md names the _kv_int8 twin; the JSON
        // had none, so verify_cost_roof_kv_int8 could not be recomputed from it; until 2026-12-07).
        report["pass_roof_kv_int8"] = {{"context", verify_ctx},
                                       {"row_ms", used8.row_seconds() * 1e3},
                                       {"memory_ms", used8.memory_seconds() * 1e3},
                                       {"one_row_ms", verify_one_row8_s * 1e3},
                                       {"attention_int8", att8_int8}};
      }
    }
  } else if (!on_device && llama_model != nullptr) {
    say("\narithmetic roof: not printed under the scalar kernels (SPECLAB_KERNEL_ISA=scalar): no one instruction "
        "sets their rate\n");
  }

  // Speculative steps with a draft model: how much of a step is the engine's own.
  SpecTiming spec;
  if (!draft_model.empty()) {
    const ModelSource ds = draft_source_for(m.info, draft_model);  // as the draft_model drafter loads it
    LoadedModel dl = load_model(ds);
    std::unique_ptr<Model> dm = build_model(dl, ds);
    const std::string dstorage = dm->weight_storage();
    spec = spec_step_timing(model, std::move(dm), *m.info.tokenizer, contexts.front(), spec_gamma, spec_steps);
    say("\nspeculative steps, draft %s (%s), gamma %d, context %lld, greedy, %lld steps: %.2f ms per step = target "
        "forward %.2f + draft forwards %.2f + outside the forwards %.3f ms (%.1f%%); alpha %.2f (accepted / "
        "examined positions)\n",
        draft_model.c_str(), dstorage.c_str(), spec_gamma, static_cast<long long>(contexts.front()),
        static_cast<long long>(spec.steps), spec.step_seconds * 1e3, spec.target_seconds * 1e3, spec.draft_seconds * 1e3,
        (spec.step_seconds - spec.target_seconds - spec.draft_seconds) * 1e3, 100.0 * spec.outside_share, spec.alpha);
    report["spec"] = {{"draft_model", draft_model}, {"gamma", spec_gamma}, {"steps", spec.steps},
                      {"step_ms", spec.step_seconds * 1e3},
                      {"target_ms", spec.target_seconds * 1e3}, {"draft_ms", spec.draft_seconds * 1e3},
                      {"outside_share", spec.outside_share}, {"alpha", spec.alpha}};
  }

  // llama.cpp on the same file, then the figures side by side.
  nlohmann::json lc;
  if (llama_cpp != "off" && m.info.format == "gguf" && !on_device) {
    std::vector<int64_t> lc_contexts = contexts;
    lc = run_llama_cpp(m.info.source, prefill_len, steps, threads, lc_contexts, llama_cpp_flash_attn);
    if (lc.is_null() && llama_cpp == "on")
      throw Error(ErrorKind::kConfig,
                  "llama-cpp-python is not usable by " + python_interpreter() + " (make peer installs it in .cache/peer)",
                  "--llama-cpp");
    if (lc.is_null()) {
      say("\nllama.cpp: not usable by %s (make peer installs it in .cache/peer)\n", python_interpreter().c_str());
      // --json prints nothing else: a script could not tell a broken peer from a model that is no GGUF.
      report["llama_cpp_unavailable"] =
          "llama-cpp-python is not usable by " + python_interpreter() + " (make peer installs it in .cache/peer)";
    }
  } else if (llama_cpp != "off") {
    report["llama_cpp_unavailable"] = on_device ? "the model runs on a GPU: llama.cpp's side is CPU-only here"
                                                : "the model is not a GGUF file, which llama.cpp's side runs";
  }
  report["llama_cpp"] = lc;
  // llama.cpp runs the GGUF as stored (its matrices quantized, int8 activations, a float16 cache):
  // where SpecLab runs otherwise, the ratios compare two precisions, and say so.
  if (!lc.is_null()) {
    std::string unlike;
    if (margs.weights != "native") unlike += " --weights " + margs.weights;
    if (margs.activations == "f32") unlike += " --activations f32";
    if (margs.dtype != "auto" && margs.dtype != "float32") unlike += " --dtype " + margs.dtype;  // its matrices in it
    if (c.kv_geometry().dtype != "float16") unlike += " K/V " + c.kv_geometry().dtype;
    if (!unlike.empty()) {
      say("\nnote: SpecLab runs%s; llama.cpp the GGUF as stored with a float16 K/V cache: the ratios below compare "
          "different precisions\n",
          unlike.c_str());
      report["llama_cpp_unlike"] = unlike.substr(1);
    }
  }
  say("\n%-58s %10s %10s %8s %s\n", "figure", "SpecLab", "llama.cpp", "ratio", "target");
  auto row = [&](const std::string& name, double ours, double theirs, const char* target) {
    const double ratio = theirs > 0 ? ours / theirs : 0.0;
    if (theirs > 0)
      say("%-58s %10.2f %10.2f %8.2f %s\n", name.c_str(), ours, theirs, ratio, target);
    else
      say("%-58s %10.2f %10s %8s %s\n", name.c_str(), ours, "-", "-", target);
    // No llama.cpp figure: null, not 0 (it was 0.0, which reads as a measured rate).
    report["figures"].push_back({{"figure", name},
                                 {"speclab", ours},
                                 {"llama_cpp", theirs > 0 ? nlohmann::json(theirs) : nlohmann::json()},
                                 {"ratio", theirs > 0 ? nlohmann::json(ratio) : nlohmann::json()},
                                 {"target", target}});
  };
  for (size_t i = 0; i < contexts.size(); ++i) {
    const std::string key = std::to_string(contexts[i]);
    const double theirs = !lc.is_null() && lc["decode_at"].contains(key) ? lc["decode_at"][key].get<double>() : 0.0;
    row("decode tok/s, context " + key, decode_rate[i], theirs, "ratio >= 1.0");
  }
  row("prefill tok/s, " + std::to_string(prefill_len) + " tokens", prefill_rate,
      lc.is_null() ? 0.0 : lc["prefill_tok_s"].get<double>(), "ratio >= 1.3");
  row("decode as a share of the bandwidth floor, context " + std::to_string(contexts.front()), floor_share, 0.0,
      !floor_binds ? "none (weights in cache)" : on_device ? ">= 0.70" : ">= 0.50");
  const char* verify_targets[] = {on_device ? "<= 1.1" : "<= 1.15", "<= 1.35", "<= 2.0"};
  int vi = 0;
  for (int64_t n : {5, 9, 17}) {
    row("verification of n = " + std::to_string(n) + " vs one decode step, context " + std::to_string(verify_ctx),
        verify_cost.at(n), 0.0, verify_targets[vi++]);
    if (roof_cost.count(n))
      row("    its arithmetic roof on this CPU (n = " + std::to_string(n) + ")", roof_cost[n], 0.0, "(lower bound)");
  }
  vi = 0;
  for (int64_t n : {5, 9, 17})
    if (verify_cost8.count(n)) {
      row("... n = " + std::to_string(n) + " over an int8 K/V cache (--kv-dtype int8)", verify_cost8[n], 0.0,
          verify_targets[vi++]);
      if (roof_cost8.count(n))
        row("    its arithmetic roof on this CPU (n = " + std::to_string(n) + ", int8 K/V)", roof_cost8[n], 0.0,
            "(lower bound)");
    }
  if (!draft_model.empty())
    row("speculative step: share outside model forwards, gamma " + std::to_string(spec_gamma), spec.outside_share, 0.0,
        "<= 0.03");
  // The long-context ratio beside llama.cpp's own (the same two contexts, its float16 cache) and
  // beside its bandwidth floor: a step reads the weights and every cached token's K and V, so at
  // best the ratio is (W + kv(front)) / (W + kv(back)) for weight bytes W and kv(C) = C K/V bytes
  // per token. When K/V outweigh the weights at long contexts, no kernel can beat that floor.
  const std::string front_key = std::to_string(contexts.front()), back_key = std::to_string(contexts.back());
  const double lc_ratio = !lc.is_null() && lc["decode_at"].contains(front_key) && lc["decode_at"].contains(back_key)
                              ? lc["decode_at"][back_key].get<double>() / lc["decode_at"][front_key].get<double>()
                              : 0.0;
  if (contexts.size() > 1)  // one context has no ratio (it printed "at 32 / at 32" = 1.00)
    row("decode at context " + back_key + " / at " + front_key, decode_rate.back() / decode_rate.front(), lc_ratio,
        ">= 0.8");
  std::string floor_lines;
  auto context_floor = [&](const std::string& dtype) {
    KvGeometry g = c.kv_geometry();
    g.dtype = dtype;
    const double per_token = static_cast<double>(g.bytes_per_token(g.element_bytes()));
    const double kv_front = per_token * static_cast<double>(contexts.front()),
                 kv_back = per_token * static_cast<double>(contexts.back());
    const double ratio = (wbytes + kv_front) / (wbytes + kv_back);
    char line[320];
    std::snprintf(line, sizeof line,
                  "bandwidth floor of decode at context %s / at %s, %s K/V: %.2f (a step reads weights %.1f MB + K/V "
                  "%.1f MB at context %s, %.1f MB at %s)\n",
                  back_key.c_str(), front_key.c_str(), dtype.c_str(), ratio, wbytes / 1e6, kv_back / 1e6,
                  back_key.c_str(), kv_front / 1e6, front_key.c_str());
    floor_lines += line;
    report["context_ratio_floor"][dtype] = ratio;
  };
  const std::string kv_dtype = c.kv_geometry().dtype;
  if (contexts.size() > 1 && !on_device) context_floor(kv_dtype);
  if (decode_rate8.size() > 1) {
    row("... over an int8 K/V cache (--kv-dtype int8)", decode_rate8[1] / decode_rate8[0], 0.0, ">= 0.8");
    context_floor("int8");
  }
  say("%s", floor_lines.c_str());
  if (!lc.is_null()) {
    say("llama.cpp side: llama-cpp-python %s on %s (%s), %d threads, flash attention %s\n",
        lc["version"].get<std::string>().c_str(), lc["model"].get<std::string>().c_str(), m.info.storage_types.c_str(),
        threads, flash_attn_summary(lc, contexts).c_str());
  }

  if (f32_compare && !lc.is_null())
    compare_float32(margs, m, lc, prefill_len, steps, threads, contexts.front(), decode_rate.front(),
                    llama_cpp_flash_attn, report, say);
  say("\npeak RSS: %.1f MiB (SpecLab, measured before the bandwidth and llama.cpp runs%s)\n", rss_mib,
      rss_without_draft ? "" : "; it includes the --draft-model check's load: this kernel cannot reset the peak");
  if (json_out) std::printf("%s\n", report.dump(2).c_str());
  return kExitOk;
}

}  // namespace speclab::cli
