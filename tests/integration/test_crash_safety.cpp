// Crash safety and resource limits of `speclab run`, as a subprocess on stories260K:
//   - SIGINT stops after the prompt-run in progress with exit code 130 and the file status
//     "interrupted"; --resume completes it, equal to an uninterrupted run. A second SIGINT ends
//     the process at once and the file still opens with every prompt-run reported finished.
//   - a KV budget too small for a later prompt: a one-line error naming the KV key, the prompt
//     and the method; the prompt-runs before it stay in the file (status "failed").
//   - a full disk, simulated with a file-size limit (RLIMIT_FSIZE; speclab ignores SIGXFSZ so the
//     write fails with EFBIG): a one-line error naming the output file; the file on disk is the
//     last complete commit, no .partial or .journal is left, and --resume completes it.
//   - a read-only output location: a clear error before anything is loaded or written; a
//     --resume there leaves the existing file as it was (a root test process runs the CLI as
//     `nobody` for these, and also checks a location even root cannot write).
// The SIGKILL-at-random-points test is scripts/kill_test.sh (`make kill-test`).
#include <catch2/catch.hpp>

#include <H5Cpp.h>
#include <signal.h>
#include <sys/resource.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "framework/io/hdf5_recorder.h"
#include "tests/bad_inputs/cli_process.h"

using namespace speclab;
using namespace speclab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kTinyStories = std::string(SPECLAB_SOURCE_DIR) + "/configs/tiny_stories.yaml";
// 3 prompts x 3 methods x 2 gamma values x 4 repeats = 72 prompt-runs of 32 tokens.
const std::vector<std::string> kSets = {"--set", "repeats=4", "--set", "generation.max_new_tokens=32",
                                        "--set", "generation.ignore_eos=true"};
