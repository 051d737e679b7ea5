#include "framework/core/file_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "framework/core/fnv.h"

namespace speclab {

namespace fs = std::filesystem;

namespace {

// (bytes, hex) of one regular file; bytes < 0 when it cannot be read.
std::pair<int64_t, std::string> of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {-1, ""};
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (size < 0) return {-1, ""};
  Fnv64 f;
  f.add(std::to_string(size));
  std::vector<char> buf(static_cast<size_t>(std::min<int64_t>(size, std::max(kFingerprintWhole, kFingerprintChunk))));
  auto read_at = [&](int64_t off, int64_t n) {
    in.seekg(off);
    in.read(buf.data(), static_cast<std::streamsize>(n));
    if (in.gcount() != n) return false;
    f.add(buf.data(), static_cast<size_t>(n));
    return true;
  };
  if (size <= kFingerprintWhole) {
    if (size > 0 && !read_at(0, size)) return {-1, ""};
  } else {
    const int64_t span = size - kFingerprintChunk;
    for (int64_t c = 0; c < kFingerprintChunks; ++c)
      if (!read_at(span * c / (kFingerprintChunks - 1), kFingerprintChunk))
        return {-1, ""};
  }
  return {size, f.hex()};
}

}  // namespace

std::string file_fingerprint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    Fnv64 f;
    int64_t bytes = 0;
    for (const std::string& n : names) {
      const auto [size, hex] = of_file((fs::path(path) / n).string());
      if (size < 0) return "missing";
      bytes += size;
      f.add(n);
      f.add(hex);
    }
    return std::to_string(bytes) + ":" + f.hex();
  }
  if (!fs::is_regular_file(path, ec)) return "missing";
  const auto [size, hex] = of_file(path);
  return size < 0 ? "missing" : std::to_string(size) + ":" + hex;
}

}  // namespace speclab
