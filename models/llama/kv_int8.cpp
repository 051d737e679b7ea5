#include "models/llama/kv_int8.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "models/llama/gemv.h"

namespace speclab::cpu {

namespace {

void quantize_heads_scalar(const float* x, int64_t heads, int64_t D, int8_t* out) {
  for (int64_t h = 0; h < heads; ++h, x += D, out += D + kKvInt8ScaleBytes) {
    float amax = 0.f;
    for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[d]));
    const float scale = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    for (int64_t d = 0; d < D; ++d) {
      const float r = std::nearbyint(x[d] * inv);
      out[d] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
    }
    std::memcpy(out + D, &scale, sizeof(float));
  }
}

// The scalar loop's bytes, 16 values at a time (D % 16 == 0): the max is exact in any order
// (max_ps(|x|, m) keeps m when x is NaN, as std::max(m, NaN) does), the product is the same
// float32 multiply, the clamp to [-127, 127] comes before the rounding (the same integer for
// every product: an inf product, from a head so small that 127 / max overflows, clamps to
// +-127 as the scalar loop's does, and a NaN one to -127: max_ps returns its second operand on
// NaN, as std::max(-127.f, NaN) returns its first), and vcvtps2dq rounds to nearest even as
// std::nearbyint does under the default rounding mode.
// The scalar loop calls libm's nearbyintf per value: an int8 cache's writes took 1.3% of a
// SmolLM2 decode step at context 2048 (perf).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) void quantize_heads_avx512(
    const float* x, int64_t heads, int64_t D, int8_t* out) {
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t h = 0; h < heads; ++h, x += D, out += D + kKvInt8ScaleBytes) {
    __m512 amax = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + d)), amax);
    const float am = _mm512_reduce_max_ps(amax);
    const float scale = am / 127.f, inv = am > 0.f ? 127.f / am : 0.f;
    const __m512 iv = _mm512_set1_ps(inv);
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + d), iv), lo), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + d), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
    std::memcpy(out + D, &scale, sizeof(float));
  }
}

}  // namespace

void quantize_kv_heads(const float* x, int64_t heads, int64_t D, int8_t* out) {
  if (kernel_isa() >= KernelIsa::kAvx512 && D % 16 == 0)
    quantize_heads_avx512(x, heads, D, out);
  else
    quantize_heads_scalar(x, heads, D, out);
}

void dequantize_kv_heads(const int8_t* in, int64_t heads, int64_t D, float* x) {
  for (int64_t h = 0; h < heads; ++h, in += D + kKvInt8ScaleBytes, x += D) {
    float scale;
    std::memcpy(&scale, in + D, sizeof(float));
    for (int64_t d = 0; d < D; ++d) x[d] = static_cast<float>(in[d]) * scale;
  }
}

}  // namespace speclab::cpu
