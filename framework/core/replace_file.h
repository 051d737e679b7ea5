// replace_file(path, write): a file written whole or not at all. write(tmp) writes the new content
// to tmp = "<path>.tmp.<pid>" (the process's own name: two writers never share it), which is then
// renamed onto `path`. A reader never sees a half-written file, and one holding the old file open
// keeps reading it. On any exception from write() the temporary is removed and the exception
// passes on unchanged; a failed rename removes it too and throws Error(kIo, path).
//
// Used by the GGUF writer, train-draft's drafts, checkpoints and features, and its training log.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "framework/core/error.h"

namespace speclab {

template <class Write>
void replace_file(const std::string& path, Write&& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    write(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw Error(ErrorKind::kIo, "cannot rename the temporary file " + tmp + " onto it: " + std::strerror(err), path);
  }
}

}  // namespace speclab
