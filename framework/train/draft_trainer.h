// DraftTrainer — what `speclab train-draft` (experiments/app/draft_training.h) drives, whatever
// the architecture: one optimizer step at a time, validation agreement, and the state a resumed
// run needs. Implementations: EagleTrainer (eagle_trainer.h), MedusaTrainer (medusa_trainer.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace speclab {

// One optimizer step, as logged (framework/io/train_log.h).
struct TrainStepLog {
  int64_t step = 0;           // 1-based, after the update
  double loss = 0.0;          // the objective minimised
  double feature_loss = 0.0;  // EAGLE: smooth-L1 on features; 0 for architectures without one
  double token_loss = 0.0;    // cross-entropy (Medusa: the decay-weighted sum over heads)
  double lr = 0.0;
  int64_t pairs = 0;          // training positions in the batch
};

class DraftTrainer {
 public:
  virtual ~DraftTrainer() = default;
  virtual TrainStepLog step() = 0;  // one optimizer step
  // Top-1 agreement on the validation positions of the first drafted token with the target's
  // top-1 there (each trainer's header says which position that is).
  virtual double validation_agreement() const = 0;
  virtual int64_t steps_done() const = 0;
  // Everything a resumed run needs: trained weights, optimizer moments, the step count; float32.
  virtual std::map<std::string, at::Tensor> state() const = 0;
  // Throws Error(kBadInput, what) naming a missing or misshapen tensor.
  virtual void load_state(const std::map<std::string, at::Tensor>& state, const std::string& what) = 0;
};

}  // namespace speclab
