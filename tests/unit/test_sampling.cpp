// Tests of framework/core/rng.h and framework/sampling/sampling.h against outside references:
// an independent Python re-implementation of the generator, softmax values computed with
// mpmath, and HF TopK/TopPLogitsWarper semantics worked out by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/rng.h"
#include "framework/sampling/sampling.h"
#include "framework/verify/stats.h"

using namespace speclab;

namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -INFINITY);
  return l;
}

std::vector<float> run(const std::vector<float>& logits, double t, int64_t k, double p) {
  SamplingOptions o;
  o.temperature = t;
  o.top_k = k;
  o.top_p = p;
  std::vector<float> out;
  logits_to_probs(logits.data(), static_cast<int64_t>(logits.size()), o, out);
  return out;
}

void require_probs(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("token " << i << ": got " << got[i] << ", want " << want[i]);
    if (want[i] == 0.0)
      REQUIRE(got[i] == 0.0f);  // masked tokens get exactly 0
    else
      REQUIRE(std::fabs(got[i] - want[i]) <= tol);
  }
}

void require_config_error(const SamplingOptions& o, const std::string& field) {
  try {
    o.validate();
    FAIL("validate() accepted an invalid " << field);
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::kConfig);
    REQUIRE(e.file() == "sampling");
    REQUIRE(e.field() == field);
    REQUIRE(e.message().find("expected") != std::string::npos);
    REQUIRE(e.message().find("found") != std::string::npos);
  }
  std::vector<float> logits{1.0f, 2.0f}, out;
  REQUIRE_THROWS_AS(logits_to_probs(logits.data(), 2, o, out), Error);
}

// Straightforward reference: full sort, HF rules, double throughout.
std::vector<double> naive_probs(const std::vector<float>& l, double t, int64_t k, double top_p) {
  const size_t n = l.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  std::vector<bool> keep(n, true);
  if (k > 0 && static_cast<size_t>(k) < n) {
    const float kth = l[order[static_cast<size_t>(k) - 1]];
    for (size_t i = 0; i < n; ++i) keep[i] = l[i] >= kth;
  }
  const double m = l[order[0]];
  std::vector<double> w(n, 0.0);
  double s = 0;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) s += (w[i] = std::exp((l[i] - m) / t));
  if (top_p < 1.0) {
    double cum = 0;
    size_t j = 0;
    for (; j < n; ++j) {
      if (j > 0 && cum >= (top_p - kTopPTolerance) * s) break;
      cum += w[order[j]];
    }
    for (; j < n; ++j) w[order[j]] = 0.0;
    s = cum;
  }
  for (double& x : w) x /= s;
  return w;
}

}  // namespace

// ---- Rng ------------------------------------------------------------------------------------

// Reference outputs from an independent Python re-implementation of splitmix64 and
// xoshiro256** (arbitrary-precision ints masked to 64 bits, written from the algorithm
// descriptions at prng.di.unimi.it), e.g.
//   def next(s): r = rotl(s[1]*5 & M, 7)*9 & M; t = s[1] << 17 & M; s[2]^=s[0]; s[3]^=s[1];
//                s[1]^=s[2]; s[0]^=s[3]; s[2]^=t; s[3]=rotl(s[3],45); return r
// seeded with four consecutive splitmix64 outputs. splitmix64's first output from state 0,
// 0xe220a8397b1dcdaf, is also the value published with the algorithm's reference code.
TEST_CASE("splitmix64 matches the reference values", "[rng]") {
  uint64_t st = 0;
  REQUIRE(splitmix64(st) == 0xe220a8397b1dcdafULL);
  REQUIRE(splitmix64(st) == 0x6e789e6aa1b965f4ULL);
  REQUIRE(splitmix64(st) == 0x06c45d188009454fULL);
}

