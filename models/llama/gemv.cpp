#include "models/llama/gemv.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/packed_blocks_avx2.h"
#include "models/loaders/dequant.h"

namespace speclab {

namespace {

void rows_scalar(const float* w, const float* x, const float* bias, float* y, int64_t n, int64_t out, int64_t r0,
                 int64_t r1, int64_t in) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = w + r * in;
    for (int64_t j = 0; j < n; ++j) {
      const float* xj = x + j * in;
      float acc = 0.f;
      for (int64_t i = 0; i < in; ++i) acc += row[i] * xj[i];
      y[j * out + r] = acc + (bias ? bias[r] : 0.f);
    }
  }
}


// One activation row against four weight rows (x loaded once per 8 columns).
__attribute__((target("avx2,fma"))) void four_rows_one_x(const float* a, int64_t in, const float* xj, float* out4) {
  const int64_t vec_end = in - in % 8;
  const float* b = a + in;
  const float* c = b + in;
  const float* d = c + in;
  __m256 sa = _mm256_setzero_ps(), sb = _mm256_setzero_ps(), sc = _mm256_setzero_ps(), sd = _mm256_setzero_ps();
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 xv = _mm256_loadu_ps(xj + i);
    sa = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), xv, sa);
    sb = _mm256_fmadd_ps(_mm256_loadu_ps(b + i), xv, sb);
    sc = _mm256_fmadd_ps(_mm256_loadu_ps(c + i), xv, sc);
    sd = _mm256_fmadd_ps(_mm256_loadu_ps(d + i), xv, sd);
  }
  float ta = packed::hsum8(sa), tb = packed::hsum8(sb), tc = packed::hsum8(sc), td = packed::hsum8(sd);
  for (int64_t i = vec_end; i < in; ++i) {
    ta += a[i] * xj[i];
    tb += b[i] * xj[i];
    tc += c[i] * xj[i];
    td += d[i] * xj[i];
  }
  out4[0] = ta;
  out4[1] = tb;
  out4[2] = tc;
  out4[3] = td;
}

// Three activation rows against four weight rows: 12 accumulators, 7 loads per 12 FMAs.
__attribute__((target("avx2,fma"))) void four_rows_three_x(const float* a, int64_t in, const float* x0,
                                                           const float* x1, const float* x2, float* out12) {
  const int64_t vec_end = in - in % 8;
  const float* rows[4] = {a, a + in, a + 2 * in, a + 3 * in};
  __m256 acc[4][3];
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < vec_end; i += 8) {
    const __m256 v0 = _mm256_loadu_ps(x0 + i), v1 = _mm256_loadu_ps(x1 + i), v2 = _mm256_loadu_ps(x2 + i);
    for (int r = 0; r < 4; ++r) {
      const __m256 wv = _mm256_loadu_ps(rows[r] + i);
      acc[r][0] = _mm256_fmadd_ps(wv, v0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(wv, v1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(wv, v2, acc[r][2]);
    }
  }
  const float* xs[3] = {x0, x1, x2};
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) {
      float t = packed::hsum8(acc[r][j]);
      for (int64_t i = vec_end; i < in; ++i) t += rows[r][i] * xs[j][i];
      out12[j * 4 + r] = t;
    }
}

__attribute__((target("avx2,fma"))) void rows_avx2(const float* w, const float* x, const float* bias, float* y,
                                                   int64_t n, int64_t out, int64_t r0, int64_t r1, int64_t in) {
  int64_t r = r0;
  float t[4];
  // The four weight rows stream from memory on the first activation row and stay in L1 for the
  // others (4 rows x in floats <= 24 KiB for in <= 1536).
  float t12[12];
  for (; r + 4 <= r1; r += 4) {
    const float* a = w + r * in;
    int64_t j = 0;
    for (; j + 3 <= n; j += 3) {
      four_rows_three_x(a, in, x + j * in, x + (j + 1) * in, x + (j + 2) * in, t12);
      for (int jj = 0; jj < 3; ++jj) {
        float* yj = y + (j + jj) * out + r;
        for (int q = 0; q < 4; ++q) yj[q] = t12[jj * 4 + q] + (bias ? bias[r + q] : 0.f);
      }
    }
    for (; j < n; ++j) {
      four_rows_one_x(a, in, x + j * in, t);
      float* yj = y + j * out + r;
      for (int q = 0; q < 4; ++q) yj[q] = t[q] + (bias ? bias[r + q] : 0.f);
    }
  }
  rows_scalar(w, x, bias, y, n, out, r, r1, in);
}

