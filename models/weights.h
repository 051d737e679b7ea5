// HostTensor and WeightMap — torch-free, loader-side storage for model weights.
//
// Loaders (GGUF, safetensors, llama2.c) produce float32 row-major tensors with PyTorch/HF
// shape order (outermost dimension first) and *canonical HF names and layouts*:
//   model.embed_tokens.weight                    [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight      [hidden]
//   model.layers.{i}.self_attn.q_proj.weight     [heads*head_dim, hidden]   (HF rotate_half layout)
//   model.layers.{i}.self_attn.k_proj.weight     [kv_heads*head_dim, hidden] (HF rotate_half layout)
//   model.layers.{i}.self_attn.v_proj.weight     [kv_heads*head_dim, hidden]
//   model.layers.{i}.self_attn.{q,k,v}_proj.bias [out]                      (only if attention_bias)
//   model.layers.{i}.self_attn.o_proj.weight     [hidden, heads*head_dim]
//   model.layers.{i}.post_attention_layernorm.weight [hidden]
//   model.layers.{i}.mlp.gate_proj.weight        [intermediate, hidden]
//   model.layers.{i}.mlp.up_proj.weight          [intermediate, hidden]
//   model.layers.{i}.mlp.down_proj.weight        [hidden, intermediate]
//   model.norm.weight                            [hidden]
//   lm_head.weight                               [vocab, hidden]  (absent if tie_word_embeddings)
// Formats whose q/k use the interleaved (Meta / GGUF "llama") RoPE layout are un-permuted by
// their loader with unpermute_rope_rows(), so the model has a single RoPE code path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/model_config.h"

namespace speclab {

struct HostTensor {
  std::vector<int64_t> shape;  // outermost first
  std::vector<float> data;     // row-major, product(shape) elements (empty when packed)

  // Packed storage: a 2-D matrix kept in the quantized blocks it had on disk (GGUF Q4_0, Q4_1,
  // Q8_0) so that the model's matmul kernels read ~5-8.5 bits per weight instead of 32.
  // `storage_type` is the ggml type id (0 = F32 in `data`); when it is not 0, `data` is empty and
  // `packed` holds shape[0] rows of row_bytes() bytes each, blocks running along shape[1].
  uint32_t storage_type = 0;
  std::vector<uint8_t> packed;

  int64_t numel() const;
  bool is_packed() const { return storage_type != 0; }
  // Bytes of one row (outermost index) in memory: packed.size() / shape[0], or 4 * the row's floats.
  int64_t row_bytes() const;
  // Bytes held in memory (packed or float32).
  uint64_t bytes() const { return is_packed() ? packed.size() : data.size() * sizeof(float); }
};

using WeightMap = std::map<std::string, HostTensor>;

// The names of the tensors a model with `config` needs, with their expected shapes.
std::map<std::string, std::vector<int64_t>> expected_weight_shapes(const ModelConfig& config);

// Throws Error(kBadInput) naming `source` and the tensor when a required tensor is missing or
// its shape disagrees with the config ("expected [576, 576], found [576, 192]").
void validate_weights(const ModelConfig& config, const WeightMap& weights, const std::string& source);

// Meta/GGUF interleaved RoPE rows -> HF rotate_half rows, for a [n_heads*head_dim, in] weight
// (or a [n_heads*head_dim] bias, with cols = 1). Inverse of HF's convert script `permute`.
void unpermute_rope_rows(HostTensor& t, int64_t n_heads);
// HF rotate_half rows -> Meta/GGUF interleaved rows (what convert_hf_to_gguf.py writes).
void permute_rope_rows(HostTensor& t, int64_t n_heads);

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace speclab
