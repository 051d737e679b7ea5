#include "models/llama/attention_cpu.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/attention_int8_vnni.h"
#include "models/llama/cpu_ops.h"
#include "models/llama/gemv.h"
#include "models/llama/packed_blocks_avx2.h"
#include "models/llama/simd_exp.h"
#include "models/llama/tile_prefetch.h"

namespace speclab::cpu {

namespace {

constexpr int64_t kSplit = kAttentionSplit, kTile = kAttentionTile;
constexpr int64_t kRowBlock = 8;  // rows per work item (any value gives the same results)
static_assert(kSplit % kTile == 0, "tiles must not straddle splits");

// The per-(query, tile) steps, in scalar, AVX2 and AVX-512 flavours. Every step is a function
// of one query's own data and its own key count nk, so a row's result never depends on other
// rows. Each flavour runs them for Q queries of one kv head at once (scores_q, max_q, exps_q,
// values_q), with each query's operations those of a Q = 1 call.
//   scores:   s[j] = dot(q, k_j) * scale for j < nk
//   tile_max: max_j s[j]
//   exps:     s[j] = exp(s[j] - m) for j < nk; returns their sum
//   values:   acc = acc * alpha + sum_j s[j] v_j   (acc: [D])

// max_q / exps_q (below) for the flavours that have no interleaved version: Ops::tile_max and
// Ops::exps query by query.
template <class Ops>
struct QueryByQuery {
  template <int Q>
  static void max_q(float* const* s, int64_t nk, float* out) {
    for (int i = 0; i < Q; ++i) out[i] = Ops::tile_max(s[i], nk);
  }
  template <int Q>
  static void exps_q(float* const* s, int64_t nk, const float* m, float* sum) {
    for (int i = 0; i < Q; ++i) sum[i] = Ops::exps(s[i], nk, m[i]);
  }
};

struct ScalarOps : QueryByQuery<ScalarOps> {
  static void scores(const float* q, const float* const* krow, int64_t nk, int64_t D, float scale, const float* mul,
                     float* s) {
    for (int64_t j = 0; j < nk; ++j) {
      float acc = 0.f;
      for (int64_t d = 0; d < D; ++d) acc += q[d] * krow[j][d];
      s[j] = acc * (mul ? mul[j] : scale);
    }
  }
  static float tile_max(const float* s, int64_t nk) {
    float m = s[0];
    for (int64_t j = 1; j < nk; ++j) m = std::max(m, s[j]);
    return m;
  }
  static float exps(float* s, int64_t nk, float m) {
    float sum = 0.f;
    for (int64_t j = 0; j < nk; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    return sum;
  }
  static void values(const float* p, const float* const* vrow, int64_t nk, int64_t D, float alpha, float* acc) {
    if (alpha != 1.f)
      for (int64_t d = 0; d < D; ++d) acc[d] *= alpha;
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t d = 0; d < D; ++d) acc[d] += p[j] * vrow[j][d];
  }
  // Q queries of one kv head at once (Avx2Ops shares each K and V load among them): here one
  // after the other.
  template <int Q, class E>
  static void scores_q(const float* const* q, const E* const* krow, int64_t nk, int64_t D, float scale,
                       const float* mul, float* const* s, detail::TilePrefetch* pf) {
    static_assert(std::is_same_v<E, float>, "the scalar flavour reads float32 tiles (kReadsRaw is false)");
    if (pf) pf->step();
    for (int i = 0; i < Q; ++i) scores(q[i], krow, nk, D, scale, mul, s[i]);
  }
  template <int Q, class E>
  static void values_q(const float* const* p, const E* const* vrow, int64_t nk, int64_t D, const float* alpha,
                       float* const* acc) {
    static_assert(std::is_same_v<E, float>, "the scalar flavour reads float32 tiles (kReadsRaw is false)");
    for (int i = 0; i < Q; ++i) values(p[i], vrow, nk, D, alpha[i], acc[i]);
  }
  static constexpr bool kReadsRaw = false;  // a float16 or int8 cache is widened into float32 tiles first
};


// [sum(a0), ..., sum(a7)]: the eight horizontal sums in one vector, by one fixed tree.
__attribute__((target("avx2,fma"))) inline __m256 hsum8x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4,
                                                           __m256 a5, __m256 a6, __m256 a7) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// 8 (AVX2) or 16 (AVX-512) cache elements as float32: float32 rows loaded as they are, binary16
// rows widened as they are loaded (exact, so both give the same bits for the same values), int8
// rows as their integers (exact; the head's scale is applied to the score or the weight).
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 ld8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 ld8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 ld8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,f16c"), always_inline)) inline __m512 ld16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,f16c"), always_inline)) inline __m512 ld16(const float* p) {
  return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,f16c"), always_inline)) inline __m512 ld16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// AVX2 flavour; needs D % 8 == 0. Keys are scored eight at a time, one accumulator each; a
// group short of eight keys repeats a real key row in the missing lanes (results discarded), so
// every score comes out of the same instruction sequence whatever nk is.
struct Avx2Ops : QueryByQuery<Avx2Ops> {
  __attribute__((target("avx2,fma"))) static void scores(const float* q, const float* const* krow, int64_t nk,
                                                         int64_t D, float scale, float* s) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t j = 0; j < nk; j += 8) {
      const float* k[8];
      for (int64_t t = 0; t < 8; ++t) k[t] = krow[j + t < nk ? j + t : j];
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
      for (int64_t d = 0; d < D; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[0] + d), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[1] + d), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[2] + d), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[3] + d), a3);
        a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[4] + d), a4);
        a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[5] + d), a5);
        a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[6] + d), a6);
        a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[7] + d), a7);
      }
      _mm256_storeu_ps(s + j, _mm256_mul_ps(hsum8x8(a0, a1, a2, a3, a4, a5, a6, a7), sc));
    }
  }

  // max(s[0..nk)); max is exact, so any order gives the scalar loop's value.
  __attribute__((target("avx2,fma"))) static float tile_max(const float* s, int64_t nk) {
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t j = 0;
    for (; j + 8 <= nk; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    float r = _mm_cvtss_f32(_mm_max_ss(x, _mm_shuffle_ps(x, x, 0x55)));
    for (; j < nk; ++j) r = std::max(r, s[j]);
    return r;
  }

  __attribute__((target("avx2,fma"))) static float exps(float* s, int64_t nk, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < nk; j += 8) {
      const int64_t left = nk - j;
      if (left >= 8) {
        const __m256 p = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        _mm256_storeu_ps(s + j, p);
        sum = _mm256_add_ps(sum, p);
      } else {
        // Lanes past nk are zero: they add nothing to the sum and are never read as weights.
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane);
        const __m256 x = _mm256_maskload_ps(s + j, mask);
        const __m256 p = _mm256_and_ps(exp8_avx2(_mm256_sub_ps(x, mv)), _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(s + j, mask, p);
        sum = _mm256_add_ps(sum, p);
      }
    }
    return packed::hsum8(sum);
  }

  // acc[c*8 .. c*8 + 8*NV) for one block of NV vectors: each element is scaled once, then
  // accumulates p_j v_j[d] in key order, the same chain whatever NV is.
  template <int NV>
  __attribute__((target("avx2,fma"), always_inline)) static inline void values_block(const float* p,
                                                                                    const float* const* vrow,
                                                                                    int64_t nk, int64_t off,
                                                                                    float alpha, float* acc) {
    __m256 a[NV];
    for (int c = 0; c < NV; ++c) a[c] = _mm256_loadu_ps(acc + off + 8 * c);
    if (alpha != 1.f) {
      const __m256 al = _mm256_set1_ps(alpha);
      for (int c = 0; c < NV; ++c) a[c] = _mm256_mul_ps(a[c], al);
    }
    for (int64_t j = 0; j < nk; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* vj = vrow[j] + off;
      for (int c = 0; c < NV; ++c) a[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), a[c]);
    }
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(acc + off + 8 * c, a[c]);
  }

  __attribute__((target("avx2,fma"))) static void values(const float* p, const float* const* vrow, int64_t nk,
                                                         int64_t D, float alpha, float* acc) {
    int64_t off = 0;
    for (; off + 64 <= D; off += 64) values_block<8>(p, vrow, nk, off, alpha, acc);
    for (; off < D; off += 8) values_block<1>(p, vrow, nk, off, alpha, acc);
  }

  // scores() for Q <= 3 queries of one kv head at once: each K vector is loaded once for the Q
  // queries (4 keys x Q queries accumulators). Each score is the same FMA chain over d and the
  // same addition tree as in scores() (hsum8x8's lanes 0-3 depend only on its first four
  // arguments, and are (u.lo + u.hi) of u = hadd(hadd(a0, a1), hadd(a2, a3))), so results are
  // bit-identical to scores() query by query (with mul null; mul, an int8 tile's per-key
  // factors, replaces the one scale).
  template <int Q, class E>
  __attribute__((target("avx2,fma,f16c"))) static void scores_q(const float* const* q, const E* const* krow,
                                                                int64_t nk, int64_t D, float scale, const float* mul,
                                                                float* const* s, detail::TilePrefetch* pf) {
    const __m128 sc = _mm_set1_ps(scale);
    for (int64_t j = 0; j < nk; j += 8) {
      if (pf) pf->step();
      for (int64_t half = 0; half < 8; half += 4) {
        const E* k[4];
        for (int64_t t = 0; t < 4; ++t) k[t] = krow[j + half + t < nk ? j + half + t : j];
        __m256 acc[Q][4];
        for (int i = 0; i < Q; ++i)
          for (int t = 0; t < 4; ++t) acc[i][t] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d += 8) {
          __m256 qv[Q];
          for (int i = 0; i < Q; ++i) qv[i] = _mm256_loadu_ps(q[i] + d);
          for (int t = 0; t < 4; ++t) {
            const __m256 kv = ld8(k[t] + d);
            for (int i = 0; i < Q; ++i) acc[i][t] = _mm256_fmadd_ps(qv[i], kv, acc[i][t]);
          }
        }
        for (int i = 0; i < Q; ++i) {
          const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(acc[i][0], acc[i][1]), _mm256_hadd_ps(acc[i][2], acc[i][3]));
          const __m128 r = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
          _mm_storeu_ps(s[i] + j + half, _mm_mul_ps(r, mul ? _mm_loadu_ps(mul + j + half) : sc));
        }
      }
    }
  }

  // values() for Q <= 3 queries at once: each V vector is loaded once for the Q queries (blocks
  // of 4 vectors x Q queries accumulators). Every element sees the same operations in the same
  // order as in values(): bit-identical query by query.
  template <int Q, int NV, class E>
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline void values_q_block(
      const float* const* p, const E* const* vrow, int64_t nk, int64_t off, const float* alpha,
      float* const* acc) {
    __m256 a[Q][NV];
    for (int i = 0; i < Q; ++i) {
      for (int c = 0; c < NV; ++c) a[i][c] = _mm256_loadu_ps(acc[i] + off + 8 * c);
      if (alpha[i] != 1.f) {
        const __m256 al = _mm256_set1_ps(alpha[i]);
        for (int c = 0; c < NV; ++c) a[i][c] = _mm256_mul_ps(a[i][c], al);
      }
    }
    for (int64_t j = 0; j < nk; ++j) {
      __m256 pj[Q];
      for (int i = 0; i < Q; ++i) pj[i] = _mm256_set1_ps(p[i][j]);
      const E* vj = vrow[j] + off;
      for (int c = 0; c < NV; ++c) {
        const __m256 v = ld8(vj + 8 * c);
        for (int i = 0; i < Q; ++i) a[i][c] = _mm256_fmadd_ps(pj[i], v, a[i][c]);
      }
    }
    for (int i = 0; i < Q; ++i)
      for (int c = 0; c < NV; ++c) _mm256_storeu_ps(acc[i] + off + 8 * c, a[i][c]);
  }

  template <int Q, class E>
  __attribute__((target("avx2,fma,f16c"))) static void values_q(const float* const* p, const E* const* vrow,
                                                                int64_t nk, int64_t D, const float* alpha,
                                                                float* const* acc) {
    int64_t off = 0;
    for (; off + 32 <= D; off += 32) values_q_block<Q, 4>(p, vrow, nk, off, alpha, acc);
    for (; off < D; off += 8) values_q_block<Q, 1>(p, vrow, nk, off, alpha, acc);
  }
  static constexpr bool kReadsRaw = true;  // reads float16 and int8 tiles as stored
};

