// Tests of framework/verify/{stats,acceptance,faulty_acceptance}.h.
//
// Outside references: chi-square tail values computed with mpmath (30 digits), hand-derived
// verdicts and distributions, and the theorem of Leviathan et al. 2023 (arXiv:2211.17192):
// every token emitted by rejection-sampling verification is distributed as p. Every
// statistical test here is paired with a negative control that it must reject.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/rng.h"
#include "framework/sampling/sampling.h"
#include "framework/verify/acceptance.h"
#include "framework/verify/faulty_acceptance.h"
#include "framework/verify/stats.h"
#include "tests/support/catch_error.h"

using namespace speclab;

namespace {

using Rows = std::vector<std::vector<float>>;

// ---- stats ------------------------------------------------------------------------------------

void require_rel(double got, double want, double rel) {
  INFO("got " << got << ", want " << want);
  REQUIRE(std::fabs(got - want) <= rel * std::fabs(want));
}

// ---- toy distributions ------------------------------------------------------------------------

std::vector<float> random_dist(Rng& rng, size_t n, double zero_frac) {
  std::vector<float> v(n);
  double s = 0;
  for (auto& x : v) {
    x = rng.uniform() < zero_frac ? 0.0f : static_cast<float>(-std::log(1.0 - rng.uniform()));
    s += x;
  }
  if (s == 0) {
    v[static_cast<size_t>(rng.next_u64() % n)] = 1.0f;
    s = 1;
  }
  for (auto& x : v) x = static_cast<float>(x / s);
  return v;
}

std::vector<double> normalised(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  std::vector<double> out;
  for (float x : v) out.push_back(x / s);
  return out;
}

std::vector<float> probs_from_logits(const std::vector<float>& l, double t, double top_p) {
  SamplingOptions o;
  o.temperature = t;
  o.top_p = top_p;
  std::vector<float> out;
  logits_to_probs(l.data(), static_cast<int64_t>(l.size()), o, out);
  return out;
}

// A context-free toy decoder: the target's distribution of the token at position t is P[t]
// whatever came before, and the drafter draws position t's token from Qdraw[t] and reports
// Qgiven[t] to verification (empty Qgiven = deterministic drafter: it proposes argmax
// Qdraw[t], and verification treats q as one-hot). Rows exist for positions 0..k+1.
struct Toy {
  Rows P, Qdraw, Qgiven;
};

using VerifyFn = Verdict (*)(const TokenList&, const Rows&, const Rows&, Rng&);

// Decodes until two tokens are emitted, `trials` times; returns counts of (first, second)
// pairs, [V * V]. When the first step emits only one token, a second step starts at
// position 1, so this exercises the whole accept/recover/bonus cycle.
std::vector<int64_t> joint_first_two(const Toy& toy, int k, int trials, VerifyFn verify, uint64_t seed) {
  const size_t V = toy.P[0].size();
  const bool deterministic = toy.Qgiven.empty();
  // Rows for a step starting at position 0 and at position 1.
  Rows target[2], given[2];
  for (int start = 0; start < 2; ++start) {
    for (int i = 0; i <= k; ++i) target[start].push_back(toy.P[static_cast<size_t>(start + i)]);
    if (!deterministic)
      for (int i = 0; i < k; ++i) given[start].push_back(toy.Qgiven[static_cast<size_t>(start + i)]);
  }
  Rng draft_rng(seed ^ 0x5bd1e995ULL), verify_rng(seed);
  std::vector<int64_t> counts(V * V, 0);
  TokenList draft(static_cast<size_t>(k));
  for (int trial = 0; trial < trials; ++trial) {
    Token out[2];
    int n_out = 0;
    int pos = 0;
    while (n_out < 2) {
      for (int i = 0; i < k; ++i) {
        const auto& q = toy.Qdraw[static_cast<size_t>(pos + i)];
        draft[static_cast<size_t>(i)] = deterministic ? argmax(q.data(), static_cast<int64_t>(V))
                                                      : sample(q, draft_rng);
      }
      const Verdict v = verify(draft, target[pos], given[pos], verify_rng);
      for (int i = 0; i < v.n_accepted && n_out < 2; ++i) out[n_out++] = draft[static_cast<size_t>(i)];
      if (n_out < 2) out[n_out++] = v.next_token;
      pos += v.n_accepted + 1;
    }
    ++counts[static_cast<size_t>(out[0]) * V + static_cast<size_t>(out[1])];
  }
  return counts;
}

std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out;
  for (double x : a)
    for (double y : b) out.push_back(x * y);
  return out;
}

