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

// `heads` consecutive kv heads of D values as stored, each on its own: for head h,
// out[h][0..D) = q with q[d] = round-to-nearest-even(x[h][d] * 127 / max|x[h]|), clamped to
// [-127, 127], and out[h][D..D+4) the float32 scale s = max|x[h]| / 127 (0 when the head is all
// zero: q = 0). Non-finite input is not carried: a NaN element is skipped by the max and stored
// as -127 (a float16 or float32 cache would keep it). The same bytes on every ISA (AVX-512 when
// kernel_isa() allows it and D % 16 == 0, else scalar).
// x: [heads, D] float32; out: [heads, D + kKvInt8ScaleBytes] bytes.
void quantize_kv_heads(const float* x, int64_t heads, int64_t D, int8_t* out);

// The values int8 heads stand for: x[h][d] = q[h][d] * s[h].
// in: [heads, D + kKvInt8ScaleBytes] bytes; x: [heads, D] float32.
void dequantize_kv_heads(const int8_t* in, int64_t heads, int64_t D, float* x);

}  // namespace speclab::cpu
