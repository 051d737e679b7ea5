#include "framework/io/experiment_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "framework/core/error.h"
#include "framework/core/printable_text.h"

namespace speclab {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double ratio(double num, double den) { return den > 0.0 ? num / den : kNaN; }

// steps_by_gamma: the steps' drafted counts (empty: none summarised).
void add_prediction(MethodSummary& m, const std::vector<int64_t>& steps_by_gamma) {
  m.predicted_speedup = steps_by_gamma.empty() ? leviathan_speedup(m.alpha.rate, m.gamma, m.cost_ratio)
                                               : leviathan_speedup_mixed(m.alpha.rate, steps_by_gamma, m.cost_ratio);
  m.efficiency = ratio(m.speedup, m.predicted_speedup);
}

std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string point_label(const std::map<std::string, std::string>& values, const std::vector<std::string>& order) {
  std::string out;
  std::set<std::string> done;
  for (const std::string& k : order) {
    const auto it = values.find(k);
    if (it == values.end() || !done.insert(k).second) continue;
    out += (out.empty() ? "" : ", ") + k + "=" + it->second;
  }
  for (const auto& kv : values)
    if (!done.count(kv.first)) out += (out.empty() ? "" : ", ") + kv.first + "=" + kv.second;
  return out;
}

Proportion wilson_interval(int64_t successes, int64_t trials, double z) {
  if (trials < 0 || successes < 0 || successes > trials)
    throw Error(ErrorKind::kBadInput, "expected 0 <= successes <= trials, found successes " + std::to_string(successes) +
                                          ", trials " + std::to_string(trials), "wilson_interval", "successes");
  if (!(z > 0.0)) throw Error(ErrorKind::kBadInput, "expected z > 0, found " + std::to_string(z), "wilson_interval", "z");
  Proportion p;
  p.successes = successes;
  p.trials = trials;
  if (trials == 0) {
    p.rate = p.lo = p.hi = kNaN;
    return p;
  }
  const double n = static_cast<double>(trials);
  const double ph = static_cast<double>(successes) / n;
  const double z2 = z * z;
  const double denom = 1.0 + z2 / n;
  const double center = (ph + z2 / (2.0 * n)) / denom;
  const double half = z * std::sqrt(ph * (1.0 - ph) / n + z2 / (4.0 * n * n)) / denom;
  p.rate = ph;
  p.lo = std::max(0.0, center - half);
  p.hi = std::min(1.0, center + half);
  return p;
}

double leviathan_speedup(double alpha, int64_t gamma, double c) {
  if (std::isnan(alpha) || std::isnan(c)) return kNaN;
  if (alpha < 0.0 || alpha > 1.0)
    throw Error(ErrorKind::kBadInput, "expected alpha in [0, 1], found " + std::to_string(alpha), "leviathan_speedup", "alpha");
  if (gamma < 0)
    throw Error(ErrorKind::kBadInput, "expected gamma >= 0, found " + std::to_string(gamma), "leviathan_speedup", "gamma");
  if (c < 0.0 || std::isinf(c))
    throw Error(ErrorKind::kBadInput, "expected finite c >= 0, found " + std::to_string(c), "leviathan_speedup", "c");
  // (1 - a^(g+1)) / (1 - a) = 1 + a + ... + a^g, exact at a = 1.
  double sum = 0.0, power = 1.0;
  for (int64_t i = 0; i <= gamma; ++i) {
    sum += power;
    power *= alpha;
  }
  return sum / (static_cast<double>(gamma) * c + 1.0);
}

double leviathan_speedup_mixed(double alpha, const std::vector<int64_t>& steps_by_gamma, double c) {
  if (std::isnan(leviathan_speedup(alpha, 0, c))) return kNaN;  // NaN in, NaN out; bad alpha or c throws
  double tokens = 0.0, time = 0.0;
  for (size_t k = 0; k < steps_by_gamma.size(); ++k) {
    const int64_t n = steps_by_gamma[k];
    if (n < 0)
      throw Error(ErrorKind::kBadInput, "expected step counts >= 0, found " + std::to_string(n) + " at gamma " +
                                            std::to_string(k), "leviathan_speedup_mixed", "steps_by_gamma");
    if (n == 0) continue;
    // leviathan_speedup(alpha, k, 0) = 1 + alpha + ... + alpha^k, the expected tokens of the step.
    tokens += static_cast<double>(n) * leviathan_speedup(alpha, static_cast<int64_t>(k), 0.0);
    time += static_cast<double>(n) * (static_cast<double>(k) * c + 1.0);
  }
  return time > 0.0 ? tokens / time : kNaN;
}

struct SummaryBuilder::Acc {
  MethodSummary m;
  bool labeled = false;
  int64_t examined = 0, emitted = 0, accept_prob_n = 0, ar_decode_forwards = 0;
  double accept_prob_sum = 0.0, draft_total = 0.0, ar_decode = 0.0;
  // Acceptance trials of the statistically distinct runs (independent_trials()): alpha's interval
  // and the positions' come from these.
  int64_t ci_accepted = 0, ci_examined = 0;
  std::vector<int64_t> pos_trials, pos_hits;
  std::vector<int64_t> steps_by_drafted;  // [k]: steps that drafted k tokens