TEST_CASE("Rng first outputs match an independent implementation", "[rng]") {
  struct Case {
    uint64_t seed;
    uint64_t out[4];
  };
  const Case cases[] = {
      {0, {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL, 0x1a5f849d4933e6e0ULL, 0x6aa594f1262d2d2cULL}},
      {42, {0x15780b2e0c2ec716ULL, 0x6104d9866d113a7eULL, 0xae17533239e499a1ULL, 0xecb8ad4703b360a1ULL}},
      {0xdeadbeefcafef00dULL,
       {0x9e32cfb5bb93eebbULL, 0x16006bd9d4ac0014ULL, 0x8ada5d6d34b6538eULL, 0x7c327ca32346a238ULL}},
  };
  for (const Case& c : cases) {
    Rng rng(c.seed);
    for (uint64_t want : c.out) REQUIRE(rng.next_u64() == want);
  }
  // uniform() = (next >> 11) * 2^-53, same Python script, seed 7.
  Rng rng(7);
  const double want[] = {0.7005764821796896, 0.2787512294737843, 0.8396274618764198,
                         0.9810977250149351};
  for (double w : want) REQUIRE(rng.uniform() == w);
}

TEST_CASE("Rng is reproducible and seeds give different streams", "[rng]") {
  Rng a(123), b(123), c(124);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next_u64();
    REQUIRE(x == b.next_u64());
    differs = differs || (x != c.next_u64());
  }
  REQUIRE(differs);
  REQUIRE(a.state() == b.state());
}

TEST_CASE("Rng uniform() lies in the half-open unit interval and is uniform on 16 bins", "[rng]") {
  Rng rng(99);
  std::vector<int64_t> bins(16, 0);
  for (int i = 0; i < 200000; ++i) {
    const double u = rng.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    ++bins[static_cast<size_t>(u * 16)];
  }
  REQUIRE(pearson_chi_square(bins, std::vector<double>(16, 1.0 / 16)).p_value > 1e-3);
  // Negative control: the same counts are not uniform on a skewed law.
  std::vector<double> skew(16, 1.0);
  skew[0] = 1.2;
  REQUIRE(pearson_chi_square(bins, skew).p_value < 1e-6);
}

// ---- options ----------------------------------------------------------------------------------

TEST_CASE("SamplingOptions::validate rejects bad values with named keys", "[sampling]") {
  SamplingOptions ok;
  REQUIRE_NOTHROW(ok.validate());
  ok.temperature = 0.7;
  ok.top_k = 50;
  ok.top_p = 0.9;
  REQUIRE_NOTHROW(ok.validate());
  REQUIRE(SamplingOptions{}.greedy());
  REQUIRE_FALSE(ok.greedy());

  for (double t : {-1.0, -1e-300, std::nan(""), std::numeric_limits<double>::infinity()}) {
    SamplingOptions o;
    o.temperature = t;
    require_config_error(o, "temperature");
  }
  for (double p : {0.0, 1.5, -0.1, std::nan(""), 1.0000001}) {
    SamplingOptions o;
    o.temperature = 1.0;
    o.top_p = p;
    require_config_error(o, "top_p");
  }
  SamplingOptions o;
  o.top_k = -1;
  require_config_error(o, "top_k");
}

// ---- logits_to_probs --------------------------------------------------------------------------

TEST_CASE("temperature scaling matches a hand-computed softmax", "[sampling]") {
  const std::vector<float> l{1.0f, 2.0f, 3.0f};
  // softmax([1,2,3]), softmax([2,4,6]), softmax([0.5,1,1.5]), mpmath at 30 digits.
  require_probs(run(l, 1.0, 0, 1.0), {0.090030573170380458, 0.24472847105479765, 0.66524095577482189}, 1e-7);
  require_probs(run(l, 0.5, 0, 1.0), {0.015876239976466766, 0.11731042782619836, 0.86681333219733487}, 1e-7);
  require_probs(run(l, 2.0, 0, 1.0), {0.18632372322584758, 0.3071958857184984, 0.50648039105565403}, 1e-7);
}

