#include "framework/equivalence/equivalence_hdf5.h"

#include <H5Cpp.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/replace_file.h"
#include "framework/io/hdf5_journal.h"

namespace speclab {

namespace {

H5::StrType utf8_type() {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  return t;
}

bool exists(const H5::Group& g, const std::string& name) { return H5Lexists(g.getId(), name.c_str(), H5P_DEFAULT) > 0; }

void attr_i64(H5::H5Object& obj, const std::string& name, int64_t v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  obj.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_INT64, &v);
}

void attr_f64(H5::H5Object& obj, const std::string& name, double v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  obj.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_DOUBLE, &v);
}

void attr_str(H5::H5Object& obj, const std::string& name, const std::string& v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  H5::StrType t = utf8_type();
  const char* p = v.c_str();
  obj.createAttribute(name, t, H5::DataSpace(H5S_SCALAR)).write(t, &p);
}

// A table: one 1-D dataset per column, all of one length, plus the attribute `complete`.
class TableWriter {
 public:
  TableWriter(H5::Group& parent, const std::string& name) : g_(parent.createGroup(name)), name_(name) {}

  template <typename T>
  void column(const std::string& col, const std::vector<T>& v, const H5::PredType& file, const H5::PredType& mem) {
    length(v.size(), col);
    const hsize_t dims[1] = {v.size()};
    H5::DataSpace space(1, dims);
    H5::DataSet ds = g_.createDataSet(col, file, space);
    if (!v.empty()) ds.write(v.data(), mem);
  }
  void i64(const std::string& c, const std::vector<int64_t>& v) { column(c, v, H5::PredType::STD_I64LE, H5::PredType::NATIVE_INT64); }
  void u64(const std::string& c, const std::vector<uint64_t>& v) { column(c, v, H5::PredType::STD_U64LE, H5::PredType::NATIVE_UINT64); }
  void i32(const std::string& c, const std::vector<int32_t>& v) { column(c, v, H5::PredType::STD_I32LE, H5::PredType::NATIVE_INT32); }
  void u8(const std::string& c, const std::vector<uint8_t>& v) { column(c, v, H5::PredType::STD_U8LE, H5::PredType::NATIVE_UINT8); }
  void f64(const std::string& c, const std::vector<double>& v) { column(c, v, H5::PredType::IEEE_F64LE, H5::PredType::NATIVE_DOUBLE); }
  void str(const std::string& c, const std::vector<std::string>& v) {
    length(v.size(), c);
    const hsize_t dims[1] = {v.size()};
    H5::DataSpace space(1, dims);
    H5::StrType t = utf8_type();
    H5::DataSet ds = g_.createDataSet(c, t, space);
    std::vector<const char*> p;
    for (const std::string& s : v) p.push_back(s.c_str());
    if (!p.empty()) ds.write(p.data(), t);
  }
  void finish() { attr_i64(g_, "complete", static_cast<int64_t>(rows_ == SIZE_MAX ? 0 : rows_)); }

 private:
  void length(size_t n, const std::string& col) {
    if (rows_ == SIZE_MAX) rows_ = n;
    SPECLAB_CHECK(rows_ == n, "column " + name_ + "/" + col + " has a different length");
  }
  H5::Group g_;
  std::string name_;
  size_t rows_ = SIZE_MAX;
};

// Collects the values of one column from rows.
template <typename Row, typename F>
auto col(const std::vector<Row>& rows, F f) {
  std::vector<decltype(f(rows.front()))> out;
  out.reserve(rows.size());
  for (const Row& r : rows) out.push_back(f(r));
  return out;
}

int64_t tri(bool ran, bool pass) { return ran ? (pass ? 1 : 0) : -1; }