// AVX-512: eight weight rows against three activation rows (24 zmm accumulators).
__attribute__((target("avx512f"))) void eight_rows_three_x(const float* a, int64_t in, const float* x0,
                                                           const float* x1, const float* x2, float* out24) {
  const int64_t vec_end = in - in % 16;
  __m512 acc[8][3];
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < 3; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < vec_end; i += 16) {
    const __m512 v0 = _mm512_loadu_ps(x0 + i), v1 = _mm512_loadu_ps(x1 + i), v2 = _mm512_loadu_ps(x2 + i);
    for (int r = 0; r < 8; ++r) {
      const __m512 wv = _mm512_loadu_ps(a + r * in + i);
      acc[r][0] = _mm512_fmadd_ps(wv, v0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(wv, v1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(wv, v2, acc[r][2]);
    }
  }
  const float* xs[3] = {x0, x1, x2};
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < 3; ++j) {
      float t = _mm512_reduce_add_ps(acc[r][j]);
      for (int64_t i = vec_end; i < in; ++i) t += a[r * in + i] * xs[j][i];
      out24[j * 8 + r] = t;
    }
}

// Rows [r0, r1) with AVX-512 for the 8-row x 3-activation blocks; the rest via rows_avx2.
__attribute__((target("avx512f"))) void rows_avx512(const float* w, const float* x, const float* bias, float* y,
                                                    int64_t n, int64_t out, int64_t r0, int64_t r1, int64_t in) {
  if (n < 3) {
    rows_avx2(w, x, bias, y, n, out, r0, r1, in);
    return;
  }
  const int64_t n3 = n - n % 3;
  float t24[24];
  int64_t r = r0;
  for (; r + 8 <= r1; r += 8) {
    const float* a = w + r * in;
    for (int64_t j = 0; j < n3; j += 3) {
      eight_rows_three_x(a, in, x + j * in, x + (j + 1) * in, x + (j + 2) * in, t24);
      for (int jj = 0; jj < 3; ++jj) {
        float* yj = y + (j + jj) * out + r;
        for (int q = 0; q < 8; ++q) yj[q] = t24[jj * 8 + q] + (bias ? bias[r + q] : 0.f);
      }
    }
    // Leftover activation rows while these 8 weight rows are still in L1.
    for (int64_t j = n3; j < n; ++j) {
      four_rows_one_x(a, in, x + j * in, t24);
      four_rows_one_x(a + 4 * in, in, x + j * in, t24 + 4);
      float* yj = y + j * out + r;
      for (int q = 0; q < 8; ++q) yj[q] = t24[q] + (bias ? bias[r + q] : 0.f);
    }
  }
  rows_avx2(w, x, bias, y, n, out, r, r1, in);
}

std::atomic<int> g_isa_cap{static_cast<int>(kKernelIsaMax)};

bool cpu_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

bool cpu_avx2() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

bool have_avx512() { return cpu_avx2() && cpu_avx512() && g_isa_cap.load(std::memory_order_relaxed) >= 2; }
bool have_avx2() { return cpu_avx2() && g_isa_cap.load(std::memory_order_relaxed) >= 1; }

