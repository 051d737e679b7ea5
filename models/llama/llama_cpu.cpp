// LlamaModel::forward_cpu — the forward pass on raw CPU buffers (see llama_model.h).
//
// Same math as the libtorch-op path (forward_aten), step for step: embedding, per layer
// RMSNorm -> q/k/v projection -> RoPE -> K/V written to the cache slots -> causal attention over
// the read slots -> output projection + residual -> RMSNorm -> gate/up projection -> SwiGLU ->
// down projection + residual; final RMSNorm and the LM head for the last logits_last_n rows.
// Matmuls use gemv.h's kernels, the rest cpu_ops.h; attention is split over (token, head) pairs
// on framework/core/thread_pool.h when there is enough of it.
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/cpu_ops.h"
#include "models/llama/gemv.h"
#include "models/llama/llama_model.h"

namespace speclab {

void LlamaModel::matmul(const Matrix& w, const float* x, const float* bias, float* y, int64_t n) {
  if (w.is_packed())
    gemm_small_packed(w.packed.data_ptr<uint8_t>(), w.type, x, bias, y, n, w.out, w.in);
  else
    gemm_small_f32(w.f32.data_ptr<float>(), x, bias, y, n, w.out, w.in);
}

bool LlamaModel::can_run_cpu(const KvView& kv) const {
  auto ok = [](const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.is_contiguous(); };
  return ok(kv.k_cache) && ok(kv.v_cache) && kv.k_cache.scalar_type() == at::kFloat &&
         kv.v_cache.scalar_type() == at::kFloat && final_norm_.device().is_cpu() &&
         (embed_.is_packed() || embed_.f32.device().is_cpu());
}

at::Tensor LlamaModel::forward_cpu(const at::Tensor& tokens_in, const at::Tensor& positions_in, const KvView& kv,
                                   const ForwardOptions& opts) const {
  const ModelConfig& c = config_;
  const int64_t n = tokens_in.size(0), hidden = c.hidden_size, H = c.num_attention_heads,
                KVH = c.num_key_value_heads, D = c.head_dim, G = H / KVH, inter = c.intermediate_size;
  const int64_t q_dim = H * D, kv_dim = KVH * D, qkv_dim = q_dim + 2 * kv_dim, half = D / 2;
  const at::Tensor tokens_t = tokens_in.to(at::kLong).contiguous();
  const at::Tensor positions_t = positions_in.to(at::kLong).contiguous();
  const at::Tensor write_t = kv.write_slots.to(at::kLong).contiguous();
  const at::Tensor read_t = kv.read_base >= 0 ? at::Tensor() : kv.read_slots.to(at::kLong).contiguous();
  const int64_t* tokens = tokens_t.data_ptr<int64_t>();
  const int64_t* positions = positions_t.data_ptr<int64_t>();
  const int64_t* write_slots = write_t.data_ptr<int64_t>();
  const int64_t* read_slots = read_t.defined() ? read_t.data_ptr<int64_t>() : nullptr;
  const int64_t ctx = kv.ctx_len;
  const int64_t n_slots = kv.k_cache.size(1);
  for (int64_t i = 0; i < n; ++i) {
    SPECLAB_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id out of range: " + std::to_string(tokens[i]));
    SPECLAB_CHECK(positions[i] >= 0 && positions[i] < c.max_position_embeddings,
                  "position out of range: " + std::to_string(positions[i]));
    SPECLAB_CHECK(write_slots[i] >= 0 && write_slots[i] < n_slots, "kv write slot out of range");
  }
  if (read_slots)
    for (int64_t j = 0; j < ctx; ++j) SPECLAB_CHECK(read_slots[j] >= 0 && read_slots[j] < n_slots, "kv read slot out of range");
  else
    SPECLAB_CHECK(kv.read_base + ctx <= n_slots, "kv read range out of range");
  auto slot_of = [&](int64_t j) { return read_slots ? read_slots[j] : kv.read_base + j; };

  // Activations: x [n, hidden] residual stream; h [n, hidden]; qkv [n, qkv_dim]; att [n, q_dim];
  // gu [n, 2 inter]; act [n, inter].
  std::vector<float> x(static_cast<size_t>(n * hidden)), h(x.size()), tmp(x.size());
  std::vector<float> qkv(static_cast<size_t>(n * qkv_dim)), att(static_cast<size_t>(n * q_dim));
  std::vector<float> gu(static_cast<size_t>(n * 2 * inter)), act(static_cast<size_t>(n * inter));

  if (embed_.is_packed()) {
    dequantize_packed_rows(embed_.packed.data_ptr<uint8_t>(), embed_.type, tokens, n, hidden, x.data());
  } else {
    const float* e = embed_.f32.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) std::copy(e + tokens[i] * hidden, e + (tokens[i] + 1) * hidden, x.data() + i * hidden);
  }
  const float* cos_tab = rope_cos_.data_ptr<float>();
  const float* sin_tab = rope_sin_.data_ptr<float>();
  float* k_base = kv.k_cache.data_ptr<float>();
  float* v_base = kv.v_cache.data_ptr<float>();
  const int64_t layer_stride = n_slots * kv_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float eps = static_cast<float>(c.rms_norm_eps);

