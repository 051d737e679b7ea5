#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "framework/core/error.h"
#include "framework/cuda/paged_attention.h"

// Batch invariance rests on three rules, kept everywhere below:
//  1. Work is split by absolute position, never by n, ctx or the grid: a chunk is the fixed range
//     [c*256, (c+1)*256), and inside a chunk key k always goes to warp k % 4 and lane-owned dims.
//  2. Every reduction has a fixed order that depends only on the row's own visible-key count.
//  3. Float arithmetic that matters uses the explicit _rn intrinsics, so the compiler cannot fuse
//     or reorder it differently in the unrolled copies that serve the 8 row slots of a block.
// A block serves up to kRows query rows so that each K/V row loaded is used by all of them; a
// row's arithmetic never reads another row's data, and rows past a row's own position are skipped
// (not multiplied by zero), so garbage or NaN there cannot leak in.

namespace speclab::cuda {

namespace {

constexpr int kChunk = static_cast<int>(kAttentionChunk);
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 8;                // query rows per block
constexpr int kScorePitch = kRows + 1;  // [kChunk][kRows] score tile, padded: conflict-free column reads
constexpr unsigned kFullMask = 0xffffffffu;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(ErrorKind::kResource, std::string(what) + ": " + cudaGetErrorString(err), "cuda", "paged_attention");
}

void bad(const std::string& message) { throw Error(ErrorKind::kBadInput, message, "cuda", "paged_attention"); }

int64_t chunk_count(int64_t ctx) { return (ctx + kChunk - 1) / kChunk; }

// ---- element access ---------------------------------------------------------------------------
// Element e of a row packed into 32-bit words (little-endian: the lower address is the low half).
template <typename T>
struct Elem;

template <>
struct Elem<float> {
  __device__ static float from_words(const uint32_t* w, int e) { return __uint_as_float(w[e]); }
  __device__ static void store(float x, void* out, int64_t i) { static_cast<float*>(out)[i] = x; }
};

template <>
struct Elem<__half> {
  __device__ static float from_words(const uint32_t* w, int e) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(w[e >> 1] >> ((e & 1) * 16))));
  }
  __device__ static void store(float x, void* out, int64_t i) { static_cast<__half*>(out)[i] = __float2half_rn(x); }
};

template <>
struct Elem<__nv_bfloat16> {
  // bf16 is the top half of a float32: widening is exact.
  __device__ static float from_words(const uint32_t* w, int e) {
    return __uint_as_float((w[e >> 1] >> ((e & 1) * 16)) << 16);
  }
  __device__ static void store(float x, void* out, int64_t i) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(x);
  }
};

// Copies kBytes from p into words with loads of kVec bytes (p is kVec-aligned).
template <int kVec>
struct Words;

template <>
struct Words<16> {
  template <int kBytes>
  __device__ static void load(const void* p, uint32_t* w) {
    const uint4* s = static_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 x = s[i];
      w[4 * i] = x.x;
      w[4 * i + 1] = x.y;
      w[4 * i + 2] = x.z;
      w[4 * i + 3] = x.w;
    }
  }
};

template <>
struct Words<8> {
  template <int kBytes>
  __device__ static void load(const void* p, uint32_t* w) {
    const uint2* s = static_cast<const uint2*>(p);
#pragma unroll
    for (int i = 0; i < kBytes / 8; ++i) {
      const uint2 x = s[i];
      w[2 * i] = x.x;
      w[2 * i + 1] = x.y;
    }
  }
};

template <>
struct Words<4> {
  template <int kBytes>
  __device__ static void load(const void* p, uint32_t* w) {
    const uint32_t* s = static_cast<const uint32_t*>(p);
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) w[i] = s[i];
  }
};

template <>
struct Words<2> {  // an odd number of 16-bit elements
  template <int kBytes>
  __device__ static void load(const void* p, uint32_t* w) {
    const unsigned short* s = static_cast<const unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < (kBytes + 3) / 4; ++i) w[i] = 0;
#pragma unroll
    for (int i = 0; i < kBytes / 2; ++i) w[i >> 1] |= static_cast<uint32_t>(s[i]) << ((i & 1) * 16);
  }
};

