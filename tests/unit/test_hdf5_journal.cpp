// The experiment file's commits (framework/io/hdf5_journal.h): a commit writes what changed, not
// the file (bytes written per commit, counted by the kernel, stay bounded while the file grows
// threefold — the old rewrite-the-whole-file commit fails this); a writer killed with a complete
// journal, or half-way through copying it, leaves a file that every reader (read_experiment, the
// Python reader analysis/speclab_h5.py, --resume) completes to the last commit; and a journal
// whose writer died before it was complete is ignored.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "framework/core/error.h"
#include "framework/io/hdf5_journal.h"
#include "framework/io/hdf5_recorder.h"
#include "framework/io/path_lock.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

std::string temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "speclab_journal_XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

ExperimentMetadata meta() {
  ExperimentMetadata m;
  m.name = "journal";
  m.config_yaml = "name: journal\n";
  m.start_time = "2024-01-01T00:00:00Z";
  return m;
}

// A prompt-run shaped like stories260K's with max_new_tokens 8: 8 tokens, 4 steps of 2 drafts.
RunRecord run(int64_t repeat) {
  RunRecord r;
  r.key = {0, repeat % 2, "pl", repeat};
  r.prompt_id = "p" + std::to_string(repeat % 2);
  r.category = "c";
  r.drafter = "prompt_lookup";
  r.gamma = 2;
  for (int i = 0; i < 8; ++i) r.tokens.push_back(static_cast<Token>((repeat * 7 + i * 13) % 512));
  r.n_generated = 8;
  r.text = "Once upon a time " + std::to_string(repeat);
  r.wall_seconds = 0.001 * static_cast<double>(repeat % 97);
  for (int s = 0; s < 4; ++s) {
    StepRecord st;
    st.drafted = 2;
    st.accepted = static_cast<int32_t>((repeat + s) % 3);
    if (st.accepted > 2) st.accepted = 2;
    st.p = {0.5f + 0.001f * static_cast<float>(repeat % 100), 0.25f};
    st.q = {1.0f, 1.0f};
    st.accept_prob = {st.p[0], std::nanf("")};
    st.accepted_mask = {1, 0};
    r.steps.push_back(st);
  }
  return r;
}

Hdf5Recorder new_file(const std::string& path) {
  return Hdf5Recorder::create(path, meta(), {{0, {}, "p"}}, {{"p0", "c", "t0"}, {"p1", "c", "t1"}}, {"ar", "pl"});
}

// Bytes this process has passed to write()/pwrite() so far (/proc/self/io wchar), -1 if unknown.
long long written_bytes() {
  std::ifstream f("/proc/self/io");
  std::string key;
  long long v = 0;
  while (f >> key >> v)
    if (key == "wchar:") return v;
  return -1;
}

// Runs `body` in a child that ends with _exit(0) — or earlier, in the journal hook.
void in_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      body();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

int g_die_at = -1;
void die_at_stage(int stage) {
  if (stage == g_die_at) ::_exit(0);  // as abrupt as a SIGKILL: no destructors, no flush
}

// A file with 5 committed prompt-runs whose writer died at `stage` of the 6th commit.
void killed_during_commit(const std::string& path, int stage) {
  in_child([&] {
    Hdf5Recorder rec = new_file(path);
    for (int64_t i = 0; i < 5; ++i) {
      RunRecord r = run(i);
      rec.append(r);
    }
    g_die_at = stage;
    set_hdf5_journal_test_hook(die_at_stage);
    RunRecord r = run(5);
    rec.append(r);
    set_hdf5_journal_test_hook(nullptr);  // not reached when the hook fired
  });
}

// analysis/speclab_h5.py's Experiment(path).n_runs. scripts/setup.sh installs python3-h5py, and
// the analysis tools need it: without it the test fails rather than skipping the reader.
int python_runs(const std::string& path) {
  const std::string py = "/usr/bin/python3";
  if (std::system((py + " -c 'import h5py' >/dev/null 2>&1").c_str()) != 0)
    FAIL("no /usr/bin/python3 with h5py (scripts/setup.sh installs python3-h5py): the Python reader is untested");
  const std::string out = path + ".py.txt";
  const std::string cmd = py + " -c \"import sys; sys.path.insert(0, '" SPECLAB_SOURCE_DIR
                               "/analysis'); from speclab_h5 import Experiment; print(Experiment(sys.argv[1]).n_runs)\" '" +
                          path + "' > '" + out + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream f(out);
  int n = -1;
  f >> n;
  return n;
}

