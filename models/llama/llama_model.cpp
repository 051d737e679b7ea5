#include "models/llama/llama_model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <functional>
#include <map>

#include <cmath>

#include "framework/core/blas_core.h"
#include "framework/core/error.h"
#include "models/llama/gemv.h"
#include "models/loaders/dequant.h"
#include "models/llama/placement.h"
#include "models/llama/qgemm.h"
#include "models/tokenizers/sentencepiece_bpe.h"
#include "models/tokenizers/special_tokens.h"

namespace speclab {

namespace {

// OpenBLAS (used here only for the attention bmm) runs its own thread pool that busy-waits
// with sched_yield between calls, stealing a third of the time from the kernels' threads on a
// 2-core machine; libgomp (libtorch's intra-op pool) spins at every barrier, and when another
// process holds a core each parallel elementwise op waits for a descheduled thread (decode fell
// from 33 to 4 tok/s at 256 tokens of context on a loaded 2-core machine). Both are kept to one
// thread: the matmuls, which are nearly all the work, run on framework/core/thread_pool.h.
void limit_blas_threads() {
  static const bool done = [] {
    at::set_num_threads(1);
    set_blas_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace

void LlamaModel::take_weights(WeightMap& w) {
  const ModelConfig& c = config_;
  w_.embed = take_matrix(w, "model.embed_tokens.weight");
  w_.final_norm = take_vector(w, "model.norm.weight");
  w_.lm_head = c.tie_word_embeddings ? w_.embed : take_matrix(w, "lm_head.weight");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayer L;
    L.attn_norm = take_vector(w, p + "input_layernorm.weight");
    L.mlp_norm = take_vector(w, p + "post_attention_layernorm.weight");
    L.w_qkv = stack({take_matrix(w, p + "self_attn.q_proj.weight"), take_matrix(w, p + "self_attn.k_proj.weight"),
                     take_matrix(w, p + "self_attn.v_proj.weight")});
    if (c.attention_bias)
      L.b_qkv = at::cat({take_vector(w, p + "self_attn.q_proj.bias"), take_vector(w, p + "self_attn.k_proj.bias"),
                         take_vector(w, p + "self_attn.v_proj.bias")},
                        0);
    L.w_o = take_matrix(w, p + "self_attn.o_proj.weight");
    L.w_gate_up = stack({take_matrix(w, p + "mlp.gate_proj.weight"), take_matrix(w, p + "mlp.up_proj.weight")});
    L.w_down = take_matrix(w, p + "mlp.down_proj.weight");
    w_.layers.push_back(std::move(L));
  }
  w.clear();
}

LlamaModel::LlamaModel(LoadedModel& loaded, Activations activations, int64_t head_vocab, const Placement& placement)
    : config_(loaded.config), placement_(resolve_placement(placement)), activations_(activations) {
  SPECLAB_CHECK(head_vocab >= 0, "head_vocab must be >= 0");
  config_.device = placement_.device_name;
  config_.dtype = placement_.dtype_name;
  limit_blas_threads();
  c10::InferenceMode guard;
  const ModelConfig& c = config_;
  if (loaded.random_weights) {
    w_ = random_weights(c, placement_, /*seed=*/0);
  } else {
    validate_weights(config_, loaded.weights, loaded.source);
    take_weights(loaded.weights);
  }
  if (head_vocab > 0 && head_vocab < c.vocab_size) {
    const std::vector<int64_t> ids = frequent_head_ids(*loaded.tokenizer, c.vocab_size, head_vocab);
    head_ids_ = at::tensor(ids, at::kLong);
    w_.lm_head = select_rows(w_.lm_head, head_ids_);
  }
  // kv_dtype auto on the native CPU path over quantized blocks: a binary16 cache, as llama.cpp's
  // default (half the bytes attention streams; the weights' own rounding is far coarser). Any
  // layer matrix kept in its blocks decides: until 2026-12-07 layer 0's down projection alone
  // did, and a file whose blk.0.ffn_down has a type that loads as float32 while the others stay
  // packed (llama.cpp's Q4_K_S and Q3_K_M of Qwen2.5-0.5B, before Q5_K was packed) got a float32
  // cache. A file of unquantized matrices only (F16, BF16: packed since 2026-12-07, but not
  // quantized) still gets float32.
  if (placement.kv_dtype == "auto" && !placement_.dense && placement_.device.is_cpu() && any_layer_quantized(w_)) {
    placement_.kv_dtype = at::kHalf;
    placement_.kv_dtype_name = "float16";
  }
  config_.kv_dtype = placement_.kv_dtype_name;
  // The int8 kernels read their own layout (qgemm_x8.h): a second copy of the matrices,
  // made once here (the ggml blocks stay for embedding lookups and the other ISAs and paths).
  if (activations_ == Activations::kInt8 && !placement_.dense) {
    add_x8_repack(w_.lm_head);
    for (LlamaLayer& L : w_.layers)
      for (WeightMatrix* m : {&L.w_qkv, &L.w_o, &L.w_gate_up, &L.w_down}) add_x8_repack(*m);
  }

  if (placement_.dense && !loaded.random_weights)
    place_weights(w_, placement_, c.tie_word_embeddings && !head_ids_.defined());
  auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.numel() * t.element_size()) : 0; };
  weight_bytes_ = w_.embed.bytes() + bytes(w_.final_norm) + (c.tie_word_embeddings ? 0 : w_.lm_head.bytes());
  for (const auto& L : w_.layers)
    weight_bytes_ += bytes(L.attn_norm) + bytes(L.mlp_norm) + L.w_qkv.bytes() + bytes(L.b_qkv) + L.w_o.bytes() +
                     L.w_gate_up.bytes() + L.w_down.bytes();
  // A tied table is the LM head too, streamed every step; an untied one is read row by row.
  step_weight_bytes_ = weight_bytes_ - (c.tie_word_embeddings ? 0 : w_.embed.bytes());
  std::vector<std::string> kinds;
  w_.embed.count_kinds(kinds);
  if (!c.tie_word_embeddings) w_.lm_head.count_kinds(kinds);
  for (const auto& L : w_.layers)
    for (const WeightMatrix* m : {&L.w_qkv, &L.w_o, &L.w_gate_up, &L.w_down}) m->count_kinds(kinds);
  std::map<std::string, int> counts;
  for (const std::string& k : kinds) ++counts[k];
  for (const auto& [name, k] : counts)
    weight_storage_ += (weight_storage_.empty() ? "" : ", ") + name + " x " + std::to_string(k);
  weight_storage_ += std::string(" matrices, ") + placement_.dtype_name + " norms";
  if (!placement_.device.is_cpu()) weight_storage_ += " on " + placement_.device_name;

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
  w_.rope_cos = at::from_blob(cos_t.data(), {c.max_position_embeddings, half}, at::kFloat).to(placement_.device);
  w_.rope_sin = at::from_blob(sin_t.data(), {c.max_position_embeddings, half}, at::kFloat).to(placement_.device);
  if (placement_.device.is_cpu()) {  // to() on the same device aliases the vectors' storage
    w_.rope_cos = w_.rope_cos.clone();
    w_.rope_sin = w_.rope_sin.clone();
  }
}

namespace {

// A drafter's matrix on linear(): the model's kernels at the model's activations.
class LlamaPackedMatrix : public PackedMatrix {
 public:
  LlamaPackedMatrix(WeightMatrix m, Activations act) : m_(std::move(m)), act_(act) {}
  int64_t rows() const override { return m_.out; }
  int64_t cols() const override { return m_.in; }
  void multiply(const float* x, const float* bias, float* y, int64_t n) const override {
    linear(m_, x, bias, y, n, act_);
  }
  uint64_t bytes() const override { return m_.bytes(); }
  std::string storage() const override {
    std::vector<std::string> kinds;
    m_.count_kinds(kinds);
    return kinds.empty() ? "float32" : kinds.front();
  }