// Loads a lane's E contiguous elements at p and widens them to float, with the widest vector loads
// (up to 16 bytes) that the alignment allows: rows start at multiples of 32*E elements from a
// 16-byte-aligned base, so a lane's offset lane*E is a multiple of E*sizeof(T) bytes.
template <typename T, int E>
__device__ __forceinline__ void load_row(const T* p, float (&out)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  constexpr int kVec = kBytes % 16 == 0 ? 16 : kBytes % 8 == 0 ? 8 : kBytes % 4 == 0 ? 4 : 2;
  uint32_t w[(kBytes + 3) / 4];
  Words<kVec>::template load<kBytes>(p, w);
#pragma unroll
  for (int e = 0; e < E; ++e) out[e] = Elem<T>::from_words(w, e);
}

// ---- warp reductions --------------------------------------------------------------------------
// Sums v[r] over the warp's 32 lanes for all 8 rows with 9 shuffles instead of 8 x 5: each halving
// step hands half of the rows to the partner lane, so that afterwards lanes 4r..4r+3 hold row r's
// total (row = lane >> 2). Each row's total comes from the same pairing tree as a plain xor
// butterfly (16, 8, 4, 2, 1), and IEEE addition is commutative, so its bits do not depend on which
// of the 8 slots the row occupies. v is clobbered.
__device__ __forceinline__ float warp_sum_rows(float (&v)[kRows], int lane) {
  static_assert(kRows == 8, "the halving steps below are written for 8 rows");
  {
    const bool hi = lane & 16;  // 8 -> 4 rows
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float keep = hi ? v[j + 4] : v[j];
      const float send = hi ? v[j] : v[j + 4];
      v[j] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, 16));
    }
  }
  {
    const bool hi = lane & 8;  // 4 -> 2 rows
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float keep = hi ? v[j + 2] : v[j];
      const float send = hi ? v[j] : v[j + 2];
      v[j] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, 8));
    }
  }
  {
    const bool hi = lane & 4;  // 2 -> 1 row
    const float keep = hi ? v[1] : v[0];
    const float send = hi ? v[0] : v[1];
    v[0] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, 4));
  }
  float s = v[0];
  s = __fadd_rn(s, __shfl_xor_sync(kFullMask, s, 2));
  s = __fadd_rn(s, __shfl_xor_sync(kFullMask, s, 1));
  return s;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, off));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = __fadd_rn(x, __shfl_xor_sync(kFullMask, x, off));
  return x;
}