constexpr size_t kTotal = 72;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "speclab_crash_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::vector<std::string> run_args(const std::string& config, const std::string& h5, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"run", config};
  a.insert(a.end(), kSets.begin(), kSets.end());
  a.insert(a.end(), {"--output", h5, "--no-report"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string status_of(const std::string& h5) {
  H5::H5File f(h5, H5F_ACC_RDONLY);
  H5::Attribute a = f.openGroup("/").openAttribute("status");
  std::string v;
  a.read(a.getStrType(), v);
  return v;
}

// The highest k of the "[k/N]" progress lines: prompt-runs reported finished (and committed).
size_t reported_done(const std::string& err) {
  size_t best = 0;
  for (const std::string& l : lines_of(err))
    if (l.rfind("[", 0) == 0 && l.find('/') != std::string::npos) best = std::max<size_t>(best, std::stoul(l.substr(1)));
  return best;
}

// The one error line: exactly one line starting "error: ", and it is the last one.
std::string error_line(const RunResult& r) {
  const std::vector<std::string> l = lines_of(r.err);
  int n = 0;
  for (const auto& x : l) n += x.rfind("error: ", 0) == 0;
  CHECK(n == 1);
  REQUIRE(!l.empty());
  CHECK(r.err.find("terminate called") == std::string::npos);
  CHECK(r.err.find("internal error") == std::string::npos);
  return l.back();
}

// Every prompt-run of `a` equals the one of `b` with the same key (timings aside).
void expect_same_runs(const ExperimentData& a, const ExperimentData& b) {
  std::map<RunKey, const RunRecord*> kb;
  for (const RunRecord& r : b.runs) kb[r.key] = &r;
  REQUIRE(a.runs.size() == b.runs.size());
  std::map<RunKey, int> seen;
  for (const RunRecord& r : a.runs) {
    INFO("point " << r.key.point << " prompt " << r.key.prompt << " method " << r.key.method << " repeat " << r.key.repeat);
    CHECK(++seen[r.key] == 1);
    auto it = kb.find(r.key);
    REQUIRE(it != kb.end());
    CHECK(r.tokens == it->second->tokens);
    CHECK(r.text == it->second->text);
    CHECK(r.lossless == it->second->lossless);
    REQUIRE(r.steps.size() == it->second->steps.size());
    for (size_t s = 0; s < r.steps.size(); ++s) {
      CHECK(r.steps[s].drafted == it->second->steps[s].drafted);
      CHECK(r.steps[s].accepted == it->second->steps[s].accepted);
      CHECK(r.steps[s].p == it->second->steps[s].p);
    }
  }
}

// Options that send `count` SIGINTs once stderr shows the progress line "[k/"; `sent` records it.
RunOptions sigint_at(int k, int count, bool& sent) {
  RunOptions opt;
  const std::string marker = "\n[" + std::to_string(k) + "/";
  opt.on_stderr = [marker, count, &sent](pid_t pid, const std::string& err) {
    if (sent || err.find(marker) == std::string::npos) return;
    for (int i = 0; i < count; ++i) ::kill(pid, SIGINT);
    sent = true;
  };
  return opt;
}

const ExperimentData& reference() {
  static const ExperimentData ref = [] {
    TempDir d;
    const RunResult r = run_cli(run_args(kTinyStories, d.path + "/ref.h5"));
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    return read_experiment(d.path + "/ref.h5");
  }();
  return ref;
}

// `--resume` on `h5` completes it, equal to the uninterrupted run.
void resume_and_compare(const std::string& h5) {
  const RunResult res = run_cli(run_args(kTinyStories, h5, {"--resume"}));
  INFO(describe(res));
  REQUIRE(res.exit_code == 0);
  CHECK(status_of(h5) == "complete");
  expect_same_runs(read_experiment(h5), reference());
}

}  // namespace

TEST_CASE("SIGINT stops after the current prompt-run, and --resume completes it", "[crash][sigint]") {
  TempDir d;
  const std::string h5 = d.path + "/int.h5";
  bool sent = false;
  const RunResult r = run_cli(run_args(kTinyStories, h5), sigint_at(3, 1, sent));
  INFO(describe(r));
  REQUIRE(sent);
  CHECK(r.exited);
  CHECK(r.exit_code == 130);
  CHECK(r.err.find("stopping after the current prompt-run") != std::string::npos);
  CHECK(lines_of(r.err).back().rfind("interrupted: ", 0) == 0);
  CHECK(r.err.find("error") == std::string::npos);
  const ExperimentData part = read_experiment(h5);
  CHECK(part.runs.size() >= 3);
  CHECK(part.runs.size() == reported_done(r.err));  // nothing finished after the report is lost
  CHECK(part.runs.size() < kTotal);
  CHECK(status_of(h5) == "interrupted");
  CHECK(!fs::exists(h5 + ".partial"));

  resume_and_compare(h5);
}

TEST_CASE("a second SIGINT ends the run at once, and the file keeps what was reported", "[crash][sigint]") {
  TempDir d;
  const std::string h5 = d.path + "/int2.h5";
  bool sent = false;
  const RunResult r = run_cli(run_args(kTinyStories, h5), sigint_at(2, 2, sent));
  INFO(describe(r));
  REQUIRE(sent);
  // Killed by the second SIGINT, or (if the first was handled after a finished run) exit 130.
  CHECK(((!r.exited && r.signal == SIGINT) || (r.exited && r.exit_code == 130)));
  const ExperimentData part = read_experiment(h5);
  CHECK(part.runs.size() >= reported_done(r.err));
  CHECK(part.runs.size() >= 2);
  CHECK(status_of(h5) != "complete");
  resume_and_compare(h5);
}

TEST_CASE("a SIGINT after the last prompt-run makes no report and exits 130", "[crash][sigint]") {
  // Until 2026-12-06 it printed "stopping", then wrote the report and exited 0.
  TempDir d;
  const std::string h5 = d.path + "/late.h5", rep = d.path + "/late_report";
  std::vector<std::string> args = {"run", kTinyStories};
  args.insert(args.end(), kSets.begin(), kSets.end());
  args.insert(args.end(), {"--output", h5, "--report-dir", rep});
  bool sent = false;
  const RunResult r = run_cli(args, sigint_at(static_cast<int>(kTotal), 1, sent));
  INFO(describe(r));
  REQUIRE(sent);
  // Handled by the run (the summary was being written) or, once the report had started, the
  // default action: never a finished report and exit 0.
  CHECK_FALSE((r.exited && r.exit_code == 0));
  if (r.exited) {
    CHECK(r.exit_code == 130);
    CHECK(lines_of(r.err).back().rfind("interrupted after the last prompt-run: " + h5 + " is complete", 0) == 0);
    CHECK_FALSE(fs::exists(rep + "/report.md"));
  }
  CHECK(status_of(h5) == "complete");
  expect_same_runs(read_experiment(h5), reference());
}

TEST_CASE("a SIGINT the parent ignores stays ignored for the whole run", "[crash][sigint]") {
  // A job started with `&` from a script ignores SIGINT; the run took the signal over once its
  // sweep began (ignored while the models loaded, a stop later) until 2026-12-06.
  TempDir d;
  const std::string h5 = d.path + "/ign.h5";
  bool sent = false;
  RunOptions opt = sigint_at(3, 2, sent);
  opt.in_child = [] { ::signal(SIGINT, SIG_IGN); };
  const RunResult r = run_cli(run_args(kTinyStories, h5), opt);
  INFO(describe(r));
  REQUIRE(sent);
  CHECK(r.exited);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("stopping") == std::string::npos);
  CHECK(status_of(h5) == "complete");
}

