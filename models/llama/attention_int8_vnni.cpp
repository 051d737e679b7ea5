#include "models/llama/attention_int8_vnni.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "models/llama/gemv.h"
#include "models/llama/simd_exp.h"
#include "models/llama/tile_prefetch.h"

namespace speclab::cpu {

bool int8_vnni_attention(KvElement kv, int64_t head_dim) {
  return kv == KvElement::kInt8 && kernel_isa() >= KernelIsa::kAvx512Vnni && head_dim % 64 == 0 && head_dim >= 64 &&
         head_dim <= 256;
}

namespace detail {

namespace {

#define SPECLAB_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

constexpr int64_t kTile = kInt8VnniTile;
constexpr int kGroups = static_cast<int>(kTile / 16);  // groups of 16 keys: one zmm of scores each
static_assert(kTile % 16 == 0, "a tile is whole groups of 16 keys");
// int16 weights of a tile's keys times int8 values: 64 * 32767 * 127 < 2^31, so the int32 sums
// of a tile never overflow.
static_assert(kTile * 32767LL * 127LL < (1LL << 31), "a tile's weighted int32 sum must not overflow");
constexpr int64_t kMaxD = 256;

// acc + (the int32 dots of u8 groups of 4 in `u` with s8 groups in `s`) / (of int16 pairs in
// a and b), accumulated in place: with the intrinsics GCC 12 moved every accumulator through
// another register (or the stack) on each step, a third of this file's instructions (perf).
SPECLAB_VNNI inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
SPECLAB_VNNI inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// One query head of one row, with the keys it reads in this tile.
struct QueryRef {
  int64_t i, h, nk;
};

// r[t] lane e -> r[e] lane t (16 x 16 dwords): unpack dwords, then qwords, then 128-bit lanes twice.
SPECLAB_VNNI inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);      // lane L: elements 4L, 4L+1 of rows 2k, 2k+1
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);  // elements 4L+2, 4L+3
  }
  for (int m = 0; m < 4; ++m) {  // u[4m + k], lane L: rows 4m..4m+3 of element 4L + k
    u[4 * m + 0] = _mm512_unpacklo_epi64(t[4 * m], t[4 * m + 2]);
    u[4 * m + 1] = _mm512_unpackhi_epi64(t[4 * m], t[4 * m + 2]);
    u[4 * m + 2] = _mm512_unpacklo_epi64(t[4 * m + 1], t[4 * m + 3]);
    u[4 * m + 3] = _mm512_unpackhi_epi64(t[4 * m + 1], t[4 * m + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xDD);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88),
                  w1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xDD);
    r[k] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
    r[4 + k] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

