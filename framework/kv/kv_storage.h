// Where a KV manager allocates a pool's K/V storage: the device and dtype of the model the pool
// serves (KvGeometry::device, ::dtype), so that a model reads and writes its cache in place.
#pragma once

#include <ATen/ATen.h>

#include "framework/core/dtype.h"
#include "framework/core/kv_geometry.h"

namespace speclab {

// Tensor options for g's storage: float32, bfloat16 or float16 on "cpu" or "cuda[:N]".
inline at::TensorOptions kv_storage_options(const KvGeometry& g) {
  return at::TensorOptions().dtype(dtype_from_name(g.dtype)).device(at::Device(g.device));
}

}  // namespace speclab
