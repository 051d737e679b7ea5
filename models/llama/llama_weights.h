// LlamaWeights — a decoder's weights as every backend reads them (models/llama/layer_loop.h),
// and `linear`, the one matrix product over them.
//
// A WeightMatrix [out, in] is held either as float32 or as packed ggml blocks (its on-disk
// quantization: is_packable's types, F16, BF16, Q4_0 to Q8_0, IQ4_NL, Q2_K to Q6_K and IQ4_XS; dequant.h). Stacked matrices
// (q/k/v, gate/up) whose parts have different packed types keep their parts: a part covers the
// output columns [offset, offset + part.out) of the stacked product.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/weights.h"

namespace speclab {

// How activations meet packed weights: float32 rows, or rows quantized per block to int8 and
// multiplied with integer dot products (models/llama/qgemm.h). Float32 weights always use f32.
enum class Activations { kF32, kInt8 };

// Parses "f32" | "int8" | "auto" (int8 for packed weights, the default); `what` names the option in errors.
Activations parse_activations(const std::string& text, const std::string& what);
const char* activations_name(Activations a);

struct WeightMatrix {
  at::Tensor f32;     // [out, in] float32, or undefined when packed
  at::Tensor packed;  // [out, row bytes] uint8 ggml blocks, or undefined
  uint32_t type = 0;  // ggml type id of `packed`
  int64_t out = 0, in = 0;
  std::vector<WeightMatrix> parts;  // non-empty: a stack of differently typed parts (f32/packed unset)
  at::Tensor x8;      // [x8_bytes] uint8: `packed` repacked for the int8 kernels (qgemm_x8.h), or undefined

  bool is_packed() const { return packed.defined(); }
  uint64_t bytes() const;
  // Storage kinds for weight_storage(): "Q4_1", "float32", or the parts' kinds.
  void count_kinds(std::vector<std::string>& kinds) const;
};

// Weight `name` from the loader's map, removed from it; packed blocks stay packed.
WeightMatrix take_matrix(WeightMap& w, const std::string& name);
// A float32 tensor (norms, biases) from the map, removed from it; packed storage is decoded.
at::Tensor take_vector(WeightMap& w, const std::string& name);
// Rows stacked in order ([sum of outs, in]); one block when all parts share one storage type,
// else a matrix of parts.
WeightMatrix stack(std::vector<WeightMatrix> parts);

// Adds the repacked copy (WeightMatrix::x8) to w and to each of its parts whose type the
// repacked int8 kernels take, when this CPU can run them (x8_cpu_supported(): AVX2); a no-op
// elsewhere. linear() uses it for int8 activations while x8_active() (kernel_isa() is not
// kScalar), else the ggml blocks.
void add_x8_repack(WeightMatrix& w);

// The matrix of w's rows `rows` ([k] int64, in that order): [k, w.in], same storage type. w must
// be a single block (no parts).
WeightMatrix select_rows(const WeightMatrix& w, const at::Tensor& rows);

// A float32 matrix w [out, in] in the storage that meets `act`: Q8_0 blocks (repacked with
// add_x8_repack) for int8 activations when in is a multiple of 32, else float32 (a copy).
WeightMatrix pack_f32_matrix(const at::Tensor& w, Activations act);

// y = x W^T (+ bias) on raw CPU buffers. x: [n, w.in]; bias: [w.out] or nullptr; y: [n, w.out].
// Packed weights run gemv.h's kernels with float32 activations or qgemm.h's (qgemm_x8.h's when
// repacked) with int8 ones;
// float32 weights gemm_small_f32. For n <= 32 row i of the result is bit-identical to a 1-row
// call on x[i] (what makes a verification row equal an AR step).
void linear(const WeightMatrix& w, const float* x, const float* bias, float* y, int64_t n, Activations act);

struct LlamaLayer {
  at::Tensor attn_norm;      // [hidden]
  WeightMatrix w_qkv;        // [q_dim + 2*kv_dim, hidden] (q, k, v rows stacked)
  at::Tensor b_qkv;          // [q_dim + 2*kv_dim] or undefined
  WeightMatrix w_o;          // [hidden, q_dim]
  at::Tensor mlp_norm;       // [hidden]
  WeightMatrix w_gate_up;    // [2*intermediate, hidden] (gate rows, then up rows)
  WeightMatrix w_down;       // [hidden, intermediate]
};

struct LlamaWeights {
  WeightMatrix embed;        // [vocab, hidden]
  at::Tensor final_norm;     // [hidden]
  WeightMatrix lm_head;      // [vocab, hidden] (aliases embed when tied)
  std::vector<LlamaLayer> layers;
  at::Tensor rope_cos;       // [max_pos, head_dim/2]
  at::Tensor rope_sin;       // [max_pos, head_dim/2]
};

// Whether any matrix of any layer (or a part of one) is kept in quantized ggml blocks (packed, of a
// type int8 activations multiply: not F16 or BF16).
bool any_layer_quantized(const LlamaWeights& w);

}  // namespace speclab
