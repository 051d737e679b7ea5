// Matrix products of packed ggml weights with int8-quantized activations (llama.cpp's scheme:
// Q8_0/Q8_1-style activation blocks for the 32-element weight types, Q8_K-style 256-element
// blocks for the K-quants and IQ4_XS; the code is our own).
//
// Each activation row is quantized block by block: x[i] ~= dx * q[i] with q in [-127, 127],
// dx = max|x| / 127 over the block (float32, not rounded to f16), q = x * (1 / dx) rounded to
// the nearest integer (ties to even). A weight block times an activation block is then an exact integer dot product (int16
// pair sums, int32 totals: none can overflow for these block layouts), scaled once per block by
// the float32 product of the two scales. Weight offsets and mins (Q4_1's and Q5_1's m, Q2_K's,
// Q4_K's and Q5_K's dmin * min, Q3_K's and Q6_K's fixed offsets) multiply the activation block's
// integer sums, which are kept with the block.
//
// Error added against float32 activations: each activation element moves by at most dx / 2,
// so with the weights w decoded by dequantize(), |y_int8 - y_f32| <= sum over blocks b of
// (dx_b / 2) * sum_{i in b} |w_i| (exactly: sum |w_i| |x_i - dx q_i|), plus float32 summation
// rounding (about 1e-6 relative to sum |w_i x_i|); test_qgemm checks this bound. A 32-block
// shares one dx; a K-quant or IQ4_XS block shares one dx over 256 elements (a coarser grid, as llama.cpp's
// Q8_K). Results therefore differ from the float32-activation kernels (gemv.h): greedy tokens
// may change on near ties, but decode and verification still agree bit for bit (below).
//
// ISA: an AVX2 kernel (vpmaddubsw with the sign trick, vpmaddwd, 8-lane float accumulators) and
// a scalar one; kernel_isa() (models/llama/gemv.h) picks. AVX-512 CPUs without VNNI run the AVX2
// kernels. Models run qgemm_x8.h's kernels on weights repacked in groups of 8 rows instead
// wherever the ISA is AVX2 or better (same integers, another float summation order, 2 to 4 times
// faster); these remain the scalar path, the kernels of matrices that were not repacked, and
// the reference the repacked ones are tested against.
//
// Row identity: each (weight row, activation row) output is accumulated block by block in the
// same order whatever the number of rows n and however rows are grouped or split over threads,
// so on a given ISA row i of an n-row call is bit-identical to a 1-row call on x[i], for any n.
// The AVX2 and scalar kernels differ only in float summation order.
//
// Memory: for n rows each weight row is read from memory once and applied to up to 8 activation
// rows per pass from registers; further passes read it again from L1.
#pragma once

#include <cstdint>
#include <vector>

namespace speclab {

// Weight types the int8 kernels take: is_int8_packable's (models/loaders/dequant.h): Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, IQ4_NL (32-element blocks), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
// (256-element super-blocks).
bool int8_gemm_supports(uint32_t type_id);

// Activation rows quantized for one weight type's block size. Reusable: quantize_activations
// only grows the buffers.
struct QuantizedRows {
  int64_t n = 0;           // rows
  int64_t in = 0;          // elements per row
  int64_t block = 32;      // 32 (Q8_0-style) or 256 (Q8_K-style)
  std::vector<int8_t> q;   // [n, in]
  std::vector<float> d;    // [n, in / block] scale of each block
  std::vector<float> s;    // [n, in / block] block == 32: d * sum(q) of each block (Q4_1's offset term)
  std::vector<int16_t> bsum16;  // [n, in / 16] block == 256: sum of q over each 16 elements
  std::vector<int16_t> bsum32;  // [n, in / 32] block == 256: sum of q over each 32 elements (qgemm_x8.h)
};

// Quantizes x: [n, in] for weights of `type_id` (in a multiple of its block size). Throws
// Error(kUnsupported) for a type int8_gemm_supports() rejects, Error(kBadInput) for an `in`
// that is not a multiple of the block size. Row i's result depends only on x[i].
void quantize_activations(uint32_t type_id, const float* x, int64_t n, int64_t in, QuantizedRows& out);

// y = x W^T (+ b) with pre-quantized activations (one quantization serves every matrix that
// reads the same x and has the same block size, e.g. q/k/v or gate/up). w: [out rows of
// ggml_row_bytes(type, in) bytes]; xq: quantized for `type_id`'s block size; bias: [out] or
// nullptr; y: [xq.n, out]. Rows are split over compute_threads(). Throws Error(kUnsupported)
// for another type, Error(kBadInput) when xq does not match (in, block).
void gemm_packed_int8_q(const uint8_t* w, uint32_t type_id, const QuantizedRows& xq, const float* bias, float* y,
                        int64_t out);

// Convenience: quantizes x: [n, in] into a thread-local buffer, then gemm_packed_int8_q.
void gemm_packed_int8(const uint8_t* w, uint32_t type_id, const float* x, const float* bias, float* y, int64_t n,
                      int64_t out, int64_t in);

// The scalar reference (one thread, no SIMD, float accumulation in block order): the integer
// block sums equal the kernels' exactly, so kernels differ from it only by float summation order.
void gemm_packed_int8_reference(const uint8_t* w, uint32_t type_id, const QuantizedRows& xq, const float* bias,
                                float* y, int64_t out);

}  // namespace speclab
