// Statistical tests used to check that speculative decoding is lossless: the regularized
// incomplete gamma function, the chi-square survival function, and Pearson's chi-square
// goodness-of-fit test with pooling of sparse cells.
//
// Implemented from the definitions (series and Lentz continued fraction, as described in
// Press et al., Numerical Recipes, 3rd ed., §6.2); checked in tests/unit/test_acceptance.cpp
// against values computed with mpmath at 30 significant digits.
#pragma once

#include <cstdint>
#include <vector>

namespace speclab {

// Regularized lower and upper incomplete gamma functions P(a, x) and Q(a, x) = 1 - P(a, x)
// for a > 0, x >= 0 (x = +inf allowed). Relative accuracy ~1e-14 in the tail that each one
// computes directly (Q is computed without cancellation when x >= a + 1, so tiny p-values
// are accurate). Throws Error(kBadInput, field "a"/"x") outside the domain.
double regularized_gamma_p(double a, double x);
double regularized_gamma_q(double a, double x);

// Survival function of the chi-square distribution with `dof` > 0 degrees of freedom:
// P(X >= x) = Q(dof / 2, x / 2). x <= 0 gives 1.
double chi_square_sf(double x, double dof);

struct ChiSquareResult {
  double statistic = 0.0;  // Σ (O - E)^2 / E over the (pooled) cells; +inf if a cell of
                           // probability 0 was observed
  int64_t dof = 0;         // cells after pooling - 1
  double p_value = 1.0;    // chi_square_sf(statistic, dof); 1 when dof == 0
  int64_t n_cells = 0;     // cells after pooling
};

// Pearson's goodness-of-fit test of observed counts against a distribution.
// observed: [n_cells] counts; expected_probs: [n_cells] probabilities (normalised here, so
// they only need to be proportional). Cells whose expected count N·p is below
// `min_expected` are pooled into one cell; if that pooled cell is itself below
// `min_expected`, it is merged into the smallest remaining cell. Cells of probability 0 are
// dropped, unless observed, which yields statistic +inf and p_value 0.
// Throws Error(kBadInput) on mismatched or empty sizes, negative counts, negative or
// non-finite probabilities, a zero probability sum, or zero total count.
ChiSquareResult pearson_chi_square(const std::vector<int64_t>& observed,
                                   const std::vector<double>& expected_probs,
                                   double min_expected = 5.0);

}  // namespace speclab
