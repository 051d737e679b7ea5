// GPU matrix product for the few rows of a decode step or a verification pass: y = x W^T (+ b)
// for up to kSkinnyMaxRows rows of x, reading each weight element once per call, so the time is
// the weight stream's (cuBLAS reaches 1.3 to 1.9 TB/s on the 4096 x 4096 shapes of a 7B decode
// step, docs/gpu.md; a GEMV-style stream can run near the device's copy rate).
//
// Batch-invariant, like paged_attention.h: the bits of row r of y depend only on row r of x, W
// and b. The products run on tensor cores (mma.sync m16n8k16, float32 accumulators) with the x
// rows as the mma's columns, and an mma's output element depends only on its own row, column and
// accumulator. Each output's sum runs in an order fixed by the kernel: the input dimension in
// 32-element steps dealt round-robin to 8 warps, each warp accumulating its steps in ascending
// order, then the 8 partial sums added in warp order. Nothing depends on n, on the other rows, or
// on the grid. So a verification row computed among n rows is bit-identical to the same row in an
// AR step.
//
// Rows n..rows-1 of y are padding: they get row n-1's values (the layer loop pads a call with
// copies of its last row, LlamaModel::kCudaPadRows), without reading x's padding rows.
//
// Accumulation is float32; each output is rounded once to the dtype (round to nearest even).
// Torch-free: device pointers and a cudaStream_t passed as void*.
#pragma once

#include <cstdint>

#include "framework/cuda/paged_attention.h"

namespace speclab::cuda {

// The most rows one call computes.
constexpr int64_t kSkinnyMaxRows = 16;

// True when skinny_gemm takes these operands: a 16-bit dtype (kF16 or kBF16), in a positive
// multiple of 32, and x and w 16-byte aligned. Callers fall back to a library GEMM otherwise;
// the answer depends on the weights alone when x comes from a fresh allocation (always 256-byte
// aligned), so one weight matrix always takes the same path. Needs no device.
bool skinny_gemm_supported(DType dt, const void* x, const void* w, int64_t in);

// True when the current device can run the kernel (compute capability 8.0 or later: the bf16
// mma). Asked once per process.
bool skinny_gemm_device_ok();

// y[r, o] = round(sum_k x[r, k] W[o, k] + b[o]) for r < n, and y[r, :] = y[n - 1, :] for
// n <= r < rows.
//   x:    [rows, in] dtype dt, contiguous, device memory (rows n.. are not read)
//   w:    [out, in] dtype dt, contiguous (row-major, as nn.Linear's weight), device memory
//   bias: [out] dtype dt, device memory, or nullptr
//   y:    [rows, out] dtype dt, device memory (may not alias x)
//   1 <= n <= rows <= kSkinnyMaxRows; out >= 1; skinny_gemm_supported(dt, x, w, in).
// Asynchronous on `stream` (nullptr: the legacy default stream). Throws speclab::Error: kBadInput
// for a bad argument, before any CUDA call; kResource when the launch fails.
void skinny_gemm(DType dt, const void* x, const void* w, const void* bias, void* y, int64_t rows, int64_t n,
                 int64_t in, int64_t out, void* stream);

}  // namespace speclab::cuda
