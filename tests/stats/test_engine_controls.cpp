// The sampling check through the real engine over a whole verification block and beyond
// (issue 14, items 2 and 3), on stories260K with a layer_skip draft of its first 3 layers:
//   - positions 1 .. gamma + 3: the prefill token, a whole block (gamma drafts and the bonus)
//     and the next step's first token, so accepted, recovered and bonus tokens and the step
//     after a rejection (a rollback) are all observed, two-sample against AR;
//   - the same with EOS and a stop string active (draws that stop are padded with "ended");
//   - the realistic negative controls through the same engine and tests (replacement from p,
//     bonus from row k - 1, q at temperature 1, q drawn from its top-k, always-accept, the
//     residual not normalised, p rows off by one): each
//     must be caught, and the smallest N at which it is is printed (docs/equivalence.md).
// SPECLAB_ENGINE_CONTROLS_N overrides the lossless N by hand.
#include "tests/torch_catch.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "experiments/app/session_parts.h"
#include "framework/core/thread_pool.h"
#include "framework/draft/registry.h"
#include "framework/equivalence/engine_controls.h"
#include "framework/equivalence/equivalence_report.h"
#include "framework/equivalence/model_taps.h"
#include "framework/equivalence/sampling_check.h"
#include "framework/kv/kv_cache_manager.h"
#include "tests/support/stories260k.h"

using namespace speclab;

namespace {

constexpr double kAlpha = 1e-3;
constexpr double kControlAlpha = 1e-6;
constexpr int kGamma = 2;
constexpr int kM = kGamma + 3;           // prefill token, gamma drafts, bonus, next step's token
constexpr int64_t kLosslessN = 4000;     // draws per subject in `make test`
constexpr int64_t kControlMaxN = 8000;   // the control grid: 250, 500, ..., this
const std::vector<int> kJoints = {2, 3};
const std::vector<int> kMarginals = {2, 3, 4, 5};

int64_t lossless_n() {
  const char* env = std::getenv("SPECLAB_ENGINE_CONTROLS_N");
  return env ? std::stoll(env) : kLosslessN;
}

struct Rig {
  testing::Stories& s = testing::stories();
  KvCacheManager kv{KvOptions{}};
  PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterOptions o;
  std::unique_ptr<Drafter> drafter;
  PrefillMemo memo{*s.model};
  DrawPlan plan;
  Rig() {
    // One thread: stories260K's matmuls are too small to split (test_equivalence.cpp's stories()).
    at::set_num_threads(1);
    set_compute_threads(1);
    o.name = "layer_skip";
    o.draft_layers_first = 3;
    o.num_speculative_tokens = kGamma;
    drafter = drafter_registry().create(o, DrafterEnv{s.model.get(), &kv, pool, s.model->config().vocab_size});
    plan.context = s.info.tokenizer->encode("The little dog was happy. The little dog", true);
    plan.sampling.temperature = 0.7;
    plan.sampling.top_k = 5;
    plan.m = kM;
    plan.seed_base = 314159;
  }
  // Draws [first, first + n) of the AR stream.
  Draws ar(int64_t n, uint64_t stream, int64_t first = 0) {
    plan.n = n;
    plan.stream = stream;
    plan.first = first;
    return draw_ar(memo, *s.info.tokenizer, plan, {&kv, pool});
  }
  // Draws [first, first + n) of the speculative stream.
  Draws spec(int64_t n, uint64_t stream, const AcceptanceRule& rule = {}, int64_t first = 0) {
    plan.n = n;
    plan.stream = stream;
    plan.first = first;
    return draw_speculative(memo, *s.info.tokenizer, plan, *drafter, o, {&kv, pool}, rule);
  }
  Draws ar_ignore_eos;  // the AR sample of the first test case, reused by the controls
};

Rig& rig() {
  static Rig r;
  return r;
}

// The lossless check's tests of `subject` against `ar` over their first n draws: one p-value per
// joint and marginal test.
std::vector<double> lossless_p_values(const Draws& ar, const Draws& subject, const std::string& name, int64_t n) {
  std::vector<double> ps;
  for (const CellTest& t : compare_with_ar(ar, subject, name, kJoints, kMarginals, n, 5.0,
                                           kAlpha / static_cast<double>(kJoints.size() + kMarginals.size())))
    ps.push_back(t.stats.p_value);
  return ps;
}

// Lossless speculative vs AR at every position 2..kM: no test rejects after Holm, every test
// has a degree of freedom, verification steps crossed rejections.
void check_lossless(Rig& r, const std::string& what) {
  const int64_t n = lossless_n();
  const Draws ar = r.ar(n, 1), spec = r.spec(n, 2);
  if (!r.plan.stop_active) r.ar_ignore_eos = ar;
  const std::vector<CellTest> tests = compare_with_ar(ar, spec, "speculative", kJoints, kMarginals, n, 5.0,
                                                      kAlpha / static_cast<double>(kJoints.size() + kMarginals.size()));
  std::vector<double> ps;
  double radius = 0.0;
  for (const CellTest& t : tests) {
    ps.push_back(t.stats.p_value);
    radius = std::max(radius, t.stats.tv_radius);
    INFO(what << " " << t.test << " " << t.m);
    CHECK(t.stats.dof > 0);  // no vacuous test
  }
  const std::vector<double> holm = holm_adjust(ps);
  int64_t ended = 0;
  for (Token t : ar.tokens) ended += t == kEndedDraw;
  WARN(what << ": N = " << n << ", acceptance " << static_cast<double>(spec.accepted) / static_cast<double>(spec.drafted)
            << ", steps per draw " << static_cast<double>(spec.steps) / static_cast<double>(n) << ", min Holm p "
            << *std::min_element(holm.begin(), holm.end()) << ", detectable TV (largest radius) " << radius
            << ", AR positions ended by EOS/stop " << ended);
  for (size_t i = 0; i < tests.size(); ++i) {
    INFO(what << " " << tests[i].test << " m=" << tests[i].m << " p=" << tests[i].stats.p_value);
    CHECK(holm[i] >= kAlpha);
  }
  CHECK(spec.steps > n);               // more than one verification step per draw
  CHECK(spec.accepted < spec.drafted);  // rejections happened (so did rollbacks)
  CHECK(spec.accepted > 0);
}

}  // namespace

