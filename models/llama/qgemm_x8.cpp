#include "models/llama/qgemm_x8.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/gemv.h"
#include "models/llama/packed_blocks_avx2.h"
#include "models/loaders/dequant.h"

namespace speclab {

namespace {

using packed::load_u16;

// ---- the layout ------------------------------------------------------------------------------
// Per group (8 rows) and block, byte offsets:
//   Q4_0  d16[8] @0, qs @16 (128)                          144 = 8 x 18
//   Q4_1  d16[8] @0, m16[8] @16, qs @32 (128)              160 = 8 x 20
//   Q5_0  d16[8] @0, qh @16 (32), qs @48 (128)             176 = 8 x 22
//   Q8_0  d16[8] @0, u @16 (256)                           272 = 8 x 34
//   Q4_K  d16[8] @0, dmin16[8] @16, sc [8 t][8 r] @32, mn [4 p][8 r][2] @96, qs [8 t][128] @160  1184
//   Q6_K  d16[8] @0, sc [8 c][8 r][2] (int8) @16, then per chunk c: qs (128) @144 + 192c, qh (64) after it  1680
// qs (128 bytes for 32 elements of 8 rows): byte 32v + 4r + i (v, i in 0..3) holds element 4v + i of
// row r in its low nibble and element 16 + 4v + i in its high nibble. Group g (0..7) of 4
// elements 4g..4g+3 is therefore the low (g < 4) or high (g >= 4) nibbles of vector g % 4.
// Q5_0 qh: byte 4r + i, bit g = fifth bit of element 4g + i of row r.
// Q6_K qh (64 bytes per 32 elements): vector h (0, 1), byte 4r + i, bits 2v, 2v + 1 = the top two
// bits of element 4(4h + v) + i. Q8_0 u: byte 32g + 4r + i = element 4g + i of row r, plus 128.
// Q6_K chunk c (elements 32c..32c+31) holds sub-blocks 2c (groups 0-3) and 2c + 1 (groups 4-7).

constexpr int64_t x8_block_bytes(GgmlType t) {
  return t == GgmlType::Q4_0   ? 144
         : t == GgmlType::Q4_1 ? 160
         : t == GgmlType::Q5_0 ? 176
         : t == GgmlType::Q8_0 ? 272
         : t == GgmlType::Q4_K ? 1184
                               : 1680;  // Q6_K
}

GgmlType checked_type(uint32_t type_id) {
  const auto t = static_cast<GgmlType>(type_id);
  if (!int8_gemm_supports(type_id))  // the same types as the row-major int8 kernels
    throw Error(ErrorKind::kUnsupported, "repacked int8 matmul supports Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K, not " +
                                             ggml_type_name(type_id));
  return t;
}

void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// One row's block decoded to unsigned integers u (32 or 256 of them) and its scale fields.
struct RowBlock {
  uint8_t u[256];
  uint16_t d16 = 0, m16 = 0;  // d; Q4_1's min or Q4_K's dmin
  int sc[16] = {};            // Q4_K: 8 scales; Q6_K: 16 signed scales
  int mn[8] = {};             // Q4_K mins
};

void decode_row_block(GgmlType t, const uint8_t* blk, RowBlock& rb) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const int at = t == GgmlType::Q4_1 ? 4 : 2;
      rb.d16 = load_u16(blk);
      if (t == GgmlType::Q4_1) rb.m16 = load_u16(blk + 2);
      for (int i = 0; i < 16; ++i) {
        rb.u[i] = blk[at + i] & 0x0F;
        rb.u[i + 16] = blk[at + i] >> 4;
      }
      break;
    }
    case GgmlType::Q5_0: {
      rb.d16 = load_u16(blk);
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      for (int i = 0; i < 16; ++i) {
        rb.u[i] = static_cast<uint8_t>((blk[6 + i] & 0x0F) | (((qh >> i) & 1) << 4));
        rb.u[i + 16] = static_cast<uint8_t>((blk[6 + i] >> 4) | (((qh >> (i + 16)) & 1) << 4));
      }
      break;
    }
    case GgmlType::Q8_0:
      rb.d16 = load_u16(blk);
      for (int i = 0; i < 32; ++i) rb.u[i] = static_cast<uint8_t>(static_cast<int8_t>(blk[2 + i]) + 128);
      break;
    case GgmlType::Q4_K:
      rb.d16 = load_u16(blk);
      rb.m16 = load_u16(blk + 2);
      packed::unpack_q4k_scales(blk + 4, rb.sc, rb.mn);
      for (int sb = 0; sb < 8; ++sb)
        for (int l = 0; l < 32; ++l) rb.u[32 * sb + l] = (blk[16 + 32 * (sb / 2) + l] >> (4 * (sb % 2))) & 0x0F;
      break;
    default: {  // Q6_K
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        const int low = (ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0x0F;
        const int high = (qh[32 * h + l] >> (2 * s)) & 3;
        rb.u[e] = static_cast<uint8_t>(low | (high << 4));
      }
      for (int k = 0; k < 16; ++k) rb.sc[k] = static_cast<int8_t>(blk[192 + k]);
      rb.d16 = load_u16(blk + 208);
      break;
    }
  }
}

