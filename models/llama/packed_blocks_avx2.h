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
  return t == GgmlType::Q4_0   ? 18
         : t == GgmlType::Q4_1 ? 20
         : t == GgmlType::Q5_0 ? 22
         : t == GgmlType::Q8_0 ? 34
         : t == GgmlType::Q4_K ? 144
                               : 210;  // Q6_K
}
// Elements per block: 256 for the K-quants, 32 otherwise.
constexpr int64_t block_elems(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q6_K ? 256 : 32; }

// Q4_K's twelve bytes of eight 6-bit scales and eight 6-bit mins.
inline void unpack_q4k_scales(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// The 32 integer weights of a 32-element block, element i in byte i: signed for Q4_0 (nibble -
// 8), Q5_0 (5 bits - 16) and Q8_0; the unsigned nibble (0..15) for Q4_1.
template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i block_ints32(const uint8_t* blk) {
  if constexpr (T == GgmlType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    constexpr int at = T == GgmlType::Q4_1 ? 4 : T == GgmlType::Q5_0 ? 6 : 2;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + at));
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
    if constexpr (T == GgmlType::Q4_0) return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
    if constexpr (T == GgmlType::Q5_0) {
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      // Byte i takes byte i / 8 of qh, then keeps bit i % 8 of it as 0x10.
      const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
      const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
      __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), pick), bit);
      hb = _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), _mm256_set1_epi8(0x10));
      return _mm256_sub_epi8(_mm256_or_si256(v, hb), _mm256_set1_epi8(16));
    }
    return v;
  }
}

// A K-quant super-block as integers: eight 32-byte chunks q[t] (elements 32t..32t+31) and the
// block's scales. Q4_K: q = nibble (0..15), x = (d * sc[t]) * q - dmin * mn[t]. Q6_K: q = 6 bits
// (0..63), x = (d * sc[e / 16]) * (q - 32).
struct KInts {
  __m256i q[8];
  int sc[16];  // Q4_K: 8 sub-block scales; Q6_K: 16 signed scales
  int mn[8];   // Q4_K only
  float d, dmin;
};

template <GgmlType T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void kblock_ints(const uint8_t* blk, KInts& k) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q4_K) {
    unpack_q4k_scales(blk + 4, k.sc, k.mn);
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
      k.q[2 * c] = _mm256_and_si256(bytes, low4);
      k.q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    }
    k.d = _cvtsh_ss(load_u16(blk));
    k.dmin = _cvtsh_ss(load_u16(blk + 2));
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
    for (int i = 0; i < 16; ++i) k.sc[i] = static_cast<int8_t>(blk[192 + i]);
    k.d = _cvtsh_ss(load_u16(blk + 208));
    k.dmin = 0.f;
  }
}

}  // namespace speclab::packed
