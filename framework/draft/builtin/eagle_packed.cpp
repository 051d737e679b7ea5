#include "framework/draft/builtin/eagle_packed.h"

#include <ATen/ops/cat.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"

namespace speclab {

namespace {

// y = x / rms(x) * w over rows of d (w null: 1); row i of y at y + i * y_stride.
void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, double eps, int64_t y_stride = 0) {
  if (y_stride == 0) y_stride = d;
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * d;
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (int64_t j = 0; j < d; ++j) y[i * y_stride + j] = w ? xi[j] * r * w[j] : xi[j] * r;
  }
}

// HF rotate_half RoPE of one head vector x [hd] with the angles of rope_angles.
void rope(float* x, int64_t hd, const float* cs, const float* sn) {
  const int64_t half = hd / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float x0 = x[j], x1 = x[j + half];
    x[j] = x0 * cs[j] - x1 * sn[j];
    x[j + half] = x1 * cs[j] + x0 * sn[j];
  }
}

}  // namespace

std::unique_ptr<PackedEagleHead> PackedEagleHead::make(const EagleHead& h, const Model& target) {
  std::unique_ptr<PackedEagleHead> p(new PackedEagleHead());
  p->head_ = &h;
  p->target_ = &target;
  p->fc_ = target.pack_matrix(h.fc_weight);
  if (!p->fc_) return nullptr;
  if (h.aux_width() > 0) p->fc_base_ = target.pack_matrix(h.fc_weight.narrow(1, 0, 2 * h.target.hidden_size).contiguous());
  for (const DecoderLayerWeights& w : h.layers) {
    Layer l;
    l.qkv = target.pack_matrix(at::cat({w.q_proj, w.k_proj, w.v_proj}, 0));
    l.o = target.pack_matrix(w.o_proj);
    l.gate_up = target.pack_matrix(at::cat({w.gate_proj, w.up_proj}, 0));
    l.down = target.pack_matrix(w.down_proj);
    for (const auto& m : {l.qkv, l.o, l.gate_up, l.down})
      SPECLAB_CHECK(m != nullptr, "eagle: the target packed one matrix and not another");
    p->layers_.push_back(std::move(l));
  }
  p->lm_ = target.pack_matrix(h.lm_head);
  SPECLAB_CHECK(p->lm_ != nullptr, "eagle: the target packed one matrix and not another");
  const ModelConfig& c = h.target;
  for (int64_t j = 0; j < c.head_dim / 2; ++j)
    p->inv_freq_.push_back(std::pow(c.rope_theta, -2.0 * static_cast<double>(j) / static_cast<double>(c.head_dim)));
  return p;
}

void PackedEagleHead::step(const float* features, const float* aux, const int64_t* next, int64_t n, int64_t pos,
                           const KvView& kv, float* out) {
  const EagleHead& h = *head_;
  const ModelConfig& c = h.target;
  const int64_t d = c.hidden_size, H = c.num_attention_heads, KVH = c.num_key_value_heads, hd = c.head_dim;
  const int64_t qd = H * hd, kvd = KVH * hd, I = c.intermediate_size;
  SPECLAB_CHECK(kv.ctx_len == pos + n, "eagle: the head's KV view does not end at the new pairs");
  const auto size = [](std::vector<float>& v, int64_t k) { v.resize(static_cast<size_t>(k)); };
  // A pair without aux rows (a drafted one: a = 0) skips fc's columns over a (fc_base_).
  const int64_t w = aux ? h.aux_width() : 0, in = 2 * d + w;
  size(in_, n * in), size(x_, n * d), size(xn_, n * d), size(qkv_out_, n * (qd + 2 * kvd));
  size(att_, n * qd), size(h_, n * d), size(gu_, n * 2 * I), size(act_, n * I);

  // x = fc([f ; E[next] ; a]) + b
  const float* embed = h.embed.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = &in_[static_cast<size_t>(i * in)];
    std::memcpy(row, features + i * d, sizeof(float) * d);
    std::memcpy(row + d, embed + next[i] * d, sizeof(float) * d);
    if (w > 0) std::memcpy(row + 2 * d, aux + i * w, sizeof(float) * w);
  }
  (w == 0 && fc_base_ ? fc_base_ : fc_)->multiply(in_.data(), h.fc_bias.data_ptr<float>(), x_.data(), n);
  const int64_t L = static_cast<int64_t>(layers_.size());
  SPECLAB_CHECK(kv.k_cache.size(0) == L, "eagle: the head's KV view has another layer count");
  for (int64_t l = 0; l < L; ++l) layer_step(l, n, pos, kv, l + 1 == L ? out : x_.data());
}

