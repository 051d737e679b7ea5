#include "framework/equivalence/verifier_check.h"

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/verify/faulty_acceptance.h"

namespace speclab {

namespace {

const char* const kSource = "verifier check";

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw Error(ErrorKind::kBadInput, message, kSource, field);
}

// Inverse-CDF draw over a row's cumulative sums (the drafter's own sampling; binary search,
// so that the loop's cost is the verifier's).
Token draw_from_cdf(const std::vector<double>& cdf, Rng& rng) {
  const double u = rng.uniform() * cdf.back();
  const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
  return static_cast<Token>(std::min<std::ptrdiff_t>(it - cdf.begin(), static_cast<std::ptrdiff_t>(cdf.size()) - 1));
}

}  // namespace

VerifierChain make_verifier_chain(const std::vector<LogitPair>& pairs, const SamplingOptions& target,
                                  const DraftTransform& draft, int positions, int k, int classes) {
  if (pairs.empty()) bad("pairs", "expected at least one (target, draft) logit pair, found none");
  if (positions < 1 || k < 1 || classes < 1)
    bad("positions", "expected positions, k and classes >= 1, found " + std::to_string(positions) + ", " +
                         std::to_string(k) + ", " + std::to_string(classes));
  const size_t full = pairs[0].target.size();
  for (const LogitPair& lp : pairs)
    if (lp.target.size() != full || lp.draft.size() != full || full == 0)
      bad("pairs", "expected every logit row to have the same non-zero vocab " + std::to_string(full));
  VerifierChain c;
  c.positions = positions;
  c.table_positions = positions + k;
  c.classes = classes;
  const int64_t v = static_cast<int64_t>(full);
  std::vector<ChainRow> wide(static_cast<size_t>(c.table_positions * classes));
  std::vector<char> used(full, 0);
  for (size_t e = 0; e < wide.size(); ++e) {
    const LogitPair& lp = pairs[e % pairs.size()];
    ChainRow& r = wide[e];
    logits_to_probs(lp.target.data(), v, target, r.p);
    logits_to_probs(lp.draft.data(), v, draft.drawn, r.q_drawn);
    logits_to_probs(lp.draft.data(), v, draft.reported, r.q_report);
    for (size_t t = 0; t < full; ++t) {
      if (r.q_drawn[t] > 0.0f && !(r.q_report[t] > 0.0f))
        bad("draft", "the reported q is 0 at token " + std::to_string(t) + " where the drawn q is not: the verifier "
                     "would refuse that draft");
      used[t] |= r.p[t] > 0.0f || r.q_drawn[t] > 0.0f || r.q_report[t] > 0.0f;
    }
  }
  for (size_t t = 0; t < full; ++t)
    if (used[t]) c.token_ids.push_back(static_cast<Token>(t));
  c.vocab = static_cast<int64_t>(c.token_ids.size());
  auto compact = [&](const std::vector<float>& row) {
    std::vector<float> out(c.token_ids.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = row[static_cast<size_t>(c.token_ids[i])];
    return out;
  };
  c.rows.reserve(wide.size());
  for (const ChainRow& r : wide) c.rows.push_back({compact(r.p), compact(r.q_drawn), compact(r.q_report)});
  return c;
}

VerifierCounts run_verifier_chain(const VerifierChain& chain, int k, int64_t n, uint64_t seed,
                                  const RejectionRule& rule) {
  if (n < 1) bad("n", "expected n >= 1 draws, found " + std::to_string(n));
  if (k < 1 || k > chain.table_positions - chain.positions)
    bad("k", "expected 1 <= k <= " + std::to_string(chain.table_positions - chain.positions) + ", found " +
                 std::to_string(k));
  const int C = chain.classes;
  const size_t V = static_cast<size_t>(chain.vocab);
  // Rows are moved into the verifier's argument slots and back (no copy per step): a step
  // never uses one entry twice, since its slots have distinct positions.
  std::vector<ChainRow> store = chain.rows;
  std::vector<std::vector<double>> cdf(store.size());
  for (size_t e = 0; e < store.size(); ++e) {
    double s = 0.0;
    for (float x : store[e].q_drawn) cdf[e].push_back(s += x);
  }
  VerifierCounts out;
  out.k = k;
  out.n = n;
  out.counts.assign(static_cast<size_t>(chain.positions * C) * V, 0);
  Rng vrng = Rng::stream(seed, 0), drng = Rng::stream(seed, 1);
  TokenList draft(static_cast<size_t>(k));
  std::vector<std::vector<float>> p(static_cast<size_t>(k + 1)), q(static_cast<size_t>(k));
  std::vector<size_t> entry(static_cast<size_t>(k + 1));
  for (int64_t d = 0; d < n; ++d) {
    int pos = 0, cls = 0;
    while (pos < chain.positions) {
      for (int i = 0; i <= k; ++i) {
        entry[static_cast<size_t>(i)] = static_cast<size_t>((pos + i) * C + cls);
        if (i < k) {
          const Token x = draw_from_cdf(cdf[entry[static_cast<size_t>(i)]], drng);
          draft[static_cast<size_t>(i)] = x;
          cls = static_cast<int>(x % C);
        }
      }
      for (int i = 0; i <= k; ++i) {
        ChainRow& r = store[entry[static_cast<size_t>(i)]];
        std::swap(p[static_cast<size_t>(i)], r.p);
        if (i < k) std::swap(q[static_cast<size_t>(i)], r.q_report);
      }
      Verdict v;
      try {
        v = rule(draft, p, q, vrng);
      } catch (...) {
        for (int i = 0; i <= k; ++i) {
          ChainRow& r = store[entry[static_cast<size_t>(i)]];
          std::swap(p[static_cast<size_t>(i)], r.p);
          if (i < k) std::swap(q[static_cast<size_t>(i)], r.q_report);
        }
        throw;
      }
      for (int i = 0; i <= k; ++i) {
        ChainRow& r = store[entry[static_cast<size_t>(i)]];
        std::swap(p[static_cast<size_t>(i)], r.p);
        if (i < k) std::swap(q[static_cast<size_t>(i)], r.q_report);
      }
      out.drafted += k;
      out.accepted += v.n_accepted;
      out.steps += 1;
      // Emit draft[0..n_accepted) then next_token; the class of each is its predecessor's.
      int c = static_cast<int>(entry[0] % static_cast<size_t>(C));
      for (int i = 0; i <= v.n_accepted && pos < chain.positions; ++i, ++pos) {
        const Token y = i < v.n_accepted ? draft[static_cast<size_t>(i)] : v.next_token;
        if (y < 0 || static_cast<size_t>(y) >= V) bad("rule", "the rule emitted token " + std::to_string(y) + " outside the vocab");
        out.counts[(static_cast<size_t>(pos * C + c)) * V + static_cast<size_t>(y)] += 1;
        if (i == v.n_accepted) (v.bonus ? out.bonus : out.recovered) += 1;
        c = static_cast<int>(y % C);
      }
      if (pos >= chain.positions) break;
      cls = static_cast<int>(v.next_token % C);
    }
  }
  return out;
}

VerifierVerdict test_verifier_chain(const VerifierChain& chain, const VerifierCounts& counts, double delta,
                                    double min_expected) {
  const size_t V = static_cast<size_t>(chain.vocab);
  if (counts.counts.size() != static_cast<size_t>(chain.positions * chain.classes) * V)
    bad("counts", "expected counts of this chain's shape");
  VerifierVerdict out;
  bool first = true;
  for (int j = 0; j < chain.positions; ++j)
    for (int c = 0; c < (j == 0 ? 1 : chain.classes); ++c) {  // position 0 has class 0 only
      VerifierCellTest t;
      t.position = j;
      t.cls = c;
      const size_t at = static_cast<size_t>(j * chain.classes + c) * V;
      std::vector<int64_t> obs(counts.counts.begin() + static_cast<std::ptrdiff_t>(at),
                               counts.counts.begin() + static_cast<std::ptrdiff_t>(at + V));
      int64_t total = 0;
      for (int64_t o : obs) total += o;
      if (total > 0) {
        const std::vector<float>& p = chain.row(j, c).p;
        t.stats = one_sample_test(obs, std::vector<double>(p.begin(), p.end()), min_expected, delta);
      }
      if (total > 0 && t.stats.dof > 0) {
        ++out.tested;
        if (t.stats.p_value < out.min_p || out.worst_position < 0) {
          out.min_p = t.stats.p_value;
          out.worst_position = j;
          out.worst_class = c;
        }
        out.max_tv = std::max(out.max_tv, t.stats.tv);
        out.min_radius = first ? t.stats.tv_radius : std::min(out.min_radius, t.stats.tv_radius);
        out.max_radius = std::max(out.max_radius, t.stats.tv_radius);
        first = false;
      } else {
        ++out.vacuous;
      }
      out.tests.push_back(t);
    }
  out.p_bonferroni = out.tested > 0 ? std::min(1.0, out.min_p * static_cast<double>(out.tested)) : 1.0;
  return out;
}

std::vector<VerifierControl> verifier_controls(const SamplingOptions& sampling, int64_t drawn_top_k) {
  const DraftTransform same{sampling, sampling};
  std::vector<VerifierControl> out;
  out.push_back({"replacement_from_p", faulty::verify_replacement_from_p, same, true, ""});
  out.push_back({"bonus_from_row_k-1", faulty::verify_bonus_from_previous_row, same, true, ""});
  out.push_back({"always_accept", faulty::verify_always_accept, same, true, ""});
  {
    VerifierControl c{"q_at_temperature_1", verify_rejection, same, true, ""};
    c.draft.reported.temperature = 1.0;
    if (sampling.temperature == 1.0) {
      c.applicable = false;
      c.note = "temperature 1: the skipped warper changes nothing";
    } else if (sampling.temperature > 1.0 && sampling.top_p < 1.0) {
      c.applicable = false;
      c.note = "temperature > 1 with top_p < 1: the reported nucleus would miss drawn tokens";
    }
    out.push_back(std::move(c));
  }
  {
    VerifierControl c{"q_drawn_top_k", verify_rejection, same, true, ""};
    c.draft.drawn.top_k = drawn_top_k;
    if (sampling.top_k > 0 && sampling.top_k <= drawn_top_k) {
      c.applicable = false;
      c.note = "the run's top_k is already <= " + std::to_string(drawn_top_k);
    }
    out.push_back(std::move(c));
  }
  return out;
}

VerifierCellRow run_verifier_cell(const std::vector<LogitPair>& pairs, const std::string& draft,
                                  const SamplingOptions& sampling, int k, int64_t n, double delta, uint64_t seed) {
  const VerifierChain chain =
      make_verifier_chain(pairs, sampling, {sampling, sampling}, verifier_positions(k), k, kVerifierClasses);
  const VerifierCounts counts = run_verifier_chain(chain, k, n, seed, verify_rejection);
  VerifierCellRow row;
  row.draft = draft;
  row.sampling = sampling;
  row.k = k;
  row.n = n;
  row.vocab = chain.vocab;
  row.cells = reachable_cells(chain);
  row.recovered = counts.recovered;
  row.bonus = counts.bonus;
  row.acceptance = counts.drafted > 0 ? static_cast<double>(counts.accepted) / static_cast<double>(counts.drafted) : 0.0;
  row.verdict = test_verifier_chain(chain, counts, delta);
  row.verdict.tests.clear();
  return row;
}

void mark_control_for_cell(VerifierControl& control, const VerifierCellRow& cell) {
  if (!control.applicable || cell.verdict.tested > 0) return;
  control.applicable = false;
  control.note = "the lossless cell at this setting and draft length tests nothing (no (position, class) test has a "
                 "draw and a degree of freedom), which fails the check on its own";
}

VerifierControlRow run_verifier_control(const std::vector<LogitPair>& pairs, const std::string& draft,
                                        const SamplingOptions& sampling, const VerifierControl& control, int k,
                                        int64_t n_max, double control_alpha, uint64_t seed) {
  VerifierControlRow row;
  row.draft = draft;
  row.control = control.name;
  row.note = control.note;
  row.sampling = sampling;
  row.k = k;
  row.applicable = control.applicable;
  if (!control.applicable) return row;
  const VerifierChain chain =
      make_verifier_chain(pairs, sampling, control.draft, verifier_positions(k), k, kVerifierClasses);
  row.q_tv = 0.0;
  for (const ChainRow& r : chain.rows) {
    double tv = 0.0, sd = 0.0, sr = 0.0;
    for (size_t t = 0; t < r.q_drawn.size(); ++t) sd += r.q_drawn[t], sr += r.q_report[t];
    for (size_t t = 0; t < r.q_drawn.size(); ++t) tv += 0.5 * std::fabs(r.q_drawn[t] / sd - r.q_report[t] / sr);
    row.q_tv += tv / static_cast<double>(chain.rows.size());
  }
  const bool drafter_side = control.draft.drawn.temperature != control.draft.reported.temperature ||
                            control.draft.drawn.top_k != control.draft.reported.top_k ||
                            control.draft.drawn.top_p != control.draft.reported.top_p;
  if (drafter_side && row.q_tv < kMinControlQTv) {
    row.applicable = false;
    row.note = "q drawn and q reported differ by a mean TV of only " + std::to_string(row.q_tv) + " on these rows";
    return row;
  }
  for (int64_t n = std::min<int64_t>(1000, n_max);; n = std::min(2 * n, n_max)) {
    const VerifierCounts counts = run_verifier_chain(chain, k, n, seed, control.rule);
    row.p_bonferroni = test_verifier_chain(chain, counts, control_alpha).p_bonferroni;
    if (row.p_bonferroni < control_alpha) {
      row.caught = true;
      row.caught_n = n;
    }
    if (row.caught || n == n_max) break;
  }
  return row;
}

}  // namespace speclab
