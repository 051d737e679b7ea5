// The CPU backend of the layer loop (layer_loop.h): raw float32 buffers (the K/V cache float32
// or float16), gemv.h / qgemm.h matmuls (through linear()), cpu_ops.h row operations, and attention_cpu.h's multi-row kernel
// over the paged cache. No libtorch op runs on this path. One decode step runs ~10 steps per layer; as libtorch
// ops each would cost 5-10 µs of dispatch, more than the math.
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/attention_cpu.h"
#include "models/llama/cpu_ops.h"
#include "models/llama/gemv.h"
#include "models/llama/layer_loop.h"
#include "models/llama/llama_model.h"

namespace speclab {

namespace {

struct CpuRows {
  float* data = nullptr;  // [n, cols] row-major
  int64_t n = 0, cols = 0;
};

class CpuOps {
 public:
  using Rows = CpuRows;

  // The rows of one sequence within a call: rows [row0, row0 + rows) attend that sequence's
  // context (read_slots, or the range from read_base when read_slots is null; ctx keys).
  struct Segment {
    int64_t row0 = 0, rows = 0;
    const int64_t* read_slots = nullptr;  // [ctx] or null
    int64_t read_base = -1, ctx = 0;
  };

  // segments: the call's sequences in row order, covering rows [0, n); every write slot and
  // read slot lies in the caches of `kv` (the storage all segments share).
  CpuOps(const ModelConfig& c, const LlamaWeights& w, Activations act, const int64_t* tokens,
         const int64_t* positions /*[n]*/, const int64_t* write_slots /*[n]*/, int64_t n, std::vector<Segment> segments,
         const KvView& kv)
      : c_(c), w_(w), act_(act), tokens_(tokens), positions_(positions), write_slots_(write_slots), n_(n),
        kv_dim_(c.num_key_value_heads * c.head_dim), slot_stride_(c.num_key_value_heads * kv.k_cache.size(3)),
        layer_stride_(kv.k_cache.size(1) * slot_stride_),
        kv_elem_(kv.k_cache.scalar_type() == at::kHalf   ? cpu::KvElement::kFloat16
                 : kv.k_cache.scalar_type() == at::kChar ? cpu::KvElement::kInt8
                                                         : cpu::KvElement::kFloat32),
        kv_elem_bytes_(static_cast<int64_t>(kv.k_cache.element_size())), k_base_(kv.k_cache.data_ptr()),
        v_base_(kv.v_cache.data_ptr()), segments_(std::move(segments)) {
    const int64_t q_dim = c.num_attention_heads * c.head_dim;
    // One layer's temporaries: two norms, qkv, attention, output projection, gate/up, SwiGLU, down.
    limits_.resize(static_cast<size_t>(n));
    for (const Segment& g : segments_)  // each sequence's causal rule, as if it ran alone
      cpu::causal_limits(positions + g.row0, g.rows, g.ctx, limits_.data() + g.row0);
    arena_.resize(static_cast<size_t>(
        n * (4 * c.hidden_size + q_dim + 2 * kv_dim_ + q_dim + 3 * c.intermediate_size)));
  }

  Rows embed() {
    residual_.resize(static_cast<size_t>(n_ * c_.hidden_size));
    const WeightMatrix& e = w_.embed;
    if (e.is_packed()) {
      dequantize_packed_rows(e.packed.data_ptr<uint8_t>(), e.type, tokens_, n_, c_.hidden_size, residual_.data());
    } else {
      const float* table = e.f32.data_ptr<float>();
      for (int64_t i = 0; i < n_; ++i)
        std::copy(table + tokens_[i] * c_.hidden_size, table + (tokens_[i] + 1) * c_.hidden_size,
                  residual_.data() + i * c_.hidden_size);
    }
    return {residual_.data(), n_, c_.hidden_size};
  }

  void begin_layer() { used_ = 0; }

  Rows rms_norm(const Rows& x, const at::Tensor& weight) {
    Rows y = alloc(x.n, x.cols);
    cpu::rms_norm_rows(x.data, weight.data_ptr<float>(), y.data, x.n, x.cols, static_cast<float>(c_.rms_norm_eps));
    return y;
  }

  Rows linear(const WeightMatrix& w, const Rows& x, const at::Tensor& bias) {
    Rows y = alloc(x.n, w.out);
    speclab::linear(w, x.data, bias.defined() ? bias.data_ptr<float>() : nullptr, y.data, x.n, act_);
    return y;
  }

