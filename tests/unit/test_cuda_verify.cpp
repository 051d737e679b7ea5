// The CUDA greedy-verification kernel against the CPU definition. Runs where a GPU is present
// (the lent H100/H200 machine); on a machine without one the kernel cases are skipped with a
// warning (test_device checks that `--device cuda` is then refused with exit code 2).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "framework/cuda/greedy_verify.h"
#include "tests/support/required_resources.h"

using namespace speclab;

namespace {
int32_t cpu_argmax(const std::vector<float>& v, int64_t off, int32_t vocab) {
  int32_t best = 0;
  for (int32_t j = 1; j < vocab; ++j)
    if (v[off + j] > v[off + best]) best = j;
  return best;
}
}  // namespace

TEST_CASE("CUDA greedy verification matches the CPU argmax and accepted length", "[cuda]") {
  if (testing::skip_without_cuda(cuda::device_available(), "no CUDA device: kernel cases")) return;
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (int32_t vocab : {5, 257, 49152}) {
    for (int32_t k : {1, 4, 8}) {
      const int32_t rows = k + 1;
      std::vector<float> logits(static_cast<size_t>(rows) * vocab);
      for (auto& x : logits) x = dist(gen);
      std::vector<int32_t> expect(rows), draft(k);
      for (int32_t r = 0; r < rows; ++r) expect[r] = cpu_argmax(logits, static_cast<int64_t>(r) * vocab, vocab);
      for (int32_t reject_at = 0; reject_at <= k; ++reject_at) {
        for (int32_t i = 0; i < k; ++i) draft[i] = (i < reject_at) ? expect[i] : (expect[i] + 1) % vocab;
        std::vector<int32_t> got(rows);
        const int32_t n = cuda::greedy_verify_host(logits.data(), rows, vocab, draft.data(), got.data());
        CHECK(got == expect);
        CHECK(n == reject_at);
      }
    }
  }
  // Ties resolve to the lowest index, like the CPU path.
  std::vector<float> tie = {1.f, 3.f, 3.f, 0.f};
  int32_t out = -1, d = 0;
  cuda::greedy_verify_host(tie.data(), 1, 4, &d, &out);
  CHECK(out == 1);
}