// AVX-512 flavour (16-lane registers; needs D % 16 == 0): half the FMAs of Avx2Ops per score
// and per value, the same structure. Keys are scored eight at a time, a group short of eight
// repeating a real key row, and reduced by one fixed tree (hsum16x8), so every score comes out
// of the same instruction sequence whatever nk, n or the query grouping is. Results differ from
// Avx2Ops in the last bits (another summation order), never between rows or calls.
#define SPECLAB_A512 __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,f16c")))
struct Avx512Ops {
  // [sum(a0), ..., sum(a7)]: quarters paired (shuffle_f32x4), then the 4 lanes of each quarter.
  // [x quarters 0+2, 1+3 | y quarters 0+2, 1+3].
  SPECLAB_A512 static inline __m512 pair(__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  // [x quarters 0+1, 2+3 | y quarters 0+1, 2+3].
  SPECLAB_A512 static inline __m512 quad(__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
  }
  SPECLAB_A512 static inline __m256 hsum16x8(const __m512 (&a)[8]) {
    const __m512 t0 = quad(pair(a[0], a[1]), pair(a[2], a[3]));  // quarter t: key t's 4 partial sums
    const __m512 t1 = quad(pair(a[4], a[5]), pair(a[6], a[7]));  // quarter t: key 4 + t's
    const __m512 u = _mm512_add_ps(_mm512_unpacklo_ps(t0, t1), _mm512_unpackhi_ps(t0, t1));
    const __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));  // lane 0 of quarter t: key t; lane 1: key 4 + t
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, v));
  }

  // Q <= 3 queries of one kv head: 8 keys x Q queries accumulators, each K vector loaded once.
  template <int Q, class E>
  SPECLAB_A512 static void scores_q(const float* const* q, const E* const* krow, int64_t nk, int64_t D,
                                    float scale, const float* mul, float* const* s, detail::TilePrefetch* pf) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t j = 0; j < nk; j += 8) {
      if (pf) pf->step();
      const E* k[8];
      for (int64_t t = 0; t < 8; ++t) k[t] = krow[j + t < nk ? j + t : j];
      __m512 acc[Q][8];
      for (int i = 0; i < Q; ++i)
        for (int t = 0; t < 8; ++t) acc[i][t] = _mm512_setzero_ps();
      for (int64_t d = 0; d < D; d += 16) {
        __m512 qv[Q];
        for (int i = 0; i < Q; ++i) qv[i] = _mm512_loadu_ps(q[i] + d);
        for (int t = 0; t < 8; ++t) {
          const __m512 kv = ld16(k[t] + d);
          for (int i = 0; i < Q; ++i) acc[i][t] = _mm512_fmadd_ps(qv[i], kv, acc[i][t]);
        }
      }
      const __m256 m = mul ? _mm256_loadu_ps(mul + j) : sc;
      for (int i = 0; i < Q; ++i) _mm256_storeu_ps(s[i] + j, _mm256_mul_ps(hsum16x8(acc[i]), m));
    }
  }

  // max(s_i[0..nk)) and exps (s_i[j] = exp(s_i[j] - m_i), returning their sum) for Q queries at
  // once: the Q chains are independent, so their latencies overlap. Each query's operations are
  // the ones of a Q = 1 call in the same order (bit-identical whatever Q); max is exact.
  template <int Q>
  SPECLAB_A512 static void max_q(float* const* s, int64_t nk, float* out) {
    __m512 m[Q];
    for (int i = 0; i < Q; ++i) m[i] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < nk; j += 16) {
      const int64_t left = nk - j;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
      for (int i = 0; i < Q; ++i) m[i] = _mm512_mask_max_ps(m[i], mask, m[i], _mm512_maskz_loadu_ps(mask, s[i] + j));
    }
    for (int i = 0; i < Q; ++i) out[i] = _mm512_reduce_max_ps(m[i]);
  }

  template <int Q>
  SPECLAB_A512 static void exps_q(float* const* s, int64_t nk, const float* m, float* sum) {
    __m512 mv[Q], acc[Q];
    for (int i = 0; i < Q; ++i) {
      mv[i] = _mm512_set1_ps(m[i]);
      acc[i] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < nk; j += 16) {
      // Lanes past nk are zero: they add nothing to the sum and are never read as weights.
      const int64_t left = nk - j;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
      for (int i = 0; i < Q; ++i) {
        const __m512 x = _mm512_maskz_loadu_ps(mask, s[i] + j);
        const __m512 p = _mm512_maskz_mov_ps(mask, exp16_avx512(_mm512_sub_ps(x, mv[i])));
        _mm512_mask_storeu_ps(s[i] + j, mask, p);
        acc[i] = _mm512_add_ps(acc[i], p);
      }
    }
    for (int i = 0; i < Q; ++i) sum[i] = _mm512_reduce_add_ps(acc[i]);
  }

  // acc[off .. off + 16 NV) of Q queries: each element scaled once, then p_j v_j[d] in key order.
  template <int Q, int NV, class E>
  SPECLAB_A512 static inline void values_q_block(const float* const* p, const E* const* vrow, int64_t nk,
                                                 int64_t off, const float* alpha, float* const* acc) {
    __m512 a[Q][NV];
    for (int i = 0; i < Q; ++i) {
      for (int c = 0; c < NV; ++c) a[i][c] = _mm512_loadu_ps(acc[i] + off + 16 * c);
      if (alpha[i] != 1.f) {
        const __m512 al = _mm512_set1_ps(alpha[i]);
        for (int c = 0; c < NV; ++c) a[i][c] = _mm512_mul_ps(a[i][c], al);
      }
    }
    for (int64_t j = 0; j < nk; ++j) {
      __m512 pj[Q];
      for (int i = 0; i < Q; ++i) pj[i] = _mm512_set1_ps(p[i][j]);
      const E* vj = vrow[j] + off;
      for (int c = 0; c < NV; ++c) {
        const __m512 v = ld16(vj + 16 * c);
        for (int i = 0; i < Q; ++i) a[i][c] = _mm512_fmadd_ps(pj[i], v, a[i][c]);
      }
    }
    for (int i = 0; i < Q; ++i)
      for (int c = 0; c < NV; ++c) _mm512_storeu_ps(acc[i] + off + 16 * c, a[i][c]);
  }

  template <int Q, class E>
  SPECLAB_A512 static void values_q(const float* const* p, const E* const* vrow, int64_t nk, int64_t D,
                                    const float* alpha, float* const* acc) {
    int64_t off = 0;
    for (; off + 64 <= D; off += 64) values_q_block<Q, 4>(p, vrow, nk, off, alpha, acc);
    for (; off < D; off += 16) values_q_block<Q, 1>(p, vrow, nk, off, alpha, acc);
  }
  static constexpr bool kReadsRaw = true;  // reads float16 and int8 tiles as stored
};
#undef SPECLAB_A512

