// speclab submit — run an experiment config on a Slurm cluster (docs/scale-out.md).
//
//   speclab submit CONFIG.yaml --slurm --shards N [--partition P] [--time T] [--set k=v ...]
//                  [--output FILE.h5] [--threads T] [--dry-run]
//
// Writes two batch scripts into <output stem>_shards/ beside the output file and prints them:
//   shards.sh  a job array (--array=0-(N-1)); task i runs `speclab run CONFIG --shard i/N
//              --resume` into shard_<i>.h5 (--resume creates the file or continues it, so a
//              failed or requeued task is resubmitted with `sbatch --array=i shards.sh`, and the
//              merge after it with --dependency=afterok:<that job>,afterany:<the array job>);
//   merge.sh   `speclab merge OUTPUT shard_*.h5 --overwrite`, then `speclab report OUTPUT`.
// Then (unless --dry-run) submits shards.sh with sbatch and merge.sh with
// --dependency=afterok:<array job>, and prints both job ids. The config is loaded and checked
// first; the scripts call this speclab binary by its absolute path, from the current directory.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/app/experiment_runner.h"
#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/io/config_util.h"
#include "framework/io/hdf5_journal.h"
#include "framework/io/experiment_config.h"

namespace speclab::cli {

namespace {

namespace fs = std::filesystem;

std::string absolute(const std::string& p) {
  std::error_code ec;
  const fs::path a = fs::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

// Runs `cmd`; its stdout without the trailing newline (stderr only for the error: sites'
// job_submit plugins print notices there, which were read as part of the job id). Throws
// Error(kIo) when it fails.
std::string run_capture(const std::string& cmd) {
  std::error_code tmp_ec;
  std::string err_template = (fs::temp_directory_path(tmp_ec) / "speclab_sbatch_XXXXXX").string();  // $TMPDIR
  if (tmp_ec) err_template = "/tmp/speclab_sbatch_XXXXXX";
  std::vector<char> err_buf(err_template.begin(), err_template.end());
  err_buf.push_back('\0');
  char* err_path = err_buf.data();
  const int fd = mkstemp(err_path);
  if (fd < 0) throw Error(ErrorKind::kIo, "cannot create a temporary file for sbatch's messages", "sbatch");
  ::close(fd);
  std::string out, err;
  FILE* p = popen((cmd + " 2>" + shell_quote(err_path)).c_str(), "r");
  if (!p) {
    ::unlink(err_path);
    throw Error(ErrorKind::kIo, "cannot run: " + cmd, "sbatch");
  }
  char buf[256];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  {
    std::ifstream e(err_path, std::ios::binary);
    err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  }
  ::unlink(err_path);
  auto trim = [](std::string& t) {
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  };
  trim(out);
  trim(err);
  if (rc != 0) {
    // One line: sbatch's lines joined (the error printer showed them as literal "\n"s).
    std::string said;
    for (char c : err.empty() ? out : err) {
      if (c == '\r') continue;
      if (c == '\n') {
        if (!said.empty() && said.compare(said.size() - std::min<size_t>(2, said.size()), 2, "; ") != 0) said += "; ";
        continue;
      }
      said += c;
    }
    throw Error(ErrorKind::kIo, "`" + cmd + "` failed: " + said, "sbatch");
  }
  return out;
}

// The cluster's MaxArraySize (`scontrol show config`): array indices must stay below it, so a
// submission of more shards is refused before anything is written. Empty when scontrol does not
// answer (sbatch then has the last word).
std::optional<int64_t> cluster_max_array_size() {
  FILE* p = popen("scontrol show config 2>/dev/null", "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) return std::nullopt;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string key, eq;
    int64_t value = -1;
    if (words >> key >> eq >> value && key == "MaxArraySize" && eq == "=" && value >= 0) return value;
  }
  return std::nullopt;
}

// The job id of `sbatch --parsable`'s output ("<id>" or "<id>;<cluster>"). Throws Error(kIo)
// naming the output when it is none.
std::string parsable_job_id(const std::string& output) {
  const std::string id = output.substr(0, output.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw Error(ErrorKind::kIo, "expected sbatch --parsable to print a job id, found '" + output + "'", "sbatch");
  return id;
}

void write_script(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw Error(ErrorKind::kIo, "cannot write the batch script", path);
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
}

// sbatch --time's formats (sbatch(1)): minutes, minutes:seconds, hours:minutes:seconds,
// days-hours, days-hours:minutes, days-hours:minutes:seconds, or UNLIMITED / INFINITE (any case)
// or -1 (no limit), as Slurm's time_str2secs reads them.
bool slurm_time_ok(const std::string& t) {
  std::string lower;
  for (char c : t) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "unlimited" || lower == "infinite" || t == "-1") return true;
  std::string rest = t;
  const size_t dash = t.find('-');
  if (dash != std::string::npos) {
    const std::string days = t.substr(0, dash);
    if (days.empty() || days.find_first_not_of("0123456789") != std::string::npos) return false;
    rest = t.substr(dash + 1);
  }
  std::vector<std::string> parts(1);
  for (char c : rest) {
    if (c == ':') parts.emplace_back();
    else if (std::isdigit(static_cast<unsigned char>(c))) parts.back() += c;
    else return false;
  }
  for (const std::string& p : parts)
    if (p.empty()) return false;
  return parts.size() <= 3;
}

}  // namespace

int cmd_submit(const std::vector<std::string>& args) {
  std::string config_path, output, partition, time_limit;
  std::vector<std::string> overrides;
  bool slurm = false, dry_run = false, overwrite = false;
  int64_t shards = 0;
  int threads = 0;
  po::options_description desc("speclab submit");
  desc.add_options()
      ("config", po::value(&config_path), "experiment YAML (positional)")
      ("slurm", po::bool_switch(&slurm), "submit to Slurm (the only scheduler supported; required)")
      ("shards", po::value(&shards), "number of shards = array tasks (1 .. 100000)")
      ("partition", po::value(&partition), "Slurm partition (sbatch --partition)")
      ("time", po::value(&time_limit), "time limit per task (sbatch --time, e.g. 01:00:00)")
      ("set", po::value(&overrides)->composing(), "override a config key: --set key=value (repeatable)")
      ("output,o", po::value(&output), "merged HDF5 output path (default: the config's output.path)")
      ("threads", po::value(&threads)->default_value(threads), "CPU threads per task (Slurm --cpus-per-task and the run's --threads; 0 = the cluster's default)")
      ("overwrite", po::bool_switch(&overwrite), "let the merge job replace an existing output file")
      ("dry-run", po::bool_switch(&dry_run), "write and print the scripts, submit nothing");
  po::variables_map vm;
  const char* usage =
      "usage: speclab submit CONFIG.yaml --slurm --shards N [--partition P] [--time T] [--set key=value ...] "
      "[--output FILE.h5] [--threads N] [--overwrite] [--dry-run]";
  if (!parse_or_help(usage, desc, args, vm, "config")) return kExitOk;
  if (config_path.empty()) throw Error(ErrorKind::kConfig, "expected a config file, found none", "command line", "CONFIG");
  if (!slurm) throw Error(ErrorKind::kConfig, "expected --slurm (the only scheduler supported), found none", "command line", "--slurm");
  if (shards < 1 || shards > 100000)
    throw Error(ErrorKind::kConfig, "expected a number of shards 1 <= N <= 100000, found " + std::to_string(shards),
                "command line", "--shards");
  for (const std::string& v : {partition, time_limit})
    if (v.find_first_of(" \t\n\r'\"\\$`;") != std::string::npos)
      throw Error(ErrorKind::kConfig, "expected a plain Slurm value, found '" + v + "'", "command line",
                  v == partition ? "--partition" : "--time");
  if (!time_limit.empty() && !slurm_time_ok(time_limit))
    throw Error(ErrorKind::kConfig,
                "expected a Slurm time limit (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED), found '" +
                    time_limit + "'",
                "command line", "--time");
  validate_threads(threads);

  if (vm.count("output") && output.empty())
    throw Error(ErrorKind::kConfig, "expected a path, found an empty one", "command line", "--output");
  ExperimentConfig config = load_experiment_config(config_path, overrides);  // checks it now
  apply_output_flag(config, output);
  // What `speclab run` checks before it runs, for every point (files, prompts): a config it
  // refuses would otherwise fail in every array task, or in the merge job after all of them.
  (void)plan_experiment(config);
  const std::string out = absolute(config.output.path);
  std::error_code exists_ec;
  if (!overwrite && fs::exists(out, exists_ec))
    throw Error(ErrorKind::kConfig,
                "the merged output file already exists (the merge job replaces it); pass --overwrite to let it", out,
                "output.path");
  const fs::path out_path(out);
  const std::string dir = (out_path.parent_path() / (out_path.stem().string() + "_shards")).string();
  // The #SBATCH --output lines carry the shard directory in double quotes (sbatch reads them; a
  // blank broke the unquoted line until 2026-12-06), with % doubled (Slurm's filename patterns).
  if (dir.find_first_of("\n\r\"\\") != std::string::npos)
    throw Error(ErrorKind::kConfig,
                "expected a shard directory without double quotes, backslashes or line breaks (sbatch's #SBATCH "
                "--output lines cannot carry them), found '" + dir + "'; give an output path without them",
                out, "output.path");
  std::string sbatch_dir;
  for (char c : dir) sbatch_dir += c == '%' ? std::string("%%") : std::string(1, c);
  std::string files;
  for (int64_t i = 0; i < shards; ++i) files += " " + shell_quote(dir + "/shard_" + std::to_string(i) + ".h5");
  // merge.sh names every shard on one command line, and Linux refuses to start a command whose
  // arguments and environment pass ARG_MAX (2 MiB): about 40,000 shards failed there, after the
  // whole array had run. Half of it leaves room for the environment.
  constexpr size_t kMaxMergeArgs = size_t{1} << 20;
  if (files.size() > kMaxMergeArgs)
    throw Error(ErrorKind::kConfig,
                "expected at most " + std::to_string(kMaxMergeArgs) + " bytes of shard paths on merge.sh's command line "
                "(Linux refuses a command of more than 2 MiB), found " + std::to_string(files.size()) + " for " +
                    std::to_string(shards) + " shards; use fewer shards or a shorter output path",
                "command line", "--shards");
  // After the command-line check above (a count past it is refused there, cluster or not). Slurm
  // refused a larger array only at submission, with "Invalid job array specification", and
  // the message then advised running submit again (until 2026-12-07).
  if (const std::optional<int64_t> max_array = cluster_max_array_size(); max_array && shards > *max_array)
    throw Error(ErrorKind::kConfig,
                "expected at most " + std::to_string(*max_array) + " shards, this cluster's MaxArraySize (`scontrol "
                "show config`; array indices 0.." + std::to_string(shards - 1) + " must stay below it), found " +
                    std::to_string(shards) + "; use fewer shards (each runs more prompt-runs) or raise MaxArraySize "
                    "in slurm.conf",
                "command line", "--shards");
  std::error_code ec;
  ensure_output_directory(out);
  fs::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::kIo, "cannot create the shard directory: " + ec.message(), dir, "output.path");
  // The files of an earlier submission into this directory: its tasks --resume their shard file,
  // so they would continue those (every task failed where the config or the shard count had
  // changed, and the earlier merged file stayed in place).
  std::vector<std::string> earlier;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard_", 0) == 0 || name == "merge.log") earlier.push_back(entry.path().string());
  }
  std::sort(earlier.begin(), earlier.end());
  if (!earlier.empty() && !overwrite)
    throw Error(ErrorKind::kConfig,
                "holds " + std::to_string(earlier.size()) + (earlier.size() == 1 ? " file" : " files") +
                    " of an earlier submission (" +
                    fs::path(earlier.front()).filename().string() +
                    (earlier.size() > 1 ? ", ..." : "") +
                    "), which this submission's tasks would resume: pass --overwrite to remove them and start "
                    "afresh (once that submission's jobs have ended), or finish that submission (sbatch --array=i " +
                    dir + "/shards.sh resubmits its task i; docs/scale-out.md has its merge)",
                dir, "output.path");
  // --overwrite removed shard files that running tasks of the earlier submission still wrote: that
  // submission then failed, and this one's merge waited forever (until 2026-12-06).
  for (const std::string& f : earlier)
    if (config::ends_with(f, ".h5") && hdf5_writer_holds(f))
      throw Error(ErrorKind::kConfig,
                  "expected the earlier submission's tasks to have ended, found one still writing " +
                      fs::path(f).filename().string() + ": wait for its jobs (squeue) or scancel them, then --overwrite",
                  dir, "--overwrite");