bool cpu_avx512_vnni() {
  static const bool ok = __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

// ---- packed (quantized) rows -> float32 ------------------------------------------------------
// Block layouts (dequant.h): Q4_0 {f16 d; u8 qs[16]} x = d*(nibble-8); Q4_1 {f16 d, m; u8 qs[16]}
// x = d*nibble + m; Q8_0 {f16 d; i8 qs[32]} x = d*q. Low nibbles of qs are elements 0..15, high
// nibbles 16..31. Products and sums are rounded separately (no FMA), like dequantize().

inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

__attribute__((target("avx512f,f16c"))) void decode_row_avx512(const uint8_t* src, GgmlType type, int64_t in,
                                                                float* dst) {
  const int64_t nb = in / 32;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    float* o = dst + 32 * b;
    __m512 lo, hi;
    if (type == GgmlType::Q4_1) {
      const uint8_t* blk = src + 20 * b;
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_u16(blk))), m = _mm512_set1_ps(_cvtsh_ss(load_u16(blk + 2)));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
      lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, low4)));
      hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low4)));
      lo = _mm512_add_ps(_mm512_mul_ps(lo, d), m);
      hi = _mm512_add_ps(_mm512_mul_ps(hi, d), m);
    } else if (type == GgmlType::Q4_0) {
      const uint8_t* blk = src + 18 * b;
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_u16(blk))), eight = _mm512_set1_ps(8.f);
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
      lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, low4)));
      hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low4)));
      lo = _mm512_mul_ps(_mm512_sub_ps(lo, eight), d);
      hi = _mm512_mul_ps(_mm512_sub_ps(hi, eight), d);
    } else {  // Q8_0
      const uint8_t* blk = src + 34 * b;
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_u16(blk)));
      lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
      hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
      lo = _mm512_mul_ps(lo, d);
      hi = _mm512_mul_ps(hi, d);
    }
    _mm512_storeu_ps(o, lo);
    _mm512_storeu_ps(o + 16, hi);
  }
}

__attribute__((target("avx2,f16c"))) void decode_row_avx2(const uint8_t* src, GgmlType type, int64_t in, float* dst) {
  const int64_t nb = in / 32;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    float* o = dst + 32 * b;
    __m256 v[4];
    if (type == GgmlType::Q8_0) {
      const uint8_t* blk = src + 34 * b;
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
      for (int k = 0; k < 4; ++k)
        v[k] = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k)))),
            d);
    } else {
      const bool q41 = type == GgmlType::Q4_1;
      const uint8_t* blk = src + (q41 ? 20 : 18) * b;
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
      const __m256 m = q41 ? _mm256_set1_ps(_cvtsh_ss(load_u16(blk + 2))) : _mm256_set1_ps(8.f);
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (q41 ? 4 : 2)));
      const __m128i lo = _mm_and_si128(q, low4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
      const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int k = 0; k < 4; ++k) {
        const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));  // low 8 bytes
        v[k] = q41 ? _mm256_add_ps(_mm256_mul_ps(f, d), m) : _mm256_mul_ps(_mm256_sub_ps(f, m), d);
      }
    }
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(o + 8 * k, v[k]);
  }
}

// One block of 32 weights decoded into two registers (elements 0-15, 16-31), exactly as
// decode_row_avx512 stores them.
template <GgmlType T>
__attribute__((target("avx512f,f16c"), always_inline)) inline void decode_block_avx512(const uint8_t* blk, __m512& lo,
                                                                                       __m512& hi) {
  if constexpr (T == GgmlType::Q8_0) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_u16(blk)));
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)))), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)))), d);
  } else {
    constexpr int qs_at = T == GgmlType::Q4_1 ? 4 : 2;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qs_at));
    lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, low4)));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low4)));
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_u16(blk)));
    if constexpr (T == GgmlType::Q4_1) {
      const __m512 m = _mm512_set1_ps(_cvtsh_ss(load_u16(blk + 2)));
      lo = _mm512_add_ps(_mm512_mul_ps(lo, d), m);
      hi = _mm512_add_ps(_mm512_mul_ps(hi, d), m);
    } else {
      const __m512 eight = _mm512_set1_ps(8.f);
      lo = _mm512_mul_ps(_mm512_sub_ps(lo, eight), d);
      hi = _mm512_mul_ps(_mm512_sub_ps(hi, eight), d);
    }
  }
}