// `real`, an experiment file of 5 prompt-runs, and `link`, a symbolic link to it from another
// directory (both directories made).
void file_and_link(const std::string& real, const std::string& link) {
  fs::create_directories(fs::path(real).parent_path());
  fs::create_directories(fs::path(link).parent_path());
  {
    Hdf5Recorder rec = new_file(real);
    for (int64_t i = 0; i < 5; ++i) {
      RunRecord r = run(i);
      rec.append(r);
    }
  }
  fs::create_symlink(fs::relative(real, fs::path(link).parent_path()), link);
}

}  // namespace

TEST_CASE("a commit writes what changed: bytes per commit stay bounded while the file grows", "[hdf5][journal]") {
  const long long probe = written_bytes();
  if (probe < 0) {
    WARN("no /proc/self/io: bytes written per commit cannot be counted here; test skipped");
    return;
  }
  const std::string dir = temp_dir(), path = dir + "/grow.h5";
  int64_t n = 0;
  {
    Hdf5Recorder rec = new_file(path);
    // Mean bytes written by one commit over the next `k` commits.
    auto per_commit = [&](int k) {
      const long long before = written_bytes();
      for (int i = 0; i < k; ++i) {
        RunRecord r = run(n++);
        rec.append(r);
      }
      return static_cast<double>(written_bytes() - before) / k;
    };
    while (n < 300) per_commit(50);
    const double small = per_commit(128);  // 128: a whole cycle of the tokens' 1024-row chunks
    const auto small_file = static_cast<double>(fs::file_size(path));
    while (n < 2500) per_commit(100);
    const double large = per_commit(128);
    const auto large_file = static_cast<double>(fs::file_size(path));
    INFO("per commit: " << small << " bytes at 428 prompt-runs (file " << small_file << " bytes), " << large
                        << " at 2628 (file " << large_file << ")");
    REQUIRE(large_file > 2.5 * small_file);  // the file did grow (the old commit's cost with it)
    CHECK(large < 1.5 * small);              // the commit did not
    CHECK(large < large_file / 3);           // and is far from a rewrite of the file
  }
  const ExperimentData d = read_experiment(path);
  REQUIRE(d.runs.size() == static_cast<size_t>(n));
  CHECK(d.runs[2600].tokens == run(2600).tokens);
  CHECK(d.runs[2600].steps[3].p == run(2600).steps[3].p);
  fs::remove_all(dir);
}

TEST_CASE("a writer killed while copying its journal: readers finish the copy", "[hdf5][journal][crash]") {
  for (int stage : {0, 1}) {
    INFO("killed at stage " << stage << (stage == 0 ? " (journal complete)" : " (half copied)"));
    const std::string dir = temp_dir(), path = dir + "/k.h5";
    killed_during_commit(path, stage);
    REQUIRE(fs::exists(path + ".journal"));
    // Copies for the other readers, before read_experiment() completes the original.
    for (const char* c : {"/py.h5", "/resume.h5", "/report.h5"}) {
      fs::copy_file(path, dir + c);
      fs::copy_file(path + ".journal", dir + c + ".journal");
    }
    const ExperimentData d = read_experiment(path);
    CHECK(d.runs.size() == 6);
    CHECK(d.runs[5].tokens == run(5).tokens);
    CHECK(!fs::exists(path + ".journal"));

    const int py = python_runs(dir + "/py.h5");
    if (py >= 0) {
      CHECK(py == 6);
      CHECK(!fs::exists(dir + "/py.h5.journal"));
    }

    {
      // `speclab report`'s script finishes the copy before it opens the file. Its superblock
      // (page 0, rewritten by every commit that grows the file, so in the journal) zeroed here:
      // a report that looked at the file first would find no HDF5 file there.
      {
        std::fstream f(dir + "/report.h5", std::ios::in | std::ios::out | std::ios::binary);
        const std::string zeros(512, '\0');
        f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
      }
      const std::string cmd = "MPLBACKEND=Agg /usr/bin/python3 '" SPECLAB_SOURCE_DIR "/analysis/report.py' '" + dir +
                              "/report.h5' --out '" + dir + "/rep' > '" + dir + "/rep.txt' 2>&1";
      const int rc = std::system(cmd.c_str());
      std::ifstream log(dir + "/rep.txt");
      INFO(std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>()));
      CHECK((WIFEXITED(rc) && WEXITSTATUS(rc) == 0));
      CHECK(!fs::exists(dir + "/report.h5.journal"));
      CHECK(fs::exists(dir + "/rep/report.md"));
    }
    {
      Hdf5Recorder rec = Hdf5Recorder::open_for_append(dir + "/resume.h5");
      RunRecord r = run(6);
      rec.append(r);
    }
    CHECK(!fs::exists(dir + "/resume.h5.journal"));
    const ExperimentData resumed = read_experiment(dir + "/resume.h5");
    REQUIRE(resumed.runs.size() == 7);
    CHECK(resumed.runs[5].tokens == run(5).tokens);
    CHECK(resumed.runs[6].tokens == run(6).tokens);
    fs::remove_all(dir);
  }
}

