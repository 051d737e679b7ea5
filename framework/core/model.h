// Model — a stateless causal LM: (tokens, positions, KvView) -> logits. A contract of the
// framework (framework/core): models/ implements it, the engine and drafters call it.
//
// A Model holds weights only. All per-sequence state (K/V) lives in storage owned by a KV
// manager and reaches the model through a KvView (STYLE.md §2), so the target, a draft model
// and a layer-skip drafter can share one manager.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/attention_rows.h"
#include "framework/core/kv_view.h"
#include "framework/core/packed_matrix.h"
#include "framework/core/types.h"
#include "framework/core/model_config.h"

namespace speclab {

struct StepProfile;  // framework/core/step_profile.h

struct ForwardOptions {
  // Layers to run, ascending; empty = all. Skipped layers neither read nor write their KV.
  std::vector<int64_t> layers;
  // Only compute logits for the last `logits_last_n` tokens (0 = all tokens).
  int64_t logits_last_n = 0;
  // Run the libtorch-op implementation even where a faster CPU path exists (tests compare them).
  bool aten_reference = false;
  // Hidden states to return: for each entry of hidden_layers (a layer that runs, i.e. one of
  // `layers` or any layer when `layers` is empty), the residual stream after that layer,
  // [n, hidden] float32, for every token of the call whatever logits_last_n. They are stored in
  // *hidden_out (resized to hidden_layers.size()) in the order of hidden_layers. The last layer's
  // hidden state, after the final norm and the LM head, is the logits. hidden_out must not be
  // null when hidden_layers is not empty.
  std::vector<int64_t> hidden_layers = {};
  std::vector<at::Tensor>* hidden_out = nullptr;  // [hidden_layers.size()] of [n, hidden]
  // When set, the layer loop adds its wall time per step to *profile (step_profile.h; host
  // time, meaningful on the CPU). Never changes a result.
  StepProfile* profile = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;

  // tokens:    [n] int64 token ids
  // positions: [n] int64 absolute positions (ascending; the last ctx_len - n slots of kv)
  // kv:        the sequence's cache view; K/V of the new tokens are written to kv.write_slots
  // returns:   [n_out, vocab] float32 logits, n_out = n or opts.logits_last_n
  virtual at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                             const ForwardOptions& opts = {}) const = 0;

  // One new token for each of B sequences in one pass (batched decoding, e.g. the target
  // answering many prompts: engine/batch_decode.h).
  //   tokens:    [B] int64, token b is sequence b's next token
  //   positions: [B] int64, its position (the last of its view's ctx_len)
  //   kv:        [B] views, kv[b] writing exactly one slot; all over the same cache tensors
  //   opts:      hidden_layers / hidden_out as forward()'s ([B, hidden] each); the other fields
  //              must keep their defaults (all layers, every row's logits, the fast path)
  // returns:     [B, vocab] float32 logits; row b (and hidden row b) is what forward() of token b
  //              alone over kv[b] returns, bit for bit where B <= row_exact_batch().
  // This default runs those B forwards one after the other; a model with a batched kernel
  // path overrides it.
  virtual at::Tensor forward_decode_batch(const at::Tensor& tokens, const at::Tensor& positions,
                                          const std::vector<KvView>& kv, const ForwardOptions& opts = {}) const {
    // Each forward's one row is copied into row b of the result (Tensor methods only, so that
    // this header needs no ATen operator headers).
    const int64_t batch = static_cast<int64_t>(kv.size());
    at::Tensor out;
    if (!opts.hidden_layers.empty()) opts.hidden_out->assign(opts.hidden_layers.size(), at::Tensor());
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<at::Tensor> h;
      ForwardOptions one = opts;
      one.hidden_out = opts.hidden_layers.empty() ? nullptr : &h;
      const at::Tensor row = forward(tokens.narrow(0, b, 1), positions.narrow(0, b, 1), kv[b], one);
      if (b == 0) out = row.new_empty({batch, row.size(1)});
      out.narrow(0, b, 1).copy_(row);
      for (size_t l = 0; l < h.size(); ++l) {
        at::Tensor& dst = (*opts.hidden_out)[l];
        if (b == 0) dst = h[l].new_empty({batch, h[l].size(1)});
        dst.narrow(0, b, 1).copy_(h[l]);
      }
    }
    return out;
  }

  // Bytes held by the weights in memory.
  virtual uint64_t weight_bytes() const = 0;
  // Bytes of weights one decode step reads: weight_bytes() less what a step does not stream (an
  // untied embedding table, of which a step reads only its tokens' rows). The bandwidth floor of
  // `speclab bench` divides this by the memory bandwidth.
  virtual uint64_t step_weight_bytes() const { return weight_bytes(); }
  // The largest forward, in new tokens, whose rows are each bit-identical to the same row
  // computed alone (same position, same cache contents): then a verification pass of up to this
  // many tokens computes exactly the logits AR decoding would, and greedy speculative output
  // must equal AR's bit for bit, logits included. 0: no such promise.
  virtual int64_t row_exact_batch() const { return 0; }

  // How the weights are held in memory, e.g. "Q4_1 x 90, float32 x 61" (packed matrices count once
  // per stacked matrix).
  virtual std::string weight_storage() const { return "float32"; }

  // w: [out, in] float32, a drafter's own matrix (e.g. the EAGLE layer's). The same matrix packed
  // for this model's CPU kernels, in the storage its own matrices meet its activations with (Q8_0
  // blocks against int8 activations where the model runs those, else float32). nullptr: the model
  // has no such kernels, and the caller computes with libtorch ops.
  virtual std::shared_ptr<const PackedMatrix> pack_matrix(const at::Tensor& w) const { return nullptr; }
  // Computes call.out (attention_rows.h) on this model's CPU attention kernel, for a drafter's
  // own float32 K/V (e.g. the EAGLE layer's) on the host. false: the model has no such kernel,
  // and the caller computes it itself.
  virtual bool attend_rows(const AttentionRows& call) const { return false; }

  // The model's output head, for drafters that work on its hidden states (Medusa, EAGLE; also
  // across the plugin boundary, framework/draft/host_api.h). Both take and return host float32
  // rows and use the model's own weights and kernels; undefined when the model has no such head.
  //   final_norm: the final RMSNorm of rows of its last layer's residual stream
  //               (ForwardOptions::hidden_layers): the features its LM head reads.
  //   lm_head:    the LM head on feature rows, logits as forward() returns them (a reduced head
  //               gives -inf for the tokens it leaves out).
  virtual at::Tensor final_norm(const at::Tensor& hidden /*[n, hidden]*/) const { return {}; }  // -> [n, hidden]
  virtual at::Tensor lm_head(const at::Tensor& features /*[n, hidden]*/) const { return {}; }  // -> [n, vocab]
};

}  // namespace speclab