  std::string job_name = "speclab-" + config.name;
  for (char& c : job_name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  const std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
  const std::string n = std::to_string(shards);
  std::string run = shell_quote(exe) + " run " + shell_quote(absolute(config_path));
  for (const std::string& o : overrides) run += " --set " + shell_quote(o);
  run += " --threads " + std::to_string(threads) + " --no-report --resume";

  std::string head = "#!/bin/bash\n";
  if (!partition.empty()) head += "#SBATCH --partition=" + partition + "\n";
  if (!time_limit.empty()) head += "#SBATCH --time=" + time_limit + "\n";
  // --threads N asks Slurm for N CPUs per task; without it a task runs on what the cluster's
  // default allocation gives it (its affinity mask: available_cpus()), the same for every task.
  if (threads > 0) head += "#SBATCH --cpus-per-task=" + std::to_string(threads) + "\n";
  const std::string cwd = absolute(".");
  const std::string shard_script = head +
      "#SBATCH --job-name=" + job_name + "\n"
      "#SBATCH --array=0-" + std::to_string(shards - 1) + "\n"
      "#SBATCH --output=\"" + sbatch_dir + "/shard_%a.log\"\n"
      "# One shard of `speclab submit`: resubmit a failed task i with `sbatch --array=i " + dir + "/shards.sh`,\n"
      "# then its merge after it and after this array's other tasks: `sbatch --dependency=afterok:<new job>,afterany:<this\n"
      "# array's job> " + dir + "/merge.sh` (docs/scale-out.md).\n"
      "set -euo pipefail\n"
      "cd " + shell_quote(cwd) + "\n"
      "exec " + run + " --shard \"${SLURM_ARRAY_TASK_ID}/" + n + "\" --output " + shell_quote(dir) +
      "/shard_\"${SLURM_ARRAY_TASK_ID}\".h5\n";
  const std::string merge_script = head +
      "#SBATCH --job-name=" + job_name + "-merge\n"
      "#SBATCH --output=\"" + sbatch_dir + "/merge.log\"\n"
      "# Merges the shards of `speclab submit` and writes the report.\n"
      "set -euo pipefail\n"
      "cd " + shell_quote(cwd) + "\n" +
      shell_quote(exe) + " merge " + shell_quote(out) + files + " --overwrite\n" +
      shell_quote(exe) + " report " + shell_quote(out) + "\n";
  // A dry run beside an earlier submission's files prints the scripts and keeps that submission's
  // own: resubmitting its task i (`sbatch --array=i shards.sh`) needs them. Until 2026-12-06 a dry
  // run of 5 shards rewrote a 3-shard submission's scripts, and its task 1, resubmitted, was
  // refused ("expected shard 1/5, found a file of shard 1/3").
  const bool keep_earlier_scripts = dry_run && !earlier.empty();
  // --overwrite is about to remove the earlier submission's files: first let sbatch validate this
  // submission's script (partition, time limit, CPUs), written beside the earlier one's, so that
  // a submission sbatch refuses changes nothing, the earlier scripts included. A mistyped
  // --partition deleted the earlier results and then submitted nothing (until 2026-12-06).
  if (!dry_run && !earlier.empty()) {
    const std::string probe = dir + "/shards.sh.test-only";
    write_script(probe, shard_script);
    try {
      run_capture("sbatch --test-only " + shell_quote(probe));
    } catch (const Error& e) {
      fs::remove(probe, ec);
      throw Error(e.kind(),
                  e.message() + "; nothing was submitted, and the " + std::to_string(earlier.size()) +
                      " files and the scripts of the earlier submission in " + dir + " were kept",
                  e.file(), e.field());
    }
    fs::remove(probe, ec);
  }
  if (!keep_earlier_scripts) {
    write_script(dir + "/shards.sh", shard_script);
    write_script(dir + "/merge.sh", merge_script);
  }
  std::printf("# %s/shards.sh\n%s\n# %s/merge.sh\n%s\n", dir.c_str(), shard_script.c_str(), dir.c_str(),
              merge_script.c_str());
  if (dry_run) {
    if (keep_earlier_scripts)
      std::printf("dry run: %s holds %zu files of an earlier submission, whose shards.sh and merge.sh are kept (the "
                  "scripts above are printed only); --overwrite would remove those files and write these scripts\n",
                  dir.c_str(), earlier.size());
    else
      std::printf("dry run: nothing submitted; submit with: sbatch %s/shards.sh, then sbatch "
                  "--dependency=afterok:<its job id> %s/merge.sh\n", dir.c_str(), dir.c_str());
    return kExitOk;
  }
  for (const std::string& f : earlier) {
    fs::remove(f, ec);
    if (ec) throw Error(ErrorKind::kIo, "cannot remove a file of an earlier submission: " + ec.message(), f, "--overwrite");
  }
  std::string job;
  try {
    job = parsable_job_id(run_capture("sbatch --parsable " + shell_quote(dir + "/shards.sh")));
  } catch (const Error& e) {
    // Nothing is queued: say what is left in the directory, and how to submit it by hand.
    throw Error(e.kind(),
                e.message() + "; nothing was submitted (the scripts are written: sbatch " + shell_quote(dir + "/shards.sh") +
                    ", then its merge job, once the cluster takes jobs; or run submit again)",
                e.file(), e.field());
  }
  std::string merge_job;
  try {
    merge_job = parsable_job_id(
        run_capture("sbatch --parsable --dependency=afterok:" + job + " " + shell_quote(dir + "/merge.sh")));
  } catch (const Error& e) {
    // The array is queued: say so, and how to submit the merge after it (running submit again
    // would queue a second array).
    throw Error(e.kind(),
                "the shards job " + job + " is submitted, but submitting its merge job failed (" + e.message() +
                    "); submit it with: sbatch --dependency=afterok:" + job + " " + shell_quote(dir + "/merge.sh"),
                e.file(), e.field());
  }
  std::printf("submitted: shards job %s (array 0-%lld), merge job %s (after all shards succeed) -> %s\n", job.c_str(),
              static_cast<long long>(shards - 1), merge_job.c_str(), out.c_str());
  return kExitOk;
}

}  // namespace speclab::cli
