// speclab bench — runtime throughput, measured side by side in one run:
//   prefill tok/s; per-token decode rate at several context lengths, cached vs naive (the naive
//   mode's cost per token grows linearly with context, so its total is quadratic); decode rate
//   against the memory-bandwidth floor (weight bytes per token / measured read bandwidth);
//   peak RSS; model load time; tokenizer encode time, with a linearity ratio (a 2x longer input
//   should take about 2x, not 4x); and, when llama-cpp-python is installed, llama.cpp's decode on
//   the same GGUF.
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
#include <sstream>

#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/observers.h"
#include "framework/kv/contiguous_kv.h"
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

std::string field(const std::string& json_line, const std::string& key) {
  auto at = json_line.find("\"" + key + "\"");
  if (at == std::string::npos) return {};
  at = json_line.find(':', at);
  auto end = json_line.find_first_of(",}", at);
  std::string v = json_line.substr(at + 1, end - at - 1);
  v.erase(std::remove(v.begin(), v.end(), '"'), v.end());
  v.erase(0, v.find_first_not_of(' '));
  return v;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  ModelArgs margs;
  std::vector<int64_t> contexts = {64, 256, 1024};
  int64_t prefill_len = 128;
  int steps = 16, naive_steps = 3;
  std::string llama_cpp = "auto";
  po::options_description desc("speclab bench");
  margs.add_to(desc);
  desc.add_options()
      ("contexts", po::value(&contexts)->multitoken(), "context lengths for the decode rates (default 64 256 1024)")
      ("prefill", po::value(&prefill_len)->default_value(prefill_len), "prompt length for the prefill rate")
      ("steps", po::value(&steps)->default_value(steps), "decode steps timed per context (cached)")
      ("naive-steps", po::value(&naive_steps)->default_value(naive_steps), "steps timed per context (naive)")
      ("llama-cpp", po::value(&llama_cpp)->default_value(llama_cpp),
       "compare with llama.cpp via llama-cpp-python: auto | on | off");
  po::variables_map vm;
  if (!parse_or_help("usage: speclab bench [options]", desc, args, vm)) return kExitOk;
  if (steps <= 0 || naive_steps <= 0 || prefill_len <= 0)
    throw Error(ErrorKind::kConfig, "expected positive --steps, --naive-steps and --prefill", "command line");

  const std::unique_ptr<LoadedTarget> target = load_runtime_model(margs);
  const LoadedTarget& m = *target;
  const Model& model = *m.model;
  const ModelConfig& c = model.config();
  for (int64_t ctx : contexts)
    if (ctx <= 0 || ctx + steps > c.max_position_embeddings)
      throw Error(ErrorKind::kConfig, "context " + std::to_string(ctx) + " does not fit the model context " +
                                          std::to_string(c.max_position_embeddings), "command line", "--contexts");
  const int threads = compute_threads();
  std::printf("SpecLab bench — %s (%s), libtorch %s, %d threads, --weights %s: %s in memory (file: %s)\n",
              m.info.source.c_str(), m.info.format.c_str(), SPECLAB_TORCH_VERSION, threads, margs.weights.c_str(),
              model.weight_storage().c_str(), m.info.storage_types.c_str());

  std::printf("model load: %.2f s\n", m.load_seconds);

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
    std::printf("tokenizer: 10 KB prose %.2f ms (%zu tokens, %.1f MB/s); one 10 000-byte word %.2f ms, "
                "20 000-byte word %.2f ms: ratio %.2f (linear ~2, quadratic ~4)\n",
                tp * 1e3, n_prose, 10.24e3 / tp / 1e6, t1 * 1e3, t2 * 1e3, t2 / t1);
  }

  // Warm up allocator and caches.
  cached_step_seconds(model, *m.info.tokenizer, 16, 4);

  const double pf = prefill_seconds(model, std::min<int64_t>(prefill_len, c.max_position_embeddings - 1), 3);
  std::printf("\nprefill: %lld tokens in %.4f s = %.1f tok/s\n", static_cast<long long>(prefill_len), pf,
              prefill_len / pf);

  std::printf("\n%-10s %16s %16s %14s\n", "context", "cached tok/s", "naive tok/s", "naive/cached");
  double cached_first = 0.0;
  for (int64_t ctx : contexts) {
    const double tc = cached_step_seconds(model, *m.info.tokenizer, ctx, steps);
    const double tn = naive_step_seconds(model, ctx, naive_steps);
    if (cached_first == 0.0) cached_first = tc;
    std::printf("%-10lld %16.1f %16.2f %13.1fx\n", static_cast<long long>(ctx), 1.0 / tc, 1.0 / tn, tn / tc);
  }
  std::printf("(per-token time at each context; naive recomputes all tokens every step, so generating T tokens "
              "costs O(T^2) naive vs O(T) cached)\n");

  // Verification cost: one forward of n = gamma + 1 tokens vs one decode step. Leviathan et al.'s
  // speedup formula assumes the ratio is 1; on a CPU it grows with n.
  const int64_t vctx = std::min<int64_t>(128, c.max_position_embeddings - 17);
  std::printf("\nverification batch at context %lld: forward time for n new tokens (best of 5)\n",
              static_cast<long long>(vctx));
  std::printf("%-6s %10s %14s\n", "n", "ms", "vs n = 1");
  double one = 0.0;
  for (int64_t n : {1, 2, 3, 5, 9, 17}) {
    const double t = batch_forward_seconds(model, vctx, n, 5);
    if (n == 1) one = t;
    std::printf("%-6lld %10.2f %13.2fx\n", static_cast<long long>(n), t * 1e3, t / one);
  }

  const double rss_before_bw = peak_rss_mib();
  const double bw = read_bandwidth(int64_t(1) << 30);
  const double wbytes = static_cast<double>(model.weight_bytes());
  const double floor_s = wbytes / bw;
  std::printf("\nmemory bandwidth (sum over 1 GiB): %.2f GB/s; weights %.1f MB read per token (as held in memory)\n",
              bw / 1e9, wbytes / 1e6);
  std::printf("bandwidth floor: %.2f ms/token = %.1f tok/s; measured cached decode at context %lld: %.1f tok/s "
              "(%.0f%% of the floor rate)\n",
              floor_s * 1e3, 1.0 / floor_s, static_cast<long long>(contexts.front()), 1.0 / cached_first,
              100.0 * floor_s / cached_first);

  const double rss_mib = rss_before_bw;

  if (llama_cpp != "off" && m.info.format == "gguf") {
    auto run_llama = [&](const std::string& path, double& decode, std::string& prefill, std::string& version) {
      int status = 0;
      const std::string script = std::string(SPECLAB_SOURCE_DIR) + "/scripts/llamacpp_bench.py";
      std::ostringstream cmd;
      cmd << "python3 " << script << " --model '" << path << "' --n-prompt " << prefill_len << " --n-decode " << 64
          << " --threads " << threads << " 2>/dev/null";
      std::string out = run_capture(cmd.str(), status);
      if (status != 0 || out.find("decode_tok_s") == std::string::npos) return false;
      decode = std::atof(field(out, "decode_tok_s").c_str());
      prefill = field(out, "prefill_tok_s");
      version = field(out, "version");
      return true;
    };
    double lc = 0.0;
    std::string lc_prefill, version;
    if (!run_llama(m.info.source, lc, lc_prefill, version)) {
      if (llama_cpp == "on")
        throw Error(ErrorKind::kConfig, "llama-cpp-python is not usable (pip install llama-cpp-python)", "--llama-cpp");
      std::printf("\nllama.cpp: not installed (pip install llama-cpp-python to compare)\n");
    } else {
      const bool packed = model.weight_storage() != "float32" && margs.weights == "native";
      std::printf("\nllama.cpp %s, same file, native %s kernels: decode %.1f tok/s, prefill %s tok/s\n",
                  version.c_str(), m.info.storage_types.c_str(), lc, lc_prefill.c_str());
      if (packed)
        std::printf("  same quantized weights both (SpecLab: %s, float32 activations; llama.cpp: Q8 activations):\n"
                    "  SpecLab decode time / llama.cpp decode time = %.2fx (target <= 1.25x)\n",
                    model.weight_storage().c_str(), lc * cached_first);
      else
        std::printf("  SpecLab float32 decode time / llama.cpp quantized decode time: %.2fx (not equal precision)\n",
                    lc * cached_first);
      // Float32 both: the same weights dequantized to F32 in a GGUF file (speclab export), and
      // SpecLab with --weights f32.
      const std::string base = m.info.source.substr(m.info.source.find_last_of('/') + 1);
      const std::string f32_path = std::string(SPECLAB_SOURCE_DIR) + "/.cache/models/" + base + ".f32.gguf";
      std::FILE* probe = std::fopen(f32_path.c_str(), "rb");
      if (probe) {
        std::fclose(probe);
      } else {
        ExportOptions eo;
        eo.type = GgmlType::F32;
        export_gguf_layers(m.info.source, f32_path, eo);
      }
      double lc32 = 0.0;
      std::string pf32, v32;
      if (run_llama(f32_path, lc32, pf32, v32)) {
        double ours32 = cached_first;
        if (packed) {
          ModelArgs f32_args = margs;
          f32_args.weights = "f32";
          const std::unique_ptr<LoadedTarget> m32 = load_runtime_model(f32_args);
          cached_step_seconds(*m32->model, *m32->info.tokenizer, 16, 4);
          ours32 = cached_step_seconds(*m32->model, *m32->info.tokenizer, contexts.front(), steps);
          std::printf("SpecLab --weights f32 (%s): decode %.1f tok/s at context %lld\n",
                      m32->model->weight_storage().c_str(), 1.0 / ours32, static_cast<long long>(contexts.front()));
        }
        std::printf("llama.cpp %s, F32 copy of the same weights (%s): decode %.1f tok/s, prefill %s tok/s\n",
                    v32.c_str(), f32_path.c_str(), lc32, pf32.c_str());
        std::printf("  float32 both: SpecLab decode time / llama.cpp decode time = %.2fx (target <= 1.25x)\n",
                    lc32 * ours32);
      }
    }
  }
  std::printf("\npeak RSS: %.1f MiB (SpecLab, measured before the bandwidth and llama.cpp runs)\n", rss_mib);
  return kExitOk;
}

}  // namespace speclab::cli
