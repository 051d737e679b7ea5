// Negative controls only: see faulty_acceptance.h. These are wrong on purpose.
#include "framework/verify/faulty_acceptance.h"

#include <algorithm>
#include <array>
#include <string>

#include "framework/core/error.h"
#include "framework/sampling/sampling.h"

namespace speclab {
namespace faulty {

namespace {

std::vector<double> normalised(const std::vector<float>& v, const char* field) {
  double s = 0.0;
  for (float x : v) {
    if (!(x >= 0.0f))
      throw Error(ErrorKind::kBadInput, "expected probabilities >= 0", "faulty_acceptance", field);
    s += x;
  }
  if (!(s > 0.0))
    throw Error(ErrorKind::kBadInput, "expected a positive probability sum", "faulty_acceptance",
                field);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] / s;
  return out;
}

// verify_rejection on the same draws, with only the recovered token of a rejection replaced:
// `draw(i, rng)` returns it for rejected row i, from the generator as verify_rejection left it
// before its recovered-token draw (the n_accepted + 1 accept/reject draws replayed).
template <class Draw>
Verdict with_recovered_token(const TokenList& draft, const std::vector<std::vector<float>>& target_probs,
                             const std::vector<std::vector<float>>& draft_probs, Rng& rng, Draw draw) {
  const std::array<uint64_t, 4> start = rng.state();
  Verdict v = verify_rejection(draft, target_probs, draft_probs, rng);
  if (v.bonus) return v;
  Rng replay(start);
  for (int32_t i = 0; i <= v.n_accepted; ++i) replay.uniform();
  v.next_token = draw(static_cast<size_t>(v.n_accepted), replay);
  rng = replay;
  return v;
}

}  // namespace

Verdict verify_always_accept(const TokenList& draft,
                             const std::vector<std::vector<float>>& target_probs,
                             const std::vector<std::vector<float>>& draft_probs, Rng& rng) {
  check_rejection_inputs(draft, target_probs, draft_probs);
  Verdict v;
  for (size_t i = 0; i < draft.size(); ++i) {
    const double p = target_probs[i][static_cast<size_t>(draft[i])];
    const double q = draft_probs.empty() ? 1.0 : draft_probs[i][static_cast<size_t>(draft[i])];
    v.accept_prob.push_back(q > 0.0 ? std::min(1.0, p / q) : 1.0);
  }
  v.n_accepted = static_cast<int32_t>(draft.size());
  v.next_token = sample(target_probs[draft.size()], rng);
  v.bonus = true;
  return v;
}

Verdict verify_replacement_from_p(const TokenList& draft,
                                  const std::vector<std::vector<float>>& target_probs,
                                  const std::vector<std::vector<float>>& draft_probs, Rng& rng) {
  // The real rule handed q = p at the rejected row draws its recovered token from p (the
  // documented fallback when the residual is all zero); so re-run the real rule on the same
  // draws, and replace only the recovered token.
  return with_recovered_token(draft, target_probs, draft_probs, rng,
                              [&](size_t i, Rng& r) { return sample(target_probs[i], r); });
}

Verdict verify_bonus_from_previous_row(const TokenList& draft,
                                       const std::vector<std::vector<float>>& target_probs,
                                       const std::vector<std::vector<float>>& draft_probs, Rng& rng) {
  const std::array<uint64_t, 4> start = rng.state();
  Verdict v = verify_rejection(draft, target_probs, draft_probs, rng);
  if (!v.bonus || draft.empty()) return v;
  Rng replay(start);
  for (size_t i = 0; i < draft.size(); ++i) replay.uniform();  // the k accept draws
  v.next_token = sample(target_probs[draft.size() - 1], replay);
  rng = replay;
  return v;
}

Verdict verify_residual_unnormalised(const TokenList& draft,
                                     const std::vector<std::vector<float>>& target_probs,
                                     const std::vector<std::vector<float>>& draft_probs, Rng& rng) {
  return with_recovered_token(draft, target_probs, draft_probs, rng, [&](size_t i, Rng& r) {
    const std::vector<float>& p = target_probs[i];
    const double u = r.uniform();
    double cum = 0.0;
    int64_t last = -1;
    for (size_t y = 0; y < p.size(); ++y) {
      const double q = draft_probs.empty() ? (static_cast<Token>(y) == draft[i] ? 1.0 : 0.0) : draft_probs[i][y];
      const double res = std::max(0.0, static_cast<double>(p[y]) - q);
      if (!(res > 0.0)) continue;
      last = static_cast<int64_t>(y);
      cum += res;  // not divided by the residual's sum: the bug
      if (u < cum) return static_cast<Token>(y);
    }
    return last >= 0 ? static_cast<Token>(last) : sample(p, r);
  });
}

Verdict verify_p_row_off_by_one(const TokenList& draft, const std::vector<std::vector<float>>& target_probs,
                                const std::vector<std::vector<float>>& draft_probs, Rng& rng) {
  check_rejection_inputs(draft, target_probs, draft_probs);
  std::vector<std::vector<float>> shifted(target_probs.begin() + 1, target_probs.end());
  shifted.push_back(target_probs.back());  // [p_1, ..., p_k, p_k]
  return verify_rejection(draft, shifted, draft_probs, rng);
}

std::vector<double> first_token_distribution_top_p_on_p_only(const std::vector<float>& p_processed,
                                                             const std::vector<float>& q_raw,
                                                             const std::vector<float>& q_drawn) {
  if (p_processed.empty() || q_raw.size() != p_processed.size() ||
      q_drawn.size() != p_processed.size())
    throw Error(ErrorKind::kBadInput, "expected p, q_raw and q_drawn of one non-empty vocab size",
                "faulty_acceptance", "q_raw");
  const std::vector<double> p = normalised(p_processed, "p_processed");
  const std::vector<double> qr = normalised(q_raw, "q_raw");
  const std::vector<double> qd = normalised(q_drawn, "q_drawn");
  const size_t n = p.size();
  std::vector<double> out(n);
  double rejected = 0.0, residual = 0.0;
  for (size_t y = 0; y < n; ++y) {
    const double a = qr[y] > 0.0 ? std::min(1.0, p[y] / qr[y]) : 1.0;
    out[y] = qd[y] * a;
    rejected += qd[y] * (1.0 - a);
    residual += std::max(0.0, p[y] - qr[y]);
  }
  for (size_t y = 0; y < n; ++y)
    out[y] += rejected * (residual > 0.0 ? std::max(0.0, p[y] - qr[y]) / residual : p[y]);
  return out;
}

}  // namespace faulty
}  // namespace speclab
