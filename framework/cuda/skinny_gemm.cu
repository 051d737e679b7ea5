#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "framework/core/error.h"
#include "framework/cuda/skinny_gemm.h"

namespace speclab::cuda {

namespace {

void bad(const std::string& message) { throw Error(ErrorKind::kBadInput, message, "cuda", "skinny_gemm"); }

// Layout of the work (why: the .h).
// - A block owns 16 consecutive outputs (one m16 tile of W) for every row of x. Its kWarps warps
//   split the input dimension into 32-element k-steps: warp w takes steps w, w + kWarps, ...
//   (kUnroll steps' loads in flight at a time), accumulating with mma.sync m16n8k16 (16-bit
//   inputs, float32 accumulators). Then warp 0 adds the warps' partial sums in the order
//   0, 1, ..., kWarps - 1 and writes y.
// - x rows are the mma's n8 columns: rows 0..7 in tile 0, rows 8..15 in tile 1 (n > 8 only).
//   Columns past n hold zeros; an mma's output element depends only on its own row of A, column
//   of B and accumulator, so they change nothing in the real columns.
// - Inside a k-step, lane (g = lane / 4, t = lane % 4) loads the 16-byte chunk [8t, 8t + 8) of
//   weight rows g and g + 8 and of x row g. The mma's fragment layout wants logical columns
//   {2t, 2t + 1, 2t + 8, 2t + 9} of a 16-wide k tile in a thread; the kernel feeds chunk words
//   0, 1 to the first mma and words 2, 3 to the second, the same for A and B, so each step's
//   32 products are all summed, in an order fixed by the kernel.
// Launch shapes (warps per block, k-steps per warp in flight), picked by
// SPECLAB_CUDA_SKINNY_VARIANT for measurements (docs/gpu.md); the default is the fastest measured.
// Each variant is batch-invariant on its own; a process uses one.
struct Variant {
  int warps, unroll;
};
constexpr Variant kVariants[] = {{8, 4}, {4, 4}, {8, 8}, {4, 8}, {2, 8}};
constexpr int kDefaultVariant = 0;
constexpr int kStep = 32;  // input elements per k-step

template <typename T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();  // skinny_gemm_device_ok() keeps pre-Ampere devices off this path
#endif
  }
};
template <>
struct Mma<__half> {
  __device__ __forceinline__ static void run(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
  }
};

__device__ __forceinline__ float widen1(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen1(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }

// NT: n8 tiles of x rows (1 for n <= 8, 2 for n <= 16). A row's arithmetic is the same for both.
template <typename T, int NT, int kWarps, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                       T* __restrict__ y, int rows, int n, int64_t in, int64_t out) {
  __shared__ float partial[kWarps][32][4 * NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * 16;
  // Weight rows past `out` re-read the last row (valid memory); their sums are never stored.
  const int64_t og = o0 + g < out ? o0 + g : out - 1, og8 = o0 + g + 8 < out ? o0 + g + 8 : out - 1;
  const uint4* wg = reinterpret_cast<const uint4*>(w + og * in) + t;
  const uint4* wg8 = reinterpret_cast<const uint4*>(w + og8 * in) + t;
  const uint4* xr[NT];
  bool xlive[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = g + 8 * nt;
    xlive[nt] = r < n;
    xr[nt] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(xlive[nt] ? r : 0) * in) + t;
  }
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;

  const int64_t steps = in / kStep;  // a k-step is 4 chunks of 16 bytes per row
  for (int64_t s0 = warp; s0 < steps; s0 += static_cast<int64_t>(kWarps) * kUnroll) {
    // Every load of the round first (weights streamed, x from cache), then the mmas.
    uint4 a[kUnroll] = {}, a8[kUnroll] = {}, b[kUnroll][NT] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * kWarps;
      if (s < steps) {
        a[u] = __ldcs(wg + s * 4);
        a8[u] = __ldcs(wg8 + s * 4);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          if (xlive[nt]) b[u][nt] = __ldg(xr[nt] + s * 4);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * kWarps;
      if (s >= steps) break;  // uniform across the warp
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        Mma<T>::run(acc[nt], a[u].x, a8[u].x, a[u].y, a8[u].y, b[u][nt].x, b[u][nt].y);
        Mma<T>::run(acc[nt], a[u].z, a8[u].z, a[u].w, a8[u].w, b[u][nt].z, b[u][nt].w);
      }
    }
  }

