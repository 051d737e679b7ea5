#include "framework/draft/builtin/head_token.h"

#include <algorithm>
#include <cmath>

namespace speclab {

bool append_head_token(const float* lp, const int64_t* ids, int64_t hv, int64_t vocab, const DraftContext& ctx,
                       DraftBlock& b, std::vector<float>& scratch) {
  const SamplingOptions& s = *ctx.sampling;
  Token x;
  float conf = 1.0f;
  if (s.greedy()) {
    int64_t best = 0;
    for (int64_t j = 1; j < hv; ++j)
      if (lp[j] > lp[best] || (lp[j] == lp[best] && ids[j] < ids[best])) best = j;
    x = static_cast<Token>(ids[best]);
    if (ctx.min_confidence > 0.0) {
      // softmax_prob: the same exp(l_best - max) / sum_j exp(l_j - max) with SIMD exponentials
      // (relative error < 1e-6); a loop of std::exp in double took about 40 us per draft token
      // over an 8,192-row head.
      conf = static_cast<float>(softmax_prob(lp, hv, static_cast<int32_t>(best)));
      if (conf < ctx.min_confidence && ctx.confidence_applies(b.tokens.size())) return false;
    }
  } else {
    // q over the head's rows (the tokens outside it have logit -inf: probability 0 under any
    // temperature, top-k and top-p), then placed at their token ids: the same distribution as
    // logits_to_probs over the whole vocabulary with -inf outside the head, without its passes
    // over 49,152 entries per draft token (SmolLM2's head has 8,192 rows).
    std::vector<float> q_head;
    logits_to_probs(lp, hv, s, q_head);
    const Token j = sample(q_head, *ctx.rng);
    x = static_cast<Token>(ids[j]);
    conf = *std::max_element(q_head.begin(), q_head.end());
    if (ctx.confidence_applies(b.tokens.size()) && conf < ctx.min_confidence) return false;
    std::vector<float> q(static_cast<size_t>(vocab), 0.0f);
    for (int64_t r = 0; r < hv; ++r)
      q[static_cast<size_t>(ids[r])] += q_head[static_cast<size_t>(r)];  // a repeated id (a foreign file) sums its rows
    b.probs.push_back(std::move(q));
    if (ctx.want_logits) {  // [vocab], -inf outside the head
      scratch.assign(static_cast<size_t>(vocab), -INFINITY);
      for (int64_t r = 0; r < hv; ++r) scratch[static_cast<size_t>(ids[r])] = lp[r];
      b.logits.push_back(scratch);
    }
  }
  b.tokens.push_back(x);
  b.confidence.push_back(conf);
  return true;
}

}  // namespace speclab
