// Peak multiply-accumulate rates of this CPU's vector units, measured on the compute threads:
// what no CPU kernel here can beat, and so, with the bytes a pass reads, a lower bound on the time
// of an n-row forward (`speclab bench`'s arithmetic roof, issue 12).
//
// Each rate is measured with independent chains of one instruction, one chain per register
// (enough to cover its latency), written in inline assembly so that no chain is dropped or
// spilled. Every compute thread runs them at once, 8 times (framework/core/thread_pool.h). The
// rate is the thread count times the fastest single run of any thread: another job on a core
// slows some runs, and a lower bound needs the highest rate. Rates are counted in
// multiply-accumulates of the kernels' element type:
//   - float32: vfmadd231ps, 16 MACs per 512-bit instruction, 8 per 256-bit one;
//   - int8:    vpdpbusd under kAvx512Vnni (64 per 512-bit instruction, 32 per 256-bit), else
//              vpmaddubsw (32 per 256-bit instruction), which the int8 kernels need with an add
//              and a widening step beside it, so the rate is an upper bound for them.
// Where an ISA has both register widths the faster is taken (a CPU that splits 512-bit
// instructions, such as AMD Zen 4, may run 256-bit ones at a higher rate per MAC). Rates are of
// the machine as it runs now: another job on the same cores lowers them.
#pragma once

#include <string>

#include "models/llama/gemv.h"

namespace speclab::cpu {

struct ArithPeak {
  double f32_macs_per_s = 0;   // float32 FMAs on all compute threads; 0 under kScalar
  double int8_macs_per_s = 0;  // int8 dot products on all compute threads; 0 under kScalar
  std::string f32_instruction;   // e.g. "vfmadd231ps zmm"
  std::string int8_instruction;  // e.g. "vpdpbusd zmm"
  int threads = 0;
};

// Measures both rates under `isa` (at most kernel_isa()); some tens of milliseconds. Under kScalar both are 0
// (the scalar kernels' rate depends on the compiler, not on one instruction).
ArithPeak measure_arith_peak(KernelIsa isa);

}  // namespace speclab::cpu
