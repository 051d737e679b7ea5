// GPU causal attention of n query rows over one layer's paged KV cache, batch-invariant: the bits
// of a row's output depend only on that row's query, its position and the keys/values it attends
// to, never on how many rows share the call, which they are, the context length that sizes the
// grid, or the grid itself. So a verification row computed among k+1 rows is bit-identical to the
// same row computed alone by an AR step, which is what makes greedy speculative decoding on the GPU
// reproduce greedy AR decoding token for token.
//
// How (the why is in the .cu): each row's keys are split into fixed chunks of
// kAttentionChunk absolute positions; one thread block computes a chunk's partial softmax
// (max m, denominator l, unnormalised accumulator acc[D]) with a fixed reduction order, and a
// second kernel merges the row's chunks 0..positions[i]/kAttentionChunk in ascending order (when
// the grid has one chunk, ctx <= kAttentionChunk, the first kernel writes the output itself, with
// the bits the merge would give).
// Scores, softmax and accumulation are float32 whatever the storage dtype.
//
// Torch-free: plain device pointers and a cudaStream_t passed as void*, so a torch-free build can
// link it and a libtorch caller passes data_ptr()s.
#pragma once

#include <cstddef>
#include <cstdint>

namespace speclab::cuda {

// Storage dtype of q, the cache and out. Values are widened to float32 on load and the output is
// rounded once (round-to-nearest-even) to this dtype.
enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Keys per partial: chunk c covers absolute positions [c*256, (c+1)*256). Fixed, not tuned per
// call: changing it would change the bits of every output.
constexpr int64_t kAttentionChunk = 256;

// Size in floats of the workspace paged_attention needs for these sizes:
// n * H * ceil(ctx / kAttentionChunk) * (D + 2). Throws speclab::Error (kBadInput) when n < 0 or
// H, D or ctx < 1.
size_t paged_attention_workspace_floats(int64_t n, int64_t H, int64_t D, int64_t ctx);

// out[i, h, :] = softmax_p(scale * q[i, h, :] . K[slot(p), h / (H / KVH), :]) @ V[slot(p), h / (H / KVH), :]
// over the positions p = 0..positions[i] (causal, inclusive).
//
//   dt:        storage dtype of q, k_layer, v_layer and out.
//   q:         [n, H, D] contiguous, device memory, 16-byte aligned.
//   k_layer,
//   v_layer:   [n_slots, KVH, D] contiguous (one layer's cache), device memory, 16-byte aligned.
//   slots:     [ctx] int64, device memory: the cache slot of position p; or nullptr, then
//              slot(p) = base + p. Only entries 0..max(positions) are read.
//   positions: [n] int64, device memory. A row with positions[i] outside [0, ctx) gets NaN in
//              every output element (the values live on the device, so they are not checked on
//              the host).
//   out:       [n, H, D] dtype dt, device memory.
//   workspace: device float32 buffer of paged_attention_workspace_floats(n, H, D, ctx) floats;
//              contents on entry do not matter. One call at a time per workspace.
//   H % KVH == 0 (grouped-query attention: query head h reads kv head h / (H / KVH)); D a multiple
//   of 32 with 32 <= D <= 256, or 8 or 16 (llama2.c's small models); ctx >= 1 (it sizes the grid
//   only: ceil(ctx / 256) <= 65535); H <= 65535.
//   scale:     softmax scale, usually 1 / sqrt(D).
//   stream:    a cudaStream_t as void*; nullptr is the legacy default stream.
//
// Asynchronous on `stream`. n == 0 does nothing. Throws speclab::Error: kBadInput for a bad
// argument (checked before any CUDA call, so no device is needed to see it), kResource when a
// launch fails. Errors during execution surface at the caller's next synchronising CUDA call.
void paged_attention(DType dt, const void* q, const void* k_layer, const void* v_layer, const int64_t* slots,
                     int64_t base, const int64_t* positions, void* out, float* workspace, int64_t n, int64_t H,
                     int64_t KVH, int64_t D, int64_t ctx, float scale, void* stream);

}  // namespace speclab::cuda
