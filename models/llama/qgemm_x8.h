// Int8-activation matrix products over weights repacked in groups of 8 rows: the kernels every
// CPU with AVX2 runs for int8 activations. Two sets over one layout (qgemm_x8_kernels.inc):
// AVX-512 VNNI's vpdpbusd (4 unsigned-by-signed byte products summed into an int32 lane), and
// AVX2's vpmaddubsw (2 products into an int16 lane, summed in int16 while no sum can overflow,
// then vpmaddwd). Both compute the same integers and share the float steps, so their outputs are
// equal bit for bit (test_qgemm checks it where a CPU has both).
//
// Why a second layout: in ggml's row-major blocks (qgemm.h) one weight row meets one activation
// row in a horizontal dot product, so every activation row costs 3 AVX2 operations per 32 weights
// (vpmaddubsw, vpmaddwd, vpaddd) plus a horizontal sum. A verification pass of 5 to 17 rows is
// then bound by arithmetic, not by reading the weights. Repacked, each 32-bit lane of a 256-bit
// register holds 4 consecutive weights of one of 8 rows, so one vpdpbusd applies 4 activation
// bytes (broadcast) to 8 weight rows at once: 1 operation per 32 multiply-adds per activation
// row, no horizontal sums, and the unpacking of the weights is shared by every activation row.
// On AVX2 that is about 2 operations (vpmaddubsw, vpaddw; one vpmaddwd per 8 of them) where the
// row-major kernels need about 6 per 32 multiply-adds: SmolLM2's matrices run 2 to 4 times faster
// on one AVX2 core (build/kernel_bench).
//
// Layout: ceil(out / 8) groups of 8 consecutive rows (missing rows of the last group are zero),
// each group the row's blocks in order, each block holding its 8 rows' data interleaved. The
// bytes per group and block equal 8 ggml blocks (Q3_K, Q4_K, Q5_K: +32 bytes per 8 super-blocks
// of unpacked scales, IQ4_XS +16), so a decode step reads about the same amount of memory. Weights are stored as their
// unsigned integers u with w = s * u + m per block (or sub-block): the offsets (-8d, -16d,
// -128d for Q8_0, Q4_1's min, the K-quants' dmin * min, Q3_K's -4 and Q6_K's -32; IQ4_NL's and
// IQ4_XS's table values are looked up as u = value + 128, offset -128 d) multiply the activation block sums,
// exactly as qgemm.cpp does, so the integer sums equal gemm_packed_int8_reference's.
//
// Arithmetic and row identity: each output (weight row r, activation row j) is the lane r % 8 of
// a computation that sees only row r's weights and row j's activations, in block order, with the
// same operations whatever n is and however groups are split over threads. Row i of an n-row call
// is therefore bit-identical to a 1-row call on x[i], for any n. Against the row-major kernels
// only the float summation order differs (test_qgemm checks both).
#pragma once

#include <cstdint>

#include "models/llama/qgemm.h"

namespace speclab {

// Weight rows per repacked group: one 32-bit lane of a 256-bit register each.
constexpr int64_t kX8Rows = 8;

// Whether this CPU has what the kernels need (AVX2, FMA, F16C), whatever the ISA cap.
bool x8_cpu_supported();
// Whether gemm_x8_int8 runs now: x8_cpu_supported() and kernel_isa() is not kScalar. It runs
// the VNNI kernels under kAvx512Vnni, the AVX2 ones otherwise.
bool x8_active();
// Whether the VNNI kernels may run on 512-bit registers, two groups at once (qgemm_x8_zmm.inc;
// the same bits as the 256-bit ones): yes unless the environment sets SPECLAB_X8_ZMM=0 (read
// once), which keeps the 256-bit VNNI kernels for side-by-side timings.
bool x8_zmm_enabled();
// Whether a call of `n` activation rows on `type_id` weights runs the 512-bit kernels:
// x8_zmm_enabled(), except on a CPU that executes 512-bit instructions as two 256-bit halves
// (AMD Zen 4) for K-quant weights at 2 to 6 rows, where the 256-bit kernels ran faster
// (docs/performance.md, "On an AMD Zen 4"). SPECLAB_X8_ZMM=1 takes 512 bits everywhere else.
// IQ4_NL, Q2_K, Q3_K and IQ4_XS: never (no 512-bit kernels; the 256-bit VNNI ones run). Either way the bits are
// the same.
bool x8_zmm_for(uint32_t type_id, int64_t n);
// AMD family 0x19 with AVX-512 (Zen 4), whose AVX-512 units are 256 bits wide. Read once.
bool cpu_splits_512_bit_ops();

// Bytes of the repacked form of an [out, in] matrix of `type_id` (int8_gemm_supports types; `in`
// a multiple of the block size). Throws Error(kUnsupported) for another type.
int64_t x8_bytes(uint32_t type_id, int64_t out, int64_t in);

// Repacks w: [out rows of ggml_row_bytes(type, in) bytes] into dst: [x8_bytes(...)] bytes. Pure
// data movement (no SIMD): any CPU can repack. Groups are spread over compute_threads(), so it
// must not be called from inside a parallel_chunks() job.
void repack_x8(const uint8_t* w, uint32_t type_id, int64_t out, int64_t in, uint8_t* dst);

// y = x W^T (+ b) on repacked weights. wx8: repack_x8's output; xq: activations quantized for
// `type_id` (quantize_activations); bias: [out] or nullptr; y: [xq.n, out]. Groups are split over
// compute_threads(). Throws Error(kUnsupported) when !x8_active() or for another type,
// Error(kBadInput) when xq does not match the type's block size.
void gemm_x8_int8_q(const uint8_t* wx8, uint32_t type_id, const QuantizedRows& xq, const float* bias, float* y,
                    int64_t out);

// Convenience: quantizes x: [n, in] into a thread-local buffer, then gemm_x8_int8_q.
void gemm_x8_int8(const uint8_t* wx8, uint32_t type_id, const float* x, const float* bias, float* y, int64_t n,
                  int64_t out, int64_t in);

}  // namespace speclab