void PackedEagleHead::layer_step(int64_t l, int64_t n, int64_t pos, const KvView& kv, float* y) {
  const DecoderLayerWeights& wt = head_->layers[static_cast<size_t>(l)];
  const Layer& m = layers_[static_cast<size_t>(l)];
  const ModelConfig& c = head_->target;
  const int64_t d = c.hidden_size, H = c.num_attention_heads, KVH = c.num_key_value_heads, hd = c.head_dim;
  const int64_t qd = H * hd, kvd = KVH * hd, I = c.intermediate_size;
  // q, k, v of N1 x; RoPE; K/V into the write slots.
  rms_norm(x_.data(), wt.input_norm.data_ptr<float>(), xn_.data(), n, d, c.rms_norm_eps);
  m.qkv->multiply(xn_.data(), nullptr, qkv_out_.data(), n);
  float* kc = kv.k_cache[l].data_ptr<float>();  // [slots, KVH, hd]
  float* vc = kv.v_cache[l].data_ptr<float>();
  const int64_t* ws = kv.write_slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = &qkv_out_[static_cast<size_t>(i * (qd + 2 * kvd))];
    const float* cs = rope_cos(pos + i);
    const float* sn = rope_sin(pos + i);
    for (int64_t a = 0; a < H + KVH; ++a) rope(row + a * hd, hd, cs, sn);
    std::memcpy(kc + ws[i] * kvd, row + qd, sizeof(float) * kvd);
    std::memcpy(vc + ws[i] * kvd, row + qd + kvd, sizeof(float) * kvd);
  }
  attend(l, n, pos, kv);
  // h = x + o(att); y = h + down(silu(gate(N2 h)) * up(N2 h))
  m.o->multiply(att_.data(), nullptr, h_.data(), n);
  for (int64_t k = 0; k < n * d; ++k) h_[static_cast<size_t>(k)] += x_[static_cast<size_t>(k)];
  rms_norm(h_.data(), wt.post_norm.data_ptr<float>(), xn_.data(), n, d, c.rms_norm_eps);
  m.gate_up->multiply(xn_.data(), nullptr, gu_.data(), n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < I; ++j) {
      const float gt = gu_[static_cast<size_t>(i * 2 * I + j)], up = gu_[static_cast<size_t>(i * 2 * I + I + j)];
      act_[static_cast<size_t>(i * I + j)] = gt / (1.0f + std::exp(-gt)) * up;
    }
  m.down->multiply(act_.data(), nullptr, y, n);
  for (int64_t k = 0; k < n * d; ++k) y[k] += h_[static_cast<size_t>(k)];
}

const float* PackedEagleHead::rope_cos(int64_t pos) {
  const size_t half = inv_freq_.size();
  for (int64_t p = static_cast<int64_t>(rope_.size() / (2 * half)); p <= pos; ++p)
    for (int part = 0; part < 2; ++part)
      for (size_t j = 0; j < half; ++j) {
        const double a = static_cast<double>(p) * inv_freq_[j];
        rope_.push_back(static_cast<float>(part == 0 ? std::cos(a) : std::sin(a)));
      }
  return rope_.data() + static_cast<size_t>(pos) * 2 * half;
}

void PackedEagleHead::attend(int64_t l, int64_t n, int64_t pos, const KvView& kv) {
  const ModelConfig& c = head_->target;
  const int64_t H = c.num_attention_heads, KVH = c.num_key_value_heads, hd = c.head_dim;
  const int64_t qd = H * hd, kvd = KVH * hd, group = H / KVH;
  const float* kc = kv.k_cache[l].data_ptr<float>();  // [slots, KVH, hd]
  const float* vc = kv.v_cache[l].data_ptr<float>();
  const int64_t* rs = kv.read_base >= 0 ? nullptr : kv.read_slots.data_ptr<int64_t>();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // Row i (position pos + i) attends positions [0, pos + i].
  limits_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) limits_[static_cast<size_t>(i)] = pos + i + 1;
  AttentionRows call;
  call.q = qkv_out_.data();
  call.q_stride = qd + 2 * kvd;
  call.n = n;
  call.n_heads = H;
  call.n_kv_heads = KVH;
  call.head_dim = hd;
  call.k = kc;
  call.v = vc;
  call.slots = rs;
  call.slot_base = kv.read_base;
  call.limits = limits_.data();
  call.scale = scale;
  call.out = att_.data();
  if (target_->attend_rows(call)) return;
  // No kernel: the same computation, key by key.
  const auto slot = [&](int64_t j) { return rs ? rs[j] : kv.read_base + j; };
  scores_.resize(static_cast<size_t>(pos + n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = pos + i + 1;
    for (int64_t a = 0; a < H; ++a) {
      const float* q = &qkv_out_[static_cast<size_t>(i * (qd + 2 * kvd) + a * hd)];
      const int64_t g = a / group;
      float mx = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        const float* k = kc + slot(j) * kvd + g * hd;
        float s = 0.0f;
        for (int64_t e = 0; e < hd; ++e) s += q[e] * k[e];
        scores_[static_cast<size_t>(j)] = s * scale;
        mx = std::max(mx, s * scale);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < len; ++j) {
        const float p = std::exp(scores_[static_cast<size_t>(j)] - mx);
        scores_[static_cast<size_t>(j)] = p;
        sum += p;
      }
      float* o = &att_[static_cast<size_t>(i * qd + a * hd)];
      std::fill(o, o + hd, 0.0f);
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < len; ++j) {
        const float* v = vc + slot(j) * kvd + g * hd;
        const float p = scores_[static_cast<size_t>(j)] * inv;
        for (int64_t e = 0; e < hd; ++e) o[e] += p * v[e];
      }
    }
  }
}

void PackedEagleHead::features(const float* hidden, int64_t n, float* out) const {
  const ModelConfig& c = head_->target;
  rms_norm(hidden, head_->final_norm.data_ptr<float>(), out, n, c.hidden_size, c.rms_norm_eps);
}

void PackedEagleHead::aux_features(const float* hidden, int64_t n, float* out, int64_t out_stride) const {
  const ModelConfig& c = head_->target;
  rms_norm(hidden, nullptr, out, n, c.hidden_size, c.rms_norm_eps, out_stride);
}

void PackedEagleHead::logits(const float* f, float* out) { lm_->multiply(f, nullptr, out, 1); }

}  // namespace speclab
