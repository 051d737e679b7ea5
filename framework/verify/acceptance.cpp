#include "framework/verify/acceptance.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "framework/core/error.h"
#include "framework/sampling/sampling.h"

namespace speclab {

namespace {

const char* const kSource = "verify";

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw Error(ErrorKind::kBadInput, message, kSource, field);
}

void check_token(Token t, int64_t vocab, size_t i) {
  if (t < 0 || t >= vocab)
    bad("draft", "expected draft tokens in [0, " + std::to_string(vocab) + "), found " +
                     std::to_string(t) + " at position " + std::to_string(i));
}

float checked_prob(const std::vector<float>& row, Token t, const char* field, size_t i) {
  const float v = row[static_cast<size_t>(t)];
  if (!(v >= 0.0f) || !std::isfinite(v))
    bad(field, "expected a finite probability >= 0, found " + num(v) + " at row " +
                   std::to_string(i) + ", token " + std::to_string(t));
  return v;
}

// One inverse-CDF draw from norm(max(0, p − q)), q one-hot at `x` when q == nullptr; from p
// when the residual is all zero. Exactly one rng.uniform().
Token sample_recovered(const std::vector<float>& p, const float* q, Token x, Rng& rng) {
  const size_t n = p.size();
  double total = 0.0;
  for (size_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const float qj = q ? q[j] : (static_cast<Token>(j) == x ? 1.0f : 0.0f);
    if (!(pj >= 0.0f) || !(qj >= 0.0f))
      bad(pj >= 0.0f ? "draft_probs" : "target_probs",
          "expected probabilities >= 0, found " + num(pj >= 0.0f ? qj : pj) + " at token " +
              std::to_string(j));
    total += residual_weight(pj, qj);
  }
  if (!(total > 0.0)) return sample(p, rng);
  if (!std::isfinite(total)) bad("target_probs", "expected finite probabilities, found a sum of " + num(total));
  const double u = rng.uniform() * total;
  double cum = 0.0;
  Token last = 0;
  for (size_t j = 0; j < n; ++j) {
    const float qj = q ? q[j] : (static_cast<Token>(j) == x ? 1.0f : 0.0f);
    const double r = residual_weight(p[j], qj);
    if (r > 0.0) {
      cum += r;
      last = static_cast<Token>(j);
      if (u < cum) return last;
    }
  }
  return last;  // rounding left u at the very end
}

// Normalises a float distribution into double. Throws on empty, negative, NaN or zero sum.
std::vector<double> normalised(const std::vector<float>& v, const char* field) {
  if (v.empty()) bad(field, "expected a non-empty distribution, found 0 entries");
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] >= 0.0f) || !std::isfinite(v[i]))
      bad(field, "expected finite probabilities >= 0, found " + num(v[i]) + " at token " +
                     std::to_string(i));
    s += v[i];
  }
  if (!(s > 0.0)) bad(field, "expected a positive probability sum, found " + num(s));
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] / s;
  return out;
}

}  // namespace

double acceptance_probability(double p_x, double q_x) { return std::min(1.0, p_x / q_x); }

double residual_weight(double p_y, double q_y) { return std::max(0.0, p_y - q_y); }

Verdict verify_greedy(const TokenList& draft, const float* target_logits, int64_t vocab) {
  if (vocab <= 0) bad("vocab", "expected vocab > 0, found " + std::to_string(vocab));
  if (target_logits == nullptr) bad("target_logits", "expected [k + 1, vocab] logits, found null");
  for (size_t i = 0; i < draft.size(); ++i) check_token(draft[i], vocab, i);
  Verdict v;
  v.accept_prob.reserve(draft.size());
  for (size_t i = 0; i < draft.size(); ++i) {
    const Token best = argmax(target_logits + static_cast<int64_t>(i) * vocab, vocab);
    if (best != draft[i]) {
      v.accept_prob.push_back(0.0);
      v.n_accepted = static_cast<int32_t>(i);
      v.next_token = best;
      v.bonus = false;
      return v;
    }
    v.accept_prob.push_back(1.0);
  }
  v.n_accepted = static_cast<int32_t>(draft.size());
  v.next_token = argmax(target_logits + static_cast<int64_t>(draft.size()) * vocab, vocab);
  v.bonus = true;
  return v;
}

