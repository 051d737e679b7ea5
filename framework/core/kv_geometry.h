// KvGeometry — the shape of one model's K/V per token: all a KV manager needs to know of a model
// to size a pool (framework/kv/kv_cache_manager.h). Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace speclab {

struct KvGeometry {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  // Where the storage lives and what it holds (the model's own placement, ModelConfig::device and
  // ::dtype): "cpu" or "cuda[:N]"; "float32", "bfloat16", "float16" or "int8".
  //
  // "int8" (CPU only): each kv head of each token is stored as head_dim int8 values q followed by
  // kInt8ScaleBytes bytes holding one float32 scale s (native byte order), the head's values being
  // q * s: head_dim + 4 bytes per stored head instead of 2 * head_dim for float16
  // (models/llama/kv_int8.h).
  std::string device = "cpu";
  std::string dtype = "float32";

  static constexpr int64_t kInt8ScaleBytes = 4;

  bool int8() const { return dtype == "int8"; }

  // Elements of one stored kv head: head_dim, or head_dim + kInt8ScaleBytes for int8. A pool's
  // storage is [n_layers, n_slots, n_kv_heads, stored_head_dim()] (kv_storage.h).
  int64_t stored_head_dim() const { return int8() ? head_dim + kInt8ScaleBytes : head_dim; }

  // Bytes of one stored K or V element: 4 for float32, 2 for the 16-bit types, 1 for int8.
  size_t element_bytes() const { return dtype == "float32" ? 4 : int8() ? 1 : 2; }

  // Bytes of K and V per token over all layers: 2 · layers · kv_heads · stored_head_dim · bytes.
  size_t bytes_per_token(size_t bytes_per_element) const {
    return 2 * static_cast<size_t>(n_layers) * static_cast<size_t>(n_kv_heads) *
           static_cast<size_t>(stored_head_dim()) * bytes_per_element;
  }
};

}  // namespace speclab