TEST_CASE("KV budget: too small for a prompt's AR run refused before any run, exhausted by a later run: clear "
          "error and earlier prompt-runs kept", "[crash][resource][kv]") {
  TempDir d;
  const std::string cfg = d.path + "/kv.yaml", h5 = d.path + "/kv.h5";
  // stories260K: 1280 KV bytes per token, 16-token blocks of 20480 bytes. The long prompt is 101
  // tokens: its AR run takes 101 + 8 - 1 positions, 7 blocks; a draft model's cache as many again.
  const auto write_cfg = [&](const std::string& drafter, int64_t budget, int64_t max_new = 8) {
    write_file(cfg,
               "name: kv_budget\n"
               "models:\n  target: {path: stories260K}\n"
               "prompts:\n  chat: off\n  inline:\n"
               "    - {id: short, text: \"Once upon a time\"}\n"
               "    - {id: long, text: \"Once upon a time, there was a little girl named Lily. She loved to play outside "
               "in the sun. One day, she saw a big red ball in the park. She wanted to play with it, so she ran to the "
               "ball and kicked it. The ball went up high into the sky and came down near a tree.\"}\n"
               "drafters:\n  - " + drafter + "\n"
               "sampling: {temperature: 0}\ngeneration: {max_new_tokens: " + std::to_string(max_new) + "}\nwarmup: 0\n"
               "kv: {budget_bytes: " + std::to_string(budget) + "}\n");
  };
  // 4 blocks hold the short prompt's run, not the long one's: refused before any prompt-run (it
  // failed after the short prompt's runs, and a larger budget could not --resume that file).
  write_cfg("name: prompt_lookup", 81920);
  const RunResult early = run_cli({"run", cfg, "--output", h5, "--no-report"});
  INFO(describe(early));
  CHECK(early.exit_code == 2);
  const std::string e0 = error_line(early);
  CHECK(e0.rfind("error: " + cfg + ":", 0) == 0);
  CHECK(e0.find("kv.budget_bytes: expected a budget that holds the longest prompt's AR run") != std::string::npos);
  CHECK(e0.find("found 81920 bytes") != std::string::npos);
  // The arithmetic reads as arithmetic (it read "at most the context's 512 - 1 = 108 positions").
  CHECK(e0.find("(101 prompt tokens + 8 new - 1 = 108 positions: 7 blocks of 20480 bytes)") != std::string::npos);
  CHECK(!fs::exists(h5));
  write_cfg("name: prompt_lookup", 81920, 100000);
  const RunResult capped = run_cli({"run", cfg, "--output", h5, "--no-report"});
  CHECK(error_line(capped).find("(101 prompt tokens + 100000 new - 1, capped at the context's 512 - 1, = 511 "
                                "positions: 32 blocks of 20480 bytes)") != std::string::npos);
  CHECK(!fs::exists(h5));
  // Runs stop at the context (512 positions): a budget that holds it takes any max_new_tokens.
  write_cfg("name: prompt_lookup", 32 * 20480, 100000);
  const RunResult whole = run_cli({"run", cfg, "--output", h5, "--no-report"});
  INFO(describe(whole));
  CHECK(whole.exit_code == 0);
  fs::remove(h5);

  // 8 blocks hold the long prompt's AR run, not its run beside a draft model's cache: the run
  // stops there, keeping the 3 prompt-runs before it.
  write_cfg("{name: draft_model, draft_model: stories260K}", 8 * 20480);
  const RunResult r = run_cli({"run", cfg, "--output", h5, "--no-report"});
  INFO(describe(r));
  CHECK(r.exited);
  CHECK(r.exit_code == 2);
  const std::string e = error_line(r);
  CHECK(e.rfind("error: " + cfg + ":", 0) == 0);  // with the key's line
  CHECK(e.find(": kv.budget_bytes: point #0, ") != std::string::npos);
  CHECK(e.find("prompt 'long', method 'draft_model'") != std::string::npos);
  CHECK(e.find("KV budget of 163840 bytes exhausted") != std::string::npos);
  CHECK(e.find("3 prompt-runs recorded before are in " + h5) != std::string::npos);
  CHECK(r.out.empty());
  const ExperimentData part = read_experiment(h5);
  REQUIRE(part.runs.size() == 3);
  CHECK(part.runs[0].prompt_id == "short");
  CHECK(part.runs[1].prompt_id == "short");
  CHECK(part.runs[2].prompt_id == "long");
  CHECK(status_of(h5) == "failed");
}

