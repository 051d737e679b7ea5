// LlamaModel — the one decoder implementation for Llama 2/3, SmolLM/SmolLM2, Qwen2, Mistral and
// llama2.c checkpoints: RMSNorm, RoPE (HF rotate_half layout, rope_theta), GQA, SwiGLU MLP,
// optional q/k/v bias, tied or untied embeddings. float32 on CPU (or the device of the weights).
//
// Stateless (STYLE.md §2): forward() reads and writes K/V only through the KvView it is given.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/model.h"
#include "models/loaded_model.h"

namespace speclab {

class LlamaModel : public Model {
 public:
  // Takes the weights out of `loaded` (its WeightMap is left empty) to avoid a second copy.
  explicit LlamaModel(LoadedModel& loaded);

  const ModelConfig& config() const override { return config_; }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                     const ForwardOptions& opts = {}) const override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::string weight_storage() const override { return weight_storage_; }

 private:
  // A weight matrix [out, in]: float32 (`f32`), or packed ggml blocks (`packed`: uint8
  // [out, row bytes], `type` a Q4_0/Q4_1/Q8_0 id; see HostTensor::is_packed).
  struct Matrix {
    at::Tensor f32;
    at::Tensor packed;
    uint32_t type = 0;
    int64_t out = 0, in = 0;
    bool is_packed() const { return packed.defined(); }
    uint64_t bytes() const;
  };
  // Weight `name` from the loader's map (removed from it); packed blocks stay packed.
  static Matrix take_matrix(WeightMap& w, const std::string& name);
  // Rows stacked in order ([sum of outs, in]); packed only when all parts share one type.
  static Matrix stack(std::vector<Matrix> parts);
  // x: [n, in] -> [n, out]
  static at::Tensor dense(const at::Tensor& x, const Matrix& w, const at::Tensor& b = {});

  struct Layer {
    at::Tensor attn_norm;  // [hidden]
    Matrix w_qkv;          // [q_dim + 2*kv_dim, hidden] (q, k, v rows stacked)
    at::Tensor b_qkv;      // [q_dim + 2*kv_dim] or undefined
    Matrix w_o;            // [hidden, q_dim]
    at::Tensor mlp_norm;   // [hidden]
    Matrix w_gate_up;      // [2*intermediate, hidden] (gate rows, then up rows)
    Matrix w_down;         // [hidden, intermediate]
  };

  // y: [n, w.out] = x: [n, w.in] W^T (+ bias: [w.out]); raw CPU buffers, gemv.h kernels.
  static void matmul(const Matrix& w, const float* x, const float* bias, float* y, int64_t n);
  // opts.layers, or every layer when it is empty; throws on an index out of range.
  std::vector<int64_t> layers_to_run(const ForwardOptions& opts) const;
  // Checks opts.hidden_layers against the layers that run and sizes *opts.hidden_out.
  void prepare_hidden(const ForwardOptions& opts) const;
  // x: [n, hidden], the residual stream after layer `l`: copied into every opts.hidden_out
  // entry that asks for l.
  static void keep_hidden(const ForwardOptions& opts, int64_t l, const at::Tensor& x);
  // Whether forward_cpu can serve this call (CPU float32 contiguous caches and weights).
  bool can_run_cpu(const KvView& kv) const;
  // Two implementations of forward() with the same math (llama_cpu.cpp explains the split):
  // forward_cpu on raw buffers (the default on the CPU), forward_aten with libtorch ops (other
  // devices, and ForwardOptions::aten_reference). Arguments as forward().
  at::Tensor forward_cpu(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                         const ForwardOptions& opts) const;
  at::Tensor forward_aten(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                          const ForwardOptions& opts) const;

  // x: [n, hidden] -> [n, hidden]
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  // x: [n, heads, head_dim]; cos/sin: [n, 1, head_dim/2] -> rotated copy
  at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;
  // x: [n, hidden] (residual stream, updated in place semantics by return)
  at::Tensor attention(int64_t layer, const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos,
                       const at::Tensor& sin, const KvView& kv) const;

  ModelConfig config_;
  std::vector<Layer> layers_;
  Matrix embed_;           // [vocab, hidden]
  at::Tensor final_norm_;  // [hidden]
  Matrix lm_head_;         // [vocab, hidden] (aliases embed_ when tied)
  at::Tensor rope_cos_;    // [max_pos, head_dim/2]
  at::Tensor rope_sin_;    // [max_pos, head_dim/2]
  uint64_t weight_bytes_ = 0;
  std::string weight_storage_;
};

}  // namespace speclab
