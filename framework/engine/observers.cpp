#include "framework/engine/observers.h"

#include <limits>

namespace speclab {

namespace {
size_t idx(Phase p) { return static_cast<size_t>(p); }
}  // namespace

void PhaseTimer::on_phase_begin(Phase p) { start_[idx(p)] = Clock::now(); }

void PhaseTimer::on_phase_end(Phase p) {
  const Clock::time_point now = Clock::now();
  const double dt = std::chrono::duration<double>(now - start_[idx(p)]).count();
  step_seconds_[idx(p)] += dt;
  if (p == Phase::kPrefill) {
    prefill_seconds_ = dt;
    draft_prefill_seconds_ = 0.0;
    decode_start_ = now;
  } else if (p == Phase::kDraftBegin) {
    draft_prefill_seconds_ = dt;
    decode_start_ = now;
  }
}

void PhaseTimer::on_step(SpecStep& r) {
  r.draft_seconds = step_seconds_[idx(Phase::kPropose)];
  r.verify_seconds = step_seconds_[idx(Phase::kVerify)];
  r.accept_seconds = step_seconds_[idx(Phase::kAccept)];
  r.kv_seconds = step_seconds_[idx(Phase::kReserve)] + step_seconds_[idx(Phase::kCommit)];
  step_seconds_.fill(0.0);
}

void PhaseTimer::on_end(GenerationResult& r) {
  r.prefill_seconds = prefill_seconds_;
  r.draft_prefill_seconds = draft_prefill_seconds_;
  r.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start_).count();
  step_seconds_.fill(0.0);
}

void ProbabilityLog::on_verified(const VerifyInputs& in, const Verdict& v, SpecStep& record) {
  const DraftBlock& d = *in.draft;
  const size_t k = d.tokens.size();
  const bool have_p = in.p && !in.p->empty();
  for (size_t i = 0; i < k; ++i) {
    const Token x = d.tokens[i];
    const size_t xi = static_cast<size_t>(x);
    record.p.push_back(have_p ? (*in.p)[i][xi]
                              : static_cast<float>(softmax_prob(in.target_logits + static_cast<int64_t>(i) * in.vocab,
                                                                in.vocab, x)));
    record.q.push_back(d.probs.empty() ? 1.0f : d.probs[i][xi]);
    record.accept_prob.push_back(i < v.accept_prob.size() ? static_cast<float>(v.accept_prob[i])
                                                          : std::numeric_limits<float>::quiet_NaN());
  }
}

}  // namespace speclab
