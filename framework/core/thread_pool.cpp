#include "framework/core/thread_pool.h"

#include <atomic>
#include <condition_variable>
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

// One job at a time. `ticket_` packs (generation << 32 | next chunk index): a worker claims a
// chunk with a compare-and-swap that fails once the job's generation has moved on, so a worker
// waking late can never run a chunk of a finished job. The job's fields are written before its
// ticket is published and stay valid until its last chunk is done, which the caller waits for.
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
    fn_.store(&fn, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    chunk_.store(chunk, std::memory_order_relaxed);
    const int64_t chunks = (n + chunk - 1) / chunk;
    chunks_.store(chunks, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
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
      if (idx >= chunks_.load(std::memory_order_relaxed)) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
      const int64_t chunk = chunk_.load(std::memory_order_relaxed), n = n_.load(std::memory_order_relaxed);
      const int64_t begin = idx * chunk, end = begin + chunk < n ? begin + chunk : n;
      (*fn_.load(std::memory_order_relaxed))(begin, end);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void worker_loop() {
    uint64_t seen = published_.load();
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

  std::mutex job_mu_;
  uint64_t generation_ = 0;
  std::atomic<const ChunkFn*> fn_{nullptr};
  std::atomic<int64_t> n_{0}, chunk_{1}, chunks_{0}, done_{0};
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint64_t> published_{0};
  std::atomic<int> sleepers_{0};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
};

std::atomic<int> g_compute_threads{0};

}  // namespace

void set_compute_threads(int n) { g_compute_threads.store(n > 0 ? n : 0); }

int compute_threads() {
  const int n = g_compute_threads.load();
  if (n > 0) return n;
  // Read once: glibc's hardware_concurrency() opens and reads /sys/devices/system/cpu/online on
  // every call, and the kernels ask once per matmul and attention call (about 120 times per
  // SmolLM2 decode step, ~7% of the step).
  static const int hw = [] {
    const unsigned c = std::thread::hardware_concurrency();
    return c > 0 ? static_cast<int>(c) : 1;
  }();
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