  void add(const RunRecord& r) {
    if (!labeled) {
      m.drafter = r.drafter;
      m.gamma = r.gamma;
      labeled = true;
    }
    ++m.n_runs;
    m.draft_seconds += r.draft_seconds;
    m.verify_seconds += r.verify_seconds;
    m.accept_seconds += r.accept_seconds;
    m.kv_seconds += r.kv_seconds;
    m.other_seconds += r.other_seconds;
    if (r.lossless >= 0) {
      ++m.lossless_checked;
      if (r.lossless == 0) ++m.lossless_failed;
    }
    const bool independent = independent_trials(r);
    for (const StepRecord& s : r.steps) {
      ++m.n_steps;
      const size_t k = static_cast<size_t>(std::max<int32_t>(0, s.drafted));
      if (steps_by_drafted.size() <= k) steps_by_drafted.resize(k + 1, 0);
      ++steps_by_drafted[k];
      m.drafted += s.drafted;
      m.accepted += s.accepted;
      emitted += s.accepted + 1;
      examined += std::min(s.accepted + 1, s.drafted);
      draft_total += s.draft_seconds;
      for (float a : s.accept_prob)
        if (!std::isnan(a)) {
          accept_prob_sum += a;
          ++accept_prob_n;
        }
      if (!independent) continue;
      ci_accepted += s.accepted;
      ci_examined += std::min(s.accepted + 1, s.drafted);
      if (static_cast<int64_t>(pos_trials.size()) < s.drafted) {
        pos_trials.resize(static_cast<size_t>(s.drafted), 0);
        pos_hits.resize(static_cast<size_t>(s.drafted), 0);
      }
      for (int32_t i = 0; i < s.drafted && i <= s.accepted; ++i) {
        ++pos_trials[static_cast<size_t>(i)];
        if (i < s.accepted) ++pos_hits[static_cast<size_t>(i)];
      }
    }
  }

