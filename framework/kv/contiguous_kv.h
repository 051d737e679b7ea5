// ContiguousKv — the simplest KV store: one sequence, slots == positions.
//
// Used by the naive (no-cache) decoding mode as scratch space and by unit tests. The paged
// KvCacheManager (kv_cache_manager.h) produces the same KvView shape, so models never know
// which one they are reading.
#pragma once

#include <ATen/core/Tensor.h>

#include "framework/core/kv_view.h"
#include "framework/core/kv_geometry.h"

namespace speclab {

class ContiguousKv {
 public:
  // Allocates K and V of kv_storage_shape(geometry, capacity) in the geometry's dtype, zeroed.
  ContiguousKv(const KvGeometry& geometry, int64_t capacity);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  // View for appending `n_new` tokens at positions [length, length + n_new).
  KvView append_view(int64_t n_new) const;
  // Marks n tokens written by the last forward as part of the sequence.
  void commit(int64_t n);
  // Rollback to new_len <= length.
  void truncate(int64_t new_len);

 private:
  at::Tensor k_, v_;  // [layers, capacity, kv_heads, head_dim]
  int64_t capacity_;
  int64_t length_ = 0;
};

}  // namespace speclab
