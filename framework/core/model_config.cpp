#include "framework/core/model_config.h"

#include "framework/core/error.h"

namespace speclab {

namespace {
void require_positive(const std::string& source, const char* field, int64_t value) {
  if (value <= 0)
    throw Error(ErrorKind::kBadInput,
                "expected a positive integer, found " + std::to_string(value), source, field);
}
// Bounds far above any real model's, so that a corrupt or hostile header is refused before a
// loader sizes anything by it (a config.json with num_hidden_layers 2^31 - 1 filled memory first).
void require_at_most(const std::string& source, const char* field, int64_t value, int64_t max) {
  if (value > max)
    throw Error(ErrorKind::kBadInput,
                "expected at most " + std::to_string(max) + ", found " + std::to_string(value), source, field);
}
}  // namespace

void ModelConfig::validate(const std::string& source) const {
  require_positive(source, "vocab_size", vocab_size);
  require_positive(source, "hidden_size", hidden_size);
  require_positive(source, "intermediate_size", intermediate_size);
  require_positive(source, "num_hidden_layers", num_hidden_layers);
  require_positive(source, "num_attention_heads", num_attention_heads);
  require_positive(source, "num_key_value_heads", num_key_value_heads);
  require_positive(source, "head_dim", head_dim);
  require_positive(source, "max_position_embeddings", max_position_embeddings);
  require_at_most(source, "num_hidden_layers", num_hidden_layers, kMaxLayers);
  require_at_most(source, "num_attention_heads", num_attention_heads, kMaxHeads);
  require_at_most(source, "num_key_value_heads", num_key_value_heads, kMaxHeads);
  require_at_most(source, "max_position_embeddings", max_position_embeddings, kMaxPositions);
  // Products of two of these (heads x head_dim, vocab x hidden) stay far inside int64: a head_dim
  // of 2^62 + 8 wrapped num_attention_heads x head_dim round to the real q rows, passed the shape
  // check and crashed the model's construction (a bus error).
  require_at_most(source, "head_dim", head_dim, kMaxHeadDim);
  require_at_most(source, "hidden_size", hidden_size, kMaxWidth);
  require_at_most(source, "intermediate_size", intermediate_size, kMaxWidth);
  require_at_most(source, "vocab_size", vocab_size, kMaxWidth);
  if (num_attention_heads % num_key_value_heads != 0)
    throw Error(ErrorKind::kBadInput,
                "num_attention_heads (" + std::to_string(num_attention_heads) +
                    ") must be a multiple of num_key_value_heads (" +
                    std::to_string(num_key_value_heads) + ")",
                source, "num_key_value_heads");
  if (head_dim % 2 != 0)
    throw Error(ErrorKind::kBadInput, "head_dim must be even for RoPE, found " + std::to_string(head_dim),
                source, "head_dim");
  if (!(rope_theta > 0.0))
    throw Error(ErrorKind::kBadInput, "expected rope_theta > 0", source, "rope_theta");
  if (!(rms_norm_eps > 0.0))
    throw Error(ErrorKind::kBadInput, "expected rms_norm_eps > 0", source, "rms_norm_eps");
}

}  // namespace speclab
