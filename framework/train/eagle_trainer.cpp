#include "framework/train/eagle_trainer.h"

#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <utility>

#include "framework/core/error.h"
#include "framework/core/rng.h"

namespace speclab {

EagleTrainer::EagleTrainer(EagleHead& head, const DraftTrainData& train, const DraftTrainData& validation,
                           const DraftTrainOptions& options)
    : head_(head), train_(train), val_(validation), o_(options), adam_(head.trained()) {
  check_train_data(train_, head_.target.hidden_size, "training data");
  check_train_data(val_, head_.target.hidden_size, "validation data");
  feature_rms_ = train_.features.pow(2).mean().sqrt().item<double>();
  head_index_ = head_row_index(head_.vocab_ids, head_.target.vocab_size);
  for (auto& kv : head_.trained()) kv.second->requires_grad_(true);
}

TrainStepLog EagleTrainer::step() {
  // The batch: a pure function of (seed, step).
  Rng rng = batch_rng(o_.seed, step_);
  const std::vector<int64_t> seqs = draw_sequences(train_, o_.batch_tokens, rng);
  const PairRows p = pairs_of(train_, seqs);
  const at::Tensor next = p.in_rows + 1;
  at::Tensor inputs = train_.features.index_select(0, p.in_rows);
  if (o_.feature_noise > 0) {  // U(-a, a), drawn after the batch from the same (seed, step) stream
    at::Tensor u = at::empty_like(inputs);
    float* up = u.data_ptr<float>();
    for (int64_t i = 0; i < u.numel(); ++i) up[i] = static_cast<float>(2.0 * rng.uniform() - 1.0);
    inputs = inputs + u * (o_.feature_noise * feature_rms_);
  }
  const at::Tensor pred =
      eagle_forward_packed(head_, inputs, train_.tokens.index_select(0, next), p.positions, p.segments);
  const at::Tensor feature_loss =
      at::smooth_l1_loss(pred, train_.features.index_select(0, next), at::Reduction::Mean, 1.0);
  const at::Tensor target = head_index_.index_select(0, train_.target_top1.index_select(0, next));
  const bool any_target = target.ge(0).any().item<bool>();
  const at::Tensor token_loss = any_target ? at::cross_entropy_loss(eagle_logits(head_, pred), target, {},
                                                                    at::Reduction::Mean, -100)
                                           : at::zeros({}, at::kFloat);
  const at::Tensor loss = feature_loss + o_.token_loss_weight * token_loss;
  const double lr = backward_and_update(loss, head_.trained(), adam_, o_, step_);
  TrainStepLog log;
  log.step = step_;
  log.feature_loss = feature_loss.item<double>();
  log.token_loss = token_loss.item<double>();
  log.loss = loss.item<double>();
  log.lr = lr;
  log.pairs = p.in_rows.size(0);
  return log;
}

double EagleTrainer::validation_agreement() const {
  at::NoGradGuard no_grad;
  int64_t agree = 0, total = 0;
  for_each_pair_chunk(val_, 16, [&](const PairRows& p) {
    const at::Tensor next = p.in_rows + 1;
    const at::Tensor pred = eagle_forward_packed(head_, val_.features.index_select(0, p.in_rows),
                                                 val_.tokens.index_select(0, next), p.positions, p.segments);
    const at::Tensor top = head_.vocab_ids.index_select(0, eagle_logits(head_, pred).argmax(-1));
    const at::Tensor counted = answer_labels(p, next);
    agree += top.eq(val_.target_top1.index_select(0, next)).logical_and(counted).sum().item<int64_t>();
    total += counted.sum().item<int64_t>();
  });
  return total ? static_cast<double>(agree) / static_cast<double>(total) : 0.0;
}

std::map<std::string, at::Tensor> EagleTrainer::state() const { return training_state(std::as_const(head_).trained(), adam_, step_); }

void EagleTrainer::load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) {
  step_ = load_training_state(state, head_.trained(), adam_, what);
}

}  // namespace speclab
