#include "models/llama/qgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/gemv.h"
#include "models/llama/packed_blocks_avx2.h"
#include "models/loaders/dequant.h"

namespace speclab {

namespace {

using packed::block_bytes;
using packed::load_u16;
using packed::unpack_q4k_scales;
constexpr int64_t act_block(GgmlType t) { return packed::block_elems(t); }

float load_f16(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }

// Rounds v (|v| < 2^22) to the nearest integer, ties to even: the float addition of 1.5 * 2^23
// rounds away the fraction in the current (default: nearest-even) mode.
inline int round_even(float v) {
  const float magic = 12582912.f;
  return static_cast<int>((v + magic) - magic);
}

void quantize_row(const float* x, int64_t in, int64_t block, int8_t* q, float* d, float* s, int16_t* bsum16,
                  int16_t* bsum32) {
  for (int64_t b = 0; b < in / block; ++b) {
    const float* xb = x + b * block;
    int8_t* qb = q + b * block;
    float amax = 0.f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax / 127.f;
    const float id = db != 0.f ? 1.f / db : 0.f;
    for (int64_t i = 0; i < block; ++i) qb[i] = static_cast<int8_t>(std::clamp(round_even(xb[i] * id), -127, 127));
    d[b] = db;
    if (block == 32) {
      int sum = 0;
      for (int64_t i = 0; i < 32; ++i) sum += qb[i];
      s[b] = db * static_cast<float>(sum);
    } else {
      for (int64_t k = 0; k < block / 16; ++k) {
        int sum = 0;
        for (int64_t i = 0; i < 16; ++i) sum += qb[16 * k + i];
        bsum16[b * (block / 16) + k] = static_cast<int16_t>(sum);
      }
      for (int64_t k = 0; k < block / 32; ++k)
        bsum32[b * (block / 32) + k] =
            static_cast<int16_t>(bsum16[b * (block / 16) + 2 * k] + bsum16[b * (block / 16) + 2 * k + 1]);
    }
  }
}

// quantize_row with AVX2, bit-identical to it: the same float operations per element (|x| max,
// amax / 127, 1 / d, x * (1 / d), + and - 1.5 * 2^23, truncation, clamp), exact integer sums.
__attribute__((target("avx2,fma"))) inline int hsum_epi32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
  return _mm_cvtsi128_si32(x);
}

__attribute__((target("avx2,fma"))) void quantize_row_avx2(const float* x, int64_t in, int64_t block, int8_t* q,
                                                             float* d, float* s, int16_t* bsum16, int16_t* bsum32) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 magic = _mm256_set1_ps(12582912.f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < in / block; ++b) {
    const float* xb = x + b * block;
    int8_t* qb = q + b * block;
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < block; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + i), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 0x55));
    const float amax = _mm_cvtss_f32(m4);
    const float db = amax / 127.f;
    const float id = db != 0.f ? 1.f / db : 0.f;
    const __m256 idv = _mm256_set1_ps(id);
    int block_sum = 0;
    for (int64_t i = 0; i < block; i += 32) {
      __m256i v[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 t = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * k), idv), magic), magic);
        v[k] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(t), lo), hi);
      }
      const __m256i packed8 = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + i), _mm256_permutevar8x32_epi32(packed8, order));
      const int first16 = hsum_epi32(_mm256_add_epi32(v[0], v[1])), second16 = hsum_epi32(_mm256_add_epi32(v[2], v[3]));
      if (block == 32) {
        block_sum += first16 + second16;
      } else {
        bsum16[b * (block / 16) + i / 16] = static_cast<int16_t>(first16);
        bsum16[b * (block / 16) + i / 16 + 1] = static_cast<int16_t>(second16);
        bsum32[b * (block / 32) + i / 32] = static_cast<int16_t>(first16 + second16);
      }
    }
    d[b] = db;
    if (block == 32) s[b] = db * static_cast<float>(block_sum);
  }
}

// ---- scalar: one weight row against one quantized activation row ----------------------------
// Integer block sums (exact), then one float term per block, accumulated in block order.

