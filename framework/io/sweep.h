// Sweep expansion: the points of an experiment's `sweep` section, each a config of its own.
//
// The sweep is the cartesian product over its axes (SweepAxis, experiment_config.h). Points are
// in product order with the first listed axis outermost (the last axis varies fastest); a config
// without a sweep gives one point. A "drafter.<key>" axis sets the key on every drafters entry.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/io/experiment_config.h"

namespace speclab {

// One point of the sweep: the config with the point's values applied, and the values by key.
// Keys are canonical ("drafter.num_speculative_tokens" also when written "drafter.gamma").
// point.config has been re-validated, its `sweep` is empty and its resolved_yaml has the values
// set (and no sweep section).
struct SweepPoint {
  int64_t index = 0;
  std::map<std::string, std::string> values;  // key -> value as written
  std::vector<std::string> keys;              // the swept keys in the sweep's order (first axis first)
  ExperimentConfig config;
};

// Throws Error(kConfig) naming the point's values when a combination is invalid, and when the
// product has more than 100000 points.
std::vector<SweepPoint> expand_sweep(const ExperimentConfig& config);

}  // namespace speclab
