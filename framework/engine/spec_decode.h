// Speculative decoding: a drafter proposes, the target verifies all proposals in one forward
// pass, the longest acceptable prefix is kept, and the KV caches roll back the rest.
// Lossless: greedy output is token-identical to generate_ar(); under sampling the output
// distribution is the target's (Leviathan et al. 2023, arXiv:2211.17192; Chen et al. 2023,
// arXiv:2302.01318), see framework/verify/acceptance.h.
#pragma once

#include <functional>
#include <vector>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/engine/ar_decode.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/verify/acceptance.h"

namespace speclab {

// One speculative step, as logged to HDF5.
struct SpecStep {
  int drafted = 0;                    // k: draft tokens proposed (after the length policy)
  int accepted = 0;                   // n: draft tokens kept
  bool bonus = false;                 // all k kept and a bonus token sampled from p
  std::vector<float> p;               // [k] target probability of each draft token
  std::vector<float> q;               // [k] draft probability (1 for deterministic drafters)
  std::vector<float> accept_prob;     // [k] min(1, p/q) where examined, else NaN
  std::vector<uint8_t> accepted_mask; // [k] 1 if kept
  double draft_seconds = 0.0;         // propose()
  double verify_seconds = 0.0;        // the target forward over [pending, drafts]
  double accept_seconds = 0.0;        // probabilities + acceptance + sampling
  double kv_seconds = 0.0;            // reserve/commit/truncate + drafter accept()
};

struct SpecResult : GenerationResult {
  std::vector<SpecStep> steps;
  double draft_seconds = 0.0, verify_seconds = 0.0, accept_seconds = 0.0, kv_seconds = 0.0;

  // Tokens per target forward (mean accepted length including the emitted correction/bonus).
  double mean_accepted_length() const;
  // Fraction of drafted tokens accepted.
  double acceptance_rate() const;
};

// What an acceptance rule sees for one verification step.
struct VerifyInputs {
  const DraftBlock* draft = nullptr;                     // tokens [k], probs [k][vocab] or empty
  const float* target_logits = nullptr;                  // [k+1, vocab] row-major
  int64_t vocab = 0;
  const std::vector<std::vector<float>>* p = nullptr;    // [k+1][vocab] processed target probs
                                                         // (empty under greedy decoding
                                                         // when no hook is set)
  const SamplingOptions* sampling = nullptr;
  Rng* rng = nullptr;                                    // the verifier's stream
};
using AcceptanceRule = std::function<Verdict(const VerifyInputs&)>;

// The lossless rule: verify_greedy at temperature 0, verify_rejection otherwise.
Verdict lossless_acceptance(const VerifyInputs& in);

struct SpecHooks {
  // Replaces the acceptance rule. Only the equivalence checks set it, to run deliberately
  // faulty rules as negative controls through the real engine.
  AcceptanceRule acceptance;
};

// target's KV lives in `kv_target` (a private manager when kv_target.kv is null). The drafter was
// built for the same manager (DrafterEnv). `dopts` supplies gamma, the schedule and the
// confidence threshold.
SpecResult generate_speculative(const Model& target, const Tokenizer& tokenizer, const TokenList& prompt,
                                const GenerationOptions& gen, const SamplingOptions& sampling, Drafter& drafter,
                                const DrafterOptions& dopts, KvTarget kv_target, const TokenCallback& on_token = {},
                                const SpecHooks& hooks = {});

}  // namespace speclab
