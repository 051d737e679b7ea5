#include "framework/train/eagle_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "framework/core/error.h"
#include "framework/core/rng.h"

namespace speclab {

EagleTrainer::EagleTrainer(EagleHead& head, const DraftTrainData& train, const DraftTrainData& validation,
                           const DraftTrainOptions& options)
    : head_(head), train_(train), val_(validation), o_(options), adam_(head.trained()) {
  check_train_data(train_, head_.target.hidden_size, "training data");
  check_train_data(val_, head_.target.hidden_size, "validation data");
  for (const DraftTrainData* d : {&train_, &val_})
    if ((d->aux.defined() ? d->aux.size(1) : 0) != head_.aux_width())
      throw Error(ErrorKind::kBadInput,
                  "expected aux features " + std::to_string(head_.aux_width()) + " wide (the head reads " +
                      std::to_string(head_.aux_layers.size()) + " aux layers), found " +
                      std::to_string(d->aux.defined() ? d->aux.size(1) : 0),
                  d == &train_ ? "training data" : "validation data");
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
  // Draft steps 1..unroll (eagle_forward_unrolled); step k's loss counts the rows that stand for
  // a k-th draft token, weighted unroll_decay^(k-1), and the objective is the weighted mean.
  const at::Tensor tokens_next = train_.tokens.index_select(0, next);
  const at::Tensor feat_next = train_.features.index_select(0, next);
  const at::Tensor top1_next = head_index_.index_select(0, train_.target_top1.index_select(0, next));
  const std::vector<at::Tensor> preds =
      eagle_forward_unrolled(head_, inputs, tokens_next, p.positions, p.segments, o_.unroll, true,
                             train_.aux.defined() ? train_.aux.index_select(0, p.in_rows) : at::Tensor());
  at::Tensor feature_loss = at::zeros({}, at::kFloat), token_loss = at::zeros({}, at::kFloat);
  double weight_sum = 0.0;
  for (int64_t k = 1; k <= o_.unroll; ++k) {
    const at::Tensor& pred = preds[static_cast<size_t>(k - 1)];
    const at::Tensor valid = p.positions.ge(k - 1);  // rows with a k-th draft token
    const int64_t n_valid = valid.sum().item<int64_t>();
    if (n_valid == 0) continue;
    const double w = std::pow(o_.unroll_decay, static_cast<double>(k - 1));
    weight_sum += w;
    const at::Tensor per_row = at::smooth_l1_loss(pred, feat_next, at::Reduction::None, 1.0).mean(-1);
    feature_loss = feature_loss + w * per_row.masked_select(valid).mean();
    const at::Tensor target = top1_next.masked_fill(valid.logical_not(), -100);
    if (target.ge(0).any().item<bool>())
      token_loss = token_loss + w * at::cross_entropy_loss(eagle_logits(head_, pred), target, {}, at::Reduction::Mean, -100);
  }
  if (weight_sum > 0) {
    feature_loss = feature_loss / weight_sum;
    token_loss = token_loss / weight_sum;
  }
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

double EagleTrainer::validation_agreement() const { return step_agreements(1)[0]; }

std::vector<double> EagleTrainer::step_agreements(int64_t steps) const {
  at::NoGradGuard no_grad;
  std::vector<int64_t> agree(static_cast<size_t>(steps), 0), total(static_cast<size_t>(steps), 0);
  // Step k attends over k blocks of the chunk's rows: smaller chunks keep the [rows, k rows] score
  // matrices small (the results do not depend on the chunking).
  for_each_pair_chunk(val_, steps > 1 ? 4 : 16, [&](const PairRows& p) {
    const at::Tensor next = p.in_rows + 1;
    const std::vector<at::Tensor> preds =
        eagle_forward_unrolled(head_, val_.features.index_select(0, p.in_rows), val_.tokens.index_select(0, next),
                               p.positions, p.segments, steps, true,
                               val_.aux.defined() ? val_.aux.index_select(0, p.in_rows) : at::Tensor());
    const at::Tensor counted = answer_labels(p, next);
    const at::Tensor top1 = val_.target_top1.index_select(0, next);
    for (int64_t k = 1; k <= steps; ++k) {
      const at::Tensor top = head_.vocab_ids.index_select(0, eagle_logits(head_, preds[static_cast<size_t>(k - 1)]).argmax(-1));
      const at::Tensor rows = counted.logical_and(p.positions.ge(k - 1));
      agree[static_cast<size_t>(k - 1)] += top.eq(top1).logical_and(rows).sum().item<int64_t>();
      total[static_cast<size_t>(k - 1)] += rows.sum().item<int64_t>();
    }
  });
  std::vector<double> out;
  for (int64_t k = 0; k < steps; ++k)
    out.push_back(total[static_cast<size_t>(k)] ? static_cast<double>(agree[static_cast<size_t>(k)]) / static_cast<double>(total[static_cast<size_t>(k)]) : 0.0);
  return out;
}

std::vector<double> EagleTrainer::first_step_topk(const std::vector<int64_t>& ks) const {
  at::NoGradGuard no_grad;
  int64_t kmax = 1;
  for (int64_t k : ks) {
    if (k < 1) throw Error(ErrorKind::kBadInput, "first_step_topk: k must be >= 1, got " + std::to_string(k));
    kmax = std::max(kmax, k);
  }
  std::vector<int64_t> hit(ks.size(), 0);
  int64_t total = 0;
  for_each_pair_chunk(val_, 16, [&](const PairRows& p) {
    const at::Tensor next = p.in_rows + 1;
    const std::vector<at::Tensor> preds =
        eagle_forward_unrolled(head_, val_.features.index_select(0, p.in_rows), val_.tokens.index_select(0, next),
                               p.positions, p.segments, 1, true,
                               val_.aux.defined() ? val_.aux.index_select(0, p.in_rows) : at::Tensor());
    const at::Tensor rows = answer_labels(p, next);
    const at::Tensor logits = eagle_logits(head_, preds[0]);  // [rows, head vocabulary]
    const int64_t kk = std::min<int64_t>(kmax, logits.size(-1));
    // [rows, kk] target ids of the head's kk best rows, best first (sorted, ties to the lower row).
    const at::Tensor top = head_.vocab_ids.index_select(0, std::get<1>(logits.topk(kk, -1, true, true)).reshape({-1}))
                               .reshape({-1, kk});
    const at::Tensor match = top.eq(val_.target_top1.index_select(0, next).unsqueeze(1));  // [rows, kk]
    for (size_t i = 0; i < ks.size(); ++i)
      hit[i] += match.narrow(1, 0, std::min<int64_t>(ks[i], kk)).any(1).logical_and(rows).sum().item<int64_t>();
    total += rows.sum().item<int64_t>();
  });
  std::vector<double> out;
  for (int64_t h : hit) out.push_back(total ? static_cast<double>(h) / static_cast<double>(total) : 0.0);
  return out;
}

std::map<std::string, at::Tensor> EagleTrainer::state() const { return training_state(std::as_const(head_).trained(), adam_, step_); }

void EagleTrainer::load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) {
  step_ = load_training_state(state, head_.trained(), adam_, what);
}

}  // namespace speclab