TEST_CASE("engine sampling check over the whole block: positions up to gamma + 3 match AR", "[equivalence][engine]") {
  c10::InferenceMode guard;
  Rig& r = rig();
  r.plan.stop_active = false;
  check_lossless(r, "ignore_eos");
}

TEST_CASE("engine sampling check with EOS and a stop string active matches AR", "[equivalence][engine]") {
  c10::InferenceMode guard;
  Rig& r = rig();
  r.plan.stop_active = true;
  r.plan.stop = {"."};
  check_lossless(r, "EOS + stop '.'");
  r.plan.stop_active = false;
  r.plan.stop.clear();
}

TEST_CASE("engine negative controls: every realistic bug is caught through the real engine", "[equivalence][engine]") {
  c10::InferenceMode guard;
  Rig& r = rig();
  r.plan.stop_active = false;
  const int64_t ln = lossless_n();  // the lossless check's N (SPECLAB_ENGINE_CONTROLS_N overrides it)
  const int64_t ar_n = std::max(kControlMaxN, ln);
  if (r.ar_ignore_eos.n() == 0) r.ar_ignore_eos = r.ar(ar_n, 1);
  if (r.ar_ignore_eos.n() < ar_n) r.ar_ignore_eos.append(r.ar(ar_n - r.ar_ignore_eos.n(), 1, r.ar_ignore_eos.n()));
  const Draws& ar = r.ar_ignore_eos;
  const std::pair<const char*, AcceptanceRule> controls[] = {
      {"replacement_from_p", replacement_from_p_rule()},
      {"bonus_from_row_k-1", bonus_from_previous_row_rule()},
      {"q_at_temperature_1", q_at_temperature_1_rule()},
      {"q_drawn_top_k", q_drawn_top_k_rule()},
      {"always_accept", always_accept_rule()},
      {"residual_unnormalised", residual_unnormalised_rule()},
      {"p_row_off_by_one", p_row_off_by_one_rule()},
      {"shared_draws", shared_draws_rule()},
  };
  uint64_t stream = 10;
  for (const auto& [name, rule] : controls) {
    // Drawn in doubling chunks, stopping at the first grid N where the control is caught.
    ++stream;
    Draws d;
    d.m = kM;
    int64_t caught = -1;
    PowerPoint last;
    for (int64_t n = 250; caught < 0; n = std::min(2 * n, kControlMaxN)) {
      d.append(r.spec(n - d.n(), stream, rule, d.n()));
      last = power_curve(n, n, kControlAlpha, [&](int64_t at) {
               return compare_with_ar(ar, d, name, kJoints, kMarginals, at, 5.0, kControlAlpha);
             }).back();
      if (last.caught) caught = n;
      if (n == kControlMaxN) break;
    }
    WARN("engine control " << name << " (stories260K, layer_skip 3/5, gamma " << kGamma << ", T=0.7 top_k=5, "
                           << "positions 2.." << kM << "): caught at N = " << caught << " (p x tests there "
                           << last.min_p * static_cast<double>(last.tests) << ")");
    INFO(name);
    CHECK(caught > 0);
    // The power that matters: the lossless check itself (its N, its tests, Holm at its alpha)
    // rejects this control, not only the grid at the stricter control alpha.
    if (d.n() < ln) d.append(r.spec(ln - d.n(), stream, rule, d.n()));
    const std::vector<double> holm = holm_adjust(lossless_p_values(ar, d, name, ln));
    const double min_holm = *std::min_element(holm.begin(), holm.end());
    WARN("engine control " << name << " under the lossless check (N = " << ln << "): min Holm p " << min_holm);
    CHECK(min_holm < kAlpha);
  }
}

