#include "models/llama/llama_model.h"

#include <c10/core/InferenceMode.h>

#include <dlfcn.h>

#include <cstdlib>

#include <cmath>

#include "framework/core/error.h"
#include "models/llama/gemv.h"

namespace speclab {

namespace {

// Moves a HostTensor into an at::Tensor without copying (the vector is owned by the deleter).
at::Tensor to_tensor(HostTensor&& t) {
  auto owner = new std::vector<float>(std::move(t.data));
  return at::from_blob(
      owner->data(), t.shape, [owner](void*) { delete owner; }, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor take(WeightMap& w, const std::string& name) {
  auto it = w.find(name);
  SPECLAB_CHECK(it != w.end(), "validated weight missing: " + name);
  at::Tensor t = to_tensor(std::move(it->second));
  w.erase(it);
  return t;
}

// y = x W^T (+ b). x: [n, in], w: [out, in] -> [n, out]. On the CPU every batch (decode,
// verification, prefill) streams the weights once through gemm_small_f32 (gemv.h): Debian's
// OpenBLAS 0.3.21 does not recognise recent Xeons and runs generic PRESCOTT kernels, ~3x slower
// for prefill (and forcing OPENBLAS_CORETYPE=SkylakeX makes its small attention-shaped gemms
// ~4x slower at 256 tokens of context). Other devices use at::linear.
at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  const int64_t n = x.size(0);
  if (w.device().is_cpu() && w.scalar_type() == at::kFloat && w.is_contiguous()) {
    at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty({n, w.size(0)}, x.options());
    gemm_small_f32(w.data_ptr<float>(), xc.data_ptr<float>(), b.defined() ? b.data_ptr<float>() : nullptr,
                   y.data_ptr<float>(), n, w.size(0), w.size(1));
    return y;
  }
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// OpenBLAS (used here only for the attention bmm) runs its own thread pool that busy-waits
// with sched_yield between calls, stealing a third of the time from libtorch's threads on a
// 2-core machine. Keep it single-threaded; libtorch's intra-op threads do the parallel work.
void limit_blas_threads() {
  static const bool done = [] {
    using SetThreads = void (*)(int);
    for (const char* name : {"openblas_set_num_threads", "goto_set_num_threads"})
      if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, name))) fn(1);
    return true;
  }();
  (void)done;
}

}  // namespace

LlamaModel::LlamaModel(LoadedModel& loaded) : config_(loaded.config) {
  validate_weights(config_, loaded.weights, loaded.source);
  limit_blas_threads();
  c10::InferenceMode guard;
  WeightMap& w = loaded.weights;
  const ModelConfig& c = config_;
  embed_ = take(w, "model.embed_tokens.weight");
  final_norm_ = take(w, "model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : take(w, "lm_head.weight");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer L;
    L.attn_norm = take(w, p + "input_layernorm.weight");
    L.mlp_norm = take(w, p + "post_attention_layernorm.weight");
    L.w_qkv = at::cat({take(w, p + "self_attn.q_proj.weight"), take(w, p + "self_attn.k_proj.weight"),
                       take(w, p + "self_attn.v_proj.weight")},
                      0);
    if (c.attention_bias)
      L.b_qkv = at::cat({take(w, p + "self_attn.q_proj.bias"), take(w, p + "self_attn.k_proj.bias"),
                         take(w, p + "self_attn.v_proj.bias")},
                        0);
    L.w_o = take(w, p + "self_attn.o_proj.weight");
    L.w_gate_up = at::cat({take(w, p + "mlp.gate_proj.weight"), take(w, p + "mlp.up_proj.weight")}, 0);
    L.w_down = take(w, p + "mlp.down_proj.weight");
    layers_.push_back(std::move(L));
  }
  w.clear();

  auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.numel()) * 4 : 0; };
  weight_bytes_ = bytes(embed_) + bytes(final_norm_) + (c.tie_word_embeddings ? 0 : bytes(lm_head_));
  for (const auto& L : layers_)
    weight_bytes_ += bytes(L.attn_norm) + bytes(L.mlp_norm) + bytes(L.w_qkv) + bytes(L.b_qkv) + bytes(L.w_o) +
                     bytes(L.w_gate_up) + bytes(L.w_down);

  // RoPE tables computed in float32 exactly like run.c / HF: freq_i = 1 / theta^(2i/d), angle = pos * freq_i.
  const int64_t half = c.head_dim / 2;
  std::vector<float> cos_t(static_cast<size_t>(c.max_position_embeddings * half));
  std::vector<float> sin_t(cos_t.size());
  for (int64_t i = 0; i < half; ++i) {
    const float freq =
        1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
    for (int64_t pos = 0; pos < c.max_position_embeddings; ++pos) {
      const float angle = static_cast<float>(pos) * freq;
      cos_t[pos * half + i] = std::cos(angle);
      sin_t[pos * half + i] = std::sin(angle);
    }
  }
  rope_cos_ = at::from_blob(cos_t.data(), {c.max_position_embeddings, half}, at::kFloat).clone();
  rope_sin_ = at::from_blob(sin_t.data(), {c.max_position_embeddings, half}, at::kFloat).clone();
}

