// EagleTrainer — trains an EagleHead (framework/draft/builtin/eagle_head.h) on the target's
// cached features with libtorch autograd, on the CPU. The one translation unit of the training
// loop; the data it reads is made by the application (experiments/app/draft_data.h).
//
// Loss (EAGLE, Li et al. 2024 §4): for every pair (f_i, t_{i+1}) of a training sequence,
//   L = SmoothL1(f^_{i+1}, f_{i+1}) + w * CE(head logits of f^_{i+1}, the target's top-1 token
//   at position i+1), w = token_loss_weight; the CE ignores targets outside a reduced head.
// Optimizer: AdamW (beta 0.9/0.95, eps 1e-8), global gradient-norm clipping, linear warmup then
// cosine decay to 0.1 lr. Batches: step s draws sequences with Rng(seed, s) until batch_tokens
// pairs, so a batch is a pure function of (seed, step) and a resumed run (load_state) continues
// exactly as an uninterrupted one; so is the input noise (train.feature_noise, EAGLE's uniform
// augmentation), drawn from Rng(seed, step) too. Initial weights: init_eagle_head(seed).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/draft/builtin/eagle_head.h"
#include "framework/io/train_config.h"

namespace speclab {

// Teacher-forced sequences of the target.
struct EagleTrainData {
  at::Tensor features;          // [N, d] float32 the target's features (eagle_features) at each position
  at::Tensor tokens;            // [N] int64 the token at each position
  at::Tensor target_top1;       // [N] int64 the target's argmax at each position (predicts the next token)
  std::vector<int64_t> offsets;  // [S + 1] sequence s is rows [offsets[s], offsets[s + 1])

  int64_t n_sequences() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t n_pairs() const;  // training pairs: sum over sequences of (length - 1)
};

struct TrainStepLog {
  int64_t step = 0;          // 1-based, after the update
  double loss = 0.0;         // feature_loss + w * token_loss
  double feature_loss = 0.0;  // smooth-L1
  double token_loss = 0.0;   // cross-entropy
  double lr = 0.0;
  int64_t pairs = 0;         // pairs in the batch
};

class EagleTrainer {
 public:
  // head: trained tensors initialised (init_eagle_head) and frozen ones set; kept by reference.
  // Throws Error(kBadInput, "training data") on empty or inconsistent data.
  EagleTrainer(EagleHead& head, const EagleTrainData& train, const EagleTrainData& validation,
               const EagleTrainOptions& options);

  TrainStepLog step();  // one optimizer step
  // Top-1 agreement on the validation pairs: the fraction where the head's argmax token (through
  // its head vocabulary) equals the target's top-1 at the next position.
  double validation_agreement() const;
  int64_t steps_done() const { return step_; }

  // Everything a resumed run needs: trained weights, AdamW moments ("adam_m."/"adam_v." + name)
  // and the step count ("step", [1]); float32.
  std::map<std::string, at::Tensor> state() const;
  // Throws Error(kBadInput, <what>) naming a missing or misshapen tensor.
  void load_state(const std::map<std::string, at::Tensor>& state, const std::string& what);

 private:
  EagleHead& head_;
  const EagleTrainData& train_;
  const EagleTrainData& val_;
  EagleTrainOptions o_;
  double feature_rms_ = 0.0;  // RMS of the training features (the unit of feature_noise)
  at::Tensor head_index_;  // [V] int64 target id -> head row, -100 when outside the head
  std::map<std::string, at::Tensor> m_, v_;
  int64_t step_ = 0;
};

}  // namespace speclab