TEST_CASE("engine controls: the cells where a control cannot run are named, and a lookup block passes the drafter-side rules",
          "[equivalence][engine]") {
  const DrafterSampling kModel{true, true, true}, kDeterministic{false, false, false}, kQRows{false, true, true},
      kOwnGenerator{false, true, false};
  SamplingOptions s;
  s.temperature = 1.5;
  s.top_p = 0.9;
  // Above temperature 1 with top_p < 1 the reported (temperature 1) nucleus is the smaller one:
  // a drawn token may have q = 0 there, which the verifier refuses.
  CHECK_THAT(engine_control_skip_reason("q_at_temperature_1", s, kModel, 2, 5),
             Catch::Matchers::Contains("temperature > 1 with top_p < 1"));
  s.top_p = 1.0;
  CHECK(engine_control_skip_reason("q_at_temperature_1", s, kModel, 2, 5).empty());
  s.temperature = 0.7;
  s.top_p = 0.9;
  CHECK(engine_control_skip_reason("q_at_temperature_1", s, kModel, 2, 5).empty());
  // Shared draws need a drafter that draws: a deterministic one has none to share.
  CHECK_THAT(engine_control_skip_reason("shared_draws", s, kDeterministic, 2, 5), Catch::Matchers::Contains("draws nothing"));
  CHECK(engine_control_skip_reason("shared_draws", s, kModel, 2, 5).empty());
  // A drafter that reports q rows without logits (a sampling plugin): it draws, and q at
  // temperature 1 is rebuilt from its rows; the controls that recompute q from logits cannot run.
  CHECK(engine_control_skip_reason("shared_draws", s, kQRows, 2, 5).empty());
  CHECK(engine_control_skip_reason("q_at_temperature_1", s, kQRows, 2, 5).empty());
  CHECK_THAT(engine_control_skip_reason("top_p_on_p_only", s, kQRows, 2, 5), Catch::Matchers::Contains("no draft logits"));
  CHECK_THAT(engine_control_skip_reason("q_at_temperature_1", s, kDeterministic, 2, 5),
             Catch::Matchers::Contains("reports no q"));
  // One that samples with a generator of its own: no host draws to share (a correct plugin like
  // that would fail the check on a control it cannot exhibit).
  CHECK_THAT(engine_control_skip_reason("shared_draws", s, kOwnGenerator, 2, 5),
             Catch::Matchers::Contains("generator of its own"));
  // q rows keep the drawn support: above temperature 1 with top_p < 1 the rebuilt q misses no drawn
  // token, so the control runs (it is skipped for logits, whose temperature-1 nucleus is smaller).
  s.temperature = 1.5;
  CHECK(engine_control_skip_reason("q_at_temperature_1", s, kQRows, 2, 5).empty());
  CHECK_FALSE(engine_control_skip_reason("q_at_temperature_1", s, kModel, 2, 5).empty());
  s.temperature = 0.7;

  // A block without logits (a prompt-lookup source's) under a drafter-side rule: verified as the
  // lossless rule does, with the same draws (it threw "needs the draft's raw logits" before).
  const int64_t vocab = 4;
  DraftBlock block;
  block.tokens = {1, 2};
  block.probs = {{0.f, 1.f, 0.f, 0.f}, {0.f, 0.f, 1.f, 0.f}};
  const std::vector<std::vector<float>> p = {{0.1f, 0.6f, 0.2f, 0.1f}, {0.25f, 0.25f, 0.25f, 0.25f}, {0.f, 0.f, 0.5f, 0.5f}};
  SamplingOptions run;
  run.temperature = 0.7;
  run.top_p = 0.9;
  run.top_k = 3;
  for (const auto& [name, rule] : {std::pair<const char*, AcceptanceRule>{"top_p_on_p_only", top_p_on_p_only_rule()},
                                   {"q_at_temperature_1", q_at_temperature_1_rule()},
                                   {"q_drawn_top_k", q_drawn_top_k_rule()}}) {
    INFO(name);
    for (uint64_t seed = 1; seed <= 50; ++seed) {
      Rng a(seed), b(seed);
      VerifyInputs in;
      in.draft = &block;
      in.vocab = vocab;
      in.p = &p;
      in.sampling = &run;
      in.rng = &a;
      const Verdict got = rule.verify(in);
      const Verdict want = verify_rejection(block.tokens, p, block.probs, b);
      CHECK(got.n_accepted == want.n_accepted);
      CHECK(got.next_token == want.next_token);
      CHECK(a.uniform() == b.uniform());  // the same number of draws
    }
  }
}

