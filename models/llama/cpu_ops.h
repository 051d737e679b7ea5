// Row-wise float32 operations for the CPU backend (cpu_backend.cpp): RMSNorm, RoPE, SwiGLU
// and the attention inner loops, on raw row-major buffers. One decode step runs ~40 small
// operations per layer; as libtorch ops each costs 5-10 µs of dispatch, more than the math, so
// the CPU path calls these instead. AVX2 where the CPU has it (dot/axpy), scalar otherwise.
#pragma once

#include <cstdint>

namespace speclab::cpu {

// y[n, d] = x[n, d] / sqrt(mean(x_row^2) + eps) * w[d]  (y may alias x)
void rms_norm_rows(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps);

// In place on one head vector x[head_dim] (HF rotate_half layout): with half = head_dim / 2,
// x1 = x[:half], x2 = x[half:]: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin; cos/sin: [half].
void rope_head(float* x, const float* cos, const float* sin, int64_t head_dim);

// out[i] = silu(gate[i]) * up[i] for i < n; silu(g) = g / (1 + exp(-g)). With kernel_isa() >=
// AVX2 the exponential is simd_exp.h's (about 2 ulp, 8 lanes at a time), else std::exp. Either
// way element i's result depends only on gate[i] and up[i] (not on n or where the range starts).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// sum_i a[i] b[i]
float dot(const float* a, const float* b, int64_t n);
// y[i] += alpha x[i]
void axpy(float alpha, const float* x, float* y, int64_t n);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// IEEE binary16 rows, for a float16 K/V cache. store_f16: dst[i] = src[i] rounded to nearest
// even (overflow to inf); load_f16: dst[i] = src[i], exact. F16C when kernel_isa() (gemv.h) is
// AVX2 or better, else models/loaders/dequant.h's scalar conversions: the same bits either way
// (NaN payloads aside).
void store_f16(const float* src, uint16_t* dst, int64_t n);
void load_f16(const uint16_t* src, float* dst, int64_t n);

}  // namespace speclab::cpu