void write_group(H5::Group& root, const EquivalenceReport& r) {
  H5::Group eq = root.createGroup("equivalence");
  attr_i64(eq, "schema_version", kEquivalenceSchemaVersion);
  attr_str(eq, "name", r.name);
  attr_str(eq, "verdict", r.pass() ? "pass" : "fail");
  attr_i64(eq, "greedy_pass", tri(r.ran_greedy, r.greedy_pass));
  attr_i64(eq, "analytic_pass", tri(r.ran_analytic, r.analytic_pass));
  attr_i64(eq, "verifier_pass", tri(r.ran_verifier, r.verifier_pass));
  attr_i64(eq, "sampling_pass", tri(r.ran_sampling, r.sampling_pass));
  attr_i64(eq, "controls_pass", tri(r.ran_sampling, r.controls_pass));
  attr_f64(eq, "alpha", r.alpha);
  attr_f64(eq, "control_alpha", r.control_alpha);
  attr_f64(eq, "min_expected", r.min_expected);
  attr_f64(eq, "analytic_tolerance", kAnalyticTolerance);
  attr_f64(eq, "analytic_max_error", r.analytic_max_error);
  attr_i64(eq, "samples", r.samples);
  std::string pos;
  for (int m : r.positions) pos += (pos.empty() ? "" : ",") + std::to_string(m);
  attr_str(eq, "positions", pos);
  attr_i64(eq, "family_size", r.family_size);
  attr_str(eq, "multiple_testing",
           "Holm-Bonferroni over every Pearson test of the lossless engines (subject ar or speculative) across the "
           "sweep at family-wise level alpha; negative controls: Bonferroni over the tests of one control in one cell "
           "at control_alpha");
  attr_f64(eq, "seconds", r.seconds);

  {
    TableWriter t(eq, "failures");
    t.str("message", r.failures);
    t.finish();
  }
  {
    TableWriter t(eq, "notes");
    t.str("message", r.notes);
    t.finish();
  }
  {
    const auto& g = r.greedy;
    TableWriter t(eq, "greedy");
    t.i64("prompt", col(g, [](const GreedyRow& x) { return x.prompt; }));
    t.str("prompt_id", col(g, [](const GreedyRow& x) { return x.prompt_id; }));
    t.str("drafter", col(g, [](const GreedyRow& x) { return x.drafter; }));
    t.i32("gamma", col(g, [](const GreedyRow& x) { return static_cast<int32_t>(x.gamma); }));
    t.i64("n_ar", col(g, [](const GreedyRow& x) { return x.check.n_ar; }));
    t.i64("n_spec", col(g, [](const GreedyRow& x) { return x.check.n_spec; }));
    t.u8("match", col(g, [](const GreedyRow& x) { return static_cast<uint8_t>(x.check.match); }));
    t.i64("first_divergence", col(g, [](const GreedyRow& x) { return x.check.first_divergence; }));
    t.i32("ar_token", col(g, [](const GreedyRow& x) { return static_cast<int32_t>(x.check.ar_token); }));
    t.i32("spec_token", col(g, [](const GreedyRow& x) { return static_cast<int32_t>(x.check.spec_token); }));
    t.f64("margin_ar", col(g, [](const GreedyRow& x) { return x.check.margin_ar; }));
    t.f64("margin_verify", col(g, [](const GreedyRow& x) { return x.check.margin_verify; }));
    t.f64("max_abs_logit", col(g, [](const GreedyRow& x) { return x.check.max_abs_logit; }));
    t.f64("tolerance", col(g, [](const GreedyRow& x) { return x.check.tolerance; }));
    t.f64("max_logit_diff", col(g, [](const GreedyRow& x) { return x.check.max_logit_diff; }));
    t.i64("steps", col(g, [](const GreedyRow& x) { return x.check.steps; }));
    t.f64("acceptance_rate", col(g, [](const GreedyRow& x) { return x.check.acceptance_rate; }));
    t.u8("bit_identity", col(g, [](const GreedyRow& x) { return static_cast<uint8_t>(x.check.bit_identity); }));
    t.str("classification", col(g, [](const GreedyRow& x) { return x.check.classification; }));
    t.finish();
  }
  {
    const auto& a = r.analytic;
    TableWriter t(eq, "analytic");
    t.i64("prompt", col(a, [](const AnalyticRow& x) { return x.prompt; }));
    t.str("prompt_id", col(a, [](const AnalyticRow& x) { return x.prompt_id; }));
    t.i64("context_len", col(a, [](const AnalyticRow& x) { return x.context_len; }));
    t.str("draft", col(a, [](const AnalyticRow& x) { return x.draft; }));
    t.f64("temperature", col(a, [](const AnalyticRow& x) { return x.sampling.temperature; }));
    t.f64("top_p", col(a, [](const AnalyticRow& x) { return x.sampling.top_p; }));
    t.i64("top_k", col(a, [](const AnalyticRow& x) { return x.sampling.top_k; }));
    t.f64("max_abs_error", col(a, [](const AnalyticRow& x) { return x.errors.lossless; }));
    t.f64("deterministic_error", col(a, [](const AnalyticRow& x) { return x.errors.deterministic; }));
    t.f64("always_accept_error", col(a, [](const AnalyticRow& x) { return x.errors.always_accept; }));
    t.f64("top_p_on_p_only_error", col(a, [](const AnalyticRow& x) { return x.errors.top_p_on_p_only; }));
    t.f64("tv_pq", col(a, [](const AnalyticRow& x) { return x.errors.tv_pq; }));
    t.i64("support_p", col(a, [](const AnalyticRow& x) { return x.errors.support_p; }));
    t.i64("support_q", col(a, [](const AnalyticRow& x) { return x.errors.support_q; }));
    t.finish();
  }
  {
    const auto& v = r.verifier;
    TableWriter t(eq, "verifier");
    t.str("draft", col(v, [](const VerifierCellRow& x) { return x.draft; }));
    t.f64("temperature", col(v, [](const VerifierCellRow& x) { return x.sampling.temperature; }));
    t.f64("top_p", col(v, [](const VerifierCellRow& x) { return x.sampling.top_p; }));
    t.i64("top_k", col(v, [](const VerifierCellRow& x) { return x.sampling.top_k; }));
    t.i64("k", col(v, [](const VerifierCellRow& x) { return int64_t{x.k}; }));
    t.i64("n", col(v, [](const VerifierCellRow& x) { return x.n; }));
    t.i64("vocab", col(v, [](const VerifierCellRow& x) { return x.vocab; }));
    t.i64("cells", col(v, [](const VerifierCellRow& x) { return x.cells; }));
    t.i64("tested", col(v, [](const VerifierCellRow& x) { return x.verdict.tested; }));
    t.i64("vacuous", col(v, [](const VerifierCellRow& x) { return x.verdict.vacuous; }));
    t.i64("recovered", col(v, [](const VerifierCellRow& x) { return x.recovered; }));
    t.i64("bonus", col(v, [](const VerifierCellRow& x) { return x.bonus; }));
    t.f64("acceptance", col(v, [](const VerifierCellRow& x) { return x.acceptance; }));
    t.f64("min_p", col(v, [](const VerifierCellRow& x) { return x.verdict.min_p; }));
    t.f64("p_bonferroni", col(v, [](const VerifierCellRow& x) { return x.verdict.p_bonferroni; }));
    t.f64("holm_p", col(v, [](const VerifierCellRow& x) { return x.holm_p; }));
    t.f64("max_tv", col(v, [](const VerifierCellRow& x) { return x.verdict.max_tv; }));
    t.f64("min_radius", col(v, [](const VerifierCellRow& x) { return x.verdict.min_radius; }));
    t.f64("max_radius", col(v, [](const VerifierCellRow& x) { return x.verdict.max_radius; }));
    t.finish();
  }
  {
    const auto& v = r.verifier_controls;
    TableWriter t(eq, "verifier_controls");
    t.str("draft", col(v, [](const VerifierControlRow& x) { return x.draft; }));
    t.str("control", col(v, [](const VerifierControlRow& x) { return x.control; }));
    t.f64("temperature", col(v, [](const VerifierControlRow& x) { return x.sampling.temperature; }));
    t.f64("top_p", col(v, [](const VerifierControlRow& x) { return x.sampling.top_p; }));
    t.i64("top_k", col(v, [](const VerifierControlRow& x) { return x.sampling.top_k; }));
    t.i64("k", col(v, [](const VerifierControlRow& x) { return int64_t{x.k}; }));
    t.u8("applicable", col(v, [](const VerifierControlRow& x) { return static_cast<uint8_t>(x.applicable); }));
    t.u8("caught", col(v, [](const VerifierControlRow& x) { return static_cast<uint8_t>(x.caught); }));
    t.i64("caught_n", col(v, [](const VerifierControlRow& x) { return x.caught_n; }));
    t.f64("p_bonferroni", col(v, [](const VerifierControlRow& x) { return x.p_bonferroni; }));
    t.f64("q_tv", col(v, [](const VerifierControlRow& x) { return x.q_tv; }));
    t.str("note", col(v, [](const VerifierControlRow& x) { return x.note; }));
    t.finish();
  }
  {
    const auto& g = r.groups;
    TableWriter t(eq, "sampling_groups");
    t.i64("group", col(g, [](const SamplingGroup& x) { return x.index; }));
    t.i64("context", col(g, [](const SamplingGroup& x) { return x.context; }));
    t.str("prompt_id", col(g, [](const SamplingGroup& x) { return x.prompt_id; }));
    t.f64("temperature", col(g, [](const SamplingGroup& x) { return x.sampling.temperature; }));
    t.f64("top_p", col(g, [](const SamplingGroup& x) { return x.sampling.top_p; }));
    t.i64("top_k", col(g, [](const SamplingGroup& x) { return x.sampling.top_k; }));
    t.i64("n", col(g, [](const SamplingGroup& x) { return x.n; }));
    t.i64("exact_prefixes", col(g, [](const SamplingGroup& x) { return x.exact_prefixes; }));
    t.f64("exact_covered", col(g, [](const SamplingGroup& x) { return x.exact_covered; }));
    t.f64("ar_seconds", col(g, [](const SamplingGroup& x) { return x.ar_seconds; }));
    t.finish();
  }
  {
    const auto& c = r.cells;
    TableWriter t(eq, "sampling_cells");
    t.i64("cell", col(c, [](const SamplingCell& x) { return x.index; }));
    t.i64("group", col(c, [](const SamplingCell& x) { return x.group; }));
    t.str("drafter", col(c, [](const SamplingCell& x) { return x.drafter; }));
    t.i32("gamma", col(c, [](const SamplingCell& x) { return static_cast<int32_t>(x.gamma); }));
    t.i64("n", col(c, [](const SamplingCell& x) { return x.n; }));
    // uint64, as sampling.seed is (int64 stored seeds from 2^63 on as negative numbers until 2026-12-06).
    t.u64("seed", col(c, [](const SamplingCell& x) { return static_cast<uint64_t>(x.seed_base); }));
    t.f64("acceptance_rate", col(c, [](const SamplingCell& x) { return x.acceptance_rate; }));
    t.f64("spec_seconds", col(c, [](const SamplingCell& x) { return x.spec_seconds; }));
    t.f64("min_holm_p", col(c, [](const SamplingCell& x) { return x.min_holm_p; }));
    t.u8("pass", col(c, [](const SamplingCell& x) { return static_cast<uint8_t>(x.pass); }));
    t.f64("detectable_tv", col(c, [](const SamplingCell& x) { return x.detectable_tv; }));
    // Per control of the report (equivalence.controls): C_applicable, C_caught, ...
    for (size_t k = 0; k < r.control_names.size(); ++k) {
      const std::string& p = r.control_names[k];
      auto at = [k](const SamplingCell& x) -> const ControlOutcome& {
        static const ControlOutcome none;
        return k < x.controls.size() ? x.controls[k] : none;
      };
      t.u8(p + "_applicable", col(c, [&](const SamplingCell& x) { return static_cast<uint8_t>(at(x).applicable); }));
      t.u8(p + "_caught", col(c, [&](const SamplingCell& x) { return static_cast<uint8_t>(at(x).caught); }));
      t.f64(p + "_min_p", col(c, [&](const SamplingCell& x) {
              return at(x).applicable ? at(x).min_p : std::numeric_limits<double>::quiet_NaN();
            }));
      t.i64(p + "_tests", col(c, [&](const SamplingCell& x) { return at(x).tests; }));
      t.i64(p + "_power_n", col(c, [&](const SamplingCell& x) { return at(x).power_n; }));
      t.f64(p + "_q_tv", col(c, [&](const SamplingCell& x) { return at(x).q_tv; }));
      t.str(p + "_note", col(c, [&](const SamplingCell& x) { return at(x).note; }));
    }
    t.finish();
  }
  {
    const auto& s = r.tests;
    TableWriter t(eq, "sampling_tests");
    t.i64("group", col(s, [](const TestRow& x) { return x.group; }));
    t.i64("cell", col(s, [](const TestRow& x) { return x.cell; }));
    t.str("subject", col(s, [](const TestRow& x) { return x.test.subject; }));
    t.str("test", col(s, [](const TestRow& x) { return x.test.test; }));
    t.i32("m", col(s, [](const TestRow& x) { return static_cast<int32_t>(x.test.m); }));
    t.i64("n_a", col(s, [](const TestRow& x) { return x.test.stats.n_a; }));
    t.i64("n_b", col(s, [](const TestRow& x) { return x.test.stats.n_b; }));
    t.i64("cells", col(s, [](const TestRow& x) { return x.test.stats.cells; }));
    t.f64("statistic", col(s, [](const TestRow& x) { return x.test.stats.statistic; }));
    t.i64("dof", col(s, [](const TestRow& x) { return x.test.stats.dof; }));
    t.f64("p_value", col(s, [](const TestRow& x) { return x.test.stats.p_value; }));
    t.f64("g_statistic", col(s, [](const TestRow& x) { return x.test.stats.g_statistic; }));
    t.f64("g_p_value", col(s, [](const TestRow& x) { return x.test.stats.g_p_value; }));
    t.f64("tv", col(s, [](const TestRow& x) { return x.test.stats.tv; }));
    t.f64("tv_radius", col(s, [](const TestRow& x) { return x.test.stats.tv_radius; }));
    t.u8("in_family", col(s, [](const TestRow& x) { return static_cast<uint8_t>(x.in_family); }));
    t.f64("holm_p", col(s, [](const TestRow& x) { return x.holm_p; }));
    t.u8("reject", col(s, [](const TestRow& x) { return static_cast<uint8_t>(x.reject); }));
    t.finish();
  }
  {
    const auto& p = r.power;
    TableWriter t(eq, "power");
    t.i64("cell", col(p, [](const PowerRow& x) { return x.cell; }));
    t.str("control", col(p, [](const PowerRow& x) { return x.control; }));
    t.i64("n", col(p, [](const PowerRow& x) { return x.point.n; }));
    t.f64("min_p", col(p, [](const PowerRow& x) { return x.point.min_p; }));
    t.i64("tests", col(p, [](const PowerRow& x) { return x.point.tests; }));
    t.u8("caught", col(p, [](const PowerRow& x) { return static_cast<uint8_t>(x.point.caught); }));
    t.finish();
  }
  {
    const auto& f = r.frequencies;
    TableWriter t(eq, "frequencies");
    t.i64("cell", col(f, [](const FrequencyRow& x) { return x.cell; }));
    t.i32("position", col(f, [](const FrequencyRow& x) { return static_cast<int32_t>(x.position); }));
    t.i32("token", col(f, [](const FrequencyRow& x) { return static_cast<int32_t>(x.token); }));
    t.str("text", col(f, [](const FrequencyRow& x) { return x.text; }));
    t.i64("ar", col(f, [](const FrequencyRow& x) { return x.ar; }));
    t.i64("speculative", col(f, [](const FrequencyRow& x) { return x.speculative; }));
    for (size_t k = 0; k < r.control_names.size(); ++k)
      t.i64(r.control_names[k], col(f, [k](const FrequencyRow& x) {
              return k < x.controls.size() ? x.controls[k] : int64_t{-1};
            }));
    t.f64("exact", col(f, [](const FrequencyRow& x) { return x.exact; }));
    t.finish();
  }
}

}  // namespace

