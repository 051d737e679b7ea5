// speclab bench — runtime throughput, measured side by side in one run:
//   prefill tok/s; per-token decode rate at several context lengths, cached vs naive (the naive
//   mode's cost per token grows linearly with context, so its total is quadratic); decode rate
//   against the memory-bandwidth floor (weight bytes per token / measured read bandwidth);
//   peak RSS; model load time; tokenizer encode time, with a linearity ratio (a 2x longer input
//   should take about 2x, not 4x); and, when llama-cpp-python is installed, llama.cpp's decode at
//   the same contexts and its prefill on the same GGUF, ending in one table of the runtime
//   figures with their ratios and targets (tracker issue 12). --json prints it all as one object.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <sys/resource.h>

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
#include "framework/core/error.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/observers.h"
#include "framework/kv/contiguous_kv.h"
#include "models/llama/gemv.h"
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
double cached_step_seconds(const Model& model, const TokenDecoder& decoder, int64_t ctx, int steps) {
  const ModelConfig& c = model.config();
  PrivateKv kv(c, {}, static_cast<size_t>(ctx + steps + 1));
  Session session(model, decoder, kv.target());
  PhaseTimer timer;
  session.add_observer(timer);
  GenerationOptions gen;
  gen.max_new_tokens = steps + 1;  // the first token comes from the prefill
  gen.ignore_eos = true;
  at::Tensor ids = synthetic_tokens(ctx, c.vocab_size);
  const Method ar;  // no drafter
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

// Seconds for one forward of n new tokens on top of `ctx` cached ones (a verification pass of
// gamma = n - 1 drafts), best of `reps` (the cache is rolled back between them).
double batch_forward_seconds(const Model& model, int64_t ctx, int64_t n, int reps) {
  const ModelConfig& c = model.config();
  ContiguousKv kv(c.kv_geometry(), ctx + n);
  model.forward(synthetic_tokens(ctx, c.vocab_size), at::arange(ctx, at::kLong), kv.append_view(ctx),
                ForwardOptions{{}, 1});
  kv.commit(ctx);
  at::Tensor toks = synthetic_tokens(n, c.vocab_size), pos = at::arange(ctx, ctx + n, at::kLong);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    model.forward(toks, pos, kv.append_view(n));
    best = std::min(best, since(t0));
  }
  return best;
}

// Read bandwidth in bytes/s: summing a buffer much larger than the caches on the kernels'
// threads (the same pool the matmuls use).
double read_bandwidth(int64_t bytes) {
  const int64_t n = bytes / 4;
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  const int64_t chunk = int64_t(1) << 16;
  std::vector<double> partial(static_cast<size_t>((n + chunk - 1) / chunk));
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    parallel_chunks(n, chunk, compute_threads(), [&](int64_t b, int64_t e) {
      float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      for (; i < e; ++i) s0 += buf[i];
      partial[static_cast<size_t>(b / chunk)] = s0 + s1 + s2 + s3;
    });
    volatile double total = 0.0;
    for (double p : partial) total = total + p;
    best = std::min(best, since(t0));
  }
  return static_cast<double>(bytes) / best;
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

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
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

