// Helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp).
//
// Every harness feeds one input to one parser and treats speclab::Error as a clean rejection.
// Anything else — an ASan/UBSan report, a leak, an uncaught exception of another type, an
// allocation above libFuzzer's -malloc_limit_mb — is a bug in the parser.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace speclab_fuzz {

// The input as a file, for loaders that take a path: an in-memory file (memfd) opened through
// /proc/self/fd, so no disk I/O and nothing left behind.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("speclab_fuzz", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Called for a clean rejection (speclab::Error). With SPECLAB_FUZZ_VERBOSE=1 in the environment
// it prints the message, to check that seeds are accepted and to see why inputs are rejected.
inline void rejected(const std::exception& e) {
  static const bool verbose = std::getenv("SPECLAB_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
}

// Reads a little-endian u32 from the front of the input and advances past it (0 when short).
inline uint32_t take_u32(const uint8_t*& data, size_t& size) {
  if (size < 4) return 0;
  const uint32_t v = uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 |
                     uint32_t(data[3]) << 24;
  data += 4;
  size -= 4;
  return v;
}

}  // namespace speclab_fuzz