  void rope_and_store(int64_t layer, Rows& qkv) {
    const int64_t H = c_.num_attention_heads, KVH = c_.num_key_value_heads, D = c_.head_dim, half = D / 2;
    const int64_t q_dim = H * D;
    const float* cos_tab = w_.rope_cos.data_ptr<float>();
    const float* sin_tab = w_.rope_sin.data_ptr<float>();
    for (int64_t i = 0; i < n_; ++i) {
      float* row = qkv.data + i * qkv.cols;
      const float* cs = cos_tab + positions_[i] * half;
      const float* sn = sin_tab + positions_[i] * half;
      for (int64_t hh = 0; hh < H + KVH; ++hh) cpu::rope_head(row + hh * D, cs, sn, D);  // q heads, then k heads
      const int64_t at = layer * layer_stride_ + write_slots_[i] * slot_stride_;  // element offset in the cache
      if (kv_elem_ == cpu::KvElement::kFloat16) {
        cpu::store_f16(row + q_dim, static_cast<uint16_t*>(k_base_) + at, kv_dim_);
        cpu::store_f16(row + q_dim + kv_dim_, static_cast<uint16_t*>(v_base_) + at, kv_dim_);
      } else if (kv_elem_ == cpu::KvElement::kInt8) {  // per kv head: D int8 values and the scale
        cpu::quantize_kv_heads(row + q_dim, KVH, D, static_cast<int8_t*>(k_base_) + at);
        cpu::quantize_kv_heads(row + q_dim + kv_dim_, KVH, D, static_cast<int8_t*>(v_base_) + at);
      } else {
        std::copy(row + q_dim, row + q_dim + kv_dim_, static_cast<float*>(k_base_) + at);
        std::copy(row + q_dim + kv_dim_, row + q_dim + 2 * kv_dim_, static_cast<float*>(v_base_) + at);
      }
    }
  }

  // Causal attention of every q head over the layer's cache (attention_cpu.h), one call per
  // segment: row i of a segment sees keys j < limits_[i] of its own sequence, the same keys
  // and the same call whether its sequence runs alone or beside others.
  Rows attention(int64_t layer, const Rows& qkv) {
    const int64_t H = c_.num_attention_heads, D = c_.head_dim;
    Rows out = alloc(n_, H * D);
    cpu::AttentionArgs a;
    a.q_stride = qkv.cols;
    a.n_heads = H;
    a.n_kv_heads = c_.num_key_value_heads;
    a.head_dim = D;
    const int64_t layer_bytes = layer * layer_stride_ * kv_elem_bytes_;
    a.k = static_cast<const char*>(k_base_) + layer_bytes;
    a.v = static_cast<const char*>(v_base_) + layer_bytes;
    a.kv = kv_elem_;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    for (const Segment& g : segments_) {
      a.q = qkv.data + g.row0 * qkv.cols;
      a.n = g.rows;
      a.slots = g.read_slots;
      a.slot_base = g.read_base;
      a.limits = limits_.data() + g.row0;
      a.out = out.data + g.row0 * H * D;
      cpu::attend_rows(a);
    }
    return out;
  }

  Rows swiglu(const Rows& gate_up) {
    const int64_t inter = gate_up.cols / 2;
    Rows y = alloc(gate_up.n, inter);
    // Elements [e0, e1) of the n x inter outputs. Split over the threads from 32768 elements on
    // (with kernel_isa() >= AVX2 silu_mul takes about 0.25 ns per element, so below that the
    // split's hand-off costs more than it saves; glibc's expf took ~4.5 ns per element);
    // elementwise, and an element's result does not depend on the cut (cpu_ops.h).
    const auto run = [&](int64_t e0, int64_t e1) {
      while (e0 < e1) {
        const int64_t i = e0 / inter, c = e0 % inter, len = std::min(e1 - e0, inter - c);
        const float* row = gate_up.data + i * gate_up.cols;
        cpu::silu_mul(row + c, row + inter + c, y.data + i * inter + c, len);
        e0 += len;
      }
    };
    const int64_t total = gate_up.n * inter;
    if (total >= 32768)
      parallel_chunks(total, 8192, compute_threads(), run);
    else
      run(0, total);
    return y;
  }

  void add(Rows& x, const Rows& y) { cpu::add_inplace(x.data, y.data, x.n * x.cols); }

  Rows last_rows(const Rows& x, int64_t k) { return {x.data + (x.n - k) * x.cols, k, x.cols}; }

  at::Tensor view(const Rows& x) { return at::from_blob(x.data, {x.n, x.cols}, at::kFloat); }