// The 128-byte nibble interleave of elements [base, base + 32) of 8 rows (layout above).
void put_nibbles(const RowBlock* rows, int base, uint8_t* dst) {
  for (int v = 0; v < 4; ++v)
    for (int r = 0; r < 8; ++r)
      for (int i = 0; i < 4; ++i)
        dst[32 * v + 4 * r + i] = static_cast<uint8_t>((rows[r].u[base + 4 * v + i] & 0x0F) |
                                                       ((rows[r].u[base + 16 + 4 * v + i] & 0x0F) << 4));
}

void repack_group_block(GgmlType t, const RowBlock* rows, uint8_t* dst) {
  for (int r = 0; r < 8; ++r) store_u16(dst + 2 * r, rows[r].d16);
  switch (t) {
    case GgmlType::Q4_0: put_nibbles(rows, 0, dst + 16); break;
    case GgmlType::Q4_1:
      for (int r = 0; r < 8; ++r) store_u16(dst + 16 + 2 * r, rows[r].m16);
      put_nibbles(rows, 0, dst + 32);
      break;
    case GgmlType::Q5_0:
      for (int r = 0; r < 8; ++r)
        for (int i = 0; i < 4; ++i) {
          uint8_t bits = 0;
          for (int g = 0; g < 8; ++g) bits |= static_cast<uint8_t>(((rows[r].u[4 * g + i] >> 4) & 1) << g);
          dst[16 + 4 * r + i] = bits;
        }
      put_nibbles(rows, 0, dst + 48);
      break;
    case GgmlType::Q8_0:
      for (int g = 0; g < 8; ++g)
        for (int r = 0; r < 8; ++r)
          for (int i = 0; i < 4; ++i) dst[16 + 32 * g + 4 * r + i] = rows[r].u[4 * g + i];
      break;
    case GgmlType::Q4_K:
      for (int r = 0; r < 8; ++r) store_u16(dst + 16 + 2 * r, rows[r].m16);
      for (int s = 0; s < 8; ++s)
        for (int r = 0; r < 8; ++r) dst[32 + 8 * s + r] = static_cast<uint8_t>(rows[r].sc[s]);
      for (int p = 0; p < 4; ++p)
        for (int r = 0; r < 8; ++r) {
          dst[96 + 16 * p + 2 * r] = static_cast<uint8_t>(rows[r].mn[2 * p]);
          dst[96 + 16 * p + 2 * r + 1] = static_cast<uint8_t>(rows[r].mn[2 * p + 1]);
        }
      for (int s = 0; s < 8; ++s) put_nibbles(rows, 32 * s, dst + 160 + 128 * s);
      break;
    default:  // Q6_K
      for (int c = 0; c < 8; ++c) {
        for (int r = 0; r < 8; ++r) {
          dst[16 + 16 * c + 2 * r] = static_cast<uint8_t>(static_cast<int8_t>(rows[r].sc[2 * c]));
          dst[16 + 16 * c + 2 * r + 1] = static_cast<uint8_t>(static_cast<int8_t>(rows[r].sc[2 * c + 1]));
        }
        put_nibbles(rows, 32 * c, dst + 144 + 192 * c);
        uint8_t* qh = dst + 144 + 192 * c + 128;
        for (int h = 0; h < 2; ++h)
          for (int r = 0; r < 8; ++r)
            for (int i = 0; i < 4; ++i) {
              uint8_t bits = 0;
              for (int v = 0; v < 4; ++v)
                bits |= static_cast<uint8_t>(((rows[r].u[32 * c + 4 * (4 * h + v) + i] >> 4) & 3) << (2 * v));
              qh[32 * h + 4 * r + i] = bits;
            }
      }
      break;
  }
}

