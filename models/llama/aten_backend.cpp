// The libtorch-op backend of the layer loop (layer_loop.h): every step as ATen ops, so it runs
// on any device and dtype the weights and the KV storage live in (placement.h). On the CPU it is
// the reference the CPU backend is tested against (ForwardOptions::aten_reference); its matmuls
// share linear() with that backend on CPU float32 weights, so a comparison isolates norms, RoPE,
// attention and the cache.
//
// In 16-bit dtypes, norms, RoPE and attention compute in float32 and round once to the dtype, as
// HF transformers does. On CUDA, attention is SpecLab's paged kernel
// (framework/cuda/paged_attention.h) and a call of up to LlamaModel::kCudaPadRows tokens runs as
// exactly that many rows (the extra rows repeat the last token and are dropped), so that every
// library op sees one shape: what makes a verification row bit-identical to an AR step there.
// Its 16-bit matmuls of that many rows are SpecLab's skinny kernel (framework/cuda/skinny_gemm.h),
// which streams each weight once and computes only the real rows.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "framework/core/error.h"
#include "models/llama/kv_int8.h"
#include "models/llama/gemv.h"
#include "models/llama/layer_loop.h"
#include "models/llama/llama_model.h"
#ifdef SPECLAB_HAVE_CUDA
#include "framework/cuda/fused_ops.h"
#include "framework/cuda/paged_attention.h"
#include "framework/cuda/skinny_gemm.h"
#endif
#ifdef SPECLAB_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <deque>
#include <map>
#endif

namespace speclab {

namespace {

#ifdef SPECLAB_HAVE_CUDA
// SPECLAB_CUDA_SKINNY=0 sends the 16-bit matmuls of up to kSkinnyMaxRows rows to cuBLAS instead of
// SpecLab's skinny kernel (for comparisons; both are batch-invariant at the padded row count).
// The CUDA kernels' name for a storage dtype (the placement allows float32, float16, bfloat16).
cuda::DType cuda_dtype(at::ScalarType st) {
  return st == at::kHalf ? cuda::DType::kF16 : st == at::kBFloat16 ? cuda::DType::kBF16 : cuda::DType::kF32;
}

static_assert(LlamaModel::kCudaPadRows <= cuda::kSkinnyMaxRows,
              "a padded call must fit the skinny kernel, or every padded matmul falls back to cuBLAS");

bool skinny_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("SPECLAB_CUDA_SKINNY");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}
#endif

class AtenOps {
 public:
  using Rows = at::Tensor;

  // tokens, positions, write_slots: [rows] int64 on the weights' device; read_slots: [>= ctx]
  // int64 there, or undefined when kv.read_base >= 0; ctx: the context the attention covers (on
  // CUDA it only sizes the kernel's grid, so a captured graph may use a larger one); n_real: rows
  // whose hidden states are kept (the rest are padding).
  AtenOps(const ModelConfig& c, const LlamaWeights& w, Activations act, const at::Tensor& tokens /*[rows]*/,
          const at::Tensor& positions /*[rows]*/, const at::Tensor& write_slots /*[rows]*/,
          const at::Tensor& read_slots /*[>= ctx]*/, const KvView& kv, int64_t ctx, int64_t n_real)
      : c_(c), w_(w), act_(act), tokens_(tokens), positions_(positions), kv_(kv), ctx_(ctx), n_real_(n_real),
        write_slots_(write_slots), read_slots_(read_slots) {
    cos_ = w.rope_cos.index_select(0, positions).unsqueeze(1);  // [n, 1, D/2]
    sin_ = w.rope_sin.index_select(0, positions).unsqueeze(1);
#ifdef SPECLAB_HAVE_CUDA
    const at::Device dev = w.rope_cos.device();
    if (dev.is_cuda()) {
      const at::ScalarType st = w.final_norm.scalar_type();
      dt_ = cuda_dtype(st);
      const int64_t H = c.num_attention_heads, D = c.head_dim;
      const size_t floats = cuda::paged_attention_workspace_floats(tokens.size(0), H, D, ctx);
      workspace_ = at::empty({static_cast<int64_t>(floats)}, at::TensorOptions().dtype(at::kFloat).device(dev));
    }
#endif
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

  // y = w * (x / sqrt(mean(x^2) + eps)), computed in float32; the normalised row is rounded to x's
  // dtype before the weight multiplies it (as HF)
  Rows rms_norm(const Rows& x, const at::Tensor& weight) {
#ifdef SPECLAB_HAVE_CUDA
    if (workspace_.defined()) {
      if (pending_.defined() && x.is_same(pending_x_)) {  // the deferred residual add, fused
        at::Tensor y = at::empty_like(x);
        cuda::add_rms_norm(dt_, x.data_ptr(), pending_.data_ptr(), weight.data_ptr(), y.data_ptr(), x.size(0),
                           x.size(1), static_cast<float>(c_.rms_norm_eps), current_stream());
        pending_ = pending_x_ = at::Tensor();
        return y;
      }
      settle(x);
      const at::Tensor xc = x.contiguous();
      at::Tensor y = at::empty_like(xc);
      cuda::rms_norm(dt_, xc.data_ptr(), weight.data_ptr(), y.data_ptr(), xc.size(0), xc.size(1),
                     static_cast<float>(c_.rms_norm_eps), current_stream());
      return y;
    }
#endif
    const at::Tensor xf = x.to(at::kFloat);
    at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true).add_(c_.rms_norm_eps));
    return (xf * inv).to(x.scalar_type()) * weight;
  }

