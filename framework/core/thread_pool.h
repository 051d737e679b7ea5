// parallel_chunks() — a small spin-then-sleep worker pool for the model's matmul kernels.
//
// A decode step issues ~120 short matmuls (10-100 µs each). libgomp's fork/join (what
// at::parallel_for uses in Debian's libtorch) busy-waits at every barrier; when another process
// holds one of the two cores, the parallel region waits for a thread that is not running and
// decode slows down 4-8x. Here work is split into chunks claimed from one atomic counter: the
// calling thread claims chunks too, so a worker that is slow to wake (or not scheduled at all)
// costs at most the chunk it has claimed, never a barrier. Idle workers spin ~0.2 ms, then
// sleep on a condition variable.
#pragma once

#include <cstdint>
#include <functional>

namespace speclab {

// Calls fn(begin, end) over [0, n) in chunks of `chunk` (the last may be shorter), on up to
// `threads` threads (the caller included; threads <= 1 runs everything on the caller). Returns
// when every chunk is done; each chunk runs exactly once, and never after the call returns.
// If a chunk throws, on any thread, the chunks not yet started are skipped and the first
// exception is rethrown to the caller once the started ones have finished. Concurrent calls
// from different threads are serialised; fn must not call parallel_chunks() itself.
void parallel_chunks(int64_t n, int64_t chunk, int threads, const std::function<void(int64_t, int64_t)>& fn);

// Test seams (tests/unit/test_thread_pool.cpp), null in normal use: called at the two points
// whose interleaving the pool must survive. before_count_check(idx): a thread in a job has read
// the ticket (next chunk index idx) and not yet compared idx with the job's chunk count;
// before_publish(): the caller has written a new job's fields and not yet published its ticket.
struct PoolTestHooks {
  using ClaimFn = void (*)(int64_t idx);
  using PublishFn = void (*)();
  ClaimFn before_count_check = nullptr;
  PublishFn before_publish = nullptr;
};
void set_pool_test_hooks(const PoolTestHooks& hooks);

// The CPUs this process may run on: its affinity mask's count (what `taskset`, a container's
// cpuset or a Slurm allocation leaves it), else std::thread::hardware_concurrency(), at least 1;
// inside a Slurm job (SLURM_JOB_ID set) at most SLURM_CPUS_ON_NODE, the job's allocation on this
// node, which the mask shows only where the cluster binds tasks to CPUs (the tasks of one
// multi-task step on a node each see the whole of it: an array task is one task). Not the machine's online
// CPUs: a Slurm task given 2 of a node's 64 CPUs would otherwise start 64 threads on those 2 and
// record a thread count that differs from node to node.
int available_cpus();

// Threads the model's kernels use (default: available_cpus(), read once). `speclab --threads N`
// sets it; n <= 0 restores the default.
void set_compute_threads(int n);
int compute_threads();

}  // namespace speclab