// ---- the kernels -----------------------------------------------------------------------------

#define SPECLAB_X8_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// Views of one activation row's quantized data (QuantizedRows layout).
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;       // block 32: d * sum q
  const int16_t* b16;   // block 256: sums of 16
  const int16_t* b32;   // block 256: sums of 32
};

XRow x_row(const QuantizedRows& xq, int64_t j) {
  const int64_t nb = xq.in / xq.block;
  const bool k = xq.block == 256;
  return {xq.q.data() + j * xq.in, xq.d.data() + j * nb, k ? nullptr : xq.s.data() + j * nb,
          k ? xq.bsum16.data() + j * (xq.in / 16) : nullptr, k ? xq.bsum32.data() + j * (xq.in / 32) : nullptr};
}

SPECLAB_X8_TARGET inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// sum over groups g of u_g . x[4g..4g+3] for 8 rows, groups [g0, g0 + 4) and [g0 + 4, g0 + 8)
// as two independent chains, then added (one fixed order).
SPECLAB_X8_TARGET inline __m256i dot8(const __m256i (&W)[8], const int8_t* x) {
  __m256i a = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[0], bcast4(x));
  __m256i b = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[1], bcast4(x + 4));
  a = _mm256_dpbusd_epi32(a, W[2], bcast4(x + 8));
  b = _mm256_dpbusd_epi32(b, W[3], bcast4(x + 12));
  a = _mm256_dpbusd_epi32(a, W[4], bcast4(x + 16));
  b = _mm256_dpbusd_epi32(b, W[5], bcast4(x + 20));
  a = _mm256_dpbusd_epi32(a, W[6], bcast4(x + 24));
  b = _mm256_dpbusd_epi32(b, W[7], bcast4(x + 28));
  return _mm256_add_epi32(a, b);
}

// Prefetches the `bytes` bytes at p (one hint per 64-byte line): the kernels call it for the block
// kX8PrefetchBlocks ahead of the one they decode. Each block is read front to back (the layout
// keeps every block's data in reading order: a Q6_K layout that read its low and high bits as two
// streams 1 KiB apart ran at a third of the memory bandwidth), so this only runs a little ahead of
// the hardware prefetchers (SmolLM2 decode: within noise to +10%).
constexpr int64_t kX8PrefetchBlocks = 2;
SPECLAB_X8_TARGET inline void prefetch_block(const uint8_t* p, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(reinterpret_cast<const char*>(p + at), _MM_HINT_T0);
}

// The 8 group vectors of a 128-byte nibble interleave.
SPECLAB_X8_TARGET inline void nibbles(const uint8_t* qs, __m256i (&W)[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int v = 0; v < 4; ++v) {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * v));
    W[v] = _mm256_and_si256(l, low4);
    W[v + 4] = _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
  }
}

// Bits [bit, bit + width) of every byte of v moved to bit 4 (masked by `mask`), for shifts whose
// 16-bit lanes do not carry another byte's bits into bits 4..5 (|4 - bit| <= 4).
SPECLAB_X8_TARGET inline __m256i to_bit4(__m256i v, int bit, __m256i mask) {
  const __m256i s = bit <= 4 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(4 - bit)) : _mm256_srl_epi16(v, _mm_cvtsi32_si128(bit - 4));
  return _mm256_and_si256(s, mask);
}

template <GgmlType T>
SPECLAB_X8_TARGET inline void weights32(const uint8_t* gb, __m256i (&W)[8]) {
  if constexpr (T == GgmlType::Q8_0) {
    for (int g = 0; g < 8; ++g) W[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16 + 32 * g));
  } else {
    nibbles(gb + (T == GgmlType::Q4_0 ? 16 : T == GgmlType::Q4_1 ? 32 : 48), W);
    if constexpr (T == GgmlType::Q5_0) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16));
      const __m256i bit4 = _mm256_set1_epi8(0x10);
      for (int g = 0; g < 8; ++g) W[g] = _mm256_or_si256(W[g], to_bit4(qh, g, bit4));
    }
  }
}

