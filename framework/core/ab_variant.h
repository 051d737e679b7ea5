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
// The switch is 0 except while `speclab bench --ab` times a B pass. Reading it costs one relaxed
// atomic load; set it only between forward passes.
#pragma once

namespace speclab {

int ab_variant();            // 0 (A) or 1 (B)
void set_ab_variant(int v);  // v: 0 or 1

}  // namespace speclab