std::vector<double> as_double(const std::vector<float>& v) { return normalised(v); }

std::vector<int64_t> first_marginal(const std::vector<int64_t>& joint, size_t V) {
  std::vector<int64_t> m(V, 0);
  for (size_t i = 0; i < joint.size(); ++i) m[i / V] += joint[i];
  return m;
}

Toy random_toy(uint64_t seed, size_t V, double zero_frac, bool deterministic) {
  Rng rng(seed);
  Toy toy;
  for (int t = 0; t < 6; ++t) {
    toy.P.push_back(random_dist(rng, V, zero_frac));
    toy.Qdraw.push_back(random_dist(rng, V, zero_frac));
  }
  if (!deterministic) toy.Qgiven = toy.Qdraw;
  return toy;
}

}  // namespace

// ---- stats -----------------------------------------------------------------------------------

// References: mpmath.gammainc(k/2, x/2, inf, regularized=True) with mp.dps = 30 (scipy was
// not installed; for even dof they also equal the closed form e^{-x/2} Σ_{j<k/2} (x/2)^j/j!).
// Note sf(100, 80) is 0.0645703689211330 (closed form), not 0.0636.
TEST_CASE("chi_square_sf matches mpmath references", "[stats]") {
  struct Case {
    double x, dof, sf;
  };
  const Case cases[] = {
      {3.84, 1, 0.050043521248705103},   {10, 4, 0.040427681994512803},
      {100, 80, 0.064570368921132976},   {1, 1, 0.3173105078629141},
      {0.5, 3, 0.91889141165467586},     {30, 10, 0.00085664121077530039},
      {200, 100, 1.1784500720979422e-8}, {50, 5, 1.3857973367009593e-9},
      {1000, 900, 0.010994608942135848}, {2600, 2500, 0.079983476251929437},
      {3, 30, 0.99999999991760278},
  };
  for (const Case& c : cases) {
    INFO("x = " << c.x << ", dof = " << c.dof);
    require_rel(chi_square_sf(c.x, c.dof), c.sf, 1e-11);
  }
  require_rel(regularized_gamma_p(0.5, 0.1), 0.34527915398142298, 1e-12);
  require_rel(regularized_gamma_p(2.5, 1.0), 0.15085496391539036, 1e-12);
  require_rel(regularized_gamma_p(10, 3), 0.0011024881301154797, 1e-12);
  REQUIRE(chi_square_sf(0.0, 3) == 1.0);
  REQUIRE(chi_square_sf(INFINITY, 3) == 0.0);
  REQUIRE_THROWS_AS(chi_square_sf(1.0, 0.0), Error);
  REQUIRE_THROWS_AS(regularized_gamma_q(-1.0, 1.0), Error);
  REQUIRE_THROWS_AS(regularized_gamma_q(1.0, -1.0), Error);
}

TEST_CASE("pearson_chi_square: hand-computed statistic, pooling, impossible cells", "[stats]") {
  // O = {10, 20, 30}, E = {20, 20, 20}: X² = (100 + 0 + 100) / 20 = 10, dof 2, sf = e^-5.
  auto r = pearson_chi_square({10, 20, 30}, {1, 1, 1});
  REQUIRE(r.statistic == Approx(10.0).epsilon(1e-14));
  REQUIRE(r.dof == 2);
  require_rel(r.p_value, 0.00673794699908546709663604842315, 1e-12);
  // Cells with E < 5 are pooled: N = 100, p = {0.5, 0.46, 0.02, 0.02} -> cells
  // {50, 46, pool 4 -> merged into the 46 cell}: 2 cells, O = {40, 60}, E = {50, 50}:
  // X² = 100/50 + 100/50 = 4, dof 1.
  r = pearson_chi_square({40, 58, 1, 1}, {0.5, 0.46, 0.02, 0.02});
  REQUIRE(r.n_cells == 2);
  REQUIRE(r.dof == 1);
  REQUIRE(r.statistic == Approx(4.0).epsilon(1e-12));
  // A zero-probability cell that was observed makes the fit impossible.
  r = pearson_chi_square({50, 49, 1}, {0.5, 0.5, 0.0});
  REQUIRE(r.p_value == 0.0);
  // A zero-probability cell that was not observed is ignored.
  r = pearson_chi_square({50, 50, 0}, {0.5, 0.5, 0.0});
  REQUIRE(r.dof == 1);
  REQUIRE(r.p_value == Approx(1.0));
  REQUIRE_THROWS_AS(pearson_chi_square({1, 2}, {0.5}), Error);
  REQUIRE_THROWS_AS(pearson_chi_square({0, 0}, {0.5, 0.5}), Error);
  REQUIRE_THROWS_AS(pearson_chi_square({1, 2}, {0.0, 0.0}), Error);
  REQUIRE_THROWS_AS(pearson_chi_square({-1, 2}, {0.5, 0.5}), Error);
}

