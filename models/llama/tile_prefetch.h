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
// make; each step() hints the rows of the next few keys into L1; finish() hints whatever is left
// (when the steps were fewer than announced). Hints only: no result depends on them.
#pragma once

#include <xmmintrin.h>  // _mm_prefetch

#include <cstdint>

namespace speclab::cpu::detail {

class TilePrefetch {
 public:
  // The cache: key j's K row starts at k + slot(j) * row_bytes + offset, its V row likewise at v,
  // and `bytes` of each are hinted; slot(j) = slots ? slots[j] : slot_base + j, with j the key's
  // absolute position (AttentionArgs' slot rule). slots: [> every key passed to aim()] or null.
  TilePrefetch(const int64_t* slots, int64_t slot_base, const char* k, const char* v, int64_t row_bytes,
               int64_t offset, int64_t bytes)
      : slots_(slots), slot_base_(slot_base), k_(k), v_(v), row_bytes_(row_bytes), offset_(offset), bytes_(bytes) {}

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
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
  }
  const int64_t* slots_;
  int64_t slot_base_;
  const char* k_;
  const char* v_;
  int64_t row_bytes_, offset_, bytes_;
  int64_t next_ = 0, end_ = 0, per_step_ = 0;
};

}  // namespace speclab::cpu::detail
