// require_regular_file() — refuse a path that is not a plain file before a reader sizes it.
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

}  // namespace speclab
