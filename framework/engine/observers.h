// The standard observers of the decoding loop (framework/engine/session.h).
//
//   PhaseTimer      wall-clock seconds: per step (draft = propose, verify = the target forward,
//                   accept = the rule, kv = reserve + commit/rollback + drafter accept) into each
//                   SpecStep, and prefill / draft prefill / decode into the GenerationResult
//                   (draft prefill = the drafter's begin(); decode = from the end of both to end()).
//   ProbabilityLog  p and q of every draft token into SpecStep::p / q, and the rule's
//                   min(1, p/q) into accept_prob (NaN past the first rejection). Under greedy
//                   decoding p is the plain softmax (temperature 1) of the draft token, computed
//                   for the logged tokens only.
//   TokenSink       forwards every emitted token to a callback (streaming output, tests).
#pragma once

#include <array>
#include <chrono>
#include <functional>

#include "framework/engine/session.h"

namespace speclab {

class PhaseTimer : public StepObserver {
 public:
  void on_phase_begin(Phase p) override;
  void on_phase_end(Phase p) override;
  void on_step(SpecStep& record) override;
  void on_end(GenerationResult& result) override;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kPhases = 7;
  std::array<Clock::time_point, kPhases> start_{};
  std::array<double, kPhases> step_seconds_{};
  double prefill_seconds_ = 0.0, draft_prefill_seconds_ = 0.0;
  Clock::time_point decode_start_{};
};

class ProbabilityLog : public StepObserver {
 public:
  void on_verified(const VerifyInputs& in, const Verdict& v, SpecStep& record) override;
};

class TokenSink : public StepObserver {
 public:
  explicit TokenSink(std::function<void(Token)> f) : f_(std::move(f)) {}
  void on_token(Token t) override { f_(t); }

 private:
  std::function<void(Token)> f_;
};

}  // namespace speclab
