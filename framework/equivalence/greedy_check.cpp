#include "framework/equivalence/greedy_check.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/core/error.h"
#include "framework/engine/spec_decode.h"
#include "framework/equivalence/model_taps.h"

namespace speclab {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kUnitRoundoff = 5.9604644775390625e-8;  // 2^-24, float32
constexpr double kKappa = 8.0;                            // see greedy_check.h
}  // namespace

double numerical_tolerance(const ModelConfig& config, double max_abs_logit) {
  const double k_max = static_cast<double>(std::max<int64_t>(1, std::max(config.hidden_size, config.intermediate_size)));
  const double layers = static_cast<double>(std::max<int64_t>(0, config.num_hidden_layers));
  return kKappa * (2.0 * layers + 1.0) * std::sqrt(k_max) * kUnitRoundoff * std::fabs(max_abs_logit);
}

std::string classify_divergence(double margin_ar, double margin_verify, double tolerance) {
  if (std::isnan(margin_ar) || std::isnan(margin_verify)) return "bug";
  if (margin_ar <= 0.0 || margin_verify <= 0.0) return "bug";  // an exact tie: argmax must break it the same way
  return margin_ar <= tolerance && margin_verify <= tolerance ? "numerical" : "bug";
}

double top2_margin(const float* logits, int64_t vocab) {
  if (vocab <= 0 || logits == nullptr)
    throw Error(ErrorKind::kBadInput, "expected a logits row of at least 1 entry, found " + std::to_string(vocab),
                "greedy check", "logits");
  if (vocab == 1) return 0.0;
  float a = -std::numeric_limits<float>::infinity(), b = a;  // a >= b: the two largest
  for (int64_t i = 0; i < vocab; ++i) {
    const float x = logits[i];
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return static_cast<double>(a) - static_cast<double>(b);
}

GreedyCheck check_greedy(const Model& target, const TokenDecoder& tokenizer, const TokenList& prompt,
                         const GenerationOptions& gen, Drafter& drafter, const DrafterOptions& dopts, KvTarget kv,
                         double numerical_margin) {
  const int64_t vocab = target.config().vocab_size;
  SamplingOptions greedy;  // temperature 0
  LogitsRecorder rec(target);

  GenerationResult ar = generate_ar(rec, tokenizer, prompt, gen, greedy, KvMode::kCached, {}, kv);
  std::vector<at::Tensor> ar_rows;  // [vocab] per generated position
  for (const at::Tensor& c : rec.calls()) ar_rows.push_back(c[0].contiguous());
  rec.clear();

  SpecResult spec = generate_speculative(rec, tokenizer, prompt, gen, greedy, drafter, dopts, kv);
  const std::vector<at::Tensor>& calls = rec.calls();
  SPECLAB_CHECK(calls.size() == spec.steps.size() + 1, "one target forward per step plus the prefill");
  std::vector<at::Tensor> spec_rows;  // [vocab] per emitted position: the row that produced it
  spec_rows.push_back(calls[0][0].contiguous());
  for (size_t s = 0; s < spec.steps.size(); ++s)
    for (int r = 0; r <= spec.steps[s].accepted; ++r) spec_rows.push_back(calls[s + 1][r].contiguous());

  GreedyCheck g;
  g.n_ar = static_cast<int64_t>(ar.tokens.size());
  g.n_spec = static_cast<int64_t>(spec.tokens.size());
  g.steps = static_cast<int64_t>(spec.steps.size());
  for (const SpecStep& st : spec.steps) g.drafted += st.drafted;
  g.acceptance_rate = g.drafted > 0 ? spec.acceptance_rate() : std::numeric_limits<double>::quiet_NaN();
  const int64_t shared = std::min(g.n_ar, g.n_spec);
  int64_t j = 0;
  while (j < shared && ar.tokens[static_cast<size_t>(j)] == spec.tokens[static_cast<size_t>(j)]) ++j;
  g.match = j == shared && g.n_ar == g.n_spec;

  // Positions both passes computed for the same prefix: 0..j (j itself when it has both rows).
  const int64_t last = std::min<int64_t>({j, static_cast<int64_t>(ar_rows.size()) - 1,
                                          static_cast<int64_t>(spec_rows.size()) - 1});
  double diff = 0.0, max_abs = 0.0;
  for (int64_t i = 0; i <= last; ++i) {
    const float* a = ar_rows[static_cast<size_t>(i)].data_ptr<float>();
    const float* b = spec_rows[static_cast<size_t>(i)].data_ptr<float>();
    for (int64_t v = 0; v < vocab; ++v) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[v]) - b[v]));
      max_abs = std::max({max_abs, std::fabs(static_cast<double>(a[v])), std::fabs(static_cast<double>(b[v]))});
    }
  }
  g.max_logit_diff = diff;
  int64_t widest = 0;  // the largest verification pass, in tokens
  for (size_t s = 1; s < calls.size(); ++s) widest = std::max<int64_t>(widest, calls[s].size(0));
  g.bit_identity = widest > 0 && widest <= target.row_exact_batch();

  if (g.match) {
    g.margin_ar = g.margin_verify = g.max_abs_logit = kNaN;
    if (g.bit_identity) {
      g.tolerance = 0.0;
    } else {
      g.tolerance = numerical_margin > 0.0 ? numerical_margin : numerical_tolerance(target.config(), max_abs);
    }
    g.classification = diff <= g.tolerance ? "match" : "bug";
    return g;
  }
  g.first_divergence = j;
  g.ar_token = j < g.n_ar ? ar.tokens[static_cast<size_t>(j)] : -1;
  g.spec_token = j < g.n_spec ? spec.tokens[static_cast<size_t>(j)] : -1;
  const bool rows = j < g.n_ar && j < g.n_spec && j < static_cast<int64_t>(ar_rows.size()) &&
                    j < static_cast<int64_t>(spec_rows.size());
  if (rows) {
    const float* a = ar_rows[static_cast<size_t>(j)].data_ptr<float>();
    const float* b = spec_rows[static_cast<size_t>(j)].data_ptr<float>();
    g.margin_ar = top2_margin(a, vocab);
    g.margin_verify = top2_margin(b, vocab);
    double m = 0.0;
    for (int64_t v = 0; v < vocab; ++v) m = std::max({m, std::fabs(static_cast<double>(a[v])), std::fabs(static_cast<double>(b[v]))});
    g.max_abs_logit = m;
  } else {
    g.margin_ar = g.margin_verify = g.max_abs_logit = kNaN;
  }
  g.tolerance = numerical_margin > 0.0 ? numerical_margin
                                       : (rows ? numerical_tolerance(target.config(), g.max_abs_logit) : kNaN);
  g.classification = g.bit_identity ? "bug" : classify_divergence(g.margin_ar, g.margin_verify, g.tolerance);
  return g;
}

}  // namespace speclab
