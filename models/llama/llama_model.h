// LlamaModel — the one decoder implementation for Llama 2/3, SmolLM/SmolLM2, Qwen2, Mistral and
// llama2.c checkpoints: RMSNorm, RoPE (HF rotate_half layout, rope_theta), GQA, SwiGLU MLP,
// optional q/k/v bias, tied or untied embeddings. float32 on CPU (or the device of the weights).
//
// Stateless (STYLE.md §2): forward() reads and writes K/V only through the KvView it is given.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "models/model.h"

namespace speclab {

class LlamaModel : public Model {
 public:
  // Takes the weights out of `loaded` (its WeightMap is left empty) to avoid a second copy.
  explicit LlamaModel(LoadedModel& loaded);

  const ModelConfig& config() const override { return config_; }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                     const ForwardOptions& opts = {}) const override;
  uint64_t weight_bytes() const override { return weight_bytes_; }

 private:
  struct Layer {
    at::Tensor attn_norm;  // [hidden]
    at::Tensor w_qkv;      // [q_dim + 2*kv_dim, hidden] (q, k, v rows stacked)
    at::Tensor b_qkv;      // [q_dim + 2*kv_dim] or undefined
    at::Tensor w_o;        // [hidden, q_dim]
    at::Tensor mlp_norm;   // [hidden]
    at::Tensor w_gate_up;  // [2*intermediate, hidden] (gate rows, then up rows)
    at::Tensor w_down;     // [hidden, intermediate]
  };

  // x: [n, hidden] -> [n, hidden]
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  // x: [n, heads, head_dim]; cos/sin: [n, 1, head_dim/2] -> rotated copy
  at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;
  // x: [n, hidden] (residual stream, updated in place semantics by return)
  at::Tensor attention(int64_t layer, const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos,
                       const at::Tensor& sin, const KvView& kv) const;

  ModelConfig config_;
  std::vector<Layer> layers_;
  at::Tensor embed_;       // [vocab, hidden]
  at::Tensor final_norm_;  // [hidden]
  at::Tensor lm_head_;     // [vocab, hidden] (aliases embed_ when tied)
  at::Tensor rope_cos_;    // [max_pos, head_dim/2]
  at::Tensor rope_sin_;    // [max_pos, head_dim/2]
  uint64_t weight_bytes_ = 0;
};

}  // namespace speclab
