#include "models/llama/qgemm_x8.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands
// (the 512-bit kernels, qgemm_x8_zmm.inc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cpuid.h>

#include <algorithm>
#include <cstdlib>
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
//   Q5_1  d16[8] @0, m16[8] @16, qh @32 (32), qs @64 (128) 192 = 8 x 24
//   Q8_0  d16[8] @0, u @16 (256)                           272 = 8 x 34
//   IQ4_NL as Q4_0, the nibbles being indices into kIq4nlValues 144 = 8 x 18
//   Q2_K  d16[8] @0, dmin16[8] @16, scmn [8 c][8 r][2] @32 (scale in the low nibble, min in the
//         high), then per chunk c: q2 (64) @160 + 64c                                         672 = 8 x 84
//   Q3_K  d16[8] @0, sc [8 c][8 r][2] (int8) @16, then per chunk c: q2 (64) @144 + 96c, hb (32) after it  912
//   Q4_K  d16[8] @0, dmin16[8] @16, sc [8 t][8 r] @32, mn [4 p][8 r][2] @96, qs [8 t][128] @160  1184
//   Q5_K  as Q4_K up to @160, then per sub-block t: qs (128) @160 + 160t, qh (32) after it  1440
//   Q6_K  d16[8] @0, sc [8 c][8 r][2] (int8) @16, then per chunk c: qs (128) @144 + 192c, qh (64) after it  1680
//   IQ4_XS d16[8] @0, sc [4 p][8 r][2] (int8, ls - 32: sub-blocks 2p, 2p + 1) @16, qs [8 t][128] @80
//         (table indices)                                                              1104 = 8 x 138
// qs (128 bytes for 32 elements of 8 rows): byte 32v + 4r + i (v, i in 0..3) holds element 4v + i of
// row r in its low nibble and element 16 + 4v + i in its high nibble. Group g (0..7) of 4
// elements 4g..4g+3 is therefore the low (g < 4) or high (g >= 4) nibbles of vector g % 4.
// Q5_0 and Q5_1 qh, and Q5_K's per sub-block (its 32 elements): byte 4r + i, bit g = fifth bit
// of element 4g + i of row r.
// Q6_K qh (64 bytes per 32 elements): vector h (0, 1), byte 4r + i, bits 2v, 2v + 1 = the top two
// bits of element 4(4h + v) + i. Q2_K's and Q3_K's q2 are the same with the low two bits, and
// Q3_K's hb is the fifth-bit layout with bit 2. Q8_0 u: byte 32g + 4r + i = element 4g + i of row r, plus 128.
// Q2_K, Q3_K and Q6_K chunk c (elements 32c..32c+31) hold sub-blocks 2c (groups 0-3) and 2c + 1
// (groups 4-7).

constexpr int64_t x8_block_bytes(GgmlType t) {
  return t == GgmlType::Q4_0   ? 144
         : t == GgmlType::Q4_1 ? 160
         : t == GgmlType::Q5_0 ? 176
         : t == GgmlType::Q5_1 ? 192
         : t == GgmlType::Q8_0 ? 272
         : t == GgmlType::IQ4_NL ? 144
         : t == GgmlType::Q2_K ? 672
         : t == GgmlType::Q3_K ? 912
         : t == GgmlType::Q4_K ? 1184
         : t == GgmlType::Q5_K ? 1440
         : t == GgmlType::IQ4_XS ? 1104
                               : 1680;  // Q6_K
}

// Q4_K and Q5_K share a layout up to their sub-blocks' data, which start at 160: 128 bytes of
// nibbles each, and Q5_K's 32 bytes of fifth bits after them.
constexpr bool is_q45k(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K; }
constexpr int64_t k_sub_bytes(GgmlType t) { return t == GgmlType::Q5_K ? 160 : 128; }

// Q2_K, Q3_K and Q6_K: 16 sub-blocks of 16 elements, in chunks of 32 (two sub-blocks) after the
// scales. Where the chunks start and how long each is.
constexpr bool is_k16(GgmlType t) { return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q6_K; }
constexpr int64_t k16_chunks_at(GgmlType t) { return t == GgmlType::Q2_K ? 160 : 144; }
constexpr int64_t k16_chunk_bytes(GgmlType t) {
  return t == GgmlType::Q2_K ? 64 : t == GgmlType::Q3_K ? 96 : 192;
}

GgmlType checked_type(uint32_t type_id) {
  const auto t = static_cast<GgmlType>(type_id);
  if (!int8_gemm_supports(type_id))  // the same types as the row-major int8 kernels
    throw Error(ErrorKind::kUnsupported,
                "repacked int8 matmul supports " + int8_packable_type_names() + ", not " + ggml_type_name(type_id));
  return t;
}

