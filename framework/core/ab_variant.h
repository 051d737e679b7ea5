// ab_variant() — a process-wide switch for timing a change to a kernel against the code it
// replaces, in one process, pass by pass (`speclab bench --ab`).
//
// On a shared machine whole runs drift by tens of percent between minutes: two alternated rounds
// of whole `speclab bench` runs once showed a 30% gain from a change to code the timed passes
// never ran (docs/performance.md, "Timing a kernel change: speclab bench --ab"). Passes of the
// two variants alternated one by one in one process see the same drift, so their ratio holds.
//
// How to use it: while trying a change, branch on it where the change is,
//   if (ab_variant()) { the new code } else { the old code }
// build, and run `speclab bench --ab` (with --verify-context and --verify-reps as wanted). It
// times every verification pass size with the switch at 0 (A) and at 1 (B), alternating, and
// prints the medians and B / A. Take the branch out before committing: nothing in the tree reads
// the switch, so `--ab` on the committed code is an A/A run, whose ratios show the noise floor.
//
// The switch is 0 except while `speclab bench --ab` times a B pass. Reading it is one relaxed
// atomic load, inlined; in an inner loop, read it once before the loop all the same. Set it only
// between forward passes.
#pragma once

#include <atomic>

namespace speclab {

namespace detail {
extern std::atomic<int> g_ab_variant;  // framework/core/ab_variant.cpp
}  // namespace detail

// 0 (A) or 1 (B).
inline int ab_variant() { return detail::g_ab_variant.load(std::memory_order_relaxed); }
// Any non-zero v selects B.
inline void set_ab_variant(int v) { detail::g_ab_variant.store(v != 0 ? 1 : 0, std::memory_order_relaxed); }

}  // namespace speclab