TEST_CASE("a writer through a symbolic link killed while copying its journal: readers by the target's name finish the copy",
          "[hdf5][journal][crash]") {
  const std::string dir = temp_dir(), real = dir + "/a/real.h5", link = dir + "/b/link.h5";
  file_and_link(real, link);
  in_child([&] {  // resumed through the link, killed with the journal complete
    Hdf5Recorder rec = Hdf5Recorder::open_for_append(link);
    g_die_at = 0;
    set_hdf5_journal_test_hook(die_at_stage);
    RunRecord r = run(5);
    rec.append(r);
    set_hdf5_journal_test_hook(nullptr);
  });
  // The journal is beside the file itself (until 2026-12-07 it was beside the link, and a reader
  // by the target's name read a damaged file).
  REQUIRE(fs::exists(real + ".journal"));
  CHECK_FALSE(fs::exists(link + ".journal"));
  CHECK(hdf5_journal_path(link) == hdf5_journal_path(real));
  // The Python reader through another link to a copy, the C++ reader by the target's name.
  fs::create_directories(dir + "/c");
  fs::copy_file(real, dir + "/c/py.h5");
  fs::copy_file(real + ".journal", dir + "/c/py.h5.journal");
  fs::create_symlink("../c/py.h5", dir + "/b/py_link.h5");
  const int py = python_runs(dir + "/b/py_link.h5");
  CHECK(py == 6);
  CHECK_FALSE(fs::exists(dir + "/c/py.h5.journal"));
  const ExperimentData d = read_experiment(real);
  CHECK(d.runs.size() == 6);
  CHECK(d.runs[5].tokens == run(5).tokens);
  CHECK_FALSE(fs::exists(real + ".journal"));
  fs::remove_all(dir);
}

TEST_CASE("a new experiment file written through a symbolic link replaces the file it leads to, and the link stays",
          "[hdf5][journal]") {
  const std::string dir = temp_dir(), real = dir + "/a/real.h5", link = dir + "/b/link.h5";
  file_and_link(real, link);
  {
    Hdf5Recorder rec = new_file(link);  // as `run --overwrite` through the link
    for (int64_t i = 0; i < 2; ++i) {
      RunRecord r = run(i);
      rec.append(r);
    }
  }
  // Until 2026-12-07 the rename replaced the link with the new file, its journal beside the old one.
  CHECK(fs::is_symlink(link));
  CHECK(read_experiment(real).runs.size() == 2);
  CHECK(read_experiment(link).runs.size() == 2);
  CHECK_FALSE(fs::exists(real + ".journal"));
  CHECK_FALSE(fs::exists(link + ".journal"));
  CHECK_FALSE(fs::exists(link + ".partial"));
  fs::remove_all(dir);
}

TEST_CASE("a journal its writer did not finish is ignored: the file is the last commit", "[hdf5][journal][crash]") {
  const std::string dir = temp_dir(), path = dir + "/t.h5";
  killed_during_commit(path, 0);
  const std::string j = path + ".journal";
  REQUIRE(fs::exists(j));
  fs::resize_file(j, fs::file_size(j) - 9);  // as if killed while writing its end
  CHECK_FALSE(recover_hdf5_journal(path));
  const ExperimentData d = read_experiment(path);
  CHECK(d.runs.size() == 5);
  CHECK(d.runs[4].tokens == run(4).tokens);
  const int py = python_runs(path);
  if (py >= 0) CHECK(py == 5);
  {
    Hdf5Recorder rec = Hdf5Recorder::open_for_append(path);  // the writer removes it
    CHECK(!fs::exists(j));
    RunRecord r = run(5);
    rec.append(r);
  }
  CHECK(read_experiment(path).runs.size() == 6);
  fs::remove_all(dir);
}