void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// One row's block decoded to unsigned integers u (32 or 256 of them) and its scale fields.
struct RowBlock {
  uint8_t u[256];
  uint16_t d16 = 0, m16 = 0;  // d; Q4_1's and Q5_1's min, or Q2_K's, Q4_K's and Q5_K's dmin
  int sc[16] = {};            // Q4_K, Q5_K: 8 scales; Q2_K: 16 (0..15); Q3_K, Q6_K: 16 signed scales; IQ4_XS 8 signed
  int mn[16] = {};            // Q4_K, Q5_K: 8 mins; Q2_K: 16
};

void decode_row_block(GgmlType t, const uint8_t* blk, RowBlock& rb) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:  // u: the table index (qgemm_x8's kernels look the value up)
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
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const int at = t == GgmlType::Q5_1 ? 4 : 2;  // qh; qs after it
      rb.d16 = load_u16(blk);
      if (t == GgmlType::Q5_1) rb.m16 = load_u16(blk + 2);
      uint32_t qh;
      std::memcpy(&qh, blk + at, 4);
      for (int i = 0; i < 16; ++i) {
        rb.u[i] = static_cast<uint8_t>((blk[at + 4 + i] & 0x0F) | (((qh >> i) & 1) << 4));
        rb.u[i + 16] = static_cast<uint8_t>((blk[at + 4 + i] >> 4) | (((qh >> (i + 16)) & 1) << 4));
      }
      break;
    }
    case GgmlType::Q8_0:
      rb.d16 = load_u16(blk);
      for (int i = 0; i < 32; ++i) rb.u[i] = static_cast<uint8_t>(static_cast<int8_t>(blk[2 + i]) + 128);
      break;
    case GgmlType::IQ4_XS:  // u: the table index of each element (sub-block s: qs[16s + j] at 8)
      rb.d16 = load_u16(blk);
      packed::unpack_iq4xs_scales(blk, rb.sc);
      for (int sb = 0; sb < 8; ++sb)
        for (int j = 0; j < 16; ++j) {
          rb.u[32 * sb + j] = blk[8 + 16 * sb + j] & 0x0F;
          rb.u[32 * sb + j + 16] = blk[8 + 16 * sb + j] >> 4;
        }
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = t == GgmlType::Q5_K;  // qh[32] at 16 (bit sb of qh[l]: element 32 sb + l), qs at 48
      rb.d16 = load_u16(blk);
      rb.m16 = load_u16(blk + 2);
      packed::unpack_q4k_scales(blk + 4, rb.sc, rb.mn);
      for (int sb = 0; sb < 8; ++sb)
        for (int l = 0; l < 32; ++l) {
          int u = (blk[(five ? 48 : 16) + 32 * (sb / 2) + l] >> (4 * (sb % 2))) & 0x0F;
          if (five) u |= ((blk[16 + l] >> sb) & 1) << 4;
          rb.u[32 * sb + l] = static_cast<uint8_t>(u);
        }
      break;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      // Element e = 128 h + 32 s + l: bits 2s, 2s + 1 of qs[32h + l]; Q3_K: bit 2 from bit e / 32 of hmask[l].
      const bool q3 = t == GgmlType::Q3_K;
      const uint8_t* qs = blk + (q3 ? 32 : 16);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        int u = (qs[32 * h + l] >> (2 * s)) & 3;
        if (q3) u |= ((blk[l] >> (e / 32)) & 1) << 2;
        rb.u[e] = static_cast<uint8_t>(u);
      }
      if (q3) {
        int8_t sc[16];
        packed::unpack_q3k_scales(blk + 96, sc);
        for (int k = 0; k < 16; ++k) rb.sc[k] = sc[k];
        rb.d16 = load_u16(blk + 108);
      } else {
        for (int k = 0; k < 16; ++k) {
          rb.sc[k] = blk[k] & 0x0F;
          rb.mn[k] = blk[k] >> 4;
        }
        rb.d16 = load_u16(blk + 80);
        rb.m16 = load_u16(blk + 82);
      }
      break;
    }
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

// The 32 bytes of bit `bit` of elements [base, base + 32) of 8 rows (the fifth-bit layout above:
// Q5_0's, Q5_1's and Q5_K's bit 4, Q3_K's bit 2).
void put_bit(const RowBlock* rows, int base, int bit, uint8_t* dst) {
  for (int r = 0; r < 8; ++r)
    for (int i = 0; i < 4; ++i) {
      uint8_t bits = 0;
      for (int g = 0; g < 8; ++g) bits |= static_cast<uint8_t>(((rows[r].u[base + 4 * g + i] >> bit) & 1) << g);
      dst[4 * r + i] = bits;
    }
}
void put_fifth_bits(const RowBlock* rows, int base, uint8_t* dst) { put_bit(rows, base, 4, dst); }