inline int64_t slot_of(const AttentionArgs& a, int64_t j) { return a.slots ? a.slots[j] : a.slot_base + j; }

// Partial result of one (query, split): running max m, sum l of exp(s - m), and
// acc = sum exp(s - m) v. Stored as [m, l, acc[D]].
using detail::partial_stride;

// The online-softmax update of one tile for Q query heads h..h+Q-1 of row i (one kv head): each
// query's scores, max, rescale factor, exps and weighted values, as a function of its own data
// only. st = [m, l, acc[D]] per query (partial_stride); s: [Q, kTile] scratch. kmul, vmul (int8
// tiles; else null): per key, the factor of its score (its K scale times a.scale) and of its
// softmax weight in the values (its V scale); the sum l takes the weights before vmul. pf (or
// null): the next tile's prefetch, stepped by the scores.
template <class Ops, int Q, class E>
void tile_queries(const AttentionArgs& a, int64_t i, int64_t h, const E* const* krow, const E* const* vrow,
                  const float* kmul, const float* vmul, int64_t nk, float* part, float* s, detail::TilePrefetch* pf) {
  const int64_t D = a.head_dim, H = a.n_heads, ps = partial_stride(D);
  const float* q[Q];
  float* st[Q];
  float* sq[Q];
  float* acc[Q];
  float alpha[Q], m_new[Q];
  for (int k = 0; k < Q; ++k) {
    q[k] = a.q + i * a.q_stride + (h + k) * D;
    st[k] = part + (i * H + h + k) * ps;
    sq[k] = s + k * kTile;
    acc[k] = st[k] + 2;
  }
  Ops::template scores_q<Q, E>(q, krow, nk, D, a.scale, kmul, sq, pf);
  float tmax[Q], tsum[Q];
  Ops::template max_q<Q>(sq, nk, tmax);
  for (int k = 0; k < Q; ++k) {
    const float m_old = st[k][0];
    m_new[k] = std::max(m_old, tmax[k]);
    // exp(m_old - m_new): 0 on the first tile (m_old = -inf), 1 while the max holds; the two
    // shortcuts are the values std::exp gives.
    alpha[k] = m_old == m_new[k] ? 1.f : m_old == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m_old - m_new[k]);
  }
  Ops::template exps_q<Q>(sq, nk, m_new, tsum);
  for (int k = 0; k < Q; ++k) st[k][1] = st[k][1] * alpha[k] + tsum[k];
  if (vmul)
    for (int k = 0; k < Q; ++k)
      for (int64_t j = 0; j < nk; ++j) sq[k][j] *= vmul[j];
  Ops::template values_q<Q, E>(sq, vrow, nk, D, alpha, acc);
  for (int k = 0; k < Q; ++k) st[k][0] = m_new[k];
}

