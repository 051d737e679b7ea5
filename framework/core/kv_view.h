// KvView — what a model sees of the KV cache for one forward call.
//
// The cache storage is a pair of tensors per model, indexed by *slot*:
//   k_cache, v_cache: [n_layers, n_slots, n_kv_heads, stored_head_dim] of the pool's dtype
//   (KvGeometry: float32, bfloat16 or float16 with stored_head_dim = head_dim; int8 with
//   head_dim + 4, each head's values followed by its float32 scale)
// A slot is where one token's K/V live (for a paged cache: block * block_size + offset). The
// view of one sequence for one call says:
//   write_slots: [n_new] int64   slots for the n_new tokens of this call, in order
//   read_slots:  [ctx_len] int64 slots of positions 0..ctx_len-1 (ctx_len includes the new
//                                tokens), in position order; undefined when read_base >= 0
//   read_base:   when >= 0, the slots of positions 0..ctx_len-1 are the contiguous range
//                [read_base, read_base + ctx_len) and the model reads a narrow() instead of
//                gathering.
// The model writes K/V of the new tokens to write_slots of each layer it runs, then attends
// over read_slots. It keeps no state between calls (STYLE.md §2); the KV manager owns slots.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace speclab {

struct KvView {
  at::Tensor k_cache;      // [n_layers, n_slots, n_kv_heads, stored_head_dim]
  at::Tensor v_cache;      // [n_layers, n_slots, n_kv_heads, stored_head_dim]
  at::Tensor write_slots;  // [n_new] int64
  at::Tensor read_slots;   // [ctx_len] int64 (undefined when read_base >= 0)
  int64_t read_base = -1;  // >= 0 when read_slots is a contiguous range
  int64_t ctx_len = 0;     // == read_slots.size(0)
};

}  // namespace speclab
