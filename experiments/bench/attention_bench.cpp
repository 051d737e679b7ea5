// attention_bench: time per call of cpu::attend_rows() (models/llama/attention_cpu.h) next to a
// copy of the per-(row, head) scalar-softmax attention that llama_cpu.cpp used before it, for the
// SmolLM2-135M and Qwen2.5-1.5B attention shapes at contexts 64 to 8,192 and n = 1, 5, 9, 17
// query rows (decode and verification of 4, 8, 16 drafts).
//
// Each configuration allocates float32 K and V caches for several layers (paged: blocks of 16
// slots in shuffled order; as many layers as the model has, or fewer once they outgrow the L3
// cache three times over) and calls the kernel for each layer in turn, as a forward pass does.
// The old loop and the kernel are timed in alternation, three rounds (the first also warms
// up), fastest round kept.
// Prints microseconds per call (one layer) and per token step (times the model's layer count). --cpu-time measures the
// process's CPU time instead of wall time: with --threads 1 that is immune to other processes
// taking the cores (a shared machine), with more threads it also counts the workers' spinning.
//
// --kv f16 gives the kernel binary16 copies of the caches (half the bytes; the float32 caches hold
// the same rounded values, for the old loop); --kv i8 int8 copies, one scale per token and kv head
// (kv_int8.h's quantize_kv_heads; the float32 caches hold the dequantized values).
//
// --slots sequential lays the paged blocks out in order, as a fresh block manager allocates them
// to one sequence (framework/kv/block_manager.cpp); the default, shuffled, is a fragmented
// cache. The kernel copies a tile per run of consecutive slots, and the hardware prefetchers
// follow runs across blocks, so in-order blocks read faster (2 threads, SmolLM2, float16, one
// row, 2026-11-27: context 512 9.4-9.7 vs 25 us per call; at context 2048 the runs, 63-84 vs 76 us,
// did not separate from the noise).
//
//   attention_bench [--threads N] [--min-seconds S] [--cpu-time 1] [--kv f32|f16|i8] [--slots shuffled|sequential]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "framework/core/thread_pool.h"
#include "models/llama/attention_cpu.h"
#include "models/llama/cpu_ops.h"
#include "models/llama/gemv.h"

using namespace speclab;

namespace {

struct Model {
  const char* name;
  int64_t H, KVH, D, layers;
};

struct Problem {
  const Model& m;
  int64_t n, ctx;
  std::vector<float> q;               // [n, H * D]
  std::vector<std::vector<float>> k, v;  // per layer cache: [ctx, KVH * D]
  std::vector<std::vector<uint16_t>> k16, v16;  // the same, rounded to binary16 (--kv f16)
  std::vector<std::vector<int8_t>> k8, v8;      // the same, quantized per head (--kv i8): [ctx, KVH, D + 4]
  std::vector<int64_t> slots;         // [ctx]
  std::vector<int64_t> limits;        // [n]
  std::vector<float> out;             // [n, H * D]
};

// The attention loop of llama_cpu.cpp before attention_cpu.h: one task per (row, head), scores
// into a [ctx] buffer, max, exp, sum, then a weighted sum of V rows; tasks split over threads.
void attend_per_head(const Problem& p, const float* k_layer, const float* v_layer, float* att) {
  const int64_t n = p.n, H = p.m.H, D = p.m.D, G = H / p.m.KVH, kv_dim = p.m.KVH * D, q_dim = H * D, ctx = p.ctx;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto attend = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(ctx)) scores.resize(static_cast<size_t>(ctx));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / H, hh = task % H, g = hh / G;
      const float* q = p.q.data() + i * q_dim + hh * D;
      const int64_t limit = p.limits[i];
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < limit; ++j) {
        scores[j] = cpu::dot(q, k_layer + p.slots[j] * kv_dim + g * D, D) * scale;
        mx = std::max(mx, scores[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < limit; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      float* o = att + i * q_dim + hh * D;
      std::fill(o, o + D, 0.f);
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < limit; ++j) cpu::axpy(scores[j] * inv, v_layer + p.slots[j] * kv_dim + g * D, o, D);
    }
  };
  const int64_t tasks = n * H;
  if (tasks * ctx * D < (int64_t(1) << 18))
    attend(0, tasks);
  else
    parallel_chunks(tasks, std::max<int64_t>(1, tasks / (4 * compute_threads())), compute_threads(), attend);
}

cpu::KvElement g_kv = cpu::KvElement::kFloat32;  // --kv f16 | i8: the kernel reads the binary16 or int8 caches
bool g_sequential = false;  // --slots sequential: blocks in allocation order (a fresh block manager's)