// The queries of rows [r0, r1) and kv heads [g0, g1) over one tile: nk_all keys from key t0,
// key j's K and V rows at kr[j], vr[j]: [n_kv_heads, hs] elements of type E each (float32;
// binary16 that the kernels widen as they load, hs = D; int8 values with their head's float32
// scale in the 4 bytes after them, hs = D + 4), kv head g at g * hs. pf (or null) steps once per
// block of 8 keys scored by the SIMD flavours, once per batch of queries by the scalar one
// (score_steps() counts the former).
template <class Ops, class E>
void attend_tile(const AttentionArgs& a, int64_t r0, int64_t r1, int64_t g0, int64_t g1, int64_t t0,
                 int64_t nk_all, const E* const* kr, const E* const* vr, int64_t hs, float* part, float* s,
                 detail::TilePrefetch* pf) {
  constexpr bool kQ8 = std::is_same_v<E, int8_t>;
  const int64_t D = a.head_dim, G = a.n_heads / a.n_kv_heads;
  const E* krow[kTile];
  const E* vrow[kTile];
  float kmul[kTile], vmul[kTile];  // int8 only; zero past nk_all (scores there are discarded)
  if constexpr (kQ8) {
    std::fill(kmul, kmul + kTile, 0.f);
    std::fill(vmul, vmul + kTile, 0.f);
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t j = 0; j < nk_all; ++j) {
      krow[j] = kr[j] + g * hs;
      vrow[j] = vr[j] + g * hs;
      if constexpr (kQ8) {
        float ks, vs;
        std::memcpy(&ks, krow[j] + D, sizeof(float));
        std::memcpy(&vs, vrow[j] + D, sizeof(float));
        kmul[j] = ks * a.scale;
        vmul[j] = vs;
      }
    }
    const float* km = kQ8 ? kmul : nullptr;
    const float* vm = kQ8 ? vmul : nullptr;
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t nk = std::min(nk_all, a.limits[i] - t0);
      if (nk <= 0) continue;
      // The group's query heads, up to 3 at a time (how they are grouped changes no result).
      for (int64_t h = g * G; h < (g + 1) * G; h += 3) {
        const int64_t q_n = std::min<int64_t>(3, (g + 1) * G - h);
        if (q_n == 3)
          tile_queries<Ops, 3>(a, i, h, krow, vrow, km, vm, nk, part, s, pf);
        else if (q_n == 2)
          tile_queries<Ops, 2>(a, i, h, krow, vrow, km, vm, nk, part, s, pf);
        else
          tile_queries<Ops, 1>(a, i, h, krow, vrow, km, vm, nk, part, s, pf);
      }
    }
  }
}

