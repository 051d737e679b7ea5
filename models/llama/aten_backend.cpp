// The libtorch-op backend of the layer loop (layer_loop.h): every step as ATen ops, so it runs
// on any device the weights and the KV storage live on. On the CPU it is the reference the CPU
// backend is tested against (ForwardOptions::aten_reference); its matmuls share linear() with
// that backend on CPU weights, so a comparison isolates norms, RoPE, attention and the cache.
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <limits>

#include "framework/core/error.h"
#include "models/llama/gemv.h"
#include "models/llama/layer_loop.h"
#include "models/llama/llama_model.h"

namespace speclab {

namespace {

class AtenOps {
 public:
  using Rows = at::Tensor;

  AtenOps(const ModelConfig& c, const LlamaWeights& w, Activations act, const at::Tensor& tokens /*[n]*/,
          const at::Tensor& positions /*[n]*/, const KvView& kv)
      : c_(c), w_(w), act_(act), tokens_(tokens), positions_(positions), kv_(kv) {
    cos_ = w.rope_cos.index_select(0, positions).unsqueeze(1);  // [n, 1, D/2]
    sin_ = w.rope_sin.index_select(0, positions).unsqueeze(1);
  }

  Rows embed() {
    const WeightMatrix& e = w_.embed;
    if (!e.is_packed()) return e.f32.index_select(0, tokens_);
    const int64_t n = tokens_.size(0);
    at::Tensor ids = tokens_.to(at::kLong).contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      SPECLAB_CHECK(id[i] >= 0 && id[i] < c_.vocab_size, "token id out of range: " + std::to_string(id[i]));
    at::Tensor x = at::empty({n, c_.hidden_size}, at::kFloat);
    dequantize_packed_rows(e.packed.data_ptr<uint8_t>(), e.type, id, n, c_.hidden_size, x.data_ptr<float>());
    return x;
  }

  void begin_layer() {}

  // y = w * (x / sqrt(mean(x^2) + eps))
  Rows rms_norm(const Rows& x, const at::Tensor& weight) {
    at::Tensor inv = at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true).add_(c_.rms_norm_eps));
    return x * inv * weight;
  }

  Rows linear(const WeightMatrix& w, const Rows& x, const at::Tensor& b) {
    const bool cpu_weights = w.is_packed() || !w.parts.empty() || (w.f32.device().is_cpu() && w.f32.is_contiguous());
    if (!cpu_weights) return b.defined() ? at::linear(x, w.f32, b) : at::linear(x, w.f32);
    at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty({x.size(0), w.out}, x.options());
    speclab::linear(w, xc.data_ptr<float>(), b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
                    x.size(0), act_);
    return y;
  }

  void rope_and_store(int64_t layer, Rows& qkv) {
    const int64_t n = qkv.size(0), H = c_.num_attention_heads, KVH = c_.num_key_value_heads, D = c_.head_dim;
    const int64_t q_dim = H * D, kv_dim = KVH * D;
    qkv.narrow(1, 0, q_dim).copy_(rope(qkv.narrow(1, 0, q_dim).view({n, H, D})).view({n, q_dim}));
    qkv.narrow(1, q_dim, kv_dim).copy_(rope(qkv.narrow(1, q_dim, kv_dim).view({n, KVH, D})).view({n, kv_dim}));
    kv_.k_cache.select(0, layer).index_copy_(0, kv_.write_slots, qkv.narrow(1, q_dim, kv_dim).reshape({n, KVH, D}));
    kv_.v_cache.select(0, layer).index_copy_(0, kv_.write_slots,
                                             qkv.narrow(1, q_dim + kv_dim, kv_dim).reshape({n, KVH, D}));
  }

  Rows attention(int64_t layer, const Rows& qkv) {
    const int64_t n = qkv.size(0), H = c_.num_attention_heads, KVH = c_.num_key_value_heads, D = c_.head_dim;
    const int64_t G = H / KVH, q_dim = H * D, ctx = kv_.ctx_len;
    at::Tensor q = qkv.narrow(1, 0, q_dim).reshape({n, H, D});  // [n, H, D]
    at::Tensor k_store = kv_.k_cache.select(0, layer);           // [n_slots, KVH, D]
    at::Tensor v_store = kv_.v_cache.select(0, layer);
    at::Tensor keys =
        kv_.read_base >= 0 ? k_store.narrow(0, kv_.read_base, ctx) : k_store.index_select(0, kv_.read_slots);
    at::Tensor vals =
        kv_.read_base >= 0 ? v_store.narrow(0, kv_.read_base, ctx) : v_store.index_select(0, kv_.read_slots);
    // Group the G query heads that share a kv head: rows ordered (g, i).
    at::Tensor qg = q.view({n, KVH, G, D}).permute({1, 2, 0, 3}).reshape({KVH, G * n, D});  // [KVH, G*n, D]
    at::Tensor scores = at::bmm(qg, keys.permute({1, 2, 0}));                                // [KVH, G*n, ctx]
    scores.mul_(1.0 / std::sqrt(static_cast<double>(D)));
    if (n > 1) {
      // Causal mask: key position j is visible to query i iff j <= positions[i].
      at::Tensor key_pos = at::arange(ctx, positions_.options());                          // [ctx]
      at::Tensor mask = key_pos.unsqueeze(0).gt(positions_.unsqueeze(1)).repeat({G, 1});  // [G*n, ctx]
      scores.masked_fill_(mask.unsqueeze(0), -std::numeric_limits<float>::infinity());
    }
    at::Tensor out = at::bmm(at::softmax(scores, -1), vals.permute({1, 0, 2}));  // [KVH, G*n, D]
    return out.view({KVH, G, n, D}).permute({2, 0, 1, 3}).reshape({n, q_dim});  // [n, H*D]
  }

  Rows swiglu(const Rows& gate_up) {
    const int64_t inter = gate_up.size(1) / 2;
    return at::silu(gate_up.narrow(1, 0, inter)).mul_(gate_up.narrow(1, inter, inter));
  }

  void add(Rows& x, const Rows& y) { x = x + y; }
  Rows last_rows(const Rows& x, int64_t k) { return x.narrow(0, x.size(0) - k, k); }
  at::Tensor view(const Rows& x) { return x; }
  at::Tensor logits(const Rows& h) { return linear(w_.lm_head, h, at::Tensor()); }

 private:
  // x: [n, heads, D] -> rotated copy (HF rotate_half layout)
  at::Tensor rope(const at::Tensor& x) const {
    const int64_t half = c_.head_dim / 2;
    at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    return at::cat({x1 * cos_ - x2 * sin_, x2 * cos_ + x1 * sin_}, -1);
  }

  const ModelConfig& c_;
  const LlamaWeights& w_;
  const Activations act_;
  const at::Tensor &tokens_, &positions_;
  const KvView& kv_;
  at::Tensor cos_, sin_;  // [n, 1, D/2]
};

}  // namespace

at::Tensor LlamaModel::forward_aten(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                                    const ForwardOptions& opts) const {
  const int64_t n = tokens.size(0);
  AtenOps ops(config_, w_, activations_, tokens, positions, kv);
  const int64_t n_out = opts.logits_last_n > 0 && opts.logits_last_n < n ? opts.logits_last_n : n;
  return run_layers(ops, w_, layers_to_run(opts), n, n_out, opts);
}

}  // namespace speclab