// Small batches (decode: n = 1; short verifications: n <= 4) decode each block in registers and
// apply it to every activation row at once: no float32 tile is written and read back. R weight
// rows x N activation rows of 16-lane accumulators.
template <GgmlType T, int R, int N>
__attribute__((target("avx512f,f16c"))) void fused_rows_avx512(const uint8_t* w, int64_t row_bytes, const float* x,
                                                               const float* bias, float* y, int64_t out, int64_t r,
                                                               int64_t in) {
  constexpr int64_t block_bytes = T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q4_0 ? 18 : 34;
  const int64_t nb = in / 32;
  __m512 acc[R][N];
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < N; ++j) acc[rr][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    for (int rr = 0; rr < R; ++rr) {
      __m512 lo, hi;
      decode_block_avx512<T>(w + (r + rr) * row_bytes + b * block_bytes, lo, hi);
      for (int j = 0; j < N; ++j) {  // x rows come from L1
        acc[rr][j] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + j * in + 32 * b), acc[rr][j]);
        acc[rr][j] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + j * in + 32 * b + 16), acc[rr][j]);
      }
    }
  }
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < N; ++j) y[j * out + r + rr] = _mm512_reduce_add_ps(acc[rr][j]) + (bias ? bias[r + rr] : 0.f);
}

template <GgmlType T, int N>
void fused_range_avx512(const uint8_t* w, int64_t row_bytes, const float* x, const float* bias, float* y, int64_t out,
                        int64_t r0, int64_t r1, int64_t in) {
  constexpr int R = N <= 4 ? 4 : N <= 6 ? 3 : N <= 8 ? 2 : 1;  // R x N accumulators: at most 24 registers
  int64_t r = r0;
  for (; r + R <= r1; r += R) fused_rows_avx512<T, R, N>(w, row_bytes, x, bias, y, out, r, in);
  for (; r < r1; ++r) fused_rows_avx512<T, 1, N>(w, row_bytes, x, bias, y, out, r, in);
}


// ---- AVX2 (no AVX-512): the same fused scheme with 8-lane registers ------------------------

// One block of 32 weights decoded into four registers (elements 0-7, 8-15, 16-23, 24-31), exactly
// as decode_row_avx2 stores them.
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void decode_block_avx2(const uint8_t* blk, __m256* w) {
  if constexpr (T == GgmlType::F16) {  // exact: every binary16 value is a float32 one
    for (int k = 0; k < 4; ++k) w[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * k)));
  } else if constexpr (T == GgmlType::BF16) {  // a bfloat16 is the top half of its float32
    for (int k = 0; k < 4; ++k)
      w[k] = _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * k))), 16));
  } else if constexpr (T == GgmlType::Q5_0 || T == GgmlType::IQ4_NL) {  // float(q - 16) * d, d * float(table[i]): as dequantize()
    const __m256i q = packed::block_ints32<T>(blk);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
    for (int k = 0; k < 4; ++k) w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d);
  } else if constexpr (T == GgmlType::Q5_1) {  // float(q) * d + m, as dequantize()
    const __m256i q = packed::block_uints32<T>(blk);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk))), m = _mm256_set1_ps(_cvtsh_ss(load_u16(blk + 2)));
    for (int k = 0; k < 4; ++k)
      w[k] = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k])), d), m);
  } else if constexpr (T == GgmlType::Q8_0) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
    for (int k = 0; k < 4; ++k)
      w[k] = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k)))), d);
  } else {
    constexpr int qs_at = T == GgmlType::Q4_1 ? 4 : 2;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qs_at));
    const __m128i lo = _mm_and_si128(q, low4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
    w[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    w[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    w[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    w[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
    if constexpr (T == GgmlType::Q4_1) {
      const __m256 m = _mm256_set1_ps(_cvtsh_ss(load_u16(blk + 2)));
      for (int k = 0; k < 4; ++k) w[k] = _mm256_add_ps(_mm256_mul_ps(w[k], d), m);
    } else {
      const __m256 eight = _mm256_set1_ps(8.f);
      for (int k = 0; k < 4; ++k) w[k] = _mm256_mul_ps(_mm256_sub_ps(w[k], eight), d);
    }
  }
}

// Chunk t (elements 32t..32t+31) of a K-quant super-block as float32, exactly dequantize()'s
// values: Q4_K and Q5_K (d * sc) * q - dmin * mn; Q2_K the same with a scale and a min per 16
// elements; Q3_K and Q6_K (d * sc) * (q - 4) and (q - 32); IQ4_XS (d * sc) * table value.
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void kchunk_f32_avx2(const packed::KInts& k, int t,
                                                                                    __m256* w) {
  constexpr bool offset = packed::has_k_offset(T);  // Q3_K, Q6_K: signed q - offset
  const __m256i q = offset ? _mm256_sub_epi8(k.q[t], _mm256_set1_epi8(packed::k_offset(T))) : k.q[t];
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    const __m256 d1 = _mm256_set1_ps(k.d * static_cast<float>(k.sc[t]));
    const __m256 m1 = _mm256_set1_ps(k.dmin * static_cast<float>(k.mn[t]));
    for (int i = 0; i < 4; ++i) w[i] = _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]))), m1);
  } else if constexpr (T == GgmlType::IQ4_XS) {
    const __m256 dl = _mm256_set1_ps(k.d * static_cast<float>(k.sc[t]));
    for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i])));
  } else if constexpr (T == GgmlType::Q2_K) {
    const __m256 dl[2] = {_mm256_set1_ps(k.d * static_cast<float>(k.sc[2 * t])),
                          _mm256_set1_ps(k.d * static_cast<float>(k.sc[2 * t + 1]))};
    const __m256 ml[2] = {_mm256_set1_ps(k.dmin * static_cast<float>(k.mn[2 * t])),
                          _mm256_set1_ps(k.dmin * static_cast<float>(k.mn[2 * t + 1]))};
    for (int i = 0; i < 4; ++i)
      w[i] = _mm256_sub_ps(_mm256_mul_ps(dl[i / 2], _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]))), ml[i / 2]);
  } else {
    const __m256 dl[2] = {_mm256_set1_ps(k.d * static_cast<float>(k.sc[2 * t])),
                          _mm256_set1_ps(k.d * static_cast<float>(k.sc[2 * t + 1]))};
    for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(dl[i / 2], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i])));
  }
}