// How many blocks of 8 keys attend_tile() scores over a tile of nk_all keys from t0 (the steps
// of its TilePrefetch): per kv head and row, ceil(nk / 8) per batch of up to 3 query heads. (The
// scalar flavour steps once per batch; TilePrefetch::finish() hints what its steps left.)
inline int64_t score_steps(const AttentionArgs& a, int64_t r0, int64_t r1, int64_t g0, int64_t g1, int64_t t0,
                           int64_t nk_all) {
  const int64_t G = a.n_heads / a.n_kv_heads, batches = (G + 2) / 3;
  int64_t blocks = 0;
  for (int64_t i = r0; i < r1; ++i) {
    const int64_t nk = std::min(nk_all, a.limits[i] - t0);
    if (nk > 0) blocks += (nk + 7) / 8;
  }
  return blocks * batches * (g1 - g0);
}

// The tiles of `Tile` keys over [j0, j1), read where the cache holds them (E: the cache's element
// type, read as stored), the next tile's rows hinted meanwhile: for each tile from key t0 with
// nk keys, attend(t0, nk, kr, vr) gets key j's K and V rows at kr[j], vr[j] ([n_kv_heads, hs]
// elements each) and steps next_tile steps(t0, nk) times.
template <class E, int64_t Tile, class Steps, class Attend>
void tiles_in_place(const AttentionArgs& a, int64_t j0, int64_t j1, int64_t hs, detail::TilePrefetch& next_tile,
                    const Steps& steps, const Attend& attend) {
  const int64_t row = a.n_kv_heads * hs;
  const E* const k = static_cast<const E*>(a.k);
  const E* const v = static_cast<const E*>(a.v);
  const E* kr[Tile];
  const E* vr[Tile];
  for (int64_t t0 = j0; t0 < j1; t0 += Tile) {
    const int64_t nk_all = std::min(Tile, j1 - t0);
    for (int64_t j = 0; j < nk_all; ++j) {
      const int64_t off = slot_of(a, t0 + j) * row;
      kr[j] = k + off;
      vr[j] = v + off;
    }
    next_tile.aim(t0 + Tile, std::min(t0 + 2 * Tile, j1), steps(t0, nk_all));
    attend(t0, nk_all, kr, vr);
    next_tile.finish();
  }
}

