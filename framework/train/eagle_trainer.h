// EagleTrainer — trains an EagleHead (framework/draft/builtin/eagle_head.h) on the target's
// cached features with libtorch autograd, on the CPU. The one translation unit of the training
// loop; the data it reads is made by the application (experiments/app/draft_training.h).
//
// Loss (EAGLE, Li et al. 2024 §4): for every pair (f_i, t_{i+1}) of a training sequence,
//   L = SmoothL1(f^_{i+1}, f_{i+1}) + w * CE(head logits of f^_{i+1}, the target's top-1 token
//   at position i+1), w = token_loss_weight; the CE ignores targets outside a reduced head.
// With train.unroll U > 1 (training-time test: EAGLE-3, Li et al. 2025; HASS, Zhang et al.
// 2024) the head also runs draft steps 2..U on its own predicted features, as drafting does
// (eagle_forward_unrolled), and L is the mean over steps k of L_k weighted unroll_decay^(k-1),
// L_k over the rows that stand for a k-th draft token. U = 1 is EAGLE's loss. A head with aux
// layers reads the data's aux rows (DraftTrainData::aux) at step 1 and a = 0 after it.
// Optimizer and schedule: adamw.h. Batches: train_data.h (a pure function of (seed, step), so a
// resumed run (load_state) continues exactly as an uninterrupted one); so is the input noise
// (train.feature_noise, EAGLE's uniform augmentation), drawn from the batch's Rng after it. Initial weights: init_eagle_head(seed).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/draft/builtin/eagle_head.h"
#include "framework/io/train_config.h"
#include "framework/train/adamw.h"
#include "framework/train/draft_trainer.h"
#include "framework/train/train_data.h"

namespace speclab {

class EagleTrainer : public DraftTrainer {
 public:
  // head: trained tensors initialised (init_eagle_head) and frozen ones set; kept by reference.
  // Throws Error(kBadInput, "training data") on empty or inconsistent data.
  EagleTrainer(EagleHead& head, const DraftTrainData& train, const DraftTrainData& validation,
               const DraftTrainOptions& options);

  TrainStepLog step() override;  // one optimizer step
  // Top-1 agreement on the validation pairs (the first draft position): the fraction where the head's argmax token (through
  // its head vocabulary) equals the target's top-1 at the next position.
  double validation_agreement() const override;
  // Top-1 agreement at draft steps k = 1..steps on the validation pairs: step k's prediction
  // (eagle_forward_unrolled, the head on its own earlier guesses after a true prefix) against
  // the target's top-1, over the answer-labelled rows that have a k-th draft token. Element 0 is
  // validation_agreement(). Conditional on the earlier tokens being right, as acceptance is.
  std::vector<double> step_agreements(int64_t steps) const;
  // The first draft step's top-k coverage on the same pairs: for each k in ks (>= 1), the fraction
  // where the target's top-1 is among the head's k most probable tokens (through its head
  // vocabulary; ties to the lower row). Element for k = 1 is validation_agreement(). What a draft
  // tree with k candidates at its first level could accept there (EAGLE-2, Li et al. 2024; a
  // chain drafts only the top 1). Throws Error(kBadInput) for k < 1.
  std::vector<double> first_step_topk(const std::vector<int64_t>& ks) const;
  int64_t steps_done() const override { return step_; }

  // Everything a resumed run needs: trained weights, AdamW moments ("adam_m."/"adam_v." + name)
  // and the step count ("step", [1]); float32.
  std::map<std::string, at::Tensor> state() const override;
  // Throws Error(kBadInput, <what>) naming a missing or misshapen tensor.
  void load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) override;

 private:
  EagleHead& head_;
  const DraftTrainData& train_;
  const DraftTrainData& val_;
  DraftTrainOptions o_;
  double feature_rms_ = 0.0;  // RMS of the training features (the unit of feature_noise)
  at::Tensor head_index_;  // [V] int64 target id -> head row, -100 when outside the head
  AdamW adam_;
  int64_t step_ = 0;
};

}  // namespace speclab