// Decodes 32-element chunk t of the block at blk into w[0..4) (k: the block's integers, decoded
// by the caller for the K-quants).
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void chunk_f32_avx2(const uint8_t* blk,
                                                                                   const packed::KInts& k, int t,
                                                                                   __m256* w) {
  if constexpr (packed::block_elems(T) == 256)
    kchunk_f32_avx2<T>(k, t, w);
  else
    decode_block_avx2<T>(blk, w);
}

// R weight rows x N activation rows of 8-lane accumulators; each accumulator adds every 32-element
// chunk's four 8-weight parts in order, so a row's sum does not depend on N or R (decode and
// verification give bit-identical logits).
template <GgmlType T, int R, int N>
__attribute__((target("avx2,fma,f16c"))) void fused_rows_avx2(const uint8_t* w, int64_t row_bytes, const float* x,
                                                              const float* bias, float* y, int64_t out, int64_t r,
                                                              int64_t in) {
  constexpr int64_t bb = packed::block_bytes(T), be = packed::block_elems(T);
  const int64_t nb = in / be;
  __m256 acc[R][N];
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < N; ++j) acc[rr][j] = _mm256_setzero_ps();
  packed::KInts k;
  for (int64_t b = 0; b < nb; ++b) {
    for (int rr = 0; rr < R; ++rr) {
      const uint8_t* blk = w + (r + rr) * row_bytes + b * bb;
      if constexpr (be == 256) packed::kblock_ints<T>(blk, k);
      for (int t = 0; t < be / 32; ++t) {
        __m256 wv[4];
        chunk_f32_avx2<T>(blk, k, t, wv);
        for (int j = 0; j < N; ++j) {
          const float* xb = x + j * in + be * b + 32 * t;
          for (int q = 0; q < 4; ++q) acc[rr][j] = _mm256_fmadd_ps(wv[q], _mm256_loadu_ps(xb + 8 * q), acc[rr][j]);
        }
      }
    }
  }
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < N; ++j) y[j * out + r + rr] = packed::hsum8(acc[rr][j]) + (bias ? bias[r + rr] : 0.f);
}