  Rows linear(const WeightMatrix& w, const Rows& x, const at::Tensor& b) {
    const bool cpu_weights = w.is_packed() || !w.parts.empty() ||
                             (w.f32.device().is_cpu() && w.f32.is_contiguous() && w.f32.scalar_type() == at::kFloat);
    if (!cpu_weights) {
#ifdef SPECLAB_HAVE_CUDA
      const cuda::DType xdt = cuda_dtype(x.scalar_type());
      if (workspace_.defined() && skinny_enabled() && cuda::skinny_gemm_device_ok() &&
          x.size(0) <= cuda::kSkinnyMaxRows && xdt != cuda::DType::kF32 && w.f32.is_contiguous() &&
          w.f32.scalar_type() == x.scalar_type() &&
          (!b.defined() || (b.is_contiguous() && b.scalar_type() == x.scalar_type())) &&
          cuda::skinny_gemm_supported(xdt, w.f32.data_ptr(), w.f32.data_ptr(), w.in)) {
        // x is always a fresh or row-offset block here; copy it if it is not 16-byte aligned, so
        // that the kernel's choice depends on the weights alone (the same for every call).
        settle(x);
        at::Tensor xc = x.contiguous();
        if (!cuda::skinny_gemm_supported(xdt, xc.data_ptr(), w.f32.data_ptr(), w.in)) xc = xc.clone();
        at::Tensor y = at::empty({xc.size(0), w.out}, xc.options());
        // Rows n_real_.. are padding copies of the last real row (kCudaPadRows): not computed.
        const int64_t n = std::min<int64_t>(n_real_, xc.size(0));
        cuda::skinny_gemm(xdt, xc.data_ptr(), w.f32.data_ptr(), b.defined() ? b.data_ptr() : nullptr, y.data_ptr(),
                          xc.size(0), n, w.in, w.out, current_stream());
        return y;
      }
#endif
      return b.defined() ? at::linear(x, w.f32, b) : at::linear(x, w.f32);
    }
    at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty({x.size(0), w.out}, x.options());
    speclab::linear(w, xc.data_ptr<float>(), b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
                    x.size(0), act_);
    return y;
  }

