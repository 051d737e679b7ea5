// speclab report — plots and report.md from an experiment file, by analysis/report.py run with
// the system Python (/usr/bin/python3, which has h5py and matplotlib; override with
// $SPECLAB_PYTHON).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "experiments/speclab/cli.h"
#include "framework/core/error.h"

namespace speclab::cli {

namespace fs = std::filesystem;

std::string source_dir() {
  auto has_report = [](const fs::path& d) {
    std::error_code ec;
    return !d.empty() && fs::is_regular_file(d / "analysis" / "report.py", ec);
  };
  if (const char* env = std::getenv("SPECLAB_SOURCE_DIR"); env && has_report(env)) return env;
#ifdef SPECLAB_SOURCE_DIR
  if (has_report(SPECLAB_SOURCE_DIR)) return SPECLAB_SOURCE_DIR;
#endif
  // A moved checkout: look upwards from the executable (build/speclab -> build/.. ).
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path d = exe.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path())
      if (has_report(d)) return d.string();
  return {};
}

std::string python_interpreter() {
  const char* env = std::getenv("SPECLAB_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

std::string default_report_dir(const std::string& h5_path) {
  fs::path p(h5_path);
  return (p.parent_path() / (p.stem().string() + "_report")).string();
}

void check_report_dir(const std::string& dir, const std::string& option) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) p = dir;
  for (fs::path d = p;; d = d.parent_path()) {
    const fs::file_status st = fs::status(d, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st))
        throw Error(ErrorKind::kBadInput,
                    std::string("expected a directory for the report") + (d == p ? "" : " (or a path where one can be created)") +
                        ", found a file that is not a directory at " + d.string(),
                    dir, option);
      // A file made and removed, not access(): root passes access() where writing still fails
      // (sysfs, procfs, a read-only bind mount checked per operation).
      std::string probe = (d / ".speclab_report_probe_XXXXXX").string();
      const int fd = ::mkstemp(probe.data());
      if (fd < 0)
        throw Error(ErrorKind::kBadInput,
                    "expected a writable directory for the report, cannot write in " + d.string() + ": " +
                        std::strerror(errno),
                    dir, option);
      ::close(fd);
      ::unlink(probe.c_str());
      return;
    }
    if (d == d.root_path() || d.parent_path() == d) break;
  }
  throw Error(ErrorKind::kBadInput, "expected a report directory with an existing ancestor, found none", dir, option);
}

int run_report(const std::string& h5_path, const std::string& out_dir) {
  const std::string root = source_dir();
  if (root.empty())
    throw Error(ErrorKind::kIo, "expected analysis/report.py in the SpecLab source tree, found none (set $SPECLAB_SOURCE_DIR)",
                "analysis/report.py");
  const std::string script = (fs::path(root) / "analysis" / "report.py").string();
  const std::string python = python_interpreter();
  std::cout << std::flush;
  std::cerr << std::flush;
  const pid_t pid = fork();
  if (pid < 0) throw Error(ErrorKind::kIo, "fork failed", python);
  if (pid == 0) {
    setenv("MPLBACKEND", "Agg", 1);
    // "--out=DIR" and "--" before the file: a path starting with '-' was read as an option.
    const std::string out_flag = "--out=" + out_dir;
    execl(python.c_str(), python.c_str(), script.c_str(), out_flag.c_str(), "--", h5_path.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(ErrorKind::kIo, "waitpid failed", python);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::cout << "report: " << (fs::path(out_dir) / "report.md").string() << std::endl;
    return kExitOk;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    throw Error(ErrorKind::kIo, "cannot run the report script with " + python + " (python3-h5py and python3-matplotlib needed)",
                script);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) return kExitBadInput;  // the script printed the error
  std::cerr << "error: report generation failed (" << script << " exited with status "
            << (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) << ")\n";
  return kExitInternal;
}

int cmd_report(const std::vector<std::string>& args) {
  std::string input, out_dir;
  po::options_description desc("speclab report");
  desc.add_options()
      ("input", po::value(&input), "an HDF5 file of speclab run or check, or a train-draft training log (positional)")
      ("out,o", po::value(&out_dir), "report directory (default: <input stem>_report beside the file)")
      ("help,h", "show this help");
  po::positional_options_description pos;
  pos.add("input", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: speclab report RESULTS.h5 [--out DIR]\n\n" << desc << "\n";
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(ErrorKind::kConfig, e.what(), "command line");
  }
  if (input.empty()) throw Error(ErrorKind::kConfig, "expected an experiment file, found none", "command line", "RESULTS.h5");
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (fs::is_directory(st))
    throw Error(ErrorKind::kIo, "expected an experiment or training-log HDF5 file, found a directory", input, "RESULTS.h5");
  if (!fs::is_regular_file(st))
    throw Error(ErrorKind::kIo, std::string("expected an experiment or training-log HDF5 file, found ") +
                                    (fs::exists(st) ? "a device or other special file" : "no file"),
                input, "RESULTS.h5");
  const bool given = vm.count("out") > 0;
  if (given && out_dir.empty())
    throw Error(ErrorKind::kConfig, "expected a directory path, found an empty one", "command line", "--out");
  if (!given) out_dir = default_report_dir(input);
  check_report_dir(out_dir, given ? "--out" : "report directory");
  return run_report(input, out_dir);
}

}  // namespace speclab::cli