  auto run_layer = [&](int64_t l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    cpu::rms_norm_rows(x.data(), L.attn_norm.data_ptr<float>(), h.data(), n, hidden, eps);
    matmul(L.w_qkv, h.data(), L.b_qkv.defined() ? L.b_qkv.data_ptr<float>() : nullptr, qkv.data(), n);
    float* k_layer = k_base + l * layer_stride;
    float* v_layer = v_base + l * layer_stride;
    for (int64_t i = 0; i < n; ++i) {
      float* row = qkv.data() + i * qkv_dim;
      const float* cs = cos_tab + positions[i] * half;
      const float* sn = sin_tab + positions[i] * half;
      for (int64_t hh = 0; hh < H + KVH; ++hh) cpu::rope_head(row + hh * D, cs, sn, D);  // q heads, then k heads
      std::copy(row + q_dim, row + q_dim + kv_dim, k_layer + write_slots[i] * kv_dim);
      std::copy(row + q_dim + kv_dim, row + qkv_dim, v_layer + write_slots[i] * kv_dim);
    }
    // Attention for (token i, head hh): keys j < limit, limit = positions[i] + 1 when n > 1
    // (causal), every ctx key for a single token (as the libtorch path).
    auto attend = [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores;
      if (scores.size() < static_cast<size_t>(ctx)) scores.resize(static_cast<size_t>(ctx));
      for (int64_t task = begin; task < end; ++task) {
        const int64_t i = task / H, hh = task % H, g = hh / G;
        const float* q = qkv.data() + i * qkv_dim + hh * D;
        const int64_t limit = n > 1 ? std::min<int64_t>(ctx, positions[i] + 1) : ctx;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < limit; ++j) {
          scores[j] = cpu::dot(q, k_layer + slot_of(j) * kv_dim + g * D, D) * scale;
          mx = std::max(mx, scores[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j < limit; ++j) {
          scores[j] = std::exp(scores[j] - mx);
          sum += scores[j];
        }
        float* o = att.data() + i * q_dim + hh * D;
        std::fill(o, o + D, 0.f);
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < limit; ++j) cpu::axpy(scores[j] * inv, v_layer + slot_of(j) * kv_dim + g * D, o, D);
      }
    };
    const int64_t tasks = n * H;
    const int64_t work = tasks * ctx * D;
    if (work < (int64_t(1) << 18))
      attend(0, tasks);
    else
      parallel_chunks(tasks, std::max<int64_t>(1, tasks / (4 * compute_threads())), compute_threads(), attend);
    matmul(L.w_o, att.data(), nullptr, tmp.data(), n);
    cpu::add_inplace(x.data(), tmp.data(), n * hidden);

    cpu::rms_norm_rows(x.data(), L.mlp_norm.data_ptr<float>(), h.data(), n, hidden, eps);
    matmul(L.w_gate_up, h.data(), nullptr, gu.data(), n);
    for (int64_t i = 0; i < n; ++i)
      cpu::silu_mul(gu.data() + i * 2 * inter, gu.data() + i * 2 * inter + inter, act.data() + i * inter, inter);
    matmul(L.w_down, act.data(), nullptr, tmp.data(), n);
    cpu::add_inplace(x.data(), tmp.data(), n * hidden);
  };
  for (int64_t l : layers_to_run(opts)) {
    run_layer(l);
    if (!opts.hidden_layers.empty()) keep_hidden(opts, l, at::from_blob(x.data(), {n, hidden}, at::kFloat));
  }
  const int64_t n_out = opts.logits_last_n > 0 && opts.logits_last_n < n ? opts.logits_last_n : n;
  const float* last = x.data() + (n - n_out) * hidden;
  cpu::rms_norm_rows(last, final_norm_.data_ptr<float>(), h.data(), n_out, hidden, eps);
  at::Tensor logits = at::empty({n_out, c.vocab_size}, at::kFloat);  // [n_out, vocab]
  matmul(lm_head_, h.data(), nullptr, logits.data_ptr<float>(), n_out);
  return logits;
}

}  // namespace speclab
