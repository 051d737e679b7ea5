// Experiment summary math: Wilson intervals against Newcombe (1998), Leviathan et al.'s speedup
// formula against hand-evaluated values, and summarize() on hand-built records.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>

#include "framework/core/error.h"
#include "framework/core/printable_text.h"
#include "framework/io/experiment_summary.h"

using namespace speclab;
using Catch::Matchers::WithinAbs;

TEST_CASE("Wilson score intervals match Newcombe (1998), Table I, method 3", "[summary][wilson]") {
  // R. G. Newcombe, "Two-sided confidence intervals for the single proportion: comparison of
  // seven methods", Statistics in Medicine 17 (1998) 857-872, examples (i)-(iv), method 3
  // (score interval without continuity correction), 4 decimals.
  struct Case {
    int64_t r, n;
    double lo, hi;
  };
  for (const Case& c : {Case{81, 263, 0.2553, 0.3662}, Case{15, 148, 0.0624, 0.1605}, Case{0, 20, 0.0, 0.1611},
                        Case{1, 29, 0.0061, 0.1718}}) {
    const Proportion p = wilson_interval(c.r, c.n);
    CHECK_THAT(p.lo, WithinAbs(c.lo, 5e-5));
    CHECK_THAT(p.hi, WithinAbs(c.hi, 5e-5));
    CHECK(p.rate == Approx(static_cast<double>(c.r) / c.n));
  }
  // The Wald interval is a different (wrong here) answer: a control that the check can fail.
  const double ph = 15.0 / 148, wald_hi = ph + kZ95 * std::sqrt(ph * (1 - ph) / 148);
  CHECK(std::abs(wilson_interval(15, 148).hi - wald_hi) > 1e-3);
}

TEST_CASE("Wilson interval edge cases and bad input", "[summary][wilson]") {
  const Proportion none = wilson_interval(0, 0);
  CHECK(std::isnan(none.rate));
  CHECK(std::isnan(none.lo));
  const Proportion all = wilson_interval(5, 5);
  CHECK(all.hi == 1.0);
  CHECK(all.lo < 1.0);
  // 0 of 2: upper bound z^2 / (n + z^2).
  CHECK_THAT(wilson_interval(0, 2).hi, WithinAbs(kZ95 * kZ95 / (2 + kZ95 * kZ95), 1e-12));
  CHECK_THROWS_AS(wilson_interval(3, 2), Error);
  CHECK_THROWS_AS(wilson_interval(-1, 2), Error);
  CHECK_THROWS_AS(wilson_interval(1, 2, 0.0), Error);
}

TEST_CASE("Leviathan et al. expected speedup", "[summary][leviathan]") {
  // c = 0: the expected tokens per step, 1 + a + a^2 + a^3 for gamma 3.
  CHECK_THAT(leviathan_speedup(0.5, 3, 0.0), WithinAbs(1.875, 1e-12));
  // alpha = 1 (the closed form is 0/0 there): (gamma + 1) / (gamma c + 1).
  CHECK_THAT(leviathan_speedup(1.0, 4, 0.1), WithinAbs(5.0 / 1.4, 1e-12));
  // alpha = 0: only the correction token, at the cost of gamma drafts.
  CHECK_THAT(leviathan_speedup(0.0, 5, 0.2), WithinAbs(1.0 / 2.0, 1e-12));
  // A generic point against the closed form (1 - a^(g+1)) / ((1 - a)(g c + 1)).
  const double a = 0.8, c = 0.05;
  const int64_t g = 5;
  CHECK_THAT(leviathan_speedup(a, g, c), WithinAbs((1 - std::pow(a, g + 1)) / ((1 - a) * (g * c + 1)), 1e-12));
  // Approaching alpha = 1 continuously.
  CHECK_THAT(leviathan_speedup(1.0 - 1e-9, 4, 0.1), WithinAbs(leviathan_speedup(1.0, 4, 0.1), 1e-6));
  CHECK(std::isnan(leviathan_speedup(std::nan(""), 3, 0.1)));
  CHECK_THROWS_AS(leviathan_speedup(1.5, 3, 0.1), Error);
  CHECK_THROWS_AS(leviathan_speedup(0.5, -1, 0.1), Error);
  CHECK_THROWS_AS(leviathan_speedup(0.5, 3, -0.1), Error);
}

