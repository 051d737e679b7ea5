#include "framework/train/small_draft.h"

#include <ATen/ATen.h>

#include "framework/core/error.h"

namespace speclab {

namespace {

std::string layer_prefix(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

}  // namespace

std::map<std::string, at::Tensor*> SmallDraft::trained() {
  std::map<std::string, at::Tensor*> out;
  for (size_t l = 0; l < layers.size(); ++l) {
    auto named = layers[l].named(layer_prefix(static_cast<int64_t>(l)));
    out.insert(named.begin(), named.end());
  }
  out["model.norm.weight"] = &final_norm;
  return out;
}

std::map<std::string, const at::Tensor*> SmallDraft::trained() const {
  std::map<std::string, const at::Tensor*> out;
  for (const auto& kv : const_cast<SmallDraft*>(this)->trained()) out[kv.first] = kv.second;
  return out;
}

SmallDraft init_small_draft(const ModelConfig& target, const std::map<std::string, at::Tensor>& w,
                            const std::vector<int64_t>& draft_layers) {
  if (draft_layers.empty() || draft_layers.size() > 8)
    throw Error(ErrorKind::kConfig, "expected 1 to 8 target layer indices to start the draft's layers from",
                "train-draft", "head.draft_layers");
  SmallDraft d;
  d.config = target;
  d.config.num_hidden_layers = static_cast<int64_t>(draft_layers.size());
  auto take = [&](const std::string& name) {
    auto it = w.find(name);
    if (it == w.end()) throw Error(ErrorKind::kBadInput, "the target has no tensor " + name, "train-draft");
    return it->second.detach().to(at::kFloat).clone();
  };
  for (int64_t src : draft_layers) {
    if (src < 0 || src >= target.num_hidden_layers)
      throw Error(ErrorKind::kConfig,
                  "layer " + std::to_string(src) + " is out of range: the target has layers 0.." +
                      std::to_string(target.num_hidden_layers - 1),
                  "train-draft", "head.draft_layers");
    DecoderLayerWeights L;
    for (auto& kv : L.named(layer_prefix(src))) *kv.second = take(kv.first);
    if (target.attention_bias)
      for (auto [name, t] : {std::pair<const char*, at::Tensor*>{"q", &L.q_bias}, {"k", &L.k_bias}, {"v", &L.v_bias}})
        *t = take(layer_prefix(src) + "self_attn." + name + "_proj.bias");
    d.layers.push_back(std::move(L));
  }
  d.final_norm = take("model.norm.weight");
  return d;
}

at::Tensor small_draft_logits_packed(const SmallDraft& d, const at::Tensor& tokens, const at::Tensor& positions,
                                     const at::Tensor& segments) {
  const at::Tensor mask = causal_segment_mask(segments);
  at::Tensor x = d.embed.index_select(0, tokens);
  for (const DecoderLayerWeights& L : d.layers) {
    const LayerQkv qkv = decoder_qkv(d.config, L, x, positions);
    x = decoder_attend(d.config, L, x, qkv, qkv.k, qkv.v, mask);
  }
  return at::linear(rms_norm_rows(x, d.final_norm, d.config.rms_norm_eps), d.lm_head);
}

}  // namespace speclab
