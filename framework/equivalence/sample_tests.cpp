#include "framework/equivalence/sample_tests.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

#include "framework/core/error.h"
#include "framework/verify/stats.h"

namespace speclab {

namespace {

const char* const kSource = "equivalence tests";

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

void check_min_expected(double min_expected) {
  if (!(min_expected > 0.0) || !std::isfinite(min_expected))
    throw Error(ErrorKind::kBadInput, "expected a finite min_expected > 0, found " + num(min_expected), kSource,
                "min_expected");
}

// One cell of a (pooled) table: expected and observed counts per sample.
struct Cell {
  double e_a = 0.0, o_a = 0.0;  // first sample (the only one in a one-sample test)
  double e_b = 0.0, o_b = 0.0;  // second sample (unused in a one-sample test)
  double key = 0.0;             // what "smallest cell" means: expected count of the first sample
};

// Pools the sparse cells (see the header's rule). `sparse` is true for cells below min_expected.
std::vector<Cell> pool(const std::vector<Cell>& cells, const std::vector<bool>& sparse, double min_expected,
                       bool two_samples) {
  std::vector<Cell> out;
  Cell other;
  bool have_other = false;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!sparse[i]) {
      out.push_back(cells[i]);
      continue;
    }
    have_other = true;
    other.e_a += cells[i].e_a;
    other.o_a += cells[i].o_a;
    other.e_b += cells[i].e_b;
    other.o_b += cells[i].o_b;
    other.key += cells[i].key;
  }
  if (!have_other) return out;
  const double other_min = two_samples ? std::min(other.e_a, other.e_b) : other.e_a;
  if (other_min >= min_expected || out.empty()) {
    out.push_back(other);
    return out;
  }
  auto smallest = std::min_element(out.begin(), out.end(), [](const Cell& x, const Cell& y) { return x.key < y.key; });
  smallest->e_a += other.e_a;
  smallest->o_a += other.o_a;
  smallest->e_b += other.e_b;
  smallest->o_b += other.o_b;
  smallest->key += other.key;
  return out;
}

double pearson_term(double o, double e) { return e > 0.0 ? (o - e) * (o - e) / e : 0.0; }
double g_term(double o, double e) { return o > 0.0 ? 2.0 * o * std::log(o / e) : 0.0; }

void finish_p_values(TestStatistics& r) {
  r.dof = std::max<int64_t>(0, r.cells - 1);
  if (std::isinf(r.statistic)) {
    r.p_value = 0.0;
    r.g_p_value = 0.0;
    return;
  }
  // G can come out a hair below 0 through rounding when O == E everywhere.
  r.g_statistic = std::max(0.0, r.g_statistic);
  r.p_value = r.dof > 0 ? chi_square_sf(r.statistic, static_cast<double>(r.dof)) : 1.0;
  r.g_p_value = r.dof > 0 ? chi_square_sf(r.g_statistic, static_cast<double>(r.dof)) : 1.0;
}

TestStatistics one_sample_core(const std::vector<Cell>& cells, const std::vector<bool>& sparse, int64_t impossible,
                               int64_t n, double min_expected, double delta) {
  TestStatistics r;
  r.n_a = n;
  const std::vector<Cell> pooled = pool(cells, sparse, min_expected, false);
  r.cells = static_cast<int64_t>(pooled.size());
  const double dn = static_cast<double>(n);
  for (const Cell& c : pooled) {
    r.statistic += pearson_term(c.o_a, c.e_a);
    r.g_statistic += g_term(c.o_a, c.e_a);
    r.tv += 0.5 * std::fabs(c.o_a / dn - c.e_a / dn);
  }
  if (impossible > 0) {
    r.statistic = std::numeric_limits<double>::infinity();
    r.g_statistic = std::numeric_limits<double>::infinity();
    r.tv += 0.5 * static_cast<double>(impossible) / dn;
    ++r.cells;  // the probability-0 cell that was observed
  }
  finish_p_values(r);
  r.tv_radius = 0.5 * bhc_l1_radius(std::max<int64_t>(1, r.cells), n, delta);
  return r;
}

