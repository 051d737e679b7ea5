// Streaming matrix products for decode and verification steps.
//
// A decode step multiplies every weight matrix by one activation row, and a speculative
// verification pass by k + 1 <= 17 rows: both are bound by reading the weights once. BLAS sgemm
// packs (copies) the weight matrix first, tripling that traffic, and the OpenBLAS build on these
// machines falls back to generic (PRESCOTT) kernels. These kernels stream each weight row from
// memory once (AVX2/FMA, scalar fallback), reuse it from L1 for every activation row, and split
// the rows over libtorch's intra-op threads. Results equal a float32 dot product up to the
// summation order.
#pragma once

#include <cstdint>

namespace speclab {

// y = x W^T (+ b). w: [out, in] row-major float32; x: [n, in] row-major; bias: [out] or nullptr;
// y: [n, out] row-major. Any n >= 1. Each group of 4 weight rows is read from memory once and
// applied to 3 activation rows at a time from L1/L2 (12 accumulators), which also makes prefill
// 3x faster than this machine's OpenBLAS sgemm (generic PRESCOTT kernels).
void gemm_small_f32(const float* w, const float* x, const float* bias, float* y, int64_t n, int64_t out, int64_t in);

// n == 1 convenience: y[out] = W x (+ b).
inline void gemv_f32(const float* w, const float* x, const float* bias, float* y, int64_t out, int64_t in) {
  gemm_small_f32(w, x, bias, y, 1, out, in);
}

}  // namespace speclab