// The 64 bytes of bits `bit`, `bit` + 1 of elements [base, base + 32) of 8 rows (the qh layout
// above: Q6_K's bits 4-5, Q2_K's and Q3_K's bits 0-1).
void put_bit_pairs(const RowBlock* rows, int base, int bit, uint8_t* dst) {
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < 8; ++r)
      for (int i = 0; i < 4; ++i) {
        uint8_t bits = 0;
        for (int v = 0; v < 4; ++v)
          bits |= static_cast<uint8_t>(((rows[r].u[base + 4 * (4 * h + v) + i] >> bit) & 3) << (2 * v));
        dst[32 * h + 4 * r + i] = bits;
      }
}

void repack_group_block(GgmlType t, const RowBlock* rows, uint8_t* dst) {
  for (int r = 0; r < 8; ++r) store_u16(dst + 2 * r, rows[r].d16);
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL: put_nibbles(rows, 0, dst + 16); break;
    case GgmlType::Q4_1:
      for (int r = 0; r < 8; ++r) store_u16(dst + 16 + 2 * r, rows[r].m16);
      put_nibbles(rows, 0, dst + 32);
      break;
    case GgmlType::Q5_0:
      put_fifth_bits(rows, 0, dst + 16);
      put_nibbles(rows, 0, dst + 48);
      break;
    case GgmlType::Q5_1:
      for (int r = 0; r < 8; ++r) store_u16(dst + 16 + 2 * r, rows[r].m16);
      put_fifth_bits(rows, 0, dst + 32);
      put_nibbles(rows, 0, dst + 64);
      break;
    case GgmlType::Q8_0:
      for (int g = 0; g < 8; ++g)
        for (int r = 0; r < 8; ++r)
          for (int i = 0; i < 4; ++i) dst[16 + 32 * g + 4 * r + i] = rows[r].u[4 * g + i];
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      for (int r = 0; r < 8; ++r) store_u16(dst + 16 + 2 * r, rows[r].m16);
      for (int s = 0; s < 8; ++s)
        for (int r = 0; r < 8; ++r) dst[32 + 8 * s + r] = static_cast<uint8_t>(rows[r].sc[s]);
      for (int p = 0; p < 4; ++p)
        for (int r = 0; r < 8; ++r) {
          dst[96 + 16 * p + 2 * r] = static_cast<uint8_t>(rows[r].mn[2 * p]);
          dst[96 + 16 * p + 2 * r + 1] = static_cast<uint8_t>(rows[r].mn[2 * p + 1]);
        }
      for (int s = 0; s < 8; ++s) {
        put_nibbles(rows, 32 * s, dst + 160 + k_sub_bytes(t) * s);
        if (t == GgmlType::Q5_K) put_fifth_bits(rows, 32 * s, dst + 160 + k_sub_bytes(t) * s + 128);
      }
      break;
    case GgmlType::IQ4_XS:
      for (int p = 0; p < 4; ++p)
        for (int r = 0; r < 8; ++r)
          for (int k = 0; k < 2; ++k)
            dst[16 + 16 * p + 2 * r + k] = static_cast<uint8_t>(static_cast<int8_t>(rows[r].sc[2 * p + k]));
      for (int sb = 0; sb < 8; ++sb) put_nibbles(rows, 32 * sb, dst + 80 + 128 * sb);
      break;
    case GgmlType::Q2_K:
      for (int r = 0; r < 8; ++r) store_u16(dst + 16 + 2 * r, rows[r].m16);
      for (int c = 0; c < 8; ++c) {
        for (int r = 0; r < 8; ++r)
          for (int k = 0; k < 2; ++k)
            dst[32 + 16 * c + 2 * r + k] = static_cast<uint8_t>(rows[r].sc[2 * c + k] | (rows[r].mn[2 * c + k] << 4));
        put_bit_pairs(rows, 32 * c, 0, dst + 160 + 64 * c);
      }
      break;
    default:  // Q3_K, Q6_K
      for (int c = 0; c < 8; ++c) {
        for (int r = 0; r < 8; ++r) {
          dst[16 + 16 * c + 2 * r] = static_cast<uint8_t>(static_cast<int8_t>(rows[r].sc[2 * c]));
          dst[16 + 16 * c + 2 * r + 1] = static_cast<uint8_t>(static_cast<int8_t>(rows[r].sc[2 * c + 1]));
        }
        uint8_t* chunk = dst + k16_chunks_at(t) + k16_chunk_bytes(t) * c;
        if (t == GgmlType::Q3_K) {
          put_bit_pairs(rows, 32 * c, 0, chunk);
          put_bit(rows, 32 * c, 2, chunk + 64);
        } else {
          put_nibbles(rows, 32 * c, chunk);
          put_bit_pairs(rows, 32 * c, 4, chunk + 128);
        }
      }
      break;
  }
}

