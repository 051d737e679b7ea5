// SmallDraft — the distilled draft model (issue 13, architecture `draft_model`): a Llama of 1 to
// 8 decoder layers with the target's shapes and tokenizer, trained with libtorch autograd by
// DistillTrainer (distill_trainer.h) and run, once trained, as an ordinary model by the
// `draft_model` drafter (experiments/app/draft_training.h: load_distilled_draft).
//
//   x_0 = E[t_i]                                  the target's token embeddings, frozen
//   x_l = DecoderLayer_l(x_{l-1})                 decoder_layer.h, l = 1..L (trained)
//   logits_i = W_head RMSNorm(x_L; g)             g trained; W_head the target's LM head, frozen
// Each layer starts as a copy of one of the target's layers (`draft_layers`, e.g. its first and
// last), the final norm as the target's: before training the draft is the target with the
// other layers skipped (what layer_skip drafts with). W_head is the target's LM head (V' = V) or
// its rows of `vocab_ids` (a reduced head, FR-Spec; frequent_head_ids in models/llama/llama_model.h,
// so that the `draft_model` drafter's draft_vocab gives the same rows).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/model_config.h"
#include "framework/draft/builtin/decoder_layer.h"

namespace speclab {

struct SmallDraft {
  ModelConfig config;                       // the target's, with num_hidden_layers = layers.size()
  std::vector<DecoderLayerWeights> layers;  // trained (float32)
  at::Tensor final_norm;                    // [d] trained

  // Frozen, from the target (float32):
  at::Tensor embed;      // [V, d]
  at::Tensor lm_head;    // [V', d] the target's LM head rows of vocab_ids
  at::Tensor vocab_ids;  // [V'] int64 target token id of each lm_head row

  int64_t head_vocab() const { return lm_head.size(0); }
  // The trained tensors by their HF name ("model.layers.<l>.self_attn.q_proj.weight", ...,
  // "model.norm.weight"): a k-layer Llama checkpoint without its embeddings and head.
  std::map<std::string, at::Tensor*> trained();
  std::map<std::string, const at::Tensor*> trained() const;
};

// A draft whose layer l is a float32 copy of the target's layer draft_layers[l] (taken from
// `target_weights`, canonical HF names, float32) and whose final norm is the target's.
// Throws Error(kConfig, "head.draft_layers") for an empty list or an index outside the target.
SmallDraft init_small_draft(const ModelConfig& target, const std::map<std::string, at::Tensor>& target_weights,
                            const std::vector<int64_t>& draft_layers);

// Logits over the head's rows for packed training sequences: row r sees rows r' <= r of its own
// segment (segments [n] int64), at `positions` [n] int64.
at::Tensor small_draft_logits_packed(const SmallDraft& draft, const at::Tensor& tokens /*[n] int64*/,
                                     const at::Tensor& positions /*[n]*/, const at::Tensor& segments /*[n]*/);  // -> [n, V']

}  // namespace speclab