TEST_CASE("greedy is one-hot at argmax, lowest index on ties", "[sampling]") {
  require_probs(run({0.5f, 3.0f, -1.0f, 2.0f}, 0.0, 0, 1.0), {0, 1, 0, 0}, 0);
  require_probs(run({1.0f, 4.0f, 4.0f, 4.0f}, 0.0, 2, 0.3), {0, 1, 0, 0}, 0);
  REQUIRE(argmax(std::vector<float>{1.0f, 4.0f, 4.0f}.data(), 3) == 1);
  REQUIRE(argmax(std::vector<float>{-INFINITY, -INFINITY, -5.0f}.data(), 3) == 2);
  REQUIRE(argmax(std::vector<float>{7.0f}.data(), 1) == 0);
  // top_k = 1 likewise at any temperature: deterministic() says so (a tie at the top was sampled
  // between, as HF keeps ties at the top-k boundary; larger k still keep them).
  require_probs(run({1.0f, 4.0f, 4.0f, 2.0f}, 0.7, 1, 1.0), {0, 1, 0, 0}, 0);
  // -0 and +0 are one value: the lower id comes first (the ranking's bit key put +0 above -0).
  require_probs(run({-1.0f, -0.0f, 0.0f, -2.0f}, 0.7, 1, 1.0), {0, 1, 0, 0}, 0);
  require_probs(run({-1.0f, -0.0f, 0.0f, -2.0f}, 0.0, 0, 1.0), {0, 1, 0, 0}, 0);
  const std::vector<float> two = run({1.0f, 4.0f, 4.0f, 2.0f}, 0.7, 2, 1.0);
  CHECK(two[1] == Approx(0.5));
  CHECK(two[2] == Approx(0.5));
  REQUIRE_THROWS_AS(argmax(std::vector<float>{1.0f, NAN}.data(), 2), Error);
}

TEST_CASE("argmax equals a first-maximum scan at every length and tail, with ties, zeros and NaN", "[sampling]") {
  // The vectorised argmax against the plain scan: the first index of the largest value.
  const auto scan = [](const std::vector<float>& v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return static_cast<int32_t>(best);
  };
  std::mt19937 gen(3);
  for (size_t n : {1, 2, 3, 4, 5, 7, 8, 9, 31, 33, 49152, 151936}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> v(n);
      // Few distinct values, so the maximum repeats; trial 1 all -inf; trial 2 signed zeros.
      for (float& x : v)
        x = trial == 1   ? -INFINITY
            : trial == 2 ? (gen() % 2 ? 0.0f : -0.0f)
                         : static_cast<float>(static_cast<int>(gen() % 9) - 4);
      if (trial == 3) v[gen() % n] = INFINITY;
      if (trial == 4) v[n - 1] = 100.0f;  // the maximum in the tail
      INFO("n = " << n << ", trial " << trial);
      REQUIRE(argmax(v.data(), static_cast<int64_t>(n)) == scan(v));
      if (trial == 5) {
        v[n / 2] = NAN;
        REQUIRE_THROWS_AS(argmax(v.data(), static_cast<int64_t>(n)), Error);
      }
    }
  }
}

TEST_CASE("top-k keeps the k largest logits for k = 1..V", "[sampling]") {
  // A permutation of distinct logits; token i has rank rank[i] (0 = largest).
  const std::vector<float> l{0.3f, 2.5f, -1.0f, 1.7f, 0.9f, -0.2f};
  const int V = static_cast<int>(l.size());
  std::vector<int> rank(V);
  for (int i = 0; i < V; ++i)
    for (int j = 0; j < V; ++j) rank[i] += l[j] > l[i];
  for (int k = 1; k <= V + 2; ++k) {
    std::vector<double> want(V, 0.0);
    double s = 0;
    for (int i = 0; i < V; ++i)
      if (rank[i] < k) s += (want[i] = std::exp(static_cast<double>(l[i])));
    for (double& w : want) w /= s;
    INFO("k = " << k);
    require_probs(run(l, 1.0, k, 1.0), want, 1e-7);
  }
}

TEST_CASE("top-k keeps every token tied with the k-th largest (HF)", "[sampling]") {
  const std::vector<float> l{3.0f, 2.0f, 2.0f, 1.0f};
  const double e3 = std::exp(3.0), e2 = std::exp(2.0), e1 = std::exp(1.0);
  const double s3 = e3 + 2 * e2;
  require_probs(run(l, 1.0, 2, 1.0), {e3 / s3, e2 / s3, e2 / s3, 0}, 1e-7);
  require_probs(run(l, 1.0, 3, 1.0), {e3 / s3, e2 / s3, e2 / s3, 0}, 1e-7);
  require_probs(run(l, 1.0, 1, 1.0), {1, 0, 0, 0}, 0);
  require_probs(run(l, 1.0, 4, 1.0), {e3 / (s3 + e1), e2 / (s3 + e1), e2 / (s3 + e1), e1 / (s3 + e1)}, 1e-7);
}

