#include "framework/equivalence/equivalence_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "framework/core/error.h"
#include "framework/equivalence/engine_controls.h"

namespace speclab {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void bad(const ExperimentConfig& cfg, const std::string& key, const std::string& message) {
  throw Error(ErrorKind::kConfig, message, cfg.source_path, "equivalence." + key);
}

}  // namespace


std::string sampling_label(const SamplingOptions& s) {
  return "T=" + fmt("%g", s.temperature) + " top_p=" + fmt("%g", s.top_p) + " top_k=" + std::to_string(s.top_k);
}

void EquivalenceRunOptions::validate() const {
  const std::string s = "equivalence run options";
  if (!(min_expected > 0.0) || !std::isfinite(min_expected))
    throw Error(ErrorKind::kConfig, "expected a finite min_expected > 0, found " + fmt("%g", min_expected), s, "min_expected");
  if (min_samples < 1)
    throw Error(ErrorKind::kConfig, "expected min_samples >= 1, found " + std::to_string(min_samples), s, "min_samples");
  if (power_start < 1)
    throw Error(ErrorKind::kConfig, "expected power_start >= 1, found " + std::to_string(power_start), s, "power_start");
  if (max_exact_prefixes < 1)
    throw Error(ErrorKind::kConfig, "expected max_exact_prefixes >= 1, found " + std::to_string(max_exact_prefixes), s,
                "max_exact_prefixes");
  for (int64_t o : analytic_offsets)
    if (o < 0) throw Error(ErrorKind::kConfig, "expected offsets >= 0, found " + std::to_string(o), s, "analytic_offsets");
}

void validate_equivalence_config(const ExperimentConfig& cfg, const std::vector<Prompt>& prompts,
                                 const EquivalenceRunOptions& options) {
  options.validate();
  if (!cfg.equivalence)
    throw Error(ErrorKind::kConfig,
                "expected an `equivalence` section (speclab check runs the checks it describes), found none",
                cfg.source_path, "equivalence");
  const EquivalenceOptions& eq = *cfg.equivalence;
  eq.validate();
  if (cfg.drafters.empty())
    throw Error(ErrorKind::kConfig, "expected at least one drafter to check, found none", cfg.source_path, "drafters");
  // What load_experiment_config(..., ConfigUse::kCheck) refuses, for a config built or loaded
  // otherwise: check drafts at each gamma without raising the cap.
  const int max_gamma = *std::max_element(eq.gammas.begin(), eq.gammas.end());
  for (size_t i = 0; i < cfg.drafters.size(); ++i)
    if (cfg.drafters[i].options.schedule == "heuristic" && cfg.drafters[i].options.max_speculative_tokens < max_gamma)
      throw Error(ErrorKind::kConfig,
                  "expected at least the largest draft length `speclab check` runs (" + std::to_string(max_gamma) +
                      ", of equivalence.gammas), found " + std::to_string(cfg.drafters[i].options.max_speculative_tokens),
                  cfg.source_path, "drafters[" + std::to_string(i) + "].max_speculative_tokens");
  if (prompts.empty())
    throw Error(ErrorKind::kConfig, "expected at least one prompt, found none", cfg.source_path, "prompts");
  // The checks decode one prompt at a time; a conversation's later turns are built from a run's own
  // answers, which speclab run does (experiments/app/prompt_render.h).
  for (const Prompt& p : prompts)
    if (!p.turns.empty())
      throw Error(ErrorKind::kConfig,
                  "expected one-message prompts for speclab check, found prompt '" + p.id + "', a conversation of " +
                      std::to_string(p.turns.size()) + " user turns (prompts.field names a list); name one turn "
                      "(field: turns.0), or run the conversation with speclab run",
                  cfg.source_path, "prompts.field");
  if (!eq.sampling) return;
  if (eq.samples < options.min_samples)
    bad(cfg, "samples",
        "expected at least " + std::to_string(options.min_samples) + " samples, found " + std::to_string(eq.samples) +
            ": cells whose expected count N·p is below " + fmt("%g", options.min_expected) +
            " are pooled (the chi-square approximation needs it), so with N = " + std::to_string(eq.samples) +
            " only tokens of probability >= " + fmt("%.3g", options.min_expected / static_cast<double>(eq.samples)) +
            " keep a cell of their own and nearly every cell of a joint of 2+ tokens is pooled: the test would "
            "compare little more than the most likely token. (This is a floor, not enough: the subtler negative "
            "controls, such as replacement_from_p and q_at_temperature_1, can stay uncaught at N = " +
            std::to_string(options.min_samples) + "; the shipped configs use 4000 or more)");
  if (eq.contexts > static_cast<int64_t>(prompts.size()))
    bad(cfg, "contexts",
        "expected at most " + std::to_string(prompts.size()) + " contexts (one per prompt), found " +
            std::to_string(eq.contexts));
  const int m_max = *std::max_element(eq.positions.begin(), eq.positions.end());
  if (m_max < 2)
    bad(cfg, "positions",
        "expected a position m >= 2 for the sampling check, found only m = 1: the first token is sampled from the "
        "prefill logits before any draft is verified, so position-1 tests see no verification (and no negative "
        "control can be caught there); add m = 2 or more, or set sampling: false");
  // A control listed by name must be able to run in some cell: one that the settings rule out
  // everywhere is n/a in every cell, and the check passed on the other controls' power, or on none.
  // Judged from the settings alone, as if every drafter supplied draft logits; a drafter that
  // supplies none is found when the cells have run (finalize_sampling_verdict).
  if (eq.negative_controls)
    for (const std::string& name : eq.controls) {
      std::string reason;
      bool runs = false;
      for (double t : eq.temperatures)
        for (double p : eq.top_ps)
          for (int64_t k : eq.top_ks)
            for (int g : eq.gammas) {
              SamplingOptions s;
              s.temperature = t;
              s.top_p = p;
              s.top_k = k;
              const std::string why = engine_control_skip_reason(name, s, DrafterSampling{true, true, true}, g, m_max);
              runs = runs || why.empty();
              if (reason.empty()) reason = why;
            }
      if (!runs)
        bad(cfg, "controls",
            "expected controls that can run in some cell, found " + name + ", which no setting here exercises (" +
                reason + "): it would pass by never running; add a setting where it applies, or remove it");
    }
}

