// PathLock: one process at a time writes an output that is not an HDF5 experiment file (those
// lock themselves, hdf5_journal.h): `train-draft`'s draft, checkpoint and log, and `merge`'s
// output, which are each replaced by rename and so cannot hold a lock of their own.
//
// The lock is an flock(2) on "<path>.lock", made beside the output and removed on release. A
// second process asking for it is refused at once, never queued: two runs that both believed
// they wrote a draft overwrote each other, and the second reported the first's file as its own
// (until 2026-12-06).
//
// Invariants: while a PathLock for `path` lives, no other PathLock for `path` exists in any
// process on this machine (flock is per open file; the lock file is re-checked after locking, so
// a file removed by a releasing holder between open and flock is not taken). Not across NFS
// clients: flock there is local or emulated, depending on the mount.
#pragma once

#include <string>

namespace speclab {

class PathLock {
 public:
  // Takes the lock on `path` (a file that may not exist yet; its directory must). Throws
  // Error(kConfig, path, field) naming `what` ("train-draft", "merge") when another process holds
  // it, and Error(kIo, path, field) when the lock file cannot be made.
  static PathLock acquire(const std::string& path, const std::string& what, const std::string& field);

  PathLock(PathLock&& other) noexcept;
  PathLock& operator=(PathLock&& other) noexcept;
  PathLock(const PathLock&) = delete;
  PathLock& operator=(const PathLock&) = delete;
  ~PathLock();  // removes the lock file, then unlocks

  const std::string& lock_path() const { return lock_path_; }

 private:
  PathLock(std::string lock_path, int fd) : lock_path_(std::move(lock_path)), fd_(fd) {}
  void release();

  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace speclab