// HF TopPLogitsWarper: sort ascending, drop tokens whose ascending cumulative sum is
// <= 1 - top_p. For probs {0.5, 0.3, 0.15, 0.05}: ascending cumsum {0.05, 0.2, 0.5, 1.0}.
//   top_p 0.8  -> 1 - top_p = 0.2  -> drop 0.05, 0.15        -> keep {0.5, 0.3}
//   top_p 0.81 -> 0.19             -> drop 0.05               -> keep {0.5, 0.3, 0.15}
//   top_p 0.5  -> 0.5              -> drop all but 0.5        -> keep {0.5}
//   top_p 0.51 -> 0.49             -> keep {0.5, 0.3}
//   top_p 0.95 -> 0.05             -> drop 0.05               -> keep 3
//   top_p 0.96 -> 0.04             -> keep all 4
//   top_p 1e-9 -> nothing survives the rule, min_tokens_to_keep = 1 -> keep {0.5}
TEST_CASE("top-p boundary cases follow HF TopPLogitsWarper", "[sampling]") {
  // Tokens in a shuffled order so that index order is not probability order.
  const std::vector<double> p{0.15, 0.5, 0.05, 0.3};
  const auto l = logits_of(p);
  require_probs(run(l, 1.0, 0, 0.8), {0, 0.625, 0, 0.375}, 1e-6);
  require_probs(run(l, 1.0, 0, 0.81), {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}, 1e-6);
  require_probs(run(l, 1.0, 0, 0.5), {0, 1, 0, 0}, 0);
  require_probs(run(l, 1.0, 0, 0.51), {0, 0.625, 0, 0.375}, 1e-6);
  require_probs(run(l, 1.0, 0, 0.95), {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}, 1e-6);
  require_probs(run(l, 1.0, 0, 0.96), p, 1e-6);
  require_probs(run(l, 1.0, 0, 1.0), p, 1e-6);
  require_probs(run(l, 1.0, 0, 1e-9), {0, 1, 0, 0}, 0);
}

TEST_CASE("top-p on equal probabilities keeps the lower token ids", "[sampling]") {
  const std::vector<float> l{0.0f, 0.0f, 0.0f, 0.0f};
  require_probs(run(l, 1.0, 0, 0.5), {0.5, 0.5, 0, 0}, 1e-7);
  require_probs(run(l, 1.0, 0, 0.3), {0.5, 0.5, 0, 0}, 1e-7);
  require_probs(run(l, 1.0, 0, 0.25), {1, 0, 0, 0}, 0);
  require_probs(run(l, 1.0, 0, 0.76), {0.25, 0.25, 0.25, 0.25}, 1e-7);
}

TEST_CASE("the warpers apply in HF order: temperature, top-k, top-p", "[sampling]") {
  // top-k before top-p: {0.4, 0.3, 0.2, 0.1} with k = 2 renormalises to {4/7, 3/7}, so
  // top_p 0.5 keeps one token; top-p alone (0.4 < 0.5) would keep two.
  const auto l = logits_of({0.4, 0.3, 0.2, 0.1});
  require_probs(run(l, 1.0, 2, 0.5), {1, 0, 0, 0}, 0);
  require_probs(run(l, 1.0, 0, 0.5), {4.0 / 7, 3.0 / 7, 0, 0}, 1e-6);
  // temperature before top-p: T = 2 turns {0.5, 0.3, 0.15, 0.05} into ∝ sqrt(p) =
  // {0.379, 0.294, 0.208, 0.120}; top_p 0.8 then keeps 3 (0.672 < 0.8 <= 0.880), whereas
  // on the unscaled probs it keeps 2. Kept values ∝ sqrt(p) over the first three (Python).
  const auto l2 = logits_of({0.5, 0.3, 0.15, 0.05});
  require_probs(run(l2, 2.0, 0, 0.8), {0.4306040222561934, 0.3335444414016329, 0.23585153634217368, 0}, 1e-6);
}

