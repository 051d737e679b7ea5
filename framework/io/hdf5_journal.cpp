#include "framework/io/hdf5_journal.h"

#include "framework/core/replace_file.h"

#include <H5FDpublic.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/fnv.h"

namespace speclab {

namespace {

constexpr uint64_t kPage = 512;
constexpr uint64_t kNoFile = uint64_t(1) << 62;  // a boundary above every address
constexpr char kHead[8] = {'S', 'L', 'J', 'R', 'N', 'L', '0', '1'};
constexpr char kTail[8] = {'S', 'L', 'J', 'E', 'N', 'D', '0', '1'};

// The journal's checksum: Fnv64 (framework/core/fnv.h) of the record's bytes.
uint64_t fnv1a(const char* p, size_t n) {
  Fnv64 f;
  f.add(p, n);
  return f.h;
}

// Reads [addr, addr + n) of `fd`; bytes past the end of the file read as zeros (as sec2 does).
bool pread_all(int fd, char* p, size_t n, uint64_t addr) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(addr));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) {
      std::memset(p, 0, n);
      return true;
    }
    p += r, n -= static_cast<size_t>(r), addr += static_cast<uint64_t>(r);
  }
  return true;
}

bool pwrite_all(int fd, const char* p, size_t n, uint64_t addr) {
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(addr));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = ENOSPC;
      return false;
    }
    p += r, n -= static_cast<size_t>(r), addr += static_cast<uint64_t>(r);
  }
  return true;
}

void put_u64(std::vector<char>& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.insert(out.end(), b, b + 8);
}

uint64_t get_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The records of a complete journal (offset -> bytes), or false when it is incomplete or corrupt.
bool parse_journal(const std::vector<char>& j, std::vector<std::pair<uint64_t, std::pair<size_t, size_t>>>& recs) {
  if (j.size() < 32 || std::memcmp(j.data(), kHead, 8) != 0) return false;
  if (std::memcmp(j.data() + j.size() - 8, kTail, 8) != 0) return false;
  const size_t body = j.size() - 16;
  if (fnv1a(j.data(), body) != get_u64(j.data() + body)) return false;
  const uint64_t n = get_u64(j.data() + 8);
  size_t at = 16;
  for (uint64_t i = 0; i < n; ++i) {
    if (body - at < 16) return false;
    const uint64_t off = get_u64(j.data() + at), len = get_u64(j.data() + at + 8);
    at += 16;
    if (len > body - at) return false;
    recs.push_back({off, {at, static_cast<size_t>(len)}});
    at += static_cast<size_t>(len);
  }
  return at == body;
}

bool read_whole(const std::string& path, std::vector<char>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    ok = pread_all(fd, out.data(), out.size(), 0);
  }
  ::close(fd);
  return ok;
}

void (*g_test_hook)(int) = nullptr;

}  // namespace

void set_hdf5_journal_test_hook(void (*hook)(int stage)) { g_test_hook = hook; }

struct Hdf5Journal::State {
  std::string journal_path;
  std::string data_path;  // for messages
  int fd = -1;
  haddr_t eoa = 0;
  uint64_t eof = 0;       // physical size
  uint64_t boundary = 0;  // the committed file's end of allocation: below it, writes go to pages
  std::map<uint64_t, std::vector<char>> pages;  // page index -> bytes [page * kPage, min(+kPage, boundary))
  std::string error;
  uint64_t bytes_written = 0;

  // After a failure nothing reaches the file any more: every later write goes to the pages
  // (memory), so HDF5 still reads back what it wrote and closes cleanly, and commit() refuses.
  void fail(const std::string& what) {
    if (error.empty()) error = what;
    boundary = kNoFile;
  }
  void fail(const std::string& what, int err) { fail(what + ": " + std::strerror(err)); }

