// Model decorators used by the equivalence checks. Both wrap a Model and forward every call to
// it unchanged, so the engines (generate_ar, generate_speculative) run exactly as they do in
// production; the decorators only observe or memoize.
//
//   LogitsRecorder  keeps a copy of the logits every forward() returns, in call order, so the
//                   greedy check can read the target's logits in the AR pass and in the
//                   verification pass without recomputing them (a recomputation would use a
//                   different batch shape and so different rounding: exactly what the check
//                   must not paper over).
//   PrefillMemo     memoizes the prefill of one fixed context: a forward over exactly the
//                   remembered tokens at positions 0..n-1 (all layers, same logits_last_n)
//                   writes the remembered K/V into the view's write slots and returns the
//                   remembered logits, bit-identical to what the model computed the first time.
//                   Every other call runs the model. The sampling check draws thousands of
//                   continuations of one context; this removes the repeated prefill and nothing
//                   else.
// Neither is thread-safe (forward() updates the decorator's state); use one per thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "framework/core/model.h"

namespace speclab {

class LogitsRecorder : public Model {
 public:
  explicit LogitsRecorder(const Model& inner) : inner_(inner) {}

  const ModelConfig& config() const override { return inner_.config(); }
  uint64_t weight_bytes() const override { return inner_.weight_bytes(); }
  uint64_t step_weight_bytes() const override { return inner_.step_weight_bytes(); }
  std::shared_ptr<const PackedMatrix> pack_matrix(const at::Tensor& w /*[out, in]*/) const override {
    return inner_.pack_matrix(w);
  }
  bool attend_rows(const AttentionRows& call) const override { return inner_.attend_rows(call); }
  int64_t row_exact_batch() const override { return inner_.row_exact_batch(); }
  std::string weight_storage() const override { return inner_.weight_storage(); }
  at::Tensor final_norm(const at::Tensor& hidden /*[n, hidden]*/) const override { return inner_.final_norm(hidden); }
  at::Tensor lm_head(const at::Tensor& features /*[n, hidden]*/) const override { return inner_.lm_head(features); }
  at::Tensor forward(const at::Tensor& tokens /*[n] int64*/, const at::Tensor& positions /*[n] int64*/, const KvView& kv,
                     const ForwardOptions& opts = {}) const override;

  // One entry per forward() since the last clear(): the returned logits, [n_out, vocab] float32.
  const std::vector<at::Tensor>& calls() const { return calls_; }
  void clear() { calls_.clear(); }

 private:
  const Model& inner_;
  mutable std::vector<at::Tensor> calls_;
};

class PrefillMemo : public Model {
 public:
  explicit PrefillMemo(const Model& inner) : inner_(inner) {}

  const ModelConfig& config() const override { return inner_.config(); }
  uint64_t weight_bytes() const override { return inner_.weight_bytes(); }
  uint64_t step_weight_bytes() const override { return inner_.step_weight_bytes(); }
  std::shared_ptr<const PackedMatrix> pack_matrix(const at::Tensor& w /*[out, in]*/) const override {
    return inner_.pack_matrix(w);
  }
  bool attend_rows(const AttentionRows& call) const override { return inner_.attend_rows(call); }
  int64_t row_exact_batch() const override { return inner_.row_exact_batch(); }
  std::string weight_storage() const override { return inner_.weight_storage(); }
  at::Tensor final_norm(const at::Tensor& hidden /*[n, hidden]*/) const override { return inner_.final_norm(hidden); }
  at::Tensor lm_head(const at::Tensor& features /*[n, hidden]*/) const override { return inner_.lm_head(features); }
  // A call with positions starting at 0, ascending by 1 and no layer subset is a prefill: it is
  // answered from the memo when tokens, logits_last_n and hidden_layers match the remembered
  // ones (the hidden states asked for, e.g. by the eagle drafter, are remembered too), and
  // otherwise run and remembered (replacing the previous memo).
  // kv.k_cache/v_cache must be [n_layers, n_slots, n_kv_heads, stored_head_dim] as documented in
  // framework/core/kv_view.h.
  at::Tensor forward(const at::Tensor& tokens /*[n] int64*/, const at::Tensor& positions /*[n] int64*/, const KvView& kv,
                     const ForwardOptions& opts = {}) const override;

  int64_t hits() const { return hits_; }      // prefills answered from the memo
  int64_t misses() const { return misses_; }  // prefills computed (and remembered)

 private:
  const Model& inner_;
  mutable std::vector<int64_t> tokens_;  // [n] the remembered prompt (empty = no memo)
  mutable int64_t last_n_ = -1;          // its logits_last_n
  mutable at::Tensor k_, v_;             // [n_layers, n, n_kv_heads, stored_head_dim]
  mutable at::Tensor logits_;            // [n_out, vocab]
  mutable std::vector<int64_t> hidden_layers_;  // the hidden states asked for, and
  mutable std::vector<at::Tensor> hidden_;      // [hidden_layers_.size()] of [n, hidden]
  mutable int64_t hits_ = 0, misses_ = 0;
};

}  // namespace speclab
