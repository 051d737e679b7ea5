#include "framework/equivalence/equivalence_runner.h"

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
#include "framework/draft/registry.h"
#include "framework/equivalence/model_taps.h"
#include "framework/io/prompt_render.h"
#include "framework/kv/kv_cache_manager.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"

namespace speclab {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kFrequencyTop = 30;  // tokens per (cell, position) in the frequency table

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string sampling_label(const SamplingOptions& s) {
  return "T=" + fmt("%g", s.temperature) + " top_p=" + fmt("%g", s.top_p) + " top_k=" + std::to_string(s.top_k);
}

struct Target {
  LoadedModel info;
  std::unique_ptr<LlamaModel> model;
};

// Independent seed stream per (context, sampling combo, drafter, gamma, subject).
uint64_t stream_id(std::initializer_list<int64_t> parts) {
  uint64_t h = 0x5eedc0de5eedc0deull;
  for (int64_t x : parts) {
    uint64_t st = h ^ static_cast<uint64_t>(x);
    h = splitmix64(st);
  }
  return h;
}

DrafterOptions with_gamma(DrafterOptions o, int gamma) {
  o.num_speculative_tokens = gamma;
  o.max_speculative_tokens = std::max(o.max_speculative_tokens, gamma);
  return o;
}

std::vector<int64_t> layer_skip_layers(const DrafterOptions& o, int64_t n_layers) {
  if (!o.draft_layers.empty()) return o.draft_layers;
  const int64_t first = o.draft_layers_first > 0 ? std::min(o.draft_layers_first, n_layers) : n_layers / 2;
  std::vector<int64_t> out;
  for (int64_t l = 0; l < first; ++l) out.push_back(l);
  return out;
}

bool provides_logits(const DrafterOptions& o) {
  return o.plugin.empty() && (o.name == "layer_skip" || o.name == "draft_model");
}

struct SamplingCombo {
  SamplingOptions s;
};

std::vector<SamplingCombo> combos(const EquivalenceOptions& eq) {
  std::vector<SamplingCombo> out;
  for (double t : eq.temperatures)
    for (double p : eq.top_ps)
      for (int64_t k : eq.top_ks) {
        SamplingCombo c;
        c.s.temperature = t;
        c.s.top_p = p;
        c.s.top_k = k;
        out.push_back(c);
      }
  return out;
}

void bad(const ExperimentConfig& cfg, const std::string& key, const std::string& message) {
  throw Error(ErrorKind::kConfig, message, cfg.source_path, "equivalence." + key);
}

}  // namespace

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
  if (prompts.empty())
    throw Error(ErrorKind::kConfig, "expected at least one prompt, found none", cfg.source_path, "prompts");
  if (!eq.sampling) return;
  for (double t : eq.temperatures)
    if (!(t > 0.0))
      bad(cfg, "temperatures",
          "expected temperatures > 0, found " + fmt("%g", t) +
              ": at temperature 0 both engines are deterministic, so a sampling check would compare one token "
              "sequence with itself; greedy decoding is checked by `greedy: true`");
  if (eq.samples < options.min_samples)
    bad(cfg, "samples",
        "expected at least " + std::to_string(options.min_samples) + " samples, found " + std::to_string(eq.samples) +
            ": cells whose expected count N·p is below " + fmt("%g", options.min_expected) +
            " are pooled (the chi-square approximation needs it), so with N = " + std::to_string(eq.samples) +
            " only tokens of probability >= " + fmt("%.3g", options.min_expected / static_cast<double>(eq.samples)) +
            " keep a cell of their own and nearly every cell of a joint of 2+ tokens is pooled: the test would "
            "compare little more than the most likely token, and the negative controls would go undetected");
  if (eq.contexts > static_cast<int64_t>(prompts.size()))
    bad(cfg, "contexts",
        "expected at most " + std::to_string(prompts.size()) + " contexts (one per prompt), found " +
            std::to_string(eq.contexts));
  const int m_max = *std::max_element(eq.positions.begin(), eq.positions.end());
  if (eq.negative_controls && m_max < 2)
    bad(cfg, "positions",
        "expected a position m >= 2 when negative_controls is on, found only m = 1: the first token is sampled from "
        "the prefill logits before any draft is verified, so no acceptance rule (faulty or not) can change it; add "
        "m = 2 or set negative_controls: false");
}

