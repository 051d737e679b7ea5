// parallel_chunks(): every index in [0, n) is visited exactly once, for any chunking and
// thread count, across many back-to-back jobs (the pattern of a decode step), when two
// threads submit jobs at once and with more threads than cores; no chunk runs after the call
// returns; a chunk's exception reaches the caller, from any thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include <sched.h>
#include <vector>

#include "framework/core/thread_pool.h"
#include "tests/support/ctest_cpu_slot.h"

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

// Yields until done() or 10 s have passed; returns done(). The cases below wait for another
// thread this way, so that a call cannot finish on the caller alone.
template <class Pred>
bool wait_until(Pred done) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!done())
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return false;
    else std::this_thread::yield();
  return true;
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

// Sets (value) or unsets (nullptr) SLURM_JOB_ID and SLURM_CPUS_ON_NODE for its lifetime, then
// restores what the process had (these tests may themselves run inside a Slurm job).
class SlurmEnv {
 public:
  SlurmEnv(const char* job, const char* cpus) {
    for (int i = 0; i < 2; ++i) {
      const char* old = std::getenv(kNames[i]);
      had_[i] = old != nullptr;
      if (old) old_[i] = old;
    }
    set(0, job);
    set(1, cpus);
  }
  ~SlurmEnv() {
    for (int i = 0; i < 2; ++i) set(i, had_[i] ? old_[i].c_str() : nullptr);
  }
  SlurmEnv(const SlurmEnv&) = delete;
  SlurmEnv& operator=(const SlurmEnv&) = delete;

 private:
  static constexpr const char* kNames[2] = {"SLURM_JOB_ID", "SLURM_CPUS_ON_NODE"};
  static void set(int i, const char* v) {
    if (v) ::setenv(kNames[i], v, 1);
    else ::unsetenv(kNames[i]);
  }
  bool had_[2] = {false, false};
  std::string old_[2];
};

TEST_CASE("available_cpus: the affinity mask's CPUs, not the machine's", "[core][threads]") {
  const SlurmEnv outside_slurm(nullptr, nullptr);
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(::sched_getaffinity(0, sizeof(all), &all) == 0);
  CHECK(available_cpus() == CPU_COUNT(&all));
  CHECK(available_cpus() <= std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  // A thread pinned to one CPU (as a Slurm task given one CPU, or `taskset -c 0`) sees 1.
  int seen = -1;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &all)) {
        CPU_SET(c, &one);
        break;
      }
    if (::sched_setaffinity(0, sizeof(one), &one) == 0) seen = available_cpus();
  });
  t.join();
  CHECK(seen == 1);
}

TEST_CASE("available_cpus: inside a Slurm job at most SLURM_CPUS_ON_NODE", "[core][threads]") {
  // A cluster that binds no tasks (TaskPlugin=task/none) leaves the mask at the whole node; the
  // job's allocation is then only in the environment.
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(::sched_getaffinity(0, sizeof(all), &all) == 0);
  const int mask = CPU_COUNT(&all);
  const auto with_env = [](const char* job, const char* cpus) {
    const SlurmEnv env(job, cpus);
    return available_cpus();
  };
  CHECK(with_env("17", "1") == 1);
  CHECK(with_env("17", "100000") == mask);  // the mask is the smaller
  CHECK(with_env(nullptr, "1") == mask);    // outside a job the variable means nothing
  CHECK(with_env("17", "two") == mask);
  CHECK(with_env("17", "0") == mask);
  CHECK(with_env(nullptr, nullptr) == mask);
  if (mask < 2) WARN("one CPU in the mask: the SLURM_CPUS_ON_NODE=1 case cannot tell the cap from the mask");
}

namespace {
// The CPUs of a mask, in order.
std::vector<int> mask_cpus(const cpu_set_t& mask) {
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  return cpus;
}

// The variables CTest sets for a test given one CPU slot (tests/support/ctest_cpu_slot.h), and
// the exemption; null unsets one. Each is restored afterwards.
struct SlotRun {
  std::vector<int> cpus;  // the thread's mask after pin_to_ctest_cpu_slot()
  int available = 0;      // available_cpus() on that thread after it
};
SlotRun pin_with(const std::array<const char*, 4>& values) {
  static const char* const kNames[4] = {"CTEST_RESOURCE_GROUP_COUNT", "CTEST_RESOURCE_GROUP_0",
                                        "CTEST_RESOURCE_GROUP_0_CPUS", "SPECLAB_TEST_ALL_CPUS"};
  std::array<std::pair<bool, std::string>, 4> old;
  for (int i = 0; i < 4; ++i) {
    const char* v = std::getenv(kNames[i]);
    old[i] = {v != nullptr, v ? v : ""};
    if (values[i]) ::setenv(kNames[i], values[i], 1);
    else ::unsetenv(kNames[i]);
  }
  SlotRun run;
  // On a thread of its own: the binding is per thread, and ends with it.
  std::thread t([&] {
    speclab::test::pin_to_ctest_cpu_slot();
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (::sched_getaffinity(0, sizeof(mask), &mask) == 0) run.cpus = mask_cpus(mask);
    run.available = available_cpus();
  });
  t.join();
  for (int i = 0; i < 4; ++i) {
    if (old[i].first) ::setenv(kNames[i], old[i].second.c_str(), 1);
    else ::unsetenv(kNames[i]);
  }
  return run;
}
}  // namespace