at::Tensor LlamaModel::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  // y = w * (x / sqrt(mean(x^2) + eps))
  at::Tensor inv = at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true).add_(config_.rms_norm_eps));
  return x * inv * weight;
}

at::Tensor LlamaModel::rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  const int64_t half = config_.head_dim / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

at::Tensor LlamaModel::attention(int64_t layer, const at::Tensor& h, const at::Tensor& positions,
                                 const at::Tensor& cos, const at::Tensor& sin, const KvView& kv) const {
  const ModelConfig& c = config_;
  const Layer& L = layers_[layer];
  const int64_t n = h.size(0), H = c.num_attention_heads, KVH = c.num_key_value_heads, D = c.head_dim;
  const int64_t G = H / KVH;
  const int64_t q_dim = H * D, kv_dim = KVH * D;

  at::Tensor qkv = dense(h, L.w_qkv, L.b_qkv);  // [n, q+2kv]
  at::Tensor q = rope(qkv.narrow(1, 0, q_dim).view({n, H, D}), cos, sin);                           // [n, H, D]
  at::Tensor k = rope(qkv.narrow(1, q_dim, kv_dim).view({n, KVH, D}), cos, sin);                    // [n, KVH, D]
  at::Tensor v = qkv.narrow(1, q_dim + kv_dim, kv_dim).reshape({n, KVH, D});                        // [n, KVH, D]

  at::Tensor k_store = kv.k_cache.select(0, layer);  // [n_slots, KVH, D]
  at::Tensor v_store = kv.v_cache.select(0, layer);
  k_store.index_copy_(0, kv.write_slots, k);
  v_store.index_copy_(0, kv.write_slots, v);
  const int64_t ctx = kv.ctx_len;
  at::Tensor keys = kv.read_base >= 0 ? k_store.narrow(0, kv.read_base, ctx) : k_store.index_select(0, kv.read_slots);
  at::Tensor vals = kv.read_base >= 0 ? v_store.narrow(0, kv.read_base, ctx) : v_store.index_select(0, kv.read_slots);

  // Group the G query heads that share a kv head: rows ordered (g, i).
  at::Tensor qg = q.view({n, KVH, G, D}).permute({1, 2, 0, 3}).reshape({KVH, G * n, D});  // [KVH, G*n, D]
  at::Tensor scores = at::bmm(qg, keys.permute({1, 2, 0}));                                // [KVH, G*n, ctx]
  scores.mul_(1.0 / std::sqrt(static_cast<double>(D)));
  if (n > 1) {
    // Causal mask: key position j is visible to query i iff j <= positions[i].
    at::Tensor key_pos = at::arange(ctx, positions.options());                     // [ctx]
    at::Tensor mask = key_pos.unsqueeze(0).gt(positions.unsqueeze(1)).repeat({G, 1});  // [G*n, ctx]
    scores.masked_fill_(mask.unsqueeze(0), -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scores, -1);
  at::Tensor out = at::bmm(probs, vals.permute({1, 0, 2}));                   // [KVH, G*n, D]
  out = out.view({KVH, G, n, D}).permute({2, 0, 1, 3}).reshape({n, q_dim});  // [n, H*D]
  return dense(out, L.w_o);
}

at::Tensor LlamaModel::forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                               const ForwardOptions& opts) const {
  c10::InferenceMode guard;
  const ModelConfig& c = config_;
  const int64_t n = tokens.size(0);
  SPECLAB_CHECK(tokens.dim() == 1 && positions.dim() == 1 && positions.size(0) == n, "tokens/positions must be [n]");
  SPECLAB_CHECK(kv.write_slots.size(0) == n, "kv.write_slots must have one slot per token");
  SPECLAB_CHECK(kv.ctx_len >= n, "kv.ctx_len must include the new tokens");

  at::Tensor cos = rope_cos_.index_select(0, positions).unsqueeze(1);  // [n, 1, D/2]
  at::Tensor sin = rope_sin_.index_select(0, positions).unsqueeze(1);
  at::Tensor x = embed_.index_select(0, tokens);                       // [n, hidden]

  auto run_layer = [&](int64_t l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    x = x + attention(l, rms_norm(x, L.attn_norm), positions, cos, sin, kv);
    at::Tensor gu = dense(rms_norm(x, L.mlp_norm), L.w_gate_up);  // [n, 2*inter]
    const int64_t inter = c.intermediate_size;
    at::Tensor act = at::silu(gu.narrow(1, 0, inter)).mul_(gu.narrow(1, inter, inter));
    x = x + dense(act, L.w_down);
  };
  if (opts.layers.empty()) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) run_layer(l);
  } else {
    for (int64_t l : opts.layers) {
      SPECLAB_CHECK(l >= 0 && l < c.num_hidden_layers, "layer index out of range");
      run_layer(l);
    }
  }
  if (opts.logits_last_n > 0 && opts.logits_last_n < n) x = x.narrow(0, n - opts.logits_last_n, opts.logits_last_n);
  return dense(rms_norm(x, final_norm_), lm_head_);  // [n_out, vocab]
}

}  // namespace speclab