  MethodSummary result() const {
    MethodSummary out = m;
    out.examined = examined;
    out.alpha = wilson_interval(ci_accepted, ci_examined);
    for (size_t i = 0; i < pos_trials.size(); ++i)
      out.positions.push_back({static_cast<int64_t>(i), wilson_interval(pos_hits[i], pos_trials[i])});
    out.accepted_fraction = ratio(static_cast<double>(m.accepted), static_cast<double>(m.drafted));
    out.mean_accept_prob = ratio(accept_prob_sum, static_cast<double>(accept_prob_n));
    out.tau = ratio(static_cast<double>(emitted), static_cast<double>(m.n_steps));
    out.draft_seconds_per_token = ratio(draft_total, static_cast<double>(m.drafted));
    out.ar_seconds_per_token = ratio(ar_decode, static_cast<double>(ar_decode_forwards));
    out.cost_ratio = ratio(out.draft_seconds_per_token, out.ar_seconds_per_token);
    // Per decoded token on both sides: under sampling the two runs of a pair stop (at EOS) at
    // different lengths, and a ratio of total times would count the difference as speed. NaN
    // when either side decoded nothing after the prefill's token (a ratio of timer overheads).
    out.speedup = ratio(ratio(m.ar_wall_seconds, static_cast<double>(m.ar_decode_tokens)),
                        ratio(m.spec_wall_seconds, static_cast<double>(m.spec_decode_tokens)));
    out.lossless = m.lossless_checked == 0 ? -1 : (m.lossless_failed == 0 ? 1 : 0);
    add_prediction(out, steps_by_drafted);
    return out;
  }
};

SummaryBuilder::SummaryBuilder(std::vector<std::string> methods) : methods_(std::move(methods)) {}

SummaryBuilder::~SummaryBuilder() = default;

void SummaryBuilder::pair(const std::vector<Acc*>& accs, double spec_decode_wall, int64_t spec_decode_tokens,
                          const ArRun& ar) {
  // Decode phase: prompt processing (the target's prefill, a draft model's or EAGLE head's prefill) excluded.
  for (Acc* a : accs) {
    a->m.spec_wall_seconds += spec_decode_wall;
    a->m.ar_wall_seconds += ar.decode_wall;
    a->m.spec_decode_tokens += spec_decode_tokens;
    a->m.ar_decode_tokens += ar.decode_tokens;
    a->ar_decode += ar.decode_seconds;
    a->ar_decode_forwards += ar.forwards;
  }
}

void SummaryBuilder::add(const RunRecord& r) {
  points_.insert(r.key.point);
  categories_.insert(r.category);
  if (std::find(methods_.begin(), methods_.end(), r.key.method) == methods_.end()) methods_.push_back(r.key.method);
  const Group g{r.key.point, r.key.prompt, r.key.repeat};
  if (r.key.method == kArMethod) {
    ArRun& ar = ar_[g];
    ar.decode_wall = r.wall_seconds - r.prefill_seconds;
    ar.decode_seconds = r.decode_seconds;
    ar.forwards = std::max<int64_t>(0, r.target_forwards - r.turns);
    ar.decode_tokens = std::max<int64_t>(0, r.n_generated - r.turns);
    auto it = pending_.find(g);
    if (it != pending_.end()) {
      for (const Pending& p : it->second) pair(p.accs, p.decode_wall, p.decode_tokens, ar);
      pending_.erase(it);
    }
    return;
  }
  std::vector<Acc*> accs;
  for (auto key : {std::make_tuple(r.key.point, r.key.method, 0, std::string()),
                   std::make_tuple(r.key.point, r.key.method, 1, r.category)}) {
    std::unique_ptr<Acc>& a = accs_[key];
    if (!a) a = std::make_unique<Acc>();
    a->add(r);
    accs.push_back(a.get());
  }
  const double decode_wall = r.wall_seconds - r.prefill_seconds;
  const int64_t decode_tokens = std::max<int64_t>(0, r.n_generated - r.turns);
  auto ar = ar_.find(g);
  if (ar != ar_.end())
    pair(accs, decode_wall, decode_tokens, ar->second);
  else
    pending_[g].push_back({accs, decode_wall, decode_tokens});
}

ExperimentSummary SummaryBuilder::finish(const std::vector<PointRecord>& points) const {
  std::set<int64_t> all = points_;
  for (const PointRecord& p : points) all.insert(p.index);
  ExperimentSummary out;
  auto emit = [&](std::vector<MethodSummary>& rows, int64_t point, const std::string& method, int by,
                  const std::string& category) {
    auto it = accs_.find(std::make_tuple(point, method, by, category));
    if (it == accs_.end()) return;
    MethodSummary m = it->second->result();
    m.point = point;
    m.method = method;
    m.category = category;
    rows.push_back(std::move(m));
  };
  for (int64_t point : all)
    for (const std::string& method : methods_) {
      if (method == kArMethod) continue;
      emit(out.overall, point, method, 0, "");
      for (const std::string& cat : categories_) emit(out.by_category, point, method, 1, cat);
    }
  return out;
}

ExperimentSummary summarize(const ExperimentData& data) {
  SummaryBuilder b(data.methods);
  for (const RunRecord& r : data.runs) b.add(r);
  return b.finish(data.points);
}

std::string format_summary_table(const std::vector<MethodSummary>& rows, const std::vector<PointRecord>& points) {
  bool with_category = false;
  for (const auto& m : rows) with_category = with_category || !m.category.empty();
  std::vector<std::string> header = {"point"};
  if (with_category) header.push_back("category");
  for (const char* h : {"drafter", "gamma", "alpha [95% CI]", "tau", "c", "speedup", "predicted", "efficiency", "lossless"})
    header.push_back(h);
  std::vector<std::vector<std::string>> table = {header};
  for (const auto& m : rows) {
    std::string point = "#" + std::to_string(m.point);
    for (const auto& p : points)
      if (p.index == m.point && !p.label.empty()) point += " " + p.label;
    // Text from the config and the prompt files, one printable line each (a category "a\nb" split
    // its row in two).
    std::vector<std::string> row = {one_line(point)};
    if (with_category) row.push_back(m.category.empty() ? "(none)" : one_line(m.category));
    row.push_back(one_line(m.method));
    row.push_back(std::to_string(m.gamma));
    // alpha counts greedy runs of repeat 0 only (experiment_summary.h): a shard (--shard) can hold
    // greedy runs of later repeats only, which drafted but are no trials.
    row.push_back(!std::isnan(m.alpha.rate) ? fmt("%.3f", m.alpha.rate) + " [" + fmt("%.3f", m.alpha.lo) + ", " +
                                                  fmt("%.3f", m.alpha.hi) + "]"
                  : m.drafted == 0 ? std::string("no drafts")
                                   : std::string("no trials (greedy repeats > 0 only)"));
    // Undefined figures (no trial, no decode step to time) print as n/a, as report.py does.
    const auto num = [](const char* f, double v) { return std::isnan(v) ? std::string("n/a") : fmt(f, v); };
    row.push_back(num("%.3f", m.tau));
    row.push_back(num("%.4f", m.cost_ratio));
    row.push_back(num("%.2fx", m.speedup));
    row.push_back(num("%.2fx", m.predicted_speedup));
    row.push_back(num("%.2f", m.efficiency));
    row.push_back(m.lossless == 1 ? "yes" : m.lossless == 0 ? "NO" : "n/a");
    table.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : table)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], display_width(row[i]));
  std::ostringstream os;
  for (const auto& row : table) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      // Text columns (point, category, drafter) left-aligned, numbers right-aligned.
      const bool left = i < (with_category ? 3u : 2u);
      const std::string pad(width[i] - display_width(row[i]), ' ');
      line += (i ? "  " : "") + (left ? row[i] + pad : pad + row[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  }
  return os.str();
}

}  // namespace speclab
