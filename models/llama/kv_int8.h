// The int8 K/V cache format (kv_dtype: int8, KvGeometry): one kv head of one token is stored as
// head_dim int8 values q followed by kKvInt8ScaleBytes bytes holding its float32 scale s (native
// byte order); the head stands for the values q * s. Symmetric per-token, per-head absmax
// quantization, as llama.cpp's q8_0 cache with one block per head. Written by both backends
// (cpu_backend.cpp, aten_backend.cpp) and read by attend_rows() (attention_cpu.h). Torch-free.
#pragma once

#include <cstdint>

#include "framework/core/kv_geometry.h"

namespace speclab::cpu {

// Bytes after an int8 head's head_dim values that hold its float32 scale.
constexpr int64_t kKvInt8ScaleBytes = KvGeometry::kInt8ScaleBytes;
static_assert(kKvInt8ScaleBytes == sizeof(float), "the scale is one float32");

// One kv head's D values x as stored: out[0..D) = q with q[d] = round-to-nearest-even(x[d] * 127 /
// max|x|), clamped to [-127, 127], and out[D..D+4) the float32 scale s = max|x| / 127 (0 when x
// is all zero: q = 0). Non-finite input is not carried: a NaN element is skipped by the max and
// stored as -127 (a float16 or float32 cache would keep it). x: [D]; out: [D + kKvInt8ScaleBytes]
// bytes.
void quantize_kv_head(const float* x, int64_t D, int8_t* out);

// The values an int8 head stands for: x[d] = q[d] * s. in: [D + kKvInt8ScaleBytes]; x: [D].
void dequantize_kv_head(const int8_t* in, int64_t D, float* x);

}  // namespace speclab::cpu
