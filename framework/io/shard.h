// Shards of an experiment — `speclab run --shard i/n` and `speclab merge` (docs/scale-out.md).
//
// An experiment's plan is its list of (point, prompt, repeat) groups in run order: for each
// sweep point, each of the point's prompts, each repeat. A group holds the AR run and every
// drafter's run of that (point, prompt, repeat), so a shard runs groups whole and speedups and
// the losslessness check stay paired within one process. Shard i of n (0-based, 0 <= i < n: the
// numbering of Slurm's SLURM_ARRAY_TASK_ID) runs the groups of plan rows k with k % n == i:
// round robin, so that every shard gets a share of every sweep point.
//
// Two files belong to one experiment when their shard_config_hash()es and git revisions agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace speclab {

struct ShardSpec {
  int64_t index = 0;  // 0 .. count-1
  int64_t count = 1;  // 1 = unsharded

  // True when plan row `row` belongs to this shard.
  bool owns(int64_t row) const { return row % count == index; }
  // "i/n".
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
};

// Parses "i/n" (decimal, 0 <= i < n <= 100000). Throws Error(kConfig, ..., "command line",
// `option`) naming the text and what was expected.
ShardSpec parse_shard(const std::string& text, const std::string& option = "--shard");

// A hex digest (Fnv64, framework/core/fnv.h) of the resolved config (/resolved_config) without
// what may differ between the machines of one experiment: `output`, `equivalence` and the runtime
// facts other than `threads`, `kernel_isa` and `files` (model file location, chat template, working directory;
// `files` holds the content fingerprints of the model and draft files, which must be the same).
std::string shard_config_hash(const std::string& resolved_config_yaml);

// The keys shard_config_hash() leaves out, for yaml_differences().
const std::vector<std::string>& shard_config_ignored_keys();

}  // namespace speclab