// ---- kernel 1: one chunk's partial softmax ------------------------------------------------------
// Grid (ceil(n / kRows), H, n_chunks), kThreads threads. Block (g, h, c) serves rows g*8..g*8+7,
// query head h, chunk c; lane `lane` of every warp owns dims [lane*E, lane*E + E).
// Per row r it writes the partial (m, l, acc[D]) of the keys p in chunk c with p <= positions[r]:
//   m = max score, l = sum exp(score - m), acc = sum exp(score - m) * V[p]
// or, when no key of the chunk is visible, m = -inf and l = 0 (acc not written).
// Steps: (1) scores into shared memory (warp w takes keys k = w mod 4); (2) per row: max, then
// probabilities in place and their sum; (3) acc: warp w sums its keys' p * V in ascending order;
// (4) the 4 warps' acc are added in warp order and written out.
template <typename T, int E, int L>
__global__ void __launch_bounds__(kThreads)
    chunk_kernel(const T* __restrict__ q, const T* __restrict__ k_layer, const T* __restrict__ v_layer,
                 const int64_t* __restrict__ slots, int64_t base, const int64_t* __restrict__ positions,
                 float* __restrict__ ws_m, float* __restrict__ ws_l, float* __restrict__ ws_acc, int64_t n,
                 int64_t H, int64_t KVH, int64_t ctx, int64_t n_chunks, float scale, void* direct_out) {
  constexpr int D = L * E;  // L lanes own E dims each: L = 32, or L = D < 32 with E = 1
  constexpr int G = E <= 4 ? 8 : 4;  // keys a warp has in flight per step
  __shared__ int64_t s_slot[kChunk];
  __shared__ float s_score[kChunk * kScorePitch];  // [key][row]: scores, then probabilities
  __shared__ float s_acc[kWarps][kRows][D];
  __shared__ float s_m[kRows], s_l[kRows];
  __shared__ int s_nvis[kRows];  // visible keys of the chunk per row: key k is visible iff k < s_nvis[r]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const bool active = lane < L;  // lanes past D (D < 32) hold zeros: they add exact zeros to the sums
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t h = blockIdx.y, chunk = blockIdx.z;
  const int64_t start = chunk * kChunk;
  const int64_t kvh = h / (H / KVH);

  if (tid < kRows) {
    const int64_t row = row0 + tid;
    int nvis = 0;
    if (row < n) {
      const int64_t pos = positions[row];
      if (pos >= 0 && pos < ctx && pos >= start)
        nvis = static_cast<int>(pos - start < kChunk ? pos - start + 1 : kChunk);
    }
    s_nvis[tid] = nvis;
  }
  __syncthreads();
  int nvis[kRows];
  int kmax = 0;  // keys 0..kmax-1 of the chunk are visible to some row
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    nvis[r] = s_nvis[r];
    kmax = nvis[r] > kmax ? nvis[r] : kmax;
  }
  if (kmax == 0) {  // block-uniform
    if (direct_out != nullptr) {  // no visible key: a position outside [0, ctx), as combine_kernel writes
      for (int i = tid; i < kRows * D; i += kThreads)
        if (row0 + i / D < n) Elem<T>::store(__int_as_float(0x7fc00000), direct_out, ((row0 + i / D) * H + h) * D + i % D);
      return;
    }
    if (tid < kRows && row0 + tid < n) {
      const int64_t part = ((row0 + tid) * H + h) * n_chunks + chunk;
      ws_m[part] = -INFINITY;
      ws_l[part] = 0.f;
    }
    return;
  }
  for (int k = tid; k < kmax; k += kThreads) s_slot[k] = slots ? slots[start + k] : base + start + k;
  __syncthreads();

  // (1) scores: s_score[k][r] = scale * (q_r . K_k).
  {
    float qf[kRows][E];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (nvis[r] > 0 && active) {
        load_row<T, E>(q + ((row0 + r) * H + h) * D + lane * E, qf[r]);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) qf[r][e] = 0.f;
      }
    }
    for (int k0 = warp; k0 < kmax; k0 += kWarps * G) {
      float kf[G][E];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int k = k0 + g * kWarps;
        if (k < kmax && active) {
          load_row<T, E>(k_layer + (s_slot[k] * KVH + kvh) * D + lane * E, kf[g]);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) kf[g][e] = 0.f;
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int k = k0 + g * kWarps;
        if (k < kmax) {  // warp-uniform: every lane takes part in the shuffles
          float dot[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float s = 0.f;
            if (nvis[r] > 0) {  // an empty row slot (n = 1, say) costs no multiplies
#pragma unroll
              for (int e = 0; e < E; ++e) s = __fmaf_rn(qf[r][e], kf[g][e], s);
            }
            dot[r] = s;
          }
          const float total = warp_sum_rows(dot, lane);
          if ((lane & 3) == 0) s_score[k * kScorePitch + (lane >> 2)] = __fmul_rn(total, scale);
        }
      }
    }
  }
  __syncthreads();

  // (2) per row (warp w takes rows w and w + 4): m, probabilities in place, l.
  for (int r = warp; r < kRows; r += kWarps) {
    const int nv = s_nvis[r];
    float m = -INFINITY, l = 0.f;
    if (nv > 0) {
      for (int k = lane; k < nv; k += 32) m = fmaxf(m, s_score[k * kScorePitch + r]);
      m = warp_max(m);
      for (int k = lane; k < nv; k += 32) {
        const float p = expf(__fsub_rn(s_score[k * kScorePitch + r], m));
        s_score[k * kScorePitch + r] = p;
        l = __fadd_rn(l, p);
      }
      l = warp_sum(l);
    }
    if (lane == 0) {
      s_m[r] = m;
      s_l[r] = l;
    }
  }
  __syncthreads();

  // (3) acc: warp w accumulates its keys (k = w mod 4) in ascending order, skipping invisible ones.
  {
    float acc[kRows][E];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][e] = 0.f;
    for (int k0 = warp; k0 < kmax; k0 += kWarps * G) {
      float vf[G][E];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int k = k0 + g * kWarps;
        if (k < kmax && active) {
          load_row<T, E>(v_layer + (s_slot[k] * KVH + kvh) * D + lane * E, vf[g]);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) vf[g][e] = 0.f;
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int k = k0 + g * kWarps;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (k < nvis[r]) {
            const float p = s_score[k * kScorePitch + r];
#pragma unroll
            for (int e = 0; e < E; ++e) acc[r][e] = __fmaf_rn(p, vf[g][e], acc[r][e]);
          }
        }
      }
    }
    if (active)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) s_acc[warp][r][lane * E + e] = acc[r][e];
  }
  __syncthreads();

  // (4) merge the warps in order 0, 1, 2, 3 and write the partials.
  for (int i = tid; i < kRows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const int64_t row = row0 + r;
    if (row >= n) continue;
    const int64_t part = (row * H + h) * n_chunks + chunk;
    if (direct_out != nullptr) {
      // One chunk in the grid (ctx <= kChunk): the row's whole softmax is here. combine_kernel would
      // compute acc * exp(m - m) / (l * exp(m - m)) = acc / l bit for bit (exp(0) = 1, a
      // non-negative-zero acc), so write that and skip it.
      float result = __int_as_float(0x7fc00000);
      if (s_nvis[r] > 0) {
        float a = s_acc[0][r][d];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) a = __fadd_rn(a, s_acc[w][r][d]);
        result = __fdiv_rn(a, s_l[r]);
      }
      Elem<T>::store(result, direct_out, (row * H + h) * D + d);
      continue;
    }
    if (s_nvis[r] > 0) {
      float a = s_acc[0][r][d];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) a = __fadd_rn(a, s_acc[w][r][d]);
      ws_acc[part * D + d] = a;
    }
    if (d == 0) {
      ws_m[part] = s_m[r];
      ws_l[part] = s_l[r];
    }
  }
}

