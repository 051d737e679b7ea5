// AVX2 decoding of ggml weight blocks to their integer values, shared by the float32-activation
// kernels (gemv.cpp) and the int8-activation kernels (qgemm.cpp), and the one horizontal sum those
// and attention_cpu.cpp use (one fixed order, so a sum's bits never depend on the caller).
// Internal to the kernel files:
// every function is inline and compiled for avx2,fma,f16c, so callers must check the CPU first
// (kernel_isa() != kScalar). Layouts: models/loaders/dequant.h and dequant.cpp.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "models/loaders/dequant.h"

namespace speclab::packed {

// The sum of the 8 lanes: (lo + hi) pairwise, then the two halves, then lanes 0 and 1.
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 0x55));
  return _mm_cvtss_f32(x);
}

inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Bytes per block of the packed types.
constexpr int64_t block_bytes(GgmlType t) {
  return t == GgmlType::F16 || t == GgmlType::BF16 ? 64  // 32 elements: the kernels' block
         : t == GgmlType::Q4_0 ? 18
         : t == GgmlType::Q4_1 ? 20
         : t == GgmlType::Q5_0 ? 22
         : t == GgmlType::Q5_1 ? 24
         : t == GgmlType::Q8_0 ? 34
         : t == GgmlType::IQ4_NL ? 18
         : t == GgmlType::Q2_K ? 84
         : t == GgmlType::Q3_K ? 110
         : t == GgmlType::Q4_K ? 144
         : t == GgmlType::Q5_K ? 176
         : t == GgmlType::IQ4_XS ? 136
                               : 210;  // Q6_K
}
// The K-quants: 256-element super-blocks.
constexpr bool is_kquant(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K;
}
// Types of 256-element super-blocks: the K-quants and IQ4_XS (eight 32-element sub-blocks, each
// IQ4_NL's table under a 6-bit signed scale). They multiply 256-element (Q8_K-style) activation
// blocks.
constexpr bool is_super256(GgmlType t) { return is_kquant(t) || t == GgmlType::IQ4_XS; }
// Elements per block: 256 for the K-quants and IQ4_XS, 32 otherwise (F16 and BF16, whose ggml
// block is one element, are taken 32 at a time: packed only where a row is a multiple of 32).
constexpr int64_t block_elems(GgmlType t) { return is_super256(t) ? 256 : 32; }
// K-quants whose sub-blocks have a min as well as a scale (x = d sc u - dmin mn): Q2_K (16
// sub-blocks of 16), Q4_K and Q5_K (8 of 32). The others (Q3_K, Q6_K) have 16 signed scales and
// a fixed offset: x = d sc (u - k_offset).
constexpr bool has_kmins(GgmlType t) { return t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K; }
// Q3_K and Q6_K store u = q + offset (x = d sc (u - k_offset)); IQ4_XS's integers are its
// table's signed values, with no offset.
constexpr bool has_k_offset(GgmlType t) { return t == GgmlType::Q3_K || t == GgmlType::Q6_K; }
// Q3_K's and Q6_K's offset: 4 and 32.
constexpr int k_offset(GgmlType t) { return t == GgmlType::Q3_K ? 4 : 32; }