// ---- verify_greedy -------------------------------------------------------------------------

TEST_CASE("verify_greedy: accept all + bonus, and reject at each position", "[acceptance]") {
  const int64_t V = 4;
  // Row i has its argmax at want[i]; the bonus row is row 3.
  const Token want[4] = {2, 0, 3, 1};
  std::vector<float> logits(4 * V, 0.0f);
  for (int i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < V; ++j) logits[static_cast<size_t>(i * V + j)] = 0.1f * static_cast<float>(j);
    logits[static_cast<size_t>(i * V + want[i])] = 5.0f;
  }
  const TokenList good{2, 0, 3};
  Verdict v = verify_greedy(good, logits.data(), V);
  REQUIRE(v.n_accepted == 3);
  REQUIRE(v.bonus);
  REQUIRE(v.next_token == 1);
  REQUIRE(v.accept_prob == std::vector<double>{1.0, 1.0, 1.0});

  for (int bad_at = 0; bad_at < 3; ++bad_at) {
    TokenList d = good;
    d[static_cast<size_t>(bad_at)] = (want[bad_at] + 1) % 4;
    v = verify_greedy(d, logits.data(), V);
    INFO("mismatch at " << bad_at);
    REQUIRE(v.n_accepted == bad_at);
    REQUIRE_FALSE(v.bonus);
    REQUIRE(v.next_token == want[bad_at]);
    REQUIRE(v.accept_prob.size() == static_cast<size_t>(bad_at + 1));
    REQUIRE(v.accept_prob.back() == 0.0);
  }

  // k = 0: the bonus is the argmax of row 0.
  v = verify_greedy({}, logits.data(), V);
  REQUIRE(v.n_accepted == 0);
  REQUIRE(v.bonus);
  REQUIRE(v.next_token == 2);

  // Ties: the lowest index is the argmax, so a draft of the higher tied index is rejected.
  const std::vector<float> tied{1.0f, 3.0f, 3.0f, 0.0f, /*bonus*/ 0.0f, 0.0f, 0.0f, 0.0f};
  v = verify_greedy({2}, tied.data(), V);
  REQUIRE(v.n_accepted == 0);
  REQUIRE(v.next_token == 1);
  v = verify_greedy({1}, tied.data(), V);
  REQUIRE(v.n_accepted == 1);
  REQUIRE(v.next_token == 0);

  REQUIRE_THROWS_AS(verify_greedy({4}, logits.data(), V), Error);
  REQUIRE_THROWS_AS(verify_greedy({-1}, logits.data(), V), Error);
  REQUIRE_THROWS_AS(verify_greedy({0}, nullptr, V), Error);
}

// ---- verify_rejection: hand-derived cases ------------------------------------------------------

TEST_CASE("the rule's two pieces by hand: min(1, p/q) and max(0, p - q)", "[acceptance]") {
  // verify_rejection applies them and first_token_distribution enumerates them (the analytic check).
  CHECK(acceptance_probability(0.2, 0.5) == Approx(0.4));
  CHECK(acceptance_probability(0.8, 0.5) == 1.0);
  CHECK(acceptance_probability(0.0, 0.5) == 0.0);
  CHECK(acceptance_probability(0.3, 0.3) == 1.0);
  CHECK(residual_weight(0.8, 0.5) == Approx(0.3));
  CHECK(residual_weight(0.2, 0.5) == 0.0);
  CHECK(residual_weight(0.3, 0.3) == 0.0);
}