// A row of a Q5_0 / Q5_1 / IQ4_NL matrix or a K-quant or IQ4_XS one decoded to float32 (dequantize()'s values). GCC 12 at -O3
// drops this loop's stores for the K-quants unless its loop vectorizer is off here (found by
// test_qgemm's embedding check; -O2 and -O3 -fno-tree-vectorize are correct).
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), optimize("no-tree-vectorize"))) void decode_row_chunks_avx2(const uint8_t* src, int64_t in, float* dst) {
  constexpr int64_t bb = packed::block_bytes(T), be = packed::block_elems(T);
  packed::KInts k;
  for (int64_t b = 0; b < in / be; ++b) {
    const uint8_t* blk = src + b * bb;
    if constexpr (be == 256) packed::kblock_ints<T>(blk, k);
    for (int t = 0; t < be / 32; ++t) {
      __m256 wv[4];
      chunk_f32_avx2<T>(blk, k, t, wv);
      for (int q = 0; q < 4; ++q) _mm256_storeu_ps(dst + be * b + 32 * t + 8 * q, wv[q]);
    }
  }
}

template <GgmlType T, int N>
void fused_range_avx2(const uint8_t* w, int64_t row_bytes, const float* x, const float* bias, float* y, int64_t out,
                      int64_t r0, int64_t r1, int64_t in) {
  // R x N accumulators + 4 weights <= 16 registers (x is an FMA memory operand); N = 9..12 spill
  // a few accumulators to L1, still cheaper than decoding every block twice.
  constexpr int R = N <= 2 ? 4 : N <= 3 ? 3 : N <= 5 ? 2 : 1;
  int64_t r = r0;
  for (; r + R <= r1; r += R) fused_rows_avx2<T, R, N>(w, row_bytes, x, bias, y, out, r, in);
  for (; r < r1; ++r) fused_rows_avx2<T, 1, N>(w, row_bytes, x, bias, y, out, r, in);
}

// The fused kernels of one ISA, by block type and activation-row count N <= 8.
template <GgmlType T, int N>
struct Avx512Kernel {
  static constexpr int kMaxN = 8;
  static constexpr bool kAllTypes = false;  // Q4_0, Q4_1, Q8_0 only
  static void run(const uint8_t* w, int64_t row_bytes, const float* x, const float* bias, float* y, int64_t out,
                  int64_t r0, int64_t r1, int64_t in) {
    fused_range_avx512<T, N>(w, row_bytes, x, bias, y, out, r0, r1, in);
  }
};
template <GgmlType T, int N>
struct Avx2Kernel {
  static constexpr int kMaxN = 12;
  static constexpr bool kAllTypes = true;
  static void run(const uint8_t* w, int64_t row_bytes, const float* x, const float* bias, float* y, int64_t out,
                  int64_t r0, int64_t r1, int64_t in) {
    fused_range_avx2<T, N>(w, row_bytes, x, bias, y, out, r0, r1, in);
  }
};

// Rows [r0, r1) for any n: one call of the N = n kernel when n <= K::kMaxN, else a pass of
// kMaxN rows and then the rest.
template <template <GgmlType, int> class K, GgmlType T>
void fused_range_any_n(const uint8_t* w, int64_t row_bytes, const float* x, const float* bias, float* y, int64_t n,
                       int64_t out, int64_t r0, int64_t r1, int64_t in) {
  switch (n) {
    case 1: return K<T, 1>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 2: return K<T, 2>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 3: return K<T, 3>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 4: return K<T, 4>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 5: return K<T, 5>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 6: return K<T, 6>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 7: return K<T, 7>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    case 8: return K<T, 8>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
    default: break;
  }
  constexpr int max_n = K<T, 1>::kMaxN;
  if constexpr (max_n >= 12) {
    switch (n) {
      case 9: return K<T, 9>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
      case 10: return K<T, 10>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
      case 11: return K<T, 11>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
      case 12: return K<T, 12>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
      default: break;
    }
  }
  // More rows than one pass takes: a full pass, then the rest.
  K<T, max_n>::run(w, row_bytes, x, bias, y, out, r0, r1, in);
  fused_range_any_n<K, T>(w, row_bytes, x + max_n * in, bias, y + max_n * out, n - max_n, out, r0, r1, in);
}

// Q5_0, Q5_1, IQ4_NL, the K-quants, IQ4_XS, F16 and BF16: no AVX-512 kernels; AVX-512 CPUs run the
// AVX2 ones.
bool avx2_only_type(GgmlType t) {
  return t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::IQ4_NL || packed::is_super256(t) ||
         t == GgmlType::F16 || t == GgmlType::BF16;
}

