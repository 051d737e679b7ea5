#include "models/llama/arith_peak.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "framework/core/thread_pool.h"

namespace speclab::cpu {

namespace {

constexpr int kChains = 12;          // independent accumulators: latency 4-5 x up to 2 per cycle
constexpr int64_t kIters = 1 << 16;  // x kChains instructions per thread and run

// The loops are inline assembly: kChains instructions per iteration, each on its own register
// (written and read by the next iteration's), so the compiler can neither drop nor spill them (an
// intrinsics version of the vpmaddubsw loop kept its chains on the stack and ran at two thirds of
// the rate). `ins` is the instruction with the operand order `ins b, c, acc`.
#define SPECLAB_PEAK_STEP(ins, k) ins " %[b], %[c], %[a" #k "]\n\t"
#define SPECLAB_PEAK_LOOP(ins)                                                                                         \
  for (int64_t it = 0; it < kIters; ++it)                                                                              \
  asm volatile(SPECLAB_PEAK_STEP(ins, 0) SPECLAB_PEAK_STEP(ins, 1) SPECLAB_PEAK_STEP(ins, 2) SPECLAB_PEAK_STEP(ins, 3) \
                   SPECLAB_PEAK_STEP(ins, 4) SPECLAB_PEAK_STEP(ins, 5) SPECLAB_PEAK_STEP(ins, 6)                       \
                       SPECLAB_PEAK_STEP(ins, 7) SPECLAB_PEAK_STEP(ins, 8) SPECLAB_PEAK_STEP(ins, 9)                   \
                           SPECLAB_PEAK_STEP(ins, 10) SPECLAB_PEAK_STEP(ins, 11)                                       \
               : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),             \
                 [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11)          \
               : [b] "v"(b), [c] "v"(c))

// The chains as named locals (an array of them was kept in memory and stored every iteration).
// Every chain starts from the same value v: their values do not matter, their registers do.
#define SPECLAB_PEAK_CHAINS(T, v) \
  T a0 = v, a1 = v, a2 = v, a3 = v, a4 = v, a5 = v, a6 = v, a7 = v, a8 = v, a9 = v, a10 = v, a11 = v
#define SPECLAB_PEAK_GATHER(T) const T a[kChains] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11}

// Each returns a value that depends on every chain.
//   vfmadd231ps b, c, a: a += c * b;
//   vpdpbusd b, c, a:    a += the dot products of c's unsigned and b's signed bytes, 4 at a time;
//   vpmaddubsw b, a, a:  a = a's unsigned bytes times b's signed ones, pairs summed to int16.
__attribute__((target("avx512f"))) float fma_zmm() {
  const __m512 v = _mm512_set1_ps(1e-3f * 3.0f);
  SPECLAB_PEAK_CHAINS(__m512, v);
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  SPECLAB_PEAK_LOOP("vfmadd231ps");
  SPECLAB_PEAK_GATHER(__m512);
  __m512 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_ymm() {
  const __m256 v = _mm256_set1_ps(1e-3f * 3.0f);
  SPECLAB_PEAK_CHAINS(__m256, v);
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  SPECLAB_PEAK_LOOP("vfmadd231ps");
  SPECLAB_PEAK_GATHER(__m256);
  __m256 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, a[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

__attribute__((target("avx512f,avx512vnni"))) float dpbusd_zmm() {
  const __m512i v = _mm512_set1_epi32(3);
  SPECLAB_PEAK_CHAINS(__m512i, v);
  const __m512i b = _mm512_set1_epi32(0x01020304), c = _mm512_set1_epi32(0x05060708);
  SPECLAB_PEAK_LOOP("vpdpbusd");
  SPECLAB_PEAK_GATHER(__m512i);
  __m512i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_epi32(s, a[i]);
  return static_cast<float>(_mm512_reduce_add_epi32(s));
}

__attribute__((target("avx512f,avx512vl,avx512vnni"))) float dpbusd_ymm() {
  const __m256i v = _mm256_set1_epi32(3);
  SPECLAB_PEAK_CHAINS(__m256i, v);
  const __m256i b = _mm256_set1_epi32(0x01020304), c = _mm256_set1_epi32(0x05060708);
  SPECLAB_PEAK_LOOP("vpdpbusd");
  SPECLAB_PEAK_GATHER(__m256i);
  __m256i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi32(s, a[i]);
  return static_cast<float>(_mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7));
}

__attribute__((target("avx2"))) float maddubs_ymm() {
  const __m256i v = _mm256_set1_epi8(static_cast<char>(2));
  SPECLAB_PEAK_CHAINS(__m256i, v);
  const __m256i b = _mm256_set1_epi8(3);
  // a = maddubs(a, b): c is the chain's own register, so the loop is written
  // out here.
  for (int64_t it = 0; it < kIters; ++it)
    asm volatile(
        "vpmaddubsw %[b], %[a0], %[a0]\n\tvpmaddubsw %[b], %[a1], "
        "%[a1]\n\tvpmaddubsw %[b], %[a2], %[a2]\n\t"
        "vpmaddubsw %[b], %[a3], %[a3]\n\tvpmaddubsw %[b], %[a4], "
        "%[a4]\n\tvpmaddubsw %[b], %[a5], %[a5]\n\t"
        "vpmaddubsw %[b], %[a6], %[a6]\n\tvpmaddubsw %[b], %[a7], "
        "%[a7]\n\tvpmaddubsw %[b], %[a8], %[a8]\n\t"
        "vpmaddubsw %[b], %[a9], %[a9]\n\tvpmaddubsw %[b], %[a10], "
        "%[a10]\n\tvpmaddubsw %[b], %[a11], %[a11]\n\t"
        : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5), [a6] "+v"(a6),
          [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11)
        : [b] "v"(b));
  SPECLAB_PEAK_GATHER(__m256i);
  __m256i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi16(s, a[i]);
  return static_cast<float>(_mm256_extract_epi16(s, 0));
}
#undef SPECLAB_PEAK_LOOP
#undef SPECLAB_PEAK_CHAINS
#undef SPECLAB_PEAK_GATHER
#undef SPECLAB_PEAK_STEP

// Instructions per second of `loop` on `threads` threads: each thread times its own runs of the
// loop, and the rate is `threads` times the fastest run of any thread (a lower bound needs the
// highest rate: a run that another job slowed, or that did not overlap the others, says nothing).
// 8 runs of each thread, one per parallel call.
double rate(float (*loop)(), int threads) {
  std::atomic<float> sink{0.f};
  std::vector<double> best(static_cast<size_t>(threads), 1e30);
  for (int r = 0; r < 8; ++r)
    parallel_chunks(threads, 1, threads, [&](int64_t b, int64_t) {
      const auto t0 = std::chrono::steady_clock::now();
      sink.store(loop(), std::memory_order_relaxed);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[static_cast<size_t>(b)] = std::min(best[static_cast<size_t>(b)], s);
    });
  const double fastest = *std::min_element(best.begin(), best.end());
  return static_cast<double>(threads) * static_cast<double>(kIters) * kChains / fastest;
}

bool cpu_avx512vl() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vl");
}

}  // namespace

