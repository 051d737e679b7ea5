#include "framework/draft/draft_block_check.h"

#include <cmath>

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
    double sum = 0.0;
    for (size_t t = 0; t < q.size(); ++t) {
      if (!(q[t] >= 0.0f) || !std::isfinite(q[t]))
        bad("probs", "expected finite probabilities >= 0" + row + ", found " + std::to_string(q[t]) + " at token " +
                         std::to_string(t));
      sum += q[t];
    }
    if (std::fabs(sum - 1.0) > kDraftProbSumTolerance)
      bad("probs", "expected q to sum to 1 within " + std::to_string(kDraftProbSumTolerance) + row + ", found " +
                       std::to_string(sum) + " (a truncated or unnormalised q biases the output)");
    if (q[static_cast<size_t>(b.tokens[i])] <= 0.0f)
      bad("probs", "expected q(draft token) > 0" + row + " (the token is drawn from q), found 0 for token " +
                       std::to_string(b.tokens[i]));
  }
}

}  // namespace speclab