TEST_CASE("verify_rejection: acceptance probabilities and draw counts", "[acceptance]") {
  // p = {0.2, 0.8}, q = {0.5, 0.5}: accepting token 0 has probability 0.2 / 0.5 = 0.4 and on
  // rejection the residual max(0, p − q) = {0, 0.3} recovers token 1.
  const Rows p{{0.2f, 0.8f}, {0.5f, 0.5f}};
  const Rows q{{0.5f, 0.5f}};
  Rng rng(11);
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    Rng peek = rng;
    const bool should_accept = peek.uniform() < 0.4;
    const Verdict v = verify_rejection({0}, p, q, rng);
    REQUIRE(v.accept_prob.size() == 1);
    REQUIRE(v.accept_prob[0] == Approx(0.4).epsilon(1e-6));
    REQUIRE(v.n_accepted == (should_accept ? 1 : 0));
    REQUIRE(v.bonus == should_accept);
    if (!should_accept) REQUIRE(v.next_token == 1);
    peek.uniform();  // the recovered or bonus draw
    REQUIRE(rng.state() == peek.state());
    accepted += v.n_accepted;
  }
  REQUIRE(accepted > 700);
  REQUIRE(accepted < 900);

  // p == q: every draft accepted (ratio 1), k + 1 draws in all.
  const Rows same{{0.3f, 0.7f}, {0.3f, 0.7f}, {0.3f, 0.7f}, {0.6f, 0.4f}};
  Rng a(3), b(3);
  const Verdict v = verify_rejection({1, 0, 1}, same, Rows{same[0], same[1], same[2]}, a);
  REQUIRE(v.n_accepted == 3);
  REQUIRE(v.bonus);
  REQUIRE(v.accept_prob == std::vector<double>{1.0, 1.0, 1.0});
  for (int i = 0; i < 4; ++i) b.uniform();
  REQUIRE(a.state() == b.state());
}

TEST_CASE("verify_rejection: disjoint supports always recover, one-hot q", "[acceptance]") {
  Rng rng(5);
  // q puts all mass on token 0, p none: always rejected, residual {0, 0.4, 0.6}.
  const Rows p{{0.0f, 0.4f, 0.6f}, {1.0f, 0.0f, 0.0f}};
  for (int i = 0; i < 100; ++i) {
    const Verdict v = verify_rejection({0}, p, Rows{{1.0f, 0.0f, 0.0f}}, rng);
    REQUIRE(v.n_accepted == 0);
    REQUIRE(v.accept_prob[0] == 0.0);
    REQUIRE(v.next_token != 0);
  }
  // Deterministic drafter (no q): accept with p(x) = 0.7; on rejection the residual is p with
  // x removed, so token 1 can never be recovered.
  const Rows p2{{0.3f, 0.7f}, {0.0f, 1.0f}};
  for (int i = 0; i < 100; ++i) {
    const Verdict v = verify_rejection({1}, p2, {}, rng);
    REQUIRE(v.accept_prob[0] == Approx(0.7).epsilon(1e-6));
    if (v.n_accepted == 0) REQUIRE(v.next_token == 0);
    else REQUIRE(v.next_token == 1);  // bonus from {0, 1}
  }
  // k = 0: only the bonus.
  const Verdict v = verify_rejection({}, Rows{{0.0f, 0.0f, 1.0f}}, {}, rng);
  REQUIRE(v.bonus);
  REQUIRE(v.next_token == 2);
}

TEST_CASE("verify_rejection rejects inconsistent inputs", "[acceptance]") {
  Rng rng(1);
  const Rows p{{0.5f, 0.5f}, {0.5f, 0.5f}};
  REQUIRE_THROWS_AS(verify_rejection({0, 1}, p, {}, rng), Error);                      // k + 1 rows
  REQUIRE_THROWS_AS(verify_rejection({0}, p, Rows{{0.5f, 0.5f}, {0.5f, 0.5f}}, rng), Error);  // k rows
  REQUIRE_THROWS_AS(verify_rejection({0}, p, Rows{{0.5f, 0.25f, 0.25f}}, rng), Error);      // vocab
  REQUIRE_THROWS_AS(verify_rejection({2}, p, {}, rng), Error);                           // token range
  REQUIRE_THROWS_AS(verify_rejection({0}, p, Rows{{0.0f, 1.0f}}, rng), Error);           // q(x) = 0
  REQUIRE_THROWS_AS(verify_rejection({0}, Rows{{NAN, 0.5f}, {0.5f, 0.5f}}, {}, rng), Error);
  REQUIRE_THROWS_AS(verify_rejection({0}, Rows{{}, {}}, {}, rng), Error);
  const Error e = test::catch_error([&] { verify_rejection({0}, p, Rows{{0.0f, 1.0f}}, rng); });
  CHECK(e.kind() == ErrorKind::kBadInput);
  CHECK(e.field() == "draft_probs");
}