// Weight integer values of a 32-element block (Q4_0, Q5_0, Q8_0, IQ4_NL signed; Q4_1 and Q5_1 unsigned).
template <GgmlType T>
void block_ints32_scalar(const uint8_t* blk, int* v) {
  if constexpr (T == GgmlType::Q8_0) {
    for (int i = 0; i < 32; ++i) v[i] = static_cast<int8_t>(blk[2 + i]);
  } else if constexpr (T == GgmlType::IQ4_NL) {
    for (int i = 0; i < 16; ++i) {
      v[i] = kIq4nlValues[blk[2 + i] & 0x0F];
      v[i + 16] = kIq4nlValues[blk[2 + i] >> 4];
    }
  } else if constexpr (packed::has_qh32(T)) {
    constexpr int at = T == GgmlType::Q5_1 ? 4 : 2, off = T == GgmlType::Q5_1 ? 0 : 16;  // qh at `at`, qs after it
    uint32_t qh;
    std::memcpy(&qh, blk + at, 4);
    for (int i = 0; i < 16; ++i) {
      v[i] = ((blk[at + 4 + i] & 0x0F) | (((qh >> i) & 1) << 4)) - off;
      v[i + 16] = ((blk[at + 4 + i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) - off;
    }
  } else {
    constexpr int at = T == GgmlType::Q4_1 ? 4 : 2, off = T == GgmlType::Q4_1 ? 0 : 8;
    for (int i = 0; i < 16; ++i) {
      v[i] = (blk[at + i] & 0x0F) - off;
      v[i + 16] = (blk[at + i] >> 4) - off;
    }
  }
}

template <GgmlType T>
float row_dot_scalar(const uint8_t* wrow, const int8_t* xq, const float* xd, const float* xs, const int16_t* xb16,
                     int64_t in) {
  constexpr int64_t bb = block_bytes(T);
  float acc = 0.f;
  if constexpr (act_block(T) == 32) {
    int v[32];
    for (int64_t b = 0; b < in / 32; ++b) {
      const uint8_t* blk = wrow + b * bb;
      block_ints32_scalar<T>(blk, v);
      int isum = 0;
      for (int i = 0; i < 32; ++i) isum += v[i] * xq[32 * b + i];
      acc += (load_f16(blk) * xd[b]) * static_cast<float>(isum);
      if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) acc += load_f16(blk + 2) * xs[b];
    }
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    for (int64_t b = 0; b < in / 256; ++b) {
      const uint8_t* blk = wrow + b * bb;
      const int8_t* x = xq + 256 * b;
      int sc[8], mn[8];
      unpack_q4k_scales(blk + 4, sc, mn);
      int isum = 0, imin = 0;
      for (int sb = 0; sb < 8; ++sb) {
        // Q5_K: qh[32] at 16 (bit sb of qh[l]: the fifth bit of element 32 sb + l), qs at 48.
        const uint8_t* qs = blk + (T == GgmlType::Q5_K ? 48 : 16) + 32 * (sb / 2);
        const int shift = 4 * (sb % 2);
        int dot = 0;
        for (int l = 0; l < 32; ++l) {
          int q = (qs[l] >> shift) & 0x0F;
          if constexpr (T == GgmlType::Q5_K) q |= ((blk[16 + l] >> sb) & 1) << 4;
          dot += q * x[32 * sb + l];
        }
        isum += sc[sb] * dot;
        imin += mn[sb] * (xb16[16 * b + 2 * sb] + xb16[16 * b + 2 * sb + 1]);
      }
      acc += (load_f16(blk) * xd[b]) * static_cast<float>(isum);
      acc -= (load_f16(blk + 2) * xd[b]) * static_cast<float>(imin);
    }
  } else if constexpr (T == GgmlType::Q2_K || T == GgmlType::Q3_K) {
    // Element e = 128 h + 32 s + l: bits 2s, 2s + 1 of qs[32h + l]; Q3_K: bit 2 from bit e / 32 of
    // hmask[l], and x = d sc (u - 4), the offset taken through the activation sums of 16.
    constexpr bool q3 = T == GgmlType::Q3_K;
    for (int64_t b = 0; b < in / 256; ++b) {
      const uint8_t* blk = wrow + b * bb;
      const uint8_t* qs = blk + (q3 ? 32 : 16);
      const int8_t* x = xq + 256 * b;
      int sc[16], mn[16];
      if constexpr (q3) {
        int8_t s8[16];
        packed::unpack_q3k_scales(blk + 96, s8);
        for (int k = 0; k < 16; ++k) sc[k] = s8[k], mn[k] = packed::k_offset(T) * s8[k];
      } else {
        for (int k = 0; k < 16; ++k) sc[k] = blk[k] & 0x0F, mn[k] = blk[k] >> 4;
      }
      int isum = 0, imin = 0;
      for (int k = 0; k < 16; ++k) {
        int dot = 0;
        for (int e = 16 * k; e < 16 * k + 16; ++e) {
          const int h = e / 128, s = (e / 32) % 4, l = e % 32;
          int u = (qs[32 * h + l] >> (2 * s)) & 3;
          if constexpr (q3) u |= ((blk[l] >> (e / 32)) & 1) << 2;
          dot += u * x[e];
        }
        isum += sc[k] * dot;
        imin += mn[k] * xb16[16 * b + k];
      }
      if constexpr (q3) {
        acc += (load_f16(blk + 108) * xd[b]) * static_cast<float>(isum - imin);
      } else {
        acc += (load_f16(blk + 80) * xd[b]) * static_cast<float>(isum);
        acc -= (load_f16(blk + 82) * xd[b]) * static_cast<float>(imin);
      }
    }
  } else if constexpr (T == GgmlType::IQ4_XS) {
    // Sub-block s: qs[16s + j] at 8 holds its elements j (low nibble) and j + 16 (high), table indices.
    for (int64_t b = 0; b < in / 256; ++b) {
      const uint8_t* blk = wrow + b * bb;
      const uint8_t* qs = blk + 8;
      const int8_t* x = xq + 256 * b;
      int sc[8];
      packed::unpack_iq4xs_scales(blk, sc);
      int isum = 0;
      for (int s = 0; s < 8; ++s) {
        int dot = 0;
        for (int j = 0; j < 16; ++j) {
          dot += kIq4nlValues[qs[16 * s + j] & 0x0F] * x[32 * s + j];
          dot += kIq4nlValues[qs[16 * s + j] >> 4] * x[32 * s + j + 16];
        }
        isum += sc[s] * dot;
      }
      acc += (load_f16(blk) * xd[b]) * static_cast<float>(isum);
    }
  } else {  // Q6_K
    for (int64_t b = 0; b < in / 256; ++b) {
      const uint8_t* blk = wrow + b * bb;
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const int8_t* x = xq + 256 * b;
      int isum = 0;
      for (int k = 0; k < 16; ++k) {
        int dot = 0;
        for (int e = 16 * k; e < 16 * k + 16; ++e) {
          const int h = e / 128, s = (e / 32) % 4, l = e % 32;
          const int low = (ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0x0F;
          const int high = (qh[32 * h + l] >> (2 * s)) & 3;
          dot += ((low | (high << 4)) - 32) * x[e];
        }
        isum += sc[k] * dot;
      }
      acc += (load_f16(blk + 208) * xd[b]) * static_cast<float>(isum);
    }
  }
  return acc;
}

// Views of one activation row's quantized data.
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;
  const int16_t* b16;
};
XRow x_row(const QuantizedRows& xq, int64_t j) {
  const int64_t nb = xq.in / xq.block;
  return {xq.q.data() + j * xq.in, xq.d.data() + j * nb, xq.block == 32 ? xq.s.data() + j * nb : nullptr,
          xq.block == 256 ? xq.bsum16.data() + j * (xq.in / 16) : nullptr};
}

template <GgmlType T>
void rows_scalar(const uint8_t* w, int64_t row_bytes, const QuantizedRows& xq, const float* bias, float* y,
                 int64_t out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < xq.n; ++j) {
      const XRow x = x_row(xq, j);
      y[j * out + r] = row_dot_scalar<T>(w + r * row_bytes, x.q, x.d, x.s, x.b16, xq.in) + (bias ? bias[r] : 0.f);
    }
}

