// GPU greedy verification: the per-row argmax of the target's verification logits and the
// length of the accepted draft prefix, computed on the device without copying the [k+1, vocab]
// logits to the host (only k+2 integers come back).
//
// Greedy acceptance (Leviathan et al. 2023, §2.3 with temperature 0): draft token i is accepted
// while draft[i] == argmax(logits[i]); the first mismatching row's argmax is the emitted
// correction, or row k's argmax is the bonus token when all k drafts are accepted.
// Ties resolve to the lowest index, as in the CPU path (framework/sampling/sampling.h argmax).
#pragma once

#include <cstdint>

namespace speclab::cuda {

// True when a CUDA device is usable from this process.
bool device_available();

// logits_dev: device pointer to [rows, vocab] float32 (row-major), rows = k + 1.
// draft_host: [k] host token ids. argmax_host: [rows] output, host.
// Returns the number of accepted draft tokens n (0 <= n <= k). Throws speclab::Error on a CUDA
// failure.
int32_t greedy_verify(const float* logits_dev, int32_t rows, int32_t vocab, const int32_t* draft_host,
                      int32_t* argmax_host);

// Convenience for tests: copies host logits to the device and calls greedy_verify.
int32_t greedy_verify_host(const float* logits_host, int32_t rows, int32_t vocab, const int32_t* draft_host,
                           int32_t* argmax_host);

}  // namespace speclab::cuda