TEST_CASE("pin_to_ctest_cpu_slot: CTest's slot k binds the process to the k-th CPU of its mask, and nothing else does",
          "[core][threads]") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(::sched_getaffinity(0, sizeof(all), &all) == 0);
  const std::vector<int> cpus = mask_cpus(all);
  const int n = static_cast<int>(cpus.size());
  if (n < 2) WARN("one CPU in the mask: binding to it cannot be told from leaving the mask alone");
  for (int k : {0, 1, n, n + 1, 7}) {
    INFO("slot " << k);
    const std::string id = "id:" + std::to_string(k) + ",slots:1";
    const SlotRun run = pin_with({"1", "cpus", id.c_str(), nullptr});
    CHECK(run.cpus == std::vector<int>{cpus[static_cast<size_t>(k % n)]});
    CHECK(run.available == 1);
  }
  // Left alone: no slot, another resource, two groups, a malformed id, and the exemption.
  for (const auto& env : std::vector<std::array<const char*, 4>>{{nullptr, nullptr, nullptr, nullptr},
                                                                 {"1", "gpus", "id:1,slots:1", nullptr},
                                                                 {"2", "cpus", "id:1,slots:1", nullptr},
                                                                 {"1", "cpus", "id:x,slots:1", nullptr},
                                                                 {"1", "cpus", "id:-1,slots:1", nullptr},
                                                                 {"1", "cpus", "1,slots:1", nullptr},
                                                                 {"1", "cpus", "id:1", nullptr},
                                                                 {"1", "cpus", "id:1,slots:1", "1"}}) {
    INFO((env[0] ? env[0] : "-") << " " << (env[1] ? env[1] : "-") << " " << (env[2] ? env[2] : "-") << " "
                                 << (env[3] ? env[3] : "-"));
    const SlotRun run = pin_with(env);
    CHECK(run.cpus == cpus);
    CHECK(run.available == n);
  }
}

TEST_CASE("compute_threads: --threads N sets it, 0 restores the default, available_cpus() (read once)",
          "[core][threads]") {
  const int hw = available_cpus();
  set_compute_threads(3);
  CHECK(compute_threads() == 3);
  set_compute_threads(0);
  CHECK(compute_threads() == hw);
  CHECK(compute_threads() == hw);  // the cached value, on a later call too
  set_compute_threads(-1);
  CHECK(compute_threads() == hw);
}

// Jobs whose chunk counts change from one to the next, on 8 threads (more than this machine's
// cores, so workers are preempted between their reads), each job's data on the heap: every
// index must be visited once and no chunk may still run when the call returns. (The
// deterministic case below forces the interleaving that once broke this.)
TEST_CASE("parallel_chunks: changing chunk counts on more threads than cores, each chunk once and none after return",
          "[core][threads]") {
  std::atomic<int> running{0};
  std::atomic<bool> stop{false};
  // Two busy threads beside the pool's: preemption between a worker's reads is what opens it.
  std::vector<std::thread> noise;
  for (int i = 0; i < 2; ++i)
    noise.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  int64_t jobs = 0, double_or_missed = 0, late = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.5) {
    for (int rep = 0; rep < 500; ++rep, ++jobs) {
      const int64_t period = 100 + jobs % 37, n = period * (1 + jobs % 5), chunk = 7 + jobs % 13;
      auto hits = std::make_unique<std::vector<int>>(static_cast<size_t>(n), 0);
      parallel_chunks(n, chunk, 8, [&, period](int64_t b, int64_t e) {
        running.fetch_add(1);
        while (b < e) {  // the shape of the swiglu job that crashed: a period, a remainder
          const int64_t len = std::min(e - b, period - b % period);
          for (int64_t k = 0; k < len; ++k) ++(*hits)[static_cast<size_t>(b + k)];
          b += len;
        }
        running.fetch_sub(1);
      });
      late += running.load() != 0;
      for (int h : *hits) double_or_missed += h != 1;
    }
  }
  stop.store(true);
  for (auto& t : noise) t.join();
  INFO(jobs << " jobs");
  CHECK(double_or_missed == 0);
  CHECK(late == 0);
}

