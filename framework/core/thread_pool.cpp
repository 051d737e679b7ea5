#include "framework/core/thread_pool.h"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPECLAB_PAUSE() _mm_pause()
#else
#define SPECLAB_PAUSE() std::this_thread::yield()
#endif

namespace speclab {

namespace {

using ChunkFn = std::function<void(int64_t, int64_t)>;

std::atomic<PoolTestHooks::ClaimFn> g_before_count_check{nullptr};
std::atomic<PoolTestHooks::PublishFn> g_before_publish{nullptr};

// One job at a time. `ticket_` packs (generation << 32 | next chunk index): a worker claims a
// chunk with a compare-and-swap that fails once the job's generation has moved on, so a worker
// waking late can never run a chunk of a finished job. The job's fields are written before its
// ticket is published and stay valid until its last chunk is done, which the caller waits for.
//
// A new job first closes the finished job's ticket (the next generation with no chunk left to
// claim), and only then rewrites the fields. Without that, a worker that read the old ticket
// (generation G, index = G's chunk count) after the fields were rewritten compared that index
// with the new job's chunk count, claimed "chunk C_G of G" with a successful compare-and-swap
// on G's ticket, and ran the new job's function on a range that the new job also handed out:
// one chunk ran twice and the caller could return while it still ran, so the function and its
// captures were used after they were gone (a segfault in a train-draft data stage under load;
// test_thread_pool reproduces it with more threads than cores).
//
// A chunk that throws: the exception is kept (the first one), the chunks not yet started are
// skipped, and the caller rethrows it once every started chunk has finished, whichever thread
// threw.
class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  void run(int64_t n, int64_t chunk, int threads, const ChunkFn& fn) {
    std::lock_guard<std::mutex> one_job(job_mu_);
    ensure_workers(threads - 1);
    const uint64_t gen = ++generation_;
    // Close the previous job's ticket before touching the fields it was read with (see above):
    // every compare-and-swap on an older ticket value fails from here on, and the index kClosed
    // is past any chunk count.
    ticket_.store((gen << 32) | kClosed, std::memory_order_seq_cst);
    fn_.store(&fn, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    chunk_.store(chunk, std::memory_order_relaxed);
    const int64_t chunks = (n + chunk - 1) / chunk;
    chunks_.store(chunks, std::memory_order_release);
    done_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    if (const auto hook = g_before_publish.load(std::memory_order_relaxed)) hook();
    ticket_.store(gen << 32, std::memory_order_release);
    published_.store(gen);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(wake_mu_);
      wake_.notify_all();
    }
    work(gen);
    for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins) {
      if (spins < 4096)
        SPECLAB_PAUSE();
      else
        std::this_thread::yield();
    }
    if (failed_.load(std::memory_order_acquire)) {
      std::exception_ptr e;
      {
        std::lock_guard<std::mutex> lock(error_mu_);
        e = error_;
        error_ = nullptr;
      }
      std::rethrow_exception(e);
    }
  }

 private:
  void ensure_workers(int wanted) {
    while (static_cast<int>(workers_.size()) < wanted) workers_.emplace_back([this] { worker_loop(); });
    // Extra workers (after a lower thread count) simply find no chunks left to claim.
  }

  // Claims and runs chunks of job `gen` until none is left or the job is gone.
  void work(uint64_t gen) {
    for (;;) {
      uint64_t t = ticket_.load(std::memory_order_acquire);
      if ((t >> 32) != (gen & 0xffffffffu)) return;
      const int64_t idx = static_cast<int64_t>(t & 0xffffffffu);
      if (const auto hook = g_before_count_check.load(std::memory_order_relaxed)) hook(idx);
      // Acquire: a chunk count written for a newer job comes with that job's closed ticket, so
      // the compare-and-swap below then fails.
      if (idx >= chunks_.load(std::memory_order_acquire)) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
      const int64_t chunk = chunk_.load(std::memory_order_relaxed), n = n_.load(std::memory_order_relaxed);
      const int64_t begin = idx * chunk, end = begin + chunk < n ? begin + chunk : n;
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          (*fn_.load(std::memory_order_relaxed))(begin, end);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu_);
          if (!error_) error_ = std::current_exception();
          failed_.store(true, std::memory_order_release);
        }
      }
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void worker_loop() {
    // 0, not the current generation: a worker started by a job joins that job (work() returns
    // at once if it is over).
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = seen;
      for (int spins = 0; spins < 20000 && gen == seen; ++spins) {
        SPECLAB_PAUSE();
        gen = published_.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(wake_mu_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return published_.load() != seen; });
        sleepers_.fetch_sub(1);
        gen = published_.load();
      }
      seen = gen;
      work(gen);
    }
  }

  static constexpr uint64_t kClosed = 0xffffffffu;  // a ticket index past every job's chunks

  std::mutex job_mu_;
  uint64_t generation_ = 0;
  std::atomic<const ChunkFn*> fn_{nullptr};
  std::atomic<int64_t> n_{0}, chunk_{1}, chunks_{0}, done_{0};
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint64_t> published_{0};
  std::atomic<bool> failed_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first exception a chunk of the current job threw
  std::atomic<int> sleepers_{0};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
};

std::atomic<int> g_compute_threads{0};

}  // namespace

void set_pool_test_hooks(const PoolTestHooks& hooks) {
  g_before_count_check.store(hooks.before_count_check);
  g_before_publish.store(hooks.before_publish);
}

namespace {
// The CPUs of this node that the Slurm job this process runs in was allocated (SLURM_CPUS_ON_NODE,
// read only inside a job: SLURM_JOB_ID set); 0 outside a job or when unreadable.
int slurm_cpus_on_node() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* v = std::getenv("SLURM_CPUS_ON_NODE");
  if (!job || !*job || !v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 && n < (1L << 20) ? static_cast<int>(n) : 0;
}
}  // namespace

int available_cpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) {
    const unsigned c = std::thread::hardware_concurrency();
    n = c > 0 ? static_cast<int>(c) : 1;
  }
  // A cluster that binds no tasks to CPUs (TaskPlugin=task/none, as scripts/slurm's) leaves the
  // mask at the whole node: a 1-CPU array task ran 2 threads beside another task's 2 on 2 cores,
  // and recorded runtime.threads 2 (until 2026-12-06).
  const int slurm = slurm_cpus_on_node();
  return slurm > 0 && slurm < n ? slurm : n;
}

void set_compute_threads(int n) { g_compute_threads.store(n > 0 ? n : 0); }

int compute_threads() {
  const int n = g_compute_threads.load();
  if (n > 0) return n;
  // Read once: glibc's hardware_concurrency() opens and reads /sys/devices/system/cpu/online on
  // every call, and the kernels ask once per matmul and attention call (about 120 times per
  // SmolLM2 decode step, ~7% of the step).
  static const int hw = available_cpus();
  return hw;
}

void parallel_chunks(int64_t n, int64_t chunk, int threads, const ChunkFn& fn) {
  if (n <= 0) return;
  if (chunk < 1) chunk = 1;
  if (threads <= 1 || n <= chunk) {
    fn(0, n);
    return;
  }
  Pool::instance().run(n, chunk, threads, fn);
}

}  // namespace speclab