bool check_equivalence_output(const std::string& path, const std::string& name, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool present = fs::exists(path, ec);
  if (present && !overwrite)
    throw Error(ErrorKind::kConfig, "expected no file at the output path, found one (pass --overwrite to replace it)",
                path, "output.path");
  if (!present) return false;
  if (fs::is_directory(path, ec))
    throw Error(ErrorKind::kConfig, "expected an output file path, found a directory", path, "output.path");
  bool experiment_file = false;
  try {
    H5::Exception::dontPrint();
    if (hdf5_writer_holds(path))
      throw Error(ErrorKind::kIo, "expected a file no process is writing, found one a running `speclab run` holds; "
                                  "wait for it to finish or pick another --out", path, "output.path");
    recover_hdf5_journal(path);  // a killed run's half-copied commit, before reading the file
    if (H5::H5File::isHdf5(path)) {
      H5::H5File f(path, H5F_ACC_RDONLY);
      experiment_file = exists(f, "runs");
      if (experiment_file && H5Aexists(f.getId(), "name") > 0) {
        std::string found;
        H5::Attribute a = f.openAttribute("name");
        a.read(a.getStrType(), found);
        if (found != name)
          throw Error(ErrorKind::kConfig,
                      "expected the experiment file of '" + name + "' (the check attaches its results to its "
                          "own experiment's runs), found the file of experiment '" + found + "'; pick another --out",
                      path, "output.path");
      }
    }
  } catch (const H5::Exception& e) {
    throw Error(ErrorKind::kIo, "cannot read the existing output file: " + e.getDetailMsg(), path, "output.path");
  }
  return experiment_file;
}