ArithPeak measure_arith_peak(KernelIsa isa) {
  ArithPeak p;
  p.threads = compute_threads();
  isa = std::min(isa, kernel_isa());
  if (isa == KernelIsa::kScalar) return p;
  // The faster of the register widths, in MACs per second.
  auto take = [](double &best, std::string &name, double macs_per_s, const char *instruction) {
    if (macs_per_s > best) {
      best = macs_per_s;
      name = instruction;
    }
  };
  take(p.f32_macs_per_s, p.f32_instruction, 8 * rate(fma_ymm, p.threads), "vfmadd231ps ymm");
  if (isa >= KernelIsa::kAvx512)
    take(p.f32_macs_per_s, p.f32_instruction, 16 * rate(fma_zmm, p.threads), "vfmadd231ps zmm");
  if (isa == KernelIsa::kAvx512Vnni) {
    take(p.int8_macs_per_s, p.int8_instruction, 64 * rate(dpbusd_zmm, p.threads), "vpdpbusd zmm");
    if (cpu_avx512vl()) take(p.int8_macs_per_s, p.int8_instruction, 32 * rate(dpbusd_ymm, p.threads), "vpdpbusd ymm");
  } else {
    take(p.int8_macs_per_s, p.int8_instruction, 32 * rate(maddubs_ymm, p.threads), "vpmaddubsw ymm");
  }
  return p;
}

}  // namespace speclab::cpu
