#include "framework/equivalence/analytic_check.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/token_tensor.h"
#include "framework/engine/ar_decode.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/verify/acceptance.h"
#include "framework/verify/faulty_acceptance.h"

namespace speclab {

namespace {

// max_y |dist(y) − p(y) / Σp|
double max_error(const std::vector<double>& dist, const std::vector<float>& p) {
  double sum = 0.0;
  for (float x : p) sum += x;
  double e = 0.0;
  for (size_t y = 0; y < p.size(); ++y) e = std::max(e, std::fabs(dist[y] - static_cast<double>(p[y]) / sum));
  return e;
}

std::vector<double> normalised(const std::vector<float>& v) {
  double sum = 0.0;
  for (float x : v) sum += x;
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(v[i]) / sum;
  return out;
}


}  // namespace

AnalyticErrors analytic_step_errors(const float* target_logits, const float* draft_logits, int64_t vocab,
                                    const SamplingOptions& sampling) {
  sampling.validate();
  if (sampling.greedy())
    throw Error(ErrorKind::kConfig,
                "expected a temperature > 0: the analytic check compares sampling distributions; greedy decoding is "
                "checked by the greedy exactness check",
                "equivalence", "temperature");
  std::vector<float> p, q;
  logits_to_probs(target_logits, vocab, sampling, p);
  logits_to_probs(draft_logits, vocab, sampling, q);

  AnalyticErrors e;
  e.lossless = max_error(first_token_distribution(p, q), p);
  std::vector<float> one_hot(static_cast<size_t>(vocab), 0.0f);
  one_hot[static_cast<size_t>(argmax(draft_logits, vocab))] = 1.0f;
  e.deterministic = max_error(first_token_distribution(p, one_hot), p);
  e.always_accept = max_error(normalised(q), p);
  if (sampling.top_p < 1.0) {
    SamplingOptions raw = sampling;
    raw.top_p = 1.0;
    std::vector<float> q_raw;
    logits_to_probs(draft_logits, vocab, raw, q_raw);
    e.top_p_on_p_only = max_error(faulty::first_token_distribution_top_p_on_p_only(p, q_raw, q), p);
  } else {
    e.top_p_on_p_only = std::numeric_limits<double>::quiet_NaN();
  }
  const std::vector<double> pn = normalised(p), qn = normalised(q);
  for (size_t y = 0; y < pn.size(); ++y) {
    e.tv_pq += 0.5 * std::fabs(pn[y] - qn[y]);
    e.support_p += p[y] > 0.0f;
    e.support_q += q[y] > 0.0f;
  }
  return e;
}

std::vector<float> next_token_logits(const Model& model, const TokenList& context, const std::vector<int64_t>& last_layers) {
  const ModelConfig& c = model.config();
  try {
    check_prompt_fits(context, c);
  } catch (const Error& err) {
    throw Error(ErrorKind::kBadInput, err.message(), "analytic check", "context");
  }
  const int64_t n = static_cast<int64_t>(context.size());
  KvCacheManager kv(kv_options_for(c, n + 1));
  const PoolId pool = kv.add_pool(c.kv_geometry());
  KvSequence seq(kv, pool);
  const SeqId sid = seq.id();
  if (n > 1) {
    TokenList head(context.begin(), context.end() - 1);
    kv.reserve(sid, n - 1);
    model.forward(token_tensor(head), at::arange(n - 1, at::kLong), kv.view(sid, n - 1), ForwardOptions{{}, 1});
    SPECLAB_CHECK(kv.commit(sid, n - 1) == KvStatus::kOk, "commit of the context");
  }
  kv.reserve(sid, 1);
  ForwardOptions fo;
  fo.layers = last_layers;
  fo.logits_last_n = 1;
  at::Tensor logits = model.forward(token_tensor(TokenList(1, context.back())), at::full({1}, n - 1, at::kLong),
                                    kv.view_at(sid, n - 1, 1), fo);
  at::Tensor row = logits[0].contiguous();
  return std::vector<float>(row.data_ptr<float>(), row.data_ptr<float>() + c.vocab_size);
}

}  // namespace speclab
