#include "framework/train/eagle_trainer.h"

#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "framework/core/error.h"
#include "framework/core/rng.h"

namespace speclab {

namespace {

// The pair rows of sequences `seqs`: inputs (f_i, t_{i+1}) at position i, for i in [a, b - 1).
struct Pairs {
  at::Tensor in_rows;   // [n] int64 row i
  at::Tensor positions;  // [n] int64 i - a
  at::Tensor segments;  // [n] int64 index of the sequence in the batch
};

Pairs pairs_of(const EagleTrainData& d, const std::vector<int64_t>& seqs) {
  std::vector<int64_t> rows, pos, seg;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t a = d.offsets[seqs[s]], b = d.offsets[seqs[s] + 1];
    for (int64_t i = a; i + 1 < b; ++i) {
      rows.push_back(i);
      pos.push_back(i - a);
      seg.push_back(static_cast<int64_t>(s));
    }
  }
  return {at::tensor(rows, at::kLong), at::tensor(pos, at::kLong), at::tensor(seg, at::kLong)};
}

void check_data(const EagleTrainData& d, int64_t hidden, const std::string& what) {
  if (d.n_sequences() < 1 || d.n_pairs() < 1)
    throw Error(ErrorKind::kBadInput, "expected at least one sequence of two or more tokens", what);
  const int64_t n = d.offsets.back();
  if (d.features.dim() != 2 || d.features.size(0) != n || d.features.size(1) != hidden || d.tokens.numel() != n ||
      d.target_top1.numel() != n)
    throw Error(ErrorKind::kBadInput, "features, tokens and target_top1 disagree with the offsets or the target", what);
}

}  // namespace

int64_t EagleTrainData::n_pairs() const {
  int64_t n = 0;
  for (int64_t s = 0; s + 1 < static_cast<int64_t>(offsets.size()); ++s) n += std::max<int64_t>(0, offsets[s + 1] - offsets[s] - 1);
  return n;
}

EagleTrainer::EagleTrainer(EagleHead& head, const EagleTrainData& train, const EagleTrainData& validation,
                           const EagleTrainOptions& options)
    : head_(head), train_(train), val_(validation), o_(options) {
  check_data(train_, head_.target.hidden_size, "training data");
  check_data(val_, head_.target.hidden_size, "validation data");
  feature_rms_ = train_.features.pow(2).mean().sqrt().item<double>();
  head_index_ = at::full({head_.target.vocab_size}, -100, at::kLong);
  head_index_.index_put_({head_.vocab_ids}, at::arange(head_.head_vocab(), at::kLong));
  for (auto& kv : head_.trained()) {
    kv.second->requires_grad_(true);
    m_[kv.first] = at::zeros_like(*kv.second).detach();
    v_[kv.first] = at::zeros_like(*kv.second).detach();
  }
}

TrainStepLog EagleTrainer::step() {
  // The batch: a pure function of (seed, step).
  Rng rng(o_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step_) + 1);
  std::vector<int64_t> seqs;
  int64_t pairs = 0;
  const int64_t S = train_.n_sequences();
  std::vector<char> used(static_cast<size_t>(S), 0);
  while (pairs < o_.batch_tokens && static_cast<int64_t>(seqs.size()) < S) {
    int64_t s = static_cast<int64_t>(rng.uniform() * static_cast<double>(S)) % S;
    while (used[static_cast<size_t>(s)]) s = (s + 1) % S;
    used[static_cast<size_t>(s)] = 1;
    seqs.push_back(s);
    pairs += train_.offsets[s + 1] - train_.offsets[s] - 1;
  }
  const Pairs p = pairs_of(train_, seqs);
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
  auto params = head_.trained();
  for (auto& kv : params) kv.second->mutable_grad() = at::Tensor();
  loss.backward();

  ++step_;
  const double t = static_cast<double>(step_);
  double lr = o_.lr;
  if (step_ <= o_.warmup) lr = o_.lr * t / static_cast<double>(std::max<int64_t>(1, o_.warmup));
  else if (o_.steps > o_.warmup)
    lr = o_.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, (t - o_.warmup) / (o_.steps - o_.warmup)))));
  {
    at::NoGradGuard no_grad;
    double norm2 = 0.0;
    for (auto& kv : params)
      if (kv.second->grad().defined()) norm2 += kv.second->grad().pow(2).sum().item<double>();
    const double scale = (o_.grad_clip > 0 && std::sqrt(norm2) > o_.grad_clip) ? o_.grad_clip / std::sqrt(norm2) : 1.0;
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
    for (auto& kv : params) {
      at::Tensor& w = *kv.second;
      if (!w.grad().defined()) continue;
      const at::Tensor g = w.grad() * scale;
      at::Tensor& m = m_[kv.first];
      at::Tensor& v = v_[kv.first];
      m.mul_(b1).add_(g, 1 - b1);
      v.mul_(b2).addcmul_(g, g, 1 - b2);
      if (o_.weight_decay > 0) w.mul_(1 - lr * o_.weight_decay);
      w.sub_((m / c1) / ((v / c2).sqrt() + eps) * lr);
    }
  }
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
  const int64_t chunk = 16;
  for (int64_t s0 = 0; s0 < val_.n_sequences(); s0 += chunk) {
    std::vector<int64_t> seqs;
    for (int64_t s = s0; s < std::min(val_.n_sequences(), s0 + chunk); ++s) seqs.push_back(s);
    const Pairs p = pairs_of(val_, seqs);
    if (p.in_rows.numel() == 0) continue;
    const at::Tensor next = p.in_rows + 1;
    const at::Tensor pred = eagle_forward_packed(head_, val_.features.index_select(0, p.in_rows),
                                                 val_.tokens.index_select(0, next), p.positions, p.segments);
    const at::Tensor top = head_.vocab_ids.index_select(0, eagle_logits(head_, pred).argmax(-1));
    agree += top.eq(val_.target_top1.index_select(0, next)).sum().item<int64_t>();
    total += p.in_rows.numel();
  }
  return total ? static_cast<double>(agree) / static_cast<double>(total) : 0.0;
}

std::map<std::string, at::Tensor> EagleTrainer::state() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : head_.trained()) {
    out[kv.first] = kv.second->detach().clone();
    out["adam_m." + kv.first] = m_.at(kv.first).clone();
    out["adam_v." + kv.first] = v_.at(kv.first).clone();
  }
  out["step"] = at::full({1}, static_cast<float>(step_), at::kFloat);
  return out;
}

void EagleTrainer::load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) {
  auto get = [&](const std::string& name, const at::Tensor& like) {
    auto it = state.find(name);
    if (it == state.end()) throw Error(ErrorKind::kBadInput, "checkpoint lacks tensor '" + name + "'", what);
    if (it->second.sizes() != like.sizes())
      throw Error(ErrorKind::kBadInput, "checkpoint tensor '" + name + "' has the wrong shape", what);
    return it->second;
  };
  at::NoGradGuard no_grad;
  for (auto& kv : head_.trained()) {
    kv.second->copy_(get(kv.first, *kv.second));
    m_[kv.first].copy_(get("adam_m." + kv.first, m_[kv.first]));
    v_[kv.first].copy_(get("adam_v." + kv.first, v_[kv.first]));
  }
  step_ = static_cast<int64_t>(get("step", at::zeros({1})).item<float>());
}

}  // namespace speclab
