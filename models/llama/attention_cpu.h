// attend_rows() — causal attention for n query rows over a paged float32, float16 or int8 KV cache,
// on the CPU.
//
// One call computes softmax(q k^T * scale) v for every query row and head of one layer, reading
// each K/V cache row once per call for all the query heads that share it (grouped-query
// attention: heads h with h / G == g, G = n_heads / n_kv_heads, read kv head g) and for all n
// rows. Softmax is computed online (running max and sum, flash-attention style), so no
// [ctx] score buffer is needed. The context is cut into splits of kAttentionSplit keys at fixed
// positions (0, kAttentionSplit, 2 kAttentionSplit, ...) and the splits are spread over
// compute_threads() threads (framework/core/thread_pool.h), so a single row over a long context
// uses every thread (split-K, "flash decoding"); the per-split partial results (max, sum,
// weighted values) are merged in split order. With fewer than two splits per thread the work may
// also be cut by kv-head group and row block, so that one split does not keep the others
// waiting. Within a split, keys go in tiles of kAttentionTile: a tile's K and V rows of one kv
// head stay in L1 while every query of the group, in every row, uses them.
//
// Bit-identity (speculative decoding's losslessness depends on it): the output of row i depends
// only on q[i], its own limit and the cache, never on n, the other rows or the thread count:
// every tile, split and merge boundary is a fixed key position. Row i of an n-row call is
// therefore bit-identical to a 1-row call with the same limit. Arithmetic is AVX-512 when
// kernel_isa() (models/llama/gemv.h) allows it and head_dim is a multiple of 16, else AVX2+FMA
// when it allows that and head_dim is a multiple of 8, else scalar; the paths agree to float
// rounding, not bit for bit (each is bit-identical across n, rows and threads). Over an int8
// cache under kAvx512Vnni with head_dim 64, 128, 192 or 256, scores and values are integer dot
// products instead (attention_int8_vnni.h): the queries are rounded to int8 as the cache is, so
// that flavour agrees with the others to the queries' rounding.
//
// Must not be called from inside a parallel_chunks() job (the pool runs one job at a time).
#pragma once

#include <cstdint>

#include "models/llama/kv_int8.h"

namespace speclab::cpu {

// Keys per split (the unit of work per thread and of the partial-result merge) and per tile
// (the unit of the online-softmax update). Fixed: changing them changes results in the last bits.
constexpr int64_t kAttentionSplit = 256;
constexpr int64_t kAttentionTile = 32;

// What a K/V cache stores per element (framework/core/kv_geometry.h names them float32, float16, int8).
enum class KvElement { kFloat32, kFloat16, kInt8 };

struct AttentionArgs {
  // q: [n, q_stride] float32, already RoPE'd; head h of row i is q + i * q_stride + h * head_dim
  // (q_stride >= n_heads * head_dim, e.g. the fused qkv row width).
  const float* q = nullptr;
  int64_t q_stride = 0;
  int64_t n = 0;           // query rows, >= 1
  int64_t n_heads = 0;     // H, a multiple of n_kv_heads
  int64_t n_kv_heads = 0;  // KVH
  int64_t head_dim = 0;    // D
  // One layer's caches: [n_slots, n_kv_heads, hs] elements of type `kv`; key j of kv head g is at
  // k + (slot_of(j) * n_kv_heads + g) * hs elements.
  //  - kFloat32 (hs = head_dim);
  //  - kFloat16: IEEE binary16 (uint16_t), hs = head_dim, widened exactly to float32 as read, so a
  //    float16 cache gives the same bits as a float32 cache holding the same values;
  //  - kInt8: hs = head_dim + kKvInt8ScaleBytes: the head's head_dim int8 values q, then its
  //    float32 scale s (kv_int8.h); the head's values are q * s. A score is
  //    dot(q_row, q_key) * (s_key * scale) and a softmax weight p_j enters the values as
  //    p_j * s_j times the integers: per key, never per row, so row bit-identity holds as for the
  //    float caches. The scalar flavour dequantizes the tile to float32 first.
  const void* k = nullptr;
  const void* v = nullptr;
  KvElement kv = KvElement::kFloat32;
  // slot_of(j) = slots ? slots[j] : slot_base + j, for j < max(limits). slots: [ctx] or nullptr.
  const int64_t* slots = nullptr;
  int64_t slot_base = 0;
  // limits: [n]; row i attends keys j < limits[i]; each limit >= 1.
  const int64_t* limits = nullptr;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
  // out: [n, n_heads * head_dim]; head h of row i at out + i * n_heads * head_dim + h * head_dim.
  float* out = nullptr;
};

// Computes out (see AttentionArgs). Throws Error(kInternal) on inconsistent shapes or a limit < 1.
void attend_rows(const AttentionArgs& args);

// limits[i] for the model's causal rule: a single row (decode) sees all ctx keys; with n > 1
// rows (verification, prefill) row i sees keys j < min(ctx, positions[i] + 1).
// positions: [n]; limits: [n].
inline void causal_limits(const int64_t* positions, int64_t n, int64_t ctx, int64_t* limits) {
  for (int64_t i = 0; i < n; ++i) limits[i] = n > 1 ? (positions[i] + 1 < ctx ? positions[i] + 1 : ctx) : ctx;
}

}  // namespace speclab::cpu
