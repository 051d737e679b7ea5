// AdamW and the learning-rate schedule of every draft trainer (eagle_trainer.h, medusa_trainer.h).
//
// AdamW (Loshchilov & Hutter 2019): beta1 0.9, beta2 0.95, eps 1e-8, bias-corrected moments,
// decoupled weight decay w <- w * (1 - lr * weight_decay) before the step; the gradients are
// first scaled so that their global L2 norm is at most grad_clip (0: no clipping).
// Schedule: linear warmup to lr over `warmup` steps, then cosine decay to 0.1 lr at `steps`.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "framework/io/train_config.h"

namespace speclab {

// The learning rate of 1-based step t.
double scheduled_lr(const DraftTrainOptions& o, int64_t t);

class AdamW {
 public:
  // Zero moments for each parameter (by name).
  explicit AdamW(const std::map<std::string, at::Tensor*>& params);

  // One update of `params` (the same names) from their .grad(), at 1-based step t; parameters
  // without a gradient are left alone.
  void update(const std::map<std::string, at::Tensor*>& params, double lr, int64_t t, double grad_clip,
              double weight_decay);

  // The moments as "adam_m.<name>" and "adam_v.<name>" (float32 copies) into `out`.
  void save(std::map<std::string, at::Tensor>& out) const;
  // Throws Error(kBadInput, what) naming a missing or misshapen tensor.
  void load(const std::map<std::string, at::Tensor>& state, const std::string& what);

 private:
  std::map<std::string, at::Tensor> m_, v_;
};

// One optimizer step of a trainer: clears the gradients of `params`, backpropagates `loss` (when
// it needs a gradient), increments `step` and updates `params` with `adam` at the schedule's
// learning rate for it. Returns that learning rate.
double backward_and_update(const at::Tensor& loss /*[] scalar*/, const std::map<std::string, at::Tensor*>& params,
                           AdamW& adam, const DraftTrainOptions& o, int64_t& step);

// A trainer's checkpoint state: its trained tensors (by name), the moments (AdamW::save) and
// "step" ([1]); float32 copies.
std::map<std::string, at::Tensor> training_state(const std::map<std::string, const at::Tensor*>& trained,
                                                 const AdamW& adam, int64_t step);
// Restores training_state() into `trained` and `adam`; returns the step. Error(kBadInput, what)
// names a missing or misshapen tensor.
int64_t load_training_state(const std::map<std::string, at::Tensor>& state,
                            const std::map<std::string, at::Tensor*>& trained, AdamW& adam, const std::string& what);

// state[name] with the shape of `like`, or Error(kBadInput, what) naming it.
at::Tensor checkpoint_tensor(const std::map<std::string, at::Tensor>& state, const std::string& name,
                             const at::Tensor& like, const std::string& what);

}  // namespace speclab