// IQ4_XS's eight 6-bit sub-block scales as signed integers ls - 32 (-32..31): the low four bits
// of sub-block s are nibble s % 2 of scales_l[s / 2] (byte 4 + s / 2), the top two bits 2s, 2s + 1
// of the u16 scales_h (bytes 2-3).
inline void unpack_iq4xs_scales(const uint8_t* blk, int* sc) {
  const int scales_h = blk[2] | (blk[3] << 8);
  for (int s = 0; s < 8; ++s)
    sc[s] = (((blk[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4)) - 32;
}

// Q4_K's twelve bytes of eight 6-bit scales and eight 6-bit mins.
inline void unpack_q4k_scales(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// Q3_K's twelve bytes of sixteen 6-bit scales (offset 32) as signed bytes: scale k takes its low
// four bits from byte k (k < 8) or the high nibble of byte k - 8, and its top two from bits
// 2 (k / 4) of byte 8 + k % 4 (models/loaders/dequant.cpp). Word at a time: word j of the
// result holds scales 4j..4j+3.
inline void unpack_q3k_scales(const uint8_t* s, int8_t* sc) {
  uint32_t a[3], r[4];
  std::memcpy(a, s, 12);
  const uint32_t m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
  r[0] = (a[0] & m4) | ((a[2] & m2) << 4);
  r[1] = (a[1] & m4) | (((a[2] >> 2) & m2) << 4);
  r[2] = ((a[0] >> 4) & m4) | (((a[2] >> 4) & m2) << 4);
  r[3] = ((a[1] >> 4) & m4) | (((a[2] >> 6) & m2) << 4);
  uint8_t b[16];
  std::memcpy(b, r, 16);
  for (int k = 0; k < 16; ++k) sc[k] = static_cast<int8_t>(b[k] - 32);
}

// Whether a 32-element block type stores a fifth bit per element (qh): Q5_0 and Q5_1.
constexpr bool has_qh32(GgmlType t) { return t == GgmlType::Q5_0 || t == GgmlType::Q5_1; }

// The stored (unsigned) integers of a Q4_0, Q4_1, Q5_0 or Q5_1 block, element i in byte i: the
// nibble (0..15), or for Q5_0 and Q5_1 the nibble plus its fifth bit (0..31).
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i block_uints32(const uint8_t* blk) {
  static_assert(T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || has_qh32(T), "nibble types only");
  // Q4_0: d, qs; Q4_1: d, m, qs; Q5_0: d, qh, qs; Q5_1: d, m, qh, qs.
  constexpr int at = T == GgmlType::Q4_1 ? 4 : T == GgmlType::Q5_0 ? 6 : T == GgmlType::Q5_1 ? 8 : 2;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + at));
  const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
  if constexpr (has_qh32(T)) {
    uint32_t qh;
    std::memcpy(&qh, blk + at - 4, 4);
    // Byte i takes byte i / 8 of qh, then keeps bit i % 8 of it as 0x10.
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), pick), bit);
    hb = _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(v, hb);
  }
  return v;
}

// IQ4_NL's table (kIq4nlValues) plus `add` in each byte, in both 128-bit lanes, for vpshufb
// lookups of 4-bit indices.
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i iq4nl_lut(int add) {
  const __m128i t = _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)), _mm_set1_epi8(static_cast<char>(add)));
  return _mm256_set_m128i(t, t);
}