TEST_CASE("logits of -inf get probability 0, bad logits are rejected", "[sampling]") {
  const std::vector<float> l{-INFINITY, 0.0f, -INFINITY, 0.0f};
  require_probs(run(l, 1.0, 0, 1.0), {0, 0.5, 0, 0.5}, 1e-7);
  require_probs(run(l, 1.0, 3, 0.9), {0, 0.5, 0, 0.5}, 1e-7);
  SamplingOptions o;
  o.temperature = 1.0;
  std::vector<float> out;
  for (const std::vector<float>& bad : {std::vector<float>{1.0f, NAN}, std::vector<float>{INFINITY, 0.0f},
                                        std::vector<float>{-INFINITY, -INFINITY}}) {
    try {
      logits_to_probs(bad.data(), 2, o, out);
      FAIL("accepted bad logits");
    } catch (const Error& e) {
      REQUIRE(e.kind() == ErrorKind::kBadInput);
      REQUIRE(e.field() == "logits");
    }
  }
  REQUIRE_THROWS_AS(logits_to_probs(l.data(), 0, o, out), Error);
}

TEST_CASE("logits_to_probs matches a full-sort reference on a 50k vocabulary", "[sampling]") {
  const int64_t V = 50000;
  Rng rng(5);
  std::vector<float> l(V);
  for (auto& x : l) {
    // Box-Muller normal(0, 3), rounded to 1/64 so that ties occur.
    const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
    x = static_cast<float>(std::round(3.0 * std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2) * 64) / 64);
  }
  struct Opt {
    double t;
    int64_t k;
    double p;
  };
  for (const Opt& c : {Opt{1.0, 0, 1.0}, Opt{0.7, 50, 1.0}, Opt{1.0, 0, 0.9}, Opt{0.3, 0, 0.5},
                       Opt{1.3, 0, 0.999}, Opt{1.0, 1000, 0.95}, Opt{5.0, 0, 0.9}, Opt{1.0, 1, 0.5}}) {
    INFO("T = " << c.t << ", k = " << c.k << ", p = " << c.p);
    const auto got = run(l, c.t, c.k, c.p);
    const auto want = naive_probs(l, c.t, c.k, c.p);
    double sum = 0;
    int64_t kept = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (want[i] == 0.0) {
        REQUIRE(got[i] == 0.0f);
      } else {
        REQUIRE(std::fabs(got[i] - want[i]) <= 1e-6 * want[i] + 1e-12);
        ++kept;
      }
      sum += got[i];
    }
    REQUIRE(std::fabs(sum - 1.0) < 1e-5);
    REQUIRE(kept >= 1);
  }
}

TEST_CASE("without top-k every vector path matches the reference, AVX-512 and AVX2 bit for bit", "[sampling]") {
  // Without top-k every token's weight is computed 8 (AVX-512) or 4 (AVX2) lanes of double at a
  // time, exp by a polynomial. Vocab sizes leave tails of 1 to 3 after the 4-lane blocks and of 4
  // after the 8-lane ones; logits span more than 104 / T (weights below the float range must come
  // out exactly 0 or within one subnormal step), hold -inf and ties (rounded to 1/32).
  // The 16-lane request runs the AVX-512 path only where the CPU has it (else AVX2 again).
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")))
    WARN("this CPU has no AVX-512 (F + VL): the AVX-512 path is not exercised, only AVX2 against the reference");
  Rng rng(11);
  for (const int64_t vocab : {int64_t(49152), int64_t(49157), int64_t(49156), int64_t(5), int64_t(3), int64_t(1)}) {
    std::vector<float> l(static_cast<size_t>(vocab));
    for (auto& v : l) v = static_cast<float>(std::round((rng.uniform() * 80.0 - 60.0) * 32) / 32);
    if (vocab > 100) {
      l[7] = -INFINITY;
      l[static_cast<size_t>(vocab - 1)] = l[static_cast<size_t>(vocab - 2)] = 25.0f;  // a tied maximum in the tail
    }
    for (const auto& tp : {std::make_pair(1.0, 1.0), std::make_pair(0.7, 1.0), std::make_pair(0.2, 1.0),
                           std::make_pair(1.0, 0.9), std::make_pair(0.5, 0.5), std::make_pair(2.0, 0.999),
                           std::make_pair(0.05, 0.95)}) {
      INFO("vocab " << vocab << ", T " << tp.first << ", top_p " << tp.second);
      const std::vector<double> want = naive_probs(l, tp.first, 0, tp.second);
      SamplingOptions o;
      o.temperature = tp.first;
      o.top_p = tp.second;
      std::vector<float> by_lanes[3];
      const int lanes[3] = {16, 8, 1};  // a path the CPU lacks falls back to the next narrower
      for (int k = 0; k < 3; ++k) {
        INFO("max lanes " << lanes[k]);
        logits_to_probs(l.data(), vocab, o, by_lanes[k], lanes[k]);
        const std::vector<float>& got = by_lanes[k];
        REQUIRE(got.size() == want.size());
        double sum = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          INFO("token " << i << ": got " << got[i] << ", want " << want[i]);
          if (want[i] == 0.0)
            REQUIRE(got[i] == 0.0f);
          else
            REQUIRE(std::fabs(got[i] - want[i]) <= 1e-6 * want[i] + 1.5e-45);
          sum += got[i];
        }
        REQUIRE(std::fabs(sum - 1.0) < 1e-5);
      }
      REQUIRE(by_lanes[0] == by_lanes[1]);
    }
  }
}

