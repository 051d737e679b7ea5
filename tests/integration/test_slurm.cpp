// `speclab submit --slurm` on a real one-node Slurm cluster (scripts/slurm/start_cluster.sh;
// `make test` starts it and sets SLURM_CONF): a 4-shard job array of configs/tiny_stories.yaml
// and its dependent merge job give the same prompt-runs, tokens, alpha and tau as an unsharded
// run; a shard SIGKILLed by `scancel --signal=KILL --batch`, resubmitted, resumes its file and
// the merge is still exact.
//
// Without a cluster (SLURM_CONF unset, sinfo failing) the tests skip with a one-line reason,
// unless SPECLAB_REQUIRE_SLURM=1 (set by `make test` once the cluster is up): then they fail.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "framework/io/hdf5_recorder.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

const std::string kConfig = std::string(SPECLAB_SOURCE_DIR) + "/configs/tiny_stories.yaml";

struct Shell {
  int code = -1;
  std::string out;
};

Shell sh(const std::string& cmd) {
  Shell r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// "" when a cluster answers; else why not.
std::string cluster_problem() {
  const char* conf = std::getenv("SLURM_CONF");
  if (!conf || !*conf) return "SLURM_CONF is not set (start one with scripts/slurm/start_cluster.sh)";
  const Shell s = sh("sinfo -h -o %T");
  if (s.code != 0) return "sinfo failed: " + s.out;
  return {};
}

bool require_cluster() {
  const std::string why = cluster_problem();
  if (why.empty()) return true;
  const char* req = std::getenv("SPECLAB_REQUIRE_SLURM");
  if (req && std::string(req) == "1") FAIL("SPECLAB_REQUIRE_SLURM=1 but no Slurm cluster: " << why);
  WARN("no Slurm cluster, skipped: " << why);
  return false;
}

bool wait_until(const std::function<bool()>& done, int timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

bool job_gone(const std::string& id) { return sh("squeue -h -j " + id).out.empty(); }

std::string job_state(const std::string& id) {
  std::smatch m;
  const std::string out = sh("scontrol show job " + id).out;
  return std::regex_search(out, m, std::regex("JobState=(\\S+)")) ? std::string(m[1]) : "?";
}

struct Dir {
  std::string path;
  Dir() {
    std::string tmpl = (fs::temp_directory_path() / "speclab_slurm_test_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Dir() { fs::remove_all(path); }
};

// The unsharded run into `h5`.
void reference_run(const std::string& h5, const std::string& sets) {
  const Shell r = sh(std::string(SPECLAB_CLI) + " run '" + kConfig + "' " + sets + " --output '" + h5 + "' --no-report");
  INFO(r.out);
  REQUIRE(r.code == 0);
}

// Submits; returns {array job id, merge job id}.
std::pair<std::string, std::string> submit(const std::string& out, const std::string& sets, const std::string& env = "") {
  const Shell r = sh(env + std::string(SPECLAB_CLI) + " submit '" + kConfig + "' --slurm --shards 4 --time 00:10:00 " +
                     sets + " --output '" + out + "'");
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex(R"(submitted: shards job (\d+) \(array 0-3\), merge job (\d+))")));
  return {m[1], m[2]};
}

// Same prompt-runs in the same order with the same tokens, and the same alpha and tau.
void check_equal(const std::string& merged_h5, const std::string& ref_h5) {
  const ExperimentData a = read_experiment(ref_h5), b = read_experiment(merged_h5);
  REQUIRE(b.runs.size() == a.runs.size());
  CHECK(b.status == "complete");
  CHECK(b.meta.merged_shards == 4);
  for (size_t i = 0; i < a.runs.size(); ++i) {
    INFO("run " << i);
    CHECK(b.runs[i].key == a.runs[i].key);
    CHECK(b.runs[i].tokens == a.runs[i].tokens);
    CHECK(b.runs[i].lossless == a.runs[i].lossless);
  }
  const ExperimentSummary sa = summarize(a), sb = summarize(b);
  REQUIRE(sa.overall.size() == sb.overall.size());
  for (size_t i = 0; i < sa.overall.size(); ++i) {
    CHECK(sb.overall[i].alpha.rate == sa.overall[i].alpha.rate);
    CHECK(sb.overall[i].tau == sa.overall[i].tau);
    CHECK(sb.overall[i].alpha.trials == sa.overall[i].alpha.trials);
  }
}

}  // namespace

TEST_CASE("speclab submit --slurm: a 4-shard job array merged equals the unsharded run", "[slurm]") {
  if (!require_cluster()) return;
  const Dir dir;
  // An output directory with a blank: the #SBATCH --output lines broke at it (found by a probe on
  // 2026-12-06); they are quoted now.
  const std::string sub = dir.path + "/with blank";
  const std::string out = sub + "/sweep.h5", ref = dir.path + "/ref.h5";
  // An sbatch that prints a notice on stderr, as sites' job_submit plugins do: it was read as part
  // of the job id, and the merge job was never submitted.
  const std::string bin = dir.path + "/bin";
  fs::create_directories(bin);
  std::string real = sh("command -v sbatch").out;
  while (!real.empty() && (real.back() == '\n' || real.back() == '\r')) real.pop_back();
  REQUIRE_FALSE(real.empty());
  std::ofstream(bin + "/sbatch") << "#!/bin/sh\necho 'sbatch: INFO: a site notice on stderr' >&2\nexec '" << real
                                 << "' \"$@\"\n";
  fs::permissions(bin + "/sbatch", fs::perms::owner_all);
  const auto [array, merge] = submit(out, "", "PATH='" + bin + "':\"$PATH\" ");
  {
    // Without --threads, no CPU request: each task runs on its allocation (available_cpus()).
    std::ifstream in(sub + "/sweep_shards/shards.sh");
    const std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(script.find("--cpus-per-task") == std::string::npos);
    CHECK(script.find("--threads 0 ") != std::string::npos);
  }
  reference_run(ref, "");  // meanwhile
  REQUIRE(wait_until([&] { return job_gone(array) && job_gone(merge); }, 240));
  INFO("merge job " << merge << ": " << job_state(merge));
  REQUIRE(fs::exists(out));
  CHECK(fs::exists(sub + "/sweep_report/report.md"));  // the merge job's report
  CHECK(fs::exists(sub + "/sweep_shards/shard_3.log"));  // where #SBATCH --output put it
  check_equal(out, ref);
  // Each task of the default 1-CPU allocation ran one thread (SLURM_CPUS_ON_NODE): the cluster
  // binds no tasks, so the mask showed both CPUs and each task ran 2 until 2026-12-06.
  CHECK(read_experiment(out).resolved_config_yaml.find("\nruntime:\n  threads: 1\n") != std::string::npos);
  // A second submission into the same shard directory would resume the first one's shard files
  // under its own config (every task failed where that changed): --overwrite removes them (here
  // only said, under --dry-run; without --overwrite they are refused: the bad-input catalogue).
  const Shell again = sh(std::string(SPECLAB_CLI) + " submit '" + kConfig + "' --slurm --shards 2 --output '" + out +
                         "' --overwrite --dry-run");
  CHECK(again.code == 0);
  CHECK(again.out.find("holds 9 files of an earlier submission") != std::string::npos);
  CHECK(again.out.find("--overwrite would remove those files") != std::string::npos);
  // The dry run keeps the earlier submission's scripts: its task i is resubmitted with them
  // (a dry run of 2 shards rewrote them, and a resubmitted task was refused, until 2026-12-06).
  const auto script_of = [&](const std::string& name) {
    std::ifstream in(sub + "/sweep_shards/" + name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CHECK(script_of("shards.sh").find("#SBATCH --array=0-3\n") != std::string::npos);
  CHECK(script_of("shards.sh").find("/4\"") != std::string::npos);
  // A submission sbatch refuses (here: no such partition) removes nothing: --overwrite's removal
  // waits for `sbatch --test-only` (a mistyped partition deleted the earlier files, until 2026-12-06).
  const Shell refused = sh(std::string(SPECLAB_CLI) + " submit '" + kConfig + "' --slurm --shards 2 --output '" + out +
                           "' --overwrite --partition no_such_partition");
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("nothing was submitted, and the 9 files and the scripts of the earlier submission") !=
        std::string::npos);
  CHECK(fs::exists(sub + "/sweep_shards/shard_3.h5"));
  CHECK(fs::exists(sub + "/sweep_shards/shard_3.log"));
  CHECK(script_of("shards.sh").find("#SBATCH --array=0-3\n") != std::string::npos);
  CHECK(script_of("merge.sh").find("no_such_partition") == std::string::npos);
  CHECK_FALSE(fs::exists(sub + "/sweep_shards/shards.sh.test-only"));
}

TEST_CASE("speclab submit --slurm: more shards than the cluster's MaxArraySize are refused up front", "[slurm]") {
  if (!require_cluster()) return;
  std::smatch m;
  const std::string conf = sh("scontrol show config").out;
  REQUIRE(std::regex_search(conf, m, std::regex(R"(MaxArraySize\s*=\s*(\d+))")));
  const int64_t max_array = std::stoll(m[1]);
  const Dir dir;
  auto dry = [&](int64_t shards) {
    return sh(std::string(SPECLAB_CLI) + " submit '" + kConfig + "' --slurm --shards " + std::to_string(shards) +
              " --output '" + dir.path + "/s" + std::to_string(shards) + ".h5' --dry-run");
  };
  const Shell over = dry(max_array + 1);
  INFO(over.out);
  CHECK(over.code == 2);
  CHECK(over.out.find("MaxArraySize") != std::string::npos);
  CHECK(over.out.find("--shards") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path + "/s" + std::to_string(max_array + 1) + "_shards"));
  // At the limit the array is 0..MaxArraySize-1, which Slurm takes.
  const Shell at = dry(max_array);
  INFO(at.out);
  CHECK(at.code == 0);
}

TEST_CASE("speclab submit --slurm: a shard SIGKILLed and resubmitted resumes and the merge is still exact", "[slurm]") {
  if (!require_cluster()) return;
  const Dir dir;
  const std::string out = dir.path + "/sweep.h5", ref = dir.path + "/ref.h5";
  // Longer shards (180 prompt-runs of 128 tokens each, about 1.5 s), so that the kill lands
  // mid-shard: with 18 runs of 32 tokens a shard of stories260K took about 0.2 s, less than the
  // kill's own latency on a fast machine, and finished before it (killed.runs.size() was 18).
  const int64_t runs_per_shard = 180;
  const std::string sets =
      "--set repeats=40 --set generation.max_new_tokens=128 --set generation.ignore_eos=true --threads 1";
  const auto [array, merge] = submit(out, sets);
  {
    // --threads N asks Slurm for N CPUs per task (docs/scale-out.md, "Threads").
    std::ifstream in(dir.path + "/sweep_shards/shards.sh");
    const std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(script.find("#SBATCH --cpus-per-task=1\n") != std::string::npos);
    CHECK(script.find("--threads 1 ") != std::string::npos);
  }
  const std::string task = array + "_2", shard = dir.path + "/sweep_shards/shard_2.h5";
  // Kill shard 2 once its file exists (made before its first prompt-run).
  REQUIRE(wait_until([&] { return fs::exists(shard) || job_gone(task); }, 120));
  const Shell k = sh("scancel --signal=KILL --batch " + task);
  INFO(k.out);
  REQUIRE(k.code == 0);
  REQUIRE(wait_until([&] { return job_gone(task); }, 60));
  const std::string state = job_state(task);
  INFO("shard 2 after the kill: " << state);
  REQUIRE(state == "FAILED");  // COMPLETED: it finished before the kill
  const ExperimentData killed = read_experiment(shard);
  CHECK(killed.status == "running");
  CHECK(static_cast<int64_t>(killed.runs.size()) < runs_per_shard);
  // The merge job can never run now (afterok); resubmit the shard, then the merge after it.
  sh("scancel " + merge);
  const Shell again = sh("sbatch --parsable --array=2 '" + dir.path + "/sweep_shards/shards.sh'");
  INFO(again.out);
  REQUIRE(again.code == 0);
  const std::string again_id = again.out.substr(0, again.out.find_first_of(";\n"));
  const Shell m2 = sh("sbatch --parsable --dependency=afterok:" + again_id + ",afterany:" + array + " '" + dir.path +
                      "/sweep_shards/merge.sh'");
  REQUIRE(m2.code == 0);
  const std::string merge2 = m2.out.substr(0, m2.out.find_first_of(";\n"));
  reference_run(ref, sets);  // meanwhile
  REQUIRE(wait_until([&] { return job_gone(array) && job_gone(again_id) && job_gone(merge2); }, 240));
  INFO("merge job " << merge2 << ": " << job_state(merge2));
  REQUIRE(fs::exists(out));
  const ExperimentData resumed = read_experiment(shard);
  CHECK(resumed.status == "complete");
  CHECK(static_cast<int64_t>(resumed.runs.size()) == runs_per_shard);
  // It continued the killed file rather than starting over (its log says what it skipped).
  for (size_t i = 0; i < killed.runs.size(); ++i) CHECK(resumed.runs[i].tokens == killed.runs[i].tokens);
  if (!killed.runs.empty()) {
    const std::string log = sh("cat '" + dir.path + "/sweep_shards/shard_2.log'").out;
    INFO(log);
    CHECK(log.find("(" + std::to_string(killed.runs.size()) + " already in the file, skipped)") != std::string::npos);
  }
  check_equal(out, ref);
}
