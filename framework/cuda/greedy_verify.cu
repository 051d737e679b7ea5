#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/cuda/greedy_verify.h"

namespace speclab::cuda {

namespace {

constexpr int kThreads = 256;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(ErrorKind::kResource, std::string(what) + ": " + cudaGetErrorString(err), "cuda");
}

// One block per row: each thread scans a strided slice, then a shared-memory tree reduction keeps
// (max value, lowest index).
__global__ void row_argmax_kernel(const float* __restrict__ logits, int32_t vocab, int32_t* __restrict__ out) {
  __shared__ float best_val[kThreads];
  __shared__ int32_t best_idx[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float v = -INFINITY;
  int32_t idx = vocab;  // sentinel larger than any index
  for (int32_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = row[j];
    if (x > v || (x == v && j < idx)) {
      v = x;
      idx = j;
    }
  }
  best_val[threadIdx.x] = v;
  best_idx[threadIdx.x] = idx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = best_val[threadIdx.x + s];
      const int32_t oi = best_idx[threadIdx.x + s];
      if (ov > best_val[threadIdx.x] || (ov == best_val[threadIdx.x] && oi < best_idx[threadIdx.x])) {
        best_val[threadIdx.x] = ov;
        best_idx[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_idx[0] == vocab ? 0 : best_idx[0];
}

}  // namespace

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int32_t greedy_verify(const float* logits_dev, int32_t rows, int32_t vocab, const int32_t* draft_host,
                      int32_t* argmax_host) {
  if (rows <= 0 || vocab <= 0)
    throw Error(ErrorKind::kBadInput, "expected rows > 0 and vocab > 0", "cuda", "greedy_verify");
  int32_t* out_dev = nullptr;
  check(cudaMalloc(&out_dev, sizeof(int32_t) * rows), "cudaMalloc");
  row_argmax_kernel<<<rows, kThreads>>>(logits_dev, vocab, out_dev);
  cudaError_t launch = cudaGetLastError();
  cudaError_t copy = cudaMemcpy(argmax_host, out_dev, sizeof(int32_t) * rows, cudaMemcpyDeviceToHost);
  cudaFree(out_dev);
  check(launch, "row_argmax_kernel launch");
  check(copy, "cudaMemcpy");
  int32_t n = 0;
  while (n < rows - 1 && draft_host[n] == argmax_host[n]) ++n;
  return n;
}

int32_t greedy_verify_host(const float* logits_host, int32_t rows, int32_t vocab, const int32_t* draft_host,
                           int32_t* argmax_host) {
  float* dev = nullptr;
  const size_t bytes = sizeof(float) * static_cast<size_t>(rows) * static_cast<size_t>(vocab);
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  cudaError_t copy = cudaMemcpy(dev, logits_host, bytes, cudaMemcpyHostToDevice);
  if (copy != cudaSuccess) {
    cudaFree(dev);
    check(copy, "cudaMemcpy");
  }
  int32_t n = 0;
  try {
    n = greedy_verify(dev, rows, vocab, draft_host, argmax_host);
  } catch (...) {
    cudaFree(dev);
    throw;
  }
  cudaFree(dev);
  return n;
}

}  // namespace speclab::cuda