// One group of 8 weight rows x N activation rows of a 32-element-block type: out[j] lane r =
// row r's output for activation row j (without bias).
template <GgmlType T, int N>
SPECLAB_X8_TARGET void group32(const uint8_t* gw, int64_t nb, const XRow* xr, __m256 (&out)[N]) {
  constexpr int64_t bb = x8_block_bytes(T);
  __m256 acc[N], macc[N];
  for (int j = 0; j < N; ++j) acc[j] = macc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = gw + b * bb;
    prefetch_block(gb + kX8PrefetchBlocks * bb, bb);
    __m256i W[8];
    weights32<T>(gb, W);
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    __m256 mv;  // the block offset m per row: w = d * u + m
    if constexpr (T == GgmlType::Q4_1)
      mv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16)));
    else
      mv = _mm256_mul_ps(dv, _mm256_set1_ps(T == GgmlType::Q4_0 ? -8.f : T == GgmlType::Q5_0 ? -16.f : -128.f));
    for (int j = 0; j < N; ++j) {
      const __m256i t = dot8(W, xr[j].q + 32 * b);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dv, _mm256_set1_ps(xr[j].d[b])), acc[j]);
      macc[j] = _mm256_fmadd_ps(mv, _mm256_set1_ps(xr[j].s[b]), macc[j]);
    }
  }
  for (int j = 0; j < N; ++j) out[j] = _mm256_add_ps(acc[j], macc[j]);
}

// Q4_K: per super-block, isum = sum over sub-blocks t of sc[t] * (u . x), imin = sum of mn[t] *
// (sum of x over sub-block t); y += (d dx) isum - (dmin dx) imin.
template <int N>
SPECLAB_X8_TARGET void group_q4k(const uint8_t* gw, int64_t nb, const XRow* xr, __m256 (&out)[N]) {
  constexpr int64_t bb = x8_block_bytes(GgmlType::Q4_K);
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = gw + b * bb;
    prefetch_block(gb + kX8PrefetchBlocks * bb, bb);
    __m256i isum[N];
    for (int j = 0; j < N; ++j) isum[j] = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {
      __m256i W[8];
      nibbles(gb + 160 + 128 * t, W);
      const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 32 + 8 * t)));
      for (int j = 0; j < N; ++j)
        isum[j] = _mm256_add_epi32(isum[j], _mm256_mullo_epi32(dot8(W, xr[j].q + 256 * b + 32 * t), sc));
    }
    __m256i M[4];  // int16 pairs (mn[2p], mn[2p + 1]) per row
    for (int p = 0; p < 4; ++p)
      M[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 96 + 16 * p)));
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    const __m256 dminv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16)));
    for (int j = 0; j < N; ++j) {
      const int16_t* s32 = xr[j].b32 + 8 * b;
      __m256i imin = _mm256_dpwssd_epi32(_mm256_setzero_si256(), M[0], bcast4(s32));
      imin = _mm256_dpwssd_epi32(imin, M[1], bcast4(s32 + 2));
      imin = _mm256_dpwssd_epi32(imin, M[2], bcast4(s32 + 4));
      imin = _mm256_dpwssd_epi32(imin, M[3], bcast4(s32 + 6));
      const __m256 dx = _mm256_set1_ps(xr[j].d[b]);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dv, dx), acc[j]);
      acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dminv, dx), acc[j]);
    }
  }
  for (int j = 0; j < N; ++j) out[j] = acc[j];
}