// ---- kernel 2: merge a row's chunks -------------------------------------------------------------
// Grid n * H (block = row * H + head), D threads (thread = dim). Merges chunks
// 0..positions[row] / kChunk in ascending order: m = max m_c; l = sum l_c e_c, acc = sum acc_c e_c
// with e_c = exp(m_c - m); out = acc / l.
template <typename T>
__global__ void combine_kernel(const int64_t* __restrict__ positions, const float* __restrict__ ws_m,
                               const float* __restrict__ ws_l, const float* __restrict__ ws_acc, void* out,
                               int64_t H, int64_t D, int64_t ctx, int64_t n_chunks) {
  const int64_t rh = blockIdx.x;
  const int64_t row = rh / H;
  const int d = threadIdx.x;
  const int64_t pos = positions[row];
  float result = __int_as_float(0x7fc00000);  // NaN for a position outside [0, ctx)
  if (pos >= 0 && pos < ctx) {
    const int64_t nc = pos / kChunk + 1;
    const int64_t p0 = rh * n_chunks;
    float m = -INFINITY;
    for (int64_t c = 0; c < nc; ++c) m = fmaxf(m, ws_m[p0 + c]);
    float l = 0.f, a = 0.f;
    for (int64_t c = 0; c < nc; ++c) {
      const float e = expf(__fsub_rn(ws_m[p0 + c], m));
      l = __fmaf_rn(ws_l[p0 + c], e, l);
      a = __fmaf_rn(ws_acc[(p0 + c) * D + d], e, a);
    }
    result = __fdiv_rn(a, l);
  }
  Elem<T>::store(result, out, rh * D + d);
}

struct Args {
  const void* q;
  const void* k;
  const void* v;
  const int64_t* slots;
  int64_t base;
  const int64_t* positions;
  void* out;
  float* workspace;
  int64_t n, H, KVH, D, ctx;
  float scale;
  cudaStream_t stream;
};

template <typename T, int E, int L = 32>
void launch(const Args& a) {
  const int64_t n_chunks = chunk_count(a.ctx);
  const int64_t parts = a.n * a.H * n_chunks;
  float* ws_m = a.workspace;
  float* ws_l = a.workspace + parts;
  float* ws_acc = a.workspace + 2 * parts;
  const dim3 grid(static_cast<unsigned>((a.n + kRows - 1) / kRows), static_cast<unsigned>(a.H),
                  static_cast<unsigned>(n_chunks));
  chunk_kernel<T, E, L><<<grid, kThreads, 0, a.stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.slots, a.base,
      a.positions, ws_m, ws_l, ws_acc, a.n, a.H, a.KVH, a.ctx, n_chunks, a.scale, n_chunks == 1 ? a.out : nullptr);
  check(cudaGetLastError(), "paged_attention chunk kernel launch");
  if (n_chunks == 1) return;  // the chunk kernel wrote the output
  combine_kernel<T><<<static_cast<unsigned>(a.n * a.H), static_cast<unsigned>(a.D), 0, a.stream>>>(
      a.positions, ws_m, ws_l, ws_acc, a.out, a.H, a.D, a.ctx, n_chunks);
  check(cudaGetLastError(), "paged_attention combine kernel launch");
}