// One work item: the keys of split `split`, rows [r0, r1), kv heads [g0, g1) and their query
// heads. For each tile and kv head g, the tile's K and V rows of g are loaded once and reused from
// L1 by the (r1 - r0) * G queries that read them. How the work is cut into items does not change
// any result: each query's arithmetic depends only on its own keys. part: [n * H, D + 2]
// partials of this split, query (i, h) at row i * H + h; an item writes only its own queries'.
// qq: the call's quantized queries when the int8 VNNI flavour runs (attention_int8_vnni.h), else null.
template <class Ops>
void run_item(const AttentionArgs& a, const detail::Int8Queries* qq, int64_t split, int64_t r0, int64_t r1,
              int64_t g0, int64_t g1, int64_t max_limit, float* part) {
  const int64_t D = a.head_dim, H = a.n_heads, G = H / a.n_kv_heads, kv_dim = a.n_kv_heads * D,
                ps = partial_stride(D);
  const int64_t j0 = split * kSplit, j1 = std::min(j0 + kSplit, max_limit);
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t h = g0 * G; h < g1 * G; ++h) {
      float* st = part + (i * H + h) * ps;
      st[0] = -std::numeric_limits<float>::infinity();
      st[1] = 0.f;
      std::fill(st + 2, st + 2 + D, 0.f);
    }
  float s[3 * kTile];
  // The kernels read each tile's K and V rows where the cache holds them, while the next tile's
  // rows are hinted a few keys per block of scores (tile_prefetch.h). Until 2026-11-27
  // the rows were copied into [kTile, row] buffers first, one memcpy per run of consecutive slots,
  // because read in place (one kv head's D of every row at a time) they streamed at a third of
  // the memory bandwidth; the hints then went out all at once before the arithmetic and stalled
  // the core as long as the loads they were meant to hide. With the hints spread over the tile,
  // reading in place is faster than the copy (docs/performance.md, "The next tile's prefetch
  // spread over the current tile"). Only the scalar flavour still copies, to widen a float16 or
  // dequantize an int8 cache into float32 tiles. The int8 VNNI flavour reads in place too
  // (attention_int8_vnni.h).
  const bool q8 = a.kv == KvElement::kInt8, f16 = a.kv == KvElement::kFloat16;
  const int64_t hs = q8 ? D + kKvInt8ScaleBytes : D;  // stored elements per kv head
  const int64_t row = a.n_kv_heads * hs, es = q8 ? 1 : f16 ? 2 : 4;
  const bool raw = !q8 && !f16 ? true : Ops::kReadsRaw;  // the flavour reads the stored elements (float32: always)
  const char* const kc = static_cast<const char*>(a.k);
  const char* const vc = static_cast<const char*>(a.v);
  const int64_t c0 = g0 * hs, cn = (g1 - g0) * hs;  // the elements of a slot's row this item reads
  // The next tile's rows, hinted a few keys at a time during this tile's arithmetic (tile_prefetch.h).
  // Into L2 for a call of one or two rows, into L1 for more (tile_prefetch.h): by the call's rows,
  // not the item's, since a plan may cut a pass of more rows into items of one or two.
  detail::TilePrefetch next_tile(a.slots, a.slot_base, kc, vc, row * es, c0 * es, cn * es, a.n <= 2);
  // The int8 VNNI flavour takes tiles of kInt8VnniTile keys (its per-tile steps cost more, its
  // per-key steps less).
  if (qq)
    return tiles_in_place<int8_t, detail::kInt8VnniTile>(
        a, j0, j1, hs, next_tile, [&](int64_t, int64_t) { return (g1 - g0) * detail::int8_vnni_prefetch_steps(D); },
        [&](int64_t t0, int64_t nk, const int8_t* const* kr, const int8_t* const* vr) {
          detail::attend_tile_int8_vnni(a, *qq, r0, r1, g0, g1, t0, nk, kr, vr, part, &next_tile);
        });
  if (raw) {  // the float flavours over the stored elements
    const auto steps = [&](int64_t t0, int64_t nk) { return score_steps(a, r0, r1, g0, g1, t0, nk); };
    const auto in_place = [&](auto element) {
      using E = decltype(element);
      tiles_in_place<E, kTile>(a, j0, j1, hs, next_tile, steps,
                               [&](int64_t t0, int64_t nk, const E* const* kr, const E* const* vr) {
                                 attend_tile<Ops, E>(a, r0, r1, g0, g1, t0, nk, kr, vr, hs, part, s, &next_tile);
                               });
    };
    if constexpr (Ops::kReadsRaw) {
      if (q8) return in_place(int8_t{});
      if (f16) return in_place(uint16_t{});
    }
    return in_place(float{});
  }
  // The scalar flavour over a float16 or int8 cache: each tile widened into float32 buffers,
  // [kTile, kv_dim], kv heads [g0, g1) of each key at their own offsets.
  thread_local std::vector<float> kbuf, vbuf;
  if (kbuf.size() < static_cast<size_t>(kTile * kv_dim)) {
    kbuf.resize(static_cast<size_t>(kTile * kv_dim));
    vbuf.resize(static_cast<size_t>(kTile * kv_dim));
  }
  const float* kr[kTile];
  const float* vr[kTile];
  for (int64_t j = 0; j < kTile; ++j) {
    kr[j] = kbuf.data() + j * kv_dim;
    vr[j] = vbuf.data() + j * kv_dim;
  }
  for (int64_t t0 = j0; t0 < j1; t0 += kTile) {
    const int64_t nk_all = std::min(kTile, j1 - t0);
    for (int64_t j = 0; j < nk_all; ++j) {
      const int64_t off = slot_of(a, t0 + j) * row + c0, dst = j * kv_dim + g0 * D;
      if (f16) {  // exact
        load_f16(reinterpret_cast<const uint16_t*>(kc) + off, kbuf.data() + dst, cn);
        load_f16(reinterpret_cast<const uint16_t*>(vc) + off, vbuf.data() + dst, cn);
      } else {
        dequantize_kv_heads(reinterpret_cast<const int8_t*>(kc) + off, g1 - g0, D, kbuf.data() + dst);
        dequantize_kv_heads(reinterpret_cast<const int8_t*>(vc) + off, g1 - g0, D, vbuf.data() + dst);
      }
    }
    next_tile.aim(t0 + kTile, std::min(t0 + 2 * kTile, j1), score_steps(a, r0, r1, g0, g1, t0, nk_all));
    attend_tile<Ops, float>(a, r0, r1, g0, g1, t0, nk_all, kr, vr, D, part, s, &next_tile);
    next_tile.finish();
  }
}

