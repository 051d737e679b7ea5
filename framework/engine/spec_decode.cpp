#include "framework/engine/spec_decode.h"

#include <algorithm>

#include <memory>

#include "framework/engine/observers.h"

namespace speclab {

double SpecResult::mean_accepted_length() const {
  if (steps.empty()) return 0.0;
  double emitted = 0.0;
  for (const auto& s : steps) emitted += s.accepted + 1;
  return emitted / static_cast<double>(steps.size());
}

double SpecResult::acceptance_rate() const {
  double drafted = 0.0, accepted = 0.0;
  for (const auto& s : steps) {
    drafted += s.drafted;
    accepted += s.accepted;
  }
  return drafted > 0 ? accepted / drafted : 0.0;
}

double SpecResult::alpha() const {
  double examined = 0.0, accepted = 0.0;
  for (const auto& s : steps) {
    examined += std::min(s.accepted + 1, s.drafted);
    accepted += s.accepted;
  }
  return examined > 0 ? accepted / examined : 0.0;
}

SpecResult run_to_end(Session& session) {
  std::vector<SpecStep> steps;
  while (!session.done()) steps.push_back(session.step());
  SpecResult r;
  static_cast<GenerationResult&>(r) = session.end();
  for (const SpecStep& s : steps) {
    r.draft_seconds += s.draft_seconds;
    r.verify_seconds += s.verify_seconds;
    r.accept_seconds += s.accept_seconds;
    r.kv_seconds += s.kv_seconds;
  }
  r.steps = std::move(steps);
  return r;
}

SpecResult generate_speculative(const Model& target, const TokenDecoder& decoder, const TokenList& prompt,
                                const GenerationOptions& gen, const SamplingOptions& sampling, Drafter& drafter,
                                const DrafterOptions& dopts, KvTarget kv_target, const TokenCallback& on_token,
                                AcceptanceRule rule) {
  PrivateKv own(target.config(), kv_target, prompt.size() + static_cast<size_t>(gen.max_new_tokens) + 64);
  Session session(target, decoder, own.target(), std::move(rule));
  PhaseTimer timer;
  ProbabilityLog log;
  TokenSink sink(on_token);
  session.add_observer(timer);
  session.add_observer(log);
  if (on_token) session.add_observer(sink);
  session.begin({prompt, {&drafter, dopts}, gen, sampling});
  return run_to_end(session);
}

}  // namespace speclab
