// HDF5 experiment recorder: round trip, plain types only, crash leftovers ignored by readers and
// cut off by resume, and corrupted or foreign files rejected with a clear error.
#include <catch2/catch.hpp>

#include <H5Cpp.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "framework/core/error.h"
#include "framework/core/utf8_check.h"
#include "framework/io/hdf5_recorder.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

std::string temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "speclab_h5_XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

ExperimentMetadata meta() {
  ExperimentMetadata m;
  m.name = "unit";
  m.config_yaml = "name: unit\n";
  m.git_revision = "abc";
  m.torch_version = "1.13";
  m.cpu_model = "cpu";
  m.cpu_cores = 2;
  m.memory_bytes = 1 << 30;
  m.start_time = "2024-01-01T00:00:00Z";
  return m;
}

RunRecord spec_run(int64_t prompt, int64_t repeat) {
  RunRecord r;
  r.key = {0, prompt, "pl", repeat};
  r.prompt_id = "p" + std::to_string(prompt);
  r.category = "naïve ✓";  // non-ASCII UTF-8 must round-trip
  r.drafter = "prompt_lookup";
  r.gamma = 2;
  r.tokens = {5, 6, 7};
  r.n_generated = 3;
  r.text = "héllo\nworld";
  r.target_forwards = 3;
  r.wall_seconds = 0.5;
  r.lossless = 1;
  StepRecord s;
  s.drafted = 2;
  s.accepted = 1;
  s.p = {0.9f, 0.2f};
  s.q = {1.0f, 1.0f};
  s.accept_prob = {0.9f, std::nanf("")};
  s.accepted_mask = {1, 0};
  s.source = "prompt_lookup";
  r.steps = {s, StepRecord{}};
  return r;
}

std::vector<PointRecord> points() { return {{0, {{"drafter.num_speculative_tokens", "2"}}, "drafter.num_speculative_tokens=2"}}; }
std::vector<PromptRecord> prompts() { return {{"p0", "c", "text 0"}, {"p1", "c", "text 1"}}; }

// Appends rows to a table's columns without bumping `complete`, as a writer killed mid-append
// leaves them.
void append_raw(H5::H5File& f, const std::string& table, int64_t run_id, hsize_t n) {
  H5::Group g = f.openGroup(table);
  const hsize_t nobj = g.getNumObjs();
  for (hsize_t i = 0; i < nobj; ++i) {
    const std::string name = g.getObjnameByIdx(i);
    H5::DataSet ds = g.openDataSet(name);
    hsize_t dims[1];
    ds.getSpace().getSimpleExtentDims(dims);
    const hsize_t total[1] = {dims[0] + n}, start[1] = {dims[0]}, count[1] = {n};
    H5Dset_extent(ds.getId(), total);
    H5::DataSpace fs = ds.getSpace();
    fs.selectHyperslab(H5S_SELECT_SET, count, start);
    H5::DataSpace ms(1, count);
    if (ds.getTypeClass() == H5T_STRING) {
      std::vector<const char*> v(n, "junk");
      ds.write(v.data(), ds.getStrType(), ms, fs);
    } else {
      std::vector<int64_t> v(n, name == "run_id" ? run_id : 0);
      ds.write(v.data(), H5::PredType::NATIVE_INT64, ms, fs);
    }
  }
}

}  // namespace

TEST_CASE("recorder round trip: runs, steps, positions, tokens, UTF-8 strings", "[hdf5]") {
  const std::string dir = temp_dir(), path = dir + "/a.h5";
  {
    Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
    RunRecord a = spec_run(0, 0), b = spec_run(1, 0);
    rec.append(a);
    rec.append(b);
    CHECK(a.run_id == 0);
    CHECK(b.run_id == 1);
  }
  const ExperimentData d = read_experiment(path);
  CHECK(d.config_yaml == "name: unit\n");
  REQUIRE(d.points.size() == 1);
  CHECK(d.points[0].values.at("drafter.num_speculative_tokens") == "2");
  CHECK(d.prompts.size() == 2);
  CHECK(d.methods == std::vector<std::string>{"ar", "pl"});
  REQUIRE(d.runs.size() == 2);
  const RunRecord& r = d.runs[1];
  const RunRecord want = spec_run(1, 0);
  CHECK(r.key == want.key);
  CHECK(r.category == want.category);
  CHECK(r.text == want.text);
  CHECK(r.tokens == want.tokens);
  CHECK(r.lossless == 1);
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[0].p == want.steps[0].p);
  CHECK(r.steps[0].accepted_mask == want.steps[0].accepted_mask);
  CHECK(std::isnan(r.steps[0].accept_prob[1]));
  CHECK(r.steps[1].drafted == 0);
  CHECK(r.steps[0].source == "prompt_lookup");
  CHECK(r.steps[1].source.empty());
  fs::remove_all(dir);
}

