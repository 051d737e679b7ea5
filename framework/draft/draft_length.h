// DraftLengthPolicy — how many tokens to draft next step; usable with any drafter.
//   constant:  always gamma
//   heuristic: HF's "heuristic" schedule for num_assistant_tokens: +2 after a step where every
//              draft token was accepted, -1 (not below 1) otherwise; capped at max.
// The confidence threshold (stop drafting early when the drafter's top probability falls
// below it) is applied inside propose() through DraftContext::min_confidence.
#pragma once

#include "framework/draft/drafter_options.h"

namespace speclab {

class DraftLengthPolicy {
 public:
  explicit DraftLengthPolicy(const DrafterOptions& o)
      : heuristic_(o.schedule == "heuristic"), k_(o.num_speculative_tokens), max_(o.max_speculative_tokens) {}
  int next() const { return k_; }
  void update(int drafted, int accepted) {
    if (!heuristic_) return;
    if (drafted > 0 && accepted == drafted)
      k_ = k_ + 2 > max_ ? max_ : k_ + 2;
    else
      k_ = k_ - 1 < 1 ? 1 : k_ - 1;
  }

 private:
  bool heuristic_;
  int k_;
  int max_;
};

}  // namespace speclab
