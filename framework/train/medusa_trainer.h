// MedusaTrainer — trains MedusaHeads (framework/draft/builtin/medusa_heads.h) on the target's
// cached features with libtorch autograd, on the CPU.
//
// Loss (Medusa-1, Cai et al. 2024 §2.2.1): for every position i of a training sequence and
// every head k = 1..K with i + k inside the sequence,
//   L = sum_k decay^k * CE(logits_k(f_i), the target's top-1 at position i + k)
// (the target's top-1 at i + k predicts t_{i+k+1}: on the target's own greedy answers it is
// that token, so this is the paper's self-distillation). decay = train.medusa_decay (the paper's
// 0.8); each head's CE is the mean over its positions and ignores targets outside a reduced head.
// The target's LM head stays frozen. Optimizer, schedule and batches: adamw.h and train_data.h,
// as EagleTrainer (train.feature_noise and train.token_loss_weight are EAGLE's and unused here).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/draft/builtin/medusa_heads.h"
#include "framework/io/train_config.h"
#include "framework/train/adamw.h"
#include "framework/train/draft_trainer.h"
#include "framework/train/train_data.h"

namespace speclab {

class MedusaTrainer : public DraftTrainer {
 public:
  // heads: trained tensors initialised (init_medusa_heads) and frozen ones set; kept by reference.
  // Throws Error(kBadInput, "training data") on empty or inconsistent data.
  MedusaTrainer(MedusaHeads& heads, const DraftTrainData& train, const DraftTrainData& validation,
                const DraftTrainOptions& options);

  TrainStepLog step() override;
  // Head 1's agreement (the first drafted token): head_agreements()[0].
  double validation_agreement() const override;
  // Per head k = 1..K: the fraction of validation positions i (with i + k in the sequence) where
  // head k's argmax token equals the target's top-1 at i + k.
  std::vector<double> head_agreements() const;
  int64_t steps_done() const override { return step_; }
  std::map<std::string, at::Tensor> state() const override;
  void load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) override;

 private:
  // Head k's targets at rows p: head rows of the target's top-1 at i + k, -100 outside the
  // sequence or the head vocabulary.
  at::Tensor head_targets(const DraftTrainData& d, const PairRows& p, int64_t k) const;

  MedusaHeads& heads_;
  const DraftTrainData& train_;
  const DraftTrainData& val_;
  DraftTrainOptions o_;
  at::Tensor head_index_;  // [V] int64 target id -> head row, -100 when outside the head
  AdamW adam_;
  int64_t step_ = 0;
};

}  // namespace speclab