void finalize_sampling_verdict(EquivalenceReport& r) {
  // The Holm family: every lossless test (subject ar or speculative), position 1 included, so that
  // the check as a whole rejects a lossless engine with probability at most alpha. (Until
  // 2026-12-05 tests of position 1 alone, the prefill's sample, were a second family at the same
  // alpha: up to 2 alpha in all. They are a few tests beside many, so they dilute little.)
  std::vector<size_t> family;
  // Idempotent: the lines of an earlier call are replaced.
  r.failures.erase(std::remove_if(r.failures.begin(), r.failures.end(),
                                  [](const std::string& f) { return f.rfind("sampling:", 0) == 0 || f.rfind("control:", 0) == 0; }),
                   r.failures.end());
  std::map<std::pair<int64_t, std::string>, int64_t> control_tests;  // (cell, control) -> tests
  for (size_t i = 0; i < r.tests.size(); ++i) {
    TestRow& t = r.tests[i];
    t.in_family = t.test.subject == "ar" || t.test.subject == "speculative";
    if (t.in_family)
      family.push_back(i);
    else
      control_tests[{t.cell, t.test.subject}] += 1;
  }
  std::vector<double> p;
  for (size_t i : family) p.push_back(r.tests[i].test.stats.p_value);
  const std::vector<double> adj = holm_adjust(p);
  r.family_size = static_cast<int64_t>(family.size());
  for (size_t j = 0; j < family.size(); ++j) {
    TestRow& t = r.tests[family[j]];
    t.holm_p = adj[j];
    t.reject = adj[j] < r.alpha;
  }
  // A control is caught where its Bonferroni test rejects at control_alpha AND the lossless family
  // would reject it too: its smallest p below Holm's first threshold, alpha / family_size.
  // control_alpha < alpha alone did not ensure that: at control_alpha 9e-4, 7 tests in a cell and a
  // family of 64, a control at min p 5e-5 counted as caught (5e-5 x 7 < 9e-4) while the lossless
  // tests, at 1e-3 / 64, would have passed the same bug (found by a probe, 2026-12-06).
  const auto catches = [&r](double min_p, int64_t tests) {
    return tests > 0 && min_p * static_cast<double>(tests) < r.control_alpha &&
           min_p * static_cast<double>(r.family_size) < r.alpha;
  };
  for (TestRow& t : r.tests) {
    if (t.in_family || t.test.subject == "ar" || t.test.subject == "speculative") continue;
    t.holm_p = t.test.stats.p_value;
    t.reject = catches(t.test.stats.p_value, control_tests[{t.cell, t.test.subject}]);
  }
  for (PowerRow& pw : r.power) pw.point.caught = catches(pw.point.min_p, pw.point.tests);
  for (SamplingCell& c : r.cells)
    for (ControlOutcome& o : c.controls) {
      o.caught = catches(o.min_p, o.tests);
      // The smallest grid N that catches it, and -1 where N itself does not (a chance catch at a
      // smaller N recorded one beside caught = 0).
      o.power_n = -1;
      if (o.caught)
        for (const PowerRow& pw : r.power)
          if (pw.cell == c.index && pw.control == o.name && pw.point.caught &&
              (o.power_n < 0 || pw.point.n < o.power_n))
            o.power_n = pw.point.n;
    }
  r.sampling_pass = true;
  for (SamplingCell& c : r.cells) {
    c.min_holm_p = 1.0;
    c.detectable_tv = std::numeric_limits<double>::quiet_NaN();
    c.pass = true;
  }
  for (const TestRow& t : r.tests) {
    const bool lossless = t.test.subject == "ar" || t.test.subject == "speculative";
    if (!lossless) continue;
    if (t.cell >= 0) {
      SamplingCell& c = r.cells[static_cast<size_t>(t.cell)];
      c.min_holm_p = std::min(c.min_holm_p, t.holm_p);
      // The smallest TV a test at a verified position could see (position 1 alone is the prefill
      // sample: its radius, often the smallest, says nothing of verification).
      if (t.test.subject == "speculative" && t.test.m != 1 && t.test.stats.dof > 0 &&
          !(c.detectable_tv <= t.test.stats.tv_radius))
        c.detectable_tv = t.test.stats.tv_radius;
      if (t.reject) c.pass = false;
    }
    if (t.reject) {
      r.sampling_pass = false;
      const SamplingGroup& g = r.groups[static_cast<size_t>(t.group)];
      std::string where = "context " + g.prompt_id + ", " + sampling_label(g.sampling);
      if (t.cell >= 0) {
        const SamplingCell& c = r.cells[static_cast<size_t>(t.cell)];
        where += ", " + c.drafter + " gamma " + std::to_string(c.gamma);
      }
      r.failures.push_back("sampling: " + t.test.subject + " " + t.test.test + " m=" + std::to_string(t.test.m) +
                           (t.test.m == 1 ? " (position 1: the prefill sample)" : "") +
                           " rejects equality (Holm-adjusted p = " + fmt("%.3g", t.holm_p) + " < alpha " +
                           fmt("%g", r.alpha) + ") at " + where);
    }
  }
  // Its own notes (cell ... / control: ...) likewise; the others stay (a verifier setting not
  // run, positions short of a whole step: they were cleared here until 2026-12-06).
  r.notes.erase(std::remove_if(r.notes.begin(), r.notes.end(),
                               [](const std::string& n) { return n.rfind("cell ", 0) == 0 || n.rfind("control:", 0) == 0; }),
                r.notes.end());
  for (SamplingCell& c : r.cells) {
    bool any = false, testable = false;
    for (const TestRow& t : r.tests)
      if (t.cell == c.index && t.test.subject == "speculative") {
        any = true;
        testable = testable || t.test.stats.dof > 0;
      }
    if (std::isnan(c.acceptance_rate)) {  // no draft in this cell: it verified nothing
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      r.notes.push_back("cell " + std::to_string(c.index) + " (context " + g.prompt_id + ", " +
                        sampling_label(g.sampling) + ", " + c.drafter + " gamma " + std::to_string(c.gamma) +
                        "): the drafter proposed no tokens in any draw");
      continue;
    }
    if (any && !testable) {  // a cell that tests nothing is a failure, never a pass
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      r.sampling_pass = false;
      c.pass = false;  // (sampling_cells.pass read 1 beside this failure until 2026-12-06)
      r.failures.push_back("sampling: tests nothing: " "cell " + std::to_string(c.index) + " (context " + g.prompt_id + ", " +
                        sampling_label(g.sampling) + ", " + c.drafter + " gamma " + std::to_string(c.gamma) +
                        "): every test has 0 degrees of freedom (the target is (nearly) deterministic at the recorded "
                        "positions): it compares nothing; choose a context with an open continuation");
    } else if (any && c.group >= 0 && static_cast<size_t>(c.group) < r.groups.size() &&
               !r.groups[static_cast<size_t>(c.group)].verified_positions_vary) {
      // Degrees of freedom from position 1 alone (the prefill's sample) see no verification.
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      r.sampling_pass = false;
      c.pass = false;
      r.failures.push_back("sampling: tests nothing: cell " + std::to_string(c.index) + " (context " + g.prompt_id + ", " +
                           sampling_label(g.sampling) + ", " + c.drafter + " gamma " + std::to_string(c.gamma) +
                           "): after the first token no prefix of the AR draws is followed by two tokens often enough "
                           "to test, so the tests' degrees of freedom come from position 1, the prefill's sample, which "
                           "no verification touches. Either the target is (nearly) deterministic there (choose a "
                           "context with an open continuation, or a higher temperature), or the draws spread over so "
                           "many prefixes that none recurs at this N (at a high temperature: more samples, or a lower "
                           "temperature)");
    }
  }
  // A drafter that proposed no tokens in any cell was never verified: the check says nothing of it.
  std::map<std::string, bool> drafted;
  for (const SamplingCell& c : r.cells) drafted[c.drafter] = drafted[c.drafter] || !std::isnan(c.acceptance_rate);
  for (const auto& [name, any] : drafted)
    if (!any) {
      r.sampling_pass = false;
      r.failures.push_back("sampling: tests nothing: drafter " + name +
                           " proposed no tokens in any draw of any cell, so none of its drafts was verified; choose "
                           "contexts it drafts on (prompt_lookup needs a repeated n-gram)");
    }
  r.controls_pass = true;
  // A control that ran in no cell showed no power: listed by name, that fails the check (the
  // settings were checked up front, so here it is the drafters: e.g. a drafter-side control with
  // only deterministic drafters); from the default list it is noted. No control in any cell fails.
  // name -> the cells' distinct reasons, "; "-joined (the first cell's alone named top_p = 1 where
  // the top_p 0.9 cell's reason was the drafter's missing logits)
  std::map<std::string, std::string> never_ran;
  bool any_ran = false;
  for (const std::string& name : r.control_names) never_ran[name] = "";
  for (const SamplingCell& c : r.cells)
    for (const ControlOutcome& o : c.controls) {
      if (o.applicable) {
        never_ran.erase(o.name);
        any_ran = true;
      } else if (never_ran.count(o.name) && !o.note.empty() &&
                 ("; " + never_ran[o.name] + "; ").find("; " + o.note + "; ") == std::string::npos) {
        never_ran[o.name] += (never_ran[o.name].empty() ? "" : "; ") + o.note;
      }
    }
  if (!r.control_names.empty() && !r.cells.empty()) {
    if (!any_ran) {
      r.controls_pass = false;
      r.failures.push_back("control: no negative control could run in any cell, so the sampling tests showed no power "
                           "to detect a wrong acceptance rule; add settings where one applies (docs/equivalence.md, "
                           "section 4)");
    }
    for (const std::string& name : r.control_names) {
      if (!never_ran.count(name)) continue;
      const std::string line = "control: " + name + " ran in no cell (" +
                               (never_ran[name].empty() ? std::string("not applicable") : never_ran[name]) +
                               "): the check shows no power against it";
      if (r.controls_listed) {
        r.controls_pass = false;
        r.failures.push_back(line + "; add a drafter or setting where it applies, or remove it from equivalence.controls");
      } else {
        r.notes.push_back(line);
      }
    }
  }
  for (const SamplingCell& c : r.cells) {
    for (const ControlOutcome& oc : c.controls) {
      const ControlOutcome* o = &oc;
      if (!o->applicable || o->caught) continue;
      r.controls_pass = false;
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      r.failures.push_back("control: " + o->name + " NOT caught at N = " + std::to_string(c.n) +
                           " (min p = " + fmt("%.3g", o->min_p) + " over " + std::to_string(o->tests) +
                           " tests; needs p x tests < " + fmt("%g", r.control_alpha) + " and p x " +
                           std::to_string(r.family_size) + " lossless tests < alpha " + fmt("%g", r.alpha) +
                           ") at context " + g.prompt_id +
                           ", " + sampling_label(g.sampling) + ", " + c.drafter + " gamma " + std::to_string(c.gamma));
    }
  }
}

