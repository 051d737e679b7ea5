// Fuzz regressions: every input kept in tests/fuzz/regressions/<harness>/ (crashers found by the
// libFuzzer harnesses, see docs/hardening.md) is replayed through the same harness code in the
// ordinary test build, and each fixed bug has a named test of the behaviour that replaced it.
// Under `make test-sanitize` these run with ASan+UBSan, as they did in the fuzzer.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "models/loaders/gguf.h"
#include "models/loaders/llama2c.h"
#include "tests/fuzz/harnesses.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

const fs::path kRegressions = fs::path(SPECLAB_SOURCE_DIR) / "tests/fuzz/regressions";

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t n = out.size();
  out.resize(n + sizeof(T));
  std::memcpy(out.data() + n, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

fs::path write_temp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const fs::path p = fs::temp_directory_path() / ("speclab_fuzz_regression_" + name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return p;
}

}  // namespace

TEST_CASE("fuzz regressions: every kept input is rejected cleanly or accepted", "[fuzz]") {
  REQUIRE(fs::is_directory(kRegressions));
  size_t replayed = 0;
  for (const speclab_fuzz::Harness& h : speclab_fuzz::kHarnesses) {
    const fs::path dir = kRegressions / h.name;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      INFO(h.name << ": " << entry.path().filename().string());
      const std::vector<uint8_t> bytes = read_bytes(entry.path());
      // The harness catches speclab::Error; anything else escaping is a failure here.
      CHECK_NOTHROW(h.fn(bytes.data(), bytes.size()));
      ++replayed;
    }
  }
  CHECK(replayed > 0);
}

// Found by fuzz_llama2c (regressions/fuzz_llama2c/header_size_overflow): header values below
// 2^24 each made the expected file size, a sum of products of three of them, overflow int64
// (undefined behaviour) before the size check. That input's 2^23 layers are now refused first
// (ModelConfig::kMaxLayers); dim and hidden_dim 2^24 (the header's cap) with 4096 layers overflow
// the same sum (3 matrices of 2^60 elements, 4 bytes each). The context is 2^20 positions, within
// ModelConfig::kMaxPositions (2^23), and 256 heads make head_dim 2^16, within kMaxHeadDim, so that
// the size check is what refuses it.
TEST_CASE("llama2c: a header whose weights exceed 2^64 bytes is rejected, not overflowed", "[fuzz][llama2c]") {
  std::vector<uint8_t> ckpt;
  for (int32_t v : {1 << 24, 1 << 24, 4096, 256, 256, 512, 1 << 20}) put<int32_t>(ckpt, v);
  const fs::path p = write_temp("llama2c_overflow.bin", ckpt);
  try {
    load_llama2c(p.string(), "/nonexistent/tokenizer.bin");
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.field() == "size");
    CHECK_THAT(e.message(), Catch::Contains("2^64"));
  }
  fs::remove(p);
}

// Found by fuzz_gguf (regressions/fuzz_gguf/zero_element_tensor): a tensor with a zero
// dimension has no data; load_tensor passed a null destination to memcpy (undefined behaviour).
TEST_CASE("gguf: a tensor with a zero dimension loads as an empty tensor", "[fuzz][gguf]") {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 0x46554747u);  // "GGUF"
  put<uint32_t>(b, 3);
  put<uint64_t>(b, 1);  // tensor_count
  put<uint64_t>(b, 0);  // metadata_kv_count
  put_string(b, "empty");
  put<uint32_t>(b, 2);  // n_dims
  put<uint64_t>(b, 4);
  put<uint64_t>(b, 0);
  put<uint32_t>(b, 0);  // F32
  put<uint64_t>(b, 0);  // offset
  b.resize((b.size() + 31) / 32 * 32, 0);
  const GgufFile f = read_gguf_buffer(b, "empty.gguf");
  REQUIRE(f.tensors.size() == 1);
  const HostTensor t = f.load_tensor(f.tensors[0]);
  CHECK(t.shape == std::vector<int64_t>{0, 4});
  CHECK(t.data.empty());
}
