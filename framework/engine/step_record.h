// SpecStep — the record of one step of the decoding loop (framework/engine/session.h), as logged
// to HDF5 (/runs/steps; framework/io/experiment_records.h calls it StepRecord). The step fills the counts and the verdict; observers fill the rest
// (framework/engine/observers.h: ProbabilityLog the p/q columns, PhaseTimer the seconds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace speclab {

struct SpecStep {
  int32_t drafted = 0;                // k: draft tokens proposed (after the length policy)
  int32_t accepted = 0;               // n: draft tokens kept (0 <= n <= k), by the verification:
                                      // EOS or a stop string may end the output before all of them
  uint8_t bonus = 0;                  // 1 when all k were kept and a bonus token was sampled from p
  std::vector<float> p;               // [k] target probability of each draft token
  std::vector<float> q;               // [k] draft probability (1 for deterministic drafters)
  std::vector<float> accept_prob;     // [k] min(1, p/q) where examined, else NaN
  std::vector<uint8_t> accepted_mask; // [k] 1 if kept
  double draft_seconds = 0.0;         // propose()
  double verify_seconds = 0.0;        // the target forward over [pending, drafts]
  double accept_seconds = 0.0;        // probabilities + acceptance + sampling
  double kv_seconds = 0.0;            // reserve/commit/truncate + drafter accept()
  // Which source proposed the draft tokens, for a drafter that combines several
  // (DraftBlock::source: "prompt_lookup", "retrieval" or the wrapped drafter's name behind
  // prompt_lookup_first / retrieval_first); empty when the drafter itself did, or nothing was
  // drafted.
  std::string source;
};

}  // namespace speclab