void finalize_verifier_verdict(EquivalenceReport& r) {
  std::vector<double> ps;
  for (const VerifierCellRow& c : r.verifier) ps.push_back(c.verdict.p_bonferroni);
  const std::vector<double> holm = holm_adjust(ps);
  r.verifier_pass = true;
  if (r.ran_verifier && r.verifier.empty()) {  // asked for and nothing ran: a vacuous pass otherwise
    r.verifier_pass = false;
    r.failures.push_back("verifier: no cell ran (see the notes: e.g. a large vocabulary needs a top_k among the "
                         "sampling settings); add one, or set equivalence.verifier: false");
  }
  for (size_t i = 0; i < r.verifier.size(); ++i) {
    VerifierCellRow& c = r.verifier[i];
    c.holm_p = holm[i];
    const std::string where = c.draft + ", " + sampling_label(c.sampling) + ", k = " + std::to_string(c.k);
    if (c.verdict.tested == 0) {
      r.verifier_pass = false;
      // Two causes, as the sampling check names them: it named the first alone, and at T = 100 over
      // 512 tokens sent the user to a lower temperature where more samples were needed (until 2026-12-07).
      r.failures.push_back("verifier: " + where + ": no (position, class) test has a draw and a degree of freedom; "
                           "the cell tests nothing. Either the target rows are (nearly) deterministic at this setting "
                           "(a higher temperature, or no top_k/top_p cut), or the draws spread over so many tokens "
                           "that every class is pooled into one at this N (a high temperature over a large "
                           "vocabulary: more verifier_samples, or a lower temperature)");
    } else if (c.holm_p < r.alpha) {
      r.verifier_pass = false;
      r.failures.push_back("verifier: " + where + ": the real verifier's output differs from the target's law (Holm p " +
                           fmt("%.3g", c.holm_p) + " < alpha " + fmt("%g", r.alpha) + ", worst at position " +
                           std::to_string(c.verdict.worst_position) + ")");
    }
  }
  for (const VerifierControlRow& c : r.verifier_controls) {
    if (!c.applicable || c.caught) continue;
    r.verifier_pass = false;
    r.failures.push_back("verifier control: " + c.control + " NOT caught at N = " + std::to_string(r.verifier.empty() ? 0 : r.verifier[0].n) +
                         " (" + c.draft + ", " + sampling_label(c.sampling) + ", k = " + std::to_string(c.k) +
                         ", Bonferroni p " + fmt("%.3g", c.p_bonferroni) + ")");
  }
}