// ---- AVX2 ------------------------------------------------------------------------------------

// How far ahead in a weight row the kernels prefetch.
constexpr int64_t kPrefetchAhead = 1024;


// Q4_0, Q4_1, Q5_0 and Q5_1 blocks are multiplied as their stored unsigned integers u (w = d * u
// + m, with m = -8d, the stored min, -16d, the stored min), so vpmaddubsw takes them as they are
// (u <= 31: a product pair is at most 7,874, and vpmaddwd sums the pairs); the offset m times
// the activation block's sum (QuantizedRows::s = dx * sum q) is added per block. Q8_0 and IQ4_NL
// (its table's values, |w| <= 127) use the sign trick (|w| * sign(x, w)).
template <GgmlType T>
constexpr bool kOffsetBlocks = T != GgmlType::Q8_0 && T != GgmlType::IQ4_NL;

// Block b's offset m (kOffsetBlocks types).
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline float block_offset(const uint8_t* blk) {
  if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) return _cvtsh_ss(load_u16(blk + 2));
  return (T == GgmlType::Q4_0 ? -8.f : -16.f) * _cvtsh_ss(load_u16(blk));  // exact: a power of two
}

// The integer part of block b for R weight rows x N activation rows: acc += (dw * dx) * sum(w * x)
// in 8 lanes (w: the stored unsigned integers for kOffsetBlocks types).
template <GgmlType T, int R, int N>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void int8_block32_avx2(
    const uint8_t* w, int64_t row_bytes, int64_t r, const XRow* xr, int64_t b, __m256 (&acc)[R][N]) {
  constexpr int64_t bb = block_bytes(T);
  const __m256i ones = _mm256_set1_epi16(1);
  // Once per 64-byte line of each row: the line kPrefetchAhead bytes further, in flight while
  // this one is decoded (prefetches never fault, so running past the matrix's end is harmless).
  const bool new_line = ((b * bb) & 63) < bb;
  for (int rr = 0; rr < R; ++rr) {
    const uint8_t* blk = w + (r + rr) * row_bytes + b * bb;
    if (new_line) _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchAhead), _MM_HINT_T0);
    __m256i wv, wu;
    if constexpr (kOffsetBlocks<T>) {
      wu = packed::block_uints32<T>(blk);
    } else {
      wv = packed::block_ints32<T>(blk);
      wu = _mm256_sign_epi8(wv, wv);  // |w| for the sign trick
    }
    const float dw = _cvtsh_ss(load_u16(blk));
    for (int j = 0; j < N; ++j) {
      __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[j].q + 32 * b));
      if constexpr (!kOffsetBlocks<T>) xv = _mm256_sign_epi8(xv, wv);
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xv), ones);
      acc[rr][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xr[j].d[b]), acc[rr][j]);
    }
  }
}

