// Hdf5Recorder — the experiment file written by `speclab run` (schema: docs/hdf5-schema.md,
// schema_version 1). Torch-free; HDF5 C++ API.
//
// Layout: tables are groups of equally long, chunked, extendable, gzip-compressed 1-D column
// datasets of plain types (int8/uint8/int32/int64/float32/float64, variable-length UTF-8
// strings): /runs (one row per prompt-run), /steps (one per speculative step), /positions (one
// per draft position of a step), /tokens (one per generated token), /summary/{overall,
// by_category,positions}; plus /points, /point_values, /prompts, the /methods list, the
// /config_yaml scalar and the root attributes. No compound types.
//
// Crash consistency: a writer opens the file in place through Hdf5Journal (hdf5_journal.h) and
// every change that must survive — create(), open_for_append(), each append(), write_summary(),
// set_root_attribute() — ends with a commit: H5Fflush, then the journal makes the flushed state
// the file's. A commit writes the new rows and the metadata they touch, never the earlier data,
// so its cost and the writer's memory do not grow with the file. A writer killed at any point
// (SIGKILL, a failed write, a full disk, a file-size limit) leaves the file as of its last commit,
// possibly with a complete `<path>.journal` that read_experiment(), open_for_append() and the
// Python reader apply first. A failed commit throws Error(kIo, ..., path, "output.path") naming
// what could not be written, and every later commit of that recorder fails too. create() writes
// `<path>.partial` and renames it over `path` after its first commit. There is no fsync: a
// process crash is covered, a power cut is not.
//
// Tables also carry a `complete` attribute: the number of committed rows. append() writes a
// prompt-run's tokens, steps and positions, then its /runs row, then bumps the `complete`
// attributes (/runs last). Readers use only rows [0, complete) of /runs and the child rows whose
// run_id is a committed run, and open_for_append() cuts any other rows off — so files written by
// older versions, which flushed in place, read back as the prompt-runs finished before a kill.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/io/experiment_records.h"
#include "framework/io/experiment_summary.h"

namespace speclab {

constexpr int64_t kHdf5SchemaVersion = 1;

class Hdf5Recorder {
 public:
  // Creates `path`, replacing an existing file, and writes the metadata, the sweep points, the
  // prompts and the method list. Throws Error(kIo, ..., path) when the file cannot be created.
  static Hdf5Recorder create(const std::string& path, const ExperimentMetadata& meta,
                             const std::vector<PointRecord>& points, const std::vector<PromptRecord>& prompts,
                             const std::vector<std::string>& methods);
  // Opens an existing experiment file for appending (resume); drops uncommitted rows left by a
  // killed writer. Throws Error(kBadInput, ..., path) when it is not a SpecLab experiment file of
  // this schema version, Error(kIo) when it cannot be opened.
  static Hdf5Recorder open_for_append(const std::string& path);

  Hdf5Recorder(Hdf5Recorder&&) noexcept;
  Hdf5Recorder& operator=(Hdf5Recorder&&) noexcept;
  ~Hdf5Recorder();

  const std::string& path() const { return path_; }
  // The committed prompt-runs and the file's points, prompts and methods.
  ExperimentData read() const;
  // The /config_yaml text.
  std::string config_yaml() const;

  // Appends one finished prompt-run (assigns run.run_id) and commits; see the header comment.
  void append(RunRecord& run);
  // Appends every run (assigning run_ids) with one commit at the end: `speclab merge`.
  void append_all(std::vector<RunRecord>& runs);
  // Replaces /summary with `summary`; commits.
  void write_summary(const ExperimentSummary& summary);
  // Sets a string attribute on the root group (e.g. end_time, status); commits.
  void set_root_attribute(const std::string& name, const std::string& value);
  void set_root_attribute(const std::string& name, int64_t value);
  int64_t root_int_attribute(const std::string& name, int64_t fallback) const;

 private:
  friend ExperimentData read_experiment(const std::string& path);
  struct Impl;
  // Runs a change and its commit; any failure makes later commits fail too (Hdf5Journal).
  template <class F>
  void guarded(const char* what, F&& f);
  Hdf5Recorder(std::string path, std::unique_ptr<Impl> impl);
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

// Reads a (possibly interrupted) experiment file read-only: the committed prompt-runs.
// Throws Error(kBadInput, ..., path) on a file that is not a SpecLab experiment file or whose
// tables are inconsistent, Error(kIo) when it cannot be opened.
ExperimentData read_experiment(const std::string& path);

}  // namespace speclab
