// Streaming matrix products for decode and verification steps.
//
// A decode step multiplies every weight matrix by one activation row, and a speculative
// verification pass by k + 1 <= 17 rows: both are bound by reading the weights once. BLAS sgemm
// packs (copies) the weight matrix first, tripling that traffic, and the OpenBLAS build on these
// machines falls back to generic (PRESCOTT) kernels. These kernels stream each weight row from
// memory once (AVX2/FMA, scalar fallback), reuse it from L1 for every activation row, and split
// the rows over compute_threads() threads (framework/core/thread_pool.h, not libgomp). Results equal a float32 dot product up to the
// summation order.
#pragma once

#include <cstdint>

namespace speclab {

// Row bit-identity bound: for n <= kMaxRowExact (decode, and verification of up to 31 drafted
// tokens), row i of an n-row call of any kernel here or in qgemm.h is bit-identical to a 1-row
// call on x[i] on the same ISA. Larger n (prefill) may take faster paths that sum differently.
constexpr int64_t kMaxRowExact = 32;

// y = x W^T (+ b). w: [out, in] row-major float32; x: [n, in] row-major; bias: [out] or nullptr;
// y: [n, out] row-major. Any n >= 1. Each group of 4 weight rows is read from memory once and
// applied to 3 activation rows at a time from L1/L2 (12 accumulators), which also makes prefill
// 3x faster than this machine's OpenBLAS sgemm (generic PRESCOTT kernels). Every output is an
// 8-lane FMA sum; only for n > kMaxRowExact does AVX-512 use its 16-lane kernels.
void gemm_small_f32(const float* w, const float* x, const float* bias, float* y, int64_t n, int64_t out, int64_t in);

// Instruction sets the kernels dispatch on. By default the best the CPU has; tests and
// benchmarks lower the cap to run every path this CPU can run. Int8 activations on repacked
// weights (qgemm_x8.h) run AVX2 kernels from kAvx2 up, vpdpbusd ones under kAvx512Vnni (same
// results); every other kernel runs under kAvx512Vnni as under kAvx512.
enum class KernelIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3 };
constexpr KernelIsa kKernelIsaMax = KernelIsa::kAvx512Vnni;  // the default cap
KernelIsa best_kernel_isa();            // the best this CPU supports (AVX2 needs FMA and F16C too)
KernelIsa kernel_isa();                 // the one in effect: min(best, cap)
void set_kernel_isa_cap(KernelIsa cap);  // process-wide; call between forward passes only
const char* kernel_isa_name(KernelIsa isa);

// Weight types gemm_small_packed and dequantize_packed_rows take: is_packable's (F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS).
bool gemm_packed_supports(uint32_t type_id);

// y = x W^T (+ b) with W kept as ggml blocks (layouts in models/loaders/dequant.h) and float32
// activations. w: [out rows of ggml_row_bytes(type, in) bytes]; x: [n, in]; bias: [out] or
// nullptr; y: [n, out]; in a multiple of the block size (32, F16 and BF16 included; 256 for the
// K-quants and IQ4_XS).
// With n <= kMaxRowExact and AVX2 (or AVX-512), each block is decoded in registers, 32 weights
// at a time, and applied to up to 12 (AVX-512: 8) activation rows at once; more rows take further
// passes over the same weight rows from L1. Each output is summed in an order that depends only
// on its own row, so row i of an n-row call is bit-identical to a 1-row call on x[i]. Q5_0, Q5_1,
// IQ4_NL, the K-quants, IQ4_XS, F16 and BF16 have AVX2 kernels only (AVX-512 CPUs run them). Otherwise (prefill, or the scalar ISA)
// each tile of 8 weight rows is decoded once into an L1-resident float32 buffer and applied to all
// n rows with the float32 kernels above. Either way the weights cross the memory bus in their
// packed size (Q4_1: 5 bits per weight). The decoded values are exactly dequantize()'s, so results
// equal gemm_small_f32 on the dequantized matrix up to the summation order.
// Throws Error(kUnsupported) for another type.
void gemm_small_packed(const uint8_t* w, uint32_t type, const float* x, const float* bias, float* y, int64_t n,
                       int64_t out, int64_t in);

// Decodes rows rows[0..n) of a packed [*, in] matrix into dst: [n, in] (an embedding lookup).
void dequantize_packed_rows(const uint8_t* w, uint32_t type, const int64_t* rows, int64_t n, int64_t in, float* dst);

// n == 1 convenience: y[out] = W x (+ b).
inline void gemv_f32(const float* w, const float* x, const float* bias, float* y, int64_t out, int64_t in) {
  gemm_small_f32(w, x, bias, y, 1, out, in);
}

}  // namespace speclab