// ---- exact first-token distribution --------------------------------------------------------------

TEST_CASE("first_token_distribution equals p for many (p, q) pairs", "[acceptance]") {
  Rng rng(42);
  int n_checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t V = 1 + static_cast<size_t>(rng.next_u64() % 40);
    const double zero_frac = (trial % 4) * 0.25;
    const auto p = random_dist(rng, V, zero_frac);
    std::vector<float> q;
    switch (trial % 5) {
      case 0: q = random_dist(rng, V, zero_frac); break;
      case 1: q.assign(V, 0.0f); q[static_cast<size_t>(rng.next_u64() % V)] = 1.0f; break;  // one-hot
      case 2: q = p; break;
      case 3: {  // disjoint supports where possible
        q.assign(V, 0.0f);
        for (size_t i = 0; i < V; ++i)
          if (p[i] == 0.0f) q[i] = 1.0f;
        if (std::all_of(q.begin(), q.end(), [](float x) { return x == 0.0f; })) q[0] = 1.0f;
        break;
      }
      default: q = random_dist(rng, V, 0.9); break;
    }
    const auto got = first_token_distribution(p, q);
    const auto want = normalised(p);
    for (size_t i = 0; i < V; ++i) REQUIRE(std::fabs(got[i] - want[i]) < 1e-12);
    ++n_checked;
  }
  REQUIRE(n_checked == 400);
  REQUIRE_THROWS_AS(first_token_distribution({0.5f, 0.5f}, {1.0f}), Error);
  REQUIRE_THROWS_AS(first_token_distribution({0.0f, 0.0f}, {1.0f, 0.0f}), Error);
}

