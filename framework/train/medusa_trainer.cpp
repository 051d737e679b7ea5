#include "framework/train/medusa_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <utility>

#include "framework/core/error.h"

namespace speclab {

MedusaTrainer::MedusaTrainer(MedusaHeads& heads, const DraftTrainData& train, const DraftTrainData& validation,
                             const DraftTrainOptions& options)
    : heads_(heads), train_(train), val_(validation), o_(options), adam_(heads.trained()) {
  check_train_data(train_, heads_.target.hidden_size, "training data");
  check_train_data(val_, heads_.target.hidden_size, "validation data");
  head_index_ = head_row_index(heads_.vocab_ids, heads_.target.vocab_size);
  for (auto& kv : heads_.trained()) kv.second->requires_grad_(true);
}

namespace {

// Rows i + k of the pairs p where i + k is inside i's sequence (`inside`), row i elsewhere.
at::Tensor rows_ahead(const PairRows& p, int64_t k, at::Tensor& inside) {
  const at::Tensor at_k = p.in_rows + k;
  inside = at_k.lt(p.seq_end);
  return at::where(inside, at_k, p.in_rows);
}

}  // namespace

at::Tensor MedusaTrainer::head_targets(const DraftTrainData& d, const PairRows& p, int64_t k) const {
  at::Tensor inside;
  const at::Tensor rows = rows_ahead(p, k, inside);
  const at::Tensor t = head_index_.index_select(0, d.target_top1.index_select(0, rows));
  return at::where(inside, t, at::full_like(t, -100));
}

TrainStepLog MedusaTrainer::step() {
  Rng rng = batch_rng(o_.seed, step_);
  const PairRows p = pairs_of(train_, draw_sequences(train_, o_.batch_tokens, rng));
  const at::Tensor f = train_.features.index_select(0, p.in_rows);
  at::Tensor loss = at::zeros({}, at::kFloat);
  for (int64_t k = 1; k <= heads_.n_heads(); ++k) {
    const at::Tensor target = head_targets(train_, p, k);
    if (!target.ge(0).any().item<bool>()) continue;
    const at::Tensor ce = at::cross_entropy_loss(medusa_logits(heads_, k, f), target, {}, at::Reduction::Mean, -100);
    loss = loss + std::pow(o_.medusa_decay, static_cast<double>(k)) * ce;
  }
  const double lr = backward_and_update(loss, heads_.trained(), adam_, o_, step_);
  TrainStepLog log;
  log.step = step_;
  log.token_loss = log.loss = loss.item<double>();
  log.lr = lr;
  log.pairs = p.in_rows.size(0);
  return log;
}

std::vector<double> MedusaTrainer::head_agreements() const {
  at::NoGradGuard no_grad;
  std::vector<int64_t> agree(static_cast<size_t>(heads_.n_heads()), 0), total(agree.size(), 0);
  for_each_pair_chunk(val_, 16, [&](const PairRows& p) {
    const at::Tensor f = val_.features.index_select(0, p.in_rows);
    for (int64_t k = 1; k <= heads_.n_heads(); ++k) {
      at::Tensor inside;
      const at::Tensor rows = rows_ahead(p, k, inside);
      inside = inside.logical_and(answer_labels(p, rows));
      const at::Tensor top = heads_.vocab_ids.index_select(0, medusa_logits(heads_, k, f).argmax(-1));
      const size_t i = static_cast<size_t>(k - 1);
      agree[i] += top.eq(val_.target_top1.index_select(0, rows)).logical_and(inside).sum().item<int64_t>();
      total[i] += inside.sum().item<int64_t>();
    }
  });
  std::vector<double> out;
  for (size_t i = 0; i < agree.size(); ++i)
    out.push_back(total[i] ? static_cast<double>(agree[i]) / static_cast<double>(total[i]) : 0.0);
  return out;
}

double MedusaTrainer::validation_agreement() const { return head_agreements()[0]; }

std::map<std::string, at::Tensor> MedusaTrainer::state() const { return training_state(std::as_const(heads_).trained(), adam_, step_); }

void MedusaTrainer::load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) {
  step_ = load_training_state(state, heads_.trained(), adam_, what);
}

}  // namespace speclab
