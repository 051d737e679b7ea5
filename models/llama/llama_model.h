// LlamaModel — the one decoder implementation for Llama 2/3, SmolLM/SmolLM2, Qwen2, Mistral and
// llama2.c checkpoints: RMSNorm, RoPE (HF rotate_half layout, rope_theta), GQA, SwiGLU MLP,
// optional q/k/v bias, tied or untied embeddings. float32 activations, or int8 against packed
// weights; the layer loop is models/llama/layer_loop.h, run by one backend per device.
//
// Stateless (STYLE.md §2): forward() reads and writes K/V only through the KvView it is given.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/model.h"
#include "models/llama/llama_weights.h"
#include "models/loaded_model.h"

namespace speclab {

class LlamaModel : public Model {
 public:
  // Takes the weights out of `loaded` (its WeightMap is left empty) to avoid a second copy.
  // `activations`: how activations meet packed weights (llama_weights.h).
  explicit LlamaModel(LoadedModel& loaded, Activations activations = Activations::kInt8);

  const ModelConfig& config() const override { return config_; }
  // Runs the layer loop (layer_loop.h) on the backend of the KV storage's device: the CPU
  // backend (cpu_backend.cpp) for float32 host caches and host weights, else the libtorch-op
  // backend (aten_backend.cpp), which ForwardOptions::aten_reference also selects.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                     const ForwardOptions& opts = {}) const override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::string weight_storage() const override { return weight_storage_; }
  Activations activations() const { return activations_; }
  // kMaxRowExact (32) for host weights: the CPU backend's matmuls (gemv.h, qgemm.h), attention
  // (attention_cpu.h) and row operations compute each row independently of the batch.
  int64_t row_exact_batch() const override;

 private:
  // opts.layers, or every layer when it is empty; throws on an index out of range.
  std::vector<int64_t> layers_to_run(const ForwardOptions& opts) const;
  // Checks opts.hidden_layers against the layers that run and sizes *opts.hidden_out.
  void prepare_hidden(const ForwardOptions& opts) const;
  // Whether the CPU backend can serve this call (CPU float32 contiguous caches and weights).
  bool can_run_cpu(const KvView& kv) const;
  // The two backends' entry points; arguments as forward().
  at::Tensor forward_cpu(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                         const ForwardOptions& opts) const;
  at::Tensor forward_aten(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                          const ForwardOptions& opts) const;

  ModelConfig config_;
  LlamaWeights w_;
  Activations activations_;
  uint64_t weight_bytes_ = 0;
  std::string weight_storage_;
};

}  // namespace speclab
