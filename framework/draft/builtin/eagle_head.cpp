#include "framework/draft/builtin/eagle_head.h"

#include <ATen/ATen.h>

#include "framework/core/error.h"
#include "framework/core/rng.h"

namespace speclab {

std::string eagle_layer_prefix(int64_t l) { return l == 0 ? "layer." : "layers." + std::to_string(l) + "."; }

std::map<std::string, at::Tensor*> EagleHead::trained() {
  std::map<std::string, at::Tensor*> out;
  for (int64_t l = 0; l < n_layers(); ++l) {
    const auto named = layers[static_cast<size_t>(l)].named(eagle_layer_prefix(l));
    out.insert(named.begin(), named.end());
  }
  out["fc.weight"] = &fc_weight;
  out["fc.bias"] = &fc_bias;
  return out;
}

std::map<std::string, const at::Tensor*> EagleHead::trained() const {
  std::map<std::string, const at::Tensor*> out;
  for (const auto& kv : const_cast<EagleHead*>(this)->trained()) out[kv.first] = kv.second;
  return out;
}

EagleHead init_eagle_head(const ModelConfig& c, uint64_t seed, const std::vector<int64_t>& aux_layers,
                          int64_t n_layers) {
  const int64_t d = c.hidden_size;
  SPECLAB_CHECK(d > 0, "eagle head: the target config has no shapes");
  SPECLAB_CHECK(n_layers >= 1, "eagle head: at least one decoder layer");
  Rng rng(seed);
  EagleHead h;
  h.target = c;
  h.aux_layers = aux_layers;
  h.fc_weight = normal_tensor(rng, {d, 2 * d}, 0.02);
  h.fc_bias = at::zeros({d}, at::kFloat);
  ModelConfig no_bias = c;  // the head's layer has no q/k/v biases, whatever the target's
  no_bias.attention_bias = false;
  h.layers.push_back(init_decoder_layer(no_bias, rng));
  if (!aux_layers.empty()) h.fc_weight = at::cat({h.fc_weight, normal_tensor(rng, {d, h.aux_width()}, 0.02)}, 1);
  for (int64_t l = 1; l < n_layers; ++l) h.layers.push_back(init_decoder_layer(no_bias, rng));
  return h;
}

at::Tensor target_features(const at::Tensor& hidden, const at::Tensor& final_norm, double eps) {
  return rms_norm_rows(hidden, final_norm, eps);
}

at::Tensor eagle_features(const EagleHead& head, const at::Tensor& hidden) {
  return target_features(hidden, head.final_norm, head.target.rms_norm_eps);
}

at::Tensor eagle_aux_features(const at::Tensor& hidden, double eps) {
  return rms_norm_rows(hidden, at::ones({hidden.size(1)}, at::kFloat), eps);
}

at::Tensor eagle_input(const EagleHead& head, const at::Tensor& features, const at::Tensor& next_tokens,
                       const at::Tensor& aux) {
  const at::Tensor e = head.embed.index_select(0, next_tokens);
  const int64_t w = head.aux_width();
  if (w == 0) return at::linear(at::cat({features, e}, -1), head.fc_weight, head.fc_bias);
  SPECLAB_CHECK(!aux.defined() || (aux.dim() == 2 && aux.size(0) == features.size(0) && aux.size(1) == w),
                "eagle_input: aux rows must be [n, " + std::to_string(w) + "]");
  const at::Tensor a = aux.defined() ? aux : at::zeros({features.size(0), w}, features.options());
  return at::linear(at::cat({features, e, a}, -1), head.fc_weight, head.fc_bias);
}

EagleQkv eagle_qkv(const EagleHead& head, int64_t l, const at::Tensor& x, const at::Tensor& positions) {
  return decoder_qkv(head.target, head.layers.at(static_cast<size_t>(l)), x, positions);
}

at::Tensor eagle_attend(const EagleHead& head, int64_t l, const at::Tensor& x, const EagleQkv& qkv,
                        const at::Tensor& k_ctx, const at::Tensor& v_ctx, const at::Tensor& allowed) {
  return decoder_attend(head.target, head.layers.at(static_cast<size_t>(l)), x, qkv, k_ctx, v_ctx, allowed);
}

at::Tensor eagle_logits(const EagleHead& head, const at::Tensor& predicted) { return at::linear(predicted, head.lm_head); }

at::Tensor eagle_forward_packed(const EagleHead& head, const at::Tensor& features, const at::Tensor& next_tokens,
                                const at::Tensor& positions, const at::Tensor& segments, const at::Tensor& aux) {
  at::Tensor x = eagle_input(head, features, next_tokens, aux);
  for (const DecoderLayerWeights& w : head.layers) x = decoder_layer_packed(head.target, w, x, positions, segments);
  return x;
}

std::vector<at::Tensor> eagle_forward_unrolled(const EagleHead& head, const at::Tensor& features,
                                               const at::Tensor& next_tokens, const at::Tensor& positions,
                                               const at::Tensor& segments, int64_t steps, bool detach_inputs,
                                               const at::Tensor& aux) {
  SPECLAB_CHECK(steps >= 1, "eagle_forward_unrolled: steps < 1");
  const int64_t n = features.size(0);
  const at::Tensor idx = at::arange(n, at::kLong);
  const at::Tensor same = segments.unsqueeze(1).eq(segments.unsqueeze(0));  // [n, n]
  const at::Tensor lag = idx.unsqueeze(1) - idx.unsqueeze(0);                 // [n, n] r - c
  const size_t L = head.layers.size();
  std::vector<at::Tensor> preds;
  std::vector<std::vector<at::Tensor>> ks(L), vs(L);  // [layer][step m] K/V of step m
  at::Tensor input = features;
  for (int64_t k = 1; k <= steps; ++k) {
    if (k > 1) {
      // Row r's input: step k-1's prediction at row r - 1 (row 0 keeps its own feature; it is
      // never a valid step-k row).
      const at::Tensor prev = detach_inputs ? preds.back().detach() : preds.back();
      input = n > 1 ? at::cat({features.narrow(0, 0, 1), prev.narrow(0, 0, n - 1)}, 0) : features;
    }
    // Block m of the context (step m's K/V): step 1 rows c <= r - k + 1, step m > 1 row
    // c == r - k + m; all within r's sequence.
    std::vector<at::Tensor> blocks;
    for (int64_t m = 1; m <= k; ++m) blocks.push_back(same.logical_and(m == 1 ? lag.ge(k - 1) : lag.eq(k - m)));
    const at::Tensor allowed = k == 1 ? blocks[0] : at::cat(blocks, 1);
    at::Tensor x = eagle_input(head, input, next_tokens, k == 1 ? aux : at::Tensor());
    for (size_t l = 0; l < L; ++l) {
      const EagleQkv qkv = eagle_qkv(head, static_cast<int64_t>(l), x, positions);
      ks[l].push_back(qkv.k);
      vs[l].push_back(qkv.v);
      const at::Tensor k_ctx = k == 1 ? qkv.k : at::cat(ks[l], 0), v_ctx = k == 1 ? qkv.v : at::cat(vs[l], 0);
      x = eagle_attend(head, static_cast<int64_t>(l), x, qkv, k_ctx, v_ctx, allowed);
    }
    preds.push_back(x);
  }
  return preds;
}

}  // namespace speclab