TEST_CASE("disk full (file-size limit): clear error, the file keeps its last commit, --resume completes",
          "[crash][resource][disk]") {
  TempDir d;
  const std::string h5 = d.path + "/full.h5";
  // The complete file's size, from an uninterrupted run; the limit lets about half of it through.
  const std::string ref_h5 = d.path + "/size.h5";
  REQUIRE(run_cli(run_args(kTinyStories, ref_h5)).exit_code == 0);
  const auto full = static_cast<rlim_t>(fs::file_size(ref_h5));
  RunOptions opt;
  opt.in_child = [full] {
    const rlimit lim{full / 2, full / 2};
    ::setrlimit(RLIMIT_FSIZE, &lim);
  };
  const RunResult r = run_cli(run_args(kTinyStories, h5), opt);
  INFO(describe(r) << "\nlimit " << full / 2 << " bytes");
  CHECK(r.exited);  // not killed by SIGXFSZ
  CHECK(r.exit_code == 2);
  const std::string e = error_line(r);
  // The file itself (new rows past its end) or its journal; the file stays as of the last commit.
  CHECK(e.rfind("error: " + h5 + ": output.path: cannot write " + h5, 0) == 0);
  CHECK(e.find(": File too large; the file keeps the ") != std::string::npos);
  CHECK(e.find("prompt-runs recorded before (continue with --resume)") != std::string::npos);
  CHECK(!fs::exists(h5 + ".partial"));
  CHECK(!fs::exists(h5 + ".journal"));
  const ExperimentData part = read_experiment(h5);
  CHECK(part.runs.size() >= 1);
  CHECK(part.runs.size() < kTotal);
  CHECK(part.runs.size() == reported_done(r.err));
  CHECK(status_of(h5) != "complete");
  CHECK(fs::file_size(h5) <= full / 2);

  resume_and_compare(h5);
}

// A limit below a new file's first commit: no file is left, and the error said "the file keeps
// the 0 prompt-runs recorded before (continue with --resume)".
TEST_CASE("a file-size limit below a new file's first commit: the error says nothing was recorded",
          "[crash][resource][disk]") {
  TempDir d;
  const std::string h5 = d.path + "/tiny.h5";
  RunOptions opt;
  opt.in_child = [] {
    const rlimit lim{20480, 20480};
    ::setrlimit(RLIMIT_FSIZE, &lim);
  };
  const RunResult r = run_cli(run_args(kTinyStories, h5), opt);
  INFO(describe(r));
  CHECK(r.exited);
  CHECK(r.exit_code == 2);
  const std::string e = error_line(r);
  CHECK(e.find(": File too large; no prompt-run was recorded yet (run the command again") != std::string::npos);
  CHECK(e.find("the file keeps") == std::string::npos);
  CHECK(!fs::exists(h5));
  CHECK(!fs::exists(h5 + ".partial"));
  CHECK(!fs::exists(h5 + ".partial.journal"));
}

// A limit above a new file's first commit and below its first prompt-run: a file is left at the
// output path, so the same command would be refused; the error said "run the command again".
TEST_CASE("a file-size limit after the file is made and before its first prompt-run: the error says --resume",
          "[crash][resource][disk]") {
  TempDir d;
  const std::string h5 = d.path + "/first.h5";
  bool found = false;
  // The created file's size depends on the config's text: find a limit between the two commits.
  for (rlim_t kb = 32; kb <= 256 && !found; kb += 8) {
    fs::remove(h5);
    RunOptions opt;
    opt.in_child = [kb] {
      const rlimit lim{kb * 1024, kb * 1024};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    };
    const RunResult r = run_cli(run_args(kTinyStories, h5), opt);
    if (!fs::exists(h5) || !r.exited || r.exit_code != 2) continue;
    INFO(describe(r));
    const std::string e = error_line(r);
    if (e.find("no prompt-run was recorded yet") == std::string::npos) continue;
    found = true;
    CHECK(e.find(": File too large; no prompt-run was recorded yet (continue with --resume") != std::string::npos);
    CHECK(e.find("run the command again") == std::string::npos);
    resume_and_compare(h5);
  }
  CHECK(found);
}