// ---- the kernels -----------------------------------------------------------------------------

// Helpers both ISAs' kernels inline (AVX2 is a subset of either kernel target).
#define SPECLAB_X8_AVX2 __attribute__((target("avx2,fma,f16c"), always_inline))

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

SPECLAB_X8_AVX2 inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Prefetches the `bytes` bytes at p (one hint per 64-byte line): the kernels call it for the
// block x8_prefetch_ahead(block bytes) bytes ahead of the one they decode, in passes of N >= 2
// activation rows and, for the 32-element-block types, Q2_K, Q3_K and IQ4_XS (kOneRowToo), in
// one-row passes too.
// Each block is read front to back (the layout keeps every block's data in reading order: a
// Q6_K layout that read its low and high bits as two streams 1 KiB apart ran at a third of the
// memory bandwidth). Q4_K's, Q5_K's and Q6_K's one-row passes (decode) are left to the hardware
// prefetchers: their arithmetic per block is short, and the burst of hints per block (19 for a
// Q4_K block of 8 rows) cost Qwen2.5-Coder-1.5B decode 8-15% (`speclab bench -m
// qwen2.5-coder-1.5b-instruct`, alternated runs: 29.4 -> 31.9 tok/s at context 64, 28.4 -> 32.4
// at 512), while passes of 3 to 9 rows ran up to 20% slower without the hints. Q2_K's, Q3_K's and
// IQ4_XS's one-row passes, whose unpacking takes longer per byte, ran faster with them (2-core
// AMD EPYC, AVX2 only; `speclab bench --ab`, the one-row pass at context 512 with the hints over
// without, 12-20 rounds: Qwen2.5-Coder-1.5B Q3_K_M 0.94 and 0.93, Q2_K 0.87, IQ4_XS 0.92).
//
// How far ahead: at least 2 blocks and about 2.5 KiB. Two blocks were 320 bytes for Q4_1, too
// close to cover the memory latency once a pass's rows make each block take longer: on the
// Zen 5, SmolLM2's Q4_1 matrices with 17 rows ran 15-22% faster 10-24 blocks ahead (kernel_bench,
// 2 threads, alternated: gate_up 81-85 -> 63-69 us, lm_head 1300-1376 -> 963-1076 us; 9 rows
// 49 -> 37-46 us and 711 -> 562-650 us; 3 and 5 rows no slower). The K-quants' blocks (1184 and
// 1680 bytes) keep their 2. At that distance the 32-element types' one-row passes gained too
// (they had no hints, and 2 blocks ahead had shown no difference): Qwen2.5-Coder-0.5B (Q5_0 and
// Q8_0 matrices) decoded at 106-125 against 83-100 tok/s at context 64, 101-133 against 94-98 at
// 512 (`speclab bench -m qwen2.5-coder-0.5b-instruct`, three alternated rounds); SmolLM2's AR
// steps inside `speclab run` took 2.59-2.64 against 2.72-2.83 ms per token; kernel_bench's
// one-row Q4_1 lm_head 317-346 against 362-387 us.
constexpr int64_t kX8PrefetchBytes = 2560;
constexpr int64_t x8_prefetch_ahead(int64_t block_bytes) {
  return std::max<int64_t>(2, kX8PrefetchBytes / block_bytes) * block_bytes;
}
template <int N, bool kOneRowToo = false>
SPECLAB_X8_AVX2 inline void prefetch_block(const uint8_t* p, int64_t bytes) {
  if constexpr (N >= 2 || kOneRowToo)
    for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(reinterpret_cast<const char*>(p + at), _MM_HINT_T0);
}

// The 8 group vectors of a 128-byte nibble interleave.
SPECLAB_X8_AVX2 inline void nibbles(const uint8_t* qs, __m256i (&W)[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int v = 0; v < 4; ++v) {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * v));
    W[v] = _mm256_and_si256(l, low4);
    W[v + 4] = _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
  }
}

// Bits [bit, bit + width) of every byte of v moved to bit `to` (masked by `mask`, which keeps
// bits [to, to + width)). Within a byte (bit + width <= 8, to + width <= 8) a 16-bit shift
// carries no bit of the other byte into the mask.
SPECLAB_X8_AVX2 inline __m256i move_bits(__m256i v, int bit, int to, __m256i mask) {
  const __m256i s = bit <= to ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(to - bit)) : _mm256_srl_epi16(v, _mm_cvtsi32_si128(bit - to));
  return _mm256_and_si256(s, mask);
}
SPECLAB_X8_AVX2 inline __m256i to_bit4(__m256i v, int bit, __m256i mask) { return move_bits(v, bit, 4, mask); }

