// kernel_bench: packed-weight matmul speed with float32 activations (gemm_small_packed), int8
// activations (gemm_packed_int8) and, on AVX2 and better, int8 activations on repacked weights
// (gemm_x8_int8: what models run), side by side, on SmolLM2-135M-sized (or Qwen-sized) matrices.
//
//   build/kernel_bench [--threads 2] [--seconds 0.15] [--isa avx2]
//
// For each weight type, matrix and row count n it prints the time per call and the weight
// traffic in GB/s (packed weight bytes / time). The weights are random blocks with finite
// scales; several copies of each matrix (>= 96 MiB in all) are used in turn, so that every call
// streams its weights from memory as a decode step does. K-quant rows must be a multiple of 256
// elements: their 576-wide matrices are benchmarked 768 wide (marked *). F16 and BF16 matrices
// run the float32-activation kernels only (they are not int8 types: gemv.h): their int8 and x8
// columns print "-".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands
// (as in models/llama/attention_int8_vnni.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "framework/core/thread_pool.h"
#include "models/llama/gemv.h"
#include "models/llama/qgemm.h"
#include "models/llama/qgemm_x8.h"
#include "models/loaders/dequant.h"

using namespace speclab;

namespace {

struct Shape {
  const char* name;
  int64_t in, out;
  bool cached = false;  // one copy, called again and again: it stays in L2 (no memory stream)
};

uint32_t g_seed = 1;
uint32_t next_u32() { return g_seed = g_seed * 1664525u + 1013904223u; }
float uniform() { return static_cast<float>(next_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

void put_f16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

std::vector<uint8_t> random_matrix(GgmlType t, int64_t out, int64_t in) {
  const GgmlTypeTraits* tr = ggml_type_traits(static_cast<uint32_t>(t));
  const size_t bytes = ggml_row_bytes(static_cast<uint32_t>(t), static_cast<uint64_t>(in), "bench") * out;
  std::vector<uint8_t> w(bytes);
  for (auto& b : w) b = static_cast<uint8_t>(next_u32() >> 24);
  if (t == GgmlType::F16 || t == GgmlType::BF16) {  // finite values (random bits hold NaNs and infinities)
    for (size_t at = 0; at < bytes; at += 2) {
      const float v = 0.1f * uniform();
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(v) : static_cast<uint16_t>(bits >> 16);
      std::memcpy(w.data() + at, &h, 2);
    }
    return w;
  }
  for (size_t at = 0; at < bytes; at += tr->type_size) {
    uint8_t* blk = w.data() + at;
    if (t == GgmlType::Q6_K) {
      put_f16(blk + 208, 0.001f);
    } else if (t == GgmlType::Q3_K) {
      put_f16(blk + 108, 0.001f);
    } else if (t == GgmlType::Q2_K) {
      put_f16(blk + 80, 0.01f);
      put_f16(blk + 82, 0.005f);
    } else {
      put_f16(blk, 0.01f);
      if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K || t == GgmlType::Q5_K)
        put_f16(blk + 2, 0.005f);
    }
  }
  return w;
}

// Wall seconds, or with --cpu-time the process's CPU seconds (with --threads 1: the kernel's own
// time, unaffected by other processes waiting for the cores; memory contention still counts).
bool g_cpu_time = false;
double now_seconds() {
  if (!g_cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds per call: the median (or, with best, the minimum) of batches, each running calls over
// the copies in turn. The minimum is the figure to compare on a machine other processes share.
template <class F>
double time_per_call(F&& call, int copies, double seconds, bool best) {
  call(0);  // warm-up (thread pool, buffers)
  std::vector<double> per_call;
  const auto start = std::chrono::steady_clock::now();
  int c = 0;
  while (per_call.size() < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    const double t0 = now_seconds();
    for (int i = 0; i < copies; ++i) call(c++ % copies);
    per_call.push_back((now_seconds() - t0) / copies);
    if (per_call.size() >= 200) break;
  }
  if (best) return *std::min_element(per_call.begin(), per_call.end());
  std::nth_element(per_call.begin(), per_call.begin() + per_call.size() / 2, per_call.end());
  return per_call[per_call.size() / 2];
}

// The 512-bit vpdpbusd rate of one core (instructions per second), the ceiling the int8 kernels
// are measured against: `mode` 0 from registers (12 independent chains, enough to cover the
// latency), 1 with a 4-byte broadcast load per instruction (what each kernel instruction needs:
// 4 activation bytes for 16 lanes of weights), 2 alternating with an FMA (the float steps of
// each block's scales). On CPUs whose vector units share the multiply pipes the last two cost
// what the kernels' extra instructions cost.
__attribute__((target("avx512f,avx512bw,avx512vnni,fma"))) double vnni_rate(int mode) {
  alignas(64) static int8_t xs[4096];
  for (int i = 0; i < 4096; ++i) xs[i] = static_cast<int8_t>(i * 7);
  __m512i acc[12];
  __m512 f[12];
  for (int i = 0; i < 12; ++i) {
    acc[i] = _mm512_set1_epi32(i);
    f[i] = _mm512_set1_ps(static_cast<float>(i));
  }
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
  __m512 m = _mm512_set1_ps(0.999f);
  const long reps = 1000000;
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {  // the best of 5: another process may hold the core
    const auto t0 = std::chrono::steady_clock::now();
    for (long k = 0; k < reps; ++k) {
      const int8_t* x = xs + (k & 63) * 48;
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) {
        int32_t v;
        std::memcpy(&v, x + 4 * i, 4);
        acc[i] = _mm512_dpbusd_epi32(acc[i], a, mode == 1 ? _mm512_set1_epi32(v) : b);
        if (mode == 2) f[i] = _mm512_fmadd_ps(f[i], m, m);
      }
      asm volatile("" : "+v"(a), "+v"(b), "+v"(m));
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  __m512i t = acc[0];
  __m512 g = f[0];
  for (int i = 1; i < 12; ++i) {
    t = _mm512_add_epi32(t, acc[i]);
    g = _mm512_add_ps(g, f[i]);
  }
  volatile int sink = _mm512_reduce_add_epi32(t) + static_cast<int>(_mm512_reduce_add_ps(g));
  (void)sink;
  return 12.0 * static_cast<double>(reps) / best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double seconds = 0.15;
  std::string only_type, shape_set = "smollm2";
  bool best = false, ceiling = false;
  int64_t only_n = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--best" || a == "--cpu-time" || a == "--ceiling") {
      (a == "--best" ? best : a == "--ceiling" ? ceiling : g_cpu_time) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "kernel_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (a == "--type")
      only_type = argv[i + 1];
    else if (a == "--shapes")
      shape_set = argv[i + 1];
    else if (a == "--n")
      only_n = std::atoll(argv[i + 1]);
    else if (a == "--isa") {
      const std::string v = argv[i + 1];
      const KernelIsa isa = v == "scalar"       ? KernelIsa::kScalar
                            : v == "avx2"       ? KernelIsa::kAvx2
                            : v == "avx512"     ? KernelIsa::kAvx512
                            : v == "avx512vnni" ? KernelIsa::kAvx512Vnni
                                                : KernelIsa(-1);
      if (isa == KernelIsa(-1)) {
        std::fprintf(stderr, "kernel_bench: --isa: expected scalar, avx2, avx512 or avx512vnni, got '%s'\n", v.c_str());
        return 2;
      }
      set_kernel_isa_cap(isa);
    } else {
      std::fprintf(stderr,
                   "usage: kernel_bench [--threads N] [--seconds S] [--type Q4_K] [--shapes smollm2|qwen1.5b|qwen0.5b|cached] [--n N] [--isa avx512vnni] [--best] [--cpu-time] [--ceiling]\n");
      return 2;
    }
  }
  set_compute_threads(threads);
  // SmolLM2-135M's matrices, or Qwen2.5-Coder-1.5B's (d 1536, ffn 8960, vocabulary 151,936).
  const std::vector<Shape> smollm2 = {{"qkv 576->1728", 576, 1728},
                                      {"gate_up 576->3072", 576, 3072},
                                      {"down 1536->576", 1536, 576},
                                      {"lm_head 576->49152", 576, 49152}};
  const std::vector<Shape> qwen = {{"qkv 1536->2048", 1536, 2048},
                                   {"gate_up 1536->17920", 1536, 17920},
                                   {"down 8960->1536", 8960, 1536},
                                   {"lm_head 1536->151936", 1536, 151936}};
  const std::vector<Shape> qwen_small = {{"qkv 896->1152", 896, 1152},
                                         {"gate_up 896->9728", 896, 9728},
                                         {"down 4864->896", 4864, 896},
                                         {"lm_head 896->151936", 896, 151936}};
  // A matrix that stays in L2 (92 KB of Q4_1, repacked): the kernels' arithmetic rate without
  // the memory stream.
  const std::vector<Shape> cached = {{"cached 576->512", 576, 512, true}};
  if (shape_set != "smollm2" && shape_set != "qwen1.5b" && shape_set != "qwen0.5b" && shape_set != "cached") {
    std::fprintf(stderr, "kernel_bench: --shapes: expected smollm2, qwen1.5b, qwen0.5b or cached, got '%s'\n",
                 shape_set.c_str());
    return 2;
  }
  const std::vector<Shape>& shapes = shape_set == "smollm2"    ? smollm2
                                     : shape_set == "qwen1.5b" ? qwen
                                     : shape_set == "cached"   ? cached
                                                               : qwen_small;
  const GgmlType types[] = {GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                            GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::F16, GgmlType::BF16};
  // Row counts: --n picks any of these; without it the usual five (1, 5, 9, 17, 32).
  const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 32};
  const auto usual = [](int64_t n) { return n == 1 || n == 5 || n == 9 || n == 17 || n == 32; };
  std::printf("kernel_bench: %d threads, ISA %s, %.2f s per figure (%s of batches, %s time); GB/s = packed weight bytes / time\n",
              threads, kernel_isa_name(kernel_isa()), seconds, best ? "minimum" : "median", g_cpu_time ? "process CPU" : "wall");
  const bool x8 = x8_active();  // the repacked kernels (qgemm_x8.h) as a third column
  // --ceiling: the repacked kernels' multiply-adds per second and thread as a share of one
  // core's 512-bit vpdpbusd peak (64 multiply-adds each). A decode row (n = 1) is bound by
  // the memory stream and reads low; a verification pass's rows are arithmetic, and the share
  // says how far the kernels are from what this CPU can do.
  double peak_macs = 0;
  if (ceiling) {
    if (kernel_isa() != KernelIsa::kAvx512Vnni) {
      std::fprintf(stderr, "kernel_bench: --ceiling measures AVX-512 VNNI, and the kernel ISA in effect is %s\n",
                   kernel_isa_name(kernel_isa()));
      return 2;
    }
    const double r0 = vnni_rate(0), r1 = vnni_rate(1), r2 = vnni_rate(2);
    peak_macs = 64.0 * r0;
    std::printf("one core's 512-bit vpdpbusd rate: %.2f G/s from registers, %.2f G/s with a broadcast load each, "
                "%.2f G/s alternating with an FMA\n",
                r0 / 1e9, r1 / 1e9, r2 / 1e9);
  }
  std::printf("%-5s %-21s %3s | %10s %7s | %10s %7s | %s%s%s\n", "type", "matrix", "n", "f32 us", "GB/s", "int8 us", "GB/s",
              "f32/int8", x8 ? " | x8 us    GB/s | int8/x8" : "", ceiling ? " | % of peak" : "");
  for (GgmlType t : types) {
    const uint32_t id = static_cast<uint32_t>(t);
    if (!only_type.empty() && ggml_type_name(id) != only_type) continue;
    for (const Shape& s : shapes) {
      const bool k = ggml_type_traits(id)->block_size == 256;
      const int64_t in = k && s.in % 256 != 0 ? 768 : s.in;
      const size_t bytes = ggml_row_bytes(id, static_cast<uint64_t>(in), "bench") * s.out;
      const int copies = s.cached ? 1 : static_cast<int>(std::max<size_t>(2, (size_t(96) << 20) / bytes + 1));
      std::vector<std::vector<uint8_t>> w(static_cast<size_t>(copies), random_matrix(t, s.out, in));
      std::vector<std::vector<uint8_t>> wx8;
      const bool int8 = is_int8_packable(id);  // F16 and BF16 meet float32 activations only
      if (x8 && int8)
        for (const auto& m : w) {
          wx8.emplace_back(static_cast<size_t>(x8_bytes(id, s.out, in)));
          repack_x8(m.data(), id, s.out, in, wx8.back().data());
        }
      std::vector<float> x(static_cast<size_t>(32 * in)), y(static_cast<size_t>(32 * s.out));
      for (auto& v : x) v = uniform();
      for (int64_t n : ns) {
        if (only_n != 0 ? n != only_n : !usual(n)) continue;
        const double f32 = time_per_call(
            [&](int c) { gemm_small_packed(w[c].data(), id, x.data(), nullptr, y.data(), n, s.out, in); }, copies,
            seconds, best);
        std::printf("%-5s %-20s%s %3lld | %10.1f %7.2f | ", ggml_type_name(id).c_str(), s.name, in != s.in ? "*" : " ",
                    static_cast<long long>(n), f32 * 1e6, bytes / f32 / 1e9);
        if (!int8) {
          std::printf("%10s %7s | %5s%s\n", "-", "-", "-", x8 ? " |        -      - |     -" : "");
          std::fflush(stdout);
          continue;
        }
        const double i8 = time_per_call(
            [&](int c) { gemm_packed_int8(w[c].data(), id, x.data(), nullptr, y.data(), n, s.out, in); }, copies,
            seconds, best);
        std::printf("%10.1f %7.2f | %.2fx", i8 * 1e6, bytes / i8 / 1e9, f32 / i8);
        if (x8) {
          const double tx8 = time_per_call(
              [&](int c) { gemm_x8_int8(wx8[c].data(), id, x.data(), nullptr, y.data(), n, s.out, in); }, copies,
              seconds, best);
          std::printf(" | %8.1f %6.2f | %.2fx", tx8 * 1e6, bytes / tx8 / 1e9, i8 / tx8);
          if (ceiling)
            std::printf(" | %5.1f%%", 100.0 * static_cast<double>(n * s.out * in) / tx8 / threads / peak_macs);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