// The update of Q query heads (any rows, any heads of the tile's kv head) over one tile.
//   kt: [D / 4][kGroups] zmm, the keys' bytes + 128, transposed: kt[kGroups t + g] lane l holds
//       bytes 4t..4t+3 of key 16 g + l (vpdpbusd's unsigned operand);
//   vi: [kTile / 2 pairs][NV] zmm, keys 2p and 2p+1 as int16 pairs: vi[p NV + 2c] lane 4L + k holds
//       (v_2p[d], v_2p+1[d]) for d = 32c + 8L + k, vi[p NV + 2c + 1] the same for d + 4;
//   kmul, vmul: [kTile] per key, s_k * scale and s_v (0 past the tile's keys).
template <int Q, int NV>
SPECLAB_VNNI void run_block(const AttentionArgs& a, const Int8Queries& qq, const QueryRef* qs, const __m512i* kt,
                            const __m512i* vi, const float* kmul, const float* vmul, float* part) {
  constexpr int64_t D = 16 * NV;
  const int64_t H = a.n_heads, ps = partial_stride(D), hs = D + kKvInt8ScaleBytes;
  const int8_t* q8[Q];
  float* st[Q];
  int32_t qsum[Q];
  float sq[Q];
  for (int k = 0; k < Q; ++k) {
    const int64_t at = qs[k].i * H + qs[k].h;
    q8[k] = qq.q8.data() + at * hs;
    qsum[k] = qq.qsum[static_cast<size_t>(at)];
    std::memcpy(&sq[k], q8[k] + D, sizeof(float));
    st[k] = part + at * ps;
  }

  // Scores: integer dots of the tile's keys per query (exact), then one float product per key.
  __m512i dot[Q][kGroups];
  for (int k = 0; k < Q; ++k)
    for (int kg = 0; kg < kGroups; ++kg) dot[k][kg] = _mm512_setzero_si512();
  for (int64_t t = 0; t < D / 4; ++t) {
    __m512i kv[kGroups];
    for (int kg = 0; kg < kGroups; ++kg) kv[kg] = _mm512_load_si512(kt + kGroups * t + kg);
    for (int k = 0; k < Q; ++k) {
      int32_t w;
      std::memcpy(&w, q8[k] + 4 * t, sizeof(w));
      const __m512i qb = _mm512_set1_epi32(w);
      for (int kg = 0; kg < kGroups; ++kg) dot[k][kg] = dpbusd(dot[k][kg], kv[kg], qb);
    }
  }
  alignas(64) int16_t u[Q][kTile];
  float alpha[Q], wscale[Q];
  int64_t pairs = 0;
  for (int k = 0; k < Q; ++k) {
    const int64_t nk = qs[k].nk;
    const __m512i off = _mm512_set1_epi32(128 * qsum[k]);  // the keys' + 128
    const __m512 f = _mm512_set1_ps(sq[k]);
    __mmask16 m[kGroups];
    __m512 sc[kGroups];
    __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int kg = 0; kg < kGroups; ++kg) {
      const int64_t left = nk - 16 * kg;
      m[kg] = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << left) - 1);
      sc[kg] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[k][kg], off)),
                             _mm512_mul_ps(_mm512_load_ps(kmul + 16 * kg), f));
      mx = _mm512_mask_max_ps(mx, m[kg], mx, sc[kg]);
    }
    const float m_old = st[k][0], m_new = std::max(m_old, _mm512_reduce_max_ps(mx));
    // exp(m_old - m_new): 0 on the first tile (m_old = -inf), 1 while the max holds.
    alpha[k] = m_old == m_new ? 1.f : m_old == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m_old - m_new);
    const __m512 mv = _mm512_set1_ps(m_new);
    __m512 psum = _mm512_setzero_ps(), wmax = _mm512_setzero_ps();
    for (int kg = 0; kg < kGroups; ++kg) {
      const __m512 p = _mm512_maskz_mov_ps(m[kg], exp16_avx512(_mm512_sub_ps(sc[kg], mv)));  // 0 past nk
      psum = _mm512_add_ps(psum, p);
      // The weight p_j s_vj, 0 past nk (masked: a key this row does not read may hold an inf
      // scale, and 0 * inf would make W NaN for every row that shares the tile).
      sc[kg] = _mm512_maskz_mul_ps(m[kg], p, _mm512_load_ps(vmul + 16 * kg));
      wmax = _mm512_max_ps(wmax, sc[kg]);
    }
    st[k][1] = st[k][1] * alpha[k] + _mm512_reduce_add_ps(psum);
    st[k][0] = m_new;
    // Weights as int16 against the tile's largest.
    const float W = _mm512_reduce_max_ps(wmax);
    if (W > 0.f) {
      const __m512 inv = _mm512_set1_ps(32767.f / W);
      for (int kg = 0; kg < kGroups; ++kg)
        _mm256_store_si256(reinterpret_cast<__m256i*>(u[k] + 16 * kg),
                           _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(sc[kg], inv))));
      wscale[k] = W / 32767.f;
    } else {
      std::fill(u[k], u[k] + kTile, int16_t{0});
      wscale[k] = 0.f;
    }
    pairs = std::max(pairs, (nk + 1) / 2);
  }

  // Weighted values: int16 weight pairs times int16 value pairs (exact int32 sums).
  __m512i acc[Q][NV];
  for (int k = 0; k < Q; ++k)
    for (int c = 0; c < NV; ++c) acc[k][c] = _mm512_setzero_si512();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i wb[Q];
    for (int k = 0; k < Q; ++k) {
      int32_t w;
      std::memcpy(&w, u[k] + 2 * p, sizeof(w));
      wb[k] = _mm512_set1_epi32(w);
    }
    for (int c = 0; c < NV; ++c) {
      const __m512i v = _mm512_load_si512(vi + p * NV + c);
      for (int k = 0; k < Q; ++k) acc[k][c] = dpwssd(acc[k][c], v, wb[k]);
    }
  }
  // Back to d order (vi's interleave) and into the float accumulators: acc * alpha + W / 32767 * sum.
  const __m512i lo_half = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi_half = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int k = 0; k < Q; ++k) {
    float* o = st[k] + 2;
    const __m512 al = _mm512_set1_ps(alpha[k]), ws = _mm512_set1_ps(wscale[k]);
    for (int c = 0; c < NV / 2; ++c) {
      const __m512 f0 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(acc[k][2 * c], lo_half, acc[k][2 * c + 1]));
      const __m512 f1 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(acc[k][2 * c], hi_half, acc[k][2 * c + 1]));
      __m512 o0 = _mm512_loadu_ps(o + 32 * c), o1 = _mm512_loadu_ps(o + 32 * c + 16);
      if (alpha[k] != 1.f) {
        o0 = _mm512_mul_ps(o0, al);
        o1 = _mm512_mul_ps(o1, al);
      }
      _mm512_storeu_ps(o + 32 * c, _mm512_fmadd_ps(f0, ws, o0));
      _mm512_storeu_ps(o + 32 * c + 16, _mm512_fmadd_ps(f1, ws, o1));
    }
  }
}