  // In pieces of at most kMaxRowExact rows, so that a row's logits are the same bits however many
  // rows ask for them: the last prompt row's when batch decode keeps every row's top-1
  // (logits_last_n = 0) equal generate_ar's from the last row alone. A prefill that asks for the
  // last row only (the usual case) runs one piece.
  at::Tensor logits(const Rows& h) {
    at::Tensor out = at::empty({h.n, w_.lm_head.out}, at::kFloat);  // [k, vocab]
    float* y = out.data_ptr<float>();
    for (int64_t r = 0; r < h.n; r += kMaxRowExact) {
      const int64_t k = std::min(kMaxRowExact, h.n - r);
      speclab::linear(w_.lm_head, h.data + r * h.cols, nullptr, y + r * w_.lm_head.out, k, act_);
    }
    return out;
  }

 private:
  Rows alloc(int64_t n, int64_t cols) {
    const size_t need = static_cast<size_t>(n * cols);
    SPECLAB_CHECK(used_ + need <= arena_.size(), "CPU backend scratch exhausted");
    Rows r{arena_.data() + used_, n, cols};
    used_ += need;
    return r;
  }

  const ModelConfig& c_;
  const LlamaWeights& w_;
  const Activations act_;
  const int64_t *tokens_, *positions_, *write_slots_;
  // Stored elements per slot (kv heads x stored head dim: head_dim, or head_dim + 4 for int8)
  // and per layer (slots x slot_stride_).
  const int64_t n_, kv_dim_, slot_stride_, layer_stride_;
  const cpu::KvElement kv_elem_;  // what the cache holds (float32, binary16, or int8 heads with scales)
  const int64_t kv_elem_bytes_;   // bytes of one stored element (4, 2 or 1)
  void *k_base_, *v_base_;
  std::vector<Segment> segments_;  // the call's sequences, in row order
  std::vector<int64_t> limits_;    // [n] keys each row attends (causal_limits per segment)
  std::vector<float> residual_;  // [n, hidden], the residual stream
  std::vector<float> arena_;     // one layer's temporaries
  size_t used_ = 0;
};

}  // namespace

bool LlamaModel::can_run_cpu(const KvView& kv) const {
  auto ok = [](const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.is_contiguous(); };
  return placement_.device.is_cpu() && placement_.dtype == at::kFloat && ok(kv.k_cache) && ok(kv.v_cache) &&
         (kv.k_cache.scalar_type() == at::kFloat || kv.k_cache.scalar_type() == at::kHalf ||
          kv.k_cache.scalar_type() == at::kChar) &&
         kv.v_cache.scalar_type() == kv.k_cache.scalar_type() && w_.final_norm.device().is_cpu() &&
         (w_.embed.is_packed() || w_.embed.f32.device().is_cpu());
}

bool LlamaModel::attend_rows(const AttentionRows& call) const {
  cpu::AttentionArgs a;
  a.q = call.q;
  a.q_stride = call.q_stride;
  a.n = call.n;
  a.n_heads = call.n_heads;
  a.n_kv_heads = call.n_kv_heads;
  a.head_dim = call.head_dim;
  a.k = call.k;
  a.v = call.v;
  a.kv = cpu::KvElement::kFloat32;
  a.slots = call.slots;
  a.slot_base = call.slot_base;
  a.limits = call.limits;
  a.scale = call.scale;
  a.out = call.out;
  cpu::attend_rows(a);
  return true;
}

namespace {

// Checks a call's ids against the model and the cache (thrown as Error(kInternal)): tokens and
// positions [n], write slots [n] within n_slots.
void check_rows(const ModelConfig& c, const int64_t* tokens, const int64_t* positions, const int64_t* write_slots,
                int64_t n, int64_t n_slots) {
  for (int64_t i = 0; i < n; ++i) {
    SPECLAB_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, "token id out of range: " + std::to_string(tokens[i]));
    SPECLAB_CHECK(positions[i] >= 0 && positions[i] < c.max_position_embeddings,
                  "position out of range: " + std::to_string(positions[i]));
    SPECLAB_CHECK(write_slots[i] >= 0 && write_slots[i] < n_slots, "kv write slot out of range");
  }
}

// The read side of one view as a CpuOps segment of `rows` rows from row0; read_t keeps the
// slots alive (an int64 copy when the view's are not). Checks them against n_slots.
CpuOps::Segment read_segment(const KvView& kv, int64_t row0, int64_t rows, int64_t n_slots, at::Tensor& read_t) {
  CpuOps::Segment g;
  g.row0 = row0;
  g.rows = rows;
  g.ctx = kv.ctx_len;
  g.read_base = kv.read_base;
  if (kv.read_base >= 0) {
    SPECLAB_CHECK(kv.read_base + kv.ctx_len <= n_slots, "kv read range out of range");
    return g;
  }
  read_t = kv.read_slots.to(at::kLong).contiguous();
  g.read_slots = read_t.data_ptr<int64_t>();
  for (int64_t j = 0; j < kv.ctx_len; ++j)
    SPECLAB_CHECK(g.read_slots[j] >= 0 && g.read_slots[j] < n_slots, "kv read slot out of range");
  return g;
}

}  // namespace