TEST_CASE("engine controls behind prompt_lookup_first: the wrapped drafter's q is misreported, lookup blocks pass",
          "[equivalence][engine]") {
  c10::InferenceMode guard;
  Rig& r = rig();
  r.plan.stop_active = false;
  DrafterOptions o = r.o;
  o.prompt_lookup_first = true;
  std::unique_ptr<Drafter> d = drafter_registry().create(
      o, DrafterEnv{r.s.model.get(), &r.kv, r.pool, r.s.model->config().vocab_size});
  const int64_t n = kLosslessN;  // the lossless check's N
  r.plan.n = n;
  r.plan.first = 0;
  if (r.ar_ignore_eos.n() < n) r.ar_ignore_eos = r.ar(n, 1);
  // The control rules reach both kinds of block: prompt lookup answers on this repetitive prompt
  // ("The little dog ..."), the layer_skip draft elsewhere.
  int64_t lookup_blocks = 0, model_blocks = 0;
  AcceptanceRule rule = q_drawn_top_k_rule();
  AcceptanceRule counting{[&](const VerifyInputs& in) {
                            if (!in.draft->tokens.empty()) ++(in.draft->logits.empty() ? lookup_blocks : model_blocks);
                            return rule.verify(in);
                          },
                          rule.needs_p_when_greedy, rule.needs_draft_logits};
  r.plan.sampling.top_k = 5;
  r.plan.stream = 40;
  Draws x = draw_speculative(r.memo, *r.s.info.tokenizer, r.plan, *d, o, {&r.kv, r.pool}, counting);
  WARN("prompt_lookup_first + layer_skip under q_drawn_top_k: " << lookup_blocks << " lookup blocks, " << model_blocks
                                                                << " layer_skip blocks");
  CHECK(lookup_blocks > 0);
  CHECK(model_blocks > 0);
  // The control still changes what the wrapped drafter's blocks emit: caught against AR.
  const std::vector<double> holm = holm_adjust(lossless_p_values(r.ar_ignore_eos, x, "q_drawn_top_k", n));
  const double min_holm = *std::min_element(holm.begin(), holm.end());
  WARN("... under the lossless tests at N = " << n << ": min Holm p " << min_holm);
  CHECK(min_holm < kAlpha);
}

