// The dtype names of ModelSource::dtype, ModelConfig::dtype and KvGeometry::dtype as libtorch
// scalar types: the one mapping the model's placement and the KV manager's storage share.
#pragma once

#include <c10/core/ScalarType.h>

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

// The K/V storage's scalar type for KvGeometry::dtype: dtype_from_name's, and int8 (at::kChar,
// the quantized cache of kv_geometry.h) besides; anything else throws Error(kConfig) naming
// model.kv_dtype. These are the storage types a resolved placement can hold (bfloat16: a CUDA
// or CPU model computing in bfloat16 with kv_dtype auto); the values a user may write for
// kv_dtype are ModelSource::validate's (auto, float32, float16, int8).
inline at::ScalarType kv_dtype_from_name(const std::string& name) {
  if (name == "int8") return at::kChar;
  if (name == "float32" || name == "bfloat16" || name == "float16") return dtype_from_name(name);
  throw Error(ErrorKind::kConfig, "expected float32, bfloat16, float16 or int8, found '" + name + "'", "model",
              "kv_dtype");
}

}  // namespace speclab