  void rope_and_store(int64_t layer, Rows& qkv) {
    const int64_t n = qkv.size(0), H = c_.num_attention_heads, KVH = c_.num_key_value_heads, D = c_.head_dim;
    const int64_t q_dim = H * D, kv_dim = KVH * D;
#ifdef SPECLAB_HAVE_CUDA
    if (workspace_.defined()) {  // one kernel: q rotated into q_, k rotated and v into the cache
      const at::Tensor qkv_c = qkv.contiguous();
      q_ = at::empty({n, H, D}, qkv.options());
      cuda::rope_store(dt_, qkv_c.data_ptr(), w_.rope_cos.data_ptr<float>(), w_.rope_sin.data_ptr<float>(),
                       positions_.data_ptr<int64_t>(), write_slots_.data_ptr<int64_t>(), q_.data_ptr(),
                       kv_.k_cache.select(0, layer).data_ptr(), kv_.v_cache.select(0, layer).data_ptr(), n, H, KVH, D,
                       current_stream());
      return;
    }
#endif
    qkv.narrow(1, 0, q_dim).copy_(rope(qkv.narrow(1, 0, q_dim).view({n, H, D})).view({n, q_dim}));
    qkv.narrow(1, q_dim, kv_dim).copy_(rope(qkv.narrow(1, q_dim, kv_dim).view({n, KVH, D})).view({n, kv_dim}));
    // Padding rows repeat the last real row's token, position and slot: they write the same bits.
    // A cache in another dtype than the activations (kv_dtype) takes them rounded to its own.
    const at::ScalarType kv_type = kv_.k_cache.scalar_type();
    if (kv_type == at::kChar) {  // int8 heads with their scales (kv_int8.h)
      kv_.k_cache.select(0, layer).index_copy_(0, write_slots_, quantize_heads(qkv.narrow(1, q_dim, kv_dim), n, KVH, D));
      kv_.v_cache.select(0, layer).index_copy_(0, write_slots_,
                                               quantize_heads(qkv.narrow(1, q_dim + kv_dim, kv_dim), n, KVH, D));
      return;
    }
    kv_.k_cache.select(0, layer).index_copy_(0, write_slots_,
                                             qkv.narrow(1, q_dim, kv_dim).reshape({n, KVH, D}).to(kv_type));
    kv_.v_cache.select(0, layer).index_copy_(0, write_slots_,
                                             qkv.narrow(1, q_dim + kv_dim, kv_dim).reshape({n, KVH, D}).to(kv_type));
  }

  // x: [n, KVH * D] -> [n, KVH, D + 4] int8: each head's values and scale (quantize_kv_heads).
  static at::Tensor quantize_heads(const at::Tensor& x, int64_t n, int64_t KVH, int64_t D) {
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    at::Tensor out = at::empty({n, KVH, D + cpu::kKvInt8ScaleBytes}, at::kChar);
    cpu::quantize_kv_heads(xf.data_ptr<float>(), n * KVH, D, out.data_ptr<int8_t>());
    return out;
  }

  // store: [ctx, KVH, D + 4] int8 heads -> [ctx, KVH, D] float32, q * s. The scale bytes are
  // cloned to fresh storage, so the float view is aligned whatever D is.
  static at::Tensor dequantize_heads(const at::Tensor& store, int64_t D) {
    const at::Tensor scales =
        store.narrow(2, D, cpu::kKvInt8ScaleBytes).clone(at::MemoryFormat::Contiguous).view(at::kFloat);  // [ctx, KVH, 1]
    return store.narrow(2, 0, D).to(at::kFloat).mul_(scales);
  }

