// PassRoof — a lower bound on the time of one forward pass of n rows on the CPU, from what the
// pass must read and what it must compute (the roofline model, Williams, Waterman and Patterson,
// "Roofline", CACM 2009). `speclab bench` prints it beside the measured verification cost
// (issue 12), so that a target below it is seen to be out of this machine's reach.
//
// A pass of n rows at context C reads the weights and the cached K/V once, whatever n
// (memory_seconds), and performs n rows of multiply-accumulates (MACs), each row's matmuls and
// attention, no faster than the CPU's peak rates (arith_peak.h). So it takes at least
//   seconds(n) = max(memory_seconds, n * row_seconds)
// with perfect overlap of the two. Everything a real pass adds (unpacking quantized weights,
// softmax, norms, RoPE, thread hand-offs, waits) only lengthens it.
//
// MACs per row: the matmuls' (LlamaModel::matmul_macs_per_row, by int8 or float32 arithmetic)
// and attention's, layers * heads * head_dim * C * 2 (q.k and p.v over C keys; the rows of a
// verification pass see C to C + n - 1 keys, and C is the bound's), at the int8 rate over an int8
// cache where the VNNI attention runs (attention_int8_vnni.h), else at the float32 rate.
#pragma once

#include <algorithm>
#include <cstdint>

namespace speclab {

struct PassRoof {
  double bytes = 0;                 // read once per pass: weights + K/V at the context
  double bandwidth = 0;             // bytes / s
  double int8_macs_per_row = 0;     // MACs per row done by int8 dot products
  double f32_macs_per_row = 0;      // MACs per row done by float32 FMAs
  double int8_macs_per_s = 0;       // peak rates on the pass's threads
  double f32_macs_per_s = 0;

  // False where a rate the row needs, or the bandwidth, is unknown (0): no bound then.
  bool valid() const {
    return bandwidth > 0 && (int8_macs_per_row == 0 || int8_macs_per_s > 0) &&
           (f32_macs_per_row == 0 || f32_macs_per_s > 0);
  }
  double memory_seconds() const { return bytes / bandwidth; }
  double row_seconds() const {
    return (int8_macs_per_row > 0 ? int8_macs_per_row / int8_macs_per_s : 0.0) +
           (f32_macs_per_row > 0 ? f32_macs_per_row / f32_macs_per_s : 0.0);
  }
  // Needs valid(); n >= 1.
  double seconds(int64_t n) const { return std::max(memory_seconds(), static_cast<double>(n) * row_seconds()); }
};

// MACs per row of attention over `context` keys: q.k and p.v for every query head.
inline double attention_macs_per_row(int64_t layers, int64_t heads, int64_t head_dim, int64_t context) {
  return 2.0 * static_cast<double>(layers) * static_cast<double>(heads) * static_cast<double>(head_dim) *
         static_cast<double>(context);
}

}  // namespace speclab
