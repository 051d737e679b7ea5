// TilePrefetch — the software prefetch of attend_rows()'s next tile (attention_cpu.h), spread
// over the arithmetic of the current one.
//
// attend_rows() reads the K/V cache a tile of keys at a time. A one-row call (decode) at long
// contexts is bound by how fast one core pulls the cache rows from memory: at context 2048 one
// SmolLM2 layer reads 1.5 MiB of float16 K/V, which a core streamed at about 13 GB/s where a
// plain read loop reaches 35. Prefetching the whole next tile at once (384 cache lines for
// SmolLM2's float16 cache) did not change the time, nor did prefetching two tiles ahead or into
// L2, nor no prefetch at all: a core keeps only a few dozen misses in flight, and a burst of
// hints stalls it about as long as the loads it was meant to hide. Issued a few keys at a time
// between the blocks of scores of the current tile, the same hints overlap the arithmetic.
//
// Measured (2-core AMD EPYC Zen 5, 2026-11-27), same binaries alternated:
//  - attention_bench --model smollm2 --kv f16 --slots sequential --threads 1 --cpu-time 1, us per
//    layer, three rounds: context 2048 114-119 -> 81-84, 4096 236-242 -> 161-166, 512 unchanged
//    (17.6-18.1 -> 17.5-18.2); --isa avx2: 2048 128-132 -> 94-97, 512 with n = 5 112-116 -> 75-76.
//  - In the model's forward, where the weights stream evicts the cache rows from L3 (speclab
//    bench --step-profile, attention us per one-row forward, two rounds): float16 cache, context
//    512 521-676 -> 429-430, 2048 1939-1987 -> 1499-1538; int8 cache, 512 394-411 -> 270-286,
//    2048 1482-1542 -> 1005-1061. (attention_bench's int8 cache at context 512, 6 MiB over all
//    layers, stays in L3, and there the hints cost about 1 us per layer: 9.2-9.3 -> 10.1-10.4.)
//
// Usage: aim() at the next tile's keys and the number of step() calls the current tile will
// make; each step() hints the rows of the next few keys into L1; finish() hints whatever is left
// (when the steps were fewer than announced). Hints only: no result depends on them.
#pragma once

#include <xmmintrin.h>  // _mm_prefetch

#include <cstdint>

namespace speclab::cpu::detail {

struct TilePrefetch {
  // The cache: key j's K row is at k + slot(j) * row_bytes + offset, its V row likewise at v;
  // `bytes` of each are hinted. slot(j) = slots ? slots[j] : slot_base + j.
  const int64_t* slots = nullptr;
  int64_t slot_base = 0;
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t row_bytes = 0, offset = 0, bytes = 0;

  // Keys [begin, end) over `steps` calls of step() (an empty range when begin >= end).
  void aim(int64_t begin, int64_t end, int64_t steps) {
    next_ = begin;
    end_ = end > begin ? end : begin;
    per_step_ = steps > 0 ? (end_ - next_ + steps - 1) / steps : end_ - next_;
  }
  void step() { hint_until(next_ + per_step_ < end_ ? next_ + per_step_ : end_); }
  void finish() { hint_until(end_); }

 private:
  void hint_until(int64_t stop) {
    for (; next_ < stop; ++next_) {
      const int64_t at = (slots ? slots[next_] : slot_base + next_) * row_bytes + offset;
      hint_lines(k + at);
      hint_lines(v + at);
    }
  }
  // Every 64-byte line that [p, p + bytes) touches.
  void hint_lines(const char* p) const {
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
    for (uintptr_t line = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63); line < end; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
  }
  int64_t next_ = 0, end_ = 0, per_step_ = 0;
};

}  // namespace speclab::cpu::detail