TEST_CASE("generated text that is not well-formed UTF-8 is written with U+FFFD", "[hdf5][utf8]") {
  // A length stop that cuts a character (U+1F600's first two bytes) and a lone byte token: the
  // file's strings are declared UTF-8, and h5py's asstr() failed on such a row.
  const std::string dir = temp_dir(), path = dir + "/t.h5";
  {
    Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
    RunRecord a = spec_run(0, 0), b = spec_run(1, 0);
    a.text = "cut \xF0\x9F";
    b.text = "a\xFF" "b \xC3\xA9";
    rec.append(a);
    rec.append(b);
  }
  const ExperimentData d = read_experiment(path);
  REQUIRE(d.runs.size() == 2);
  CHECK(d.runs[0].text == "cut \xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(d.runs[1].text == "a\xEF\xBF\xBD" "b \xC3\xA9");
  CHECK(first_invalid_utf8(d.runs[0].text) == std::string::npos);
  CHECK(utf8_replacing_invalid("ok \xF0\x9F\x98\x80") == "ok \xF0\x9F\x98\x80");  // well-formed: unchanged
  fs::remove_all(dir);
}

TEST_CASE("a file from before /steps/source reads it as empty, and resuming it creates the column",
          "[hdf5][resume]") {
  const std::string dir = temp_dir(), path = dir + "/old.h5";
  {
    Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
    RunRecord a = spec_run(0, 0);
    rec.append(a);
  }
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    REQUIRE(H5Ldelete(f.getId(), "/steps/source", H5P_DEFAULT) >= 0);  // as files written before it
  }
  ExperimentData d = read_experiment(path);
  REQUIRE(d.runs.size() == 1);
  REQUIRE(d.runs[0].steps.size() == 2);
  CHECK(d.runs[0].steps[0].source.empty());
  CHECK(d.runs[0].steps[0].drafted == 2);
  {
    Hdf5Recorder rec = Hdf5Recorder::open_for_append(path);
    RunRecord b = spec_run(1, 0);
    rec.append(b);
  }
  d = read_experiment(path);
  REQUIRE(d.runs.size() == 2);
  CHECK(d.runs[0].steps[0].source.empty());  // the rows from before the column: empty
  CHECK(d.runs[1].steps[0].source == "prompt_lookup");
  CHECK(d.runs[1].steps[1].source.empty());
  H5::H5File f(path, H5F_ACC_RDONLY);
  hsize_t dims[1];
  f.openDataSet("/steps/source").getSpace().getSimpleExtentDims(dims);
  CHECK(dims[0] == 4);  // one entry per committed step
  f.close();
  {
    // An older binary resumed the file and appended a run's steps without the column: it is now
    // shorter than the table, which it must not cut (its missing tail reads as empty).
    H5::H5File g(path, H5F_ACC_RDWR);
    const hsize_t shorter[1] = {3};
    REQUIRE(H5Dset_extent(g.openDataSet("/steps/source").getId(), shorter) >= 0);
  }
  d = read_experiment(path);
  REQUIRE(d.runs.size() == 2);
  REQUIRE(d.runs[1].steps.size() == 2);
  CHECK(d.runs[1].steps[0].source == "prompt_lookup");
  CHECK(d.runs[1].steps[1].source.empty());
  {
    Hdf5Recorder rec = Hdf5Recorder::open_for_append(path);
    RunRecord c = spec_run(0, 1);
    rec.append(c);
  }
  d = read_experiment(path);
  REQUIRE(d.runs.size() == 3);
  CHECK(d.runs[1].steps[0].source == "prompt_lookup");
  CHECK(d.runs[2].steps[0].source == "prompt_lookup");
  CHECK(d.runs[2].steps[1].source.empty());
  fs::remove_all(dir);
}