// llama.cpp (scripts/llamacpp_bench.py through llama-cpp-python) on `path`: its JSON report
// (version, model, decode_tok_s, prefill_tok_s, decode_at{context: tok/s}), or null when
// llama-cpp-python is not usable.
nlohmann::json run_llama_cpp(const std::string& path, int64_t prefill_len, int steps, int threads,
                             const std::vector<int64_t>& contexts) {
  int status = 0;
  const std::string script = std::string(SPECLAB_SOURCE_DIR) + "/scripts/llamacpp_bench.py";
  std::ostringstream cmd;
  cmd << "python3 " << script << " --model '" << path << "' --n-prompt " << prefill_len << " --n-decode "
      << std::max(steps, 16) << " --threads " << threads << " --repeats 2";
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

// Float32 both: the same weights dequantized to F32 in a GGUF file (speclab export) for llama.cpp,
// and SpecLab with --weights f32.
template <class Say>
void compare_float32(const ModelArgs& margs, const LoadedTarget& m, const nlohmann::json& lc, int64_t prefill_len,
                     int steps, int threads, int64_t ctx, Say say) {
  const std::string base = m.info.source.substr(m.info.source.find_last_of('/') + 1);
  const std::string f32_path = std::string(SPECLAB_SOURCE_DIR) + "/.cache/models/" + base + ".f32.gguf";
  if (std::FILE* probe = std::fopen(f32_path.c_str(), "rb")) {
    std::fclose(probe);
  } else {
    ExportOptions eo;
    eo.type = GgmlType::F32;
    export_gguf_layers(m.info.source, f32_path, eo);
  }
  const nlohmann::json lc32 = run_llama_cpp(f32_path, prefill_len, steps, threads, {});
  if (lc32.is_null()) return;
  ModelArgs f32_args = margs;
  f32_args.weights = "f32";
  const std::unique_ptr<LoadedTarget> m32 = load_runtime_model(f32_args);
  cached_step_seconds(*m32->model, *m32->info.tokenizer, 16, 4);
  const double ours32 = cached_step_seconds(*m32->model, *m32->info.tokenizer, ctx, steps);
  say("\nfloat32 both: SpecLab --weights f32 (%s) %.1f tok/s, llama.cpp on %s %.1f tok/s (llama.cpp quantized: "
      "%.1f): SpecLab decode time / llama.cpp decode time = %.2fx\n",
      m32->model->weight_storage().c_str(), 1.0 / ours32, f32_path.c_str(), lc32["decode_tok_s"].get<double>(),
      lc["decode_tok_s"].get<double>(), lc32["decode_tok_s"].get<double>() * ours32);
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  ModelArgs margs;
  std::vector<int64_t> contexts = {64, 512, 2048};
  int64_t prefill_len = 128, verify_ctx = 512;
  int steps = 16, naive_steps = 3;
  std::string llama_cpp = "auto";
  bool json_out = false, f32_compare = false;
  po::options_description desc("speclab bench");
  margs.add_to(desc);
  desc.add_options()
      ("contexts", po::value(&contexts)->multitoken(), "context lengths for the decode rates (default 64 512 2048)")
      ("prefill", po::value(&prefill_len)->default_value(prefill_len), "prompt length for the prefill rate")
      ("verify-context", po::value(&verify_ctx)->default_value(verify_ctx), "context of the verification-cost passes")
      ("steps", po::value(&steps)->default_value(steps), "decode steps timed per context (cached)")
      ("naive-steps", po::value(&naive_steps)->default_value(naive_steps), "steps timed per context (naive)")
      ("llama-cpp", po::value(&llama_cpp)->default_value(llama_cpp),
       "compare with llama.cpp via llama-cpp-python: auto | on | off")
      ("f32-compare", po::bool_switch(&f32_compare), "also compare float32 both (an F32 copy of the GGUF for llama.cpp)")
      ("json", po::bool_switch(&json_out), "print one JSON object instead of the tables");
  po::variables_map vm;
  if (!parse_or_help("usage: speclab bench [options]", desc, args, vm)) return kExitOk;
  if (steps <= 0 || naive_steps <= 0 || prefill_len <= 0 || contexts.empty())
    throw Error(ErrorKind::kConfig, "expected positive --steps, --naive-steps, --prefill and some --contexts",
                "command line");
  if (llama_cpp != "auto" && llama_cpp != "on" && llama_cpp != "off")
    throw Error(ErrorKind::kConfig, "expected auto, on or off, found '" + llama_cpp + "'", "command line", "--llama-cpp");

  const std::unique_ptr<LoadedTarget> target = load_runtime_model(margs);
  const LoadedTarget& m = *target;
  const Model& model = *m.model;
  const ModelConfig& c = model.config();
  for (int64_t ctx : contexts)
    if (ctx <= 0 || ctx + steps > c.max_position_embeddings)
      throw Error(ErrorKind::kConfig, "context " + std::to_string(ctx) + " does not fit the model context " +
                                          std::to_string(c.max_position_embeddings), "command line", "--contexts");
  verify_ctx = std::min<int64_t>(verify_ctx, c.max_position_embeddings - 18);
  // Human-readable lines go to stdout unless --json, where one JSON object is printed at the end.
  auto say = [&](const char* fmt, auto... a) {
    if (!json_out) std::printf(fmt, a...);
  };
  nlohmann::json report;
  const int threads = compute_threads();
  say("SpecLab bench — %s (%s), libtorch %s, %d threads, --weights %s --activations %s: %s in memory (file: %s)\n",
      m.info.source.c_str(), m.info.format.c_str(), SPECLAB_TORCH_VERSION, threads, margs.weights.c_str(),
      margs.activations.c_str(), model.weight_storage().c_str(), m.info.storage_types.c_str());
  report["model"] = m.info.source;
  report["threads"] = threads;
  report["weights"] = margs.weights;
  report["activations"] = margs.activations;
  report["weight_storage"] = model.weight_storage();
  report["load_seconds"] = m.load_seconds;
  report["kernel_isa"] = kernel_isa_name(kernel_isa());
  say("model load: %.2f s; kernels: %s (SPECLAB_KERNEL_ISA caps it)\n", m.load_seconds, kernel_isa_name(kernel_isa()));

  // Tokenizer: prose (pre-tokens repeat, so the per-word cache is used as in real prompts) and
  // one long word (no cache hits; linear vs quadratic shows in the 2x ratio).
  {
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

  const double pf = prefill_seconds(model, std::min<int64_t>(prefill_len, c.max_position_embeddings - 1), 3);
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

  // Verification cost: one forward of n = gamma + 1 tokens vs one decode step. Leviathan et al.'s
  // speedup formula assumes the ratio is 1; on a CPU it grows with n.
  say("\nverification batch at context %lld: forward time for n new tokens (best of 5)\n",
      static_cast<long long>(verify_ctx));
  say("%-6s %10s %14s\n", "n", "ms", "vs n = 1");
  double one = 0.0;
  std::map<int64_t, double> verify_cost;
  for (int64_t n : {1, 2, 3, 5, 9, 17}) {
    const double t = batch_forward_seconds(model, verify_ctx, n, 5);
    if (n == 1) one = t;
    verify_cost[n] = t / one;
    say("%-6lld %10.2f %13.2fx\n", static_cast<long long>(n), t * 1e3, t / one);
    report["verify_cost"][std::to_string(n)] = t / one;
  }

  const double rss_mib = peak_rss_mib();
  const double bw = read_bandwidth(int64_t(1) << 30);
  const double wbytes = static_cast<double>(model.weight_bytes());
  const double floor_s = wbytes / bw;
  const double floor_share = decode_rate.front() * floor_s;
  say("\nmemory bandwidth (sum over 1 GiB): %.2f GB/s; weights %.1f MB read per token (as held in memory)\n",
      bw / 1e9, wbytes / 1e6);
  say("bandwidth floor: %.2f ms/token = %.1f tok/s; measured cached decode at context %lld: %.1f tok/s "
      "(%.0f%% of the floor rate)\n",
      floor_s * 1e3, 1.0 / floor_s, static_cast<long long>(contexts.front()), decode_rate.front(), 100.0 * floor_share);
  report["bandwidth_gb_s"] = bw / 1e9;
  report["floor_tok_s"] = 1.0 / floor_s;
  report["floor_share"] = floor_share;
  report["peak_rss_mib"] = rss_mib;

  // llama.cpp on the same file, then the figures side by side.
  nlohmann::json lc;
  if (llama_cpp != "off" && m.info.format == "gguf") {
    std::vector<int64_t> lc_contexts = contexts;
    lc = run_llama_cpp(m.info.source, prefill_len, steps, threads, lc_contexts);
    if (lc.is_null() && llama_cpp == "on")
      throw Error(ErrorKind::kConfig, "llama-cpp-python is not usable (pip install llama-cpp-python)", "--llama-cpp");
    if (lc.is_null()) say("\nllama.cpp: not installed (pip install llama-cpp-python to compare)\n");
  }
  report["llama_cpp"] = lc;
  say("\n%-58s %10s %10s %8s %s\n", "figure", "SpecLab", "llama.cpp", "ratio", "target");
  auto row = [&](const std::string& name, double ours, double theirs, const char* target) {
    const double ratio = theirs > 0 ? ours / theirs : 0.0;
    if (theirs > 0)
      say("%-58s %10.2f %10.2f %8.2f %s\n", name.c_str(), ours, theirs, ratio, target);
    else
      say("%-58s %10.2f %10s %8s %s\n", name.c_str(), ours, "-", "-", target);
    report["figures"].push_back({{"figure", name}, {"speclab", ours}, {"llama_cpp", theirs}, {"ratio", ratio},
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
      ">= 0.50");
  const char* verify_targets[] = {"<= 1.15", "<= 1.35", "<= 2.0"};
  int vi = 0;
  for (int64_t n : {5, 9, 17})
    row("verification of n = " + std::to_string(n) + " vs one decode step, context " + std::to_string(verify_ctx),
        verify_cost[n], 0.0, verify_targets[vi++]);
  row("decode at context " + std::to_string(contexts.back()) + " / at " + std::to_string(contexts.front()),
      decode_rate.back() / decode_rate.front(), 0.0, ">= 0.8");
  if (!lc.is_null())
    say("llama.cpp side: llama-cpp-python %s on %s (%s), %d threads\n", lc["version"].get<std::string>().c_str(),
        lc["model"].get<std::string>().c_str(), m.info.storage_types.c_str(), threads);

  if (f32_compare && !lc.is_null()) compare_float32(margs, m, lc, prefill_len, steps, threads, contexts.front(), say);
  say("\npeak RSS: %.1f MiB (SpecLab, measured before the bandwidth and llama.cpp runs)\n", rss_mib);
  if (json_out) std::printf("%s\n", report.dump(2).c_str());
  return kExitOk;
}

}  // namespace speclab::cli