void attend_kernel(const Problem& p, const float* k_layer, const float* v_layer, float* att) {
  const size_t layer = static_cast<size_t>(std::find_if(p.k.begin(), p.k.end(), [&](const std::vector<float>& c) {
                                              return c.data() == k_layer;
                                            }) - p.k.begin());
  cpu::AttentionArgs a;
  a.q = p.q.data();
  a.q_stride = p.m.H * p.m.D;
  a.n = p.n;
  a.n_heads = p.m.H;
  a.n_kv_heads = p.m.KVH;
  a.head_dim = p.m.D;
  a.k = g_kv == cpu::KvElement::kFloat16 ? static_cast<const void*>(p.k16[layer].data())
        : g_kv == cpu::KvElement::kInt8  ? static_cast<const void*>(p.k8[layer].data())
                                         : k_layer;
  a.v = g_kv == cpu::KvElement::kFloat16 ? static_cast<const void*>(p.v16[layer].data())
        : g_kv == cpu::KvElement::kInt8  ? static_cast<const void*>(p.v8[layer].data())
                                         : v_layer;
  a.kv = g_kv;
  a.slots = p.slots.data();
  a.limits = p.limits.data();
  a.scale = 1.0f / std::sqrt(static_cast<float>(p.m.D));
  a.out = att;
  cpu::attend_rows(a);
}

