// The decoder's small per-row steps as one CUDA kernel each: RMSNorm, RoPE with the K/V cache
// write, and SwiGLU. With libtorch ops each is 2 to 20 kernels; a 7B decode step ran ~1,500
// kernels, and their launch gaps, not the weight stream, set its time.
//
// Every kernel computes in float32 and rounds once to the storage dtype per output; each row's
// bits depend on that row alone (fixed reduction order), so they keep the layer loop's batch
// invariance (paged_attention.h). Torch-free: device pointers, a DType, and a cudaStream_t passed
// as void* (nullptr: the legacy default stream). Asynchronous; launch errors throw
// speclab::Error(kResource), bad arguments Error(kBadInput) before any CUDA call.
#pragma once

#include <cstdint>

#include "framework/cuda/paged_attention.h"

namespace speclab::cuda {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, the mean summed in a fixed order.
//   x, y: [rows, cols] dtype dt, contiguous (y may not alias x); w: [cols] dtype dt.
void rms_norm(DType dt, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps, void* stream);

// x += r, then y = rms_norm(x, w): the residual add of the layer loop fused into the norm that
// follows it. x [rows, cols] is updated in place (each sum rounded to the dtype, as a separate add
// would), and the norm reads the rounded sums: the same bits as add, then rms_norm.
void add_rms_norm(DType dt, void* x, const void* r, const void* w, void* y, int64_t rows, int64_t cols, float eps,
                  void* stream);

// RoPE (HF rotate_half layout) on the q and k heads of qkv, with q written out and k, v written
// to the cache slots:
//   qkv:        [n, (H + 2 KVH) D] dtype dt (q heads, k heads, v heads), contiguous; not modified
//   cos, sin:   [max_pos, D / 2] float32 tables; positions: [n] int64 (device)
//   q_out:      [n, H, D] dtype dt
//   k_layer,
//   v_layer:    [n_slots, KVH, D] dtype dt, one layer's cache; write_slots: [n] int64 (device).
//               Rows that share a slot must carry the same values (padding rows repeat the last).
// Rotation per pair (j, j + D/2): a' = a cos - b sin, b' = b cos + a sin, each product and sum
// rounded in float32 (no fused multiply-add), as libtorch's elementwise ops compute it.
void rope_store(DType dt, const void* qkv, const float* cos, const float* sin, const int64_t* positions,
                const int64_t* write_slots, void* q_out, void* k_layer, void* v_layer, int64_t n, int64_t H,
                int64_t KVH, int64_t D, void* stream);

// out[r, j] = silu(g) * u with g = gate_up[r, j], u = gate_up[r, inter + j]:
//   gate_up: [rows, 2 inter] dtype dt; out: [rows, inter] dtype dt.
void swiglu(DType dt, const void* gate_up, void* out, int64_t rows, int64_t inter, void* stream);

}  // namespace speclab::cuda