// The check's own config (after --set) and build, in its group: attached to an experiment file,
// the root's /config_yaml and git_revision are the run's, and a check of other settings (another
// drafter, temperature or seed) was filed under them with no record of its own (until 2026-12-07).
void write_group_provenance(H5::H5File& f, const EquivalenceFileMeta& meta) {
  H5::Group eq = f.openGroup("equivalence");
  attr_str(eq, "git_revision", meta.git_revision);
  H5::StrType t = utf8_type();
  H5::DataSet ds = eq.createDataSet("config_yaml", t, H5::DataSpace(H5S_SCALAR));
  const char* p = meta.config_yaml.c_str();
  ds.write(&p, t);
}

namespace {

// `bytes` written to `tmp` whole, or Error(kIo) naming `path` (the file the user named) and the cause.
void write_bytes(const std::string& tmp, const std::vector<char>& bytes, const std::string& path) {
  errno = 0;
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  int err = f != nullptr ? 0 : (errno != 0 ? errno : EIO);
  if (f != nullptr) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) err = errno != 0 ? errno : EIO;
    if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;  // a full disk shows at the flush
  }
  if (err != 0)
    throw Error(ErrorKind::kIo, std::string("could not write the equivalence results: ") + std::strerror(err), path,
                "output.path");
}

}  // namespace