  Rows attention(int64_t layer, const Rows& qkv) {
    const int64_t n = qkv.size(0), H = c_.num_attention_heads, KVH = c_.num_key_value_heads, D = c_.head_dim;
    const int64_t G = H / KVH, q_dim = H * D, ctx = ctx_;
    at::Tensor q = qkv.narrow(1, 0, q_dim).reshape({n, H, D});  // [n, H, D]
    at::Tensor k_store = kv_.k_cache.select(0, layer);           // [n_slots, KVH, D] (int8: D + 4)
    at::Tensor v_store = kv_.v_cache.select(0, layer);
#ifdef SPECLAB_HAVE_CUDA
    if (workspace_.defined()) {
      const at::Tensor qc = q_.defined() ? q_ : q.contiguous();
      at::Tensor out = at::empty({n, q_dim}, qkv.options());
      const cuda::DType dt = cuda_dtype(qkv.scalar_type());
      cuda::paged_attention(dt, qc.data_ptr(), k_store.data_ptr(), v_store.data_ptr(),
                            read_slots_.defined() ? read_slots_.data_ptr<int64_t>() : nullptr, kv_.read_base,
                            positions_.data_ptr<int64_t>(), out.data_ptr(), workspace_.data_ptr<float>(), n, H, KVH, D,
                            ctx, static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), current_stream());
      return out;
    }
#endif
    at::Tensor keys = kv_.read_base >= 0 ? k_store.narrow(0, kv_.read_base, ctx) : k_store.index_select(0, read_slots_);
    at::Tensor vals = kv_.read_base >= 0 ? v_store.narrow(0, kv_.read_base, ctx) : v_store.index_select(0, read_slots_);
    keys = keys.scalar_type() == at::kChar ? dequantize_heads(keys, D) : keys.to(at::kFloat);  // [ctx, KVH, D]
    vals = vals.scalar_type() == at::kChar ? dequantize_heads(vals, D) : vals.to(at::kFloat);
    // Group the G query heads that share a kv head: rows ordered (g, i).
    at::Tensor qg = q.to(at::kFloat).view({n, KVH, G, D}).permute({1, 2, 0, 3}).reshape({KVH, G * n, D});  // [KVH, G*n, D]
    at::Tensor scores = at::bmm(qg, keys.permute({1, 2, 0}));  // [KVH, G*n, ctx]
    scores.mul_(1.0 / std::sqrt(static_cast<double>(D)));
    if (n > 1) {
      // Causal mask: key position j is visible to query i iff j <= positions[i].
      at::Tensor key_pos = at::arange(ctx, positions_.options());                          // [ctx]
      at::Tensor mask = key_pos.unsqueeze(0).gt(positions_.unsqueeze(1)).repeat({G, 1});  // [G*n, ctx]
      scores.masked_fill_(mask.unsqueeze(0), -std::numeric_limits<float>::infinity());
    }
    at::Tensor out = at::bmm(at::softmax(scores, -1), vals.permute({1, 0, 2}));                // [KVH, G*n, D]
    return out.view({KVH, G, n, D}).permute({2, 0, 1, 3}).reshape({n, q_dim}).to(qkv.scalar_type());  // [n, H*D]
  }

  Rows swiglu(const Rows& gate_up) {
    const int64_t inter = gate_up.size(1) / 2;
#ifdef SPECLAB_HAVE_CUDA
    if (workspace_.defined()) {
      const at::Tensor g = gate_up.contiguous();
      at::Tensor out = at::empty({g.size(0), inter}, g.options());
      cuda::swiglu(dt_, g.data_ptr(), out.data_ptr(), g.size(0), inter, current_stream());
      return out;
    }
#endif
    return at::silu(gate_up.narrow(1, 0, inter)).mul_(gate_up.narrow(1, inter, inter));
  }

  // On CUDA the add waits for the norm that reads x next, which does both in one kernel
  // (add_rms_norm); any other reader of x settles it first.
  void add(Rows& x, const Rows& y) {
#ifdef SPECLAB_HAVE_CUDA
    if (workspace_.defined() && x.is_contiguous() && y.is_contiguous() && x.sizes() == y.sizes()) {
      settle(x);
      if (pending_.defined()) settle(pending_x_);
      pending_ = y;
      pending_x_ = x;
      return;
    }
#endif
    x = x + y;
  }
  Rows last_rows(const Rows& x, int64_t k) {
    settle(x);
    return x.narrow(0, x.size(0) - k, k);
  }
  at::Tensor view(const Rows& x) {
    settle(x);
    return x.narrow(0, 0, n_real_);
  }
  at::Tensor logits(const Rows& h) { return linear(w_.lm_head, h, at::Tensor()); }

 private:
  // x: [n, heads, D] -> rotated copy (HF rotate_half layout), computed in float32
  at::Tensor rope(const at::Tensor& x) const {
    const int64_t half = c_.head_dim / 2;
    const at::Tensor xf = x.to(at::kFloat);
    at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
    return at::cat({x1 * cos_ - x2 * sin_, x2 * cos_ + x1 * sin_}, -1);
  }

  const ModelConfig& c_;
  const LlamaWeights& w_;
  const Activations act_;
  const at::Tensor &tokens_, &positions_;
  const KvView& kv_;
  const int64_t ctx_, n_real_;
  const at::Tensor &write_slots_, &read_slots_;
  at::Tensor cos_, sin_;  // [n, 1, D/2] float32
  // Applies a deferred residual add to x (in place), if one is pending on it.
  void settle(const at::Tensor& x) {
    if (pending_.defined() && x.is_same(pending_x_)) {
      pending_x_.add_(pending_);
      pending_ = pending_x_ = at::Tensor();
    }
  }

  at::Tensor workspace_;  // the CUDA attention kernel's, or undefined (then no CUDA kernel runs)
  at::Tensor pending_, pending_x_;  // a deferred x += pending_ (CUDA), or undefined
  at::Tensor q_;          // [n, H, D]: this layer's rotated queries (CUDA), or undefined