void check_probability(double p, size_t i, const char* field) {
  if (!(p >= 0.0) || !std::isfinite(p))
    throw Error(ErrorKind::kBadInput,
                "expected finite probabilities >= 0, found " + num(p) + " at cell " + std::to_string(i), kSource, field);
}

void check_count(int64_t c, size_t i, const char* field) {
  if (c < 0)
    throw Error(ErrorKind::kBadInput, "expected counts >= 0, found " + std::to_string(c) + " at cell " + std::to_string(i),
                kSource, field);
}

}  // namespace

double bhc_l1_radius(int64_t cells, int64_t n, double delta) {
  if (cells < 1) throw Error(ErrorKind::kBadInput, "expected at least 1 cell, found " + std::to_string(cells), kSource, "cells");
  if (n < 1) throw Error(ErrorKind::kBadInput, "expected at least 1 draw, found " + std::to_string(n), kSource, "n");
  if (!(delta > 0.0 && delta < 1.0))
    throw Error(ErrorKind::kBadInput, "expected a confidence parameter delta in (0, 1), found " + num(delta), kSource,
                "delta");
  return std::sqrt(2.0 * (static_cast<double>(cells) * std::log(2.0) + std::log(1.0 / delta)) / static_cast<double>(n));
}

TestStatistics one_sample_test(const std::vector<int64_t>& observed, const std::vector<double>& probs,
                               double min_expected, double delta) {
  check_min_expected(min_expected);
  if (observed.empty() || observed.size() != probs.size())
    throw Error(ErrorKind::kBadInput,
                "expected equally many observed counts and probabilities (at least 1), found " +
                    std::to_string(observed.size()) + " and " + std::to_string(probs.size()),
                kSource, "probs");
  double p_sum = 0.0;
  int64_t n = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    check_probability(probs[i], i, "probs");
    check_count(observed[i], i, "observed");
    p_sum += probs[i];
    n += observed[i];
  }
  if (!(p_sum > 0.0)) throw Error(ErrorKind::kBadInput, "expected a positive probability sum, found " + num(p_sum), kSource, "probs");
  if (n == 0) throw Error(ErrorKind::kBadInput, "expected a positive total count, found 0", kSource, "observed");
  std::vector<Cell> cells;
  std::vector<bool> sparse;
  int64_t impossible = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) {
      impossible += observed[i];
      continue;
    }
    Cell c;
    c.e_a = static_cast<double>(n) * probs[i] / p_sum;
    c.o_a = static_cast<double>(observed[i]);
    c.key = c.e_a;
    cells.push_back(c);
    sparse.push_back(c.e_a < min_expected);
  }
  return one_sample_core(cells, sparse, impossible, n, min_expected, delta);
}

TestStatistics one_sample_test_pooled(const std::vector<int64_t>& observed, const std::vector<double>& probs,
                                      double pool_prob, int64_t pool_observed, int64_t impossible_observed,
                                      double min_expected, double delta) {
  check_min_expected(min_expected);
  if (observed.size() != probs.size())
    throw Error(ErrorKind::kBadInput,
                "expected equally many observed counts and probabilities, found " + std::to_string(observed.size()) +
                    " and " + std::to_string(probs.size()),
                kSource, "probs");
  check_probability(pool_prob, probs.size(), "pool_prob");
  check_count(pool_observed, probs.size(), "pool_observed");
  check_count(impossible_observed, probs.size() + 1, "impossible_observed");
  double p_sum = pool_prob;
  int64_t n = pool_observed + impossible_observed;
  for (size_t i = 0; i < probs.size(); ++i) {
    check_probability(probs[i], i, "probs");
    check_count(observed[i], i, "observed");
    p_sum += probs[i];
    n += observed[i];
  }
  if (std::fabs(p_sum - 1.0) > 1e-6)
    throw Error(ErrorKind::kBadInput, "expected probabilities summing to 1 (regular cells + pool), found " + num(p_sum),
                kSource, "probs");
  if (n == 0) throw Error(ErrorKind::kBadInput, "expected a positive total count, found 0", kSource, "observed");
  const double dn = static_cast<double>(n);
  std::vector<Cell> cells;
  std::vector<bool> sparse;
  int64_t impossible = impossible_observed;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) {
      impossible += observed[i];
      continue;
    }
    Cell c;
    c.e_a = dn * probs[i];
    c.o_a = static_cast<double>(observed[i]);
    c.key = c.e_a;
    cells.push_back(c);
    sparse.push_back(c.e_a < min_expected);
  }
  if (pool_prob > 0.0) {
    Cell c;
    c.e_a = dn * pool_prob;
    c.o_a = static_cast<double>(pool_observed);
    c.key = c.e_a;
    cells.push_back(c);
    sparse.push_back(true);  // joins (or is) the pooled "other" cell
  } else {
    impossible += pool_observed;
  }
  return one_sample_core(cells, sparse, impossible, n, min_expected, delta);
}

