// Speculative decoding of one prompt: a loop over Session::step() (framework/engine/session.h)
// with the standard observers. A drafter proposes, the target verifies all proposals in one
// forward pass, the longest acceptable prefix is kept, and the KV caches roll back the rest.
// Lossless: greedy output is token-identical to generate_ar(); under sampling the output
// distribution is the target's (Leviathan et al. 2023, arXiv:2211.17192; Chen et al. 2023,
// arXiv:2302.01318), see framework/verify/acceptance.h.
#pragma once

#include <vector>

#include "framework/engine/ar_decode.h"
#include "framework/engine/session.h"

namespace speclab {

struct SpecResult : GenerationResult {
  std::vector<SpecStep> steps;
  double draft_seconds = 0.0, verify_seconds = 0.0, accept_seconds = 0.0, kv_seconds = 0.0;

  // Tokens per target forward (mean accepted length including the emitted correction/bonus).
  double mean_accepted_length() const;
  // Fraction of drafted tokens accepted (0 without drafts). Biased low as an estimate of
  // Leviathan's alpha: the drafts after a step's first rejection are never examined.
  double acceptance_rate() const;
  // Leviathan's alpha as `speclab run` reports it (framework/io/experiment_summary.h): accepted /
  // examined positions, a step examining min(accepted + 1, drafted) of its drafts (0 without drafts).
  double alpha() const;
};

// Runs the open sequence of `session` to its end, keeping every step's record, and closes it.
SpecResult run_to_end(Session& session);

// One prompt, speculatively: a Session on `kv_target` (a private manager when kv_target.kv is
// null) with `drafter` (built for the same manager, DrafterEnv) and `dopts` (gamma, schedule,
// confidence threshold), timed and p/q-logged. `rule` replaces the lossless acceptance rule
// (the equivalence checks' negative controls).
SpecResult generate_speculative(const Model& target, const TokenDecoder& decoder, const TokenList& prompt,
                                const GenerationOptions& gen, const SamplingOptions& sampling, Drafter& drafter,
                                const DrafterOptions& dopts, KvTarget kv_target = {},
                                const TokenCallback& on_token = {}, AcceptanceRule rule = {});

}  // namespace speclab
