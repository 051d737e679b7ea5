#include "framework/train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "framework/core/error.h"

namespace speclab {

double scheduled_lr(const DraftTrainOptions& o, int64_t step) {
  const double t = static_cast<double>(step);
  if (step <= o.warmup) return o.lr * t / static_cast<double>(std::max<int64_t>(1, o.warmup));
  if (o.steps > o.warmup)
    return o.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, (t - o.warmup) / (o.steps - o.warmup)))));
  return o.lr;
}

AdamW::AdamW(const std::map<std::string, at::Tensor*>& params) {
  for (const auto& kv : params) {
    m_[kv.first] = at::zeros_like(*kv.second).detach();
    v_[kv.first] = at::zeros_like(*kv.second).detach();
  }
}

void AdamW::update(const std::map<std::string, at::Tensor*>& params, double lr, int64_t step, double grad_clip,
                   double weight_decay) {
  at::NoGradGuard no_grad;
  double norm2 = 0.0;
  for (const auto& kv : params)
    if (kv.second->grad().defined()) norm2 += kv.second->grad().pow(2).sum().item<double>();
  const double scale = (grad_clip > 0 && std::sqrt(norm2) > grad_clip) ? grad_clip / std::sqrt(norm2) : 1.0;
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8, t = static_cast<double>(step);
  const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
  for (const auto& kv : params) {
    at::Tensor& w = *kv.second;
    if (!w.grad().defined()) continue;
    const at::Tensor g = w.grad() * scale;
    at::Tensor& m = m_.at(kv.first);
    at::Tensor& v = v_.at(kv.first);
    m.mul_(b1).add_(g, 1 - b1);
    v.mul_(b2).addcmul_(g, g, 1 - b2);
    if (weight_decay > 0) w.mul_(1 - lr * weight_decay);
    w.sub_((m / c1) / ((v / c2).sqrt() + eps) * lr);
  }
}

void AdamW::save(std::map<std::string, at::Tensor>& out) const {
  for (const auto& kv : m_) out["adam_m." + kv.first] = kv.second.clone();
  for (const auto& kv : v_) out["adam_v." + kv.first] = kv.second.clone();
}

at::Tensor checkpoint_tensor(const std::map<std::string, at::Tensor>& state, const std::string& name,
                             const at::Tensor& like, const std::string& what) {
  auto it = state.find(name);
  if (it == state.end()) throw Error(ErrorKind::kBadInput, "checkpoint lacks tensor '" + name + "'", what);
  if (it->second.sizes() != like.sizes())
    throw Error(ErrorKind::kBadInput, "checkpoint tensor '" + name + "' has the wrong shape", what);
  return it->second;
}

void AdamW::load(const std::map<std::string, at::Tensor>& state, const std::string& what) {
  at::NoGradGuard no_grad;
  for (auto& kv : m_) kv.second.copy_(checkpoint_tensor(state, "adam_m." + kv.first, kv.second, what));
  for (auto& kv : v_) {
    const at::Tensor& v = checkpoint_tensor(state, "adam_v." + kv.first, kv.second, what);
    // A second moment is a running mean of squares: a negative or non-finite one is a damaged
    // file (its square root would turn the next update into NaN, blamed on the learning rate).
    if (!v.isfinite().all().item<bool>() || (v < 0).any().item<bool>())
      throw Error(ErrorKind::kBadInput,
                  "checkpoint tensor 'adam_v." + kv.first + "' holds a negative or non-finite value: expected a "
                  "mean of squares (>= 0); the file is damaged, train anew with --overwrite instead of --resume",
                  what);
    kv.second.copy_(v);
  }
}

double backward_and_update(const at::Tensor& loss, const std::map<std::string, at::Tensor*>& params, AdamW& adam,
                           const DraftTrainOptions& o, int64_t& step) {
  for (auto& kv : params) kv.second->mutable_grad() = at::Tensor();
  if (loss.requires_grad()) loss.backward();
  ++step;
  const double lr = scheduled_lr(o, step);
  adam.update(params, lr, step, o.grad_clip, o.weight_decay);
  return lr;
}

std::map<std::string, at::Tensor> training_state(const std::map<std::string, const at::Tensor*>& trained,
                                                 const AdamW& adam, int64_t step) {
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : trained) out[kv.first] = kv.second->detach().clone();
  adam.save(out);
  out["step"] = at::full({1}, static_cast<float>(step), at::kFloat);
  return out;
}

int64_t load_training_state(const std::map<std::string, at::Tensor>& state,
                            const std::map<std::string, at::Tensor*>& trained, AdamW& adam, const std::string& what) {
  at::NoGradGuard no_grad;
  for (const auto& kv : trained) kv.second->copy_(checkpoint_tensor(state, kv.first, *kv.second, what));
  adam.load(state, what);
  const double step = checkpoint_tensor(state, "step", at::zeros({1}), what).item<double>();
  if (!(step >= 0) || step != std::floor(step) || step > 16777216.0)  // float32 holds whole steps up to 2^24
    throw Error(ErrorKind::kBadInput,
                "checkpoint tensor 'step' is " + std::to_string(step) +
                    ": expected a whole number of steps >= 0; the file is damaged, train anew with --overwrite instead of --resume",
                what);
  return static_cast<int64_t>(step);
}

}  // namespace speclab