TEST_CASE("Leviathan et al. expected speedup for steps of different draft lengths", "[summary][leviathan]") {
  // Every step drafting g: the single-gamma formula.
  for (int64_t g : {0, 1, 4, 7}) {
    std::vector<int64_t> hist(static_cast<size_t>(g) + 1, 0);
    hist[static_cast<size_t>(g)] = 13;
    CHECK_THAT(leviathan_speedup_mixed(0.7, hist, 0.08), WithinAbs(leviathan_speedup(0.7, g, 0.08), 1e-12));
  }
  // By hand: 3 AR steps (k = 0: 1 token, cost 1) and 1 step of k = 4 at alpha 0.5, c 0.25:
  // (3 * 1 + 1.9375) / (3 * 1 + 2) = 0.9875. Averaging the two speedups instead (a wrong
  // mixture) gives (1 + 0.96875) / 2 = 0.984375, and gamma 4 alone 0.96875: both fail here.
  const double mixed = leviathan_speedup_mixed(0.5, {3, 0, 0, 0, 1}, 0.25);
  CHECK_THAT(mixed, WithinAbs(4.9375 / 5.0, 1e-12));
  CHECK(std::abs(mixed - 0.984375) > 1e-3);
  CHECK(std::abs(mixed - leviathan_speedup(0.5, 4, 0.25)) > 1e-3);
  // No steps, NaN in: NaN; bad input throws.
  CHECK(std::isnan(leviathan_speedup_mixed(0.5, {}, 0.1)));
  CHECK(std::isnan(leviathan_speedup_mixed(0.5, {0, 0}, 0.1)));
  CHECK(std::isnan(leviathan_speedup_mixed(std::nan(""), {1, 1}, 0.1)));
  CHECK_THROWS_AS(leviathan_speedup_mixed(0.5, {1, -1}, 0.1), Error);
  CHECK_THROWS_AS(leviathan_speedup_mixed(1.5, {1}, 0.1), Error);
  CHECK_THROWS_AS(leviathan_speedup_mixed(0.5, {1}, -0.1), Error);
}

namespace {

StepRecord step(int k, int n, double draft_s) {
  StepRecord s;
  s.drafted = k;
  s.accepted = n;
  s.draft_seconds = draft_s;
  for (int i = 0; i < k; ++i) {
    s.p.push_back(0.5f);
    s.q.push_back(1.0f);
    s.accept_prob.push_back(i <= n ? 0.5f : std::nanf(""));
    s.accepted_mask.push_back(i < n ? 1 : 0);
  }
  return s;
}

RunRecord run(int64_t prompt, const std::string& method, const std::string& category, double wall) {
  RunRecord r;
  r.key = {0, prompt, method, 0};
  r.category = category;
  r.wall_seconds = wall;
  r.n_generated = 11;  // 10 decoded after the prefill's token, as the AR runs' 10 decode forwards
  if (method != kArMethod) {
    r.drafter = "prompt_lookup";
    r.gamma = 3;
  }
  return r;
}

// Two AR runs, then the speculative runs of the same two prompts (categories x and y).
ExperimentData hand_data() {
  ExperimentData d;
  d.points = {{0, {}, ""}};
  d.methods = {"ar", "pl"};
  // AR: 2 prompts, 2 s each, 11 forwards -> 10 decode forwards of 0.1 s.
  for (int64_t p : {0, 1}) {
    RunRecord ar = run(p, "ar", p == 0 ? "x" : "y", 2.0);
    ar.decode_seconds = 1.0;
    ar.target_forwards = 11;
    d.runs.push_back(ar);
  }
  // Prompt 0: steps (k, n) = (3, 3), (3, 1); prompt 1: (2, 0).
  RunRecord s0 = run(0, "pl", "x", 1.0);
  s0.steps = {step(3, 3, 0.03), step(3, 1, 0.03)};
  s0.lossless = 1;
  RunRecord s1 = run(1, "pl", "y", 1.5);
  s1.steps = {step(2, 0, 0.02)};
  s1.lossless = 0;
  d.runs.push_back(s0);
  d.runs.push_back(s1);
  return d;
}

}  // namespace

