// The draft-length schedules (framework/draft/draft_length.h): Leviathan et al.'s expected tokens
// per step against hand-computed values, the choice of gamma against hand-derived optima, and
// the `cost` schedule fed synthetic timings: it explores (an AR step, then a full-length pass),
// falls back to AR when verification costs more than the drafts earn, probes again after
// kProbeAfter AR steps (then less and less often), and drafts the full length when verification
// is nearly free; and the heuristic schedule's steps (+2 after a fully accepted step, up to the
// cap; -1 otherwise, not below 1). Torch-free.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "framework/draft/draft_length.h"

using namespace speclab;

TEST_CASE("expected tokens per step follow Leviathan et al. eq. (1)", "[draft_length]") {
  CHECK(expected_tokens_per_step(0.0, 4) == Approx(1.0));
  CHECK(expected_tokens_per_step(0.5, 0) == Approx(1.0));
  CHECK(expected_tokens_per_step(0.5, 1) == Approx(1.5));
  CHECK(expected_tokens_per_step(0.5, 2) == Approx(1.75));
  CHECK(expected_tokens_per_step(0.8, 3) == Approx(1 + 0.8 + 0.64 + 0.512));
  CHECK(expected_tokens_per_step(1.0, 4) == Approx(5.0));
}

TEST_CASE("best_draft_length picks the gamma with the most tokens per unit of time", "[draft_length]") {
  // Free verification, free drafts: more is always better.
  CHECK(best_draft_length(0.8, {1, 1, 1, 1, 1}, 0.0, 4) == 4);
  // Leviathan et al.'s setting (verification = 1 step), alpha 0.8, c 0.3: rates 1, 1.385, 1.525,
  // 1.554, 1.528 for gamma 0..4.
  CHECK(best_draft_length(0.8, {1, 1, 1, 1, 1}, 0.3, 4) == 3);
  // Each extra row costs 0.3 steps, alpha 0.5: 1, 1.154, 1.094, 0.987, 0.885.
  CHECK(best_draft_length(0.5, {1, 1.3, 1.6, 1.9, 2.2}, 0.0, 4) == 1);
  // alpha 0.2 does not pay for a second row at 1.3 steps (1.2 / 1.3 < 1): AR.
  CHECK(best_draft_length(0.2, {1, 1.3, 1.6, 1.9, 2.2}, 0.0, 4) == 0);
  // Ties go to the smaller gamma: alpha 0.5, second row at 1.5 steps: 1.5 / 1.5 = 1.
  CHECK(best_draft_length(0.5, {1, 1.5}, 0.0, 1) == 0);
}

namespace {
DrafterOptions cost_options(int gamma) {
  DrafterOptions o;
  o.num_speculative_tokens = gamma;
  o.schedule = "cost";
  return o;
}
}  // namespace

TEST_CASE("the cost schedule measures, then falls back to AR when verification is dear", "[draft_length]") {
  DraftLengthPolicy p(cost_options(4));
  // A forward of n rows takes 1 + 0.6 (n - 1) ms; drafts are free; 1 of 4 drafts accepted.
  auto verify = [](int drafted) { return 1e-3 * (1.0 + 0.6 * drafted); };
  CHECK(p.next() == 0);  // first a one-row step, to measure it
  p.update(0, 0, verify(0), 0.0);
  CHECK(p.next() == 4);  // then a full-length pass
  p.update(4, 1, verify(4), 1e-6);
  REQUIRE(p.verify_cost_estimate().size() == 5);
  CHECK(p.verify_cost_estimate()[4] == Approx(3.4));
  CHECK(p.verify_cost_estimate()[2] == Approx(2.2));  // interpolated between 1 and 5 rows
  int steps_at_zero = 0;
  for (int step = 0; step < 40; ++step) {
    const int g = p.next();
    if (g == 0) ++steps_at_zero;
    p.update(g, 0, verify(g), g > 0 ? 1e-6 : 0.0);  // every probe is rejected
  }
  CHECK(p.alpha_estimate() < 0.5);  // below the prior, from the rejected probes
  CHECK(steps_at_zero >= 30);  // mostly AR ...
  CHECK(steps_at_zero < 40);   // ... with probes (the first after kProbeAfter AR steps)
  // Probes that keep failing thin out: the wait doubles up to kProbeAfterMax.
  int probes = 0;
  for (int step = 0; step < 400; ++step) {
    const int g = p.next();
    if (g > 0) ++probes;
    p.update(g, 0, verify(g), g > 0 ? 1e-6 : 0.0);
  }
  CHECK(probes >= 2);
  CHECK(probes <= 400 / DraftLengthPolicy::kProbeAfterMax + 3);
}

TEST_CASE("the cost schedule drafts the full length when verification is nearly free", "[draft_length]") {
  DraftLengthPolicy p(cost_options(4));
  auto verify = [](int drafted) { return 1e-3 * (1.0 + 0.02 * drafted); };
  p.update(0, 0, verify(0), 0.0);
  for (int step = 0; step < 10; ++step) {
    const int g = p.next();
    p.update(g, g, verify(g), 1e-5 * g);  // every draft accepted
  }
  CHECK(p.alpha_estimate() > 0.8);
  CHECK(p.next() == 4);
  CHECK(p.draft_cost_estimate() == Approx(0.01).epsilon(0.05));
  // The other schedules ignore timings.
  DrafterOptions o = cost_options(4);
  o.schedule = "constant";
  DraftLengthPolicy constant(o);
  constant.update(0, 0, 1.0, 1.0);
  CHECK(constant.next() == 4);
}

TEST_CASE("the heuristic schedule: +2 after a fully accepted step up to the cap, -1 otherwise down to 1",
          "[draft_length]") {
  DrafterOptions o;
  o.schedule = "heuristic";
  o.num_speculative_tokens = 4;
  o.max_speculative_tokens = 9;
  DraftLengthPolicy p(o);
  CHECK(p.next() == 4);
  p.update(4, 2);  // a rejection: one fewer
  CHECK(p.next() == 3);
  p.update(3, 0);
  CHECK(p.next() == 2);
  p.update(2, 1);
  CHECK(p.next() == 1);
  p.update(1, 0);  // not below 1
  CHECK(p.next() == 1);
  p.update(1, 1);  // every draft accepted: two more
  CHECK(p.next() == 3);
  p.update(3, 3);
  CHECK(p.next() == 5);
  p.update(5, 5);
  CHECK(p.next() == 7);
  p.update(7, 7);  // capped at max_speculative_tokens
  CHECK(p.next() == 9);
  p.update(9, 9);
  CHECK(p.next() == 9);
  p.update(9, 8);
  CHECK(p.next() == 8);
  p.update(0, 0);  // a step that drafted nothing is not a full acceptance
  CHECK(p.next() == 7);
}