#ifdef SPECLAB_HAVE_CUDA
  cuda::DType dt_ = cuda::DType::kF32;
#endif

  // The stream the library ops run on (a graph capture's, say), for SpecLab's own kernel.
  static void* current_stream() {
#ifdef SPECLAB_TORCH_CUDA
    return c10::cuda::getCurrentCUDAStream().stream();
#else
    return nullptr;
#endif
  }
};

}  // namespace

#ifdef SPECLAB_TORCH_CUDA
// Captured forwards (CUDA graphs), one per (layers, cache storage, rows, real rows, context
// bucket; the skinny matmul kernel skips the padding rows, so the real count is baked in): a decode
// step or a verification pass replays ~10 library kernels per layer with one launch. The inputs
// are static device buffers copied in before each replay; the attention grid is sized for the
// bucket's end (the kernel's bits do not depend on it), so one graph serves 256 positions.
struct CudaGraphCache {
  struct Entry {
    at::cuda::CUDAGraph graph;
    at::Tensor inputs;  // static, [3 rows + ctx_cap] int64: tokens, positions, write slots, read slots
    at::Tensor tokens, positions, write_slots, read_slots;  // views of `inputs`
    at::Tensor logits;  // static output: [rows_out, head rows] float32
  };
  std::map<std::string, std::unique_ptr<Entry>> entries;
  std::deque<std::string> order;  // capture order: the oldest is dropped past kMaxEntries
  static constexpr size_t kMaxEntries = 64;
};

namespace {

bool cuda_graphs_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("SPECLAB_CUDA_GRAPHS");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

}  // namespace
#endif

bool LlamaModel::uses_cuda_graphs() const {
#ifdef SPECLAB_TORCH_CUDA
  return placement_.device.is_cuda() && cuda_graphs_enabled();
#else
  return false;
#endif
}

at::Tensor LlamaModel::forward_aten(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                                    const ForwardOptions& opts) const {
  const int64_t n = tokens.size(0);
  const at::Device dev = placement_.device;
  at::Tensor t = tokens.to(at::kLong), p = positions.to(at::kLong), ws = kv.write_slots.to(at::kLong);
  if (placement_.dense && t.device().is_cpu()) {  // a device-side index error would end the process
    const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
    SPECLAB_CHECK(lo >= 0 && hi < config_.vocab_size, "token id out of range: " + std::to_string(lo < 0 ? lo : hi));
    const int64_t plo = p.min().item<int64_t>(), phi = p.max().item<int64_t>();
    SPECLAB_CHECK(plo >= 0 && phi < config_.max_position_embeddings,
                  "position out of range: " + std::to_string(plo < 0 ? plo : phi));
    const int64_t n_slots = kv.k_cache.size(1);
    SPECLAB_CHECK(ws.min().item<int64_t>() >= 0 && ws.max().item<int64_t>() < n_slots, "kv write slot out of range");
  }
  const int64_t n_out = opts.logits_last_n > 0 && opts.logits_last_n < n ? opts.logits_last_n : n;
  // On CUDA a call of up to kCudaPadRows tokens runs as exactly that many rows (row_exact_batch()).
  const bool pad = dev.is_cuda() && row_exact_batch() > 0 && n <= kCudaPadRows;
  if (pad && n < kCudaPadRows) {
    t = at::cat({t, t.narrow(0, n - 1, 1).expand({kCudaPadRows - n})});
    p = at::cat({p, p.narrow(0, n - 1, 1).expand({kCudaPadRows - n})});
    ws = at::cat({ws, ws.narrow(0, n - 1, 1).expand({kCudaPadRows - n})});
  }
  const int64_t rows = t.size(0);
  // Padded calls compute the LM head on every row (one shape for all), then keep the asked rows.
  const int64_t rows_out = pad ? rows : n_out;
#ifdef SPECLAB_TORCH_CUDA
  if (uses_cuda_graphs() && opts.hidden_layers.empty() && rows <= kCudaGraphRows)
    return forward_graphed(t, p, ws, kv, opts, n, n_out, rows_out);
#endif
  const at::Tensor td = t.to(dev), pd = p.to(dev), wd = ws.to(dev);
  const at::Tensor rd = kv.read_base >= 0 ? at::Tensor() : kv.read_slots.to(dev, at::kLong);
  AtenOps ops(config_, w_, activations_, td, pd, wd, rd, kv, kv.ctx_len, n);
  at::Tensor logits = run_layers(ops, w_, layers_to_run(opts), rows, rows_out, opts);
  return rows_out == n_out ? logits : logits.narrow(0, n - n_out, n_out);
}