TEST_CASE("summarize: acceptance, positions, tau, cost ratio, speedup and categories by hand", "[summary]") {
  const ExperimentData d = hand_data();
  const ExperimentSummary sum = summarize(d);
  REQUIRE(sum.overall.size() == 1);
  const MethodSummary& m = sum.overall[0];
  CHECK(m.method == "pl");
  CHECK(m.drafted == 8);
  CHECK(m.accepted == 4);
  // examined = min(n+1, k) per step = 3 + 2 + 1.
  CHECK(m.alpha.trials == 6);
  CHECK(m.alpha.rate == Approx(4.0 / 6.0));
  CHECK(m.accepted_fraction == Approx(0.5));
  REQUIRE(m.positions.size() == 3);
  CHECK(m.positions[0].alpha.trials == 3);
  CHECK(m.positions[0].alpha.successes == 2);
  CHECK(m.positions[1].alpha.trials == 2);
  CHECK(m.positions[1].alpha.successes == 1);
  CHECK(m.positions[2].alpha.trials == 1);
  CHECK(m.positions[2].alpha.successes == 1);
  CHECK(m.tau == Approx(7.0 / 3.0));
  // draft: 0.08 s / 8 tokens = 0.01; AR: 2 s / 20 decode forwards = 0.1 -> c = 0.1.
  CHECK(m.cost_ratio == Approx(0.1));
  CHECK(m.speedup == Approx(4.0 / 2.5));
  // The steps drafted 3, 3 and 2 tokens: the prediction is the mixture's, not gamma 3's.
  const double a = 4.0 / 6.0, e3 = 1 + a + a * a + a * a * a, e2 = 1 + a + a * a;
  CHECK(m.predicted_speedup == Approx((2 * e3 + e2) / (2 * (3 * 0.1 + 1) + (2 * 0.1 + 1))));
  CHECK(m.predicted_speedup != Approx(leviathan_speedup(a, 3, 0.1)));
  CHECK(m.efficiency == Approx(m.speedup / m.predicted_speedup));
  CHECK(m.lossless == 0);  // one run differs
  CHECK(m.lossless_checked == 2);

  REQUIRE(sum.by_category.size() == 2);
  CHECK(sum.by_category[0].category == "x");
  CHECK(sum.by_category[0].alpha.rate == Approx(4.0 / 5.0));
  CHECK(sum.by_category[0].speedup == Approx(2.0));
  CHECK(sum.by_category[0].lossless == 1);
  CHECK(sum.by_category[1].category == "y");
  CHECK(sum.by_category[1].alpha.rate == Approx(0.0));
  CHECK(sum.by_category[1].lossless == 0);

  const std::string table = format_summary_table(sum.overall, d.points);
  std::istringstream in(table);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  CHECK(header.find("alpha [95% CI]") != std::string::npos);
  CHECK(row.find("0.667 [") != std::string::npos);
  CHECK(row.find("2.333") != std::string::npos);
  CHECK(row.find("NO") != std::string::npos);

  // In the by-category table a row without a category is the uncategorised prompts, not all of
  // them (it said "(all)" until 2026-11-29; report.py says "(none)").
  MethodSummary uncategorised = sum.by_category[0];
  uncategorised.category = "";
  const std::string by_cat = format_summary_table({sum.by_category[1], uncategorised}, d.points);
  CHECK(by_cat.find("(none)") != std::string::npos);
  CHECK(by_cat.find("(all)") == std::string::npos);

  // No alpha: a row that drafted nothing, and a shard's row of greedy repeats > 0 only, which
  // drafted but holds no trial (both printed "nan [nan, nan]" until 2026-12-06).
  MethodSummary none = sum.overall[0], trialless = sum.overall[0];
  none.alpha.rate = none.alpha.lo = none.alpha.hi = std::numeric_limits<double>::quiet_NaN();
  trialless.alpha = none.alpha;
  trialless.predicted_speedup = trialless.efficiency = none.alpha.rate;
  none.drafted = 0;
  trialless.drafted = 56;
  const std::string na = format_summary_table({none, trialless}, d.points);
  CHECK(na.find("nan") == std::string::npos);  // predicted and efficiency printed "nanx" / "nan"
  CHECK(na.find("n/a") != std::string::npos);
  CHECK(na.find("no drafts") != std::string::npos);
  CHECK(na.find("no trials (greedy repeats > 0 only)") != std::string::npos);

  // A category with a line break and one with wide characters: one line per row, and the columns
  // after them aligned by what a terminal shows (padding counted bytes; "a\nb" split its row).
  MethodSummary broken = sum.by_category[0], wide = sum.by_category[0];
  broken.category = "a\nb";
  wide.category = "\xe7\x8c\xab\xf0\x9f\x98\x80";  // a CJK character and an emoji: 4 columns
  const std::string cats = format_summary_table({broken, wide}, d.points);
  std::istringstream rows(cats);
  std::vector<std::string> lines;
  for (std::string l; std::getline(rows, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);  // the header and two rows
  CHECK(lines[1].find("a\\nb") != std::string::npos);
  // The drafter column starts at the same terminal column on both rows.
  const auto column_of = [](const std::string& line, const std::string& what) {
    return display_width(line.substr(0, line.find(what)));
  };
  CHECK(column_of(lines[1], " " + broken.method) == column_of(lines[2], " " + wide.method));
  CHECK(display_width("\xe7\x8c\xab\xf0\x9f\x98\x80") == 4);
  CHECK(display_width("e\xcc\x81") == 1);  // e and a combining acute accent
  CHECK(one_line("x\ty\x01") == "x\\ty\\x01");
}

TEST_CASE("summarize: the speedup is per decoded token, and NaN when nothing was decoded", "[summary]") {
  // A sampled pair that stops at different lengths: AR decodes 10 tokens in 2 s (0.2 s each), the
  // speculative run 4 tokens in 0.5 s (0.125 s each): 1.6x, not the 4x of the total times.
  ExperimentData d = hand_data();
  d.runs.resize(3);  // AR 0, AR 1, speculative 0
  d.runs[2].n_generated = 5;
  d.runs[2].wall_seconds = 0.5;
  ExperimentSummary sum = summarize(d);
  REQUIRE(sum.overall.size() == 1);
  CHECK(sum.overall[0].speedup == Approx(1.6));
  CHECK(sum.overall[0].spec_decode_tokens == 4);
  CHECK(sum.overall[0].ar_decode_tokens == 10);
  CHECK(sum.overall[0].efficiency == Approx(1.6 / sum.overall[0].predicted_speedup));
  // Only the prefill's token on the speculative side (max_new_tokens 1, or EOS at once): no decode
  // phase to compare, so no speedup (it was a ratio of timer overheads, e.g. 1.30x).
  d.runs[2].n_generated = 1;
  d.runs[2].steps.clear();
  sum = summarize(d);
  CHECK(std::isnan(sum.overall[0].speedup));
  // Nor on the AR side.
  d = hand_data();
  d.runs.resize(3);
  d.runs[0].n_generated = 1;
  d.runs[0].target_forwards = 1;
  CHECK(std::isnan(summarize(d).overall[0].speedup));
}

TEST_CASE("summarize: a run without its AR partner gives no speedup", "[summary]") {
  ExperimentData d;
  d.methods = {"ar", "pl"};
  RunRecord s = run(0, "pl", "", 1.0);
  s.steps = {step(1, 1, 0.0)};
  d.runs.push_back(s);
  const ExperimentSummary sum = summarize(d);
  REQUIRE(sum.overall.size() == 1);
  CHECK(std::isnan(sum.overall[0].speedup));
  CHECK(std::isnan(sum.overall[0].cost_ratio));
  CHECK(sum.overall[0].alpha.rate == 1.0);
}

TEST_CASE("SummaryBuilder: speculative runs recorded before their AR runs are paired when these come", "[summary]") {
  const ExperimentData d = hand_data();
  const ExperimentSummary want = summarize(d);
  SummaryBuilder b(d.methods);
  for (size_t i : {2, 3, 0, 1}) b.add(d.runs[i]);  // the speculative runs first
  const ExperimentSummary got = b.finish(d.points);
  REQUIRE(got.overall.size() == 1);
  REQUIRE(got.by_category.size() == 2);
  for (const auto& [g, w] : {std::make_pair(got.overall[0], want.overall[0]),
                             std::make_pair(got.by_category[1], want.by_category[1])}) {
    CHECK(g.category == w.category);
    CHECK(g.speedup == Approx(w.speedup));
    CHECK(g.cost_ratio == Approx(w.cost_ratio));
    CHECK(g.alpha.rate == w.alpha.rate);
    CHECK(g.tau == w.tau);
    CHECK(g.lossless == w.lossless);
  }
  CHECK(got.overall[0].speedup == Approx(4.0 / 2.5));
  // Without the AR runs there is nothing to pair: no speedup (the check can fail).
  SummaryBuilder spec_only(d.methods);
  spec_only.add(d.runs[2]);
  spec_only.add(d.runs[3]);
  CHECK(std::isnan(spec_only.finish(d.points).overall[0].speedup));
}
