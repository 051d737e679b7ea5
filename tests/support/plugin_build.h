// Building drafter plugins for the tests, into SPECLAB_BINARY_DIR/plugin_test: the examples in
// experiments/plugins/ out of tree with their own CMakeLists.txt, exactly as docs/plugins.md
// tells a user to. Hold a PluginBuildLock while building: it makes concurrent test processes
// (ctest -j) build once, and later runs rebuild only what is out of date.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace speclab::testing {

inline const std::string kPluginOut = std::string(SPECLAB_BINARY_DIR) + "/plugin_test";

// Single-quoted for /bin/sh.
inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `command` (output to `log`); on failure, throws with the log.
inline void run_or_throw(const std::string& command, const std::string& log) {
  const int rc = std::system(("(" + command + ") > " + sh_quote(log) + " 2>&1").c_str());
  if (rc != 0) throw std::runtime_error("command failed (" + std::to_string(rc) + "): " + command + "\n" + read_text(log));
}

// An exclusive lock on kPluginOut/.lock (created with the directory) for as long as it lives.
class PluginBuildLock {
 public:
  PluginBuildLock() {
    run_or_throw("mkdir -p " + sh_quote(kPluginOut), kPluginOut + ".mkdir.log");
    fd_ = ::open((kPluginOut + "/.lock").c_str(), O_CREAT | O_RDWR, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + kPluginOut + "/.lock");
  }
  ~PluginBuildLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  PluginBuildLock(const PluginBuildLock&) = delete;
  PluginBuildLock& operator=(const PluginBuildLock&) = delete;

 private:
  int fd_ = -1;
};

// How an out-of-tree plugin finds SpecLab (docs/plugins.md, section 5): through a build
// directory's SpecLabConfig.cmake (-DSpecLab_DIR, the documented command), or through the
// checkout (-DSPECLAB_SOURCE_DIR).
enum class PluginRoute { kBuildDir, kSourceDir };

// Configures and builds experiments/plugins/<example> into kPluginOut/<build_name> against this
// checkout or this build; returns the build directory. Call under a PluginBuildLock.
inline std::string build_example_plugin(const std::string& example, const std::string& build_name,
                                        PluginRoute route = PluginRoute::kSourceDir) {
  const std::string source = std::string(SPECLAB_SOURCE_DIR);
  const std::string build = kPluginOut + "/" + build_name;
  const std::string find = route == PluginRoute::kBuildDir ? " -DSpecLab_DIR=" + sh_quote(SPECLAB_BINARY_DIR)
                                                           : " -DSPECLAB_SOURCE_DIR=" + sh_quote(source);
  run_or_throw("cmake -S " + sh_quote(source + "/experiments/plugins/" + example) + " -B " + sh_quote(build) + find +
                   " && cmake --build " + sh_quote(build),
               kPluginOut + "/" + build_name + ".log");
  return build;
}

}  // namespace speclab::testing
