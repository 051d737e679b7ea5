// require_regular_file() — refuse a path that is not a plain file before a reader sizes it.
// names_a_directory() — a path that cannot name a file at all ("out/", "out/.", "..").
//
// std::ifstream opens a directory without complaint on Linux, and seekg(end)/tellg() then report
// a size of about 2^63: a reader that allocates that many bytes dies with std::length_error
// ("internal error", exit 1) instead of a bad-input line naming the file.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "framework/core/error.h"

namespace speclab {

// Throws Error(kIo, "cannot open: <reason>" or "expected a file, found a directory" / "... found
// something that is not a regular file", path) unless `path` names a regular file (symlinks followed).
inline void require_regular_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::kIo, std::string("cannot open: ") + std::strerror(errno), path);
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::kIo,
                std::string("expected a file, found ") +
                    (S_ISDIR(st.st_mode) ? "a directory" : "something that is not a regular file"),
                path);
}

// True for a path whose last component names no file: empty (it ends in '/'), "." or "..". An
// output at such a path is refused before its directories are made (they were made, then refused).
inline bool names_a_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string last = slash == std::string::npos ? path : path.substr(slash + 1);
  return !path.empty() && (last.empty() || last == "." || last == "..");
}

}  // namespace speclab
