#include "framework/draft/builtin/decoder_layer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"

namespace speclab {

namespace {

// HF rotate_half RoPE over the last dim of x [n, heads, hd].
at::Tensor rope(const at::Tensor& x, const at::Tensor& positions /*[n]*/, double theta) {
  const int64_t hd = x.size(2), half = hd / 2;
  const at::Tensor inv = at::pow(theta, at::arange(0, half, at::kDouble) * (-2.0 / static_cast<double>(hd)));
  const at::Tensor ang = at::outer(positions.to(at::kDouble), inv).to(at::kFloat);  // [n, half]
  const at::Tensor cos = at::cat({ang.cos(), ang.cos()}, -1).unsqueeze(1);             // [n, 1, hd]
  const at::Tensor sin = at::cat({ang.sin(), ang.sin()}, -1).unsqueeze(1);
  const at::Tensor rot = at::cat({-x.narrow(2, half, half), x.narrow(2, 0, half)}, -1);
  return x * cos + rot * sin;
}

}  // namespace

std::map<std::string, at::Tensor*> DecoderLayerWeights::named(const std::string& prefix) {
  std::map<std::string, at::Tensor*> out = {{prefix + "input_layernorm.weight", &input_norm},
                                            {prefix + "self_attn.q_proj.weight", &q_proj},
                                            {prefix + "self_attn.k_proj.weight", &k_proj},
                                            {prefix + "self_attn.v_proj.weight", &v_proj},
                                            {prefix + "self_attn.o_proj.weight", &o_proj},
                                            {prefix + "post_attention_layernorm.weight", &post_norm},
                                            {prefix + "mlp.gate_proj.weight", &gate_proj},
                                            {prefix + "mlp.up_proj.weight", &up_proj},
                                            {prefix + "mlp.down_proj.weight", &down_proj}};
  if (q_bias.defined()) out[prefix + "self_attn.q_proj.bias"] = &q_bias;
  if (k_bias.defined()) out[prefix + "self_attn.k_proj.bias"] = &k_bias;
  if (v_bias.defined()) out[prefix + "self_attn.v_proj.bias"] = &v_bias;
  return out;
}

at::Tensor normal_tensor(Rng& rng, const std::vector<int64_t>& shape, double std) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = std::max(rng.uniform(), 1e-300), u2 = rng.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    p[i] = static_cast<float>(std * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) p[i + 1] = static_cast<float>(std * r * std::sin(2 * M_PI * u2));
  }
  return t;
}

DecoderLayerWeights init_decoder_layer(const ModelConfig& c, Rng& rng) {
  const int64_t d = c.hidden_size, I = c.intermediate_size, qd = c.num_attention_heads * c.head_dim,
                kvd = c.num_key_value_heads * c.head_dim;
  SPECLAB_CHECK(d > 0 && I > 0 && qd > 0 && kvd > 0, "decoder layer: the config has no shapes");
  const double s = 0.02;
  DecoderLayerWeights w;
  w.input_norm = at::ones({d}, at::kFloat);
  w.q_proj = normal_tensor(rng, {qd, d}, s);
  w.k_proj = normal_tensor(rng, {kvd, d}, s);
  w.v_proj = normal_tensor(rng, {kvd, d}, s);
  w.o_proj = normal_tensor(rng, {d, qd}, s);
  w.post_norm = at::ones({d}, at::kFloat);
  w.gate_proj = normal_tensor(rng, {I, d}, s);
  w.up_proj = normal_tensor(rng, {I, d}, s);
  w.down_proj = normal_tensor(rng, {d, I}, s);
  if (c.attention_bias) {
    w.q_bias = at::zeros({qd}, at::kFloat);
    w.k_bias = at::zeros({kvd}, at::kFloat);
    w.v_bias = at::zeros({kvd}, at::kFloat);
  }
  return w;
}

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

LayerQkv decoder_qkv(const ModelConfig& c, const DecoderLayerWeights& w, const at::Tensor& x,
                     const at::Tensor& positions) {
  const int64_t n = x.size(0);
  const at::Tensor xn = rms_norm_rows(x, w.input_norm, c.rms_norm_eps);
  LayerQkv out;
  out.q = rope(at::linear(xn, w.q_proj, w.q_bias).view({n, c.num_attention_heads, c.head_dim}), positions, c.rope_theta);
  out.k = rope(at::linear(xn, w.k_proj, w.k_bias).view({n, c.num_key_value_heads, c.head_dim}), positions, c.rope_theta);
  out.v = at::linear(xn, w.v_proj, w.v_bias).view({n, c.num_key_value_heads, c.head_dim});
  return out;
}

at::Tensor decoder_attend(const ModelConfig& c, const DecoderLayerWeights& w, const at::Tensor& x, const LayerQkv& qkv,
                          const at::Tensor& k_ctx, const at::Tensor& v_ctx, const at::Tensor& allowed) {
  const int64_t n = x.size(0), group = c.num_attention_heads / c.num_key_value_heads;
  const at::Tensor q = qkv.q.transpose(0, 1);                               // [H, n, hd]
  const at::Tensor k = k_ctx.repeat_interleave(group, 1).transpose(0, 1);   // [H, c, hd]
  const at::Tensor v = v_ctx.repeat_interleave(group, 1).transpose(0, 1);   // [H, c, hd]
  at::Tensor scores = at::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(c.head_dim));
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(0), -INFINITY);
  const at::Tensor att = at::matmul(at::softmax(scores, -1), v);            // [H, n, hd]
  const at::Tensor h = x + at::linear(att.transpose(0, 1).reshape({n, -1}), w.o_proj);
  const at::Tensor hn = rms_norm_rows(h, w.post_norm, c.rms_norm_eps);
  return h + at::linear(at::silu(at::linear(hn, w.gate_proj)) * at::linear(hn, w.up_proj), w.down_proj);
}

at::Tensor causal_segment_mask(const at::Tensor& segments) {
  const at::Tensor idx = at::arange(segments.size(0), at::kLong);
  return segments.unsqueeze(1).eq(segments.unsqueeze(0)).logical_and(idx.unsqueeze(1).ge(idx.unsqueeze(0)));
}

at::Tensor decoder_layer_packed(const ModelConfig& c, const DecoderLayerWeights& w, const at::Tensor& x,
                                const at::Tensor& positions, const at::Tensor& segments) {
  const LayerQkv qkv = decoder_qkv(c, w, x, positions);
  return decoder_attend(c, w, x, qkv, qkv.k, qkv.v, causal_segment_mask(segments));
}

}  // namespace speclab
