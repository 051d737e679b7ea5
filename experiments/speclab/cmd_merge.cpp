// speclab merge — one experiment file from the shard files of `speclab run --shard i/n`
// (framework/io/shard_merge.h, docs/scale-out.md): checks them, writes OUT.h5 (built under
// OUT.h5.merging, renamed at the end) with the summary recomputed from every prompt-run, and
// prints the summary table. Any problem: one line naming the files and keys, exit 2, nothing
// written.
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "experiments/app/experiment_runner.h"
#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/io/hdf5_journal.h"
#include "framework/io/path_lock.h"
#include "framework/io/config_util.h"
#include "framework/io/shard_merge.h"

namespace speclab::cli {

namespace {

// What a merge leaves while it writes: OUT.merging, its .partial and journal, and OUT's lock file.
// SIGINT, SIGTERM and SIGHUP remove them, then end the process by the signal as before (they
// stayed until the next merge into OUT until 2026-12-07). Set once, before the handlers.
std::string g_leftovers[4];

extern "C" void remove_merge_leftovers(int sig) {
  for (const std::string& p : g_leftovers)
    if (!p.empty()) ::unlink(p.c_str());  // async-signal-safe; the strings are not changed after set-up
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace


int cmd_merge(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  bool overwrite = false;
  po::options_description desc("speclab merge");
  desc.add_options()
      ("files", po::value(&files)->composing(), "OUT.h5 then the shard files (positional)")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing OUT.h5");
  po::variables_map vm;
  const char* usage = "usage: speclab merge OUT.h5 SHARD.h5... [--overwrite]";
  if (!parse_or_help(usage, desc, args, vm, "files",
                     "Merges the files of `speclab run CONFIG --shard i/n` (i = 0..n-1, each given once) into one "
                     "file equal to an unsharded run's, up to the timings.",
                     -1))
    return kExitOk;
  if (files.size() < 2)
    throw Error(ErrorKind::kConfig, "expected OUT.h5 and at least one shard file, found " +
                                        std::to_string(files.size()) + " file(s)", "command line", "SHARD");
  const std::string out = files.front();
  const std::vector<std::string> shards(files.begin() + 1, files.end());
  // The same rule as a run's output.path: the merged file is an experiment file like any other.
  if (!config::ends_with(out, ".h5") && !config::ends_with(out, ".hdf5"))
    throw Error(ErrorKind::kConfig, "expected a path ending in .h5 or .hdf5, found '" + out + "'", out, "OUT.h5");
  namespace fs = std::filesystem;
  std::error_code ec;
  // One merge into OUT at a time, for the checks below and the write: merges at once shared
  // OUT.merging, and all could fail leaving no file, or two report success (until 2026-12-06).
  ensure_output_directory(out, "OUT.h5");
  const PathLock out_lock = PathLock::acquire(out, "merge", "OUT.h5");
  if (fs::exists(out, ec) && !overwrite)
    throw Error(ErrorKind::kConfig, "the output file already exists; pass --overwrite to replace it", out, "OUT.h5");
  // A running `speclab run` writing OUT: replacing the file (and its journal) under it loses both.
  if (fs::exists(out, ec) && hdf5_writer_holds(out))
    throw Error(ErrorKind::kIo, "expected a file no process is writing, found one a running `speclab run` holds",
                out, "OUT.h5");
  for (const std::string& s : shards)
    if (fs::equivalent(s, out, ec))
      throw Error(ErrorKind::kConfig, "expected an output file other than the shards, found a shard", out, "OUT.h5");

  g_leftovers[0] = out + ".merging";
  g_leftovers[1] = out + ".merging.partial";
  g_leftovers[2] = hdf5_journal_path(out + ".merging");
  g_leftovers[3] = out_lock.lock_path();
  // Installed while the lock is ours, restored before it is released (declared after out_lock,
  // so destroyed first, on every way out): a signal later must not remove another merge's files.
  struct Handlers {
    void (*old[3])(int) = {};
    Handlers() {
      const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
      for (int i = 0; i < 3; ++i) {
        old[i] = std::signal(sigs[i], remove_merge_leftovers);
        if (old[i] == SIG_IGN) std::signal(sigs[i], SIG_IGN);  // kept ignored (`&` jobs)
      }
    }
    ~Handlers() {
      const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
      for (int i = 0; i < 3; ++i) std::signal(sigs[i], old[i] == SIG_ERR ? SIG_DFL : old[i]);
    }
  } handlers;
  const ExperimentData merged = merge_shards(shards, out);
  const ExperimentSummary summary = summarize(merged);
  write_experiment_file(out, merged, summary, iso8601_now());
  std::printf("merged %zu shards (%zu prompt-runs) into %s\n", shards.size(), merged.runs.size(), out.c_str());
  print_summary(summary, merged.points);
  return kExitOk;
}

}  // namespace speclab::cli