TestStatistics two_sample_test(const std::vector<int64_t>& a, const std::vector<int64_t>& b, double min_expected,
                               double delta) {
  check_min_expected(min_expected);
  if (a.size() != b.size())
    throw Error(ErrorKind::kBadInput,
                "expected equally many categories in both samples, found " + std::to_string(a.size()) + " and " +
                    std::to_string(b.size()),
                kSource, "b");
  int64_t n_a = 0, n_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    check_count(a[i], i, "a");
    check_count(b[i], i, "b");
    n_a += a[i];
    n_b += b[i];
  }
  if (n_a == 0 || n_b == 0)
    throw Error(ErrorKind::kBadInput,
                "expected two non-empty samples, found " + std::to_string(n_a) + " and " + std::to_string(n_b) + " draws",
                kSource, n_a == 0 ? "a" : "b");
  const double da = static_cast<double>(n_a), db = static_cast<double>(n_b), dn = da + db;
  std::vector<Cell> cells;
  std::vector<bool> sparse;
  for (size_t i = 0; i < a.size(); ++i) {
    const double c = static_cast<double>(a[i] + b[i]);
    if (c == 0.0) continue;
    Cell x;
    x.e_a = da * c / dn;
    x.e_b = db * c / dn;
    x.o_a = static_cast<double>(a[i]);
    x.o_b = static_cast<double>(b[i]);
    x.key = c;
    cells.push_back(x);
    sparse.push_back(std::min(x.e_a, x.e_b) < min_expected);
  }
  const std::vector<Cell> pooled = pool(cells, sparse, min_expected, true);
  TestStatistics r;
  r.n_a = n_a;
  r.n_b = n_b;
  r.cells = static_cast<int64_t>(pooled.size());
  for (const Cell& c : pooled) {
    r.statistic += pearson_term(c.o_a, c.e_a) + pearson_term(c.o_b, c.e_b);
    r.g_statistic += g_term(c.o_a, c.e_a) + g_term(c.o_b, c.e_b);
    r.tv += 0.5 * std::fabs(c.o_a / da - c.o_b / db);
  }
  finish_p_values(r);
  const int64_t k = std::max<int64_t>(1, r.cells);
  r.tv_radius = 0.5 * (bhc_l1_radius(k, n_a, delta / 2.0) + bhc_l1_radius(k, n_b, delta / 2.0));
  return r;
}

std::vector<double> holm_adjust(const std::vector<double>& p_values) {
  const size_t m = p_values.size();
  for (size_t i = 0; i < m; ++i)
    if (!(p_values[i] >= 0.0 && p_values[i] <= 1.0))
      throw Error(ErrorKind::kBadInput, "expected p-values in [0, 1], found " + num(p_values[i]) + " at index " +
                                            std::to_string(i),
                  kSource, "p_values");
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p_values[x] < p_values[y]; });
  std::vector<double> adj(m);
  double running = 0.0;
  for (size_t j = 0; j < m; ++j) {
    const double v = std::min(1.0, static_cast<double>(m - j) * p_values[order[j]]);
    running = std::max(running, v);
    adj[order[j]] = running;
  }
  return adj;
}

}  // namespace speclab
