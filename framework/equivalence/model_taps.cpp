#include "framework/equivalence/model_taps.h"

#include "framework/core/error.h"

namespace speclab {

at::Tensor LogitsRecorder::forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                                   const ForwardOptions& opts) const {
  at::Tensor out = inner_.forward(tokens, positions, kv, opts);
  calls_.push_back(out.clone());
  return out;
}

namespace {

// True when positions are 0, 1, ..., n-1: a prefill from the start of the sequence.
bool starts_at_zero(const at::Tensor& positions) {
  const int64_t n = positions.size(0);
  if (n == 0) return false;
  at::Tensor p = positions.to(at::kLong).contiguous();
  const int64_t* d = p.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (d[i] != i) return false;
  return true;
}

std::vector<int64_t> to_vector(const at::Tensor& tokens) {
  at::Tensor t = tokens.to(at::kLong).contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

}  // namespace

at::Tensor PrefillMemo::forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                                const ForwardOptions& opts) const {
  if (!opts.layers.empty() || !starts_at_zero(positions)) return inner_.forward(tokens, positions, kv, opts);
  std::vector<int64_t> ids = to_vector(tokens);
  if (!tokens_.empty() && ids == tokens_ && opts.logits_last_n == last_n_ && opts.hidden_layers == hidden_layers_ &&
      kv.write_slots.size(0) == static_cast<int64_t>(ids.size())) {
    // k_cache: [n_layers, n_slots, kvh, d]; k_: [n_layers, n, kvh, d]
    kv.k_cache.index_copy_(1, kv.write_slots, k_);
    kv.v_cache.index_copy_(1, kv.write_slots, v_);
    if (!hidden_layers_.empty()) {
      SPECLAB_CHECK(opts.hidden_out != nullptr, "ForwardOptions::hidden_out must be set with hidden_layers");
      opts.hidden_out->clear();
      for (const at::Tensor& h : hidden_) opts.hidden_out->push_back(h.clone());
    }
    ++hits_;
    return logits_.clone();
  }
  at::Tensor out = inner_.forward(tokens, positions, kv, opts);
  SPECLAB_CHECK(kv.k_cache.dim() == 4 && kv.v_cache.dim() == 4, "KvView caches must be [layers, slots, kvh, d]");
  k_ = kv.k_cache.index_select(1, kv.write_slots);
  v_ = kv.v_cache.index_select(1, kv.write_slots);
  logits_ = out.clone();
  hidden_layers_ = opts.hidden_layers;
  hidden_.clear();
  if (!hidden_layers_.empty())
    for (const at::Tensor& h : *opts.hidden_out) hidden_.push_back(h.clone());
  tokens_ = std::move(ids);
  last_n_ = opts.logits_last_n;
  ++misses_;
  return out;
}

}  // namespace speclab
