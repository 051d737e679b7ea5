// Where a KV manager allocates a pool's K/V storage: the device and dtype of the model the pool
// serves (KvGeometry::device, ::dtype), so that a model reads and writes its cache in place.
#pragma once

#include <ATen/ATen.h>

#include "framework/core/error.h"
#include "framework/core/kv_geometry.h"

namespace speclab {

// Tensor options for g's storage: float32, bfloat16 or float16 on "cpu" or "cuda[:N]".
inline at::TensorOptions kv_storage_options(const KvGeometry& g) {
  at::ScalarType t = at::kFloat;
  if (g.dtype == "bfloat16") t = at::kBFloat16;
  else if (g.dtype == "float16") t = at::kHalf;
  else SPECLAB_CHECK(g.dtype == "float32", "unknown KV dtype '" + g.dtype + "'");
  return at::TensorOptions().dtype(t).device(at::Device(g.device));
}

}  // namespace speclab
