#include "framework/train/distill_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <utility>

namespace speclab {

DistillTrainer::DistillTrainer(SmallDraft& draft, const DraftTrainData& train, const DraftTrainData& validation,
                               const DraftTrainOptions& options)
    : draft_(draft), train_(train), val_(validation), o_(options), adam_(draft.trained()) {
  check_train_data(train_, draft_.config.hidden_size, "training data");
  check_train_data(val_, draft_.config.hidden_size, "validation data");
  for (auto& kv : draft_.trained()) kv.second->requires_grad_(true);
}

TrainStepLog DistillTrainer::step() {
  Rng rng = batch_rng(o_.seed, step_);
  const std::vector<int64_t> seqs = draw_sequences(train_, o_.batch_tokens, rng);
  const PairRows p = pairs_of(train_, seqs);
  at::Tensor log_p;  // [n, V'] the target's log-distribution over the head's rows
  {
    at::NoGradGuard no_grad;
    log_p = at::log_softmax(at::linear(train_.features.index_select(0, p.in_rows), draft_.lm_head), -1);
  }
  const at::Tensor logits =
      small_draft_logits_packed(draft_, train_.tokens.index_select(0, p.in_rows), p.positions, p.segments);
  const at::Tensor log_q = at::log_softmax(logits, -1);
  const at::Tensor kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean();
  const double lr = backward_and_update(kl, draft_.trained(), adam_, o_, step_);
  TrainStepLog log;
  log.step = step_;
  log.token_loss = log.loss = kl.item<double>();
  log.lr = lr;
  log.pairs = p.in_rows.size(0);
  return log;
}

double DistillTrainer::validation_agreement() const {
  at::NoGradGuard no_grad;
  int64_t agree = 0, total = 0;
  for_each_pair_chunk(val_, 8, [&](const PairRows& p) {
    const at::Tensor logits =
        small_draft_logits_packed(draft_, val_.tokens.index_select(0, p.in_rows), p.positions, p.segments);
    const at::Tensor top = draft_.vocab_ids.index_select(0, logits.argmax(-1));
    const at::Tensor counted = answer_labels(p, p.in_rows);
    agree += top.eq(val_.target_top1.index_select(0, p.in_rows)).logical_and(counted).sum().item<int64_t>();
    total += counted.sum().item<int64_t>();
  });
  return total ? static_cast<double>(agree) / static_cast<double>(total) : 0.0;
}

std::map<std::string, at::Tensor> DistillTrainer::state() const {
  return training_state(std::as_const(draft_).trained(), adam_, step_);
}

void DistillTrainer::load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) {
  step_ = load_training_state(state, draft_.trained(), adam_, what);
}

}  // namespace speclab