// Q6_K: isum = sum over 16-element sub-blocks s of sc[s] * ((u - 32) . x), with the -32 applied
// through the activation sums of 16 (one vpdpwssd per 32 elements); y += (d dx) isum.
template <int N>
SPECLAB_X8_TARGET void group_q6k(const uint8_t* gw, int64_t nb, const XRow* xr, __m256 (&out)[N]) {
  constexpr int64_t bb = x8_block_bytes(GgmlType::Q6_K);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = gw + b * bb;
    prefetch_block(gb + kX8PrefetchBlocks * bb, bb);
    __m256i isum[N];
    for (int j = 0; j < N; ++j) isum[j] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      __m256i W[8];
      nibbles(gb + 144 + 192 * c, W);
      const uint8_t* qh = gb + 144 + 192 * c + 128;
      for (int h = 0; h < 2; ++h) {
        const __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
        for (int v = 0; v < 4; ++v) W[4 * h + v] = _mm256_or_si256(W[4 * h + v], to_bit4(hv, 2 * v, top2));
      }
      // int16 pairs (sc[2c], sc[2c + 1]) per row; as int32 lanes; and times -32 for the offset.
      const __m256i S = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16 + 16 * c)));
      const __m256i s_lo = _mm256_srai_epi32(_mm256_slli_epi32(S, 16), 16), s_hi = _mm256_srai_epi32(S, 16);
      const __m256i s_off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(S, 5));
      for (int j = 0; j < N; ++j) {
        const int8_t* x = xr[j].q + 256 * b + 32 * c;
        __m256i lo = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[0], bcast4(x));
        __m256i hi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[4], bcast4(x + 16));
        lo = _mm256_dpbusd_epi32(lo, W[1], bcast4(x + 4));
        hi = _mm256_dpbusd_epi32(hi, W[5], bcast4(x + 20));
        lo = _mm256_dpbusd_epi32(lo, W[2], bcast4(x + 8));
        hi = _mm256_dpbusd_epi32(hi, W[6], bcast4(x + 24));
        lo = _mm256_dpbusd_epi32(lo, W[3], bcast4(x + 12));
        hi = _mm256_dpbusd_epi32(hi, W[7], bcast4(x + 28));
        __m256i s = _mm256_dpwssd_epi32(isum[j], s_off, bcast4(xr[j].b16 + 16 * b + 2 * c));
        s = _mm256_add_epi32(s, _mm256_mullo_epi32(lo, s_lo));
        isum[j] = _mm256_add_epi32(s, _mm256_mullo_epi32(hi, s_hi));
      }
    }
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
    for (int j = 0; j < N; ++j)
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dv, _mm256_set1_ps(xr[j].d[b])), acc[j]);
  }
  for (int j = 0; j < N; ++j) out[j] = acc[j];
}

template <GgmlType T, int N>
SPECLAB_X8_TARGET void group_n(const uint8_t* gw, int64_t nb, const QuantizedRows& xq, int64_t j0, const float* bias,
                               float* y, int64_t out, int64_t r0) {
  XRow xr[N];
  for (int j = 0; j < N; ++j) xr[j] = x_row(xq, j0 + j);
  __m256 res[N];
  if constexpr (T == GgmlType::Q4_K)
    group_q4k<N>(gw, nb, xr, res);
  else if constexpr (T == GgmlType::Q6_K)
    group_q6k<N>(gw, nb, xr, res);
  else
    group32<T, N>(gw, nb, xr, res);
  const int64_t rows = std::min<int64_t>(kX8Rows, out - r0);
  alignas(32) float bv[8] = {};
  for (int64_t r = 0; r < rows; ++r) bv[r] = bias ? bias[r0 + r] : 0.f;
  const __m256 bias_v = _mm256_load_ps(bv);
  for (int j = 0; j < N; ++j) {
    const __m256 v = _mm256_add_ps(res[j], bias_v);
    float* dst = y + (j0 + j) * out + r0;
    if (rows == kX8Rows) {
      _mm256_storeu_ps(dst, v);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, v);
      std::copy(tmp, tmp + rows, dst);
    }
  }
}

// Groups [g0, g1) x every activation row, in ceil(n / 8) passes of equal size (n = 9: 5 + 4, not
// 8 + 1; later passes read the group's weights from L1/L2).
template <GgmlType T>
void groups_range(const uint8_t* wx8, int64_t group_bytes, int64_t nb, const QuantizedRows& xq, const float* bias,
                  float* y, int64_t out, int64_t g0, int64_t g1) {
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* gw = wx8 + g * group_bytes;
    const int64_t r0 = g * kX8Rows;
    const int64_t passes = (xq.n + 7) / 8, per_pass = (xq.n + passes - 1) / passes;
    for (int64_t j0 = 0; j0 < xq.n; j0 += per_pass) {
      switch (std::min<int64_t>(per_pass, xq.n - j0)) {
        case 1: group_n<T, 1>(gw, nb, xq, j0, bias, y, out, r0); break;
        case 2: group_n<T, 2>(gw, nb, xq, j0, bias, y, out, r0); break;
        case 3: group_n<T, 3>(gw, nb, xq, j0, bias, y, out, r0); break;
        case 4: group_n<T, 4>(gw, nb, xq, j0, bias, y, out, r0); break;
        case 5: group_n<T, 5>(gw, nb, xq, j0, bias, y, out, r0); break;
        case 6: group_n<T, 6>(gw, nb, xq, j0, bias, y, out, r0); break;
        case 7: group_n<T, 7>(gw, nb, xq, j0, bias, y, out, r0); break;
        default: group_n<T, 8>(gw, nb, xq, j0, bias, y, out, r0); break;
      }
    }
  }
}