// R weight rows x N activation rows (starting at row j0) of a 32-element-block type. Each
// output's accumulator sees the same operations in block order whatever R and N are.
template <GgmlType T, int R, int N>
__attribute__((target("avx2,fma,f16c"))) void int8_rows32_avx2(const uint8_t* w, int64_t row_bytes,
                                                                const QuantizedRows& xq, int64_t j0,
                                                                const float* bias, float* y, int64_t out,
                                                                int64_t r) {
  constexpr int64_t bb = block_bytes(T);
  const int64_t in = xq.in, nb = in / 32;
  XRow xr[N];
  for (int j = 0; j < N; ++j) xr[j] = x_row(xq, j0 + j);
  __m256 acc[R][N];
  float macc[R][N];
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < N; ++j) {
      acc[rr][j] = _mm256_setzero_ps();
      macc[rr][j] = 0.f;
    }
  int64_t b = 0;
  if constexpr (kOffsetBlocks<T>) {
    // The offset term m * (dx * sum q) for 8 blocks at a time: acc += m[b..b+8) * s[b..b+8) lane-wise.
    constexpr bool stored_min = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
    constexpr int at = stored_min ? 2 : 0;  // Q4_1, Q5_1: the stored min; else the scale d
    for (; b + 8 <= nb; b += 8) {
      for (int64_t k = 0; k < 8; ++k) int8_block32_avx2<T, R, N>(w, row_bytes, r, xr, b + k, acc);
      for (int rr = 0; rr < R; ++rr) {
        const uint8_t* m = w + (r + rr) * row_bytes + b * bb + at;
        __m256 mv = _mm256_cvtph_ps(_mm_setr_epi16(
            static_cast<int16_t>(load_u16(m)), static_cast<int16_t>(load_u16(m + bb)),
            static_cast<int16_t>(load_u16(m + 2 * bb)), static_cast<int16_t>(load_u16(m + 3 * bb)),
            static_cast<int16_t>(load_u16(m + 4 * bb)), static_cast<int16_t>(load_u16(m + 5 * bb)),
            static_cast<int16_t>(load_u16(m + 6 * bb)), static_cast<int16_t>(load_u16(m + 7 * bb))));
        if constexpr (!stored_min) mv = _mm256_mul_ps(mv, _mm256_set1_ps(T == GgmlType::Q4_0 ? -8.f : -16.f));
        for (int j = 0; j < N; ++j) acc[rr][j] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(xr[j].s + b), acc[rr][j]);
      }
    }
  }
  for (; b < nb; ++b) {
    int8_block32_avx2<T, R, N>(w, row_bytes, r, xr, b, acc);
    if constexpr (kOffsetBlocks<T>)
      for (int rr = 0; rr < R; ++rr)
        for (int j = 0; j < N; ++j) macc[rr][j] += block_offset<T>(w + (r + rr) * row_bytes + b * bb) * xr[j].s[b];
  }
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < N; ++j)
      y[(j0 + j) * out + r + rr] = (packed::hsum8(acc[rr][j]) + macc[rr][j]) + (bias ? bias[r + rr] : 0.f);
}

