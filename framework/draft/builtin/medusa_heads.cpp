#include "framework/draft/builtin/medusa_heads.h"

#include <ATen/ATen.h>

#include "framework/core/error.h"

namespace speclab {

std::map<std::string, at::Tensor*> MedusaHeads::trained() {
  std::map<std::string, at::Tensor*> out;
  for (size_t k = 0; k < weight.size(); ++k) {
    out["heads." + std::to_string(k) + ".weight"] = &weight[k];
    out["heads." + std::to_string(k) + ".bias"] = &bias[k];
  }
  return out;
}

std::map<std::string, const at::Tensor*> MedusaHeads::trained() const {
  std::map<std::string, const at::Tensor*> out;
  for (const auto& kv : const_cast<MedusaHeads*>(this)->trained()) out[kv.first] = kv.second;
  return out;
}

MedusaHeads init_medusa_heads(const ModelConfig& target, int64_t n_heads) {
  const int64_t d = target.hidden_size;
  SPECLAB_CHECK(d > 0 && n_heads >= 1, "medusa heads: the target config has no shapes, or no head asked for");
  MedusaHeads h;
  h.target = target;
  for (int64_t k = 0; k < n_heads; ++k) {
    h.weight.push_back(at::zeros({d, d}, at::kFloat));
    h.bias.push_back(at::zeros({d}, at::kFloat));
  }
  return h;
}

at::Tensor medusa_features(const MedusaHeads& heads, const at::Tensor& hidden) {
  return target_features(hidden, heads.final_norm, heads.target.rms_norm_eps);
}

at::Tensor medusa_hidden(const MedusaHeads& heads, int64_t k, const at::Tensor& features) {
  SPECLAB_CHECK(k >= 1 && k <= heads.n_heads(), "medusa: head " + std::to_string(k) + " out of range");
  return features + at::silu(at::linear(features, heads.weight[static_cast<size_t>(k - 1)],
                                        heads.bias[static_cast<size_t>(k - 1)]));
}

at::Tensor medusa_logits(const MedusaHeads& heads, int64_t k, const at::Tensor& features) {
  return at::linear(medusa_hidden(heads, k, features), heads.lm_head);
}

}  // namespace speclab
