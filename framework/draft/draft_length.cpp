#include "framework/draft/draft_length.h"

#include <algorithm>
#include <cmath>

namespace speclab {

namespace {
constexpr double kTimeWeight = 0.25;  // weight of a new timing in its running average
constexpr double kDiscount = 0.9;     // per drafted step, on the acceptance counts
}  // namespace

double expected_tokens_per_step(double alpha, int gamma) {
  if (alpha >= 1.0) return gamma + 1.0;
  return (1.0 - std::pow(alpha, gamma + 1)) / (1.0 - alpha);
}

int best_draft_length(double alpha, const std::vector<double>& verify_cost, double draft_cost, int max_gamma) {
  int best = 0;
  double best_rate = expected_tokens_per_step(alpha, 0) / verify_cost.at(0);
  for (int g = 1; g <= max_gamma; ++g) {
    const double rate = expected_tokens_per_step(alpha, g) / (verify_cost.at(static_cast<size_t>(g)) + g * draft_cost);
    if (rate > best_rate) {
      best = g;
      best_rate = rate;
    }
  }
  return best;
}

DraftLengthPolicy::DraftLengthPolicy(const DrafterOptions& o)
    : mode_(o.schedule == "heuristic" ? Mode::kHeuristic : o.schedule == "cost" ? Mode::kCost : Mode::kConstant),
      k_(o.num_speculative_tokens),
      max_(o.max_speculative_tokens),
      t_(static_cast<size_t>(o.num_speculative_tokens) + 2, 0.0),
      seen_(static_cast<size_t>(o.num_speculative_tokens) + 2, false) {}

std::vector<double> DraftLengthPolicy::verify_cost_estimate() const {
  if (!seen_[1]) return {};
  // Seconds for n = 1 .. k_ + 1 rows: measured where seen, else linear between the nearest seen
  // sizes around n, or along the line through the two largest seen sizes below it (through
  // (1, t_1) with slope 0 when only n = 1 was seen).
  std::vector<int> known;
  for (int n = 1; n <= k_ + 1; ++n)
    if (seen_[static_cast<size_t>(n)]) known.push_back(n);
  std::vector<double> cost(static_cast<size_t>(k_) + 1);
  for (int n = 1; n <= k_ + 1; ++n) {
    double t;
    if (seen_[static_cast<size_t>(n)]) {
      t = t_[static_cast<size_t>(n)];
    } else {
      const auto above = std::upper_bound(known.begin(), known.end(), n);
      int lo, hi;
      if (above != known.end()) {
        lo = *(above - 1);
        hi = *above;
      } else if (known.size() >= 2) {
        lo = known[known.size() - 2];
        hi = known.back();
      } else {
        lo = hi = known.back();
      }
      const double tl = t_[static_cast<size_t>(lo)], th = t_[static_cast<size_t>(hi)];
      t = hi == lo ? tl : tl + (th - tl) * (n - lo) / static_cast<double>(hi - lo);
    }
    cost[static_cast<size_t>(n - 1)] = std::max(t, 0.0) / t_[1];
  }
  return cost;
}

double DraftLengthPolicy::draft_cost_estimate() const {
  return draft_seen_ && seen_[1] && t_[1] > 0.0 ? draft_s_ / t_[1] : 0.0;
}

int DraftLengthPolicy::next() const {
  if (mode_ != Mode::kCost) return k_;
  if (!seen_[1]) return 0;  // measure a one-row step first
  bool multi = false;
  for (int n = 2; n <= k_ + 1; ++n) multi = multi || seen_[static_cast<size_t>(n)];
  if (!multi) return k_;  // then a full-length pass
  const int g = best_draft_length(alpha_estimate(), verify_cost_estimate(), draft_cost_estimate(), k_);
  return g == 0 && idle_ >= probe_after_ ? 1 : g;
}

void DraftLengthPolicy::update(int drafted, int accepted, double verify_seconds, double draft_seconds) {
  if (mode_ == Mode::kHeuristic) {
    if (drafted > 0 && accepted == drafted)
      k_ = k_ + 2 > max_ ? max_ : k_ + 2;
    else
      k_ = k_ - 1 < 1 ? 1 : k_ - 1;
    return;
  }
  if (mode_ != Mode::kCost) return;
  const size_t n = static_cast<size_t>(drafted) + 1;
  if (n < t_.size() && verify_seconds > 0.0) {
    t_[n] = seen_[n] ? (1.0 - kTimeWeight) * t_[n] + kTimeWeight * verify_seconds : verify_seconds;
    seen_[n] = true;
  }
  if (drafted == 0) {
    ++idle_;
    return;
  }
  idle_ = 0;
  s_ = kDiscount * s_ + accepted;
  f_ = kDiscount * f_ + (accepted < drafted ? 1.0 : 0.0);
  if (draft_seconds > 0.0) {
    const double per = draft_seconds / drafted;
    draft_s_ = draft_seen_ ? (1.0 - kTimeWeight) * draft_s_ + kTimeWeight * per : per;
    draft_seen_ = true;
  }
  const std::vector<double> cost = verify_cost_estimate();
  if (cost.empty()) return;
  if (best_draft_length(alpha_estimate(), cost, draft_cost_estimate(), k_) == 0)
    probe_after_ = std::min(2 * probe_after_, kProbeAfterMax);
  else
    probe_after_ = kProbeAfter;
}

}  // namespace speclab
