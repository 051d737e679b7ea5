#include "models/weights.h"

#include <algorithm>
#include <type_traits>

#include "framework/core/error.h"

namespace speclab {

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t HostTensor::row_bytes() const {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  if (rows <= 0) return 0;
  return is_packed() ? static_cast<int64_t>(packed.size()) / rows : numel() / rows * static_cast<int64_t>(sizeof(float));
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::map<std::string, std::vector<int64_t>> expected_weight_shapes(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> out;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  out["model.embed_tokens.weight"] = {c.vocab_size, c.hidden_size};
  out["model.norm.weight"] = {c.hidden_size};
  if (!c.tie_word_embeddings) out["lm_head.weight"] = {c.vocab_size, c.hidden_size};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out[p + "input_layernorm.weight"] = {c.hidden_size};
    out[p + "post_attention_layernorm.weight"] = {c.hidden_size};
    out[p + "self_attn.q_proj.weight"] = {q_dim, c.hidden_size};
    out[p + "self_attn.k_proj.weight"] = {kv_dim, c.hidden_size};
    out[p + "self_attn.v_proj.weight"] = {kv_dim, c.hidden_size};
    out[p + "self_attn.o_proj.weight"] = {c.hidden_size, q_dim};
    if (c.attention_bias) {
      out[p + "self_attn.q_proj.bias"] = {q_dim};
      out[p + "self_attn.k_proj.bias"] = {kv_dim};
      out[p + "self_attn.v_proj.bias"] = {kv_dim};
    }
    out[p + "mlp.gate_proj.weight"] = {c.intermediate_size, c.hidden_size};
    out[p + "mlp.up_proj.weight"] = {c.intermediate_size, c.hidden_size};
    out[p + "mlp.down_proj.weight"] = {c.hidden_size, c.intermediate_size};
  }
  return out;
}

void validate_weights(const ModelConfig& config, const WeightMap& weights, const std::string& source) {
  for (const auto& [name, shape] : expected_weight_shapes(config)) {
    auto it = weights.find(name);
    if (it == weights.end())
      throw Error(ErrorKind::kBadInput, "required tensor is missing (expected shape " +
                                            shape_to_string(shape) + ")",
                  source, name);
    if (it->second.shape != shape)
      throw Error(ErrorKind::kBadInput,
                  "tensor shape disagrees with the config: expected " + shape_to_string(shape) +
                      ", found " + shape_to_string(it->second.shape),
                  source, name);
    const HostTensor& t = it->second;
    const bool size_ok = t.is_packed() ? (t.shape.size() == 2 && !t.packed.empty() && t.data.empty() &&
                                          t.packed.size() % static_cast<size_t>(t.shape[0]) == 0)
                                       : static_cast<int64_t>(t.data.size()) == t.numel();
    if (!size_ok)
      throw Error(ErrorKind::kInternal, "tensor data size does not match its shape", source, name);
  }
}

namespace {
// Reorders the rows of each head. `to_hf`: row (2j + r) of the interleaved layout becomes row
// (r * half + j) of the rotate_half layout; the reverse when !to_hf.
void reorder_rope_rows(HostTensor& t, int64_t n_heads, bool to_hf) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  const int64_t cols = t.shape.size() > 1 ? t.numel() / rows : 1;
  if (rows % n_heads != 0 || (rows / n_heads) % 2 != 0)
    throw Error(ErrorKind::kBadInput, "cannot reorder RoPE rows: " + std::to_string(rows) +
                                          " rows do not split into " + std::to_string(n_heads) +
                                          " heads of even size");
  const int64_t head_dim = rows / n_heads, half = head_dim / 2;
  // Whole rows move, so packed rows (blocks run along a row) move as bytes.
  auto reorder = [&](auto& v, int64_t stride) {
    std::remove_reference_t<decltype(v)> out(v.size());
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t j = 0; j < half; ++j)
        for (int64_t r = 0; r < 2; ++r) {
          const int64_t interleaved = h * head_dim + 2 * j + r;
          const int64_t rotate_half = h * head_dim + r * half + j;
          const int64_t src = to_hf ? interleaved : rotate_half;
          const int64_t dst = to_hf ? rotate_half : interleaved;
          std::copy(v.begin() + src * stride, v.begin() + (src + 1) * stride, out.begin() + dst * stride);
        }
    v.swap(out);
  };
  if (t.is_packed())
    reorder(t.packed, static_cast<int64_t>(t.packed.size()) / rows);
  else
    reorder(t.data, cols);
}
}  // namespace

void unpermute_rope_rows(HostTensor& t, int64_t n_heads) { reorder_rope_rows(t, n_heads, true); }
void permute_rope_rows(HostTensor& t, int64_t n_heads) { reorder_rope_rows(t, n_heads, false); }

}  // namespace speclab
