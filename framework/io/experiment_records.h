// Experiment records — what `speclab run` measures, as plain structs (torch-free).
//
// One RunRecord per prompt-run: one decoding of one prompt by one method ("ar" for the
// autoregressive baseline, or a drafter's label) at one sweep point and repeat. The HDF5
// recorder (hdf5_recorder.h) stores them as column tables, the summary (experiment_summary.h)
// is computed from them. docs/hdf5-schema.md documents every field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "framework/core/types.h"
#include "framework/engine/step_record.h"

namespace speclab {

// The method name of the autoregressive baseline.
inline constexpr const char* kArMethod = "ar";

// Identifies a prompt-run; resume skips the keys already recorded.
struct RunKey {
  int64_t point = 0;         // sweep point index (expand_sweep order)
  int64_t prompt = 0;        // index into /prompts: the union of the points' prompt lists
  std::string method;        // "ar" or the drafter's label
  int64_t repeat = 0;        // 0 .. repeats-1

  bool operator<(const RunKey& o) const {
    return std::tie(point, prompt, method, repeat) < std::tie(o.point, o.prompt, o.method, o.repeat);
  }
  bool operator==(const RunKey& o) const {
    return point == o.point && prompt == o.prompt && method == o.method && repeat == o.repeat;
  }
};

// One speculative step (framework/engine/step_record.h), recorded as the loop produced it.
using StepRecord = SpecStep;

struct RunRecord {
  int64_t run_id = -1;  // row in /runs; assigned by the recorder
  RunKey key;
  std::string prompt_id, category;
  std::string drafter;   // drafter name ("" for ar)
  int64_t gamma = 0;     // num_speculative_tokens (0 for ar)
  uint8_t greedy = 1;    // sampling temperature == 0
  int64_t n_prompt_tokens = 0;
  int64_t n_generated = 0;
  int64_t target_forwards = 0;
  int64_t kv_peak_bytes = 0;      // peak KV bytes in use over all pools (shared manager)
  int64_t kv_seq_peak_bytes = 0;  // peak KV bytes referenced by the target's sequence
  // Seconds. wall = the whole generate call. verify = target forwards (prefill included; for
  // ar every target forward and token pick); other = wall - (draft + verify + accept + kv).
  double wall_seconds = 0.0, prefill_seconds = 0.0, decode_seconds = 0.0;
  double draft_seconds = 0.0, verify_seconds = 0.0, accept_seconds = 0.0, kv_seconds = 0.0, other_seconds = 0.0;
  std::string stop_reason;
  std::string text;
  // Greedy losslessness: 1 = tokens identical to the ar run of the same (point, prompt, repeat),
  // 0 = they differ, -1 = not checked (the ar run itself, or sampling).
  int8_t lossless = -1;
  TokenList tokens;               // [n_generated]
  std::vector<StepRecord> steps;  // empty for ar
};

// One sweep point: its index, the values it sets, and a label "key=value, ..." ("" when the
// config has no sweep).
struct PointRecord {
  int64_t index = 0;
  std::map<std::string, std::string> values;
  std::string label;
};

struct PromptRecord {
  std::string id, category, text;
};

// Everything an experiment file holds (complete prompt-runs only).
struct ExperimentData {
  std::string config_yaml;           // the config as written (after --set) the experiment ran with
  std::string resolved_config_yaml;  // /resolved_config; empty in files written before it existed
  std::vector<PointRecord> points;
  std::vector<PromptRecord> prompts;
  std::vector<std::string> methods;  // "ar" first, then the drafter labels
  std::vector<RunRecord> runs;       // in run_id order
};

// "key=value, key=value" in key order; "" for no values.
std::string point_label(const std::map<std::string, std::string>& values);

}  // namespace speclab