// One weight row x N activation rows of a K-quant or IQ4_XS type.
// xr: the N activation rows j0..j0+N-1 (x_row), nb: super-blocks per row.
template <GgmlType T, int N>
__attribute__((target("avx2,fma,f16c"))) void int8_rowsk_avx2(const uint8_t* w, int64_t row_bytes, const XRow* xr,
                                                               int64_t nb, int64_t j0, const float* bias, float* y,
                                                               int64_t out, int64_t r) {
  constexpr int64_t bb = block_bytes(T);
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  packed::KInts k;
  __m256i scale[8], off16;  // vpmaddwd multipliers: per chunk, and for the 16 activation block sums
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + r * row_bytes + b * bb;
    // The super-block kPrefetchAhead bytes ahead, in flight while this one is decoded.
    for (int c = 0; c < bb; c += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchAhead + c), _MM_HINT_T0);
    packed::kblock_q<T>(blk, k);
    packed::kblock_scales16<T>(blk, scale, off16);
    // IQ4_XS's integers are signed (the table's values): |w| against sign(x, w), as Q8_0 does.
    constexpr bool signed_q = T == GgmlType::IQ4_XS;
    __m256i qa[8];
    for (int t = 0; t < 8; ++t) qa[t] = signed_q ? _mm256_abs_epi8(k.q[t]) : k.q[t];
    for (int j = 0; j < N; ++j) {
      const int8_t* x = xr[j].q + 256 * b;
      __m256i isum = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) {
        __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * t));
        if constexpr (signed_q) xv = _mm256_sign_epi8(xv, k.q[t]);
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(qa[t], xv), scale[t]));
      }
      const __m256i b16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[j].b16 + 16 * b));
      // Q4_K, Q5_K, Q2_K: min * sum of x over the min's elements; Q3_K, Q6_K: scale * sum16.
      const __m256i off = _mm256_madd_epi16(b16, off16);
      const float dx = xr[j].d[b];
      if constexpr (packed::has_kmins(T)) {
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(k.d * dx), acc[j]);
        acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(off), _mm256_set1_ps(k.dmin * dx), acc[j]);
      } else if constexpr (!packed::has_k_offset(T)) {  // IQ4_XS: no offset
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(k.d * dx), acc[j]);
      } else {
        // sum of scale * (q - 32) * x (Q6_K), scale * (q - 4) * x (Q3_K)
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, T == GgmlType::Q6_K ? 5 : 2));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(k.d * dx), acc[j]);
      }
    }
  }
  for (int j = 0; j < N; ++j) y[(j0 + j) * out + r] = packed::hsum8(acc[j]) + (bias ? bias[r] : 0.f);
}