at::Tensor LlamaModel::forward_cpu(const at::Tensor& tokens_in, const at::Tensor& positions_in, const KvView& kv,
                                   const ForwardOptions& opts) const {
  const ModelConfig& c = config_;
  const int64_t n = tokens_in.size(0);
  const at::Tensor tokens_t = tokens_in.to(at::kLong).contiguous();
  const at::Tensor positions_t = positions_in.to(at::kLong).contiguous();
  const at::Tensor write_t = kv.write_slots.to(at::kLong).contiguous();
  const int64_t* tokens = tokens_t.data_ptr<int64_t>();
  const int64_t* positions = positions_t.data_ptr<int64_t>();
  const int64_t* write_slots = write_t.data_ptr<int64_t>();
  const int64_t n_slots = kv.k_cache.size(1);
  check_rows(c, tokens, positions, write_slots, n, n_slots);
  at::Tensor read_t;
  std::vector<CpuOps::Segment> segments{read_segment(kv, 0, n, n_slots, read_t)};
  CpuOps ops(c, w_, activations_, tokens, positions, write_slots, n, std::move(segments), kv);
  const int64_t n_out = opts.logits_last_n > 0 && opts.logits_last_n < n ? opts.logits_last_n : n;
  return run_layers(ops, w_, layers_to_run(opts), n, n_out, opts);
}

at::Tensor LlamaModel::forward_decode_batch(const at::Tensor& tokens_in, const at::Tensor& positions_in,
                                            const std::vector<KvView>& kv, const ForwardOptions& opts) const {
  c10::InferenceMode guard;
  const int64_t B = static_cast<int64_t>(kv.size());
  SPECLAB_CHECK(B >= 1 && tokens_in.dim() == 1 && tokens_in.size(0) == B && positions_in.dim() == 1 &&
                    positions_in.size(0) == B,
                "forward_decode_batch: tokens and positions must be [B], one per view");
  SPECLAB_CHECK(opts.layers.empty() && opts.logits_last_n == 0 && !opts.aten_reference,
                "forward_decode_batch runs every layer and returns every row's logits");
  prepare_hidden(opts);
  // The batched CPU pass needs every view on the CPU backend's storage, and all on one storage;
  // anything else (a device cache, separate pools) runs as B forwards.
  for (const KvView& v : kv) check_cache(v);
  bool batched = can_run_cpu(kv[0]);
  for (const KvView& v : kv)
    batched = batched && v.k_cache.data_ptr() == kv[0].k_cache.data_ptr() &&
              v.v_cache.data_ptr() == kv[0].v_cache.data_ptr() && v.k_cache.sizes() == kv[0].k_cache.sizes();
  if (!batched) return Model::forward_decode_batch(tokens_in, positions_in, kv, opts);
  const at::Tensor tokens_t = tokens_in.to(at::kLong).contiguous();
  const at::Tensor positions_t = positions_in.to(at::kLong).contiguous();
  const int64_t* tokens = tokens_t.data_ptr<int64_t>();
  const int64_t* positions = positions_t.data_ptr<int64_t>();
  const int64_t n_slots = kv[0].k_cache.size(1);
  std::vector<int64_t> write_slots(static_cast<size_t>(B));
  std::vector<at::Tensor> read_ts(static_cast<size_t>(B));
  std::vector<CpuOps::Segment> segments;
  for (int64_t b = 0; b < B; ++b) {
    const KvView& v = kv[static_cast<size_t>(b)];
    SPECLAB_CHECK(v.write_slots.numel() == 1 && v.ctx_len >= 1,
                  "forward_decode_batch: each view must write exactly one slot");
    write_slots[static_cast<size_t>(b)] = v.write_slots.to(at::kLong).item<int64_t>();
    segments.push_back(read_segment(v, b, 1, n_slots, read_ts[static_cast<size_t>(b)]));
  }
  check_rows(config_, tokens, positions, write_slots.data(), B, n_slots);
  CpuOps ops(config_, w_, activations_, tokens, positions, write_slots.data(), B, std::move(segments), kv[0]);
  return full_vocab(run_layers(ops, w_, layers_to_run(opts), B, B, opts));
}

}  // namespace speclab