  // The page `index`, read from the file when new; it covers [index * kPage, boundary).
  std::vector<char>* page(uint64_t index) {
    const uint64_t start = index * kPage;
    const auto want = static_cast<size_t>(std::min(kPage, boundary - start));
    std::vector<char>& bytes = pages[index];
    const size_t have = bytes.size();  // 0 when new; shorter when the boundary moved up (fail())
    if (have < want) {
      bytes.resize(want);
      if (!pread_all(fd, bytes.data() + have, want - have, start + have)) {
        std::memset(bytes.data() + have, 0, want - have);
        fail("cannot read " + data_path, errno);
      }
    }
    return &bytes;
  }

  bool read(uint64_t addr, size_t n, char* out) {
    if (!pread_all(fd, out, n, addr)) {
      fail("cannot read " + data_path, errno);
      return false;
    }
    if (pages.empty() || addr >= boundary) return true;
    const uint64_t end = std::min<uint64_t>(addr + n, boundary);
    for (auto it = pages.lower_bound(addr / kPage); it != pages.end() && it->first * kPage < end; ++it) {
      const uint64_t a = std::max(addr, it->first * kPage), b = std::min(end, it->first * kPage + it->second.size());
      if (a < b) std::memcpy(out + (a - addr), it->second.data() + (a - it->first * kPage), static_cast<size_t>(b - a));
    }
    return true;
  }

  bool write(uint64_t addr, size_t n, const char* in) {
    while (n > 0 && addr < boundary) {
      std::vector<char>* pg = page(addr / kPage);
      const size_t off = static_cast<size_t>(addr % kPage);
      const size_t take = std::min(n, pg->size() - off);
      std::memcpy(pg->data() + off, in, take);
      addr += take, in += take, n -= take;
    }
    if (n == 0) return true;
    if (!pwrite_all(fd, in, n, addr)) {
      fail("cannot write " + data_path, errno);
      return write(addr, n, in);  // into the pages now
    }
    bytes_written += n;
    eof = std::max<uint64_t>(eof, addr + n);
    return true;
  }