void write_equivalence(const std::string& given, const EquivalenceReport& report, const EquivalenceFileMeta& meta,
                       bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool experiment_file = check_equivalence_output(given, report.name, overwrite);
  // Through a symbolic link: the file it leads to gets the results, and the link stays.
  const std::string path = replace_target(given);
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec))
    throw Error(ErrorKind::kIo, "expected an existing directory for the output file, found none", dir.string(),
                "output.path");
  // An experiment file is locked as its writer locks it (hdf5_journal.h) from before it is read
  // until its replacement is in place: a `speclab run --resume` starting meanwhile is refused,
  // where it would have committed runs to the file about to be replaced.
  int lock_fd = -1;
  struct CloseLock {
    int& fd;
    ~CloseLock() {
      if (fd >= 0) ::close(fd);
    }
  } close_lock{lock_fd};
  if (experiment_file) {
    lock_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (lock_fd < 0)
      throw Error(ErrorKind::kIo, std::string("cannot open the existing output file: ") + std::strerror(errno), path,
                  "output.path");
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
      throw Error(ErrorKind::kIo, "expected a file no process is writing, found one a running `speclab run` holds; "
                                  "wait for it to finish or pick another --out", path, "output.path");
  }
  // The file is built in memory (HDF5's core driver: an experiment file's image is read in,
  // its /equivalence replaced there) and written whole to a temporary, then renamed onto `path`:
  // a failed write (a full disk) or a kill leaves the file as it was. Until 2026-12-07 an
  // experiment file was changed in place, and a write that failed half way left its /runs
  // unreadable for good (and HDF5 crashed at exit on the file it could not close). The costs:
  // memory for two copies of the file and the whole file written again. The new file keeps the
  // old one's mode and owner (replace_file; they were the process's defaults until 2026-12-07).
  std::vector<char> image;
  try {
    H5::Exception::dontPrint();
    // The core driver without a backing store: an existing file is read into memory when it is
    // opened, and nothing is written back to it. HDF5's own lock would collide with ours.
    H5::FileAccPropList fapl;
    fapl.setCore(1 << 20, false);
    H5Pset_file_locking(fapl.getId(), false, true);
    H5::H5File f(path, experiment_file ? H5F_ACC_RDWR : H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, fapl);
    H5::Group root = f.openGroup("/");
    if (experiment_file) {
      if (exists(f, "equivalence")) H5Ldelete(f.getId(), "equivalence", H5P_DEFAULT);
    } else {
      attr_str(root, "kind", "speclab-equivalence");
      attr_str(root, "name", report.name);
      attr_str(root, "git_revision", meta.git_revision);
      H5::StrType t = utf8_type();
      H5::DataSet ds = f.createDataSet("config_yaml", t, H5::DataSpace(H5S_SCALAR));
      const char* p = meta.config_yaml.c_str();
      ds.write(&p, t);
    }
    write_group(root, report);
    write_group_provenance(f, meta);
    f.flush(H5F_SCOPE_GLOBAL);
    const ssize_t size = H5Fget_file_image(f.getId(), nullptr, 0);
    if (size <= 0) throw Error(ErrorKind::kIo, "could not write the equivalence results (file image)", path, "output.path");
    image.resize(static_cast<size_t>(size));
    if (H5Fget_file_image(f.getId(), image.data(), image.size()) != size)
      throw Error(ErrorKind::kIo, "could not write the equivalence results (file image)", path, "output.path");
  } catch (const H5::Exception& e) {
    throw Error(ErrorKind::kIo, "could not write the equivalence results: " + e.getDetailMsg(), path, "output.path");
  }
  if (experiment_file || overwrite) {
    replace_file(path, [&](const std::string& tmp) { write_bytes(tmp, image, path); });
    return;
  }
  // A new file: of two checks racing for one new path the second is refused (create_file).
  if (!create_file(path, [&](const std::string& tmp) { write_bytes(tmp, image, path); }))
    throw Error(ErrorKind::kConfig,
                "expected no file at the output path, found one written meanwhile (pass --overwrite to replace it)",
                path, "output.path");
}

}  // namespace speclab
