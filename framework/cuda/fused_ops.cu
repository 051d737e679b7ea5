#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "framework/core/error.h"
#include "framework/cuda/fused_ops.h"

namespace speclab::cuda {

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(ErrorKind::kResource, std::string(what) + ": " + cudaGetErrorString(err), "cuda", "fused_ops");
}

void bad(const std::string& message) { throw Error(ErrorKind::kBadInput, message, "cuda", "fused_ops"); }

// float32 <-> storage dtype; stores round to nearest even.
__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float x) { p[i] = x; }
__device__ __forceinline__ void st(__half* p, int64_t i, float x) { p[i] = __float2half_rn(x); }
__device__ __forceinline__ void st(__nv_bfloat16* p, int64_t i, float x) { p[i] = __float2bfloat16_rn(x); }
// x rounded to the storage dtype and widened back.
template <typename T>
__device__ __forceinline__ float rnd(float x) {
  T t;
  st(&t, 0, x);
  return ld(&t, 0);
}

constexpr int kNormThreads = 256;

// One block per row: thread t sums x^2 over columns t, t + 256, ... in order; then a shared-memory
// tree in a fixed order.
// With `res` (add_rms_norm): x[j] = round(x[j] + res[j]) first, written back, and the norm reads the
// rounded sums; each thread touches only its own columns, so no barrier is needed before the norm.
template <typename T>
__global__ void rms_norm_kernel(T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w,
                                T* __restrict__ y, int64_t cols, float eps) {
  __shared__ float part[kNormThreads];
  const int64_t row = blockIdx.x;
  T* xr = x + row * cols;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += kNormThreads) {
    float v = ld(xr, j);
    if (res != nullptr) {
      v = rnd<T>(__fadd_rn(v, ld(res + row * cols, j)));
      st(xr, j, v);
    }
    s = __fmaf_rn(v, v, s);
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = kNormThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) part[threadIdx.x] = __fadd_rn(part[threadIdx.x], part[threadIdx.x + half]);
    __syncthreads();
  }
  const float inv = rsqrtf(__fadd_rn(__fdiv_rn(part[0], static_cast<float>(cols)), eps));
  T* yr = y + row * cols;
  // As HF: the normalised row is rounded to the dtype, then multiplied by the weight.
  for (int64_t j = threadIdx.x; j < cols; j += kNormThreads)
    st(yr, j, __fmul_rn(rnd<T>(__fmul_rn(ld(xr, j), inv)), ld(w, j)));
}

// Grid (n, H + 2 KVH): block (i, head) handles one head of row i; thread j < D/2 the pair (j, j + D/2).
template <typename T>
__global__ void rope_store_kernel(const T* __restrict__ qkv, const float* __restrict__ cos_t,
                                  const float* __restrict__ sin_t, const int64_t* __restrict__ positions,
                                  const int64_t* __restrict__ slots, T* __restrict__ q_out, T* __restrict__ k_layer,
                                  T* __restrict__ v_layer, int64_t H, int64_t KVH, int64_t D) {
  const int64_t i = blockIdx.x, head = blockIdx.y, half = D / 2;
  const int64_t width = (H + 2 * KVH) * D;
  const T* src = qkv + i * width + head * D;
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    if (head >= H + KVH) {  // v: copied as is
      T* dst = v_layer + (slots[i] * KVH + (head - H - KVH)) * D;
      dst[j] = src[j];
      dst[j + half] = src[j + half];
      continue;
    }
    const int64_t pos = positions[i];
    const float c = cos_t[pos * half + j], s = sin_t[pos * half + j];
    const float a = ld(src, j), b = ld(src, j + half);
    const float ra = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float rb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    T* dst = head < H ? q_out + (i * H + head) * D : k_layer + (slots[i] * KVH + (head - H)) * D;
    st(dst, j, ra);
    st(dst, j + half, rb);
  }
}

template <typename T>
__global__ void swiglu_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows, int64_t inter) {
  const int64_t total = rows * inter;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / inter, j = idx % inter;
    const float g = ld(gate_up, r * 2 * inter + j), u = ld(gate_up, r * 2 * inter + inter + j);
    // As libtorch: silu rounded to the dtype, then the product.
    const float silu = rnd<T>(__fdiv_rn(g, __fadd_rn(1.f, expf(-g))));
    st(out, idx, __fmul_rn(silu, u));
  }
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

void check_dtype(DType dt) {
  const auto d = static_cast<int32_t>(dt);
  if (d < 0 || d > 2) bad("unknown dtype " + std::to_string(d) + ", expected 0 (f32), 1 (f16) or 2 (bf16)");
}

template <typename F>
void dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(__half{});
    case DType::kBF16: return f(__nv_bfloat16{});
  }
}

}  // namespace

namespace {

// rms_norm and add_rms_norm: one block per row; res == nullptr for the plain norm.
void launch_norm(DType dt, void* x, const void* res, const void* w, void* y, int64_t rows, int64_t cols, float eps,
                 void* stream, const char* what) {
  check_dtype(dt);
  if (rows < 0 || cols < 1) bad(std::string(what) + ": expected rows >= 0 and cols >= 1");
  if (rows == 0) return;
  if (rows > 0x7fffffff) bad(std::string(what) + ": too many rows for the grid");
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(x), static_cast<const T*>(res), static_cast<const T*>(w), static_cast<T*>(y), cols, eps);
  });
  check(cudaGetLastError(), what);
}

}  // namespace

void rms_norm(DType dt, const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps, void* stream) {
  // x is only read when there is no residual.
  launch_norm(dt, const_cast<void*>(x), nullptr, w, y, rows, cols, eps, stream, "rms_norm");
}

void add_rms_norm(DType dt, void* x, const void* r, const void* w, void* y, int64_t rows, int64_t cols, float eps,
                  void* stream) {
  launch_norm(dt, x, r, w, y, rows, cols, eps, stream, "add_rms_norm");
}

void rope_store(DType dt, const void* qkv, const float* cos, const float* sin, const int64_t* positions,
                const int64_t* write_slots, void* q_out, void* k_layer, void* v_layer, int64_t n, int64_t H,
                int64_t KVH, int64_t D, void* stream) {
  check_dtype(dt);
  if (n < 0 || H < 1 || KVH < 1 || D < 2 || D % 2 != 0) bad("rope_store: expected n >= 0, H, KVH >= 1, even D >= 2");
  if (n == 0) return;
  const unsigned threads = static_cast<unsigned>(D / 2 < 128 ? (D / 2 + 31) / 32 * 32 : 128);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(H + 2 * KVH));
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    rope_store_kernel<T><<<grid, threads, 0, as_stream(stream)>>>(
        static_cast<const T*>(qkv), cos, sin, positions, write_slots, static_cast<T*>(q_out), static_cast<T*>(k_layer),
        static_cast<T*>(v_layer), H, KVH, D);
  });
  check(cudaGetLastError(), "rope_store launch");
}

void swiglu(DType dt, const void* gate_up, void* out, int64_t rows, int64_t inter, void* stream) {
  check_dtype(dt);
  if (rows < 0 || inter < 1) bad("swiglu: expected rows >= 0 and inter >= 1");
  if (rows == 0) return;
  const int64_t total = rows * inter;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    swiglu_kernel<T><<<blocks, 256, 0, as_stream(stream)>>>(static_cast<const T*>(gate_up), static_cast<T*>(out),
                                                             rows, inter);
  });
  check(cudaGetLastError(), "swiglu launch");
}

}  // namespace speclab::cuda
