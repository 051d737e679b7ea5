// Placement — where a LlamaModel runs and in which dtype (ModelSource::device, ::dtype), and the
// move of its weights there.
//
// The CPU with dtype auto is the native path: packed ggml blocks and float32 run on the CPU
// backend (cpu_backend.cpp). Every other placement is dense: each matrix is dequantized at load
// to float32 and converted to the dtype, then moved to the device, where the libtorch-op backend
// (aten_backend.cpp) runs it. Norm weights and biases take the dtype too; the RoPE tables stay
// float32 (RoPE is computed in float32, as HF does).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "models/llama/llama_weights.h"

namespace speclab {

// As written in a ModelSource: device "cpu" | "cuda" | "cuda:N", dtype "auto" | "float32" |
// "bfloat16" | "float16", kv_dtype "auto" | "float32" | "float16" | "int8" (CPU only; KvGeometry).
struct Placement {
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string kv_dtype = "auto";
};

struct ResolvedPlacement {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  bool dense = false;  // false: the native CPU path (packed blocks, CPU backend)
  std::string device_name = "cpu";  // "cpu" or "cuda:N"
  std::string dtype_name = "float32";
  at::ScalarType kv_dtype = at::kFloat;  // the K/V cache's
  std::string kv_dtype_name = "float32";
};

// Whether this process can run on CUDA: libtorch has its CUDA backend and the machine a GPU.
bool cuda_device_available();

// Resolves `p`: dtype auto is float32 native on the CPU and bfloat16 on CUDA; kv_dtype auto is
// the dtype here (LlamaModel makes it float16 when the native CPU path holds quantized blocks). Throws Error(kConfig, field "device") when CUDA is asked for and this libtorch has no
// CUDA or the machine no such GPU, naming what was found, and Error(kConfig, field "kv_dtype")
// for a CUDA cache in another dtype than the model's (the CUDA kernels read and write the cache
// in the model's dtype).
ResolvedPlacement resolve_placement(const Placement& p);

// The whole matrix as float32 [out, in] on the CPU: packed blocks and parts decoded.
at::Tensor dense_f32(const WeightMatrix& w);

// Moves every tensor of `w` to `p` (p.dense): matrices dense in p.dtype (packed storage and the
// int8 repacks dropped), vectors in p.dtype, RoPE tables float32; the LM head stays the same
// tensor as the embedding when `tied`.
void place_weights(LlamaWeights& w, const ResolvedPlacement& p, bool tied);

// Random weights of c's shapes, drawn on p's device in p's dtype (a synthetic model,
// models/loaders/synthetic.h): matrices N(0, 0.02^2), norms 1, biases 0, LM head untied; seeded.
LlamaWeights random_weights(const ModelConfig& c, const ResolvedPlacement& p, uint64_t seed);

// "float32", "bfloat16" or "float16".
const char* dtype_name(at::ScalarType t);

}  // namespace speclab
