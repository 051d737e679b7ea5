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
  // A conversation (prompt_loader.h) is one record: every turn's prompt tokens, answers and
  // seconds added up. Each turn's first token comes from its own prefill.
  int64_t turns = 1;
  int64_t n_prompt_tokens = 0;  // over all turns: each turn prefills its whole conversation so far
  int64_t n_generated = 0;      // over all turns
  int64_t target_forwards = 0;
  int64_t kv_peak_bytes = 0;      // peak KV bytes in use over all pools (shared manager)
  int64_t kv_seq_peak_bytes = 0;  // peak KV bytes referenced by the target's sequence
  // Seconds. wall = the whole generate call. prefill = prompt processing: the target's prefill
  // forward, plus the drafter's begin() (a draft model's or an EAGLE head's prefill of the same prompt);
  // decode = everything after it. verify = target forwards (the target's prefill included; for
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

// One (point, prompt, repeat) of the experiment's plan: the AR run and every drafter's run of it
// form one group, which a shard (shard.h) runs whole. `prompt` indexes /prompts.
struct PlanGroup {
  int64_t point = 0, prompt = 0, repeat = 0;

  bool operator==(const PlanGroup& o) const { return point == o.point && prompt == o.prompt && repeat == o.repeat; }
};

// Root attributes and the plan of an experiment file (written at creation; hdf5-schema.md).
struct ExperimentMetadata {
  std::string name;
  std::string config_yaml;    // the config as written, after --set overrides (YAML text)
  // Every effective setting (effective_config_yaml) plus a `runtime` section (threads, the
  // model file loaded, chat template on/off, the output path); /resolved_config. Optional.
  std::string resolved_config_yaml;
  std::string git_revision = "unknown";
  std::string torch_version;  // SPECLAB_TORCH_VERSION
  std::string cpu_model;      // /proc/cpuinfo "model name"
  int64_t cpu_cores = 0;
  int64_t memory_bytes = 0;   // physical memory
  std::string start_time;     // ISO 8601 UTC
  // Sharding (shard.h): this file holds the groups of plan row k with k % shard_count ==
  // shard_index; an unsharded run is shard 0 of 1. config_hash = shard_config_hash(resolved).
  int64_t shard_index = 0, shard_count = 1;
  std::string config_hash;
  int64_t merged_shards = 0;       // files written by `speclab merge`: how many shards; else 0
  std::vector<PlanGroup> plan;     // every group of the whole experiment, in run order (/plan)
};

// Everything an experiment file holds (complete prompt-runs only).
struct ExperimentData {
  std::string config_yaml;           // the config as written (after --set) the experiment ran with
  std::string resolved_config_yaml;  // /resolved_config; empty in files written before it existed
  std::vector<PointRecord> points;
  std::vector<PromptRecord> prompts;
  std::vector<std::string> methods;  // "ar" first, then the drafter labels
  std::vector<RunRecord> runs;       // in run_id order
  // The root attributes and /plan (both config texts again in meta); in files written before
  // sharding existed: shard 0 of 1, config_hash "" and an empty plan.
  ExperimentMetadata meta;
  std::string status;                // root attribute status ("running", "complete", ...)
};

// "key=value, key=value": the keys in `order` first, in that order (a sweep's axes, the outermost
// loop first), then any others in key order; "" for no values. Until 2026-12-06 always in key
// order, so a sweep of sampling.temperature (outer) and drafter.gamma read as if gamma were outer.
std::string point_label(const std::map<std::string, std::string>& values, const std::vector<std::string>& order = {});

}  // namespace speclab