void finalize_sampling_verdict(EquivalenceReport& r) {
  std::vector<size_t> family;
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
  for (TestRow& t : r.tests) {
    if (t.in_family) continue;
    t.holm_p = t.test.stats.p_value;
    t.reject = t.test.stats.p_value * static_cast<double>(control_tests[{t.cell, t.test.subject}]) < r.control_alpha;
  }
  r.sampling_pass = true;
  for (SamplingCell& c : r.cells) {
    c.min_holm_p = 1.0;
    c.pass = true;
  }
  for (const TestRow& t : r.tests) {
    if (!t.in_family) continue;
    if (t.cell >= 0) {
      SamplingCell& c = r.cells[static_cast<size_t>(t.cell)];
      c.min_holm_p = std::min(c.min_holm_p, t.holm_p);
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
                           " rejects equality (Holm-adjusted p = " + fmt("%.3g", t.holm_p) + " < alpha " +
                           fmt("%g", r.alpha) + ") at " + where);
    }
  }
  r.notes.clear();
  for (const SamplingCell& c : r.cells) {
    bool any = false, testable = false;
    for (const TestRow& t : r.tests)
      if (t.cell == c.index && t.test.subject == "speculative") {
        any = true;
        testable = testable || t.test.stats.dof > 0;
      }
    if (any && !testable) {
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      r.notes.push_back("cell " + std::to_string(c.index) + " (context " + g.prompt_id + ", " +
                        sampling_label(g.sampling) + ", " + c.drafter + " gamma " + std::to_string(c.gamma) +
                        "): every test has 0 degrees of freedom (the target is (nearly) deterministic at the recorded "
                        "positions): it compares nothing; choose a context with an open continuation");
    }
  }
  r.controls_pass = true;
  for (const SamplingCell& c : r.cells) {
    const std::pair<const char*, const ControlOutcome*> controls[] = {{"always_accept", &c.always_accept},
                                                                      {"top_p_on_p_only", &c.top_p_on_p_only}};
    for (const auto& [name, o] : controls) {
      if (!o->applicable || o->caught) continue;
      r.controls_pass = false;
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      r.failures.push_back(std::string("control: ") + name + " NOT caught at N = " + std::to_string(c.n) +
                           " (min p = " + fmt("%.3g", o->min_p) + " over " + std::to_string(o->tests) +
                           " tests; needs p x tests < " + fmt("%g", r.control_alpha) + ") at context " + g.prompt_id +
                           ", " + sampling_label(g.sampling) + ", " + c.drafter + " gamma " + std::to_string(c.gamma));
    }
  }
}

