// MedusaHeads — Medusa's extra decoding heads (Cai et al. 2024, "Medusa: Simple LLM Inference
// Acceleration Framework with Multiple Decoding Heads", §2.1.1), their weights and forward,
// shared by training (framework/train/medusa_trainer.h, libtorch autograd) and drafting
// (medusa_drafter.h).
//
// Notation as in eagle_head.h: f_i is the target's feature at position i (its last layer's
// residual stream after the final RMSNorm), so the target's own LM head W_lm f_i predicts
// t_{i+1}. Head k (k = 1..K) predicts t_{i+1+k} from the same f_i, one residual block:
//   h_k = f_i + SiLU(W_k f_i + b_k)             W_k [d, d], b_k [d]
//   logits_k = W_head h_k                       [V']
// W_head is the target's LM head, frozen and shared by the K heads (the paper's Medusa-1 trains
// one per head; sharing keeps the draft small and lets a reduced head serve all of them): all of
// W_lm (V' = V) or its rows of the N most frequent target tokens (FR-Spec, vocab_ids maps row ->
// target token id). W_k starts at zero (the paper's initialisation), so an untrained head
// predicts t_{i+1}, as the LM head does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/model_config.h"
#include "framework/draft/builtin/eagle_head.h"

namespace speclab {

struct MedusaHeads {
  ModelConfig target;  // the target's config: hidden size, vocabulary, rms_norm_eps

  // Trained (float32), one per head k = 1..K at index k - 1:
  std::vector<at::Tensor> weight;  // [d, d]
  std::vector<at::Tensor> bias;    // [d]

  // Frozen, from the target (float32):
  at::Tensor final_norm;  // [d]    the target's final RMSNorm weight (features from hidden states)
  at::Tensor lm_head;     // [V', d] the target's LM head rows of vocab_ids
  at::Tensor vocab_ids;   // [V'] int64 target token id of each lm_head row

  int64_t n_heads() const { return static_cast<int64_t>(weight.size()); }
  int64_t head_vocab() const { return lm_head.size(0); }
  // The trained tensors by their safetensors name: "heads.<k-1>.weight", "heads.<k-1>.bias".
  std::map<std::string, at::Tensor*> trained();
  std::map<std::string, const at::Tensor*> trained() const;
};

// K fresh heads for `target`: weights and biases zero (deterministic). Frozen tensors are left
// undefined.
MedusaHeads init_medusa_heads(const ModelConfig& target, int64_t n_heads);

// target_features (eagle_head.h) with the heads' frozen final norm.
at::Tensor medusa_features(const MedusaHeads& heads, const at::Tensor& hidden /*[n, d]*/);  // -> [n, d]

// Head k's (1-based) residual block of features f: f + SiLU(W_k f + b_k).
at::Tensor medusa_hidden(const MedusaHeads& heads, int64_t k, const at::Tensor& features /*[n, d]*/);  // -> [n, d]

// Head k's logits over the head vocabulary (lm_head rows).
at::Tensor medusa_logits(const MedusaHeads& heads, int64_t k, const at::Tensor& features /*[n, d]*/);  // -> [n, V']

}  // namespace speclab
