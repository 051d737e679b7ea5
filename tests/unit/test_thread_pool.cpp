// parallel_chunks(): every index in [0, n) is visited exactly once, for any chunking and
// thread count, across many back-to-back jobs (the pattern of a decode step) and when two
// threads submit jobs at once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "framework/core/thread_pool.h"

using namespace speclab;

namespace {
// Runs one job and returns how often each index was visited.
std::vector<int> visits(int64_t n, int64_t chunk, int threads) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  for (auto& s : seen) s.store(0);
  parallel_chunks(n, chunk, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (auto& s : seen) out.push_back(s.load());
  return out;
}
}  // namespace

TEST_CASE("parallel_chunks visits every index exactly once", "[core][threads]") {
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {1, 2, 7, 64, 1000, 49152})
      for (int64_t chunk : {1, 8, 24, 100000}) {
        INFO("threads " << threads << " n " << n << " chunk " << chunk);
        const auto v = visits(n, chunk, threads);
        CHECK(std::count(v.begin(), v.end(), 1) == n);
      }
}

TEST_CASE("parallel_chunks: thousands of back-to-back jobs and concurrent submitters", "[core][threads]") {
  std::atomic<int64_t> total{0};
  auto many = [&] {
    for (int job = 0; job < 2000; ++job)
      parallel_chunks(100, 7, 2, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  };
  std::thread other(many);
  many();
  other.join();
  CHECK(total.load() == 2 * 2000 * 100);
}

TEST_CASE("parallel_chunks: empty ranges and zero chunk sizes", "[core][threads]") {
  // Chunks of size 0 are clamped to 1, and an empty range calls nothing.
  int calls = 0;
  parallel_chunks(0, 4, 2, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 0);
  const auto v = visits(10, 0, 2);
  CHECK(std::count(v.begin(), v.end(), 1) == 10);
}

TEST_CASE("compute_threads: --threads N sets it, 0 restores the machine's count (read once, stays the same)",
          "[core][threads]") {
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  set_compute_threads(3);
  CHECK(compute_threads() == 3);
  set_compute_threads(0);
  CHECK(compute_threads() == hw);
  CHECK(compute_threads() == hw);  // the cached value, on a later call too
  set_compute_threads(-1);
  CHECK(compute_threads() == hw);
}
