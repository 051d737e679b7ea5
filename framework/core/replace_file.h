// replace_file(path, write): a file written whole or not at all. write(tmp) writes the new content
// to tmp = "<path>.tmp.<host>.<pid>" (the process's own name: two writers never share it, on one
// machine or on two that share a file system), which is then renamed onto `path`. A reader never
// sees a half-written file, and one holding the old file open keeps reading it. On any exception
// from write() the temporary is removed and the exception passes on unchanged; a failed rename
// removes it too and throws Error(kIo, path).
//
// A killed writer leaves its temporary behind (a features cache of several GB): before writing,
// the temporaries of `path` that a process of this host which no longer exists left are removed
// (they piled up until 2026-12-07). Another host's are left alone: its writer may be alive.
//
// A `path` that is a symbolic link is written through: the file it leads to is replaced and the
// link kept (replace_target), as a plain open would do (until 2026-12-07 the rename replaced the
// link itself with the new file, and the file it led to kept the old content).
//
// A file that is replaced keeps its permission bits, and its owner and group where the process may
// set them (root, or a group the writer belongs to): the temporary takes them before the rename
// (keep_mode_and_owner, which `speclab run --overwrite` and `speclab merge` use too).
// Until 2026-12-07 the new file had the process's defaults (umask), so `speclab check --overwrite`
// made a 0600 results file world-readable and a 0660 one read-only to its group.
//
// Used by the GGUF writer, train-draft's drafts, checkpoints and features, its training log and
// `speclab check`'s results.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "framework/core/error.h"

namespace speclab {

namespace replace_file_detail {

inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "host";
  std::string h(buf);
  for (char& c : h)
    if (c == '/' || c == '.') c = '_';  // one path component, and '.' separates the pid
  return h;
}

// Removes "<path>.tmp.<host>.<pid>" files of this host whose process is gone.
inline void remove_stale_temporaries(const std::string& path, const std::string& host) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".tmp." + host + ".";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == -1 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

}  // namespace replace_file_detail

// The file a write to `path` replaces: `path` itself, or, when `path` is a symbolic link, the file
// it leads to (every link followed; the directories of a plain `path` are left as written, so a
// relative path stays relative).
inline std::string replace_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  const fs::path real = fs::weakly_canonical(path, ec);
  return ec || real.empty() ? path : real.string();
}

namespace replace_file_detail {
// Stale temporaries of `path` removed, then write(tmp) into this process's temporary, which is
// returned; on an exception it is removed and the exception passes on.
template <class Write>
std::string write_temporary(const std::string& path, Write&& write) {
  const std::string host = host_name();
  remove_stale_temporaries(path, host);
  const std::string tmp = path + ".tmp." + host + "." + std::to_string(::getpid());
  try {
    write(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  return tmp;
}
}  // namespace replace_file_detail

// tmp, a file about to be renamed onto `path`, takes path's permission bits and its owner and
// group, where `path` exists (the owner and group as far as the process may set them: root sets
// both, another user the group where a member, else keeps its own). A new `path`: nothing is
// changed (the process's defaults). A failed chmod throws Error(kIo, path); tmp is left to the
// caller.
inline void keep_mode_and_owner(const std::string& path, const std::string& tmp) {
  struct stat old {};
  if (::stat(path.c_str(), &old) != 0) return;
  struct stat now {};
  if (::stat(tmp.c_str(), &now) == 0 && (now.st_uid != old.st_uid || now.st_gid != old.st_gid)) {
    if (::chown(tmp.c_str(), old.st_uid, old.st_gid) != 0)
      (void)::chown(tmp.c_str(), static_cast<uid_t>(-1), old.st_gid);
  }
  // After chown, which clears the set-id bits.
  if (::chmod(tmp.c_str(), old.st_mode & 07777) != 0)
    throw Error(ErrorKind::kIo, "cannot give the new file " + tmp + " the mode of the file it replaces: " +
                                    std::strerror(errno), path);
}

template <class Write>
void replace_file(const std::string& given, Write&& write) {
  const std::string path = replace_target(given);
  const std::string tmp = replace_file_detail::write_temporary(path, write);
  try {
    keep_mode_and_owner(path, tmp);
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

// create_file(path, write): as replace_file, for a file that must not exist yet. The temporary is
// linked into place, so that of two writers racing for one new path the second learns of the
// first (a rename would silently replace its file): returns false, nothing changed, when a file
// is at `path` by then. Where the file system has no hard links (vfat, some FUSE and CIFS mounts)
// the temporary is renamed instead, without that protection. Other failures: Error(kIo, path).
template <class Write>
bool create_file(const std::string& given, Write&& write) {
  const std::string path = replace_target(given);
  const std::string tmp = replace_file_detail::write_temporary(path, write);
  int err = ::link(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
  if (err == EEXIST) {  // a retransmitted NFS link can say so of its own success: two names then
    struct stat st {};
    if (::stat(tmp.c_str(), &st) == 0 && st.st_nlink == 2) err = 0;
  }
  if (err == EPERM || err == ENOTSUP || err == EOPNOTSUPP || err == ENOSYS)
    err = std::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
  std::remove(tmp.c_str());  // a no-op after the rename
  if (err == EEXIST) return false;
  if (err != 0) throw Error(ErrorKind::kIo, "cannot link the temporary file " + tmp + " into place: " + std::strerror(err), path);
  return true;
}

}  // namespace speclab
