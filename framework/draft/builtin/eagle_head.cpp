#include "framework/draft/builtin/eagle_head.h"

#include <cmath>

#include "framework/core/error.h"
#include "framework/core/rng.h"

namespace speclab {

namespace {

at::Tensor rms_norm(const at::Tensor& x /*[n, d]*/, const at::Tensor& w /*[d]*/, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

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

at::Tensor normal(Rng& rng, std::vector<int64_t> shape, double std) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i += 2) {  // Box-Muller, two values per pair of draws
    const double u1 = std::max(rng.uniform(), 1e-300), u2 = rng.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    p[i] = static_cast<float>(std * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) p[i + 1] = static_cast<float>(std * r * std::sin(2 * M_PI * u2));
  }
  return t;
}

}  // namespace

std::map<std::string, at::Tensor*> EagleHead::trained() {
  return {{"fc.weight", &fc_weight},
          {"fc.bias", &fc_bias},
          {"layer.input_layernorm.weight", &input_norm},
          {"layer.self_attn.q_proj.weight", &q_proj},
          {"layer.self_attn.k_proj.weight", &k_proj},
          {"layer.self_attn.v_proj.weight", &v_proj},
          {"layer.self_attn.o_proj.weight", &o_proj},
          {"layer.post_attention_layernorm.weight", &post_norm},
          {"layer.mlp.gate_proj.weight", &gate_proj},
          {"layer.mlp.up_proj.weight", &up_proj},
          {"layer.mlp.down_proj.weight", &down_proj}};
}

std::map<std::string, const at::Tensor*> EagleHead::trained() const {
  std::map<std::string, const at::Tensor*> out;
  for (const auto& kv : const_cast<EagleHead*>(this)->trained()) out[kv.first] = kv.second;
  return out;
}

EagleHead init_eagle_head(const ModelConfig& c, uint64_t seed) {
  const int64_t d = c.hidden_size, I = c.intermediate_size, qd = c.num_attention_heads * c.head_dim,
                kvd = c.num_key_value_heads * c.head_dim;
  SPECLAB_CHECK(d > 0 && I > 0 && qd > 0 && kvd > 0, "eagle head: the target config has no shapes");
  Rng rng(seed);
  const double s = 0.02;
  EagleHead h;
  h.target = c;
  h.fc_weight = normal(rng, {d, 2 * d}, s);
  h.fc_bias = at::zeros({d}, at::kFloat);
  h.input_norm = at::ones({d}, at::kFloat);
  h.q_proj = normal(rng, {qd, d}, s);
  h.k_proj = normal(rng, {kvd, d}, s);
  h.v_proj = normal(rng, {kvd, d}, s);
  h.o_proj = normal(rng, {d, qd}, s);
  h.post_norm = at::ones({d}, at::kFloat);
  h.gate_proj = normal(rng, {I, d}, s);
  h.up_proj = normal(rng, {I, d}, s);
  h.down_proj = normal(rng, {d, I}, s);
  return h;
}

at::Tensor target_features(const at::Tensor& hidden, const at::Tensor& final_norm, double eps) {
  return rms_norm(hidden, final_norm, eps);
}

at::Tensor eagle_features(const EagleHead& head, const at::Tensor& hidden) {
  return target_features(hidden, head.final_norm, head.target.rms_norm_eps);
}

at::Tensor eagle_input(const EagleHead& head, const at::Tensor& features, const at::Tensor& next_tokens) {
  const at::Tensor e = head.embed.index_select(0, next_tokens);
  return at::linear(at::cat({features, e}, -1), head.fc_weight, head.fc_bias);
}

EagleQkv eagle_qkv(const EagleHead& head, const at::Tensor& x, const at::Tensor& positions) {
  const ModelConfig& c = head.target;
  const int64_t n = x.size(0);
  const at::Tensor xn = rms_norm(x, head.input_norm, c.rms_norm_eps);
  EagleQkv out;
  out.q = rope(at::linear(xn, head.q_proj).view({n, c.num_attention_heads, c.head_dim}), positions, c.rope_theta);
  out.k = rope(at::linear(xn, head.k_proj).view({n, c.num_key_value_heads, c.head_dim}), positions, c.rope_theta);
  out.v = at::linear(xn, head.v_proj).view({n, c.num_key_value_heads, c.head_dim});
  return out;
}

at::Tensor eagle_attend(const EagleHead& head, const at::Tensor& x, const EagleQkv& qkv, const at::Tensor& k_ctx,
                        const at::Tensor& v_ctx, const at::Tensor& allowed) {
  const ModelConfig& c = head.target;
  const int64_t n = x.size(0), group = c.num_attention_heads / c.num_key_value_heads;
  const at::Tensor q = qkv.q.transpose(0, 1);                               // [H, n, hd]
  const at::Tensor k = k_ctx.repeat_interleave(group, 1).transpose(0, 1);   // [H, c, hd]
  const at::Tensor v = v_ctx.repeat_interleave(group, 1).transpose(0, 1);   // [H, c, hd]
  at::Tensor scores = at::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(c.head_dim));
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(0), -INFINITY);
  const at::Tensor att = at::matmul(at::softmax(scores, -1), v);            // [H, n, hd]
  const at::Tensor h = x + at::linear(att.transpose(0, 1).reshape({n, -1}), head.o_proj);
  const at::Tensor hn = rms_norm(h, head.post_norm, c.rms_norm_eps);
  return h + at::linear(at::silu(at::linear(hn, head.gate_proj)) * at::linear(hn, head.up_proj), head.down_proj);
}

at::Tensor eagle_logits(const EagleHead& head, const at::Tensor& predicted) { return at::linear(predicted, head.lm_head); }

at::Tensor eagle_forward_packed(const EagleHead& head, const at::Tensor& features, const at::Tensor& next_tokens,
                                const at::Tensor& positions, const at::Tensor& segments) {
  const int64_t n = features.size(0);
  const at::Tensor x = eagle_input(head, features, next_tokens);
  const EagleQkv qkv = eagle_qkv(head, x, positions);
  const at::Tensor idx = at::arange(n, at::kLong);
  const at::Tensor allowed =
      segments.unsqueeze(1).eq(segments.unsqueeze(0)).logical_and(idx.unsqueeze(1).ge(idx.unsqueeze(0)));
  return eagle_attend(head, x, qkv, qkv.k, qkv.v, allowed);
}

}  // namespace speclab