// q_at_temperature_1 on a block with q rows and no logits (a sampling plugin): the reported row is
// q^T renormalised over q's support. Drawn at T = 0.7 without cuts that is exactly softmax(l), the
// law at temperature 1 (checked through the TV the rule records against a direct computation),
// and a one-hot row stays one-hot.
TEST_CASE("engine controls: q_at_temperature_1 rebuilt from a q row is q at temperature 1", "[equivalence][engine]") {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f};
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto softmax = [&](double t) {
    std::vector<double> e(logits.size());
    double sum = 0.0;
    for (size_t v = 0; v < logits.size(); ++v) sum += (e[v] = std::exp(logits[v] / t));
    for (double& x : e) x /= sum;
    return e;
  };
  const std::vector<double> q07 = softmax(0.7), q1 = softmax(1.0);
  double want_tv = 0.0;
  for (size_t v = 0; v < q1.size(); ++v) want_tv += 0.5 * std::abs(q07[v] - q1[v]);
  REQUIRE(want_tv > 0.05);
  DraftBlock block;
  block.tokens = {0};
  block.probs = {std::vector<float>(q07.begin(), q07.end())};
  const std::vector<std::vector<float>> p = {{0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}};
  SamplingOptions run;
  run.temperature = 0.7;
  auto divergence = std::make_shared<QDivergence>();
  const AcceptanceRule rule = q_at_temperature_1_rule(divergence);
  Rng rng(3);
  VerifyInputs in;
  in.draft = &block;
  in.vocab = vocab;
  in.p = &p;
  in.sampling = &run;
  in.rng = &rng;
  rule.verify(in);
  REQUIRE(divergence->rows == 1);
  CHECK(divergence->mean() == Approx(want_tv).margin(1e-6));
  // The acceptance it applies is min(1, p / q1) at the drafted token: 0.2 / q1[0].
  int64_t accepted = 0;
  const int64_t trials = 20000;
  for (int64_t i = 0; i < trials; ++i) {
    in.rng = &rng;
    accepted += rule.verify(in).n_accepted;
  }
  const double want = std::min(1.0, 0.2 / q1[0]);
  CHECK(static_cast<double>(accepted) / trials == Approx(want).margin(5 * std::sqrt(want * (1 - want) / trials)));
  // A one-hot row (a lookup source's) is left as it is: no divergence.
  block.probs = {{1.f, 0.f, 0.f, 0.f, 0.f}};
  auto none = std::make_shared<QDivergence>();
  in.rng = &rng;
  q_at_temperature_1_rule(none).verify(in);
  CHECK(none->mean() == 0.0);
}