// Query heads per batch of tile_impl (a kv head group's heads times a work item's rows).
constexpr int64_t kMaxQueries = 128;

// The queries qs[0, count) in blocks of Q (the last one smaller).
template <int Q, int NV>
SPECLAB_VNNI void run_queries(const AttentionArgs& a, const Int8Queries& qq, const QueryRef* qs, int64_t count,
                              const __m512i* kt, const __m512i* vi, const float* kmul, const float* vmul, float* part) {
  for (int64_t b = 0; b < count; b += Q) {
    switch (std::min<int64_t>(Q, count - b)) {
      case 4: run_block<(Q >= 4 ? 4 : 1), NV>(a, qq, qs + b, kt, vi, kmul, vmul, part); break;
      case 3: run_block<(Q >= 3 ? 3 : 1), NV>(a, qq, qs + b, kt, vi, kmul, vmul, part); break;
      case 2: run_block<(Q >= 2 ? 2 : 1), NV>(a, qq, qs + b, kt, vi, kmul, vmul, part); break;
      default: run_block<1, NV>(a, qq, qs + b, kt, vi, kmul, vmul, part); break;
    }
  }
}

template <int NV>
SPECLAB_VNNI void tile_impl(const AttentionArgs& a, const Int8Queries& qq, int64_t r0, int64_t r1, int64_t g0, int64_t g1,
                            int64_t t0, int64_t nk_all, const int8_t* const* krow, const int8_t* const* vrow,
                            float* part, TilePrefetch* pf) {
  constexpr int64_t D = 16 * NV;
  constexpr int Q = NV <= 4 ? 4 : NV <= 8 ? 2 : 1;  // queries per block: Q * NV value accumulators
  const int64_t G = a.n_heads / a.n_kv_heads, hs = D + kKvInt8ScaleBytes;
  alignas(64) __m512i kt[D / 4 * kGroups];
  alignas(64) __m512i vi[kTile / 2 * NV];
  alignas(64) float kmul[kTile], vmul[kTile];
  QueryRef queries[kMaxQueries];  // the (row, head) pairs of one kv head
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  std::fill(kmul + nk_all, kmul + kTile, 0.f);
  std::fill(vmul + nk_all, vmul + kTile, 0.f);
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t at = g * hs;  // the kv head's bytes in a slot's row
    for (int64_t j = 0; j < nk_all; ++j) {
      float ks, vs;
      std::memcpy(&ks, krow[j] + at + D, sizeof(float));
      std::memcpy(&vs, vrow[j] + at + D, sizeof(float));
      kmul[j] = ks * a.scale;
      vmul[j] = vs;
    }
    // Keys transposed 16 at a time, each 64-byte chunk of the head (keys past the tile: zero).
    for (int64_t c = 0; c < D / 64; ++c)
      for (int64_t kg = 0; kg < kGroups; ++kg) {
        if (pf) pf->step();
        if (16 * kg >= nk_all) {  // no key of this group: zero lanes (their scores are never used)
          for (int64_t e = 0; e < 16; ++e) _mm512_store_si512(kt + kGroups * (16 * c + e) + kg, bias);
          continue;
        }
        __m512i r[16];
        for (int64_t t = 0; t < 16; ++t) {
          const int64_t j = 16 * kg + t;
          r[t] = _mm512_xor_si512(j < nk_all ? _mm512_loadu_si512(krow[j] + at + 64 * c) : _mm512_setzero_si512(), bias);
        }
        transpose16(r);
        for (int64_t e = 0; e < 16; ++e) _mm512_store_si512(kt + kGroups * (16 * c + e) + kg, r[e]);
      }
    // Values as int16 pairs of keys (2p, 2p + 1); keys past the tile: zero.
    const int64_t pairs = (nk_all + 1) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
      if (pf && p % 8 == 0) pf->step();
      const int8_t* v0 = vrow[2 * p] + at;
      const bool has1 = 2 * p + 1 < nk_all;
      const int8_t* v1 = has1 ? vrow[2 * p + 1] + at : v0;
      for (int64_t c = 0; c < D / 32; ++c) {
        const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + 32 * c)));
        const __m512i y = has1 ? _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + 32 * c)))
                               : _mm512_setzero_si512();
        _mm512_store_si512(vi + p * NV + 2 * c, _mm512_unpacklo_epi16(x, y));
        _mm512_store_si512(vi + p * NV + 2 * c + 1, _mm512_unpackhi_epi16(x, y));
      }
    }
    // The group's queries, in batches of at most kMaxQueries.
    int64_t count = 0;
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t nk = std::min(nk_all, a.limits[i] - t0);
      if (nk <= 0) continue;
      for (int64_t h = g * G; h < (g + 1) * G; ++h) {
        queries[count++] = {i, h, nk};
        if (count == kMaxQueries) {
          run_queries<Q, NV>(a, qq, queries, count, kt, vi, kmul, vmul, part);
          count = 0;
        }
      }
    }
    if (count > 0) run_queries<Q, NV>(a, qq, queries, count, kt, vi, kmul, vmul, part);
  }
}

}  // namespace