TEST_CASE("top-p on a flat 50k vocabulary keeps exactly the lowest ids", "[sampling]") {
  // Every token has probability 1/V: the mass before token j is j/V, so top_p = 0.5 keeps
  // j < V/2 (ties ordered by id), and top_p = 0.3 keeps ceil(0.3 V) tokens.
  const int64_t V = 50000;
  const std::vector<float> l(static_cast<size_t>(V), 1.5f);
  for (double top_p : {0.5, 0.3, 1e-9}) {
    const auto got = run(l, 0.8, 0, top_p);
    const int64_t want_kept = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(top_p * V - 1e-6)));
    INFO("top_p " << top_p);
    for (int64_t i = 0; i < V; ++i) {
      if (i < want_kept)
        REQUIRE(std::fabs(got[static_cast<size_t>(i)] - 1.0 / static_cast<double>(want_kept)) < 1e-9);
      else
        REQUIRE(got[static_cast<size_t>(i)] == 0.0f);
    }
  }
}

TEST_CASE("a tiny temperature leaves only the maximum", "[sampling]") {
  require_probs(run({1.0f, 3.0f, 2.999f, -4.0f}, 1e-30, 0, 1.0), {0, 1, 0, 0}, 0);
  require_probs(run({1.0f, 3.0f, 2.999f, -4.0f}, 1e-30, 2, 0.9), {0, 1, 0, 0}, 0);
  // A subnormal temperature (1 / T overflows to inf): still one-hot, not NaN, on every path.
  for (const int lanes : {16, 8, 1}) {
    SamplingOptions o;
    o.temperature = 1e-310;
    std::vector<float> l{1.0f, 3.0f, 2.999f, -4.0f, 0.5f}, out;
    logits_to_probs(l.data(), 5, o, out, lanes);
    require_probs(out, {0, 1, 0, 0, 0}, 0);
  }
  // A huge temperature makes the distribution uniform.
  require_probs(run({1.0f, 3.0f, 2.0f, -4.0f}, 1e30, 0, 1.0), {0.25, 0.25, 0.25, 0.25}, 1e-7);
}

// ---- sample -------------------------------------------------------------------------------

TEST_CASE("sample() frequencies match probs (chi-square) and never pick probability 0", "[sampling]") {
  const std::vector<float> p{0.1f, 0.0f, 0.2f, 0.3f, 0.4f, 0.0f};
  Rng rng(2024);
  std::vector<int64_t> counts(p.size(), 0);
  for (int i = 0; i < 200000; ++i) ++counts[static_cast<size_t>(sample(p, rng))];
  REQUIRE(counts[1] == 0);
  REQUIRE(counts[5] == 0);
  const std::vector<double> want(p.begin(), p.end());
  REQUIRE(pearson_chi_square(counts, want).p_value > 1e-3);
  // Negative control: a nearby wrong law is rejected by the same test.
  REQUIRE(pearson_chi_square(counts, {0.11, 0.0, 0.19, 0.3, 0.4, 0.0}).p_value < 1e-6);
}

TEST_CASE("sample() is inverse-CDF with exactly one uniform draw", "[sampling]") {
  const std::vector<float> p{0.25f, 0.0f, 0.5f, 0.25f};
  Rng rng(77);
  for (int i = 0; i < 1000; ++i) {
    Rng peek = rng;
    const double u = peek.uniform();
    const int32_t want = u < 0.25 ? 0 : (u < 0.75 ? 2 : 3);
    REQUIRE(sample(p, rng) == want);
    REQUIRE(rng.state() == peek.state());
  }
  // Unnormalised input is scaled by its sum.
  Rng a(1), b(1);
  REQUIRE(sample(std::vector<float>{1.0f, 3.0f}, a) == (b.uniform() < 0.25 ? 0 : 1));
}

