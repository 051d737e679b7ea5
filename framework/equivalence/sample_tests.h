// Statistical tests of the distribution-equivalence checks, as pure functions on counts:
// Pearson's chi-square (and the G statistic) for one sample against exact probabilities and
// for two samples (homogeneity of a 2 x K table), one shared rule for pooling sparse cells, the
// total-variation distance with a Bretagnolle-Huber-Carol confidence radius, and Holm's
// step-down adjustment for multiple testing.
//
// References:
//   Pearson (1900); Cochran, "Some methods for strengthening the common chi-square tests",
//     Biometrics 10 (1954): the "expected count >= 5" rule used for pooling;
//   Sokal & Rohlf, Biometry (3rd ed., 1995) §17: the G statistic G = 2 Σ O ln(O / E);
//   Bretagnolle & Huber (1979) and Carol; in the form of van der Vaart & Wellner, Weak
//     Convergence and Empirical Processes (1996), Prop. A.6.6: for the empirical distribution
//     p̂ of n draws from a distribution p over k cells, P(‖p̂ − p‖₁ >= λ) <= 2^k exp(−n λ² / 2);
//   Holm, "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6 (1979).
//
// Pooling rule (the same for both tests, and the same as framework/verify/stats.h
// pearson_chi_square): a cell whose expected count is below `min_expected` (default 5) goes
// into one pooled "other" cell; if the pooled cell's expected count is itself below
// `min_expected`, it is merged into the regular cell of smallest expected count. In the
// two-sample test a category's expected counts are n_a·C/N and n_b·C/N (C: its count in both
// samples together, N = n_a + n_b); it is pooled when the smaller of the two is below
// `min_expected`. Pooling depends on the pooled sample only (the margins), never on how the
// counts split between the two samples.
#pragma once

#include <cstdint>
#include <vector>

namespace speclab {

struct TestStatistics {
  double statistic = 0.0;    // Pearson X² over the pooled cells; +inf if a probability-0 cell was observed
  int64_t dof = 0;           // pooled cells - 1 (one sample) or (pooled cells - 1)(2 - 1) (two samples)
  double p_value = 1.0;      // chi_square_sf(statistic, dof); 1 when dof == 0 (nothing to test)
  double g_statistic = 0.0;  // G = 2 Σ O ln(O / E) over the same cells
  double g_p_value = 1.0;    // chi_square_sf(g_statistic, dof)
  int64_t cells = 0;         // cells after pooling
  int64_t n_a = 0;           // draws in the (first) sample
  int64_t n_b = 0;           // draws in the second sample (0 for a one-sample test)
  double tv = 0.0;           // total-variation distance over the pooled cells: (1/2) Σ |f_a − f_b| (two
                             // samples) or (1/2) Σ |f − p| (one sample)
  double tv_radius = 0.0;    // BHC radius at confidence 1 − delta: with probability >= 1 − delta the
                             // TV between the underlying distributions (coarsened to these cells)
                             // is within tv ± tv_radius; under equality tv <= tv_radius
};

// L1 radius of the Bretagnolle-Huber-Carol inequality: sqrt(2 (k ln 2 + ln(1/delta)) / n), so that
// P(‖p̂ − p‖₁ >= radius) <= delta for n draws over k cells. Throws Error(kBadInput) for k < 1,
// n < 1 or delta outside (0, 1).
double bhc_l1_radius(int64_t cells, int64_t n, double delta);

// One-sample goodness of fit of `observed` counts against exact probabilities `probs` (same
// length; normalised here). Cells of probability 0 are dropped unless observed (then the
// statistic is +inf and the p-value 0). tv_radius = bhc_l1_radius(cells, n, delta) / 2; the
// pooled cells depend on probs only, so the radius is exact.
// Throws Error(kBadInput) on empty or mismatched sizes, negative counts, negative or non-finite
// probabilities, a zero probability sum or a zero total count.
TestStatistics one_sample_test(const std::vector<int64_t>& observed, const std::vector<double>& probs,
                               double min_expected = 5.0, double delta = 1e-3);

// The same test when the caller has already aggregated the sparse cells: `probs`/`observed` are
// the candidate regular cells, `pool_prob`/`pool_observed` the aggregated sparse cells (pool_prob
// 0 when none), `impossible_observed` the draws that fell in cells of probability 0. Probabilities
// must already sum to 1 over regular + pool (checked to 1e-6). Used for joints too large to list
// cell by cell.
TestStatistics one_sample_test_pooled(const std::vector<int64_t>& observed, const std::vector<double>& probs,
                                      double pool_prob, int64_t pool_observed, int64_t impossible_observed,
                                      double min_expected = 5.0, double delta = 1e-3);

// Two-sample homogeneity test: a[j], b[j] are the counts of category j in the two samples.
// Categories seen in neither sample are ignored. tv_radius = (r_a + r_b) / 2 with
// r = bhc_l1_radius(cells, n, delta / 2) for each sample (union bound). Throws Error(kBadInput)
// on mismatched sizes, negative counts or an empty sample.
TestStatistics two_sample_test(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               double min_expected = 5.0, double delta = 1e-3);

// Holm's step-down adjusted p-values, in the input order: with p sorted ascending,
// adj_(i) = max_{j <= i} min(1, (m − j + 1) p_(j)), m = number of p-values. Rejecting where
// adj < alpha controls the family-wise error rate at alpha under any dependence between the tests.
// Throws Error(kBadInput) on a NaN or a value outside [0, 1].
std::vector<double> holm_adjust(const std::vector<double>& p_values);

}  // namespace speclab