// f(std::integral_constant<GgmlType, T>{}) for the type T == t: the one place that maps an
// avx2_only_type to its kernels' template argument (t must be one of them).
template <class F>
void with_avx2_only_type(GgmlType t, F&& f) {
  using G = GgmlType;
  switch (t) {
    case G::Q5_0: return f(std::integral_constant<G, G::Q5_0>{});
    case G::Q5_1: return f(std::integral_constant<G, G::Q5_1>{});
    case G::IQ4_NL: return f(std::integral_constant<G, G::IQ4_NL>{});
    case G::Q2_K: return f(std::integral_constant<G, G::Q2_K>{});
    case G::Q3_K: return f(std::integral_constant<G, G::Q3_K>{});
    case G::Q4_K: return f(std::integral_constant<G, G::Q4_K>{});
    case G::Q5_K: return f(std::integral_constant<G, G::Q5_K>{});
    case G::IQ4_XS: return f(std::integral_constant<G, G::IQ4_XS>{});
    case G::F16: return f(std::integral_constant<G, G::F16>{});
    case G::BF16: return f(std::integral_constant<G, G::BF16>{});
    default: return f(std::integral_constant<G, G::Q6_K>{});
  }
}

template <template <GgmlType, int> class K>
void fused_gemm(const uint8_t* w, GgmlType type, int64_t row_bytes, const float* x, const float* bias, float* y,
                int64_t n, int64_t out, int64_t in, int64_t grain) {
  parallel_chunks(out, grain, compute_threads(), [&](int64_t r0, int64_t r1) {
    switch (type) {
      case GgmlType::Q4_1: return fused_range_any_n<K, GgmlType::Q4_1>(w, row_bytes, x, bias, y, n, out, r0, r1, in);
      case GgmlType::Q4_0: return fused_range_any_n<K, GgmlType::Q4_0>(w, row_bytes, x, bias, y, n, out, r0, r1, in);
      case GgmlType::Q8_0: return fused_range_any_n<K, GgmlType::Q8_0>(w, row_bytes, x, bias, y, n, out, r0, r1, in);
      default: break;
    }
    if constexpr (K<GgmlType::Q4_0, 1>::kAllTypes)
      with_avx2_only_type(type, [&](auto t) {
        fused_range_any_n<K, decltype(t)::value>(w, row_bytes, x, bias, y, n, out, r0, r1, in);
      });
  });
}

void decode_row(const uint8_t* src, GgmlType type, int64_t in, int64_t row_bytes, float* dst) {
  if (avx2_only_type(type) && have_avx2())
    with_avx2_only_type(type, [&](auto t) { decode_row_chunks_avx2<decltype(t)::value>(src, in, dst); });
  else if (have_avx512())
    decode_row_avx512(src, type, in, dst);
  else if (have_avx2())
    decode_row_avx2(src, type, in, dst);
  else
    dequantize(static_cast<uint32_t>(type), src, static_cast<size_t>(row_bytes), dst, static_cast<size_t>(in),
               "packed weight row");
}

int64_t packed_row_bytes(uint32_t type, int64_t in) {
  if (!gemm_packed_supports(type))
    throw Error(ErrorKind::kUnsupported,
                "packed matmul supports " + packable_type_names() + ", not " + ggml_type_name(type));
  if (in % packed::block_elems(static_cast<GgmlType>(type)) != 0)
    throw Error(ErrorKind::kBadInput, "packed " + ggml_type_name(type) + " matmul: row length " + std::to_string(in) +
                                          " is not a multiple of " +
                                          std::to_string(packed::block_elems(static_cast<GgmlType>(type))));
  return static_cast<int64_t>(ggml_row_bytes(type, static_cast<uint64_t>(in), "packed weight row"));
}

}  // namespace

bool gemm_packed_supports(uint32_t type_id) {
  const auto t = static_cast<GgmlType>(type_id);
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0 || avx2_only_type(t);
}

KernelIsa best_kernel_isa() {
  if (!cpu_avx2()) return KernelIsa::kScalar;
  if (!cpu_avx512()) return KernelIsa::kAvx2;
  return cpu_avx512_vnni() ? KernelIsa::kAvx512Vnni : KernelIsa::kAvx512;
}

