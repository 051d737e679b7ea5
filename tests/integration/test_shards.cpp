// `speclab run --shard i/n` + `speclab merge` on configs/tiny_stories.yaml (stories260K): the
// merge of 4 shards equals the unsharded run (same prompt-runs in the same order, identical
// tokens, steps and per-position probabilities, identical alpha and tau in /summary), and each
// bad input (shards of different configs, a missing or duplicated shard, an unfinished shard,
// --shard 5/4, resuming another shard's file) gives one error line, exit 2 and no output file.
#include <catch2/catch.hpp>

#include <H5Cpp.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/io/hdf5_recorder.h"
#include "framework/io/shard.h"
#include "framework/io/path_lock.h"
#include "tests/bad_inputs/cli_process.h"

using namespace speclab;
using speclab::testing::check_bad_input;
using speclab::testing::describe;
using speclab::testing::run_cli;
namespace fs = std::filesystem;

namespace {

const std::string kConfig = std::string(SPECLAB_SOURCE_DIR) + "/configs/tiny_stories.yaml";

// A temporary directory with the unsharded run (full.h5) and shards s0..s3.h5 of tiny_stories.
struct ShardRuns {
  std::string dir;

  ShardRuns() {
    std::string tmpl = (fs::temp_directory_path() / "speclab_shards_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    run({"--output", path("full.h5")});
    for (int i = 0; i < 4; ++i) run({"--shard", std::to_string(i) + "/4", "--output", shard(i)});
  }
  ~ShardRuns() { fs::remove_all(dir); }

  std::string path(const std::string& name) const { return dir + "/" + name; }
  std::string shard(int i) const { return path("s" + std::to_string(i) + ".h5"); }

  static void run(std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", kConfig, "--no-report"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
  }
};

std::vector<double> column(const std::string& file, const std::string& dataset) {
  H5::H5File f(file, H5F_ACC_RDONLY);
  H5::DataSet ds = f.openDataSet(dataset);
  hsize_t n[1];
  ds.getSpace().getSimpleExtentDims(n);
  std::vector<double> v(n[0]);
  if (n[0]) ds.read(v.data(), H5::PredType::NATIVE_DOUBLE);
  return v;
}

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

std::vector<float> nan_as(std::vector<float> v) {
  for (float& x : v)
    if (std::isnan(x)) x = -1.0f;
  return v;
}

}  // namespace

TEST_CASE("speclab merge of 4 shards equals the unsharded run of tiny_stories", "[shard][cli]") {
  const ShardRuns s;
  const auto m = run_cli({"merge", s.path("merged.h5"), s.shard(2), s.shard(0), s.shard(3), s.shard(1)});
  INFO(describe(m));
  REQUIRE(m.exit_code == 0);
  CHECK(m.out.find("merged 4 shards (18 prompt-runs)") != std::string::npos);
  {  // merged again over it: the file keeps its mode (the umask's 0644 until 2026-12-07)
    const fs::perms mode = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read;
    fs::permissions(s.path("merged.h5"), mode);
    const auto again = run_cli({"merge", s.path("merged.h5"), s.shard(2), s.shard(0), s.shard(3), s.shard(1),
                                "--overwrite"});
    INFO(describe(again));
    REQUIRE(again.exit_code == 0);
    CHECK(fs::status(s.path("merged.h5")).permissions() == mode);
  }

  const ExperimentData full = read_experiment(s.path("full.h5"));
  const ExperimentData merged = read_experiment(s.path("merged.h5"));
  REQUIRE(full.runs.size() == 18);
  REQUIRE(merged.runs.size() == full.runs.size());
  CHECK(merged.status == "complete");
  CHECK(merged.meta.merged_shards == 4);
  CHECK(merged.meta.shard_count == 1);
  CHECK(merged.meta.config_hash == full.meta.config_hash);
  CHECK(merged.meta.config_hash == shard_config_hash(full.resolved_config_yaml));
  // Its resolved config names the merged file, not shard 0's (until 2026-12-06).
  CHECK(merged.resolved_config_yaml.find("path: " + s.path("merged.h5") + "\n") != std::string::npos);
  CHECK(merged.resolved_config_yaml.find("/s0.h5") == std::string::npos);
  // So does the config as written (each shard's names its own --output since 2026-12-06).
  CHECK(merged.config_yaml.find(s.path("merged.h5")) != std::string::npos);
  CHECK(merged.config_yaml.find("/s0.h5") == std::string::npos);
  CHECK(merged.meta.plan == full.meta.plan);
  CHECK(full.meta.plan.size() == 6);  // 2 points x 3 prompts x 1 repeat
  for (size_t i = 0; i < full.runs.size(); ++i) {
    const RunRecord &a = full.runs[i], &b = merged.runs[i];
    INFO("run " << i << ": " << a.key.method << " prompt " << a.prompt_id);
    CHECK(b.run_id == static_cast<int64_t>(i));
    CHECK(b.key == a.key);
    CHECK(b.tokens == a.tokens);
    CHECK(b.text == a.text);
    CHECK(b.lossless == a.lossless);
    CHECK(b.target_forwards == a.target_forwards);
    REQUIRE(b.steps.size() == a.steps.size());
    for (size_t k = 0; k < a.steps.size(); ++k) {
      CHECK(b.steps[k].drafted == a.steps[k].drafted);
      CHECK(b.steps[k].accepted == a.steps[k].accepted);
      CHECK(b.steps[k].bonus == a.steps[k].bonus);
      CHECK(b.steps[k].p == a.steps[k].p);
      CHECK(b.steps[k].q == a.steps[k].q);
      CHECK(nan_as(b.steps[k].accept_prob) == nan_as(a.steps[k].accept_prob));
    }
  }
  // The recorded summaries (written by run and by merge), column by column.
  for (const char* col : {"alpha", "alpha_lo", "alpha_hi", "tau", "drafted", "accepted", "examined", "n_runs",
                          "lossless", "mean_accept_prob"}) {
    INFO("summary column " << col);
    const auto a = column(s.path("full.h5"), std::string("/summary/overall/") + col);
    CHECK(a.size() == 4);  // 2 points x 2 drafters
    CHECK(same_values(a, column(s.path("merged.h5"), std::string("/summary/overall/") + col)));
  }
  // Each shard holds its own groups only: plan row k belongs to shard k % 4.
  for (int i = 0; i < 4; ++i) {
    const ExperimentData d = read_experiment(s.shard(i));
    CHECK(d.meta.shard_index == i);
    CHECK(d.meta.shard_count == 4);
    CHECK(d.meta.config_hash == full.meta.config_hash);
    CHECK(d.runs.size() == (i < 2 ? 6u : 3u));  // 6 groups of 3 methods: rows 0,4 | 1,5 | 2 | 3
    for (const RunRecord& r : d.runs) {
      size_t row = 0;
      while (!(full.meta.plan[row] == PlanGroup{r.key.point, r.key.prompt, r.key.repeat})) ++row;
      CHECK(row % 4 == static_cast<size_t>(i));
    }
  }
}

TEST_CASE("speclab merge and run --shard: bad inputs give one line, exit 2, no file", "[shard][cli][bad-input]") {
  static const ShardRuns s;  // once for all sections (each section re-enters the test case)
  const std::string out = s.path("out.h5");
  for (const char* scratch : {"other.h5", "copy.h5", "running.h5", "out.h5", "out.h5.journal"})
    fs::remove(s.path(scratch));
  auto nothing_written = [&] {
    CHECK(!fs::exists(out));
    CHECK(!fs::exists(out + ".merging"));
  };
  SECTION("shards of different configs") {
    ShardRuns::run({"--set", "generation.max_new_tokens=8", "--shard", "2/4", "--output", s.path("other.h5")});
    check_bad_input(run_cli({"merge", out, s.shard(0), s.shard(1), s.path("other.h5"), s.shard(3)}),
                    {s.path("other.h5"), "come from different configs", s.shard(0),
                     "generation.max_new_tokens: 16 vs 8"});
    nothing_written();
  }
  SECTION("shards whose prompt file changed a category between them") {
    // The prompt file's contents are not in config_hash: merge compared ids and texts only, and
    // wrote /prompts with one category and /runs with the other (found by a probe, 2026-12-06).
    const std::string yaml = s.path("cat.yaml"), prompts = s.path("cat.jsonl");
    auto write = [](const std::string& path, const std::string& text) {
      std::ofstream(path) << text;
    };
    write(yaml,
          "name: cat\nmodels: {target: {path: stories260K}}\n"
          "prompts: {chat: off, files: [cat.jsonl], id_field: id, category_field: category}\n"
          "drafters: [{name: prompt_lookup}]\nsampling: {temperature: 0}\ngeneration: {max_new_tokens: 4}\n"
          "output: {path: cat.h5}\n");
    const std::string a = "{\"id\": \"a\", \"category\": \"x\", \"prompt\": \"Once upon a time\"}\n";
    write(prompts, a + "{\"id\": \"b\", \"category\": \"y\", \"prompt\": \"The little bird saw\"}\n");
    for (int i = 0; i < 2; ++i) {
      if (i == 1) write(prompts, a + "{\"id\": \"b\", \"category\": \"z\", \"prompt\": \"The little bird saw\"}\n");
      const auto r = run_cli({"run", yaml, "--shard", std::to_string(i) + "/2", "--output",
                              s.path("cat" + std::to_string(i) + ".h5"), "--no-report", "--threads", "1"});
      INFO(describe(r));
      REQUIRE(r.exit_code == 0);
    }
    check_bad_input(run_cli({"merge", out, s.path("cat0.h5"), s.path("cat1.h5")}),
                    {s.path("cat1.h5") + ": plan: shards", "describe different experiments (prompt 'b': category 'y' vs 'z')"});
    nothing_written();
  }
  SECTION("a journal a killed writer left beside the output goes with the file it belonged to") {
    // A writer killed while copying its journal into out.h5 leaves out.h5.journal; merge replaced
    // out.h5 and kept the journal, which the next reader applied to the merged file, wrecking it.
    std::ofstream(out + ".journal") << "a journal of an earlier out.h5";
    const auto r = run_cli({"merge", out, s.shard(0), s.shard(1), s.shard(2), s.shard(3)});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK(fs::exists(out));
    CHECK_FALSE(fs::exists(out + ".journal"));
    // The report says what the file is: a merge, and a shard (both read as whole experiments).
    auto report = [&](const std::string& file, const std::string& dir) {
      const auto rep = run_cli({"report", file, "--out", s.path(dir)});
      INFO(describe(rep));
      REQUIRE(rep.exit_code == 0);
      std::ifstream in(s.path(dir) + "/report.md");
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    const std::string merged = report(out, "rep_merged"), shard = report(s.shard(1), "rep_shard");
    CHECK(merged.find("| merged from | 4 shards by `speclab merge`") != std::string::npos);
    CHECK(merged.find("/summary (recomputed by speclab merge") != std::string::npos);
    CHECK(merged.find("| shard |") == std::string::npos);
    CHECK(shard.find("| shard | 1 of 4 (0-based)") != std::string::npos);
    CHECK(shard.find("| merged from |") == std::string::npos);
  }
  SECTION("a missing shard") {
    check_bad_input(run_cli({"merge", out, s.shard(0), s.shard(1), s.shard(3)}),
                    {"expected all 4 shards, missing 1: 2/4", s.shard(3) + " = 3/4"});
    nothing_written();
  }
  SECTION("a duplicated shard") {
    fs::copy_file(s.shard(1), s.path("copy.h5"));
    check_bad_input(run_cli({"merge", out, s.shard(0), s.shard(1), s.shard(2), s.shard(3), s.path("copy.h5")}),
                    {"shard 1/4 given twice: " + s.shard(1) + " and " + s.path("copy.h5")});
    nothing_written();
  }
  SECTION("a shard and the unsharded file") {
    check_bad_input(run_cli({"merge", out, s.shard(0), s.path("full.h5")}),
                    {s.path("full.h5"), "split the experiment into different numbers of shards"});
    nothing_written();
  }
  SECTION("an unfinished shard") {
    // A run stopped before its first prompt-run would leave no file; an interrupted file is made
    // by marking a copy of shard 2 as running, as a killed writer leaves it.
    fs::copy_file(s.shard(2), s.path("running.h5"));
    {
      H5::H5File f(s.path("running.h5"), H5F_ACC_RDWR);
      H5::Group root = f.openGroup("/");
      root.removeAttr("status");
      H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
      const char* v = "running";
      root.createAttribute("status", t, H5::DataSpace(H5S_SCALAR)).write(t, &v);
    }
    check_bad_input(run_cli({"merge", out, s.shard(0), s.shard(1), s.path("running.h5"), s.shard(3)}),
                    {s.path("running.h5"), "status 'running'", "--shard 2/4 --resume"});
    nothing_written();
  }
  SECTION("submit --overwrite while a task of the earlier submission still writes its shard") {
    // It removed the shard files under the running tasks (until 2026-12-06).
    const std::string shards_dir = s.path("sub_shards"), held_shard = shards_dir + "/shard_0.h5";
    fs::create_directories(shards_dir);
    fs::copy_file(s.shard(0), held_shard, fs::copy_options::overwrite_existing);
    const std::vector<std::string> args = {"submit", kConfig, "--slurm", "--shards", "4", "--output",
                                           s.path("sub.h5"), "--overwrite", "--dry-run"};
    {
      Hdf5Recorder writer = Hdf5Recorder::open_for_append(held_shard);
      check_bad_input(run_cli(args), {shards_dir, "--overwrite", "found one still writing shard_0.h5"});
    }
    const auto r = run_cli(args);  // the writer gone: a dry run prints
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK(fs::exists(held_shard));
    fs::remove_all(shards_dir);
  }
  SECTION("submit with more shards than the cluster's MaxArraySize (a stand-in scontrol)") {
    // Checked against a real cluster in test_slurm; here a scontrol on PATH that answers
    // MaxArraySize = 3, so that the parse and the refusal run where no cluster does.
    const std::string bin = s.path("fake_bin");
    fs::create_directories(bin);
    {
      std::ofstream f(bin + "/scontrol");
      f << "#!/bin/sh\nprintf 'Configuration data as of today\\nMaxArraySize            = 3\\nMaxJobCount = 10000\\n'\n";
    }
    fs::permissions(bin + "/scontrol", fs::perms::owner_all);
    speclab::testing::RunOptions with_fake;
    const std::string path = bin + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
    with_fake.in_child = [path] { ::setenv("PATH", path.c_str(), 1); };
    const auto submit = [&](const char* shards) {
      return run_cli({"submit", kConfig, "--slurm", "--shards", shards, "--output", s.path("arr.h5"), "--dry-run"},
                     with_fake);
    };
    check_bad_input(submit("4"), {"--shards", "expected at most 3 shards, this cluster's MaxArraySize"});
    CHECK_FALSE(fs::exists(s.path("arr_shards")));
    const auto at = submit("3");
    INFO(describe(at));
    CHECK(at.exit_code == 0);
    fs::remove_all(s.path("arr_shards"));
    fs::remove_all(bin);
  }
  SECTION("another merge into the same file") {
    // Merges at once shared OUT.merging: all could fail leaving nothing, or two report success.
    const PathLock held = PathLock::acquire(out, "merge", "OUT.h5");
    check_bad_input(run_cli({"merge", out, s.shard(0), s.shard(1), s.shard(2), s.shard(3)}),
                    {out, "OUT.h5", "found another speclab merge holding " + out + ".lock"});
    nothing_written();
  }
  SECTION("--shard out of range") {
    for (const char* bad : {"5/4", "4/4", "-1/4", "1/0", "1", "a/b"})
      check_bad_input(run_cli({"run", kConfig, "--shard", bad, "--output", out, "--no-report"}),
                      {"command line: --shard: expected i/n with 0 <= i < n", std::string("'") + bad + "'"});
    nothing_written();
  }
  SECTION("resuming another shard's file") {
    const auto r = run_cli({"run", kConfig, "--shard", "1/4", "--output", s.shard(0), "--resume", "--no-report"});
    check_bad_input(r, {s.shard(0) + ": --shard: expected shard 1/4, found a file of shard 0/4"});
  }
  SECTION("the shards of a finished run resume as they are") {
    const auto r = run_cli({"run", kConfig, "--shard", "3/4", "--output", s.shard(3), "--resume", "--no-report"});
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("0 prompt-runs recorded now, 3 resumed") != std::string::npos);
  }
}

TEST_CASE("a shard with no work finishes, and the merge with it equals the unsharded run", "[shard][cli]") {
  // One prompt and one drafter: shard 0/3 holds its AR and drafter runs, shards 1/3 and 2/3
  // nothing (a Slurm array larger than the work). They must finish as complete, empty files.
  std::string tmpl = (fs::temp_directory_path() / "speclab_empty_shard_XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  const std::string dir = tmpl;
  const std::vector<std::string> one = {"--set", "prompts.limit=1", "--set", "drafters=[{name: prompt_lookup}]", "--set", "sweep.drafter.gamma=[2]",
                                        "--no-report"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", kConfig};
    args.insert(args.end(), one.begin(), one.end());
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    return r;
  };
  run({"--output", dir + "/full.h5"});
  for (int i = 0; i < 3; ++i) {
    const auto r = run({"--shard", std::to_string(i) + "/3", "--output", dir + "/s" + std::to_string(i) + ".h5"});
    if (i > 0) CHECK(r.out.find("0 prompt-runs") != std::string::npos);
  }
  const auto m = run_cli({"merge", dir + "/merged.h5", dir + "/s0.h5", dir + "/s1.h5", dir + "/s2.h5"});
  INFO(describe(m));
  REQUIRE(m.exit_code == 0);
  CHECK(column(dir + "/merged.h5", "/tokens/token") == column(dir + "/full.h5", "/tokens/token"));
  CHECK(column(dir + "/merged.h5", "/summary/overall/tau") == column(dir + "/full.h5", "/summary/overall/tau"));
  CHECK(column(dir + "/s1.h5", "/summary/overall/tau").empty());
  fs::remove_all(dir);
}

TEST_CASE("shard_config_hash: settings count, where each machine keeps its files does not", "[shard]") {
  const std::string base =
      "a: 1\noutput: {path: x.h5}\nruntime: {threads: 2, working_directory: /a, chat_template: on, "
      "target_model: {path: /m/a.bin}}\n";
  const std::string moved =
      "a: 1\noutput: {path: y.h5}\nruntime: {threads: 2, working_directory: /b, chat_template: on, "
      "target_model: {path: /n/a.bin}}\n";
  CHECK(shard_config_hash(base) == shard_config_hash(moved));
  CHECK(shard_config_hash(base).size() == 16);
  CHECK(shard_config_hash(base) != shard_config_hash("a: 2\noutput: {path: x.h5}\nruntime: {threads: 2}\n"));
  CHECK(shard_config_hash("a: 1\nruntime: {threads: 2}\n") != shard_config_hash("a: 1\nruntime: {threads: 3}\n"));
}

TEST_CASE("parse_shard: i/n, 0-based, anything else names --shard", "[shard]") {
  const ShardSpec s = parse_shard("3/4");
  CHECK(s.index == 3);
  CHECK(s.count == 4);
  CHECK(s.owns(3));
  CHECK(s.owns(7));
  CHECK(!s.owns(4));
  CHECK(parse_shard("0/1").owns(5));
  for (const char* bad : {"4/4", "5/4", "1/0", "-1/4", "1/-4", "", "/", "1/", "/4", "1/4/2", " 1/4", "1/100001"}) {
    INFO("'" << bad << "'");
    try {
      parse_shard(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.field() == "--shard");
      CHECK(e.kind() == ErrorKind::kConfig);
    }
  }
}