 private:
  WeightMatrix m_;
  Activations act_;
};

}  // namespace

std::shared_ptr<const PackedMatrix> LlamaModel::pack_matrix(const at::Tensor& w) const {
  if (!placement_.device.is_cpu()) return nullptr;
  c10::InferenceMode guard;
  return std::make_shared<LlamaPackedMatrix>(pack_f32_matrix(w, activations_), activations_);
}

LlamaModel::RowMacs LlamaModel::matmul_macs_per_row() const {
  RowMacs r;
  const bool int8 = activations_ == Activations::kInt8 && !placement_.dense;
  std::function<void(const WeightMatrix&)> add = [&](const WeightMatrix& m) {
    if (!m.parts.empty()) {
      for (const WeightMatrix& part : m.parts) add(part);
      return;
    }
    (int8 && m.is_packed() && int8_gemm_supports(m.type) ? r.int8 : r.f32) +=
        static_cast<double>(m.out) * static_cast<double>(m.in);
  };
  add(w_.lm_head);
  for (const LlamaLayer& L : w_.layers)
    for (const WeightMatrix* m : {&L.w_qkv, &L.w_o, &L.w_gate_up, &L.w_down}) add(*m);
  return r;
}

int64_t LlamaModel::row_exact_batch() const {
  if (placement_.device.is_cpu()) return placement_.dtype == at::kFloat ? kMaxRowExact : 0;
#ifdef SPECLAB_HAVE_CUDA
  return kCudaPadRows;
#else
  return 0;
#endif
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

void LlamaModel::check_cache(const KvView& kv) const {
  // The caches' shape (kv_view.h): an int8 head carries its scale after its values.
  const int64_t stored_hd =
      kv.k_cache.scalar_type() == at::kChar ? config_.head_dim + KvGeometry::kInt8ScaleBytes : config_.head_dim;
  SPECLAB_CHECK(kv.k_cache.dim() == 4 && kv.k_cache.sizes() == kv.v_cache.sizes() &&
                    kv.k_cache.scalar_type() == kv.v_cache.scalar_type() &&
                    kv.k_cache.size(0) == config_.num_hidden_layers && kv.k_cache.size(2) == config_.num_key_value_heads &&
                    kv.k_cache.size(3) == stored_hd,
                "kv caches must be [n_layers, n_slots, n_kv_heads, " + std::to_string(stored_hd) +
                    "] of one dtype (an int8 head: head_dim + 4 bytes)");
  SPECLAB_CHECK(kv.read_base >= 0 || (kv.read_slots.defined() && kv.read_slots.size(0) == kv.ctx_len),
                "kv.read_slots must list ctx_len slots");
}

at::Tensor LlamaModel::forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                               const ForwardOptions& opts) const {
  c10::InferenceMode guard;
  const int64_t n = tokens.size(0);
  SPECLAB_CHECK(tokens.dim() == 1 && positions.dim() == 1 && positions.size(0) == n, "tokens/positions must be [n]");
  SPECLAB_CHECK(kv.write_slots.size(0) == n, "kv.write_slots must have one slot per token");
  SPECLAB_CHECK(kv.ctx_len >= n, "kv.ctx_len must include the new tokens");
  check_cache(kv);
  prepare_hidden(opts);
  at::Tensor logits = !opts.aten_reference && can_run_cpu(kv) ? forward_cpu(tokens, positions, kv, opts)
                                                              : forward_aten(tokens, positions, kv, opts);
  if (!logits.device().is_cpu() || logits.scalar_type() != at::kFloat) logits = logits.to(at::kCPU, at::kFloat);
  return full_vocab(logits);
}

at::Tensor LlamaModel::full_vocab(const at::Tensor& logits) const {
  if (!head_ids_.defined()) return logits;
  at::Tensor full = at::full({logits.size(0), config_.vocab_size}, -std::numeric_limits<float>::infinity(),
                             logits.options());
  return full.index_copy_(1, head_ids_.to(logits.device()), logits);
}

at::Tensor LlamaModel::final_norm(const at::Tensor& hidden) const {
  c10::InferenceMode guard;
  SPECLAB_CHECK(hidden.dim() == 2 && hidden.size(1) == config_.hidden_size, "final_norm: rows must be [n, hidden]");
  const at::Tensor x = hidden.to(at::kCPU, at::kFloat);
  const at::Tensor w = w_.final_norm.to(at::kCPU, at::kFloat);
  return x * at::rsqrt(x.pow(2).mean(-1, true) + config_.rms_norm_eps) * w;
}

at::Tensor LlamaModel::lm_head(const at::Tensor& features) const {
  c10::InferenceMode guard;
  SPECLAB_CHECK(features.dim() == 2 && features.size(1) == config_.hidden_size, "lm_head: rows must be [n, hidden]");
  const int64_t n = features.size(0);
  at::Tensor logits;
  if (placement_.dense) {  // dense weights in the placement's device and dtype
    const at::Tensor& w = w_.lm_head.f32;
    logits = at::linear(features.to(w.options()), w).to(at::kCPU, at::kFloat);
  } else {
    const at::Tensor x = features.to(at::kCPU, at::kFloat).contiguous();
    logits = at::empty({n, w_.lm_head.out}, at::kFloat);
    speclab::linear(w_.lm_head, x.data_ptr<float>(), nullptr, logits.data_ptr<float>(), n, activations_);
  }
  return full_vocab(logits);
}

std::vector<int64_t> frequent_head_ids(const Tokenizer& tok, int64_t vocab, int64_t n) {
  std::vector<int64_t> ids;
  const int64_t text = std::min(tok.vocab_size(), vocab);
  if (n >= vocab) {  // the whole head (a distilled draft trained with vocab_top_n 0 asks for it)
    for (int64_t t = 0; t < vocab; ++t) ids.push_back(t);
    return ids;
  }
  if (const auto* sp = dynamic_cast<const SentencePieceBpe*>(&tok)) {
    int64_t counted = 0;
    for (int64_t t = 0; t < vocab; ++t) {
      if (t < text) {
        const Token id = static_cast<Token>(t);
        if (tok.is_eos(id)) {
          ids.push_back(t);
          continue;
        }
        // Only ordinary pieces count: not byte fallback, unknown, control or unused ones.
        const int32_t type = sp->token_type(id);
        if (type != token_type::kNormal && type != token_type::kUserDefined) continue;
      }
      if (counted < n) {
        ids.push_back(t);
        ++counted;
      }
    }
    return ids;
  }
  for (int64_t t = 0; t < vocab; ++t) {
    bool keep = t < n;
    if (!keep && t < text) {
      const std::string& s = tok.token_text(static_cast<Token>(t));
      keep = tok.is_eos(static_cast<Token>(t)) ||
             (s.size() >= 4 && s.compare(0, 2, "<|") == 0 && s.compare(s.size() - 2, 2, "|>") == 0);
    }
    if (keep) ids.push_back(t);
  }
  return ids;
}

}  // namespace speclab