TEST_CASE("a second writer, or a reader, is refused while a writer holds the file", "[hdf5][journal]") {
  const std::string dir = temp_dir(), path = dir + "/w.h5";
  Hdf5Recorder rec = new_file(path);
  RunRecord r = run(0);
  rec.append(r);
  try {
    Hdf5Recorder::open_for_append(path);
    FAIL("a second writer opened the file");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kIo);
    CHECK(std::string(e.what()).find("found one holding its lock") != std::string::npos);
  }
  try {
    read_experiment(path);
    FAIL("a reader opened the file");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("found one holding its lock") != std::string::npos);
  }
  {
    // `speclab report` says so too (it printed h5py's BlockingIOError: "Unable to open file
    // (unable to lock file ...)").
    const std::string cmd = "MPLBACKEND=Agg /usr/bin/python3 '" SPECLAB_SOURCE_DIR "/analysis/report.py' '" + path +
                            "' --out '" + dir + "/rep' > '" + dir + "/rep.txt' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir + "/rep.txt");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    INFO(text);
    CHECK((WIFEXITED(rc) && WEXITSTATUS(rc) == 2));
    CHECK(text.find("expected no process writing the file, found one holding its lock") != std::string::npos);
    CHECK(text.find("BlockingIOError") == std::string::npos);
  }
  // Replacing it (`speclab run --overwrite`) is refused too: the new file would take the path and
  // truncate the running writer's journal, and both runs would report success (until
  // 2026-11-29). The same for another create's <path>.partial.
  try {
    new_file(path);
    FAIL("a file held by a writer was replaced");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kIo);
    CHECK(std::string(e.what()).find("found one holding its lock") != std::string::npos);
  }
  RunRecord r1 = run(1);
  rec.append(r1);  // the writer goes on, its journal intact
  rec = new_file(dir + "/other.h5");  // closes w.h5
  CHECK(read_experiment(path).runs.size() == 2);
  fs::remove_all(dir);
}

// PathLock (framework/io/path_lock.h): the lock of outputs replaced by rename (train-draft's
// draft, merge's file), which cannot hold an flock of their own as the journaled HDF5 files do.
TEST_CASE("a PathLock refuses a second holder, in this process or another, until released", "[hdf5][lock]") {
  const std::string dir = temp_dir(), path = dir + "/draft.safetensors";
  {
    PathLock held = PathLock::acquire(path, "train-draft", "output.path");
    CHECK(held.lock_path() == path + ".lock");
    CHECK(fs::exists(path + ".lock"));
    try {
      (void)PathLock::acquire(path, "train-draft", "output.path");
      FAIL("a second PathLock was granted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kConfig);
      CHECK(e.file() == path);
      CHECK(e.field() == "output.path");
      CHECK(std::string(e.what()).find("found another speclab train-draft holding " + path + ".lock") !=
            std::string::npos);
    }
    // Another process: a child asks and reports 2 when refused.
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        (void)PathLock::acquire(path, "train-draft", "output.path");
        ::_exit(0);
      } catch (const Error&) {
        ::_exit(2);
      }
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 2));
    // Moved, the lock is still held once.
    PathLock moved = std::move(held);
    CHECK_THROWS_AS(PathLock::acquire(path, "train-draft", "output.path"), Error);
  }
  // Released: the lock file is gone and the lock can be taken again.
  CHECK_FALSE(fs::exists(path + ".lock"));
  { const PathLock again = PathLock::acquire(path, "merge", "OUT.h5"); }
  // A lock file a killed holder left behind (no flock on it) is taken over.
  std::ofstream(path + ".lock") << "";
  { const PathLock stale = PathLock::acquire(path, "merge", "OUT.h5"); }
  CHECK_FALSE(fs::exists(path + ".lock"));
  fs::remove_all(dir);
}
