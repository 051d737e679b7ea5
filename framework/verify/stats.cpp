#include "framework/verify/stats.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "framework/core/error.h"

namespace speclab {

namespace {

const char* const kSource = "stats";
constexpr double kEps = 1e-16;
constexpr double kTiny = 1e-300;

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

void check_domain(double a, double x) {
  if (!(a > 0.0) || !std::isfinite(a))
    throw Error(ErrorKind::kBadInput, "expected a finite a > 0, found " + num(a), kSource, "a");
  if (!(x >= 0.0))
    throw Error(ErrorKind::kBadInput, "expected x >= 0, found " + num(x), kSource, "x");
}

// Both expansions need O(sqrt(a)) terms near x ~ a; this bound is far above that for any a
// the tests use (a = dof / 2), and hitting it is a bug, not an input error.
int max_iterations(double a) { return 1000 + static_cast<int>(50.0 * std::sqrt(a)); }

// log of the common prefactor x^a e^-x / Gamma(a).
double log_prefactor(double a, double x) { return a * std::log(x) - x - std::lgamma(a); }

// P(a, x) by the series  x^a e^-x / Gamma(a+1) * Σ_n x^n / ((a+1)...(a+n)); use for x < a + 1.
double gamma_p_series(double a, double x) {
  double ap = a;
  double term = 1.0 / a;
  double sum = term;
  const int n_max = max_iterations(a);
  for (int n = 0; n < n_max; ++n) {
    ap += 1.0;
    term *= x / ap;
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * kEps) return sum * std::exp(log_prefactor(a, x));
  }
  throw Error(ErrorKind::kInternal, "incomplete gamma series did not converge for a = " +
                                        num(a) + ", x = " + num(x));
}

// Q(a, x) by the continued fraction (modified Lentz); use for x >= a + 1.
double gamma_q_fraction(double a, double x) {
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  const int n_max = max_iterations(a);
  for (int i = 1; i <= n_max; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < kEps) return std::exp(log_prefactor(a, x)) * h;
  }
  throw Error(ErrorKind::kInternal, "incomplete gamma continued fraction did not converge for a = " +
                                        num(a) + ", x = " + num(x));
}

}  // namespace

double regularized_gamma_p(double a, double x) {
  check_domain(a, x);
  if (x == 0.0) return 0.0;
  if (std::isinf(x)) return 1.0;
  if (x < a + 1.0) return gamma_p_series(a, x);
  return 1.0 - gamma_q_fraction(a, x);
}

double regularized_gamma_q(double a, double x) {
  check_domain(a, x);
  if (x == 0.0) return 1.0;
  if (std::isinf(x)) return 0.0;
  if (x < a + 1.0) return 1.0 - gamma_p_series(a, x);
  return gamma_q_fraction(a, x);
}

double chi_square_sf(double x, double dof) {
  if (!(dof > 0.0) || !std::isfinite(dof))
    throw Error(ErrorKind::kBadInput, "expected dof > 0, found " + num(dof), kSource, "dof");
  if (std::isnan(x))
    throw Error(ErrorKind::kBadInput, "expected a chi-square statistic, found NaN", kSource, "x");
  if (x <= 0.0) return 1.0;
  return regularized_gamma_q(0.5 * dof, 0.5 * x);
}

ChiSquareResult pearson_chi_square(const std::vector<int64_t>& observed,
                                   const std::vector<double>& expected_probs,
                                   double min_expected) {
  const size_t n = observed.size();
  if (n == 0 || expected_probs.size() != n)
    throw Error(ErrorKind::kBadInput,
                "expected equally many observed counts and probabilities (at least 1), found " +
                    std::to_string(n) + " and " + std::to_string(expected_probs.size()),
                kSource, "expected_probs");
  double p_sum = 0.0;
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (observed[i] < 0)
      throw Error(ErrorKind::kBadInput,
                  "expected counts >= 0, found " + std::to_string(observed[i]) + " at cell " +
                      std::to_string(i),
                  kSource, "observed");
    const double p = expected_probs[i];
    if (!(p >= 0.0) || !std::isfinite(p))
      throw Error(ErrorKind::kBadInput,
                  "expected finite probabilities >= 0, found " + num(p) + " at cell " +
                      std::to_string(i),
                  kSource, "expected_probs");
    p_sum += p;
    total += observed[i];
  }
  if (!(p_sum > 0.0))
    throw Error(ErrorKind::kBadInput, "expected a positive probability sum, found " + num(p_sum),
                kSource, "expected_probs");
  if (total == 0)
    throw Error(ErrorKind::kBadInput, "expected a positive total count, found 0", kSource,
                "observed");

  const double big_n = static_cast<double>(total);
  ChiSquareResult r;
  bool impossible_seen = false;
  // Regular cells (expected >= min_expected) and one pool for the sparse ones.
  double pool_e = 0.0, pool_o = 0.0;
  double stat = 0.0;
  int64_t n_regular = 0;
  double smallest_e = std::numeric_limits<double>::infinity();
  double smallest_o = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double e = big_n * expected_probs[i] / p_sum;
    const double o = static_cast<double>(observed[i]);
    if (expected_probs[i] == 0.0) {
      if (observed[i] > 0) impossible_seen = true;
      continue;
    }
    if (e < min_expected) {
      pool_e += e;
      pool_o += o;
      continue;
    }
    ++n_regular;
    stat += (o - e) * (o - e) / e;
    if (e < smallest_e) {
      smallest_e = e;
      smallest_o = o;
    }
  }
  int64_t cells = n_regular;
  if (pool_e > 0.0) {
    if (pool_e >= min_expected || n_regular == 0) {
      stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
      ++cells;
    } else {
      // Replace the smallest regular cell's term by the term of (smallest + pool).
      stat -= (smallest_o - smallest_e) * (smallest_o - smallest_e) / smallest_e;
      const double e = smallest_e + pool_e, o = smallest_o + pool_o;
      stat += (o - e) * (o - e) / e;
    }
  }
  r.n_cells = cells;
  r.dof = cells - 1;
  if (impossible_seen) {
    r.statistic = std::numeric_limits<double>::infinity();
    r.p_value = 0.0;
    return r;
  }
  r.statistic = stat;
  r.p_value = r.dof > 0 ? chi_square_sf(stat, static_cast<double>(r.dof)) : 1.0;
  return r;
}

}  // namespace speclab
