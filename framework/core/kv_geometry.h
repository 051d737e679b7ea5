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
  // ::dtype): "cpu" or "cuda[:N]"; "float32", "bfloat16" or "float16".
  std::string device = "cpu";
  std::string dtype = "float32";

  // Bytes of one stored K or V element: 4 for float32, 2 for the 16-bit types.
  size_t element_bytes() const { return dtype == "float32" ? 4 : 2; }

  // Bytes of K and V per token over all layers: 2 · layers · kv_heads · head_dim · bytes.
  size_t bytes_per_token(size_t bytes_per_element) const {
    return 2 * static_cast<size_t>(n_layers) * static_cast<size_t>(n_kv_heads) * static_cast<size_t>(head_dim) *
           bytes_per_element;
  }
};

}  // namespace speclab