// How attend_rows() cuts a call into work items: `rows` rows by `heads` kv heads per (split, row
// block, head group) item. The default, whole cache rows (all kv heads of a slot) and blocks of
// kRowBlock rows, keeps long contexts reading every line of each row once per item. With fewer than two splits
// per thread (under 768 keys on 2 threads) one item can hold most of the work while the other
// threads wait: one split of n <= 8 rows ran on one thread, and 300 keys split 256 + 44. Then the
// plan with the shortest estimated makespan (if at least 3% shorter than the default's) is taken
// among kv-head groups (each item reads only its heads' part of a tile; partial rows read less
// efficiently) and row blocks (each block reads the tile again). The estimate: an item costs
// keys * heads * (rows + copy), copy = 1 row's worth of arithmetic for whole rows and 1.5 for
// partial ones (set when the tiles were copied before use: the copy took about as long as one
// row's scores, exps and values, perf), items placed longest first on the least-loaded thread.
struct ItemPlan {
  int64_t rows, heads;
};

double plan_makespan(const ItemPlan& p, int64_t max_limit, int64_t n, int64_t n_kv_heads, int threads) {
  const double copy = p.heads < n_kv_heads ? 1.5 : 1.0;
  std::vector<double> work;
  for (int64_t j0 = 0; j0 < max_limit; j0 += kSplit)
    for (int64_t r0 = 0; r0 < n; r0 += p.rows)
      for (int64_t g0 = 0; g0 < n_kv_heads; g0 += p.heads)
        work.push_back(static_cast<double>(std::min(kSplit, max_limit - j0)) *
                       static_cast<double>(std::min(p.heads, n_kv_heads - g0)) *
                       (static_cast<double>(std::min(p.rows, n - r0)) + copy));
  std::sort(work.begin(), work.end(), std::greater<double>());
  std::vector<double> load(static_cast<size_t>(threads), 0.0);
  for (double w : work) *std::min_element(load.begin(), load.end()) += w;
  return *std::max_element(load.begin(), load.end());
}

ItemPlan plan_items(int64_t max_limit, int64_t n, int64_t n_kv_heads, int threads) {
  ItemPlan best{kRowBlock, n_kv_heads};
  const int64_t n_splits = (max_limit + kSplit - 1) / kSplit;
  if (threads <= 1 || n_splits >= 2 * static_cast<int64_t>(threads)) return best;
  // Every layer of a forward asks the same question: answer it once.
  struct Memo {
    int64_t max_limit = -1, n = -1, n_kv_heads = -1;
    int threads = -1;
    ItemPlan plan{0, 0};
  };
  thread_local Memo memo;
  if (memo.max_limit == max_limit && memo.n == n && memo.n_kv_heads == n_kv_heads && memo.threads == threads)
    return memo.plan;
  double best_span = plan_makespan(best, max_limit, n, n_kv_heads, threads);
  for (int64_t heads = n_kv_heads; heads >= 1; heads = heads == 1 ? 0 : (heads + 1) / 2)
    for (int64_t rows = kRowBlock; rows >= 1; rows /= 2) {
      const ItemPlan p{rows, heads};
      const double span = plan_makespan(p, max_limit, n, n_kv_heads, threads);
      if (span < 0.97 * best_span) {  // a clear gain only: the default reads memory best
        best = p;
        best_span = span;
      }
    }
  memo = Memo{max_limit, n, n_kv_heads, threads, best};
  return best;
}