template <GgmlType T, int N>
void int8_range_avx2_n(const uint8_t* w, int64_t row_bytes, const QuantizedRows& xq, int64_t j0, const float* bias,
                       float* y, int64_t out, int64_t r0, int64_t r1) {
  if constexpr (act_block(T) == 256) {
    XRow xr[N];  // hoisted: x_row divides
    for (int j = 0; j < N; ++j) xr[j] = x_row(xq, j0 + j);
    const int64_t nb = xq.in / 256;
    for (int64_t r = r0; r < r1; ++r) int8_rowsk_avx2<T, N>(w, row_bytes, xr, nb, j0, bias, y, out, r);
  } else {
    constexpr int R = N == 1 ? 4 : N <= 3 ? 2 : 1;  // independent accumulator chains for small N
    int64_t r = r0;
    for (; r + R <= r1; r += R) int8_rows32_avx2<T, R, N>(w, row_bytes, xq, j0, bias, y, out, r);
    for (; r < r1; ++r) int8_rows32_avx2<T, 1, N>(w, row_bytes, xq, j0, bias, y, out, r);
  }
}

// Rows [r0, r1) x all activation rows, in passes of up to 8 activation rows: the weight rows of
// this range stream from memory in the first pass and come from L1/L2 in the others.
template <GgmlType T>
void int8_range_avx2(const uint8_t* w, int64_t row_bytes, const QuantizedRows& xq, const float* bias, float* y,
                     int64_t out, int64_t r0, int64_t r1) {
  // Weight rows per pass: the passes of one group reuse them from L1 (<= ~16 KiB).
  const int64_t group = std::max<int64_t>(4, ((int64_t(1) << 14) / row_bytes) / 4 * 4);
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t g1 = std::min(r1, g0 + group);
    for (int64_t j0 = 0; j0 < xq.n; j0 += 8) {
      switch (std::min<int64_t>(8, xq.n - j0)) {
        case 1: int8_range_avx2_n<T, 1>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        case 2: int8_range_avx2_n<T, 2>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        case 3: int8_range_avx2_n<T, 3>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        case 4: int8_range_avx2_n<T, 4>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        case 5: int8_range_avx2_n<T, 5>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        case 6: int8_range_avx2_n<T, 6>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        case 7: int8_range_avx2_n<T, 7>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
        default: int8_range_avx2_n<T, 8>(w, row_bytes, xq, j0, bias, y, out, g0, g1); break;
      }
    }
  }
}

using RangeFn = void (*)(const uint8_t*, int64_t, const QuantizedRows&, const float*, float*, int64_t, int64_t,
                         int64_t);

template <GgmlType T>
RangeFn range_fn(bool avx2) {
  return avx2 ? int8_range_avx2<T> : rows_scalar<T>;
}

RangeFn pick(GgmlType t, bool avx2) {
  switch (t) {
    case GgmlType::Q4_0: return range_fn<GgmlType::Q4_0>(avx2);
    case GgmlType::Q4_1: return range_fn<GgmlType::Q4_1>(avx2);
    case GgmlType::Q5_0: return range_fn<GgmlType::Q5_0>(avx2);
    case GgmlType::Q5_1: return range_fn<GgmlType::Q5_1>(avx2);
    case GgmlType::Q8_0: return range_fn<GgmlType::Q8_0>(avx2);
    case GgmlType::IQ4_NL: return range_fn<GgmlType::IQ4_NL>(avx2);
    case GgmlType::Q2_K: return range_fn<GgmlType::Q2_K>(avx2);
    case GgmlType::Q3_K: return range_fn<GgmlType::Q3_K>(avx2);
    case GgmlType::Q4_K: return range_fn<GgmlType::Q4_K>(avx2);
    case GgmlType::Q5_K: return range_fn<GgmlType::Q5_K>(avx2);
    case GgmlType::Q6_K: return range_fn<GgmlType::Q6_K>(avx2);
    case GgmlType::IQ4_XS: return range_fn<GgmlType::IQ4_XS>(avx2);
    default: break;
  }
  throw Error(ErrorKind::kUnsupported, "int8-activation matmul supports " + int8_packable_type_names() + ", not " +
                                           ggml_type_name(static_cast<uint32_t>(t)));
}

