// `speclab run` / `speclab report` end to end on stories260K: the printed summary table against
// the HDF5 file (read with the HDF5 C++ API), the summary against a recomputation from the raw
// step table, greedy losslessness, the report's plots; SIGKILL after the first prompt-run and
// --resume reproducing an uninterrupted run; --overwrite replacing a file.
#include <catch2/catch.hpp>

#include <H5Cpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "experiments/app/experiment_runner.h"
#include "framework/io/experiment_summary.h"
#include "framework/io/hdf5_recorder.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

std::string temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "speclab_exp_XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs the CLI with `args` (already shell-quoted where needed); stdout and stderr captured apart.
Result cli(const std::string& args, const std::string& dir) {
  const std::string out = dir + "/.stdout", err = dir + "/.stderr";
  const std::string cmd = std::string(SPECLAB_CLI) + " " + args + " > '" + out + "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

std::string config_yaml(const std::string& output, const std::string& generation, const std::string& extra = {}) {
  return "name: tiny\n"
         "models:\n"
         "  target: {path: stories260K}\n"
         "drafters:\n"
         "  - name: prompt_lookup\n"
         "  - name: layer_skip\n"
         "sampling: {temperature: 0}\n"
         "generation: " + generation + "\n"
         "prompts:\n"
         "  inline:\n"
         "    - {id: a, category: story, text: \"Once upon a time\"}\n"
         "    - {id: b, category: story, text: \"The little dog saw a big ball\"}\n"
         "    - {id: c, text: \"Lily and Tom went to the park\"}\n"  // no category: its own by-category rows
         "sweep:\n"
         "  drafter.gamma: [1, 2]\n"
         "warmup: 0\n" + extra +
         "output: {path: " + output + "}\n";
}

// ---- HDF5 C++ API readers (independent of the recorder's own reader) ----

std::vector<int64_t> ints(const H5::H5File& f, const std::string& path) {
  H5::DataSet ds = f.openDataSet(path);
  hsize_t n[1];
  ds.getSpace().getSimpleExtentDims(n);
  std::vector<int64_t> v(n[0]);
  if (n[0]) ds.read(v.data(), H5::PredType::NATIVE_INT64);
  return v;
}

std::vector<double> reals(const H5::H5File& f, const std::string& path) {
  H5::DataSet ds = f.openDataSet(path);
  hsize_t n[1];
  ds.getSpace().getSimpleExtentDims(n);
  std::vector<double> v(n[0]);
  if (n[0]) ds.read(v.data(), H5::PredType::NATIVE_DOUBLE);
  return v;
}

// Runs a Python script of the test on an experiment file: it must exit 0 (its output is shown
// when it does not).
void check_python_script(const std::string& script, const std::string& h5) {
  const std::string out = script + ".out";
  const std::string py = "/usr/bin/python3 '" + script + "' '" + h5 + "' > '" + out + "' 2>&1";
  const int py_status = std::system(py.c_str());
  INFO(read_file(out));
  CHECK((WIFEXITED(py_status) && WEXITSTATUS(py_status) == 0));
}

std::vector<std::string> strs(const H5::H5File& f, const std::string& path) {
  H5::DataSet ds = f.openDataSet(path);
  hsize_t n[1];
  ds.getSpace().getSimpleExtentDims(n);
  std::vector<char*> p(n[0], nullptr);
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  if (n[0]) ds.read(p.data(), t);
  std::vector<std::string> v;
  for (char* s : p) v.emplace_back(s ? s : "");
  if (n[0]) H5::DataSet::vlenReclaim(p.data(), t, ds.getSpace());
  return v;
}

std::string str_attr(const H5::H5File& f, const std::string& name) {
  H5::Attribute a = f.openGroup("/").openAttribute(name);
  std::string v;
  a.read(a.getStrType(), v);
  return v;
}

int64_t int_attr(const H5::Group& g, const std::string& name) {
  int64_t v = 0;
  g.openAttribute(name).read(H5::PredType::NATIVE_INT64, &v);
  return v;
}

struct PrintedRow {
  int64_t point;
  std::string drafter;
  int64_t gamma;
  double alpha, lo, hi, tau;
  std::string lossless;
};

// Rows of the first summary table `speclab run` printed.
std::vector<PrintedRow> parse_summary(const std::string& out) {
  std::vector<PrintedRow> rows;
  bool in_table = false;
  const std::regex row_re(R"(^#(\d+)\s.*?\s{2,}(\S+)\s{2,}(\d+)\s{2,}([0-9.]+) \[([0-9.]+), ([0-9.]+)\]\s{2,}([0-9.]+)\s{2,}.*\s{2,}(yes|NO|n/a)$)");
  for (const std::string& l : lines(out)) {
    if (!in_table) {
      in_table = l.rfind("point", 0) == 0 && l.find("alpha [95% CI]") != std::string::npos;
      continue;
    }
    if (l.empty()) break;
    std::smatch m;
    REQUIRE(std::regex_match(l, m, row_re));
    rows.push_back({std::stoll(m[1]), m[2], std::stoll(m[3]), std::stod(m[4]), std::stod(m[5]), std::stod(m[6]),
                    std::stod(m[7]), m[8]});
  }
  return rows;
}

bool is_png(const std::string& path) {
  const std::string s = read_file(path);
  return s.size() > 1000 && s.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

const std::vector<std::string> kPlots = {"acceptance_by_position.png", "speedup_vs_gamma.png", "time_breakdown.png",
                                         "accepted_length_hist.png", "acceptance_by_category.png"};

}  // namespace

TEST_CASE("speclab run: a tiny stories260K experiment, its HDF5 file, summary and report", "[experiment][cli]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  write_file(dir + "/exp.yaml", config_yaml(h5, "{max_new_tokens: 16}"));
  const Result r = cli("run '" + dir + "/exp.yaml' --report-dir '" + dir + "/rep'", dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);

  // Progress: one plain line per prompt-run when stderr is not a terminal.
  int progress = 0;
  for (const auto& l : lines(r.err)) progress += l.rfind("[", 0) == 0 && l.find("/18] point #") != std::string::npos;
  CHECK(progress == 18);

  H5::H5File f(h5, H5F_ACC_RDONLY);
  const H5::Group root = f.openGroup("/");
  CHECK(int_attr(root, "schema_version") == 1);
  CHECK(str_attr(f, "status") == "complete");
  const std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
  CHECK(std::regex_match(str_attr(f, "start_time"), iso));
  CHECK(std::regex_match(str_attr(f, "end_time"), iso));
  // The revision the binary was built from (scripts/build_revision.cmake), not the tree's now.
  const std::string rev = str_attr(f, "git_revision");
  CHECK((rev == "unknown" || std::regex_match(rev, std::regex("[0-9a-f]{40}(\\+dirty\\.[0-9a-f]{12})?"))));
  {
    std::ifstream in(std::string(SPECLAB_BINARY_DIR) + "/generated/speclab_build_revision.h");
    const std::string header((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_THAT(header, Catch::Matchers::Contains("#define SPECLAB_BUILD_REVISION \"" + rev + "\""));
  }
  CHECK(!str_attr(f, "torch_version").empty());
  CHECK(!str_attr(f, "cpu_model").empty());
  CHECK(int_attr(root, "cpu_cores") > 0);
  CHECK(int_attr(root, "memory_bytes") > 0);
  {
    H5::DataSet cfg = f.openDataSet("/config_yaml");
    std::string yaml;
    cfg.read(yaml, cfg.getStrType());
    CHECK(yaml.find("stories260K") != std::string::npos);
  }

  // /runs: 2 points x 3 prompts x 3 methods, each key once, all committed.
  const auto run_id = ints(f, "/runs/run_id"), point = ints(f, "/runs/point"), prompt = ints(f, "/runs/prompt");
  const auto repeat = ints(f, "/runs/repeat"), lossless = ints(f, "/runs/lossless"), ngen = ints(f, "/runs/n_generated");
  const auto method = strs(f, "/runs/method"), text = strs(f, "/runs/text");
  REQUIRE(run_id.size() == 18);
  CHECK(int_attr(f.openGroup("/runs"), "complete") == 18);
  std::set<std::tuple<int64_t, int64_t, std::string, int64_t>> keys;
  std::map<std::pair<int64_t, int64_t>, std::string> ar_text;
  for (size_t i = 0; i < run_id.size(); ++i) {
    CHECK(run_id[i] == static_cast<int64_t>(i));
    keys.insert({point[i], prompt[i], method[i], repeat[i]});
    if (method[i] == "ar") ar_text[{point[i], prompt[i]}] = text[i];
    CHECK(ngen[i] > 0);
    CHECK(ngen[i] <= 16);
  }
  CHECK(keys.size() == 18);
  // Greedy losslessness: every speculative run flagged identical to AR, and the texts agree.
  for (size_t i = 0; i < run_id.size(); ++i) {
    if (method[i] == "ar") {
      CHECK(lossless[i] == -1);
    } else {
      CHECK(lossless[i] == 1);
      CHECK(text[i] == ar_text.at({point[i], prompt[i]}));
    }
  }
  // Tokens: one row per generated token.
  int64_t total_tokens = 0;
  for (int64_t n : ngen) total_tokens += n;
  CHECK(static_cast<int64_t>(ints(f, "/tokens/token").size()) == total_tokens);

  // Recompute alpha and tau per (point, method) from /steps and compare with /summary.
  const auto st_run = ints(f, "/steps/run_id"), drafted = ints(f, "/steps/drafted"), accepted = ints(f, "/steps/accepted");
  std::map<std::pair<int64_t, std::string>, std::array<int64_t, 4>> acc;  // accepted, examined, emitted, steps
  int64_t total_drafted = 0;
  for (size_t s = 0; s < st_run.size(); ++s) {
    const size_t i = static_cast<size_t>(st_run[s]);
    REQUIRE(i < run_id.size());
    REQUIRE(accepted[s] <= drafted[s]);
    auto& a = acc[{point[i], method[i]}];
    a[0] += accepted[s];
    a[1] += std::min(accepted[s] + 1, drafted[s]);
    a[2] += accepted[s] + 1;
    a[3] += 1;
    total_drafted += drafted[s];
  }
  CHECK(static_cast<int64_t>(ints(f, "/positions/pos").size()) == total_drafted);
  const auto s_point = ints(f, "/summary/overall/point"), s_gamma = ints(f, "/summary/overall/gamma");
  const auto s_method = strs(f, "/summary/overall/method");
  const auto s_alpha = reals(f, "/summary/overall/alpha"), s_lo = reals(f, "/summary/overall/alpha_lo");
  const auto s_hi = reals(f, "/summary/overall/alpha_hi"), s_tau = reals(f, "/summary/overall/tau");
  const auto s_lossless = ints(f, "/summary/overall/lossless");
  REQUIRE(s_point.size() == 4);
  for (size_t k = 0; k < s_point.size(); ++k) {
    const auto& a = acc.at({s_point[k], s_method[k]});
    INFO(s_method[k] << " at point " << s_point[k]);
    if (a[1] > 0) CHECK(s_alpha[k] == Approx(static_cast<double>(a[0]) / a[1]).epsilon(1e-12));
    CHECK(s_tau[k] == Approx(static_cast<double>(a[2]) / a[3]).epsilon(1e-12));
    CHECK(s_gamma[k] == s_point[k] + 1);  // the sweep is gamma [1, 2]
    CHECK(s_lossless[k] == 1);
  }

  // The printed table agrees with /summary (to its printed precision).
  const std::vector<PrintedRow> printed = parse_summary(r.out);
  REQUIRE(printed.size() == s_point.size());
  for (size_t k = 0; k < printed.size(); ++k) {
    const PrintedRow& p = printed[k];
    INFO(p.drafter << " at point " << p.point);
    CHECK(p.point == s_point[k]);
    CHECK(p.drafter == s_method[k]);
    CHECK(p.gamma == s_gamma[k]);
    if (!std::isnan(s_alpha[k])) {
      CHECK(std::abs(p.alpha - s_alpha[k]) <= 5.0001e-4);
      CHECK(std::abs(p.lo - s_lo[k]) <= 5.0001e-4);
      CHECK(std::abs(p.hi - s_hi[k]) <= 5.0001e-4);
    }
    CHECK(std::abs(p.tau - s_tau[k]) <= 5.0001e-4);
    CHECK(p.lossless == "yes");
  }

  // The Python reader's own summary (analysis/speclab_h5.py, an independent implementation of
  // the same definitions) agrees with the C++ one in the file.
  write_file(dir + "/cross.py",
             "import math, sys\n"
             "sys.path.insert(0, '" + std::string(SPECLAB_SOURCE_DIR) + "/analysis')\n"
             "from speclab_h5 import Experiment, compute_summary\n"
             "e = Experiment(sys.argv[1]); c = compute_summary(e)\n"
             "for tab in ('overall', 'by_category'):\n"
             "    f, p = e.summary[tab], c[tab]\n"
             "    assert len(f['point']) == len(p['point']) > 0, tab\n"
             "    if tab == 'by_category':  # one row per (point, drafter, category), prompts without one included\n"
             "        assert sorted(set(map(str, p['category']))) == ['', 'story'], p['category']\n"
             "        assert len(p['point']) == 2 * len(c['overall']['point']), len(p['point'])\n"
             "    for col in p:\n"
             "        for a, b in zip(f[col], p[col]):\n"
             "            if isinstance(a, str) or isinstance(b, str):\n"
             "                assert str(a) == str(b), (tab, col, a, b)\n"
             "            else:\n"
             "                a, b = float(a), float(b)\n"
             "                assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(1, abs(a)), (tab, col, a, b)\n"
             "def pos_rows(t):  # in order: the rows over all prompts first, then by category\n"
             "    return list(zip(*(list(map(str, t[k])) for k in ('point', 'category', 'method', 'pos', 'trials', 'successes'))))\n"
             "assert pos_rows(e.summary['positions']) == pos_rows(c['positions']) != [], 'positions differ'\n"
             "assert 'story' in [r[1] for r in pos_rows(c['positions'])], 'no by-category position rows'\n"
             "print('summaries agree')\n"
             "# The efficiency decomposition: tau and speedup as in the summary, its two factors\n"
             "# multiply to tau/cost over the prediction, and tau/cost tracks the measured speedup.\n"
             "from speclab_h5 import efficiency_decomposition\n"
             "d = efficiency_decomposition(e)\n"
             "assert len(d) == len(c['overall']['point']) > 0\n"
             "for r, tau, sp, pred in zip(d, c['overall']['tau'], c['overall']['speedup'], c['overall']['predicted_speedup']):\n"
             "    assert abs(r['tau'] - tau) <= 1e-12 and r['speedup'] == sp, (r, tau, sp)\n"
             "    assert abs(r['tau_factor'] * r['cost_factor'] - r['tau_over_cost'] / pred) <= 1e-9 * r['tau_over_cost'] / pred, r\n"
             "    assert 0.5 < r['tau_over_cost'] / sp < 2.0, r\n"
             "    assert 0 <= r['draft_steps'] <= 1 and r['verify_cost'] > 0, r\n"
             "print('decomposition consistent')\n");
  check_python_script(dir + "/cross.py", h5);

  // The report `speclab run` generated, and `speclab report` on its own.
  CHECK(r.out.find("report: " + dir + "/rep/report.md") != std::string::npos);
  for (const auto& png : kPlots) CHECK(is_png(dir + "/rep/" + png));
  const Result rep = cli("report '" + h5 + "' --out '" + dir + "/rep2'", dir);
  INFO(rep.err);
  REQUIRE(rep.code == 0);
  for (const auto& png : kPlots) CHECK(is_png(dir + "/rep2/" + png));
  const std::string md = read_file(dir + "/rep2/report.md");
  CHECK(md.find("| point | drafter |") != std::string::npos);
  CHECK(md.find("## Where the time goes") != std::string::npos);
  CHECK(md.find("| τ ÷ cost |") != std::string::npos);
  CHECK(md.find("layer_skip") != std::string::npos);
  // The settings a result is reproduced from (the report named none of them).
  CHECK(md.find("| sampling | ") != std::string::npos);
  CHECK(md.find("| max new tokens | ") != std::string::npos);
  CHECK(md.find("| repeats | ") != std::string::npos);

  // A file without a column the report reads: one line naming the dataset, exit 2 (a KeyError
  // traceback and exit 1 before). One column of each table the report reads.
  write_file(dir + "/missing.py",
             "import h5py, shutil, subprocess, sys\n"
             "for name in ('runs/method', 'steps/accepted', 'point_values/key', 'summary/overall/alpha'):\n"
             "    copy = sys.argv[1] + '.missing.h5'\n"
             "    shutil.copy(sys.argv[1], copy)\n"
             "    with h5py.File(copy, 'a') as f:\n"
             "        del f[name]\n"
             "    r = subprocess.run(['" SPECLAB_CLI "', 'report', copy, '--out', copy + '_rep'], capture_output=True, text=True)\n"
             "    lines = r.stderr.strip().splitlines()\n"
             "    assert r.returncode == 2 and len(lines) == 1, (name, r.returncode, r.stderr)\n"
             "    assert lines[0] == 'error: ' + copy + ': /' + name + ': expected the dataset, found none', lines\n"
             "print('missing columns named')\n");
  check_python_script(dir + "/missing.py", h5);
  fs::remove_all(dir);
}

namespace {

// Starts the CLI, waits for its first finished prompt-run (progress line "[1/..."), SIGKILLs it.
// Returns true when the process was killed (rather than finishing on its own).
bool run_and_kill_after_first(const std::vector<std::string>& args) {
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    if (!freopen("/dev/null", "w", stdout)) _exit(126);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(SPECLAB_CLI));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(SPECLAB_CLI, argv.data());
    _exit(127);
  }
  close(pipefd[1]);
  std::string buf;
  char c;
  bool seen = false;
  while (!seen && read(pipefd[0], &c, 1) == 1) {
    if (c != '\n') {
      buf += c;
      continue;
    }
    seen = buf.rfind("[1/", 0) == 0;
    buf.clear();
  }
  if (seen) kill(pid, SIGKILL);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return seen && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::map<RunKey, const RunRecord*> by_key(const ExperimentData& d) {
  std::map<RunKey, const RunRecord*> m;
  for (const RunRecord& r : d.runs) m[r.key] = &r;
  return m;
}

}  // namespace

TEST_CASE("speclab run: SIGKILL after the first prompt-run, then --resume equals an uninterrupted run",
          "[experiment][resume]") {
  const std::string dir = temp_dir(), cfg = dir + "/kill.yaml";
  // Long enough generations that the kill lands inside a decoding, not inside a file write.
  write_file(cfg, config_yaml(dir + "/unused.h5", "{max_new_tokens: 96, ignore_eos: true}", "repeats: 2\n"));
  const Result ref = cli("run '" + cfg + "' --output '" + dir + "/ref.h5' --no-report", dir);
  INFO(ref.err);
  REQUIRE(ref.code == 0);
  {  // --output is the stored config's output.path (/config_yaml kept the YAML's until 2026-12-06)
    const std::string stored = read_experiment(dir + "/ref.h5").config_yaml;
    CHECK(stored.find(dir + "/ref.h5") != std::string::npos);
    CHECK(stored.find("unused.h5") == std::string::npos);
  }

  const std::string h5 = dir + "/killed.h5";
  REQUIRE(run_and_kill_after_first({"run", cfg, "--output", h5, "--no-report"}));

  // The killed file opens and holds only complete prompt-runs.
  const ExperimentData partial = read_experiment(h5);
  CHECK(partial.runs.size() >= 1);
  CHECK(partial.runs.size() < 36);
  for (const RunRecord& r : partial.runs) {
    CHECK(static_cast<int64_t>(r.tokens.size()) == r.n_generated);
    CHECK(r.n_generated == 96);
  }
  {
    H5::H5File f(h5, H5F_ACC_RDONLY);
    CHECK(str_attr(f, "status") == "running");
    CHECK(int_attr(f.openGroup("/runs"), "complete") == static_cast<int64_t>(partial.runs.size()));
  }
  // The report reads a partial file too (summary recomputed by the Python reader).
  const Result prep = cli("report '" + h5 + "' --out '" + dir + "/partial_rep'", dir);
  INFO(prep.err);
  CHECK(prep.code == 0);
  CHECK(is_png(dir + "/partial_rep/time_breakdown.png"));

  // Without --resume the file is left alone.
  const std::string before = read_file(h5);
  const Result again = cli("run '" + cfg + "' --output '" + h5 + "' --no-report", dir);
  CHECK(again.code == 2);
  CHECK(read_file(h5) == before);

  const Result res = cli("run '" + cfg + "' --output '" + h5 + "' --resume --no-report", dir);
  INFO(res.err);
  REQUIRE(res.code == 0);
  CHECK(res.err.find("(" + std::to_string(partial.runs.size()) + " already in the file, skipped)") !=
        std::string::npos);

  const ExperimentData a = read_experiment(h5), b = read_experiment(dir + "/ref.h5");
  REQUIRE(a.runs.size() == 36);
  REQUIRE(b.runs.size() == 36);
  const auto ka = by_key(a), kb = by_key(b);
  CHECK(ka.size() == 36);  // no duplicates
  REQUIRE(kb.size() == 36);
  for (const auto& [key, ra] : ka) {
    auto it = kb.find(key);
    REQUIRE(it != kb.end());
    CHECK(ra->tokens == it->second->tokens);
    CHECK(ra->text == it->second->text);
    CHECK(ra->steps.size() == it->second->steps.size());
    CHECK(ra->lossless == it->second->lossless);
  }
  // The resumed run's records reproduce the first part exactly (nothing re-recorded).
  for (size_t i = 0; i < partial.runs.size(); ++i) CHECK(a.runs[i].key == partial.runs[i].key);

  // Summaries are recomputed from the data: acceptance statistics equal the uninterrupted run's.
  H5::H5File fa(h5, H5F_ACC_RDONLY), fb(dir + "/ref.h5", H5F_ACC_RDONLY);
  CHECK(int_attr(fa.openGroup("/"), "resume_count") == 1);
  CHECK(str_attr(fa, "status") == "complete");
  const auto alpha_a = reals(fa, "/summary/overall/alpha"), alpha_b = reals(fb, "/summary/overall/alpha");
  const auto tau_a = reals(fa, "/summary/overall/tau"), tau_b = reals(fb, "/summary/overall/tau");
  REQUIRE(alpha_a.size() == alpha_b.size());
  for (size_t k = 0; k < alpha_a.size(); ++k) {
    CHECK((alpha_a[k] == alpha_b[k] || (std::isnan(alpha_a[k]) && std::isnan(alpha_b[k]))));
    CHECK(tau_a[k] == tau_b[k]);
  }
  CHECK(ints(fa, "/positions/pos").size() == ints(fb, "/positions/pos").size());
  CHECK(ints(fa, "/steps/step").size() == ints(fb, "/steps/step").size());
  fs::remove_all(dir);
}

// Bad configs, prompt files and output paths of `speclab run` (exit 2, one error line, no file
// written, an existing file untouched) are cases of the bad-input catalogue,
// tests/bad_inputs/cases.txt; crash safety and resource limits are in test_crash_safety.cpp.
TEST_CASE("a run stopped while its models load writes no file", "[experiment][sigint]") {
  // What `speclab run`'s message relies on: stopped before anything is recorded, no file exists
  // (it said "interrupted: 0 prompt-runs in x.h5 ...; continue with --resume" of a file not there).
  ExperimentConfig c;
  c.name = "stopped";
  c.models.target.path = "stories260K";
  c.prompts.chat = "off";
  c.prompts.inline_prompts = {{"a", "", "Once upon a time"}};
  c.generation.max_new_tokens = 4;
  DrafterEntry d;
  d.label = "prompt_lookup";
  d.options.name = "prompt_lookup";
  c.drafters = {d};
  c.output.path = (fs::temp_directory_path() / "speclab_stopped_while_loading.h5").string();
  fs::remove(c.output.path);
  RunnerOptions o;
  o.stop_requested = [] { return true; };
  const ExperimentOutcome out = run_experiment(c, o);
  CHECK(out.interrupted);
  CHECK(out.runs_recorded == 0);
  CHECK_FALSE(fs::exists(c.output.path));
  CHECK_FALSE(fs::exists(c.output.path + ".partial"));
}

TEST_CASE("speclab run --overwrite replaces an existing experiment file", "[experiment][overwrite]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  write_file(dir + "/ok.yaml", config_yaml(h5, "{max_new_tokens: 4}"));
  REQUIRE(cli("run '" + dir + "/ok.yaml' --no-report", dir).code == 0);
  // The replaced file's mode stays (the new file had the umask's 0644 until 2026-12-07).
  fs::permissions(h5, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write);
  const Result o = cli("run '" + dir + "/ok.yaml' --no-report --overwrite --set repeats=2", dir);
  INFO(o.err);
  CHECK(o.code == 0);
  CHECK(read_experiment(h5).runs.size() == 36);
  CHECK(!fs::exists(h5 + ".partial"));
  CHECK(fs::status(h5).permissions() ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write));
  fs::remove_all(dir);
}

TEST_CASE("speclab run: prompt files and repeats sweep per point", "[experiment][sweep]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  write_file(dir + "/one.jsonl", "{\"prompt\": \"Sam had a red car.\", \"id\": \"x1\"}\n");
  write_file(dir + "/two.jsonl",
             "{\"prompt\": \"Mia liked to play.\", \"id\": \"y1\"}\n{\"prompt\": \"Ben wanted cake.\", \"id\": \"y2\"}\n");
  write_file(dir + "/p.yaml",
             "models: {target: {path: stories260K}}\n"
             "drafters: [{name: prompt_lookup}]\n"
             "generation: {max_new_tokens: 3}\n"
             "prompts:\n  chat: off\n  id_field: id\n  inline: [{id: shared, text: \"Once upon a time\"}]\n"
             "sweep:\n  prompts.files: [one.jsonl, two.jsonl]\n  repeats: [1, 2]\n"
             "output: {path: " + h5 + "}\n");
  const Result r = cli("run '" + dir + "/p.yaml' --no-report", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const ExperimentData d = read_experiment(h5);
  // Prompt table: the union in first-seen order (x1, shared, y1, y2); each point runs its own.
  REQUIRE(d.prompts.size() == 4);
  CHECK(d.prompts[0].id == "x1");
  CHECK(d.prompts[1].id == "shared");
  std::map<int64_t, std::set<std::pair<int64_t, int64_t>>> runs;  // point -> {(prompt, repeat)}
  for (const RunRecord& run : d.runs) runs[run.key.point].insert({run.key.prompt, run.key.repeat});
  using S = std::set<std::pair<int64_t, int64_t>>;
  CHECK(runs[0] == S{{0, 0}, {1, 0}});                                  // one.jsonl, repeats 1
  CHECK(runs[1] == S{{0, 0}, {0, 1}, {1, 0}, {1, 1}});                  // one.jsonl, repeats 2
  CHECK(runs[2] == S{{2, 0}, {3, 0}, {1, 0}});                          // two.jsonl, repeats 1
  CHECK(runs[3] == S{{2, 0}, {2, 1}, {3, 0}, {3, 1}, {1, 0}, {1, 1}});  // two.jsonl, repeats 2
  CHECK(d.runs.size() == 2 * (2 + 4 + 3 + 6));                          // ar + prompt_lookup
  fs::remove_all(dir);
}

// Repeats: a sampled run draws each repeat from its own seed (repeat 0 from the seed itself), so
// repeats are independent samples; a greedy run's repeats decode the same tokens again (for
// timing), so alpha's interval and the positions count repeat 0 only. Until 2026-11-29 every
// repeat drew from the same seed and counted as new trials: the interval narrowed with `repeats`
// alone. The Python reader's summary agrees.
TEST_CASE("speclab run: sampled repeats are independent draws, greedy repeats are not new trials",
          "[experiment][repeats]") {
  const std::string dir = temp_dir(), h5 = dir + "/rep.h5";
  write_file(dir + "/r.yaml",
             "models: {target: {path: stories260K}}\n"
             "drafters: [{name: layer_skip, draft_layers_first: 3}]\n"
             "generation: {max_new_tokens: 24, ignore_eos: true}\n"
             "sampling: {seed: 11}\n"
             "prompts:\n  chat: off\n  inline: [{id: a, text: \"Once upon a time\"}, {id: b, text: \"The little dog\"}]\n"
             "sweep:\n  sampling.temperature: [0, 0.8]\n"
             "repeats: 3\nwarmup: 0\n"
             "output: {path: " + h5 + "}\n");
  const Result r = cli("run '" + dir + "/r.yaml' --no-report", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const ExperimentData d = read_experiment(h5);
  std::map<std::tuple<int64_t, int64_t, std::string>, std::vector<TokenList>> tokens;  // (point, prompt, method) -> per repeat
  std::map<int64_t, std::array<int64_t, 4>> acc;  // point -> accepted, examined over repeat 0, over all repeats
  for (const RunRecord& run : d.runs) {
    tokens[{run.key.point, run.key.prompt, run.key.method}].push_back(run.tokens);
    for (const StepRecord& st : run.steps) {
      auto& a = acc[run.key.point];
      const int64_t ex = std::min(st.accepted + 1, st.drafted);
      if (run.key.repeat == 0) a[0] += st.accepted, a[1] += ex;
      a[2] += st.accepted, a[3] += ex;
    }
  }
  int64_t sampled_differ = 0;
  for (const auto& [key, per_repeat] : tokens) {
    REQUIRE(per_repeat.size() == 3);
    const bool all_equal = per_repeat[0] == per_repeat[1] && per_repeat[1] == per_repeat[2];
    if (std::get<0>(key) == 0) CHECK(all_equal);  // greedy
    else sampled_differ += !all_equal;
  }
  CHECK(sampled_differ == 4);  // every (prompt, method) of the sampled point
  H5::H5File f(h5, H5F_ACC_RDONLY);
  const auto s_point = ints(f, "/summary/overall/point");
  const auto s_lo = reals(f, "/summary/overall/alpha_lo"), s_hi = reals(f, "/summary/overall/alpha_hi");
  REQUIRE(s_point.size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    const auto& a = acc.at(s_point[k]);
    const Proportion want = s_point[k] == 0 ? wilson_interval(a[0], a[1]) : wilson_interval(a[2], a[3]);
    INFO("point " << s_point[k]);
    CHECK(s_lo[k] == Approx(want.lo).epsilon(1e-12));
    CHECK(s_hi[k] == Approx(want.hi).epsilon(1e-12));
  }
  CHECK(acc.at(0)[3] == 3 * acc.at(0)[1]);  // the greedy repeats did run, and are left out

  write_file(dir + "/cross.py",
             "import math, sys\n"
             "sys.path.insert(0, '" + std::string(SPECLAB_SOURCE_DIR) + "/analysis')\n"
             "from speclab_h5 import Experiment, compute_summary\n"
             "e = Experiment(sys.argv[1]); c = compute_summary(e)\n"
             "f, p = e.summary['overall'], c['overall']\n"
             "for col in ('alpha', 'alpha_lo', 'alpha_hi', 'accepted', 'examined'):\n"
             "    for a, b in zip(f[col], p[col]):\n"
             "        assert abs(float(a) - float(b)) <= 1e-12, (col, a, b)\n"
             "def pos_rows(t):\n"
             "    return sorted(zip(*(list(map(str, t[k])) for k in ('point', 'method', 'pos', 'trials', 'successes'))))\n"
             "assert pos_rows(e.summary['positions']) == pos_rows(c['positions']) != [], 'positions differ'\n"
             "print('summaries agree')\n");
  check_python_script(dir + "/cross.py", h5);
  fs::remove_all(dir);
}

// top_k 1 at a temperature above 0 decodes deterministically: its repeats are the same tokens
// (one trial, as greedy repeats), and a speculative run must equal AR token for token, so it is
// checked (until 2026-12-05 only temperature 0 was: the interval narrowed with repeats, and the
// lossless column said "not checked").
TEST_CASE("speclab run: top_k 1 is deterministic decoding, repeats count once and lossless is checked",
          "[experiment][repeats]") {
  const std::string dir = temp_dir(), h5 = dir + "/k1.h5";
  write_file(dir + "/k.yaml",
             "models: {target: {path: stories260K}}\n"
             "drafters: [{name: layer_skip, draft_layers_first: 3}]\n"
             "generation: {max_new_tokens: 24, ignore_eos: true}\n"
             "sampling: {seed: 11, temperature: 0.8, top_k: 1}\n"
             "prompts:\n  chat: off\n  inline: [{id: a, text: \"Once upon a time\"}]\n"
             "repeats: 3\nwarmup: 0\n"
             "output: {path: " + h5 + "}\n");
  const Result r = cli("run '" + dir + "/k.yaml' --no-report", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const ExperimentData d = read_experiment(h5);
  int64_t accepted0 = 0, examined0 = 0, spec_runs = 0;
  std::map<std::string, std::vector<TokenList>> tokens;
  for (const RunRecord& run : d.runs) {
    CHECK(run.greedy == 1);
    tokens[run.key.method].push_back(run.tokens);
    if (run.key.method != kArMethod) {
      ++spec_runs;
      CHECK(run.lossless == 1);
    }
    if (run.key.repeat == 0)
      for (const StepRecord& st : run.steps) accepted0 += st.accepted, examined0 += std::min(st.accepted + 1, st.drafted);
  }
  CHECK(spec_runs == 3);
  for (const auto& [method, per_repeat] : tokens) {
    REQUIRE(per_repeat.size() == 3);
    CHECK(per_repeat[0] == per_repeat[1]);
    CHECK(per_repeat[1] == per_repeat[2]);
  }
  H5::H5File f(h5, H5F_ACC_RDONLY);
  const auto lo = reals(f, "/summary/overall/alpha_lo"), hi = reals(f, "/summary/overall/alpha_hi");
  REQUIRE(lo.size() == 1);
  const Proportion want = wilson_interval(accepted0, examined0);  // repeat 0 only
  CHECK(lo[0] == Approx(want.lo).epsilon(1e-12));
  CHECK(hi[0] == Approx(want.hi).epsilon(1e-12));
  fs::remove_all(dir);
}

TEST_CASE("speclab run --resume compares settings by value and names the ones that differ",
          "[experiment][resume]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  write_file(dir + "/a.yaml", config_yaml(h5, "{max_new_tokens: 4}"));
  REQUIRE(cli("run '" + dir + "/a.yaml' --no-report", dir).code == 0);
  // /resolved_config holds every effective setting and the runtime facts.
  const ExperimentData d = read_experiment(h5);
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("top_p: 1"));
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("threads:"));
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("stories260K.bin"));
  // What "auto" resolved to (the config keeps "auto"): a float32 model keeps a float32 cache.
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("kv_dtype: auto"));
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("kv_dtype: float32"));
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("dtype: float32"));
  // The same settings written differently: 0.0 for 0, a default written out, sections moved.
  std::string same = config_yaml(h5, "{max_tokens: 4, ignore_eos: false}");
  same.replace(same.find("sampling: {temperature: 0}\n"), 27, "");
  same = "sampling: {temperature: 0.0, top_k: 0}\n" + same;
  write_file(dir + "/b.yaml", same);
  const Result ok = cli("run '" + dir + "/b.yaml' --no-report --resume", dir);
  INFO(ok.err);
  CHECK(ok.code == 0);
  const Result bad = cli("run '" + dir + "/a.yaml' --no-report --resume --set generation.max_new_tokens=5", dir);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Matchers::Contains("--resume: expected the same settings as the experiment recorded in "
                                                "the file, found 1 different (file vs now: generation.max_new_tokens: 4 vs 5)"));
  // A file another build wrote is not resumed: its runs would mix two builds' results.
  {
    H5::H5File f(h5, H5F_ACC_RDWR);
    H5::Group root = f.openGroup("/");
    root.removeAttr("git_revision");
    const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    root.createAttribute("git_revision", type, H5::DataSpace(H5S_SCALAR))
        .write(type, std::string("0123456789012345678901234567890123456789"));
  }
  const Result other = cli("run '" + dir + "/a.yaml' --no-report --resume", dir);
  std::ifstream in(std::string(SPECLAB_BINARY_DIR) + "/generated/speclab_build_revision.h");
  const std::string header((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (header.find("\"unknown\"") != std::string::npos) {  // a build outside a git checkout cannot tell
    CHECK(other.code == 0);
  } else {
    CHECK(other.code == 2);
    CHECK_THAT(other.err, Catch::Matchers::Contains("--resume: expected the build that wrote the file (revision "
                                                    "0123456789012345678901234567890123456789) to resume it"));
  }
  fs::remove_all(dir);
}

// The files a run reads are named by content in runtime.files (framework/io/file_fingerprint.h):
// a resumed run (or another shard, `speclab merge`) whose model or draft file changed in between
// is refused, naming the file's role, though its path is the same (until 2026-12-05 it mixed two
// models' results in one file: an audit did so with two retrieval datastores).
TEST_CASE("speclab run --resume refuses a model file whose content changed", "[experiment][resume]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  const std::string shared = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K";
  fs::copy_file(shared + "/stories260K.bin", dir + "/m.bin");
  std::string yaml = config_yaml(h5, "{max_new_tokens: 4}");
  yaml.replace(yaml.find("{path: stories260K}"), 19, "{path: m.bin, format: llama2c, tokenizer: " + shared + "/tok512.bin}");
  write_file(dir + "/a.yaml", yaml);
  const Result first = cli("run '" + dir + "/a.yaml' --no-report", dir);
  INFO(first.err);
  REQUIRE(first.code == 0);
  const ExperimentData d = read_experiment(h5);
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("target_model: 1056540:"));
  CHECK_THAT(d.resolved_config_yaml, Catch::Matchers::Contains("target_model.tokenizer: "));
  CHECK(cli("run '" + dir + "/a.yaml' --no-report --resume", dir).code == 0);  // the same file: resumes
  {  // one weight's last byte changed: the model still loads, and is another model
    std::fstream f(dir + "/m.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x01);
    f.seekp(-1, std::ios::end);
    f.put(c);
  }
  const Result changed = cli("run '" + dir + "/a.yaml' --no-report --resume", dir);
  CHECK(changed.code == 2);
  CHECK_THAT(changed.err, Catch::Matchers::Contains("--resume: expected the same settings") &&
                              Catch::Matchers::Contains("runtime.files.target_model: 1056540:"));
  fs::remove_all(dir);
}

// retrieval_datastore names the datastore retrieval_first reads: a missing file is refused before
// anything runs, naming the entry's key, and no output is written; so is one built for another target.
TEST_CASE("speclab run: a missing retrieval_datastore is refused before the run and one for another target when its drafter is built, naming the key", "[experiment]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  std::string yaml = config_yaml(h5, "{max_new_tokens: 4}");
  const std::string entry = "  - name: layer_skip\n";
  REQUIRE(yaml.find(entry) != std::string::npos);
  yaml.replace(yaml.find(entry), entry.size(),
               "  - {name: layer_skip, retrieval_first: true, retrieval_datastore: stores/none.safetensors}\n");
  write_file(dir + "/a.yaml", yaml);
  const Result r = cli("run '" + dir + "/a.yaml' --no-report", dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("drafters[1].retrieval_datastore") &&
                        Catch::Matchers::Contains("stores/none.safetensors"));
  CHECK_FALSE(fs::exists(h5));
  // A datastore built for another target (the shipped SmolLM2 one, for stories260K): refused when
  // the drafter is built, naming the file and the entry's key (until 2026-12-05 the bare option).
  const std::string other = std::string(SPECLAB_SOURCE_DIR) + "/assets/drafts/SmolLM2-135M-Instruct.Q4_1.retrieval.safetensors";
  yaml.replace(yaml.find("stores/none.safetensors"), std::string("stores/none.safetensors").size(), other);
  write_file(dir + "/b.yaml", yaml);
  const Result wrong = cli("run '" + dir + "/b.yaml' --no-report", dir);
  CHECK(wrong.code == 2);
  CHECK_THAT(wrong.err, Catch::Matchers::Contains(other + ": drafters[1].retrieval_datastore: ") &&
                            Catch::Matchers::Contains("not for the target stories260K"));
  fs::remove_all(dir);
}

// The CPU kernels' ISA decides the bits (AVX2 and AVX-512 sum in other orders: sampled tokens can
// differ), so a file is resumed only under the same one (SPECLAB_KERNEL_ISA caps it).
TEST_CASE("speclab run --resume refuses a file written under another kernel ISA", "[experiment][resume]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5", h5_default = dir + "/default.h5";
  write_file(dir + "/a.yaml", config_yaml(h5, "{max_new_tokens: 4}"));
  // This machine's own ISA, as a run records it.
  REQUIRE(cli("run '" + dir + "/a.yaml' --no-report --output '" + h5_default + "'", dir).code == 0);
  const bool native_scalar =
      read_experiment(h5_default).resolved_config_yaml.find("kernel_isa: scalar") != std::string::npos;
  // How the model held its matrices (stories260K: float32, which multiplies float32 activations
  // whatever `activations` says; the record did not show it until 2026-12-07).
  CHECK_THAT(read_experiment(h5_default).resolved_config_yaml,
             Catch::Matchers::Contains("weight_storage: float32 x ") && Catch::Matchers::Contains(" matrices, float32 norms"));
  ::setenv("SPECLAB_KERNEL_ISA", "scalar", 1);  // the child processes inherit it
  const Result first = cli("run '" + dir + "/a.yaml' --no-report", dir);
  const Result again = cli("run '" + dir + "/a.yaml' --no-report --resume", dir);
  ::unsetenv("SPECLAB_KERNEL_ISA");
  INFO(first.err);
  REQUIRE(first.code == 0);
  CHECK_THAT(read_experiment(h5).resolved_config_yaml, Catch::Matchers::Contains("kernel_isa: scalar"));
  CHECK(again.code == 0);
  const Result other = cli("run '" + dir + "/a.yaml' --no-report --resume", dir);
  if (native_scalar) {  // a CPU without AVX2: the same ISA
    CHECK(other.code == 0);
  } else {
    CHECK(other.code == 2);
    CHECK_THAT(other.err, Catch::Matchers::Contains("runtime.kernel_isa: scalar vs "));
  }
  fs::remove_all(dir);
}

TEST_CASE("speclab run: identical prompts in one point are separate prompt-runs", "[experiment][sweep]") {
  const std::string dir = temp_dir(), h5 = dir + "/out.h5";
  write_file(dir + "/d.yaml",
             "models: {target: {path: stories260K}}\n"
             "drafters: [{name: prompt_lookup}]\n"
             "generation: {max_new_tokens: 3}\n"
             "prompts:\n  chat: off\n  inline: [{id: a, text: \"Once upon a time\"}, {id: a, text: \"Once upon a time\"}]\n"
             "sweep:\n  sampling.seed: [1, 2]\n"
             "output: {path: " + h5 + "}\n");
  const Result r = cli("run '" + dir + "/d.yaml' --no-report", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const ExperimentData d = read_experiment(h5);
  CHECK(d.prompts.size() == 2);  // two rows within a point, shared by both points
  CHECK(d.runs.size() == 2 * 2 * 2);
  fs::remove_all(dir);
}

// Labels and categories are user text: a '$' was read as matplotlib math, which changed the label
// ("pl$x^2$" drawn as plx²) or failed the whole report on "$\frac{$", and `run` then exited 2 after
// a run that had succeeded (until 2026-12-06). A sweep wide enough for a figure past matplotlib's
// 2^16-pixel limit failed the same way; figure widths are now capped.
TEST_CASE("speclab run: a report of labels with '$' and of very many bars", "[experiment][report]") {
  const std::string dir = temp_dir(), h5 = dir + "/dollar.h5";
  write_file(dir + "/d.yaml",
             "models: {target: {path: stories260K}}\n"
             "drafters: [{name: prompt_lookup, label: 'pl$x^2$'}]\n"
             "generation: {max_new_tokens: 3}\n"
             "prompts:\n  chat: off\n  inline:\n"
             "    - {id: a, text: \"Once upon a time\", category: 'costs $5 or $6'}\n"
             "    - {id: b, text: \"The little dog\", category: 'bad $\\frac{$'}\n"
             "output: {path: " + h5 + "}\n");
  const Result r = cli("run '" + dir + "/d.yaml'", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string md = read_file(dir + "/dollar_report/report.md");
  CHECK_THAT(md, Catch::Matchers::Contains("pl$x^2$"));
  CHECK_THAT(md, Catch::Matchers::Contains("bad $\\frac{$"));
  CHECK_THAT(md, !Catch::Matchers::Contains("was not drawn"));
  CHECK(fs::exists(dir + "/dollar_report/acceptance_by_category.png"));
  write_file(dir + "/width.py",
             "import sys\n"
             "sys.path.insert(0, '" + std::string(SPECLAB_SOURCE_DIR) + "/analysis')\n"
             "import report\n"
             "assert report.Report.fig_width(3.5 + 0.9 * 5000) == report.Report.MAX_FIG_INCHES\n"
             "assert report.Report.MAX_FIG_INCHES * 110 < 2 ** 16\n"
             "assert report.Report.fig_width(7.5) == 7.5\n");
  check_python_script(dir + "/width.py", h5);
  fs::remove_all(dir);
}

// The report's legends and its writes. A series with nothing to draw (every measured speedup NaN:
// a run of one token has no decode phase) was listed with a line and marker as if drawn, until
// 2026-12-07; now its entry is words only (and a lone gamma's tick sat on the axes' right edge).
// A full disk (a file-size limit) cut a PNG short, over
// an earlier report's file of that name; now each file is written whole beside it and renamed, so
// the earlier report stays as it was and no temporary is left.
TEST_CASE("speclab report: legends list only what is drawn, and a full disk leaves the files whole", "[experiment][report]") {
  const std::string dir = temp_dir(), h5 = dir + "/one.h5";
  write_file(dir + "/one.yaml",
             "models: {target: {path: stories260K}}\n"
             "drafters: [{name: prompt_lookup}]\n"
             "generation: {max_new_tokens: 1}\n"
             "prompts:\n  chat: off\n  inline:\n    - {id: a, text: \"Once upon a time\"}\n"
             "output: {path: " + h5 + "}\n");
  const Result r = cli("run '" + dir + "/one.yaml' --no-report", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  write_file(dir + "/legend.py",
             "import math, os, sys\n"
             "sys.path.insert(0, '" SPECLAB_SOURCE_DIR "/analysis')\n"
             "import report\n"
             "from speclab_h5 import Experiment\n"
             "seen = {}\n"
             "orig = report.Report.save\n"
             "def save(self, fig, name, caption):\n"
             "    ax = fig.axes[0]\n"
             "    leg = ax.get_legend()\n"
             "    lines = {l.get_label(): l for l in ax.get_lines()}\n"
             "    for t in (leg.get_texts() if leg is not None else []):\n"
             "        seen.setdefault(name, []).append(t.get_text())\n"
             "        if t.get_text() not in lines: continue  # a bar's entry\n"
             "        line = lines[t.get_text()]\n"
             "        ys = [float(y) for y in line.get_ydata()]\n"
             "        words_only = line.get_linestyle() in ('None', ' ', '') and line.get_marker() in ('None', None, '', ' ')\n"
             "        assert (len(ys) == 0) == words_only, t.get_text()\n"
             "        assert len(ys) == 0 or any(math.isfinite(y) for y in ys), ('an entry for nothing drawn', t.get_text())\n"
             "    if name == 'speedup_vs_gamma.png':  # the one gamma's tick inside the axes, not on an edge\n"
             "        lo, hi = ax.get_xlim()\n"
             "        assert all(lo < t < hi for t in ax.get_xticks()), (lo, hi, list(ax.get_xticks()))\n"
             "    orig(self, fig, name, caption)\n"
             "report.Report.save = save\n"
             "out = sys.argv[1] + '_legend'\n"
             "os.makedirs(out)\n"
             "report.Report(Experiment(sys.argv[1]), out).write()\n"
             "texts = seen['speedup_vs_gamma.png']\n"
             "assert any('no measured speedup' in t for t in texts), texts\n"
             "assert not any(t.endswith(': measured') for t in texts), texts\n");
  check_python_script(dir + "/legend.py", h5);
  write_file(dir + "/full.py",
             "import os, resource, signal, subprocess, sys\n"
             "out = sys.argv[1] + '_full'\n"
             "cmd = ['/usr/bin/python3', '" SPECLAB_SOURCE_DIR "/analysis/report.py', sys.argv[1], '--out', out]\n"
             "assert subprocess.run(cmd, capture_output=True).returncode == 0\n"
             "os.chmod(os.path.join(out, 'report.md'), 0o640)  # a report written again keeps each file's mode\n"
             "assert subprocess.run(cmd, capture_output=True).returncode == 0\n"
             "assert os.stat(os.path.join(out, 'report.md')).st_mode & 0o7777 == 0o640\n"
             "before = {n: open(os.path.join(out, n), 'rb').read() for n in os.listdir(out)}\n"
             "assert 'report.md' in before and any(n.endswith('.png') for n in before), sorted(before)\n"
             "def limit():  # a full disk after 4 KB: the first PNG's write fails part way\n"
             "    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
             "    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
             "r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit)\n"
             "lines = r.stderr.strip().splitlines()\n"
             "assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)\n"
             "assert lines[0].startswith('error: ' + out + ': -o: cannot write the report'), lines\n"
             "after = {n: open(os.path.join(out, n), 'rb').read() for n in os.listdir(out)}\n"
             "assert sorted(after) == sorted(before), (sorted(before), sorted(after))  # no temporary left\n"
             "for n in before:\n"
             "    assert after[n] == before[n], n + ' was cut short'\n");
  check_python_script(dir + "/full.py", h5);
  fs::remove_all(dir);
}

TEST_CASE("run_config_warnings: cost schedules and prompts of one text under sampling", "[experiment][config]") {
  const std::string base = "models:\n  target: {path: stories260K}\nprompts:\n  inline:\n"
                           "    - {id: a, text: Once upon a time}\n    - {id: b, text: Once upon a time}\n";
  const auto warnings = [&](const std::string& extra) {
    std::string all;
    for (const std::string& w : run_config_warnings(parse_experiment_config(base + extra, "w.yaml"))) all += w + "\n";
    return all;
  };
  const std::string lookup = "drafters: [{name: prompt_lookup}]\n", cost = "drafters: [{name: prompt_lookup, schedule: cost}]\n";
  // Two prompts of one text draw the same samples (the seed does not depend on the prompt).
  CHECK_THAT(warnings(lookup + "sampling: {temperature: 0.7}\n"), Catch::Contains("prompts 'a' and 'b' have the same text"));
  CHECK(warnings(lookup).empty());  // greedy: the same tokens are expected, and counted once
  // A cost schedule: under sampling the output is not reproducible; under greedy decoding its steps
  // (alpha, tau) are not (said for sampling only).
  CHECK_THAT(warnings(cost + "sampling: {temperature: 0.7}\n"), Catch::Contains("at a sampled point"));
  CHECK_THAT(warnings(cost), Catch::Contains("schedule cost: the steps follow the measured timings"));
}