// The 32 integer weights of a 32-element block, element i in byte i: signed for Q4_0 (nibble -
// 8), Q5_0 (5 bits - 16), Q8_0 and IQ4_NL (its table's values); unsigned for Q4_1 (0..15) and
// Q5_1 (0..31).
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i block_ints32(const uint8_t* blk) {
  if constexpr (T == GgmlType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else if constexpr (T == GgmlType::IQ4_NL) {  // the indices are Q4_0's nibbles
    return _mm256_shuffle_epi8(iq4nl_lut(0), block_uints32<GgmlType::Q4_0>(blk));
  } else {
    const __m256i v = block_uints32<T>(blk);
    if constexpr (T == GgmlType::Q4_0) return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
    if constexpr (T == GgmlType::Q5_0) return _mm256_sub_epi8(v, _mm256_set1_epi8(16));
    return v;
  }
}

// A K-quant super-block as integers: eight 32-byte chunks q[t] (elements 32t..32t+31) and the
// block's scales. Q4_K: q = nibble (0..15), x = (d * sc[t]) * q - dmin * mn[t]; Q5_K the same
// with q = nibble plus fifth bit (0..31). Q6_K: q = 6 bits (0..63), x = (d * sc[e / 16]) * (q - 32).
// Q3_K: q = 3 bits (0..7), x = (d * sc[e / 16]) * (q - 4). Q2_K: q = 2 bits (0..3),
// x = (d * sc[e / 16]) * q - dmin * mn[e / 16]. IQ4_XS: q = the table's value (signed, -127..113),
// x = (d * sc[t]) * q.
struct KInts {
  __m256i q[8];
  int sc[16];  // Q4_K, Q5_K: 8 sub-block scales; Q2_K 16 (0..15); Q3_K, Q6_K: 16 signed scales; IQ4_XS 8 signed
  int mn[16];  // Q4_K, Q5_K: 8 mins; Q2_K 16
  float d, dmin;
};

// The integers and the two float scales of a K-quant super-block, without the sub-block scales.
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void kblock_q(const uint8_t* blk, KInts& k) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (T == GgmlType::IQ4_XS) {
    // Sub-block t's 16 bytes at 8 + 16t: low nibbles are its elements 0..15, high 16..31 (IQ4_NL's
    // order), looked up in the table.
    const __m256i lut = iq4nl_lut(0);
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 8 + 32 * c));
      const __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      // Sub-block 2c: the low 128 bits' low then high nibbles; 2c + 1: the high 128 bits'.
      k.q[2 * c] = _mm256_shuffle_epi8(lut, _mm256_permute2x128_si256(lo, hi, 0x20));
      k.q[2 * c + 1] = _mm256_shuffle_epi8(lut, _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    k.d = _cvtsh_ss(load_u16(blk));
    k.dmin = 0.f;
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    constexpr int qs_at = T == GgmlType::Q5_K ? 48 : 16;  // Q5_K: qh[32] at 16, before qs
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qs_at + 32 * c));
      k.q[2 * c] = _mm256_and_si256(bytes, low4);
      k.q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    }
    if constexpr (T == GgmlType::Q5_K) {
      // Bit t of qh[l] is the fifth bit of element 32t + l: moved to bit 4 of byte l of chunk t.
      // Within a 16-bit lane a shift by |4 - t| <= 4 brings no bit of the other byte to bit 4.
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      const __m256i bit4 = _mm256_set1_epi8(0x10);
      for (int t = 0; t < 8; ++t) {
        const __m256i s = t <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - t))
                                 : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(t - 4));
        k.q[t] = _mm256_or_si256(k.q[t], _mm256_and_si256(s, bit4));
      }
    }
    k.d = _cvtsh_ss(load_u16(blk));
    k.dmin = _cvtsh_ss(load_u16(blk + 2));
  } else if constexpr (T == GgmlType::Q2_K || T == GgmlType::Q3_K) {
    // Chunk 4h + s takes bits 2s, 2s + 1 of qs[32h + l] (a 16-bit shift by 2s <= 6 brings no bit
    // of the other byte to bits 0-1); Q3_K adds bit 4h + s of hmask[l] as bit 2.
    constexpr int qs_at = T == GgmlType::Q3_K ? 32 : 16;  // Q3_K: hmask[32] at 0; Q2_K: scales[16]
    const __m256i low2 = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; ++h) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qs_at + 32 * h));
      for (int s = 0; s < 4; ++s)
        k.q[4 * h + s] = _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(2 * s)), low2);
    }
    if constexpr (T == GgmlType::Q3_K) {
      const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
      const __m256i bit2 = _mm256_set1_epi8(0x04);
      for (int t = 0; t < 8; ++t) {
        const __m256i s = t >= 2 ? _mm256_srl_epi16(hm, _mm_cvtsi32_si128(t - 2))
                                 : _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - t));
        k.q[t] = _mm256_or_si256(k.q[t], _mm256_and_si256(s, bit2));
      }
      k.d = _cvtsh_ss(load_u16(blk + 108));
      k.dmin = 0.f;
    } else {
      k.d = _cvtsh_ss(load_u16(blk + 80));
      k.dmin = _cvtsh_ss(load_u16(blk + 82));
    }
  } else {  // Q6_K: chunk 4h + s takes nibble s / 2 of ql[64h + 32(s % 2) + l], bits 2s of qh[32h + l]
    const __m256i hi2 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      k.q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2));
      k.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2));
      k.q[4 * h + 2] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, hi2));
      k.q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2));
    }
    k.d = _cvtsh_ss(load_u16(blk + 208));
    k.dmin = 0.f;
  }
}

// kblock_q plus the sub-block scales as plain ints (k.sc, k.mn), for the float32 kernels.
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void kblock_ints(const uint8_t* blk, KInts& k) {
  kblock_q<T>(blk, k);
  if constexpr (T == GgmlType::IQ4_XS) {
    unpack_iq4xs_scales(blk, k.sc);
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    unpack_q4k_scales(blk + 4, k.sc, k.mn);
  } else if constexpr (T == GgmlType::Q2_K) {
    for (int i = 0; i < 16; ++i) {
      k.sc[i] = blk[i] & 0x0F;
      k.mn[i] = blk[i] >> 4;
    }
  } else if constexpr (T == GgmlType::Q3_K) {
    int8_t sc[16];
    unpack_q3k_scales(blk + 96, sc);
    for (int i = 0; i < 16; ++i) k.sc[i] = sc[i];
  } else {
    for (int i = 0; i < 16; ++i) k.sc[i] = static_cast<int8_t>(blk[192 + i]);
  }
}

