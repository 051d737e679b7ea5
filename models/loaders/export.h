// export_gguf_layers() — writes a subset of a GGUF model's transformer blocks as a new,
// self-contained GGUF model (same tokenizer, chat template and embeddings), e.g. the first 6
// blocks of SmolLM2 as a draft model for speculative decoding (`speclab export`).
// Tensors keep GGUF's own layout (no RoPE permutation is involved); they are decoded to float32
// and re-encoded as `type`. Blocks are renumbered 0..n-1 in the order given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/loaders/dequant.h"

namespace speclab {

struct ExportOptions {
  std::vector<int64_t> layers;        // source block indices, ascending; empty = all
  GgmlType type = GgmlType::F32;      // F32, F16, Q8_0, Q4_0 or Q4_1 (1-D tensors stay F32)
  void validate(int64_t n_layers, const std::string& source) const;  // Error(kConfig) naming --layers
};

// Parses "0-5", "0,2,4", "0-3,8" into ascending indices; Error(kConfig, ..., option) naming the
// command-line option it came from (also for a layer listed twice or a list out of order).
std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& option = "--layers");
// "f32" | "f16" | "q8_0" | "q4_0" | "q4_1" -> GgmlType; Error(kConfig, ..., "--type").
GgmlType parse_export_type(const std::string& text);

void export_gguf_layers(const std::string& source_path, const std::string& out_path, const ExportOptions& options);

}  // namespace speclab