EquivalenceReport run_equivalence(const ExperimentConfig& cfg, const EquivalenceRunOptions& options) {
  const auto t_start = Clock::now();
  auto progress = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  const std::vector<Prompt> prompts = load_prompts(cfg);
  validate_equivalence_config(cfg, prompts, options);
  const EquivalenceOptions& eq = *cfg.equivalence;

  EquivalenceReport rep;
  rep.name = cfg.name;
  rep.alpha = eq.alpha;
  rep.control_alpha = eq.control_alpha;
  rep.min_expected = options.min_expected;
  rep.samples = eq.samples;
  rep.positions = eq.positions;

  // Target, prompts, one KV manager shared by the target and every drafter.
  progress("loading " + cfg.models.target.path);
  Target target;
  target.info = load_model(cfg.models.target);
  target.model = std::make_unique<LlamaModel>(target.info);
  const Model& model = *target.model;
  const Tokenizer& tok = *target.info.tokenizer;
  const ModelConfig& mc = model.config();
  std::vector<TokenList> ids;
  for (const Prompt& p : prompts) {
    TokenList t = render_config_prompt(target.info, cfg, p);
    try {
      check_prompt_fits(t, mc);
    } catch (const Error& e) {
      throw Error(ErrorKind::kBadInput, "prompt '" + p.id + "': " + e.message(), cfg.source_path, "prompts");
    }
    ids.push_back(std::move(t));
  }
  KvCacheManager kv(cfg.kv);
  const PoolId pool = kv.add_pool(mc);
  DrafterEnv env;
  env.target = &model;
  env.kv = &kv;
  env.target_pool = pool;
  env.vocab_size = mc.vocab_size;
  DrafterRegistry registry = DrafterRegistry::with_builtins();
  std::vector<std::unique_ptr<Drafter>> drafters;
  for (const DrafterEntry& d : cfg.drafters) drafters.push_back(registry.create(d.options, env));
  const KvTarget kvt{&kv, pool};

  // 1. Greedy exactness.
  if (eq.greedy) {
    rep.ran_greedy = true;
    progress("greedy exactness: " + std::to_string(ids.size()) + " prompts x " + std::to_string(drafters.size()) +
             " drafters x " + std::to_string(eq.gammas.size()) + " gammas");
    for (size_t p = 0; p < ids.size(); ++p)
      for (size_t d = 0; d < drafters.size(); ++d)
        for (int gamma : eq.gammas) {
          GreedyRow row;
          row.prompt = static_cast<int64_t>(p);
          row.prompt_id = prompts[p].id;
          row.drafter = cfg.drafters[d].label;
          row.gamma = gamma;
          row.check = check_greedy(model, tok, ids[p], cfg.generation, *drafters[d],
                                   with_gamma(cfg.drafters[d].options, gamma), kvt, eq.numerical_margin);
          if (row.check.classification == "bug") {
            rep.greedy_pass = false;
            rep.failures.push_back("greedy: prompt " + row.prompt_id + ", " + row.drafter + " gamma " +
                                   std::to_string(gamma) + ": speculative output differs from AR at token " +
                                   std::to_string(row.check.first_divergence) + " (margins AR " +
                                   fmt("%.3g", row.check.margin_ar) + ", verification " +
                                   fmt("%.3g", row.check.margin_verify) + " > tolerance " +
                                   fmt("%.3g", row.check.tolerance) + ")");
          }
          rep.greedy.push_back(std::move(row));
        }
  }

  // 2. Analytic check of one verification step.
  const std::vector<SamplingCombo> sweep = combos(eq);
  if (eq.analytic) {
    rep.ran_analytic = true;
    struct Draft {
      std::string label;
      const Model* model = nullptr;
      std::vector<int64_t> layers;
      std::unique_ptr<LlamaModel> owned;
    };
    std::vector<Draft> drafts;
    for (const DrafterEntry& d : cfg.drafters) {
      if (!d.options.plugin.empty()) continue;
      if (d.options.name == "layer_skip") {
        Draft x;
        x.label = d.label;
        x.model = &model;
        x.layers = layer_skip_layers(d.options, mc.num_hidden_layers);
        drafts.push_back(std::move(x));
      } else if (d.options.name == "draft_model") {
        ModelSource src;
        src.path = d.options.draft_model;
        src.format = d.options.draft_model_format;
        LoadedModel loaded = load_model(src);
        Draft x;
        x.label = d.label;
        x.owned = std::make_unique<LlamaModel>(loaded);
        x.model = x.owned.get();
        drafts.push_back(std::move(x));
      }
    }
    if (drafts.empty()) {  // no model drafter configured: a layer_skip draft of the first half
      Draft x;
      x.model = &model;
      x.layers = layer_skip_layers(DrafterOptions{}, mc.num_hidden_layers);
      x.label = "layer_skip_first_" + std::to_string(x.layers.size()) + " (no model drafter configured)";
      drafts.push_back(std::move(x));
    }
    progress("analytic check: " + std::to_string(ids.size()) + " prompts x " +
             std::to_string(options.analytic_offsets.size()) + " context lengths x " + std::to_string(drafts.size()) +
             " drafts x " + std::to_string(sweep.size()) + " sampling settings");
    const int64_t max_off = options.analytic_offsets.empty()
                                ? 0
                                : *std::max_element(options.analytic_offsets.begin(), options.analytic_offsets.end());
    for (size_t p = 0; p < ids.size(); ++p) {
      TokenList cont;
      if (max_off > 0) {
        GenerationOptions gen;
        gen.max_new_tokens = max_off;
        gen.ignore_eos = true;
        cont = generate_ar(model, tok, ids[p], gen, SamplingOptions{}, KvMode::kCached, {}, kvt).tokens;
      }
      for (int64_t off : options.analytic_offsets) {
        if (off > static_cast<int64_t>(cont.size())) continue;
        TokenList context = ids[p];
        context.insert(context.end(), cont.begin(), cont.begin() + off);
        if (static_cast<int64_t>(context.size()) >= mc.max_position_embeddings) continue;
        const std::vector<float> tl = next_token_logits(model, context);
        for (const Draft& d : drafts) {
          const std::vector<float> dl = next_token_logits(*d.model, context, d.layers);
          for (const SamplingCombo& c : sweep) {
            AnalyticRow row;
            row.prompt = static_cast<int64_t>(p);
            row.prompt_id = prompts[p].id;
            row.context_len = static_cast<int64_t>(context.size());
            row.draft = d.label;
            row.sampling = c.s;
            row.errors = analytic_step_errors(tl.data(), dl.data(), mc.vocab_size, c.s);
            rep.analytic_max_error = std::max({rep.analytic_max_error, row.errors.lossless, row.errors.deterministic});
            rep.analytic.push_back(std::move(row));
          }
        }
      }
    }
    if (!(rep.analytic_max_error < kAnalyticTolerance)) {
      rep.analytic_pass = false;
      rep.failures.push_back("analytic: max |P(first token) - p| = " + fmt("%.3g", rep.analytic_max_error) +
                             " >= tolerance " + fmt("%g", kAnalyticTolerance));
    }
  }

  // 3 + 4. Empirical sampling check with negative controls.
  if (eq.sampling) {
    rep.ran_sampling = true;
    const int m_max = *std::max_element(eq.positions.begin(), eq.positions.end());
    std::vector<int> joints(eq.positions.begin(), eq.positions.end());
    std::sort(joints.begin(), joints.end());
    joints.erase(std::unique(joints.begin(), joints.end()), joints.end());
    std::vector<int> marginals;
    for (int pos = 1; pos <= m_max; ++pos)
      if (pos > 1 || std::find(joints.begin(), joints.end(), 1) == joints.end()) marginals.push_back(pos);
    const int64_t n = eq.samples;
    const double me = options.min_expected, delta = eq.alpha;
    const uint64_t base = cfg.sampling.seed;
    for (int64_t ci = 0; ci < eq.contexts; ++ci) {
      const TokenList& context = ids[static_cast<size_t>(ci)];
      PrefillMemo memo(model);
      NextTokenOracle oracle(model, context);
      for (size_t si = 0; si < sweep.size(); ++si) {
        const SamplingOptions& s = sweep[si].s;
        SamplingGroup g;
        g.index = static_cast<int64_t>(rep.groups.size());
        g.context = ci;
        g.prompt_id = prompts[static_cast<size_t>(ci)].id;
        g.sampling = s;
        g.n = n;
        DrawPlan plan;
        plan.context = context;
        plan.sampling = s;
        plan.m = m_max;
        plan.n = n;
        plan.seed_base = base;
        plan.stream = stream_id({ci, static_cast<int64_t>(si), -1, 0, 0});
        progress("sampling: context " + g.prompt_id + ", " + sampling_label(s) + ": " + std::to_string(n) + " AR draws");
        const Draws ar = draw_ar(memo, tok, plan, kvt);
        g.ar_seconds = ar.seconds;
        const ExactReference ref = exact_reference(oracle, s, n, me, options.max_exact_prefixes, m_max >= 2);
        g.exact_prefixes = static_cast<int64_t>(ref.prefixes.size());
        g.exact_covered = ref.has_joint ? ref.covered : kNaN;
        for (CellTest& t : compare_with_exact(ar, ref, "ar", n, me, delta)) {
          TestRow row;
          row.group = g.index;
          row.test = std::move(t);
          rep.tests.push_back(std::move(row));
        }
        rep.groups.push_back(g);
        auto tests_of = [&](const Draws& d, const std::string& name, int64_t at_n) {
          std::vector<CellTest> t = compare_with_ar(ar, d, name, joints, marginals, at_n, me, delta);
          std::vector<CellTest> e = compare_with_exact(d, ref, name, at_n, me, delta);
          t.insert(t.end(), e.begin(), e.end());
          return t;
        };

        for (size_t di = 0; di < drafters.size(); ++di)
          for (int gamma : eq.gammas) {
            const DrafterOptions dopts = with_gamma(cfg.drafters[di].options, gamma);
            SamplingCell cell;
            cell.index = static_cast<int64_t>(rep.cells.size());
            cell.group = g.index;
            cell.drafter = cfg.drafters[di].label;
            cell.gamma = gamma;
            cell.n = n;
            cell.seed_base = base;
            progress("  " + cell.drafter + " gamma " + std::to_string(gamma) + ": " + std::to_string(n) +
                     " speculative draws" + (eq.negative_controls ? " + negative controls" : ""));
            plan.stream = stream_id({ci, static_cast<int64_t>(si), static_cast<int64_t>(di), gamma, 1});
            const Draws spec = draw_speculative(memo, tok, plan, *drafters[di], dopts, kvt);
            cell.spec_seconds = spec.seconds;
            cell.acceptance_rate = spec.drafted > 0 ? static_cast<double>(spec.accepted) / spec.drafted : kNaN;
            for (CellTest& t : tests_of(spec, "speculative", n)) {
              TestRow row;
              row.group = g.index;
              row.cell = cell.index;
              row.test = std::move(t);
              rep.tests.push_back(std::move(row));
            }

            Draws controls[2];
            bool ran[2] = {false, false};
            ControlOutcome* outcome[2] = {&cell.always_accept, &cell.top_p_on_p_only};
            const char* names[2] = {"always_accept", "top_p_on_p_only"};
            if (!eq.negative_controls) {
              cell.always_accept.note = cell.top_p_on_p_only.note = "negative_controls: false";
            } else {
              plan.stream = stream_id({ci, static_cast<int64_t>(si), static_cast<int64_t>(di), gamma, 2});
              controls[0] = draw_speculative(memo, tok, plan, *drafters[di], dopts, kvt, always_accept_rule());
              ran[0] = true;
              if (controls[0].drafted == 0) cell.always_accept.note = "the drafter proposed no tokens";
              if (s.top_p >= 1.0) {
                cell.top_p_on_p_only.note = "top_p = 1: nothing to apply";
              } else if (!provides_logits(cfg.drafters[di].options)) {
                cell.top_p_on_p_only.note = "the drafter has no draft logits (not a model drafter)";
              } else {
                plan.stream = stream_id({ci, static_cast<int64_t>(si), static_cast<int64_t>(di), gamma, 3});
                controls[1] = draw_speculative(memo, tok, plan, *drafters[di], dopts, kvt, top_p_on_p_only_rule());
                ran[1] = true;
                if (controls[1].drafted == 0) cell.top_p_on_p_only.note = "the drafter proposed no tokens";
              }
            }
            for (int k = 0; k < 2; ++k) {
              if (!ran[k]) continue;
              ControlOutcome& o = *outcome[k];
              bool testable = false;  // some test has a degree of freedom
              for (CellTest& t : tests_of(controls[k], names[k], n)) {
                o.min_p = std::min(o.min_p, t.stats.p_value);
                ++o.tests;
                testable = testable || t.stats.dof > 0;
                TestRow row;
                row.group = g.index;
                row.cell = cell.index;
                row.test = std::move(t);
                rep.tests.push_back(std::move(row));
              }
              o.applicable = controls[k].drafted > 0 && testable;
              if (controls[k].drafted > 0 && !testable)
                o.note = "no test has a degree of freedom: the target is (nearly) deterministic at the recorded "
                         "positions, so no rule can change them";
              o.caught = o.tests > 0 && o.min_p * static_cast<double>(o.tests) < eq.control_alpha;
              const std::vector<PowerPoint> curve = power_curve(
                  std::min(options.power_start, n), n, eq.control_alpha,
                  [&](int64_t at_n) { return tests_of(controls[k], names[k], at_n); });
              for (const PowerPoint& pt : curve) {
                if (pt.caught && o.power_n < 0) o.power_n = pt.n;
                rep.power.push_back({cell.index, names[k], pt});
              }
            }

            // Frequencies of the most common tokens per position, for plots.
            for (int pos = 0; pos < m_max; ++pos) {
              const auto fa = position_counts(ar, pos, n), fs = position_counts(spec, pos, n);
              std::map<Token, int64_t> fc[2];
              for (int k = 0; k < 2; ++k)
                if (ran[k]) fc[k] = position_counts(controls[k], pos, n);
              std::map<Token, int64_t> total;
              for (const auto& [t, c] : fa) total[t] += c;
              for (const auto& [t, c] : fs) total[t] += c;
              for (int k = 0; k < 2; ++k)
                for (const auto& [t, c] : fc[k]) total[t] += c;
              std::vector<std::pair<int64_t, Token>> order;
              for (const auto& [t, c] : total) order.push_back({-c, t});
              std::sort(order.begin(), order.end());
              if (order.size() > kFrequencyTop) order.resize(kFrequencyTop);
              auto count = [](const std::map<Token, int64_t>& m, Token t) {
                auto it = m.find(t);
                return it == m.end() ? int64_t{0} : it->second;
              };
              for (const auto& [neg, t] : order) {
                FrequencyRow f;
                f.cell = cell.index;
                f.position = pos + 1;
                f.token = t;
                f.text = tok.token_text(t);
                f.ar = count(fa, t);
                f.speculative = count(fs, t);
                f.always_accept = ran[0] ? count(fc[0], t) : -1;
                f.top_p_on_p_only = ran[1] ? count(fc[1], t) : -1;
                if (pos == 0) {
                  f.exact = ref.p1[static_cast<size_t>(t)];
                } else if (pos == 1 && ref.has_joint && ref.covered >= 1.0 - 1e-12) {
                  double e = 0.0;
                  for (size_t j = 0; j < ref.prefixes.size(); ++j)
                    e += ref.p1[static_cast<size_t>(ref.prefixes[j])] * ref.p2[j][static_cast<size_t>(t)];
                  f.exact = e;
                } else {
                  f.exact = kNaN;
                }
                rep.frequencies.push_back(std::move(f));
              }
            }
            rep.cells.push_back(std::move(cell));
          }
      }
    }
    finalize_sampling_verdict(rep);
  }
  rep.seconds = since(t_start);
  return rep;
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
    for (const AnalyticRow& a : r.analytic) {
      lossless = std::max(lossless, a.errors.lossless);
      det = std::max(det, a.errors.deterministic);
      aa = std::max(aa, a.errors.always_accept);
      if (!std::isnan(a.errors.top_p_on_p_only)) tp = std::max(tp, a.errors.top_p_on_p_only);
    }
    os << "\n[2] analytic first-token distribution: " << r.analytic.size()
       << " (context x draft x sampling) rows; max |P(out) - p|: lossless rule " << fmt("%.3g", lossless)
       << ", deterministic draft " << fmt("%.3g", det) << " (tolerance " << fmt("%g", kAnalyticTolerance)
       << "); faulty rules on the same p, q: always-accept " << fmt("%.3g", aa) << ", top-p-on-p-only "
       << fmt("%.3g", tp) << "\n";
  }
  if (r.ran_sampling) {
    std::string pos;
    for (int m : r.positions) pos += (pos.empty() ? "" : ",") + std::to_string(m);
    os << "\n[3] sampling: N = " << r.samples << " draws per subject, positions m = " << pos
       << "; Pearson chi-square (cells with expected count < " << fmt("%g", r.min_expected)
       << " pooled), G and TV reported;\n    Holm-Bonferroni over " << r.family_size
       << " tests of the lossless engines (AR exact + speculative), family-wise alpha " << fmt("%g", r.alpha)
       << "; position 1 is the prefill sample, verification starts at position 2\n";
    std::snprintf(buf, sizeof buf, "  %4s %-12s %-26s %-18s %5s %6s  %-11s %-9s %2s %10s %5s %9s %9s %15s\n", "cell",
                  "context", "sampling", "drafter", "gamma", "acc", "subject", "test", "m", "X2", "dof", "p", "holm_p",
                  "TV +- radius");
    os << buf;
    for (const TestRow& t : r.tests) {
      if (!t.in_family) continue;
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
                    t.test.stats.tv, t.test.stats.tv_radius, t.reject ? "  REJECT" : "");
      os << buf;
    }
    os << "\n[4] negative controls (same engine, same N; caught when min p x tests < " << fmt("%g", r.control_alpha)
       << "; power = smallest N on the grid 250, 500, ... at which it is caught)\n";
    std::snprintf(buf, sizeof buf, "  %4s %-18s %5s %-26s  %-40s  %-40s\n", "cell", "drafter", "gamma", "sampling",
                  "always_accept: min p / caught / power N", "top_p_on_p_only: min p / caught / power N");
    os << buf;
    auto describe = [](const ControlOutcome& o) {
      if (!o.applicable) return "n/a (" + o.note + ")";
      return fmt("%.3g", o.min_p) + " / " + (o.caught ? "caught" : "MISSED") + " / " +
             (o.power_n > 0 ? std::to_string(o.power_n) : std::string("-"));
    };
    for (const SamplingCell& c : r.cells) {
      const SamplingGroup& g = r.groups[static_cast<size_t>(c.group)];
      std::snprintf(buf, sizeof buf, "  %4lld %-18s %5d %-26s  %-40s  %-40s\n", static_cast<long long>(c.index),
                    c.drafter.c_str(), c.gamma, sampling_label(g.sampling).c_str(), describe(c.always_accept).c_str(),
                    describe(c.top_p_on_p_only).c_str());
      os << buf;
    }
  }
  os << "\nverdict: " << (r.pass() ? "PASS" : "FAIL");
  if (r.ran_greedy) os << "  greedy " << (r.greedy_pass ? "ok" : "FAIL");
  if (r.ran_analytic) os << "  analytic " << (r.analytic_pass ? "ok" : "FAIL");
  if (r.ran_sampling) os << "  sampling " << (r.sampling_pass ? "ok" : "FAIL") << "  controls "
                         << (r.controls_pass ? "ok" : "FAIL");
  os << "  (" << fmt("%.1f", r.seconds) << " s)\n";
  for (const std::string& f : r.failures) os << "  - " << f << "\n";
  for (const std::string& n : r.notes) os << "  note: " << n << "\n";
  return os.str();
}

}  // namespace speclab
