// StepProfile — where a forward's time goes: host wall time per step of the decoder's layer loop
// (models/llama/layer_loop.h), summed over the forwards that carry it (ForwardOptions::profile).
// `speclab bench --step-profile` prints it for the verification passes of n = 1 ... 17 rows, so
// that what an extra row costs can be read per step (docs/performance.md).
//
// The times are taken on the calling thread between the loop's steps (two clock reads per step,
// about 20 ns each); a step's time includes its threads' work, since every CPU step returns when
// its threads are done. On CUDA the steps are asynchronous launches, so there the split says
// nothing about the device: the bench asks for it on the CPU only. Profiling never changes a
// result (tests/integration/test_cpu_path.cpp).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace speclab {

// The steps of layer_loop.h, in loop order. Each layer has two norms and two residual adds;
// kNorm and kAdd sum both (and kNorm the final norm before the LM head).
enum class LoopStep : int {
  kEmbed,      // token embeddings
  kNorm,       // RMSNorm (attention input, MLP input, final)
  kQkv,        // q/k/v projection
  kRopeStore,  // RoPE on q and k, K/V written to the cache
  kAttention,  // causal attention over the cache
  kOutProj,    // attention output projection
  kAdd,        // residual adds
  kGateUp,     // gate/up projection
  kSwiglu,     // SwiGLU
  kDown,       // down projection
  kLmHead,     // LM head on the rows that want logits
  kCount
};

inline const char* loop_step_name(LoopStep s) {
  static const char* const names[] = {"embed", "norm", "qkv", "rope+store", "attention", "o_proj",
                                      "add",   "gate_up", "swiglu", "down", "lm_head"};
  return names[static_cast<int>(s)];
}

struct StepProfile {
  std::array<double, static_cast<size_t>(LoopStep::kCount)> seconds{};  // summed over `forwards`
  int64_t forwards = 0;

  double& at(LoopStep s) { return seconds[static_cast<size_t>(s)]; }
  double at(LoopStep s) const { return seconds[static_cast<size_t>(s)]; }
};

// Charges the wall time since the previous lap (or construction) to a step of *profile; does
// nothing when profile is null, so the loop costs one branch per step without a profile.
class StepClock {
 public:
  explicit StepClock(StepProfile* profile) : p_(profile) {
    if (p_) last_ = Clock::now();
  }
  void lap(LoopStep s) {
    if (!p_) return;
    const Clock::time_point now = Clock::now();
    p_->at(s) += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void finish() {
    if (p_) ++p_->forwards;
  }

 private:
  using Clock = std::chrono::steady_clock;
  StepProfile* p_;
  Clock::time_point last_{};
};

}  // namespace speclab
