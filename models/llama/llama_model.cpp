#include "models/llama/llama_model.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include <cmath>

#include "framework/core/error.h"
#include "models/llama/gemv.h"
#include "models/loaders/dequant.h"

namespace speclab {

namespace {

// Moves a HostTensor into an at::Tensor without copying (the vector is owned by the deleter).
at::Tensor to_tensor(HostTensor&& t) {
  auto owner = new std::vector<float>(std::move(t.data));
  return at::from_blob(
      owner->data(), t.shape, [owner](void*) { delete owner; }, at::TensorOptions().dtype(at::kFloat));
}

HostTensor take_host(WeightMap& w, const std::string& name) {
  auto it = w.find(name);
  SPECLAB_CHECK(it != w.end(), "validated weight missing: " + name);
  HostTensor t = std::move(it->second);
  w.erase(it);
  return t;
}

// A float32 tensor (norms, biases): packed storage is decoded.
at::Tensor take(WeightMap& w, const std::string& name) {
  HostTensor t = take_host(w, name);
  unpack_to_f32(t, name);
  return to_tensor(std::move(t));
}

// OpenBLAS (used here only for the attention bmm) runs its own thread pool that busy-waits
// with sched_yield between calls, stealing a third of the time from the kernels' threads on a
// 2-core machine; libgomp (libtorch's intra-op pool) spins at every barrier, and when another
// process holds a core each parallel elementwise op waits for a descheduled thread (decode fell
// from 33 to 4 tok/s at 256 tokens of context on a loaded 2-core machine). Both are kept to one
// thread: the matmuls, which are nearly all the work, run on framework/core/thread_pool.h.
void limit_blas_threads() {
  static const bool done = [] {
    at::set_num_threads(1);
    using SetThreads = void (*)(int);
    for (const char* name : {"openblas_set_num_threads", "goto_set_num_threads"})
      if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, name))) fn(1);
    return true;
  }();
  (void)done;
}

}  // namespace

uint64_t LlamaModel::Matrix::bytes() const {
  const at::Tensor& t = is_packed() ? packed : f32;
  return t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
}

LlamaModel::Matrix LlamaModel::stack(std::vector<Matrix> parts) {
  SPECLAB_CHECK(!parts.empty(), "stack of no matrices");
  if (parts.size() == 1) return std::move(parts[0]);
  bool same = true;
  for (const Matrix& m : parts) same = same && m.is_packed() && m.type == parts[0].type && m.in == parts[0].in;
  Matrix s;
  s.in = parts[0].in;
  for (const Matrix& m : parts) s.out += m.out;
  std::vector<at::Tensor> ts;
  if (same) {
    for (const Matrix& m : parts) ts.push_back(m.packed);
    s.packed = at::cat(ts, 0);
    s.type = parts[0].type;
    return s;
  }
  for (const Matrix& m : parts) {
    if (!m.is_packed()) {
      ts.push_back(m.f32);
      continue;
    }
    // Mixed storage: decode this part to float32.
    at::Tensor f = at::empty({m.out, m.in}, at::kFloat);
    std::vector<int64_t> rows(static_cast<size_t>(m.out));
    for (int64_t r = 0; r < m.out; ++r) rows[static_cast<size_t>(r)] = r;
    dequantize_packed_rows(m.packed.data_ptr<uint8_t>(), m.type, rows.data(), m.out, m.in, f.data_ptr<float>());
    ts.push_back(f);
  }
  s.f32 = at::cat(ts, 0);
  return s;
}