int64_t check_rejection_inputs(const TokenList& draft,
                               const std::vector<std::vector<float>>& target_probs,
                               const std::vector<std::vector<float>>& draft_probs) {
  const size_t k = draft.size();
  if (target_probs.size() != k + 1)
    bad("target_probs", "expected k + 1 = " + std::to_string(k + 1) + " rows, found " +
                            std::to_string(target_probs.size()));
  const size_t vocab = target_probs[0].size();
  if (vocab == 0) bad("target_probs", "expected rows of vocab > 0 entries, found 0");
  for (size_t i = 0; i < target_probs.size(); ++i)
    if (target_probs[i].size() != vocab)
      bad("target_probs", "expected every row to have " + std::to_string(vocab) +
                              " entries, found " + std::to_string(target_probs[i].size()) +
                              " in row " + std::to_string(i));
  if (!draft_probs.empty()) {
    if (draft_probs.size() != k)
      bad("draft_probs", "expected k = " + std::to_string(k) +
                             " rows (or none for a deterministic drafter), found " +
                             std::to_string(draft_probs.size()));
    for (size_t i = 0; i < k; ++i)
      if (draft_probs[i].size() != vocab)
        bad("draft_probs", "expected every row to have " + std::to_string(vocab) +
                               " entries (the target's vocab), found " +
                               std::to_string(draft_probs[i].size()) + " in row " +
                               std::to_string(i));
  }
  for (size_t i = 0; i < k; ++i) check_token(draft[i], static_cast<int64_t>(vocab), i);
  return static_cast<int64_t>(vocab);
}

Verdict verify_rejection(const TokenList& draft, const std::vector<std::vector<float>>& target_probs,
                         const std::vector<std::vector<float>>& draft_probs, Rng& rng) {
  check_rejection_inputs(draft, target_probs, draft_probs);
  const bool one_hot = draft_probs.empty();
  const size_t k = draft.size();
  Verdict v;
  v.accept_prob.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    const Token x = draft[i];
    const double p = checked_prob(target_probs[i], x, "target_probs", i);
    const double q = one_hot ? 1.0 : checked_prob(draft_probs[i], x, "draft_probs", i);
    if (q == 0.0)
      bad("draft_probs", "expected q(draft token) > 0 (the token was drawn from q), found 0 at "
                         "position " + std::to_string(i) + ", token " + std::to_string(x));
    const double a = acceptance_probability(p, q);
    v.accept_prob.push_back(a);
    if (rng.uniform() < a) continue;  // accepted
    v.n_accepted = static_cast<int32_t>(i);
    v.next_token =
        sample_recovered(target_probs[i], one_hot ? nullptr : draft_probs[i].data(), x, rng);
    v.bonus = false;
    return v;
  }
  v.n_accepted = static_cast<int32_t>(k);
  v.next_token = sample(target_probs[k], rng);
  v.bonus = true;
  return v;
}

std::vector<double> first_token_distribution(const std::vector<float>& p, const std::vector<float>& q) {
  if (p.size() != q.size())
    bad("q", "expected q to have the vocab of p (" + std::to_string(p.size()) + "), found " +
                 std::to_string(q.size()));
  const std::vector<double> pn = normalised(p, "p");
  const std::vector<double> qn = normalised(q, "q");
  const size_t n = pn.size();
  std::vector<double> out(n);
  double rejected = 0.0;   // Σ_x q(x)·(1 − min(1, p(x)/q(x)))
  double residual = 0.0;   // Σ_y max(0, p(y) − q(y))
  for (size_t y = 0; y < n; ++y) {
    const double a = qn[y] > 0.0 ? acceptance_probability(pn[y], qn[y]) : 0.0;
    out[y] = qn[y] * a;
    rejected += qn[y] * (1.0 - a);
    residual += residual_weight(pn[y], qn[y]);
  }
  for (size_t y = 0; y < n; ++y) {
    const double r = residual > 0.0 ? residual_weight(pn[y], qn[y]) / residual : pn[y];
    out[y] += rejected * r;
  }
  return out;
}

}  // namespace speclab