using RangeFn = void (*)(const uint8_t*, int64_t, int64_t, const QuantizedRows&, const float*, float*, int64_t,
                         int64_t, int64_t);

RangeFn pick(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return groups_range<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return groups_range<GgmlType::Q4_1>;
    case GgmlType::Q5_0: return groups_range<GgmlType::Q5_0>;
    case GgmlType::Q8_0: return groups_range<GgmlType::Q8_0>;
    case GgmlType::Q4_K: return groups_range<GgmlType::Q4_K>;
    default: return groups_range<GgmlType::Q6_K>;
  }
}

}  // namespace

bool x8_cpu_supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

bool x8_active() { return x8_cpu_supported() && kernel_isa() == KernelIsa::kAvx512Vnni; }

int64_t x8_bytes(uint32_t type_id, int64_t out, int64_t in) {
  const GgmlType t = checked_type(type_id);
  const int64_t be = packed::block_elems(t);
  if (in <= 0 || in % be != 0)
    throw Error(ErrorKind::kBadInput, "repacked " + ggml_type_name(type_id) + " matrix: row length " +
                                          std::to_string(in) + " is not a multiple of " + std::to_string(be));
  return (out + kX8Rows - 1) / kX8Rows * (in / be) * x8_block_bytes(t);
}

void repack_x8(const uint8_t* w, uint32_t type_id, int64_t out, int64_t in, uint8_t* dst) {
  const GgmlType t = checked_type(type_id);
  const int64_t be = packed::block_elems(t), nb = in / be, bb = x8_block_bytes(t);
  const int64_t row_bytes = static_cast<int64_t>(ggml_row_bytes(type_id, static_cast<uint64_t>(in), "repack_x8"));
  const int64_t groups = x8_bytes(type_id, out, in) / (nb * bb);
  RowBlock rows[8];
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < 8; ++r) {
        const int64_t row = g * kX8Rows + r;
        if (row < out) {
          decode_row_block(t, w + row * row_bytes + b * packed::block_bytes(t), rows[r]);
        } else {
          rows[r] = RowBlock{};  // padding: zero scales and integers contribute 0
          std::memset(rows[r].u, 0, sizeof rows[r].u);
        }
      }
      repack_group_block(t, rows, dst + (g * nb + b) * bb);
    }
}

void gemm_x8_int8_q(const uint8_t* wx8, uint32_t type_id, const QuantizedRows& xq, const float* bias, float* y,
                    int64_t out) {
  const GgmlType t = checked_type(type_id);
  if (!x8_active())
    throw Error(ErrorKind::kUnsupported, "repacked int8 matmul needs AVX-512 VNNI, and the kernel ISA in effect is " +
                                             std::string(kernel_isa_name(kernel_isa())));
  if (xq.block != packed::block_elems(t) || xq.in % xq.block != 0)
    throw Error(ErrorKind::kBadInput, "activations quantized in blocks of " + std::to_string(xq.block) +
                                          " do not fit " + ggml_type_name(type_id) + " weights");
  const int64_t nb = xq.in / xq.block, group_bytes = nb * x8_block_bytes(t);
  const int64_t groups = (out + kX8Rows - 1) / kX8Rows;
  const RangeFn fn = pick(t);
  // ~16 KiB of weights per task.
  // Chunks of 16 to 256 KiB of weights, about 4 per thread: long contiguous runs keep the
  // hardware prefetchers streaming (2 KiB runs reached half the memory bandwidth of 256 KiB runs
  // here), several per thread balance the load.
  const int threads = std::max(1, compute_threads());
  const int64_t chunk_bytes = std::clamp<int64_t>(groups * group_bytes / (4 * threads), int64_t(1) << 14,
                                                  int64_t(1) << 18);
  const int64_t grain = std::max<int64_t>(1, chunk_bytes / group_bytes);
  parallel_chunks(groups, grain, threads,
                  [&](int64_t g0, int64_t g1) { fn(wx8, group_bytes, nb, xq, bias, y, out, g0, g1); });
}

void gemm_x8_int8(const uint8_t* wx8, uint32_t type_id, const float* x, const float* bias, float* y, int64_t n,
                  int64_t out, int64_t in) {
  thread_local QuantizedRows xq;
  quantize_activations(type_id, x, n, in, xq);
  gemm_x8_int8_q(wx8, type_id, xq, bias, y, out);
}

}  // namespace speclab
