// Merging shard files into one experiment file — `speclab merge` (docs/scale-out.md).
//
// merge_shards() reads the files of `speclab run --shard i/n` read-only, checks that they are
// exactly the shards 0..n-1 of one finished experiment, and returns the merged experiment: the
// prompt-runs in the order an unsharded run records them (plan row, then "ar" and the drafters
// in config order), run_id renumbered 0.., every recorded value as the shard wrote it. Its
// metadata is shard 0's, with shard 0 of 1, merged_shards = n and the earliest start_time; its
// resolved config is shard 0's (its `runtime` section that of shard 0's process), with
// output.path set to `output_path` (as given) when one is given (it named shard 0's file until 2026-12-06).
//
// Each problem throws Error(kBadInput) with one line naming the files and keys at fault:
//   - a file without a plan (written before sharding existed) or not finished (status other
//     than "complete");
//   - files of different configs (shard_config_hash, with the first settings that differ) or of
//     different revisions (git_revision), or split into different numbers of shards;
//   - a shard given twice, a shard missing;
//   - a prompt-run recorded twice, recorded in a shard it does not belong to, or missing.
#pragma once

#include <string>
#include <vector>

#include "framework/io/experiment_records.h"
#include "framework/io/experiment_summary.h"

namespace speclab {

ExperimentData merge_shards(const std::vector<std::string>& paths, const std::string& output_path = {});

// Writes `data` and `summary` as a complete experiment file at `path` (status "complete",
// end_time `end_time`): built under `<path>.merging` and renamed over `path` at the end, so
// that `path` is untouched (and nothing is left behind) when it fails. Throws Error(kIo).
void write_experiment_file(const std::string& path, const ExperimentData& data, const ExperimentSummary& summary,
                           const std::string& end_time);

}  // namespace speclab