// The 8 group vectors of chunk c of a Q2_K, Q3_K or Q6_K block (u: 2, 3 or 6 bits).
template <GgmlType T>
SPECLAB_X8_AVX2 inline void k16_weights(const uint8_t* chunk, __m256i (&W)[8]) {
  if constexpr (T == GgmlType::Q6_K) {
    const __m256i top2 = _mm256_set1_epi8(0x30);
    nibbles(chunk, W);
    for (int h = 0; h < 2; ++h) {
      const __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 128 + 32 * h));
      for (int v = 0; v < 4; ++v) W[4 * h + v] = _mm256_or_si256(W[4 * h + v], to_bit4(hv, 2 * v, top2));
    }
  } else {
    const __m256i low2 = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; ++h) {
      const __m256i lv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * h));
      for (int v = 0; v < 4; ++v) W[4 * h + v] = move_bits(lv, 2 * v, 0, low2);
    }
    if constexpr (T == GgmlType::Q3_K) {
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 64));
      const __m256i bit2 = _mm256_set1_epi8(0x04);
      for (int g = 0; g < 8; ++g) W[g] = _mm256_or_si256(W[g], move_bits(hb, g, 2, bit2));
    }
  }
}

// Where a 32-element-block nibble type's qs start in its repacked block (the layout above).
constexpr int x8_qs_at(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::IQ4_NL ? 16 : t == GgmlType::Q4_1 ? 32 : t == GgmlType::Q5_0 ? 48 : 64;
}

// Q8_0 and IQ4_NL: signed weights w stored (Q8_0) or looked up (IQ4_NL) as u = w + 128.
constexpr bool u_plus_128(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::IQ4_NL; }

// ORs the fifth bits at qh (32 bytes, the qh layout above) into the nibbles W[0..7].
template <size_t K>
SPECLAB_X8_AVX2 inline void add_fifth_bits(const uint8_t* qh, __m256i (&W)[K]) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  for (int g = 0; g < 8; ++g) W[g] = _mm256_or_si256(W[g], to_bit4(h, g, bit4));
}

// W[0..7] of a 128-byte nibble interleave of table indices (IQ4_NL, IQ4_XS): the table's value
// for each index, plus 128.
template <size_t K>
SPECLAB_X8_AVX2 inline void iq4_lookup(const uint8_t* qs, __m256i (&W)[K]) {
  __m256i V[8];
  nibbles(qs, V);
  const __m256i lut = packed::iq4nl_lut(128);
  for (int g = 0; g < 8; ++g) W[g] = _mm256_shuffle_epi8(lut, V[g]);
}

// W[0..7] of a 32-element-block type (Q8_0: the stored bytes u = w + 128; IQ4_NL: the table's
// value for each index, plus 128).
template <GgmlType T>
SPECLAB_X8_AVX2 inline void load_weights32(const uint8_t* gb, __m256i (&W)[16]) {
  if constexpr (T == GgmlType::Q8_0) {
    for (int g = 0; g < 8; ++g) W[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 16 + 32 * g));
  } else if constexpr (T == GgmlType::IQ4_NL) {
    iq4_lookup(gb + x8_qs_at(T), W);
  } else {
    __m256i V[8];
    nibbles(gb + x8_qs_at(T), V);
    for (int g = 0; g < 8; ++g) W[g] = V[g];
    if constexpr (packed::has_qh32(T)) add_fifth_bits(gb + x8_qs_at(T) - 32, W);
  }
}

using RangeFn = void (*)(const uint8_t*, int64_t, int64_t, const QuantizedRows&, const float*, float*, int64_t,
                         int64_t, int64_t);

// AVX-512 VNNI: vpdpbusd sums 4 unsigned-by-signed byte products per int32 lane, vpdpwssd 2
// int16 products.
namespace vnni {
#define X8_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define X8_INLINE __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"), always_inline)) inline

template <GgmlType T>
X8_INLINE void weights32(const uint8_t* gb, __m256i (&W)[16]) {
  load_weights32<T>(gb, W);
}

// Groups [g0, g0 + 4) and [g0 + 4, g0 + 8) as two independent chains, then added.
X8_INLINE __m256i dot8_vnni(const __m256i* W, const int8_t* x) {
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

template <GgmlType T>
X8_INLINE __m256i dot8(const __m256i (&W)[16], const int8_t* x) {
  return dot8_vnni(W, x);
}

X8_INLINE __m256i q4k_scale(const uint8_t* gb, int t) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 32 + 8 * t)));
}

X8_INLINE __m256i q4k_sdot(const __m256i (&W)[8], const int8_t* x, __m256i sc) {
  return _mm256_mullo_epi32(dot8_vnni(W, x), sc);
}

