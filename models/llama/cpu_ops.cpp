#include "models/llama/cpu_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "models/llama/gemv.h"
#include "models/llama/simd_exp.h"
#include "models/loaders/dequant.h"

namespace speclab::cpu {

namespace {

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  const __m256 s = _mm256_add_ps(s0, s1);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 0x55));
  float t = _mm_cvtss_f32(lo);
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// sum_i x[i]^2 in double: 16 lanes (four chains of 4) then a fixed tree, the tail in order.
// Each square is exact in double, as in the scalar loop; only the order of the additions
// differs (the scalar loop is one chain of d dependent adds: ~4 cycles each).
__attribute__((target("avx2,fma"))) double sum_squares_avx2(const float* x, int64_t d) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    for (int c = 0; c < 4; ++c) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * c));
      a[c] = _mm256_fmadd_pd(v, v, a[c]);
    }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3]));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double t = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < d; ++i) t += static_cast<double>(x[i]) * x[i];
  return t;
}

// silu(g) * u for 8 lanes: g / (1 + exp(-g)) * u, exp by exp8_avx2 (about 2 ulp).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8_avx2(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// The last n % 8 elements go through the same 8-lane sequence (via a padded copy), so an
// element's result does not depend on where a caller's range starts or ends.
__attribute__((target("avx2,fma"))) void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    _mm256_store_ps(o, silu_mul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::copy(o, o + (n - i), out + i);
  }
}

}  // namespace

void rms_norm_rows(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
  const bool avx2 = kernel_isa() >= KernelIsa::kAvx2;  // every row of the process the same way
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    double ss = 0.0;
    if (avx2)
      ss = sum_squares_avx2(xr, d);
    else
      for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void rope_head(float* x, const float* cos, const float* sin, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  float* x1 = x;
  float* x2 = x + half;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x1[i], b = x2[i];
    x1[i] = a * cos[i] - b * sin[i];
    x2[i] = b * cos[i] + a * sin[i];
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (kernel_isa() >= KernelIsa::kAvx2) {
    silu_mul_avx2(gate, up, out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

float dot(const float* a, const float* b, int64_t n) {
  if (have_avx2()) return dot_avx2(a, b, n);
  float t = 0.f;
  for (int64_t i = 0; i < n; ++i) t += a[i] * b[i];
  return t;
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  if (have_avx2()) return axpy_avx2(alpha, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

namespace {

__attribute__((target("avx2,f16c"))) void store_f16_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

__attribute__((target("avx2,f16c"))) void load_f16_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

}  // namespace

void store_f16(const float* src, uint16_t* dst, int64_t n) {
  if (kernel_isa() >= KernelIsa::kAvx2) return store_f16_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void load_f16(const uint16_t* src, float* dst, int64_t n) {
  if (kernel_isa() >= KernelIsa::kAvx2) return load_f16_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

}  // namespace speclab::cpu