void check_args(const AttentionArgs& a) {
  SPECLAB_CHECK(a.q && a.k && a.v && a.limits && a.out, "attend_rows: null buffer");
  SPECLAB_CHECK(a.n >= 1 && a.head_dim >= 1 && a.n_kv_heads >= 1 && a.n_heads >= a.n_kv_heads &&
                    a.n_heads % a.n_kv_heads == 0,
                "attend_rows: need n >= 1, head_dim >= 1 and n_heads a multiple of n_kv_heads");
  SPECLAB_CHECK(a.q_stride >= a.n_heads * a.head_dim, "attend_rows: q_stride < n_heads * head_dim");
  for (int64_t i = 0; i < a.n; ++i) SPECLAB_CHECK(a.limits[i] >= 1, "attend_rows: a row attends no key (limit < 1)");
}

}  // namespace

void attend_rows(const AttentionArgs& a) {
  check_args(a);
  const int64_t D = a.head_dim, H = a.n_heads, ps = partial_stride(D);
  int64_t max_limit = 0, keys = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    max_limit = std::max(max_limit, a.limits[i]);
    keys += a.limits[i];
  }
  const int64_t n_splits = (max_limit + kSplit - 1) / kSplit, split_floats = a.n * H * ps;
  // The caller's scratch; workers reach it through `part` (a thread_local named inside the
  // lambda would be each worker's own).
  thread_local std::vector<float> partials;  // [n_splits, n * H, D + 2]
  if (partials.size() < static_cast<size_t>(n_splits * split_floats))
    partials.resize(static_cast<size_t>(n_splits * split_floats));
  float* const part = partials.data();

  // Work items: (split, block of `rows` rows, group of `heads` kv heads), split-major. Calls
  // under 2^15 multiply-adds per score pass stay on the caller (at 2^17, one-row calls up to
  // context 227 of SmolLM2 ran on one thread: attention_bench --threads 2 --n 1, us per call,
  // 2^17 vs 2^15, three alternated rounds: SmolLM2 context 128 4.4-4.5 vs 3.8-4.0, 200
  // 6.8-7.1 vs 5.4-5.7; Qwen 1.5B context 64 3.8-4.0 vs 2.9-3.0); the result does not depend
  // on the thread count or the cut.
  const int threads = keys * H * D < (int64_t(1) << 15) ? 1 : compute_threads();
  const ItemPlan plan = plan_items(max_limit, a.n, a.n_kv_heads, threads);
  const int64_t row_blocks = (a.n + plan.rows - 1) / plan.rows, head_groups = (a.n_kv_heads + plan.heads - 1) / plan.heads;
  const int64_t items = n_splits * row_blocks * head_groups;
  // The int8 VNNI flavour quantizes the queries once per call (the caller's scratch, as partials).
  thread_local detail::Int8Queries int8_queries;
  const detail::Int8Queries* qq = nullptr;
  if (int8_vnni_attention(a.kv, D)) {
    detail::quantize_queries(a, int8_queries);
    qq = &int8_queries;
  }
  const bool avx512 = kernel_isa() >= KernelIsa::kAvx512 && D % 16 == 0;
  const bool avx2 = kernel_isa() >= KernelIsa::kAvx2 && D % 8 == 0;
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t sp = it / (row_blocks * head_groups), rest = it % (row_blocks * head_groups);
      const int64_t rb = rest / head_groups, hg = rest % head_groups;
      const int64_t r0 = rb * plan.rows, r1 = std::min(a.n, r0 + plan.rows);
      const int64_t g0 = hg * plan.heads, g1 = std::min(a.n_kv_heads, g0 + plan.heads);
      if (avx512)
        run_item<Avx512Ops>(a, qq, sp, r0, r1, g0, g1, max_limit, part + sp * split_floats);
      else if (avx2)
        run_item<Avx2Ops>(a, qq, sp, r0, r1, g0, g1, max_limit, part + sp * split_floats);
      else
        run_item<ScalarOps>(a, qq, sp, r0, r1, g0, g1, max_limit, part + sp * split_floats);
    }
  };
  if (threads <= 1 || items == 1)
    work(0, items);
  else
    parallel_chunks(items, 1, threads, work);

  // Merge the splits of each (row, head) in split order: out = sum_s w_s acc_s / sum_s w_s l_s,
  // w_s = exp(m_s - max_s m_s).
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t row_splits = (a.limits[i] + kSplit - 1) / kSplit;
    for (int64_t h = 0; h < H; ++h) {
      const float* first = part + (i * H + h) * ps;
      float* o = a.out + i * H * D + h * D;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t sp = 0; sp < row_splits; ++sp) m = std::max(m, first[sp * split_floats]);
      float l = 0.f;
      std::fill(o, o + D, 0.f);
      for (int64_t sp = 0; sp < row_splits; ++sp) {
        const float* st = first + sp * split_floats;
        const float w = std::exp(st[0] - m);
        l += st[1] * w;
        for (int64_t d = 0; d < D; ++d) o[d] += st[2 + d] * w;
      }
      const float inv = 1.f / l;
      for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    }
  }
}

}  // namespace speclab::cpu
