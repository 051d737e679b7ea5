#include "framework/draft/draft_block_check.h"

#include <cmath>
#include <limits>

#include "framework/core/error.h"

namespace speclab {

void check_draft_block(const DraftBlock& b, int max_k, int64_t vocab, const std::string& name) {
  const std::string who = "drafter '" + name + "'";
  auto bad = [&](const std::string& field, const std::string& msg) { throw Error(ErrorKind::kBadInput, msg, who, field); };
  const size_t k = b.tokens.size();
  if (static_cast<int64_t>(k) > max_k)
    bad("tokens", "expected at most max_k = " + std::to_string(max_k) + " draft tokens, found " + std::to_string(k));
  for (size_t i = 0; i < k; ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= vocab)
      bad("tokens", "expected token ids in [0, " + std::to_string(vocab) + "), found " + std::to_string(b.tokens[i]) +
                        " at draft position " + std::to_string(i));
  if (b.probs.empty()) return;
  if (b.probs.size() != k)
    bad("probs", "expected one q row per draft token (" + std::to_string(k) + ") or none, found " +
                     std::to_string(b.probs.size()));
  for (size_t i = 0; i < k; ++i) {
    const std::vector<float>& q = b.probs[i];
    const std::string row = " in q row " + std::to_string(i);
    if (static_cast<int64_t>(q.size()) != vocab)
      bad("probs", "expected " + std::to_string(vocab) + " entries (the vocabulary)" + row + ", found " +
                       std::to_string(q.size()));
    // Validity and the sum in one pass over 8 independent partial sums: one chain of double adds
    // over a 49,152-entry row waited on its add latency (about 50 us per draft token, a third of
    // an EAGLE draft token's cost under sampling). The first bad entry is looked up only on failure.
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    bool ok = true;
    size_t t = 0;
    for (; t + 8 <= q.size(); t += 8)
      for (size_t r = 0; r < 8; ++r) {
        const float v = q[t + r];
        ok &= (v >= 0.0f) & (v <= std::numeric_limits<float>::max());  // false for NaN, < 0 and +inf
        part[r] += v;
      }
    for (; t < q.size(); ++t) {
      ok &= (q[t] >= 0.0f) & (q[t] <= std::numeric_limits<float>::max());
      part[0] += q[t];
    }
    if (!ok)
      for (size_t j = 0; j < q.size(); ++j)
        if (!(q[j] >= 0.0f) || !std::isfinite(q[j]))
          bad("probs", "expected finite probabilities >= 0" + row + ", found " + std::to_string(q[j]) + " at token " +
                           std::to_string(j));
    const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    if (std::fabs(sum - 1.0) > kDraftProbSumTolerance)
      bad("probs", "expected q to sum to 1 within " + std::to_string(kDraftProbSumTolerance) + row + ", found " +
                       std::to_string(sum) + " (a truncated or unnormalised q biases the output)");
    if (q[static_cast<size_t>(b.tokens[i])] <= 0.0f)
      bad("probs", "expected q(draft token) > 0" + row + " (the token is drawn from q), found 0 for token " +
                       std::to_string(b.tokens[i]));
  }
}

}  // namespace speclab