Problem make_problem(const Model& m, int64_t n, int64_t ctx, std::mt19937& rng) {
  Problem p{m, n, ctx, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t kv = ctx * m.KVH * m.D;
  p.q.resize(static_cast<size_t>(n * m.H * m.D));
  for (float& x : p.q) x = u(rng);
  // Enough distinct layer caches to outgrow a 32 MiB L3 three times over (all layers at most).
  const int64_t caches = std::min<int64_t>(m.layers, std::max<int64_t>(2, (96 << 20) / (2 * kv * 4) + 1));
  for (int64_t l = 0; l < caches; ++l) {
    p.k.emplace_back(static_cast<size_t>(kv));
    p.v.emplace_back(static_cast<size_t>(kv));
    for (float& x : p.k.back()) x = u(rng);
    for (float& x : p.v.back()) x = u(rng);
    if (g_kv == cpu::KvElement::kInt8) {  // the old loop reads the dequantized values
      for (auto* pair : {&p.k, &p.v}) {
        std::vector<float>& c = pair->back();
        std::vector<int8_t> h(static_cast<size_t>(ctx * m.KVH * (m.D + cpu::kKvInt8ScaleBytes)));
        cpu::quantize_kv_heads(c.data(), ctx * m.KVH, m.D, h.data());
        cpu::dequantize_kv_heads(h.data(), ctx * m.KVH, m.D, c.data());
        (pair == &p.k ? p.k8 : p.v8).push_back(std::move(h));
      }
    }
    if (g_kv == cpu::KvElement::kFloat16) {  // both loops then read the same (binary16-representable) values
      for (auto* pair : {&p.k, &p.v}) {
        std::vector<float>& c = pair->back();
        std::vector<uint16_t> h(c.size());
        cpu::store_f16(c.data(), h.data(), static_cast<int64_t>(c.size()));
        cpu::load_f16(h.data(), c.data(), static_cast<int64_t>(c.size()));
        (pair == &p.k ? p.k16 : p.v16).push_back(std::move(h));
      }
    }
  }
  const int64_t block = 16, blocks = (ctx + block - 1) / block;
  std::vector<int64_t> order(static_cast<size_t>(blocks));
  std::iota(order.begin(), order.end(), 0);
  if (!g_sequential) std::shuffle(order.begin(), order.end(), rng);
  for (int64_t j = 0; j < ctx; ++j) {
    // Block b of the sequence lives in physical block order[b]; the last physical block may be
    // partial, so map past-the-end slots back into range (reads only, so aliasing is harmless).
    const int64_t s = order[j / block] * block + j % block;
    p.slots.push_back(s < ctx ? s : j);
  }
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[i] = ctx - n + i;
  p.limits.resize(static_cast<size_t>(n));
  cpu::causal_limits(positions.data(), n, ctx, p.limits.data());
  p.out.resize(p.q.size());
  return p;
}

using AttendFn = void (*)(const Problem&, const float*, const float*, float*);

bool g_cpu_time = false;

double now_seconds() {
  if (!g_cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Microseconds per call over whole passes through the layer caches, lasting at least
// min_seconds (at least one pass).
double time_per_call(Problem& p, AttendFn fn, double min_seconds) {
  int64_t calls = 0;
  const double t0 = now_seconds();
  double elapsed = 0;
  do {
    for (size_t l = 0; l < p.k.size(); ++l) fn(p, p.k[l].data(), p.v[l].data(), p.out.data());
    calls += static_cast<int64_t>(p.k.size());
    elapsed = now_seconds() - t0;
  } while (elapsed < min_seconds);
  return elapsed * 1e6 / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  double min_seconds = 0.3;
  std::string only_model;   // --model smollm2|qwen: one model's shapes
  int64_t only_ctx = 0;     // --ctx N: one context
  int64_t only_n = 0;       // --n N: one row count
  bool run_old = true;      // --old 0: the kernel only (for profiling it)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") {
      set_compute_threads(std::atoi(argv[i + 1]));
    } else if (flag == "--min-seconds") {
      min_seconds = std::atof(argv[i + 1]);
    } else if (flag == "--cpu-time") {
      g_cpu_time = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--kv" && (std::string(argv[i + 1]) == "f16" || std::string(argv[i + 1]) == "f32" ||
                                  std::string(argv[i + 1]) == "i8")) {
      const std::string v = argv[i + 1];
      g_kv = v == "f16" ? cpu::KvElement::kFloat16 : v == "i8" ? cpu::KvElement::kInt8 : cpu::KvElement::kFloat32;
    } else if (flag == "--model" && (std::string(argv[i + 1]) == "smollm2" || std::string(argv[i + 1]) == "qwen")) {
      only_model = argv[i + 1];
    } else if (flag == "--ctx" && std::atoll(argv[i + 1]) > 0) {
      only_ctx = std::atoll(argv[i + 1]);
    } else if (flag == "--n" && std::atoll(argv[i + 1]) > 0) {
      only_n = std::atoll(argv[i + 1]);
    } else if (flag == "--slots" && (std::string(argv[i + 1]) == "shuffled" || std::string(argv[i + 1]) == "sequential")) {
      g_sequential = std::string(argv[i + 1]) == "sequential";
    } else if (flag == "--old") {
      run_old = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--isa" && (std::string(argv[i + 1]) == "scalar" || std::string(argv[i + 1]) == "avx2" ||
                                   std::string(argv[i + 1]) == "avx512")) {
      // caps the kernels' instruction set (the CLI's SPECLAB_KERNEL_ISA), for side-by-side figures
      const std::string v = argv[i + 1];
      set_kernel_isa_cap(v == "scalar" ? KernelIsa::kScalar : v == "avx2" ? KernelIsa::kAvx2 : KernelIsa::kAvx512);
    } else {
      std::fprintf(stderr, "usage: attention_bench [--threads N] [--min-seconds S] [--cpu-time 0|1] [--kv f32|f16|i8] "
                           "[--model smollm2|qwen] [--ctx N] [--n N] [--old 0|1] [--isa scalar|avx2|avx512] "
                           "[--slots shuffled|sequential]\n");
      return 2;
    }
  }
  const Model models[] = {{"SmolLM2-135M", 9, 3, 64, 30}, {"Qwen2.5-1.5B", 12, 2, 128, 28}};
  std::printf("attention per call (one layer), %d threads, ISA %s, %s time, kernel over a %s cache, blocks %s; "
              "per-head = the old per-(row, head) loop (float32)\n",
              compute_threads(), kernel_isa_name(kernel_isa()), g_cpu_time ? "process CPU" : "wall",
              g_kv == cpu::KvElement::kFloat16 ? "float16" : g_kv == cpu::KvElement::kInt8 ? "int8" : "float32", g_sequential ? "in order" : "shuffled");
  std::printf("%-13s %6s %3s %12s %12s %8s %14s %14s\n", "model", "ctx", "n", "per-head us", "kernel us", "speedup",
              "kernel n/n=1", "kernel ms/step");
  std::mt19937 rng(1);
  std::vector<int64_t> contexts = {64, 512, 2048, 8192};
  if (only_ctx > 0) contexts = {only_ctx};
  for (const Model& m : models) {
    if (!only_model.empty() && (only_model == "qwen") != (std::string(m.name).rfind("Qwen", 0) == 0)) continue;
    for (int64_t ctx : contexts) {
      double one_row = 0;
      std::vector<int64_t> row_counts = {1, 5, 9, 17};
      if (only_n > 0) row_counts = {only_n};
      for (int64_t n : row_counts) {
        Problem p = make_problem(m, n, ctx, rng);
        // Interleaved, so that a burst of load from other processes hits both.
        double old_us = std::numeric_limits<double>::infinity(), new_us = old_us;
        for (int round = 0; round < 3; ++round) {
          if (run_old) old_us = std::min(old_us, time_per_call(p, attend_per_head, min_seconds / 3));
          new_us = std::min(new_us, time_per_call(p, attend_kernel, min_seconds / 3));
        }
        if (n == 1 || only_n > 0) one_row = new_us;
        std::printf("%-13s %6lld %3lld %12.1f %12.1f %7.2fx %14.2f %14.3f\n", m.name, static_cast<long long>(ctx),
                    static_cast<long long>(n), old_us, new_us, old_us / new_us, new_us / one_row,
                    new_us * static_cast<double>(m.layers) / 1000.0);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