template <typename T>
void launch_dtype(const Args& a) {
  if (a.D == 8) return launch<T, 1, 8>(a);
  if (a.D == 16) return launch<T, 1, 16>(a);
  switch (a.D / 32) {
    case 1: return launch<T, 1>(a);
    case 2: return launch<T, 2>(a);
    case 3: return launch<T, 3>(a);
    case 4: return launch<T, 4>(a);
    case 5: return launch<T, 5>(a);
    case 6: return launch<T, 6>(a);
    case 7: return launch<T, 7>(a);
    case 8: return launch<T, 8>(a);
    default: bad("head dim " + std::to_string(a.D) + " not supported");
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void validate(DType dt, const Args& a) {
  const auto dt_i = static_cast<int32_t>(dt);
  if (dt_i < 0 || dt_i > 2) bad("unknown dtype " + std::to_string(dt_i) + ", expected 0 (f32), 1 (f16) or 2 (bf16)");
  if (a.n < 0) bad("n = " + std::to_string(a.n) + ", expected n >= 0");
  if (a.H < 1 || a.KVH < 1 || a.H % a.KVH != 0)
    bad("H = " + std::to_string(a.H) + ", KVH = " + std::to_string(a.KVH) + ", expected H % KVH == 0, both >= 1");
  if (a.H > 65535) bad("H = " + std::to_string(a.H) + ", expected H <= 65535");
  if (a.D != 8 && a.D != 16 && (a.D < 32 || a.D > 256 || a.D % 32 != 0))
    bad("head dim D = " + std::to_string(a.D) + ", expected 8, 16 or a multiple of 32 in [32, 256]");
  if (a.ctx < 1) bad("ctx = " + std::to_string(a.ctx) + ", expected ctx >= 1");
  if (chunk_count(a.ctx) > 65535)
    bad("ctx = " + std::to_string(a.ctx) + ", expected at most " + std::to_string(65535 * kAttentionChunk));
  if (a.n * a.H > 0x7fffffff) bad("n * H = " + std::to_string(a.n * a.H) + " exceeds the grid limit");
  if (!std::isfinite(a.scale)) bad("scale is not finite");
  if (a.n == 0) return;
  if (!a.q || !a.k || !a.v || !a.positions || !a.out || !a.workspace)
    bad("q, k_layer, v_layer, positions, out and workspace must be non-null");
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v)) bad("q, k_layer and v_layer must be 16-byte aligned");
}

}  // namespace

size_t paged_attention_workspace_floats(int64_t n, int64_t H, int64_t D, int64_t ctx) {
  if (n < 0 || H < 1 || D < 1 || ctx < 1)
    throw Error(ErrorKind::kBadInput,
                "expected n >= 0 and H, D, ctx >= 1, got n = " + std::to_string(n) + ", H = " + std::to_string(H) +
                    ", D = " + std::to_string(D) + ", ctx = " + std::to_string(ctx),
                "cuda", "paged_attention_workspace_floats");
  return static_cast<size_t>(n) * static_cast<size_t>(H) * static_cast<size_t>(chunk_count(ctx)) *
         static_cast<size_t>(D + 2);
}

void paged_attention(DType dt, const void* q, const void* k_layer, const void* v_layer, const int64_t* slots,
                     int64_t base, const int64_t* positions, void* out, float* workspace, int64_t n, int64_t H,
                     int64_t KVH, int64_t D, int64_t ctx, float scale, void* stream) {
  const Args a{q, k_layer, v_layer, slots, base, positions, out, workspace, n, H, KVH, D, ctx, scale,
               static_cast<cudaStream_t>(stream)};
  validate(dt, a);
  if (n == 0) return;
  switch (dt) {
    case DType::kF32: return launch_dtype<float>(a);
    case DType::kF16: return launch_dtype<__half>(a);
    case DType::kBF16: return launch_dtype<__nv_bfloat16>(a);
  }
}

}  // namespace speclab::cuda