TEST_CASE("parallel_chunks: a chunk's exception is rethrown to the caller, from the caller's thread or a worker",
          "[core][threads]") {
  // Every chunk throws: the caller's own chunks are the first to.
  CHECK_THROWS_WITH(parallel_chunks(64, 1, 2, [](int64_t, int64_t) { throw std::runtime_error("chunk failed"); }),
                    "chunk failed");
  // Only a worker throws; the caller's chunk waits (up to 10 s) until a worker has thrown, so
  // the call cannot finish on the caller alone.
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> thrown{false};
  CHECK_THROWS_WITH(parallel_chunks(2, 1, 2,
                                    [&](int64_t, int64_t) {
                                      if (std::this_thread::get_id() != caller) {
                                        thrown.store(true);
                                        throw std::runtime_error("worker failed");
                                      }
                                      wait_until([&] { return thrown.load(); });
                                    }),
                    "worker failed");
  CHECK(thrown.load());
  // The pool works normally afterwards.
  const auto v = visits(1000, 8, 2);
  CHECK(std::count(v.begin(), v.end(), 1) == 1000);
}

// The interleaving that crashed a train-draft data stage (thread_pool.cpp): a worker has read
// the finished job A's ticket (index 2 = A's chunk count) and is preempted; the caller starts
// job B (64 chunks) and has written B's fields but not yet published B's ticket; the worker
// resumes. The pool used to compare index 2 with B's chunk count, claim "chunk 2 of A" on A's
// ticket and run B's function on chunk 2, which B then handed out again: chunk 2 of B ran twice
// (and B's caller could return while it ran). The test seams park the worker and the caller at
// exactly those points.
namespace race {
std::atomic<int> phase{0};  // 1: job A; 2: a worker parked at index 2; 3: released; 4: B published
std::thread::id caller;
bool wait_for(int at_least) {
  return wait_until([=] { return phase.load() >= at_least; });
}
void before_count_check(int64_t idx) {
  int one = 1;
  if (std::this_thread::get_id() == caller || idx != 2 || !phase.compare_exchange_strong(one, 2)) return;
  wait_for(3);  // parked until B's fields are written
}
void before_publish() {
  if (phase.load() != 2) return;
  phase.store(3);  // the parked worker now compares index 2 with B's chunk count
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  phase.store(4);
}
struct Seams {
  Seams() { set_pool_test_hooks({before_count_check, before_publish}); }
  ~Seams() { set_pool_test_hooks({}); }
};
}  // namespace race

TEST_CASE("parallel_chunks: a worker holding the finished job's ticket cannot claim a chunk of the next job",
          "[core][threads]") {
  race::caller = std::this_thread::get_id();
  // A worker is up and taking chunks before job A: the caller's chunk waits for one to run.
  std::atomic<bool> worker_ran{false};
  parallel_chunks(2, 1, 2, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != race::caller) return worker_ran.store(true);
    wait_until([&] { return worker_ran.load(); });
  });
  REQUIRE(worker_ran.load());
  race::Seams seams;
  race::phase.store(1);
  std::vector<std::atomic<int>> a(2), b(64);
  for (auto& x : a) x.store(0);
  for (auto& x : b) x.store(0);
  // Job A: a chunk the caller runs waits until a worker has taken the other and parked at index
  // 2 (so the call cannot finish on the caller alone); a worker that wakes after A's chunks are
  // gone parks there too, which the caller then waits for.
  parallel_chunks(2, 1, 2, [&](int64_t i, int64_t) {
    a[static_cast<size_t>(i)].fetch_add(1);
    if (std::this_thread::get_id() == race::caller) race::wait_for(2);
  });
  REQUIRE(race::wait_for(2));
  parallel_chunks(64, 1, 2, [&](int64_t i, int64_t) { b[static_cast<size_t>(i)].fetch_add(1); });
  CHECK(race::phase.load() == 4);  // the seams ran in the order described
  int once = 0, not_once = 0;  // without the fix: the parked worker runs B's chunks on A's ticket
  for (auto& x : b) (x.load() == 1 ? once : not_once) += 1;
  CHECK(a[0].load() == 1);
  CHECK(a[1].load() == 1);
  CHECK(once == 64);
  CHECK(not_once == 0);
}