  bool commit() {
    if (!error.empty()) return false;
    if (eof < eoa) {  // space allocated but not yet written: readers refuse a file shorter than that
      if (::ftruncate(fd, static_cast<off_t>(eoa)) != 0) {
        fail("cannot write " + data_path, errno);
        return false;
      }
      eof = eoa;
    }
    if (!pages.empty()) {
      std::vector<char> j(kHead, kHead + 8);
      put_u64(j, pages.size());
      for (const auto& [index, bytes] : pages) {
        put_u64(j, index * kPage);
        put_u64(j, bytes.size());
        j.insert(j.end(), bytes.begin(), bytes.end());
      }
      put_u64(j, fnv1a(j.data(), j.size()));
      j.insert(j.end(), kTail, kTail + 8);
      const int jfd = ::open(journal_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (jfd < 0) {
        fail("cannot create " + journal_path, errno);
        return false;
      }
      const bool ok = pwrite_all(jfd, j.data(), j.size(), 0);
      const int err = errno;
      if (::close(jfd) != 0 || !ok) {
        ::unlink(journal_path.c_str());  // incomplete: the file is as of the last commit
        fail("cannot write " + journal_path, ok ? errno : err);
        return false;
      }
      bytes_written += j.size();
      // The journal is complete: from here on a reader that finds it finishes this copy.
      if (g_test_hook) g_test_hook(0);
      size_t copied = 0;
      for (const auto& [index, bytes] : pages) {
        if (g_test_hook && copied++ == pages.size() / 2) g_test_hook(1);
        if (!pwrite_all(fd, bytes.data(), bytes.size(), index * kPage)) {
          fail("cannot write " + data_path, errno);
          return false;
        }
        bytes_written += bytes.size();
      }
      ::unlink(journal_path.c_str());
      pages.clear();
    }
    boundary = std::max<uint64_t>(boundary, eoa);
    return true;
  }
};

namespace {

// ---- the HDF5 driver ---------------------------------------------------------------------------

struct DriverFile {
  H5FD_t pub;  // must be first: HDF5 casts
  Hdf5Journal::State* s;
  std::shared_ptr<Hdf5Journal::State>* owner;  // keeps `s` alive while HDF5 holds the file
  dev_t dev;
  ino_t ino;
};

struct FaplInfo {
  Hdf5Journal::State* s;
  std::shared_ptr<Hdf5Journal::State>* owner;  // the journal's
};

Hdf5Journal::State* state_of(H5FD_t* f) { return reinterpret_cast<DriverFile*>(f)->s; }

void* fapl_get(H5FD_t* f) {
  auto* info = static_cast<FaplInfo*>(std::malloc(sizeof(FaplInfo)));
  if (info) *info = {state_of(f), reinterpret_cast<DriverFile*>(f)->owner};
  return info;
}

H5FD_t* open_file(const char* name, unsigned flags, hid_t fapl, haddr_t /*maxaddr*/) {
  const auto* info = static_cast<const FaplInfo*>(H5Pget_driver_info(fapl));
  if (!info || !info->s || info->s->fd >= 0) return nullptr;  // one file per journal
  Hdf5Journal::State& s = *info->s;
  int o = O_CLOEXEC | ((flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY);
  if (flags & H5F_ACC_TRUNC) o |= O_TRUNC;
  if (flags & H5F_ACC_CREAT) o |= O_CREAT;
  if (flags & H5F_ACC_EXCL) o |= O_EXCL;
  s.data_path = name;
  // (HDF5 tries an open without create flags first: failures here are HDF5's to report.)
  const int fd = ::open(name, o, 0644);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return nullptr;
  }
  // Exclusive while the writer lives: a second writer, a reader (HDF5 takes a shared lock; a
  // reader would see commits change the file under it) and recover_hdf5_journal() are refused.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    s.fail("expected no other process to have the file open, found one holding its lock (a running speclab run?)");
    return nullptr;
  }
  // Replaced by a rename between the open and the lock (`speclab check` installs its results
  // that way, holding the old file's lock until then): commits to the old file would be lost.
  struct stat now {};
  if (::stat(name, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
    ::close(fd);
    s.fail("the file was replaced by another process while it was being opened; run the command again");
    return nullptr;
  }
  auto* f = static_cast<DriverFile*>(std::calloc(1, sizeof(DriverFile)));
  if (!f) {
    ::close(fd);
    return nullptr;
  }
  f->s = &s;
  f->owner = new std::shared_ptr<Hdf5Journal::State>(*info->owner);
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  s.fd = fd;
  s.eof = static_cast<uint64_t>(st.st_size);
  s.boundary = s.eof;  // everything the file holds now is committed
  s.pages.clear();
  return &f->pub;
}

herr_t close_file(H5FD_t* f) {
  auto* df = reinterpret_cast<DriverFile*>(f);
  Hdf5Journal::State* s = df->s;
  // Writes after the last commit (HDF5's own close-time flush) are dropped with the pages.
  s->pages.clear();
  if (s->fd >= 0) ::close(s->fd);
  s->fd = -1;
  delete df->owner;
  std::free(f);
  return 0;
}

int compare(const H5FD_t* a, const H5FD_t* b) {
  const auto* x = reinterpret_cast<const DriverFile*>(a);
  const auto* y = reinterpret_cast<const DriverFile*>(b);
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return 0;
}

herr_t query(const H5FD_t* /*f*/, unsigned long* flags) {
  if (flags)
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t get_eoa(const H5FD_t* f, H5FD_mem_t) { return reinterpret_cast<const DriverFile*>(f)->s->eoa; }
herr_t set_eoa(H5FD_t* f, H5FD_mem_t, haddr_t addr) {
  state_of(f)->eoa = addr;
  return 0;
}
haddr_t get_eof(const H5FD_t* f, H5FD_mem_t) { return reinterpret_cast<const DriverFile*>(f)->s->eof; }

herr_t get_handle(H5FD_t* f, hid_t, void** handle) {
  if (!handle) return -1;
  *handle = &state_of(f)->fd;
  return 0;
}

herr_t read(H5FD_t* f, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  return state_of(f)->read(addr, size, static_cast<char*>(buf)) ? 0 : -1;
}

herr_t write(H5FD_t* f, H5FD_mem_t, hid_t, haddr_t addr, size_t size, const void* buf) {
  return state_of(f)->write(addr, size, static_cast<const char*>(buf)) ? 0 : -1;
}

// The file is never cut to the end of allocation (cutting could drop bytes the committed file
// uses before the journal is copied; HDF5 ignores bytes past it); commit() extends it instead.
herr_t truncate(H5FD_t*, hid_t, hbool_t) { return 0; }

const H5FD_class_t kDriver = {
    "speclab_journal",  // name
    HADDR_MAX,          // maxaddr
    H5F_CLOSE_WEAK,     // fc_degree
    nullptr,            // terminate
    nullptr,            // sb_size
    nullptr,            // sb_encode
    nullptr,            // sb_decode
    sizeof(FaplInfo),   // fapl_size
    fapl_get,           // fapl_get
    nullptr,            // fapl_copy (memcpy)
    nullptr,            // fapl_free (free)
    0,                  // dxpl_size
    nullptr,            // dxpl_copy
    nullptr,            // dxpl_free
    open_file,
    close_file,
    compare,
    query,
    nullptr,  // get_type_map
    nullptr,  // alloc
    nullptr,  // free
    get_eoa,
    set_eoa,
    get_eof,
    get_handle,
    read,
    write,
    nullptr,  // flush
    truncate,
    nullptr,  // lock (open_file takes its own shared lock)
    nullptr,  // unlock
    H5FD_FLMAP_DICHOTOMY,
};

hid_t driver_id() {
  static const hid_t id = H5FDregister(&kDriver);
  return id;
}

}  // namespace

Hdf5Journal::Hdf5Journal(std::string journal_path) : state_(std::make_shared<State>()) {
  state_->journal_path = std::move(journal_path);
}

Hdf5Journal::~Hdf5Journal() = default;

hid_t Hdf5Journal::fapl() {
  const hid_t id = driver_id();
  if (id < 0) throw Error(ErrorKind::kIo, "cannot register the HDF5 journal driver", state_->journal_path);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  FaplInfo info{state_.get(), &state_};
  if (fapl < 0 || H5Pset_driver(fapl, id, &info) < 0) {
    if (fapl >= 0) H5Pclose(fapl);
    throw Error(ErrorKind::kIo, "cannot set up the HDF5 journal driver", state_->journal_path);
  }
  return fapl;
}

bool Hdf5Journal::commit() { return state_->commit(); }
const std::string& Hdf5Journal::error() const { return state_->error; }
void Hdf5Journal::fail(const std::string& what) { state_->fail(what); }
void Hdf5Journal::renamed(const std::string& data_path) { state_->data_path = data_path; }
uint64_t Hdf5Journal::bytes_written() const { return state_->bytes_written; }

bool hdf5_writer_holds(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

std::string hdf5_journal_path(const std::string& path) { return replace_target(path) + ".journal"; }

bool recover_hdf5_journal(const std::string& path) {
  const std::string jpath = hdf5_journal_path(path);
  struct stat st {};
  if (::stat(jpath.c_str(), &st) != 0) return false;
  std::vector<char> j;
  std::vector<std::pair<uint64_t, std::pair<size_t, size_t>>> recs;
  if (!read_whole(jpath, j) || !parse_journal(j, recs)) return false;  // incomplete: not begun
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    throw Error(ErrorKind::kIo,
                "a killed writer left " + jpath + " to be copied into the file, but the file cannot be opened for "
                "writing: " + std::strerror(errno),
                path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // its writer is alive (or another reader recovers)
    ::close(fd);
    return false;
  }
  // Re-read under the lock: a recovery that just finished removed it.
  recs.clear();
  if (!read_whole(jpath, j) || !parse_journal(j, recs)) {
    ::close(fd);
    return false;
  }
  for (const auto& r : recs)
    if (!pwrite_all(fd, j.data() + r.second.first, r.second.second, r.first)) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorKind::kIo, "cannot copy " + jpath + " into the file: " + std::strerror(err), path);
    }
  ::unlink(jpath.c_str());
  ::close(fd);
  return true;
}

}  // namespace speclab