KernelIsa kernel_isa() {
  const KernelIsa cap = static_cast<KernelIsa>(g_isa_cap.load(std::memory_order_relaxed));
  return std::min(best_kernel_isa(), cap);
}

void set_kernel_isa_cap(KernelIsa cap) { g_isa_cap.store(static_cast<int>(cap)); }

const char* kernel_isa_name(KernelIsa isa) {
  return isa == KernelIsa::kAvx512Vnni ? "AVX-512 VNNI"
         : isa == KernelIsa::kAvx512  ? "AVX-512"
         : isa == KernelIsa::kAvx2    ? "AVX2"
                                      : "scalar";
}

void gemm_small_packed(const uint8_t* w, uint32_t type_id, const float* x, const float* bias, float* y, int64_t n,
                       int64_t out, int64_t in) {
  const int64_t row_bytes = packed_row_bytes(type_id, in);
  const GgmlType type = static_cast<GgmlType>(type_id);
  constexpr int64_t kTile = 8;  // rows decoded at a time: 8 x in floats stay in L1/L2
  const int64_t grain = std::max<int64_t>(2 * kTile, ((int64_t(1) << 15) / std::max<int64_t>(in, 1)) / kTile * kTile);
  const bool avx2 = have_avx2();
  const bool avx512 = avx2 && have_avx512();
  // n <= kMaxRowExact: fused kernels, row-exact (passes of up to 8 / 12 activation rows re-read
  // the weight rows from L1).
  if (avx2 && n <= kMaxRowExact) {
    if (avx512 && !avx2_only_type(type))
      return fused_gemm<Avx512Kernel>(w, type, row_bytes, x, bias, y, n, out, in, grain);
    return fused_gemm<Avx2Kernel>(w, type, row_bytes, x, bias, y, n, out, in, grain);
  }
  parallel_chunks(out, grain, compute_threads(), [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> tile;
    if (tile.size() < static_cast<size_t>(kTile * in)) tile.resize(static_cast<size_t>(kTile * in));
    for (int64_t r = r0; r < r1; r += kTile) {
      const int64_t rows = std::min(kTile, r1 - r);
      for (int64_t i = 0; i < rows; ++i) decode_row(w + (r + i) * row_bytes, type, in, row_bytes, tile.data() + i * in);
      const float* b = bias ? bias + r : nullptr;
      if (avx512)
        rows_avx512(tile.data(), x, b, y + r, n, out, 0, rows, in);
      else if (avx2)
        rows_avx2(tile.data(), x, b, y + r, n, out, 0, rows, in);
      else
        rows_scalar(tile.data(), x, b, y + r, n, out, 0, rows, in);
    }
  });
}

void dequantize_packed_rows(const uint8_t* w, uint32_t type_id, const int64_t* rows, int64_t n, int64_t in,
                            float* dst) {
  const int64_t row_bytes = packed_row_bytes(type_id, in);
  for (int64_t i = 0; i < n; ++i)
    decode_row(w + rows[i] * row_bytes, static_cast<GgmlType>(type_id), in, row_bytes, dst + i * in);
}

void gemm_small_f32(const float* w, const float* x, const float* bias, float* y, int64_t n, int64_t out, int64_t in) {
  // ~64 KiB of weights per task: enough work per thread without oversubscribing small matrices.
  const int64_t grain = std::max<int64_t>(16, (int64_t(1) << 14) / std::max<int64_t>(in, 1));
  const bool avx2 = have_avx2();
  const bool avx512 = avx2 && have_avx512();
  parallel_chunks(out, grain, compute_threads(), [&](int64_t r0, int64_t r1) {
    // rows_avx512 sums 3-row groups in 16 lanes and other rows in 8: not row-exact, so only prefill.
    if (avx512 && n > kMaxRowExact)
      rows_avx512(w, x, bias, y, n, out, r0, r1, in);
    else if (avx2)
      rows_avx2(w, x, bias, y, n, out, r0, r1, in);
    else
      rows_scalar(w, x, bias, y, n, out, r0, r1, in);
  });
}

}  // namespace speclab