// y = x W^T (+ b). x: [n, in] -> [n, out]. On the CPU every batch (decode, verification,
// prefill) streams the weights once through gemv.h's kernels (packed blocks or float32): Debian's
// OpenBLAS 0.3.21 does not recognise recent Xeons and runs generic PRESCOTT kernels, ~3x slower
// for prefill (and forcing OPENBLAS_CORETYPE=SkylakeX makes its small attention-shaped gemms
// ~4x slower at 256 tokens of context). Other devices use at::linear.
at::Tensor LlamaModel::dense(const at::Tensor& x, const Matrix& w, const at::Tensor& b) {
  const int64_t n = x.size(0);
  const float* bias = b.defined() ? b.data_ptr<float>() : nullptr;
  if (w.is_packed()) {
    at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty({n, w.out}, x.options());
    gemm_small_packed(w.packed.data_ptr<uint8_t>(), w.type, xc.data_ptr<float>(), bias, y.data_ptr<float>(), n, w.out,
                      w.in);
    return y;
  }
  if (w.f32.device().is_cpu() && w.f32.is_contiguous()) {
    at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty({n, w.out}, x.options());
    gemm_small_f32(w.f32.data_ptr<float>(), xc.data_ptr<float>(), bias, y.data_ptr<float>(), n, w.out, w.in);
    return y;
  }
  return b.defined() ? at::linear(x, w.f32, b) : at::linear(x, w.f32);
}

LlamaModel::Matrix LlamaModel::take_matrix(WeightMap& w, const std::string& name) {
  HostTensor t = take_host(w, name);
  SPECLAB_CHECK(t.shape.size() == 2, "weight matrix must be 2-D: " + name);
  Matrix m;
  m.out = t.shape[0];
  m.in = t.shape[1];
  if (t.is_packed()) {
    m.type = t.storage_type;
    auto owner = new std::vector<uint8_t>(std::move(t.packed));
    m.packed = at::from_blob(
        owner->data(), {m.out, static_cast<int64_t>(owner->size()) / m.out}, [owner](void*) { delete owner; },
        at::TensorOptions().dtype(at::kByte));
  } else {
    m.f32 = to_tensor(std::move(t));
  }
  return m;
}

LlamaModel::LlamaModel(LoadedModel& loaded) : config_(loaded.config) {
  validate_weights(config_, loaded.weights, loaded.source);
  limit_blas_threads();
  c10::InferenceMode guard;
  WeightMap& w = loaded.weights;
  const ModelConfig& c = config_;
  embed_ = take_matrix(w, "model.embed_tokens.weight");
  final_norm_ = take(w, "model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : take_matrix(w, "lm_head.weight");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer L;
    L.attn_norm = take(w, p + "input_layernorm.weight");
    L.mlp_norm = take(w, p + "post_attention_layernorm.weight");
    L.w_qkv = stack({take_matrix(w, p + "self_attn.q_proj.weight"), take_matrix(w, p + "self_attn.k_proj.weight"),
                     take_matrix(w, p + "self_attn.v_proj.weight")});
    if (c.attention_bias)
      L.b_qkv = at::cat({take(w, p + "self_attn.q_proj.bias"), take(w, p + "self_attn.k_proj.bias"),
                         take(w, p + "self_attn.v_proj.bias")},
                        0);
    L.w_o = take_matrix(w, p + "self_attn.o_proj.weight");
    L.w_gate_up = stack({take_matrix(w, p + "mlp.gate_proj.weight"), take_matrix(w, p + "mlp.up_proj.weight")});
    L.w_down = take_matrix(w, p + "mlp.down_proj.weight");
    layers_.push_back(std::move(L));
  }
  w.clear();

  auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.numel()) * 4 : 0; };
  weight_bytes_ = embed_.bytes() + bytes(final_norm_) + (c.tie_word_embeddings ? 0 : lm_head_.bytes());
  for (const auto& L : layers_)
    weight_bytes_ += bytes(L.attn_norm) + bytes(L.mlp_norm) + L.w_qkv.bytes() + bytes(L.b_qkv) + L.w_o.bytes() +
                     L.w_gate_up.bytes() + L.w_down.bytes();
  std::map<std::string, int> kinds;
  auto count = [&](const Matrix& m) { ++kinds[m.is_packed() ? ggml_type_name(m.type) : "float32"]; };
  count(embed_);
  if (!c.tie_word_embeddings) count(lm_head_);
  for (const auto& L : layers_) {
    count(L.w_qkv);
    count(L.w_o);
    count(L.w_gate_up);
    count(L.w_down);
  }
  for (const auto& [name, k] : kinds)
    weight_storage_ += (weight_storage_.empty() ? "" : ", ") + name + " x " + std::to_string(k);
  weight_storage_ += " matrices, float32 norms";

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