// Hand-derived: raw target p = {0.45, 0.45, 0.1} and raw draft q = {0.6, 0.3, 0.1} under
// top_p 0.85 become p' = {0.5, 0.5, 0} and q' = {2/3, 1/3, 0}. If the drafter samples from q'
// but verification sees the raw q: accept ratios min(1, p'/q) = {5/6, 1, 0};
// accepted mass {2/3·5/6, 1/3, 0} = {5/9, 1/3, 0}; rejected mass 2/3·1/6 = 1/9; residual
// max(0, p' − q) = {0, 0.2, 0} -> token 1. Output {5/9, 4/9, 0} != p'.
TEST_CASE("negative control formula: top-p applied to p but not to the q given to verify", "[acceptance]") {
  const std::vector<float> pl{std::log(0.45f), std::log(0.45f), std::log(0.1f)};
  const std::vector<float> ql{std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  const auto p = probs_from_logits(pl, 1.0, 0.85);
  const auto q_drawn = probs_from_logits(ql, 1.0, 0.85);
  const auto q_raw = probs_from_logits(ql, 1.0, 1.0);
  const auto bad = faulty::first_token_distribution_top_p_on_p_only(p, q_raw, q_drawn);
  REQUIRE(bad[0] == Approx(5.0 / 9).epsilon(1e-6));
  REQUIRE(bad[1] == Approx(4.0 / 9).epsilon(1e-6));
  REQUIRE(bad[2] == 0.0);
  // Consistent with the correct formula when nothing is mismatched.
  const auto same = faulty::first_token_distribution_top_p_on_p_only(p, q_drawn, q_drawn);
  const auto good = first_token_distribution(p, q_drawn);
  for (size_t i = 0; i < 3; ++i) REQUIRE(std::fabs(same[i] - good[i]) < 1e-12);
}

// ---- empirical losslessness ---------------------------------------------------------------------

namespace {

constexpr int kTrials = 200000;

double joint_p_value(const Toy& toy, int k, VerifyFn fn, uint64_t seed, const std::vector<double>& want) {
  return pearson_chi_square(joint_first_two(toy, k, kTrials, fn, seed), want).p_value;
}

}  // namespace

TEST_CASE("verify_rejection: the first two emitted tokens follow p0 x p1 (chi-square)", "[acceptance][stats]") {
  // Three stochastic toys (dense, sparse with some disjoint support, a q far from p) and a
  // deterministic drafter; k = 1..4. A second step runs when the first emits only one token.
  const size_t V = 5;
  Toy far;
  far.P = Rows(6, std::vector<float>{0.05f, 0.05f, 0.1f, 0.2f, 0.6f});
  far.Qdraw = Rows(6, std::vector<float>{0.6f, 0.2f, 0.1f, 0.05f, 0.05f});
  far.Qgiven = far.Qdraw;
  const Toy toys[] = {random_toy(1, V, 0.0, false), random_toy(2, V, 0.3, false), far,
                      random_toy(4, V, 0.0, true)};
  int n_toy = 0;
  for (const Toy& toy : toys) {
    const auto want = product(as_double(toy.P[0]), as_double(toy.P[1]));
    for (int k = 1; k <= 4; ++k) {
      if (n_toy == 3 && k % 2 == 0) continue;  // deterministic drafter: k = 1, 3
      INFO("toy " << n_toy << ", k = " << k);
      const auto joint = joint_first_two(toy, k, kTrials, verify_rejection, 1000 + 10 * n_toy + k);
      const double pv_joint = pearson_chi_square(joint, want).p_value;
      const double pv_first = pearson_chi_square(first_marginal(joint, V), as_double(toy.P[0])).p_value;
      INFO("joint p-value " << pv_joint << ", first-token p-value " << pv_first);
      REQUIRE(pv_joint > 1e-3);
      REQUIRE(pv_first > 1e-3);
    }
    ++n_toy;
  }
}

TEST_CASE("negative control: always-accept fails the same chi-square test", "[acceptance][stats]") {
  const size_t V = 5;
  const Toy toys[] = {random_toy(1, V, 0.0, false), random_toy(4, V, 0.0, true)};
  for (const Toy& toy : toys) {
    const auto want = product(as_double(toy.P[0]), as_double(toy.P[1]));
    for (int k = 1; k <= 4; ++k) {
      INFO("k = " << k << (toy.Qgiven.empty() ? ", deterministic drafter" : ""));
      const double pv = joint_p_value(toy, k, faulty::verify_always_accept, 77 + k, want);
      INFO("p-value " << pv);
      REQUIRE(pv < 1e-6);
    }
  }
}

TEST_CASE("negative control: top-p on p but raw q given to verify fails the test", "[acceptance][stats]") {
  // The hand-derived case above, context-free: every position has the same p', q', q.
  const std::vector<float> pl{std::log(0.45f), std::log(0.45f), std::log(0.1f)};
  const std::vector<float> ql{std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Toy toy;
  toy.P = Rows(6, probs_from_logits(pl, 1.0, 0.85));
  toy.Qdraw = Rows(6, probs_from_logits(ql, 1.0, 0.85));
  toy.Qgiven = Rows(6, probs_from_logits(ql, 1.0, 1.0));
  const auto p = as_double(toy.P[0]);
  const auto faulty_first = faulty::first_token_distribution_top_p_on_p_only(toy.P[0], toy.Qgiven[0], toy.Qdraw[0]);
  for (int k = 1; k <= 2; ++k) {
    INFO("k = " << k);
    const auto joint = joint_first_two(toy, k, kTrials, verify_rejection, 500 + k);
    REQUIRE(pearson_chi_square(joint, product(p, p)).p_value < 1e-6);
    const auto first = first_marginal(joint, 3);
    REQUIRE(pearson_chi_square(first, p).p_value < 1e-6);
    // ...while the exact formula of the faulty pipeline describes what it does.
    REQUIRE(pearson_chi_square(first, faulty_first).p_value > 1e-3);
  }
  // Control of the control: handing verify the q that was really drawn from is lossless.
  toy.Qgiven = toy.Qdraw;
  const auto joint = joint_first_two(toy, 2, kTrials, verify_rejection, 600);
  REQUIRE(pearson_chi_square(joint, product(p, p)).p_value > 1e-3);
}