// Root writes through permission bits, so a root test process runs the CLI as `nobody` (uid and
// gid 65534) for the permission cases, in a temporary directory handed to that user: the
// read-only checks then bind the CLI as they bind any user.
namespace {
constexpr uid_t kNobody = 65534;

// Switches a forked child to `nobody`; false when the switch fails.
bool become_nobody() { return ::setgroups(0, nullptr) == 0 && ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0; }

// "" when `nobody` can run the CLI on configs/tiny_stories.yaml (the program, the config, the
// stories260K files in ../shared) and write to `dir`; else the first path it cannot use. A clone
// under a private home directory (/root is 0700) is out of its reach.
std::string nobody_cannot_use(const std::string& dir) {
  const std::string shared = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/";
  const std::vector<std::pair<std::string, int>> need = {
      {SPECLAB_CLI, X_OK}, {kTinyStories, R_OK}, {shared + "stories260K.bin", R_OK}, {shared + "tok512.bin", R_OK},
      {dir, W_OK | X_OK}};
  for (const auto& [path, mode] : need) {
    const pid_t pid = ::fork();
    if (pid == 0) _exit(become_nobody() && ::access(path.c_str(), mode) == 0 ? 0 : 1);
    int status = 1;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return path;
  }
  return "";
}

RunOptions unprivileged(RunOptions o = {}) {
  if (::geteuid() != 0) return o;
  o.in_child = [before = o.in_child] {
    if (before) before();
    if (!become_nobody()) _exit(125);
  };
  return o;
}
}  // namespace

TEST_CASE("a read-only output location: clear error, nothing written, an existing file untouched",
          "[crash][resource][readonly]") {
  TempDir d;
  if (::geteuid() == 0) {
    REQUIRE(::chown(d.path.c_str(), kNobody, kNobody) == 0);
    // Root itself: sysfs refuses new files even to root.
    const std::string h5 = "/sys/speclab_crash_test.h5";
    const RunResult r = run_cli(run_args(kTinyStories, h5));
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    const std::string e = error_line(r);
    CHECK(e.rfind("error: /sys: output.path: expected a writable directory for the output file, cannot create " + h5 +
                      ".partial: ",
                  0) == 0);
    CHECK(lines_of(r.err).size() == 1);  // before any model was loaded or prompt-run made
    CHECK(!fs::exists(h5));
    const std::string unreachable = nobody_cannot_use(d.path);
    if (!unreachable.empty()) {
      WARN("running as root, and user nobody cannot use " << unreachable
                                                          << ": the read-only directory and file cases are skipped");
      return;
    }
  }
  const std::string ro = d.path + "/ro";
  fs::create_directories(ro);
  if (::geteuid() == 0) REQUIRE(::chown(ro.c_str(), kNobody, kNobody) == 0);
  // A partial experiment, then the directory made read-only.
  const std::string h5 = ro + "/part.h5";
  bool sent = false;
  {
    const RunResult r = run_cli(run_args(kTinyStories, h5), unprivileged(sigint_at(2, 1, sent)));
    INFO(describe(r));
    REQUIRE(r.exit_code == 130);
  }
  const std::string before = read_file(h5);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  {
    const RunResult r = run_cli(run_args(kTinyStories, ro + "/new.h5"), unprivileged());
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK(error_line(r).rfind("error: " + ro + ": output.path: expected a writable directory", 0) == 0);
    CHECK(!fs::exists(ro + "/new.h5"));
  }
  {
    const RunResult r = run_cli(run_args(kTinyStories, h5, {"--resume"}), unprivileged());
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK(error_line(r).find(ro + ": output.path:") != std::string::npos);
    CHECK(read_file(h5) == before);
  }
  fs::permissions(ro, fs::perms::owner_all);
  fs::permissions(h5, fs::perms::owner_read);  // a read-only file in a writable directory
  {
    const RunResult r = run_cli(run_args(kTinyStories, h5, {"--resume"}), unprivileged());
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK(error_line(r).rfind("error: " + h5 + ": output.path: expected a writable output file", 0) == 0);
    CHECK(read_file(h5) == before);
  }
}
