// Where a KV manager allocates a pool's K/V storage: the device and dtype of the model the pool
// serves (KvGeometry::device, ::dtype), so that a model reads and writes its cache in place.
#pragma once

#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/core/kv_geometry.h"

namespace speclab {

// Tensor options for g's storage: float32, bfloat16, float16 or int8 on "cpu" or "cuda[:N]".
inline at::TensorOptions kv_storage_options(const KvGeometry& g) {
  return at::TensorOptions().dtype(kv_dtype_from_name(g.dtype)).device(at::Device(g.device));
}

// The shape of one of g's K or V storage tensors over n_slots slots:
// [n_layers, n_slots, n_kv_heads, stored_head_dim] (an int8 head carries its scale after its values).
inline std::vector<int64_t> kv_storage_shape(const KvGeometry& g, int64_t n_slots) {
  return {g.n_layers, n_slots, g.n_kv_heads, g.stored_head_dim()};
}

}  // namespace speclab