#ifdef SPECLAB_TORCH_CUDA
at::Tensor LlamaModel::forward_graphed(const at::Tensor& t, const at::Tensor& p, const at::Tensor& ws,
                                       const KvView& kv, const ForwardOptions& opts, int64_t n, int64_t n_out,
                                       int64_t rows_out) const {
  const at::Device dev = placement_.device;
  const int64_t rows = t.size(0);
  const int64_t ctx_cap = (kv.ctx_len + cuda::kAttentionChunk - 1) / cuda::kAttentionChunk * cuda::kAttentionChunk;
  const std::vector<int64_t> layers = layers_to_run(opts);
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(kv.k_cache.data_ptr())) + "/" +
                    std::to_string(reinterpret_cast<uintptr_t>(kv.v_cache.data_ptr())) + "/" +
                    std::to_string(kv.k_cache.size(1)) + "/" + std::to_string(rows) + "/" + std::to_string(n) + "/" +
                    std::to_string(rows_out) +
                    "/" + std::to_string(ctx_cap) + "/";
  for (int64_t l : layers) key += std::to_string(l) + ",";
  if (!cuda_graphs_) cuda_graphs_ = std::make_shared<CudaGraphCache>();
  CudaGraphCache& cache = *cuda_graphs_;
  // The call's inputs, host side: read slots for every position of the bucket (past ctx_len:
  // never read, since the kernel reads only positions <= each row's own).
  at::Tensor rd = kv.read_base >= 0 ? at::arange(kv.read_base, kv.read_base + kv.ctx_len, at::kLong)
                                    : kv.read_slots.to(at::kLong);
  if (ctx_cap > kv.ctx_len) rd = at::cat({rd, at::zeros({ctx_cap - kv.ctx_len}, at::kLong)});
  const at::Tensor host = at::cat({t, p, ws, rd});  // one copy to the device per call
  auto it = cache.entries.find(key);
  CudaGraphCache::Entry* e = it == cache.entries.end() ? nullptr : it->second.get();
  auto run = [&](CudaGraphCache::Entry& x) {
    AtenOps ops(config_, w_, activations_, x.tokens, x.positions, x.write_slots, x.read_slots, kv, ctx_cap, n);
    return run_layers(ops, w_, layers, rows, rows_out, opts).to(at::kFloat);
  };
  if (e == nullptr) {
    auto fresh = std::make_unique<CudaGraphCache::Entry>();
    fresh->inputs = host.to(dev);
    fresh->tokens = fresh->inputs.narrow(0, 0, rows);
    fresh->positions = fresh->inputs.narrow(0, rows, rows);
    fresh->write_slots = fresh->inputs.narrow(0, 2 * rows, rows);
    fresh->read_slots = fresh->inputs.narrow(0, 3 * rows, ctx_cap);
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, dev.index());
    c10::cuda::getCurrentCUDAStream(dev.index()).synchronize();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      run(*fresh);  // warm-up on the capture stream (library handles, workspaces); writes this call's K/V
      side.synchronize();
      fresh->graph.capture_begin();
      fresh->logits = run(*fresh);
      fresh->graph.capture_end();
      side.synchronize();
    }
    if (cache.entries.size() >= CudaGraphCache::kMaxEntries) {
      cache.entries.erase(cache.order.front());
      cache.order.pop_front();
    }
    cache.order.push_back(key);
    e = cache.entries.emplace(key, std::move(fresh)).first->second.get();
  } else {
    e->inputs.copy_(host);
  }
  e->graph.replay();
  const at::Tensor out = rows_out == n_out ? e->logits : e->logits.narrow(0, n - n_out, n_out);
  return out.to(at::kCPU);
}
#endif

}  // namespace speclab
