// Fnv64 — FNV-1a over 64 bits (Fowler, Noll and Vo): h = (h xor byte) * 1099511628211 for each
// byte, from the offset basis 1469598103934665603. That basis is not the published one
// (14695981039346656037: it lost its last digit in SpecLab's first hash, the train-draft data key);
// it is kept because drafts and data caches already name their targets with it (a trained draft's
// speclab.target hash), and any basis spreads the bits as well. The one non-cryptographic hash
// SpecLab uses to name content (config hashes, draft data keys, file fingerprints, the HDF5
// journal's record checksums): it tells
// honest inputs apart, nothing more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace speclab {

struct Fnv64 {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  // The string's bytes and a NUL, so that ("ab", "c") and ("a", "bc") differ.
  void add(const std::string& s) {
    add(s.data(), s.size());
    add("\0", 1);
  }
  // 16 lower-case hex digits.
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

}  // namespace speclab