#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][lane][4 * nt + i] = acc[nt][i];
  __syncthreads();
  if (warp != 0) return;
  float sum[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = partial[0][lane][4 * nt + i];
#pragma unroll
      for (int k = 1; k < kWarps; ++k) v = __fadd_rn(v, partial[k][lane][4 * nt + i]);
      sum[nt][i] = v;
    }
  // Lane (g, t) holds outputs o0 + g (i = 0, 1) and o0 + g + 8 (i = 2, 3) of x rows
  // 8 nt + 2t + (i & 1).
  const int64_t o_lo = o0 + g, o_hi = o0 + g + 8;
  const float b_lo = bias != nullptr && o_lo < out ? widen1(bias[o_lo]) : 0.f;
  const float b_hi = bias != nullptr && o_hi < out ? widen1(bias[o_hi]) : 0.f;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (bias != nullptr) sum[nt][i] = __fadd_rn(sum[nt][i], i < 2 ? b_lo : b_hi);
      const int r = 8 * nt + 2 * t + (i & 1);
      const int64_t o = i < 2 ? o_lo : o_hi;
      if (r < n && o < out) store(y + static_cast<int64_t>(r) * out + o, sum[nt][i]);
    }
  // Padding rows n..rows-1 get row n - 1's values, held by lane (g, ((n - 1) % 8) / 2).
  if (rows > n) {
    const int last = n - 1;
    const bool odd = (last & 1) != 0;
    float lo = odd ? sum[0][1] : sum[0][0], hi = odd ? sum[0][3] : sum[0][2];
    if (NT > 1 && last >= 8) {
      lo = odd ? sum[NT - 1][1] : sum[NT - 1][0];
      hi = odd ? sum[NT - 1][3] : sum[NT - 1][2];
    }
    const int src = g * 4 + ((last & 7) >> 1);
    lo = __shfl_sync(0xffffffffu, lo, src);
    hi = __shfl_sync(0xffffffffu, hi, src);
    for (int r = n + t; r < rows; r += 4) {
      if (o_lo < out) store(y + static_cast<int64_t>(r) * out + o_lo, lo);
      if (o_hi < out) store(y + static_cast<int64_t>(r) * out + o_hi, hi);
    }
  }
}

template <typename T, int W, int U>
void launch_shape(const T* x, const T* w, const T* bias, T* y, int rows, int n, int64_t in, int64_t out,
                  cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + 15) / 16);
  if (n <= 8)
    skinny_gemm_kernel<T, 1, W, U><<<blocks, W * 32, 0, stream>>>(x, w, bias, y, rows, n, in, out);
  else
    skinny_gemm_kernel<T, 2, W, U><<<blocks, W * 32, 0, stream>>>(x, w, bias, y, rows, n, in, out);
}

// The variant this process runs: SPECLAB_CUDA_SKINNY_VARIANT (an index into kVariants), read once.
int variant() {
  static const int v = [] {
    const char* e = std::getenv("SPECLAB_CUDA_SKINNY_VARIANT");
    if (e == nullptr || *e == '\0') return kDefaultVariant;
    const int i = std::atoi(e);
    constexpr int count = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));
    return i >= 0 && i < count ? i : kDefaultVariant;
  }();
  return v;
}

template <typename T>
void launch(const void* xv, const void* wv, const void* bv, void* yv, int64_t rows64, int64_t n64, int64_t in,
            int64_t out, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(xv);
  const auto* w = static_cast<const T*>(wv);
  const auto* b = static_cast<const T*>(bv);
  auto* y = static_cast<T*>(yv);
  const int rows = static_cast<int>(rows64), n = static_cast<int>(n64);
  switch (variant()) {
    case 1: return launch_shape<T, 4, 4>(x, w, b, y, rows, n, in, out, stream);
    case 2: return launch_shape<T, 8, 8>(x, w, b, y, rows, n, in, out, stream);
    case 3: return launch_shape<T, 4, 8>(x, w, b, y, rows, n, in, out, stream);
    case 4: return launch_shape<T, 2, 8>(x, w, b, y, rows, n, in, out, stream);
    default: return launch_shape<T, 8, 4>(x, w, b, y, rows, n, in, out, stream);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool skinny_gemm_supported(DType dt, const void* x, const void* w, int64_t in) {
  return (dt == DType::kF16 || dt == DType::kBF16) && in >= kStep && in % kStep == 0 && x != nullptr &&
         w != nullptr && aligned16(x) && aligned16(w);
}

bool skinny_gemm_device_ok() {
  static const bool ok = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 8;
  }();
  return ok;
}

void skinny_gemm(DType dt, const void* x, const void* w, const void* bias, void* y, int64_t rows, int64_t n,
                 int64_t in, int64_t out, void* stream) {
  if (!skinny_gemm_supported(dt, x, w, in))
    bad("expected a 16-bit dtype, in a positive multiple of 32 (found " + std::to_string(in) +
        ") and 16-byte aligned x and w");
  if (n < 1 || n > rows || rows > kSkinnyMaxRows)
    bad("expected 1 <= n <= rows <= " + std::to_string(kSkinnyMaxRows) + ", found n " + std::to_string(n) +
        ", rows " + std::to_string(rows));
  if (out < 1 || out > (int64_t{1} << 31)) bad("expected 1 <= out <= 2^31, found " + std::to_string(out));
  if (y == nullptr) bad("y is null");
  const auto s = static_cast<cudaStream_t>(stream);
  if (dt == DType::kBF16)
    launch<__nv_bfloat16>(x, w, bias, y, rows, n, in, out, s);
  else
    launch<__half>(x, w, bias, y, rows, n, in, out, s);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(ErrorKind::kResource, std::string("skinny_gemm launch: ") + cudaGetErrorString(err), "cuda",
                "skinny_gemm");
}

}  // namespace speclab::cuda