X8_INLINE __m256i q5k_sdot(const __m256i (&W)[8], const int8_t* x, __m256i sc) { return q4k_sdot(W, x, sc); }

X8_INLINE __m256i dpwssd(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

X8_INLINE void q6k_scales(__m256i S, __m256i& s_lo, __m256i& s_hi) {
  s_lo = _mm256_srai_epi32(_mm256_slli_epi32(S, 16), 16);
  s_hi = _mm256_srai_epi32(S, 16);
}

// IQ4_XS: W[0..7] = u = table value + 128 (vpdpbusd takes u up to 255 as it is).
X8_INLINE void iq4_weights(const uint8_t* qs, __m256i (&W)[16]) { iq4_lookup(qs, W); }

// sc (int32 per row lane, q6k_scales's form) * (u . x)
X8_INLINE __m256i iq4xs_sdot(const __m256i (&W)[16], const int8_t* x, __m256i sc) {
  return _mm256_mullo_epi32(dot8_vnni(W, x), sc);
}

X8_INLINE __m256i q6k_sdot(const __m256i (&W)[8], const int8_t* x, __m256i s_lo, __m256i s_hi) {
  __m256i lo = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[0], bcast4(x));
  __m256i hi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[4], bcast4(x + 16));
  lo = _mm256_dpbusd_epi32(lo, W[1], bcast4(x + 4));
  hi = _mm256_dpbusd_epi32(hi, W[5], bcast4(x + 20));
  lo = _mm256_dpbusd_epi32(lo, W[2], bcast4(x + 8));
  hi = _mm256_dpbusd_epi32(hi, W[6], bcast4(x + 24));
  lo = _mm256_dpbusd_epi32(lo, W[3], bcast4(x + 12));
  hi = _mm256_dpbusd_epi32(hi, W[7], bcast4(x + 28));
  return _mm256_add_epi32(_mm256_mullo_epi32(lo, s_lo), _mm256_mullo_epi32(hi, s_hi));
}

#include "models/llama/qgemm_x8_kernels.inc"
#undef X8_INLINE
#undef X8_TARGET
}  // namespace vnni

#include "models/llama/qgemm_x8_zmm.inc"

// AVX2 (also AVX-512 without VNNI): vpmaddubsw (pairs of unsigned-by-signed byte products, as
// int16) summed in int16 while no sum can overflow, then vpmaddwd against ones or the scales.
// Bounds, with activations in [-127, 127]: a product pair of u <= 15 is at most 3,810 in
// magnitude, so 8 of them (30,480) fit int16; u <= 31 (Q5_0, Q5_1, Q5_K): 4 pairs (31,496); u <= 63 (Q6_K):
// 2 pairs (32,004), which Q2_K (u <= 3) and Q3_K (u <= 7) share, far inside the bound. Q8_0's u (<= 255) would saturate vpmaddubsw, so it is split into nibbles,
// u = 16 h + l. Every sum is exact, so the integers equal vpdpbusd's.
namespace avx2 {
#define X8_TARGET __attribute__((target("avx2,fma,f16c")))
#define X8_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline


// u (<= 255) in W[0..7] split into its low nibbles (W[0..7]) and high ones (W[8..15]).
X8_INLINE void split_nibbles(__m256i (&W)[16]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int g = 0; g < 8; ++g) {
    W[8 + g] = _mm256_and_si256(_mm256_srli_epi16(W[g], 4), low4);
    W[g] = _mm256_and_si256(W[g], low4);
  }
}

// Q8_0 and IQ4_NL: W[0..7] the low nibbles of u, W[8..15] the high ones.
template <GgmlType T>
X8_INLINE void weights32(const uint8_t* gb, __m256i (&W)[16]) {
  load_weights32<T>(gb, W);
  if constexpr (u_plus_128(T)) split_nibbles(W);
}

// IQ4_XS: u = table value + 128 as nibbles, like IQ4_NL's.
X8_INLINE void iq4_weights(const uint8_t* qs, __m256i (&W)[16]) {
  iq4_lookup(qs, W);
  split_nibbles(W);
}

X8_INLINE __m256i mb(__m256i w, const int8_t* x) { return _mm256_maddubs_epi16(w, bcast4(x)); }

// int16 sum of the 8 groups' pair products (u <= 15), in two chains.
X8_INLINE __m256i sum8_16(const __m256i* W, const int8_t* x) {
  __m256i a = _mm256_add_epi16(mb(W[0], x), mb(W[2], x + 8));
  __m256i b = _mm256_add_epi16(mb(W[1], x + 4), mb(W[3], x + 12));
  a = _mm256_add_epi16(a, _mm256_add_epi16(mb(W[4], x + 16), mb(W[6], x + 24)));
  b = _mm256_add_epi16(b, _mm256_add_epi16(mb(W[5], x + 20), mb(W[7], x + 28)));
  return _mm256_add_epi16(a, b);
}