// Checks the arguments and returns the weight row's byte size.
int64_t checked_row_bytes(uint32_t type_id, const QuantizedRows& xq) {
  if (!int8_gemm_supports(type_id)) pick(static_cast<GgmlType>(type_id), false);  // throws
  if (xq.block != act_block(static_cast<GgmlType>(type_id)) || xq.in % xq.block != 0)
    throw Error(ErrorKind::kBadInput, "activations quantized in blocks of " + std::to_string(xq.block) +
                                          " do not fit " + ggml_type_name(type_id) + " weights");
  return static_cast<int64_t>(ggml_row_bytes(type_id, static_cast<uint64_t>(xq.in), "int8 matmul weight row"));
}

}  // namespace

bool int8_gemm_supports(uint32_t type_id) { return is_int8_packable(type_id); }

void quantize_activations(uint32_t type_id, const float* x, int64_t n, int64_t in, QuantizedRows& out) {
  if (!int8_gemm_supports(type_id)) pick(static_cast<GgmlType>(type_id), false);  // throws
  const int64_t block = act_block(static_cast<GgmlType>(type_id));
  if (in <= 0 || in % block != 0)
    throw Error(ErrorKind::kBadInput, "int8 activations for " + ggml_type_name(type_id) + ": row length " +
                                          std::to_string(in) + " is not a multiple of " + std::to_string(block));
  out.n = n;
  out.in = in;
  out.block = block;
  const auto grow = [](auto& v, int64_t size) {
    if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
  };
  grow(out.q, n * in);
  grow(out.d, n * (in / block));
  if (block == 32)
    grow(out.s, n * (in / 32));
  else {
    grow(out.bsum16, n * (in / 16));
    grow(out.bsum32, n * (in / 32));
  }
  const auto row = kernel_isa() >= KernelIsa::kAvx2 ? quantize_row_avx2 : quantize_row;
  for (int64_t j = 0; j < n; ++j)
    row(x + j * in, in, block, out.q.data() + j * in, out.d.data() + j * (in / block),
                 block == 32 ? out.s.data() + j * (in / 32) : nullptr,
                 block == 256 ? out.bsum16.data() + j * (in / 16) : nullptr,
                 block == 256 ? out.bsum32.data() + j * (in / 32) : nullptr);
}

void gemm_packed_int8_q(const uint8_t* w, uint32_t type_id, const QuantizedRows& xq, const float* bias, float* y,
                        int64_t out) {
  const int64_t row_bytes = checked_row_bytes(type_id, xq);
  const RangeFn fn = pick(static_cast<GgmlType>(type_id), kernel_isa() != KernelIsa::kScalar);
  // ~16 KiB of weights per task: enough work per chunk, several chunks per thread.
  const int64_t grain = std::max<int64_t>(8, ((int64_t(1) << 14) / row_bytes) / 4 * 4);
  parallel_chunks(out, grain, compute_threads(),
                  [&](int64_t r0, int64_t r1) { fn(w, row_bytes, xq, bias, y, out, r0, r1); });
}

void gemm_packed_int8(const uint8_t* w, uint32_t type_id, const float* x, const float* bias, float* y, int64_t n,
                      int64_t out, int64_t in) {
  thread_local QuantizedRows xq;
  quantize_activations(type_id, x, n, in, xq);
  gemm_packed_int8_q(w, type_id, xq, bias, y, out);
}

void gemm_packed_int8_reference(const uint8_t* w, uint32_t type_id, const QuantizedRows& xq, const float* bias,
                                float* y, int64_t out) {
  const int64_t row_bytes = checked_row_bytes(type_id, xq);
  pick(static_cast<GgmlType>(type_id), false)(w, row_bytes, xq, bias, y, out, 0, out);
}

}  // namespace speclab