std::vector<int64_t> LlamaModel::layers_to_run(const ForwardOptions& opts) const {
  if (opts.layers.empty()) {
    std::vector<int64_t> all(static_cast<size_t>(config_.num_hidden_layers));
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) all[static_cast<size_t>(l)] = l;
    return all;
  }
  for (int64_t l : opts.layers) SPECLAB_CHECK(l >= 0 && l < config_.num_hidden_layers, "layer index out of range");
  return opts.layers;
}

void LlamaModel::prepare_hidden(const ForwardOptions& opts) const {
  if (opts.hidden_layers.empty()) return;
  SPECLAB_CHECK(opts.hidden_out != nullptr, "ForwardOptions::hidden_out must be set when hidden_layers is not empty");
  const std::vector<int64_t> run = layers_to_run(opts);
  for (int64_t l : opts.hidden_layers)
    SPECLAB_CHECK(std::find(run.begin(), run.end(), l) != run.end(),
                  "hidden layer " + std::to_string(l) + " is not one of the layers that run");
  opts.hidden_out->assign(opts.hidden_layers.size(), at::Tensor());
}

void LlamaModel::keep_hidden(const ForwardOptions& opts, int64_t l, const at::Tensor& x) {
  for (size_t i = 0; i < opts.hidden_layers.size(); ++i)
    if (opts.hidden_layers[i] == l) (*opts.hidden_out)[i] = x.clone();
}

at::Tensor LlamaModel::forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                               const ForwardOptions& opts) const {
  c10::InferenceMode guard;
  const int64_t n = tokens.size(0);
  SPECLAB_CHECK(tokens.dim() == 1 && positions.dim() == 1 && positions.size(0) == n, "tokens/positions must be [n]");
  SPECLAB_CHECK(kv.write_slots.size(0) == n, "kv.write_slots must have one slot per token");
  SPECLAB_CHECK(kv.ctx_len >= n, "kv.ctx_len must include the new tokens");
  SPECLAB_CHECK(kv.read_base >= 0 || (kv.read_slots.defined() && kv.read_slots.size(0) == kv.ctx_len),
                "kv.read_slots must list ctx_len slots");
  prepare_hidden(opts);
  if (!opts.aten_reference && can_run_cpu(kv)) return forward_cpu(tokens, positions, kv, opts);
  return forward_aten(tokens, positions, kv, opts);
}

at::Tensor LlamaModel::forward_aten(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                                    const ForwardOptions& opts) const {
  const ModelConfig& c = config_;
  const int64_t n = tokens.size(0);

  at::Tensor cos = rope_cos_.index_select(0, positions).unsqueeze(1);  // [n, 1, D/2]
  at::Tensor sin = rope_sin_.index_select(0, positions).unsqueeze(1);
  at::Tensor x;  // [n, hidden]
  if (embed_.is_packed()) {
    at::Tensor ids = tokens.to(at::kLong).contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      SPECLAB_CHECK(id[i] >= 0 && id[i] < c.vocab_size, "token id out of range: " + std::to_string(id[i]));
    x = at::empty({n, c.hidden_size}, at::kFloat);
    dequantize_packed_rows(embed_.packed.data_ptr<uint8_t>(), embed_.type, ids.data_ptr<int64_t>(), n, c.hidden_size,
                           x.data_ptr<float>());
  } else {
    x = embed_.f32.index_select(0, tokens);
  }

  auto run_layer = [&](int64_t l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    x = x + attention(l, rms_norm(x, L.attn_norm), positions, cos, sin, kv);
    at::Tensor gu = dense(rms_norm(x, L.mlp_norm), L.w_gate_up);  // [n, 2*inter]
    const int64_t inter = c.intermediate_size;
    at::Tensor act = at::silu(gu.narrow(1, 0, inter)).mul_(gu.narrow(1, inter, inter));
    x = x + dense(act, L.w_down);
  };
  for (int64_t l : layers_to_run(opts)) {
    run_layer(l);
    keep_hidden(opts, l, x);
  }
  if (opts.logits_last_n > 0 && opts.logits_last_n < n) x = x.narrow(0, n - opts.logits_last_n, opts.logits_last_n);
  return dense(rms_norm(x, final_norm_), lm_head_);  // [n_out, vocab]
}

}  // namespace speclab
