#include "framework/io/path_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "framework/core/error.h"

namespace speclab {

PathLock PathLock::acquire(const std::string& path, const std::string& what, const std::string& field) {
  const std::string lock_path = path + ".lock";
  for (;;) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw Error(ErrorKind::kIo, "cannot make the lock file " + lock_path + ": " + std::strerror(errno), path, field);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK)
        throw Error(ErrorKind::kConfig,
                    "expected no other process writing it, found another speclab " + what + " holding " + lock_path +
                        " (wait for it to end, or give this run other outputs)",
                    path, field);
      throw Error(ErrorKind::kIo, "cannot lock " + lock_path + ": " + std::strerror(err), path, field);
    }
    // The holder before us may have removed the file between our open and our flock: then we hold
    // a lock on a file no one else will find. Take the one at the path instead.
    struct stat held {}, now {};
    if (::fstat(fd, &held) == 0 && ::stat(lock_path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      return PathLock(lock_path, fd);
    ::close(fd);
  }
}

PathLock::PathLock(PathLock&& other) noexcept : lock_path_(std::move(other.lock_path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

PathLock& PathLock::operator=(PathLock&& other) noexcept {
  if (this != &other) {
    release();
    lock_path_ = std::move(other.lock_path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

PathLock::~PathLock() { release(); }

void PathLock::release() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still locked: no one can take this file after it is gone
  ::close(fd_);
  fd_ = -1;
}

}  // namespace speclab
