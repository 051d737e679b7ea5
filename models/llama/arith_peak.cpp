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

constexpr int kChains = 12;           // independent accumulators: latency 4-5 x up to 2 per cycle
constexpr int64_t kIters = 1 << 16;   // x kChains instructions per thread and run

// Each loop runs kIters x kChains instructions of one kind in kChains dependency chains and
// returns a value that depends on all of them (so that none is optimised away).
__attribute__((target("avx512f"))) float fma_zmm() {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  for (int64_t k = 0; k < kIters; ++k)
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_ymm() {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1e-3f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  for (int64_t k = 0; k < kIters; ++k)
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  __m256 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, a[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

__attribute__((target("avx512f,avx512vnni"))) float dpbusd_zmm() {
  __m512i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i b = _mm512_set1_epi32(0x01020304), c = _mm512_set1_epi32(0x05060708);
  for (int64_t k = 0; k < kIters; ++k)
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, c);
  __m512i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_epi32(s, a[i]);
  return static_cast<float>(_mm512_reduce_add_epi32(s));
}

__attribute__((target("avx512f,avx512vl,avx512vnni"))) float dpbusd_ymm() {
  __m256i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_epi32(i);
  const __m256i b = _mm256_set1_epi32(0x01020304), c = _mm256_set1_epi32(0x05060708);
  for (int64_t k = 0; k < kIters; ++k)
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_dpbusd_epi32(a[i], b, c);
  __m256i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi32(s, a[i]);
  return static_cast<float>(_mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7));
}

// vpmaddubsw feeds its own output back as the next unsigned operand: a chain per register.
__attribute__((target("avx2"))) float maddubs_ymm() {
  __m256i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  const __m256i c = _mm256_set1_epi8(3);
  for (int64_t k = 0; k < kIters; ++k)
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_maddubs_epi16(a[i], c);
  __m256i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_epi16(s, a[i]);
  return static_cast<float>(_mm256_extract_epi16(s, 0));
}

// Instructions per second of `loop` on `threads` threads at once: the best of 5 runs.
double rate(float (*loop)(), int threads) {
  std::atomic<float> sink{0.f};
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_chunks(threads, 1, threads, [&](int64_t, int64_t) { sink.store(loop(), std::memory_order_relaxed); });
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return static_cast<double>(threads) * static_cast<double>(kIters) * kChains / best;
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
  auto take = [](double& best, std::string& name, double macs_per_s, const char* instruction) {
    if (macs_per_s > best) {
      best = macs_per_s;
      name = instruction;
    }
  };
  take(p.f32_macs_per_s, p.f32_instruction, 8 * rate(fma_ymm, p.threads), "vfmadd231ps ymm");
  if (isa >= KernelIsa::kAvx512) take(p.f32_macs_per_s, p.f32_instruction, 16 * rate(fma_zmm, p.threads), "vfmadd231ps zmm");
  if (isa == KernelIsa::kAvx512Vnni) {
    take(p.int8_macs_per_s, p.int8_instruction, 64 * rate(dpbusd_zmm, p.threads), "vpdpbusd zmm");
    if (cpu_avx512vl())
      take(p.int8_macs_per_s, p.int8_instruction, 32 * rate(dpbusd_ymm, p.threads), "vpdpbusd ymm");
  } else {
    take(p.int8_macs_per_s, p.int8_instruction, 32 * rate(maddubs_ymm, p.threads), "vpmaddubsw ymm");
  }
  return p;
}

}  // namespace speclab::cpu