void quantize_queries(const AttentionArgs& a, Int8Queries& qq) {
  const int64_t D = a.head_dim, H = a.n_heads, hs = D + kKvInt8ScaleBytes;
  qq.q8.resize(static_cast<size_t>(a.n * H * hs));
  qq.qsum.resize(static_cast<size_t>(a.n * H));
  for (int64_t i = 0; i < a.n; ++i) {
    int8_t* row = qq.q8.data() + i * H * hs;
    quantize_kv_heads(a.q + i * a.q_stride, H, D, row);
    for (int64_t h = 0; h < H; ++h) {
      int32_t sum = 0;
      for (int64_t d = 0; d < D; ++d) sum += row[h * hs + d];
      qq.qsum[static_cast<size_t>(i * H + h)] = sum;
    }
  }
}

void attend_tile_int8_vnni(const AttentionArgs& a, const Int8Queries& qq, int64_t r0, int64_t r1, int64_t g0,
                           int64_t g1, int64_t t0, int64_t nk_all, const int8_t* const* krow,
                           const int8_t* const* vrow, float* part, TilePrefetch* pf) {
  switch (a.head_dim) {
    case 64: return tile_impl<4>(a, qq, r0, r1, g0, g1, t0, nk_all, krow, vrow, part, pf);
    case 128: return tile_impl<8>(a, qq, r0, r1, g0, g1, t0, nk_all, krow, vrow, part, pf);
    case 192: return tile_impl<12>(a, qq, r0, r1, g0, g1, t0, nk_all, krow, vrow, part, pf);
    default: return tile_impl<16>(a, qq, r0, r1, g0, g1, t0, nk_all, krow, vrow, part, pf);
  }
}

}  // namespace detail

}  // namespace speclab::cpu
