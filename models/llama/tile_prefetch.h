// TilePrefetch — the software prefetch of attend_rows()'s next tile (attention_cpu.h), spread
// over the arithmetic of the current one.
//
// A one-row attention call at long contexts is bound by how fast one core pulls the cache rows
// from memory. Hints for a whole tile issued at once stall the core (it keeps only a few dozen
// misses in flight) about as long as the loads they were meant to hide; issued a few keys at a
// time between blocks of the current tile's arithmetic, they overlap it. Measurements:
// docs/performance.md, "The next tile's prefetch spread over the current tile".
//
// Usage: aim() at the next tile's keys and the number of step() calls the current tile will
// make; each step() hints the rows of the next few keys; finish() hints whatever is left (when
// the steps were fewer than announced). Hints only: no result depends on them.
//
// Where they go: into L2 (prefetcht1) for a call of one or two query rows, whose tiles are bound
// by how many lines the core keeps in flight, and into L1 (prefetcht0) for more rows, whose
// arithmetic per tile is long enough to wait for them. A T0 hint that misses holds one of the
// core's few L1 miss buffers until its line arrives. On the 2-core Zen 4, one process
// alternating T1 and T0 pass by pass (30 rounds, medians; SmolLM2, float16 cache): one-row
// passes at context 2048 took 6.38 ms with T1 against 7.32 with T0 (0.87), two-row passes 0.94;
// passes of 3 to 17 rows 0.99-1.05 (T1 slower at 3 and 5 rows); at context 64 no difference
// (`speclab bench --ab`; docs/performance.md, "The next tile's hints into L2 for one-row passes").
#pragma once

#include <xmmintrin.h>  // _mm_prefetch

#include <cstdint>

namespace speclab::cpu::detail {

class TilePrefetch {
 public:
  // The cache: key j's K row starts at k + slot(j) * row_bytes + offset, its V row likewise at v,
  // and `bytes` of each are hinted; slot(j) = slots ? slots[j] : slot_base + j, with j the key's
  // absolute position (AttentionArgs' slot rule). slots: [> every key passed to aim()] or null.
  // to_l2: hint into L2 (prefetcht1) instead of L1 (prefetcht0); see above.
  TilePrefetch(const int64_t* slots, int64_t slot_base, const char* k, const char* v, int64_t row_bytes,
               int64_t offset, int64_t bytes, bool to_l2)
      : slots_(slots), slot_base_(slot_base), k_(k), v_(v), row_bytes_(row_bytes), offset_(offset), bytes_(bytes),
        to_l2_(to_l2) {}

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
      const int64_t at = (slots_ ? slots_[next_] : slot_base_ + next_) * row_bytes_ + offset_;
      hint_lines(k_ + at);
      hint_lines(v_ + at);
    }
  }
  // Every 64-byte line that [p, p + bytes) touches.
  void hint_lines(const char* p) const {
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes_);
    for (uintptr_t line = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63); line < end; line += 64)
      if (to_l2_)
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
      else
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
  }
  const int64_t* slots_;
  int64_t slot_base_;
  const char* k_;
  const char* v_;
  int64_t row_bytes_, offset_, bytes_;
  bool to_l2_;
  int64_t next_ = 0, end_ = 0, per_step_ = 0;
};

}  // namespace speclab::cpu::detail
