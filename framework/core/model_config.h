// ModelConfig — part of the framework's model contract (framework/core/model.h): the
// hyper-parameters of a Llama-family decoder (Llama 2/3, SmolLM/SmolLM2,
// Qwen2, Mistral, llama2.c). Field names follow HF `config.json` so that researchers can map
// them one to one. Every loader fills one of these and calls validate().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/kv_geometry.h"

namespace speclab {

struct ModelConfig {
  std::string architecture = "llama";  // "llama", "qwen2", "mistral" (informational)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;              // model dim
  int64_t intermediate_size = 0;        // SwiGLU hidden dim
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;      // GQA: divides num_attention_heads
  int64_t head_dim = 0;                 // usually hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;  // context length
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;     // lm_head shares model.embed_tokens.weight
  bool attention_bias = false;          // q/k/v projections carry a bias (Qwen2)
  // Where the built model runs, set by the model from its ModelSource (never read from a file):
  // "cpu" or "cuda[:N]", the dtype of its activations ("float32", "bfloat16" or "float16") and
  // that of its K/V cache (the same names, or "int8" on the CPU; empty: as dtype). KV managers allocate their storage
  // there (kv_geometry()).
  std::string device = "cpu";
  std::string dtype = "float32";
  std::string kv_dtype;

  // Throws Error(kBadInput) naming `source` and the offending field when a value is
  // missing, non-positive, above the bounds below or inconsistent (e.g. heads not divisible by
  // kv heads).
  void validate(const std::string& source) const;
  // Far above any real model's (Llama 3.1 405B: 126 layers, 128 heads): a header beyond them is
  // corrupt, and is refused before a loader sizes anything by it.
  static constexpr int64_t kMaxLayers = 4096;
  static constexpr int64_t kMaxHeads = 4096;
  // Above the longest real configs (Gradient's Llama-3-8B-Instruct-4194k: 4,194,304 positions).
  // The model's RoPE tables hold every position (8 bytes per position and head_dim / 2: 2 GiB at
  // this bound with head_dim 128), so a corrupt value ran the load out of memory naming no field.
  static constexpr int64_t kMaxPositions = int64_t{1} << 23;
  static constexpr int64_t kMaxHeadDim = int64_t{1} << 16;
  static constexpr int64_t kMaxWidth = int64_t{1} << 24;  // hidden_size, intermediate_size, vocab_size

  // Bytes of K and V per token over all layers: 2 · layers · kv_heads · stored_head_dim · bytes
  // (KvGeometry::bytes_per_token).
  size_t kv_bytes_per_token(size_t bytes_per_element) const { return kv_geometry().bytes_per_token(bytes_per_element); }
  // The shape of this model's K/V (what a KV manager pool is sized by).
  KvGeometry kv_geometry() const {
    return {num_hidden_layers, num_key_value_heads, head_dim, device, kv_dtype.empty() ? dtype : kv_dtype};
  }
};

}  // namespace speclab
