// The integer flavour of attend_rows() (attention_cpu.h) over an int8 K/V cache, for AVX-512
// VNNI: scores and weighted values as integer dot products instead of float32 FMAs.
//
// Scores: each query head is quantized as a cache head is (quantize_kv_heads: D int8 values q8
// and one scale sq, round to nearest even against max|q| / 127), which is what llama.cpp does to
// a query over its q8_0 cache (the query is converted to the cache's dot type). A score is then
// s_j = float(dot(q8, k8_j)) * (sq * s_kj * scale), the integer dot exact (vpdpbusd over the
// key bytes + 128, less 128 sum(q8)). Softmax weights: per (query, tile), w_j = p_j * s_vj
// (p_j = exp(s_j - m), s_vj the key's V scale) is rounded to an int16 u_j = round(w_j * 32767 /
// W) against the largest weight W of the tile (kInt8VnniTile keys), and the tile adds W / 32767 * sum_j u_j v8_j to the
// float accumulator (vpdpwssd; the integer sum is exact). The running sum l takes the p_j
// themselves, as in the float flavours. Against the float64 softmax of the cache's values the
// result moves by q's rounding (up to 1/254 of max|q| per element, as llama.cpp's) and by the
// weights' (up to 1/65534 of the tile's largest): see tests/unit/test_attention_cpu.cpp.
//
// Bit-identity (attention_cpu.h): integer sums are exact whatever order or grouping computes
// them, and every float step of a query is a function of its own data and key count (keys past
// a row's count are masked out, even where their scales are not finite), so a row's result is
// the same alone, among n rows and on any thread count. It differs from the float
// flavours' (another arithmetic), as they differ from each other.
//
// Internal to attend_rows(): the tile loop, splits and merge stay attention_cpu.cpp's.
#pragma once

#include <cstdint>
#include <vector>

#include "models/llama/attention_cpu.h"

namespace speclab::cpu {

// Whether attend_rows() runs this flavour: an int8 cache, kernel_isa() >= kAvx512Vnni and a
// head_dim that is a multiple of 64, at most 256.
bool int8_vnni_attention(KvElement kv, int64_t head_dim);

namespace detail {

class TilePrefetch;  // tile_prefetch.h

// Keys per tile of this flavour (attend_rows() hands it tiles of this size, read in place): a
// multiple of 16, dividing kAttentionSplit. Fixed: changing it changes results in the last bits.
constexpr int64_t kInt8VnniTile = 64;
static_assert(kAttentionSplit % kInt8VnniTile == 0, "tiles must not straddle splits");

// A query head's partial result per split: [m, l, acc[D]] (attention_cpu.cpp's merge reads it).
inline int64_t partial_stride(int64_t D) { return D + 2; }

// The query heads of an attend_rows() call, quantized for this flavour.
struct Int8Queries {
  std::vector<int8_t> q8;     // [n * H, D + kKvInt8ScaleBytes]: quantize_kv_heads' layout, head (i, h) at i * H + h
  std::vector<int32_t> qsum;  // [n * H]: the sum of each head's D int8 values
};

// Fills qq for a.q (quantize_kv_heads over each row's n_heads heads).
void quantize_queries(const AttentionArgs& a, Int8Queries& qq);

// The online-softmax update of one tile for the query heads of rows [r0, r1) and kv heads
// [g0, g1): nk_all <= kInt8VnniTile keys from key t0, read in place: krow[j], vrow[j] point at
// key t0 + j's K and V cache rows ([n_kv_heads, D + kKvInt8ScaleBytes] bytes, int8 heads with
// their scales). Each row is read once per kv head (into the transposed and paired layouts). Row
// i uses its first
// min(nk_all, limits[i] - t0) keys. part: [n * H, partial_stride(D)] this split's partials,
// (i, h) at row i * H + h. pf (or null): the next tile's prefetch, stepped
// int8_vnni_prefetch_steps(head_dim) times per kv head.
void attend_tile_int8_vnni(const AttentionArgs& a, const Int8Queries& qq, int64_t r0, int64_t r1, int64_t g0,
                           int64_t g1, int64_t t0, int64_t nk_all, const int8_t* const* krow,
                           const int8_t* const* vrow, float* part, TilePrefetch* pf);

// How many times attend_tile_int8_vnni() steps its TilePrefetch per kv head of a tile: once per
// group of 16 keys it transposes (D / 64 chunks each) and once per 8 value pairs.
constexpr int64_t int8_vnni_prefetch_steps(int64_t head_dim) {
  return head_dim / 64 * (kInt8VnniTile / 16) + kInt8VnniTile / 16;
}

}  // namespace detail

}  // namespace speclab::cpu