template <GgmlType T>
X8_INLINE __m256i dot8(const __m256i (&W)[16], const int8_t* x) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (u_plus_128(T)) {
    const __m256i lo = _mm256_madd_epi16(sum8_16(W, x), ones);
    return _mm256_add_epi32(lo, _mm256_madd_epi16(sum8_16(W + 8, x), _mm256_set1_epi16(16)));
  } else if constexpr (packed::has_qh32(T)) {  // u <= 31: sums of 4 pairs in int16
    const __m256i a = _mm256_add_epi16(_mm256_add_epi16(mb(W[0], x), mb(W[1], x + 4)),
                                       _mm256_add_epi16(mb(W[2], x + 8), mb(W[3], x + 12)));
    const __m256i b = _mm256_add_epi16(_mm256_add_epi16(mb(W[4], x + 16), mb(W[5], x + 20)),
                                       _mm256_add_epi16(mb(W[6], x + 24), mb(W[7], x + 28)));
    return _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones));
  } else {
    return _mm256_madd_epi16(sum8_16(W, x), ones);
  }
}

// sc (<= 63) in both int16 halves of each row's lane: vpmaddwd then gives sc * (pair sum).
X8_INLINE __m256i q4k_scale(const uint8_t* gb, int t) {
  const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 32 + 8 * t)));
  return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

X8_INLINE __m256i q4k_sdot(const __m256i (&W)[8], const int8_t* x, __m256i sc) {
  return _mm256_madd_epi16(sum8_16(W, x), sc);
}

// u <= 31: groups 0-3 and 4-7 summed in int16 separately (4 pairs each), each times sc.
X8_INLINE __m256i q5k_sdot(const __m256i (&W)[8], const int8_t* x, __m256i sc) {
  const __m256i a = _mm256_add_epi16(_mm256_add_epi16(mb(W[0], x), mb(W[1], x + 4)),
                                     _mm256_add_epi16(mb(W[2], x + 8), mb(W[3], x + 12)));
  const __m256i b = _mm256_add_epi16(_mm256_add_epi16(mb(W[4], x + 16), mb(W[5], x + 20)),
                                     _mm256_add_epi16(mb(W[6], x + 24), mb(W[7], x + 28)));
  return _mm256_add_epi32(_mm256_madd_epi16(a, sc), _mm256_madd_epi16(b, sc));
}

X8_INLINE __m256i dpwssd(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

// S's low (high) int16 of each lane copied into both halves.
X8_INLINE void q6k_scales(__m256i S, __m256i& s_lo, __m256i& s_hi) {
  s_lo = _mm256_blend_epi16(S, _mm256_slli_epi32(S, 16), 0xAA);
  s_hi = _mm256_blend_epi16(_mm256_srli_epi32(S, 16), S, 0xAA);
}

// sc (q6k_scales's form: the signed scale in both int16 halves of each row's lane) * (u . x), u's
// nibbles summed apart (30,480 at most each) and the high ones' times 16 folded into the scale
// (|16 sc| <= 512 fits int16).
X8_INLINE __m256i iq4xs_sdot(const __m256i (&W)[16], const int8_t* x, __m256i sc) {
  return _mm256_add_epi32(_mm256_madd_epi16(sum8_16(W, x), sc),
                          _mm256_madd_epi16(sum8_16(W + 8, x), _mm256_slli_epi16(sc, 4)));
}

X8_INLINE __m256i q6k_sdot(const __m256i (&W)[8], const int8_t* x, __m256i s_lo, __m256i s_hi) {
  const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(mb(W[0], x), mb(W[1], x + 4)), s_lo),
                                      _mm256_madd_epi16(_mm256_add_epi16(mb(W[2], x + 8), mb(W[3], x + 12)), s_lo));
  const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(mb(W[4], x + 16), mb(W[5], x + 20)), s_hi),
                                      _mm256_madd_epi16(_mm256_add_epi16(mb(W[6], x + 24), mb(W[7], x + 28)), s_hi));
  return _mm256_add_epi32(lo, hi);
}

#include "models/llama/qgemm_x8_kernels.inc"
#undef X8_INLINE
#undef X8_TARGET
}  // namespace avx2

}  // namespace

bool x8_cpu_supported() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

bool x8_active() { return x8_cpu_supported() && kernel_isa() != KernelIsa::kScalar; }

namespace {
const char* x8_zmm_env() {
  static const char* e = std::getenv("SPECLAB_X8_ZMM");
  return e;
}
}  // namespace

bool x8_zmm_enabled() {
  const char* e = x8_zmm_env();
  return !(e && std::string(e) == "0");
}

