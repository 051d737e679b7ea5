// The dtype names of ModelSource::dtype, ModelConfig::dtype and KvGeometry::dtype as libtorch
// scalar types: the one mapping the model's placement and the KV manager's storage share.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "framework/core/error.h"

namespace speclab {

// "float32" | "bfloat16" | "float16" -> the scalar type; anything else throws Error(kConfig)
// naming the field model.dtype.
inline at::ScalarType dtype_from_name(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw Error(ErrorKind::kConfig, "expected float32, bfloat16 or float16, found '" + name + "'", "model", "dtype");
}

}  // namespace speclab