TEST_CASE("sample() rejects invalid distributions", "[sampling]") {
  Rng rng(1);
  for (const std::vector<float>& bad : {std::vector<float>{}, std::vector<float>{0.0f, 0.0f},
                                        std::vector<float>{0.5f, -0.1f}, std::vector<float>{NAN, 1.0f},
                                        std::vector<float>{INFINITY, 1.0f}}) {
    try {
      sample(bad, rng);
      FAIL("accepted an invalid distribution");
    } catch (const Error& e) {
      REQUIRE(e.kind() == ErrorKind::kBadInput);
      REQUIRE(e.field() == "probs");
    }
  }
}

TEST_CASE("softmax_prob equals a double-precision softmax on a 49152 vocabulary", "[sampling]") {
  // Logits spread over ~60 nats (as an LM head's), -inf entries, and vocab sizes that leave a
  // tail after the 16-wide blocks; the reference is a plain double softmax.
  Rng rng(7);
  const int lanes = GENERATE(16, 8, 1);  // AVX-512, AVX2, scalar (a wider path falls back when absent)
  INFO("max lanes " << lanes);
  for (const int64_t vocab : {int64_t(49152), int64_t(49157), int64_t(5), int64_t(1)}) {
    std::vector<float> l(static_cast<size_t>(vocab));
    for (auto& v : l) v = static_cast<float>(rng.uniform() * 60.0 - 45.0);
    if (vocab > 100) {
      l[3] = -INFINITY;
      l[static_cast<size_t>(vocab - 1)] = 30.0f;  // the maximum sits in the tail for 49157
    }
    double m = -INFINITY, total = 0.0;
    for (float v : l) m = std::max(m, static_cast<double>(v));
    for (float v : l) total += std::exp(static_cast<double>(v) - m);
    for (int64_t t : {int64_t(0), vocab / 2, vocab - 1}) {
      const double want = std::exp(static_cast<double>(l[static_cast<size_t>(t)]) - m) / total;
      const double got = softmax_prob(l.data(), vocab, static_cast<int32_t>(t), lanes);
      INFO("vocab " << vocab << " token " << t << ": got " << got << ", want " << want);
      REQUIRE(std::fabs(got - want) <= 1e-6 * want);
    }
    if (vocab > 100) REQUIRE(softmax_prob(l.data(), vocab, 3, lanes) == 0.0);
  }
  // The plain softmax of logits_to_probs at temperature 1, token by token.
  std::vector<float> l(1000);
  for (auto& v : l) v = static_cast<float>(rng.uniform() * 20.0);
  const std::vector<float> p = run(l, 1.0, 0, 1.0);
  for (int32_t t = 0; t < 1000; ++t) REQUIRE(std::fabs(softmax_prob(l.data(), 1000, t, lanes) - p[t]) <= 1e-6 * p[t]);
}

TEST_CASE("softmax_prob rejects bad logits and tokens like logits_to_probs", "[sampling]") {
  const int lanes = GENERATE(16, 8, 1);
  for (const int64_t vocab : {int64_t(2), int64_t(40)}) {  // scalar and vector paths
    for (int which = 0; which < 3; ++which) {
      std::vector<float> l(static_cast<size_t>(vocab), 0.0f);
      if (which == 0) l[1] = NAN;
      if (which == 1) l[0] = INFINITY;
      if (which == 2) std::fill(l.begin(), l.end(), -INFINITY);
      try {
        softmax_prob(l.data(), vocab, 0, lanes);
        FAIL("accepted bad logits (case " << which << ", vocab " << vocab << ")");
      } catch (const Error& e) {
        REQUIRE(e.kind() == ErrorKind::kBadInput);
        REQUIRE(e.field() == "logits");
      }
    }
    std::vector<float> ok(static_cast<size_t>(vocab), 0.0f);
    REQUIRE_THROWS_AS(softmax_prob(ok.data(), vocab, static_cast<int32_t>(vocab)), Error);
    REQUIRE_THROWS_AS(softmax_prob(ok.data(), vocab, -1), Error);
  }
}