bool cpu_splits_512_bit_ops() {
  static const bool split = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
    if (!amd || !__get_cpuid(1, &a, &b, &c, &d)) return false;
    unsigned family = (a >> 8) & 0xfu;
    if (family == 0xfu) family += (a >> 20) & 0xffu;
    // Family 0x19 is Zen 3 and Zen 4; only Zen 4 has AVX-512 (Zen 5, family 0x1a, runs it at full width).
    return family == 0x19u && __builtin_cpu_supports("avx512f");
  }();
  return split;
}

bool x8_zmm_for(uint32_t type_id, int64_t n) {
  if (!x8_zmm_enabled()) return false;
  // IQ4_NL, Q2_K, Q3_K and IQ4_XS have no 512-bit kernels (they were written on a CPU without AVX-512,
  // where 512-bit code could not be tested).
  const GgmlType ty = static_cast<GgmlType>(type_id);
  if (ty == GgmlType::IQ4_NL || ty == GgmlType::Q2_K || ty == GgmlType::Q3_K || ty == GgmlType::IQ4_XS) return false;
  const char* e = x8_zmm_env();
  if (e && std::string(e) == "1") return true;
  // Zen 4, kernel_bench --shapes qwen1.5b --best, two alternated rounds per n, us (512 vs 256 bits):
  // Q4_K gate_up n = 1 292-384 vs 366-411, n = 3 619-662 vs 435-506, n = 4 791-794 vs 513-684,
  // n = 6 830-832 vs 691-774, n = 8 880-914 vs 980-1053; Q6_K lm_head n = 2 7661-8127 vs
  // 6396-6831, n = 4 10586-10736 vs 8088-8534. Q4_1 and Q8_0 ran as fast or faster on 512 bits at
  // every n (SmolLM2 shapes).
  const GgmlType t = static_cast<GgmlType>(type_id);
  const bool k_quant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
  return !(k_quant && n >= 2 && n <= 6 && cpu_splits_512_bit_ops());
}

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
  // Groups are independent: spread over the compute threads (a model's load repacks every matrix).
  parallel_chunks(groups, std::max<int64_t>(1, (int64_t(1) << 16) / (nb * bb)), compute_threads(),
                  [&](int64_t g0, int64_t g1) {
                    RowBlock rows[8];
                    for (int64_t g = g0; g < g1; ++g)
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
                  });
}

void gemm_x8_int8_q(const uint8_t* wx8, uint32_t type_id, const QuantizedRows& xq, const float* bias, float* y,
                    int64_t out) {
  const GgmlType t = checked_type(type_id);
  if (!x8_active())
    throw Error(ErrorKind::kUnsupported, "repacked int8 matmul needs AVX2 (or AVX-512 VNNI), and the kernel ISA in effect is " +
                                             std::string(kernel_isa_name(kernel_isa())));
  if (xq.block != packed::block_elems(t) || xq.in % xq.block != 0)
    throw Error(ErrorKind::kBadInput, "activations quantized in blocks of " + std::to_string(xq.block) +
                                          " do not fit " + ggml_type_name(type_id) + " weights");
  const int64_t nb = xq.in / xq.block, group_bytes = nb * x8_block_bytes(t);
  const int64_t groups = (out + kX8Rows - 1) / kX8Rows;
  const bool zmm = kernel_isa() == KernelIsa::kAvx512Vnni && x8_zmm_for(type_id, xq.n);
  const RangeFn fn = kernel_isa() != KernelIsa::kAvx512Vnni ? avx2::pick(t) : zmm ? vnni_zmm::pick(t) : vnni::pick(t);
  // Chunks of 16 to 256 KiB of weights, about 4 per thread: long contiguous runs keep the
  // hardware prefetchers streaming (2 KiB runs reached half the memory bandwidth of 256 KiB runs
  // here), several per thread balance the load. (8 per thread decoded SmolLM2 15-20% slower on
  // the Zen 5, 2 per thread no differently from 4: speclab bench, three alternated rounds.)
  const int threads = std::max(1, compute_threads());
  const int64_t chunk_bytes = std::clamp<int64_t>(groups * group_bytes / (4 * threads), int64_t(1) << 14,
                                                  int64_t(1) << 18);
  int64_t grain = std::max<int64_t>(1, chunk_bytes / group_bytes);
  // The 512-bit kernels take groups in pairs and leave a range's odd last group to the 256-bit
  // ones (half the work per instruction): an even grain gives them none but the matrix's own.
  // (SmolLM2's down projection, 72 groups, ran in chunks of 9, one group in 9 on 256 bits:
  // kernel_bench --type Q4_1, two alternated rounds, down at n = 5 19.1-19.2 -> 16.8-17.7 us.)
  if (zmm && grain > 1) grain &= ~int64_t(1);
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