TEST_CASE("recorder writes plain types only, with schema_version and gzip-chunked columns", "[hdf5]") {
  const std::string dir = temp_dir(), path = dir + "/b.h5";
  {
    Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
    RunRecord a = spec_run(0, 0);
    rec.append(a);
    ExperimentData d = rec.read();
    rec.write_summary(summarize(d));
  }
  H5::H5File f(path, H5F_ACC_RDONLY);
  int64_t version = 0;
  f.openGroup("/").openAttribute("schema_version").read(H5::PredType::NATIVE_INT64, &version);
  CHECK(version == 1);
  int n_datasets = 0;
  std::function<void(const H5::Group&, const std::string&)> walk = [&](const H5::Group& g, const std::string& at) {
    for (hsize_t i = 0; i < g.getNumObjs(); ++i) {
      const std::string name = g.getObjnameByIdx(i);
      if (g.getObjTypeByIdx(i) == H5G_GROUP) {
        walk(g.openGroup(name), at + "/" + name);
        continue;
      }
      H5::DataSet ds = g.openDataSet(name);
      INFO(at + "/" + name);
      const H5T_class_t cls = ds.getTypeClass();
      CHECK((cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_STRING));
      if (cls == H5T_STRING) {
        CHECK(ds.getStrType().isVariableStr());
      }
      if (name != "config_yaml") {
        const H5::DSetCreatPropList pl = ds.getCreatePlist();
        CHECK(pl.getLayout() == H5D_CHUNKED);
        CHECK(pl.getNfilters() >= 1);
      }
      ++n_datasets;
    }
  };
  walk(f.openGroup("/"), "");
  CHECK(n_datasets > 50);
  fs::remove_all(dir);
}

TEST_CASE("rows a killed writer left behind are ignored, and resume cuts them off", "[hdf5][resume]") {
  const std::string dir = temp_dir(), path = dir + "/c.h5";
  {
    Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
    RunRecord a = spec_run(0, 0);
    rec.append(a);
  }
  {
    // The next run's children and half of its /runs columns, never committed.
    H5::H5File f(path, H5F_ACC_RDWR);
    append_raw(f, "steps", 1, 3);
    append_raw(f, "positions", 1, 4);
    append_raw(f, "tokens", 1, 5);
    append_raw(f, "runs", 1, 1);
  }
  ExperimentData d = read_experiment(path);
  REQUIRE(d.runs.size() == 1);
  CHECK(d.runs[0].steps.size() == 2);
  CHECK(d.runs[0].tokens.size() == 3);
  {  // An end time left by an earlier end (a SIGINT'd run records one) is cleared on resume.
    Hdf5Recorder rec = Hdf5Recorder::open_for_append(path);
    rec.set_root_attribute("end_time", std::string("2026-12-05T13:46:49Z"));
    rec.set_root_attribute("resume_count", int64_t{0});
  }
  {
    Hdf5Recorder rec = Hdf5Recorder::open_for_append(path);
    CHECK(rec.root_int_attribute("resume_count", -1) == 1);
    RunRecord b = spec_run(1, 0);
    rec.append(b);
    CHECK(b.run_id == 1);
  }
  d = read_experiment(path);
  REQUIRE(d.runs.size() == 2);
  CHECK(d.runs[1].key.prompt == 1);
  CHECK(d.runs[1].steps.size() == 2);
  CHECK(d.runs[1].tokens == std::vector<Token>{5, 6, 7});
  // Nothing of the junk rows survived: every table holds exactly the committed rows.
  H5::H5File f(path, H5F_ACC_RDONLY);
  {
    const H5::Attribute a = f.openGroup("/").openAttribute("end_time");
    std::string end_time;
    a.read(a.getStrType(), end_time);
    CHECK(end_time.empty());  // empty while running (it kept the earlier end until 2026-12-05)
  }
  hsize_t dims[1];
  f.openDataSet("/tokens/token").getSpace().getSimpleExtentDims(dims);
  CHECK(dims[0] == 6);
  f.openDataSet("/steps/run_id").getSpace().getSimpleExtentDims(dims);
  CHECK(dims[0] == 4);
  fs::remove_all(dir);
}