std::string format_equivalence_report(const EquivalenceReport& r) {
  std::ostringstream os;
  char buf[512];
  os << "equivalence check: " << r.name << "\n";
  if (r.ran_greedy) {
    int64_t match = 0, numerical = 0, bug = 0;
    for (const GreedyRow& g : r.greedy) {
      match += g.check.classification == "match";
      numerical += g.check.classification == "numerical";
      bug += g.check.classification == "bug";
    }
    double worst_diff = 0.0;
    for (const GreedyRow& g : r.greedy) worst_diff = std::max(worst_diff, g.check.max_logit_diff);
    os << "\n[1] greedy exactness: " << r.greedy.size() << " runs (prompt x drafter x gamma): " << match
       << " identical, " << numerical << " numerical divergences, " << bug << " bugs; max |AR - verification logit| "
       << "over shared positions " << fmt("%.3g", worst_diff) << "\n";
    bool header = false;
    for (const GreedyRow& g : r.greedy) {
      if (g.check.match) continue;
      if (!header) {
        std::snprintf(buf, sizeof buf, "  %-16s %-18s %5s %9s %11s %13s %10s  %s\n", "prompt", "drafter", "gamma",
                      "first_div", "margin_ar", "margin_verify", "tolerance", "class");
        os << buf;
        header = true;
      }
      std::snprintf(buf, sizeof buf, "  %-16s %-18s %5d %9lld %11.3g %13.3g %10.3g  %s\n", g.prompt_id.c_str(),
                    g.drafter.c_str(), g.gamma, static_cast<long long>(g.check.first_divergence), g.check.margin_ar,
                    g.check.margin_verify, g.check.tolerance, g.check.classification.c_str());
      os << buf;
    }
  }
  if (r.ran_analytic) {
    double det = 0.0, aa = 0.0, tp = 0.0, lossless = 0.0;
    bool tp_ran = false;  // the top-p-on-p-only rule differs only under a top-p cut (NaN rows elsewhere)
    for (const AnalyticRow& a : r.analytic) {
      lossless = std::max(lossless, a.errors.lossless);
      det = std::max(det, a.errors.deterministic);
      aa = std::max(aa, a.errors.always_accept);
      if (!std::isnan(a.errors.top_p_on_p_only)) {
        tp = std::max(tp, a.errors.top_p_on_p_only);
        tp_ran = true;
      }
    }
    os << "\n[2] analytic, closed form (enumerates a copy of the theorem: checks the formula, not the engine): " << r.analytic.size()
       << " (context x draft x sampling) rows; max |P(out) - p|: lossless rule " << fmt("%.3g", lossless)
       << ", deterministic draft " << fmt("%.3g", det) << " (tolerance " << fmt("%g", kAnalyticTolerance)
       << "); faulty rules on the same p, q: always-accept " << fmt("%.3g", aa) << ", top-p-on-p-only "
       << (tp_ran ? fmt("%.3g", tp) : std::string("n/a (no top_p below 1)")) << "\n";
  }
  if (r.ran_verifier) {
    os << "\n[2b] verifier check (Monte Carlo: the REAL verify_rejection + Rng on real (p, q) rows, multi-step chains, "
          "every emitted position incl. recovered and bonus tokens vs the exact target law; per (position, prefix class) "
          "Pearson tests, Bonferroni within a cell, Holm over " << r.verifier.size() << " cells at alpha "
       << fmt("%g", r.alpha) << "; TV radius at alpha / " << r.verifier_family << " tests)\n";
    std::snprintf(buf, sizeof buf, "  %-18s %-26s %3s %9s %5s %5s %6s %6s %9s %9s %9s %17s\n", "draft", "sampling", "k", "N",
                  "vocab", "tests", "void", "acc", "bonus", "p", "holm_p", "detectable TV");
    os << buf;
    for (const VerifierCellRow& c : r.verifier) {
      std::snprintf(buf, sizeof buf, "  %-18s %-26s %3d %9lld %5lld %5lld %6lld %6.2f %9lld %9.3g %9.3g %8.4f..%-8.4f%s\n",
                    c.draft.c_str(), sampling_label(c.sampling).c_str(), c.k, static_cast<long long>(c.n),
                    static_cast<long long>(c.vocab), static_cast<long long>(c.verdict.tested),
                    static_cast<long long>(c.verdict.vacuous), c.acceptance, static_cast<long long>(c.bonus),
                    c.verdict.p_bonferroni, c.holm_p, c.verdict.min_radius, c.verdict.max_radius,
                    c.holm_p < r.alpha || c.verdict.tested == 0 ? "  FAIL" : "");
      os << buf;
    }
    os << "  negative controls of the verifier check (smallest N on the grid 1000, 2000, ... at which p x tests < "
       << fmt("%g", r.control_alpha) << "):\n";
    for (const VerifierControlRow& c : r.verifier_controls) {
      std::snprintf(buf, sizeof buf, "  %-18s %-26s %3d %-20s %s\n", c.draft.c_str(), sampling_label(c.sampling).c_str(), c.k,
                    c.control.c_str(),
                    !c.applicable ? ("n/a (" + c.note + ")").c_str()
                    : c.caught    ? ("caught at N = " + std::to_string(c.caught_n) + (c.q_tv > 0.0 ? fmt(" (q TV %.3g)", c.q_tv) : "")).c_str()
                                  : ("MISSED (p " + fmt("%.3g", c.p_bonferroni) + fmt(", q TV %.3g)", c.q_tv)).c_str());
      os << buf;
    }
  }
  if (r.ran_sampling) {
    std::string pos;
    for (int m : r.positions) pos += (pos.empty() ? "" : ",") + std::to_string(m);
    os << "\n[3] sampling: N = " << r.samples << " draws per subject, positions m = " << pos
       << "; Pearson chi-square (cells with expected count < " << fmt("%g", r.min_expected)
       << " pooled), G and TV reported;\n    Holm-Bonferroni over " << r.family_size
       << " tests of the lossless engines (AR exact + speculative), family-wise alpha " << fmt("%g", r.alpha)
       << ";\n    position 1 is the prefill sample, before verification: its tests are marked p1 (in the family; "
          "they see no verifier)\n";
    std::snprintf(buf, sizeof buf, "  %4s %-12s %-26s %-18s %5s %6s  %-11s %-9s %2s %10s %5s %9s %9s %15s\n", "cell",
                  "context", "sampling", "drafter", "gamma", "acc", "subject", "test", "m", "X2", "dof", "p", "holm_p",
                  "TV +- radius");
    os << buf;
    for (const TestRow& t : r.tests) {
      if (t.test.subject != "ar" && t.test.subject != "speculative") continue;
      const SamplingGroup& g = r.groups[static_cast<size_t>(t.group)];
      std::string drafter = "-", gamma = "-", acc = "-", cell = "-";
      if (t.cell >= 0) {
        const SamplingCell& c = r.cells[static_cast<size_t>(t.cell)];
        drafter = c.drafter;
        gamma = std::to_string(c.gamma);
        acc = std::isnan(c.acceptance_rate) ? "-" : fmt("%.2f", c.acceptance_rate);
        cell = std::to_string(c.index);
      }
      std::snprintf(buf, sizeof buf, "  %4s %-12s %-26s %-18s %5s %6s  %-11s %-9s %2d %10.2f %5lld %9.3g %9.3g %7.4f+-%.4f%s\n",
                    cell.c_str(), g.prompt_id.c_str(), sampling_label(g.sampling).c_str(), drafter.c_str(),
                    gamma.c_str(), acc.c_str(), t.test.subject.c_str(), t.test.test.c_str(), t.test.m,
                    t.test.stats.statistic, static_cast<long long>(t.test.stats.dof), t.test.stats.p_value, t.holm_p,
                    t.test.stats.tv, t.test.stats.tv_radius,
                    (std::string(t.test.m == 1 ? "  p1" : "") + (t.reject ? "  REJECT" : "")).c_str());
      os << buf;
    }
    os << "\n[4] negative controls (same engine, same N; caught when min p x tests < " << fmt("%g", r.control_alpha)
       << " and min p x " << r.family_size << " < alpha " << fmt("%g", r.alpha) << "; power = smallest N on the grid 250, 500, ... at which it is caught)\n";
    std::snprintf(buf, sizeof buf, "  %4s %-18s %5s %-26s  %-21s %s\n", "cell", "drafter", "gamma", "sampling",
                  "control", "min p / caught / power N");
    os << buf;
    auto describe = [](const ControlOutcome& o) {
      std::string tv = std::isnan(o.q_tv) ? "" : ", q TV " + fmt("%.3g", o.q_tv);
      if (!o.applicable) return "n/a (" + o.note + (o.note.find("TV") == std::string::npos ? tv : "") + ")";
      return fmt("%.3g", o.min_p) + " / " + (o.caught ? "caught" : "MISSED") + " / " +
             (o.power_n > 0 ? std::to_string(o.power_n) : std::string("-")) + tv;
    };
    for (const SamplingCell& c : r.cells) {
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      std::snprintf(buf, sizeof buf, "  %4lld %-18s %5d %-26s  lossless: min Holm p %.3g, detectable TV %.4f\n",
                    static_cast<long long>(c.index), c.drafter.c_str(), c.gamma, sampling_label(g.sampling).c_str(),
                    c.min_holm_p, c.detectable_tv);
      os << buf;
      for (const ControlOutcome& o : c.controls) {
        std::snprintf(buf, sizeof buf, "  %4s %-18s %5s %-26s  %-21s %s\n", "", "", "", "", o.name.c_str(),
                      describe(o).c_str());
        os << buf;
      }
    }
  }
  os << "\nverdict: " << (r.pass() ? "PASS" : "FAIL");
  if (r.ran_greedy) os << "  greedy " << (r.greedy_pass ? "ok" : "FAIL");
  if (r.ran_analytic) os << "  analytic " << (r.analytic_pass ? "ok" : "FAIL");
  if (r.ran_verifier) os << "  verifier " << (r.verifier_pass ? "ok" : "FAIL");
  if (r.ran_sampling) os << "  sampling " << (r.sampling_pass ? "ok" : "FAIL") << "  controls "
                         << (r.controls_pass ? "ok" : "FAIL");
  os << "  (" << fmt("%.1f", r.seconds) << " s)\n";
  for (const std::string& f : r.failures) os << "  - " << f << "\n";
  for (const std::string& n : r.notes) os << "  note: " << n << "\n";
  return os.str();
}

}  // namespace speclab
