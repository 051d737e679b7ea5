// BuildTmpDir — a fresh directory under the build tree for one test, removed with its contents
// when the object dies: <build>/test_tmp/<prefix>_<name>_<pid> (the pid keeps parallel CTest
// processes apart). Needs SPECLAB_BINARY_DIR, which tests/CMakeLists.txt defines.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace speclab::test {

class BuildTmpDir {
 public:
  BuildTmpDir(const std::string& prefix, const std::string& name)
      : path_(std::filesystem::path(SPECLAB_BINARY_DIR) / "test_tmp" /
              (prefix + "_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~BuildTmpDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  BuildTmpDir(const BuildTmpDir&) = delete;
  BuildTmpDir& operator=(const BuildTmpDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace speclab::test
