// The verification rule of one speculative step: what it sees and the lossless default.
//
// A rule maps the target's verification rows (logits, and the processed p where needed) and the
// drafter's block (tokens, q) to a Verdict (framework/verify/acceptance.h). The engine calls the
// rule once per step; the equivalence checks substitute deliberately faulty rules
// (framework/verify/faulty_acceptance.h) to show that the checks catch them.
#pragma once

#include <functional>
#include <vector>

#include "framework/core/rng.h"
#include "framework/draft/drafter.h"
#include "framework/sampling/sampling.h"
#include "framework/verify/acceptance.h"

namespace speclab {

struct VerifyInputs {
  const DraftBlock* draft = nullptr;                   // tokens [k], probs [k][vocab] or empty
  const float* target_logits = nullptr;                // [k+1, vocab] row-major
  int64_t vocab = 0;
  const std::vector<std::vector<float>>* p = nullptr;  // [k+1][vocab] processed target probs;
                                                       // empty under greedy decoding with the
                                                       // lossless rule (it needs only logits)
  const SamplingOptions* sampling = nullptr;
  Rng* rng = nullptr;                                  // the verifier's stream
  // The drafter's stream as this step's proposal began (before its draws). Only the shared_draws
  // negative control reads it; the lossless rule never does.
  const Rng* draft_rng_at_propose = nullptr;
};

struct AcceptanceRule {
  std::function<Verdict(const VerifyInputs&)> verify;  // empty: lossless_acceptance
  // The rule reads p even under greedy decoding (the faulty rules do).
  bool needs_p_when_greedy = false;
  // The rule reads the draft's raw logits (DraftBlock::logits): drafters are asked for them
  // (DraftContext::want_logits).
  bool needs_draft_logits = false;
};

// The lossless rule: verify_greedy at temperature 0, verify_rejection otherwise (Leviathan et al.
// 2023, arXiv:2211.17192; Chen et al. 2023, arXiv:2302.01318). With k = 0 it reduces to AR's
// token choice: argmax, or one draw from p (one uniform() from in.rng).
Verdict lossless_acceptance(const VerifyInputs& in);

// The processed target distribution of every row. logits: [rows, vocab] row-major. Under greedy
// decoding the plain softmax (temperature 1), where p decides nothing and is only logged.
std::vector<std::vector<float>> target_probs(const float* logits, int64_t rows, int64_t vocab,
                                             const SamplingOptions& sampling);

}  // namespace speclab
