// TrainLog — the per-step record of `speclab train-draft`, written as HDF5 (torch-free).
//
// File layout (rewritten whole at each checkpoint and at the end):
//   /train/{step, loss, feature_loss, token_loss, lr}   [n_steps] one row per optimizer step
//   /validation/{step, agreement}                       [n_evals] top-1 agreement with the target
//   attributes on /: config_yaml (the canonical config), target_weights_hash, wall_seconds
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace speclab {

struct TrainLog {
  std::vector<double> step, loss, feature_loss, token_loss, lr;  // [n_steps]
  std::vector<double> eval_step, agreement;                      // [n_evals]
  std::string config_yaml;
  std::string target_weights_hash;
  double wall_seconds = 0.0;
};

// Error(kIo, path) when the file cannot be written.
void write_train_log(const std::string& path, const TrainLog& log);
// Error(kBadInput / kIo, path) when the file is not such a log.
TrainLog read_train_log(const std::string& path);

}  // namespace speclab