// A K-quant super-block's sub-block scales as vpmaddwd multipliers, built in vector registers:
// - scale[t] (t = 0..7) multiplies the 16 int16 pair sums of chunk t (elements 32t..32t+31).
//   Q4_K, Q5_K and IQ4_XS: sc[t] in all 16 lanes. Q2_K, Q3_K, Q6_K: sc[2t] in the low 128 bits, sc[2t+1]
//   in the high.
// - off16 multiplies the 16 activation sums of 16 elements (xq.bsum16). Q4_K and Q5_K: mn[0],
//   mn[0], mn[1], mn[1], ..., mn[7], mn[7] (each min covers two sums); Q2_K: mn[0..15]; Q3_K and
//   Q6_K: sc[0..15] (the caller applies the offset); IQ4_XS: zero (no offset).
// The integers equal kblock_ints's.
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void kblock_scales16(const uint8_t* blk,
                                                                                   __m256i (&scale)[8],
                                                                                   __m256i& off16) {
  if constexpr (T == GgmlType::IQ4_XS) {
    int sc[8];
    unpack_iq4xs_scales(blk, sc);
    for (int t = 0; t < 8; ++t) scale[t] = _mm256_set1_epi16(static_cast<int16_t>(sc[t]));
    off16 = _mm256_setzero_si256();
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    // The 12 scale bytes as words w0..w2: bytes 0-3 hold sc[0..3] (low 6 bits) and the top two
    // bits of sc[4..7]; bytes 4-7 the same for mn; bytes 8-11 the low nibbles of sc[4..7] (low)
    // and mn[4..7] (high).
    uint32_t w[3];
    std::memcpy(w, blk + 4, 12);
    const uint32_t m6 = 0x3F3F3F3Fu, m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
    const uint32_t sc_lo = w[0] & m6, mn_lo = w[1] & m6;
    const uint32_t sc_hi = (w[2] & m4) | (((w[0] >> 6) & m2) << 4);
    const uint32_t mn_hi = ((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4);
    // int16 lanes: sc[0..7] then mn[0..7].
    const __m256i v = _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi),
                                                          static_cast<int>(mn_lo), static_cast<int>(mn_hi)));
    const __m256i sc2 = _mm256_permute2x128_si256(v, v, 0x00);  // sc[0..7] in both halves
    for (int t = 0; t < 8; ++t)
      scale[t] = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16(static_cast<int16_t>((2 * t) | ((2 * t + 1) << 8))));
    const __m128i mn = _mm256_extracti128_si256(v, 1);
    off16 = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
  } else {
    __m256i v;  // sc[0..15] as int16
    if constexpr (T == GgmlType::Q2_K) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
      const __m128i low4 = _mm_set1_epi8(0x0F);
      v = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, low4));
      off16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4));  // mn[0..15]
    } else {
      alignas(16) int8_t sc[16];
      if constexpr (T == GgmlType::Q3_K)
        unpack_q3k_scales(blk + 96, sc);
      else
        std::memcpy(sc, blk + 192, 16);
      v = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)));
      off16 = v;
    }
    const __m256i lo = _mm256_permute2x128_si256(v, v, 0x00), hi = _mm256_permute2x128_si256(v, v, 0x11);
    for (int t = 0; t < 8; ++t) {
      // Within a half of 8 scales, chunk t uses scales 2(t % 4) (low 128 bits) and 2(t % 4) + 1 (high).
      const int a = 4 * (t % 4);
      const __m256i pick = _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,
                                            a + 1, a + 2, a + 3, a + 2, a + 3, a + 2, a + 3, a + 2, a + 3, a + 2,
                                            a + 3, a + 2, a + 3, a + 2, a + 3, a + 2, a + 3);
      scale[t] = _mm256_shuffle_epi8(t < 4 ? lo : hi, pick);
    }
  }
}

}  // namespace speclab::packed
