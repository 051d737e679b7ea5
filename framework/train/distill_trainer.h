// DistillTrainer — distils a SmallDraft (small_draft.h) from the target with libtorch autograd,
// on the CPU (issue 13, architecture `draft_model`).
//
// Loss (knowledge distillation, Hinton et al. 2015; as a draft model's, DistillSpec, Zhou et al.
// 2024): at every position i of a training sequence (the target's own greedy answer after the
// prompt), the forward KL from the target's next-token distribution to the draft's,
//   L = mean_i KL(p_i || q_i) = mean_i sum_v p_i(v) (log p_i(v) - log q_i(v)),
// p_i = softmax(W_head f_i) from the target's cached feature f_i (its last layer after the final
// norm, what its LM head reads: the target's logits, recomputed exactly, not a top-k
// approximation), q_i = softmax(draft logits at i), both over the head's rows (a reduced head
// renormalises p over its rows). Optimizer, schedule and batches as EagleTrainer (adamw.h,
// train_data.h): deterministic given the seed; a resumed run continues bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "framework/io/train_config.h"
#include "framework/train/adamw.h"
#include "framework/train/draft_trainer.h"
#include "framework/train/small_draft.h"
#include "framework/train/train_data.h"

namespace speclab {

class DistillTrainer : public DraftTrainer {
 public:
  // draft: initialised (init_small_draft) with its frozen tensors set; kept by reference.
  // Throws Error(kBadInput, "training data") on empty or inconsistent data.
  DistillTrainer(SmallDraft& draft, const DraftTrainData& train, const DraftTrainData& validation,
                 const DraftTrainOptions& options);

  TrainStepLog step() override;  // token_loss = the KL; feature_loss 0
  // The fraction of validation positions i where the draft's argmax token (through its head
  // rows) equals the target's top-1 at i: the first drafted token's greedy agreement.
  double validation_agreement() const override;
  int64_t steps_done() const override { return step_; }
  std::map<std::string, at::Tensor> state() const override;
  void load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) override;

 private:
  SmallDraft& draft_;
  const DraftTrainData& train_;
  const DraftTrainData& val_;
  DraftTrainOptions o_;
  AdamW adam_;
  int64_t step_ = 0;
};

}  // namespace speclab