TEST_CASE("foreign and corrupted files are rejected with kBadInput", "[hdf5][bad]") {
  const std::string dir = temp_dir();
  {
    std::ofstream(dir + "/text.h5") << "not hdf5";
    try {
      read_experiment(dir + "/text.h5");
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
    }
  }
  {
    H5::H5File f(dir + "/other.h5", H5F_ACC_TRUNC);
    f.createGroup("/runs");
  }
  CHECK_THROWS_AS(read_experiment(dir + "/other.h5"), Error);
  CHECK_THROWS_AS(Hdf5Recorder::open_for_append(dir + "/other.h5"), Error);
  CHECK_THROWS_AS(read_experiment(dir + "/missing.h5"), Error);
  {
    // A run row whose run_id is not its row index.
    const std::string path = dir + "/bad.h5";
    {
      Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
      RunRecord a = spec_run(0, 0);
      rec.append(a);
    }
    {
      H5::H5File f(path, H5F_ACC_RDWR);
      const int64_t bogus = 7;
      f.openDataSet("/runs/run_id").write(&bogus, H5::PredType::NATIVE_INT64);
    }
    try {
      read_experiment(path);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK(std::string(e.what()).find("run_id") != std::string::npos);
    }
  }
  {
    // A step claiming more accepted than drafted tokens.
    const std::string path = dir + "/bad2.h5";
    {
      Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
      RunRecord a = spec_run(0, 0);
      rec.append(a);
    }
    {
      H5::H5File f(path, H5F_ACC_RDWR);
      const int64_t v[2] = {9, 0};
      f.openDataSet("/steps/accepted").write(v, H5::PredType::NATIVE_INT64);
    }
    CHECK_THROWS_AS(read_experiment(path), Error);
  }
  fs::remove_all(dir);
}

TEST_CASE("the Python reader takes path-like arguments and names the file it cannot read", "[hdf5][python]") {
  // analysis/speclab_h5.py's Experiment: a pathlib.Path raised TypeError (path + ".journal"), a
  // string schema_version ValueError, and a file that is no HDF5 file h5py's OSError without its
  // name. scripts/setup.sh installs python3-h5py: without it the test fails rather than skipping.
  const std::string py = "/usr/bin/python3";
  if (std::system((py + " -c 'import h5py' >/dev/null 2>&1").c_str()) != 0)
    FAIL("no /usr/bin/python3 with h5py (scripts/setup.sh installs python3-h5py): the Python reader is untested");
  const std::string dir = temp_dir(), path = dir + "/a.h5", bad = dir + "/v.h5", text = dir + "/t.h5";
  {
    Hdf5Recorder rec = Hdf5Recorder::create(path, meta(), points(), prompts(), {"ar", "pl"});
    RunRecord a = spec_run(0, 0);
    rec.append(a);
  }
  fs::copy_file(path, bad);
  {
    H5::H5File f(bad, H5F_ACC_RDWR);
    H5::Group root = f.openGroup("/");
    root.removeAttr("schema_version");
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    const char* one = "one";
    root.createAttribute("schema_version", t, H5::DataSpace(H5S_SCALAR)).write(t, &one);
  }
  {
    std::ofstream(text) << "not hdf5\n";
  }
  const std::string script = dir + "/check.py";
  std::ofstream(script) << "import pathlib, sys\n"
                           "sys.path.insert(0, '" SPECLAB_SOURCE_DIR "/analysis')\n"
                           "from speclab_h5 import Experiment, SchemaError\n"
                           "d = pathlib.Path(sys.argv[1])\n"
                           "assert Experiment(d / 'a.h5').n_runs == 1\n"
                           "assert Experiment(str(d / 'a.h5').encode()).n_runs == 1\n"
                           "for name, want in (('v.h5', 'schema_version: expected an integer'), "
                           "('t.h5', 'expected an HDF5 file written by SpecLab')):\n"
                           "    try:\n"
                           "        Experiment(d / name)\n"
                           "        sys.exit(name + ': no error')\n"
                           "    except SchemaError as e:\n"
                           "        assert str(d / name) in str(e) and want in str(e), str(e)\n"
                           "print('ok')\n";
  const std::string out = dir + "/out.txt";
  const int rc = std::system((py + " '" + script + "' '" + dir + "' > '" + out + "' 2>&1").c_str());
  std::ifstream in(out);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(said);
  CHECK(rc == 0);
  CHECK(said == "ok\n");
  fs::remove_all(dir);
}
