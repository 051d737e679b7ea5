#include "experiments/app/equivalence_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "experiments/app/prompt_render.h"
#include "experiments/app/session_parts.h"
#include "framework/core/error.h"
#include "framework/draft/builtin/model_drafter.h"
#include "framework/draft/builtin/sources_first.h"
#include "framework/equivalence/engine_controls.h"
#include "framework/equivalence/model_taps.h"
#include "framework/sampling/logits_source.h"
#include "framework/sampling/sampling.h"

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

// Independent seed stream per (context, sampling combo, drafter, gamma, subject).
uint64_t stream_id(std::initializer_list<int64_t> parts) {
  uint64_t h = 0x5eedc0de5eedc0deull;
  for (int64_t x : parts) {
    uint64_t st = h ^ static_cast<uint64_t>(x);
    h = splitmix64(st);
  }
  return h;
}

// The (p, q) logit rows a drafter without a model of its own (eagle, a plugin) hands the
// verifier: one speculative step on `context` at temperature 1 (the first token sampled from the
// prefill, then the drafter's first draft row), captured by the acceptance rule, which then
// applies the lossless rule. Both rows are at the prefix context + [first token]. nullopt when
// the drafter supplied no draft logits at that step (a deterministic drafter, or no draft).
// probe, when given, is filled over a run of at least two steps: q_rows when a draft carried q
// rows (DraftBlock::probs: the drafter samples, with or without logits), draws when the drafter's
// stream moved between two proposals (it draws from the host's stream, as shared_draws needs; a
// plugin with a generator of its own does not).
struct DrafterProbe {
  bool q_rows = false, draws = false;
};
std::optional<LogitPair> drafter_step_rows(const Model& model, const TokenDecoder& tok, const TokenList& context,
                                           Drafter& drafter, const DrafterOptions& dopts, KvTarget kv,
                                           uint64_t seed, DrafterProbe* probe = nullptr) {
  std::optional<LogitPair> got;
  std::optional<double> last_stream;  // the first uniform of the drafter's stream at the last proposal
  AcceptanceRule capture{[&](const VerifyInputs& in) {
                           if (!got && !in.draft->tokens.empty() && !in.draft->logits.empty())
                             got = LogitPair{std::vector<float>(in.target_logits, in.target_logits + in.vocab),
                                             in.draft->logits[0]};
                           if (probe && !in.draft->tokens.empty() && !in.draft->probs.empty()) probe->q_rows = true;
                           if (probe && in.draft_rng_at_propose) {
                             Rng at = *in.draft_rng_at_propose;
                             const double u = at.uniform();
                             if (last_stream && *last_stream != u) probe->draws = true;
                             last_stream = u;
                           }
                           return lossless_acceptance(in);
                         },
                         /*needs_p_when_greedy=*/false, /*needs_draft_logits=*/true};
  GenerationOptions gen;
  // A step emits at most gamma + 1 tokens: the probe runs at least two.
  gen.max_new_tokens = 2 + (probe ? 3 : 1) * std::max(1, dopts.num_speculative_tokens);
  gen.ignore_eos = true;
  SamplingOptions s;
  s.temperature = 1.0;
  s.seed = seed;
  generate_speculative(model, tok, context, gen, s, drafter, dopts, kv, {}, capture);
  return got;
}

// A model's row of logits, checked before the analytic and verifier checks read it, so that a NaN
// names the model that produced it (framework/sampling/logits_source.h). row: [vocab].
std::vector<float> checked_logits(const std::string& source, std::vector<float> row) {
  naming_logits_source(source, [&] { check_logits(row.data(), static_cast<int64_t>(row.size())); });
  return row;
}

// The config was validated at these gammas (ConfigUse::kCheck): max_speculative_tokens >= gamma.
DrafterOptions with_gamma(DrafterOptions o, int gamma) {
  o.num_speculative_tokens = gamma;
  SPECLAB_CHECK(o.schedule != "heuristic" || o.max_speculative_tokens >= gamma,
                "check: a gamma above the heuristic drafter's max_speculative_tokens");
  return o;
}

// The draft model behind a drafter, when it has one (draft_model, layer_skip): what the analytic
// check and the top-p control need.
const ModelDrafter* model_drafter(const Drafter& d) { return dynamic_cast<const ModelDrafter*>(&d); }

// The drafter whose draft logits a drafter's blocks carry: the wrapped drafter behind
// prompt_lookup_first / retrieval_first (the sources' blocks have none), else the drafter itself.
// Deciding on the wrapper would depend on whether a lookup answered the trial step: where it
// did, the drafter-side controls were skipped as for a deterministic drafter, and the analytic
// and verifier checks tested a substitute draft.
Drafter& logits_drafter(Drafter& d) {
  if (auto* sf = dynamic_cast<SourcesFirstDrafter*>(&d)) return sf->fallback();
  return d;
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

}  // namespace

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
  if (eq.negative_controls) rep.control_names = eq.controls.empty() ? engine_control_names() : eq.controls;
  rep.controls_listed = eq.negative_controls && !eq.controls.empty();

  // Target, prompts, one KV manager shared by the target and every drafter.
  progress("loading " + cfg.models.target.path);
  const std::unique_ptr<LoadedTarget> target = [&] {
    try {  // the placement's errors (device, dtype) name the key that chose them
      return load_target(cfg.models.target);
    } catch (const Error& e) {
      throw in_config(e, "model", "models.target", cfg.source_path);
    }
  }();
  const Model& model = *target->model;
  const Tokenizer& tok = *target->info.tokenizer;
  const ModelConfig& mc = model.config();
  // A top_k at or above the vocabulary keeps every token: the same cells as top_k 0, run again
  // under another label (it was accepted silently).
  for (int64_t k : eq.top_ks)
    if (k >= mc.vocab_size)
      throw Error(ErrorKind::kConfig,
                  "expected top_k values below the model's vocabulary of " + std::to_string(mc.vocab_size) +
                      " tokens (0 = off), found " + std::to_string(k) + ": it keeps every token, as 0 does",
                  cfg.source_path, "equivalence.top_ks");
  std::vector<TokenList> ids;
  for (const Prompt& p : prompts) {
    TokenList t = render_config_prompt(target->info, cfg, p);
    try {
      check_prompt_fits(t, mc);
    } catch (const Error& e) {
      throw Error(ErrorKind::kBadInput, "prompt '" + p.id + "': " + e.message(), cfg.source_path, "prompts");
    }
    ids.push_back(std::move(t));
  }
  std::unique_ptr<SessionParts> parts_owner;
  try {
    parts_owner = std::make_unique<SessionParts>(*target, cfg.kv);
  } catch (const Error& e) {
    throw in_config(e, "kv", "kv", cfg.source_path);
  }
  SessionParts& parts = *parts_owner;
  if (eq.greedy)  // its AR runs decode generation.max_new_tokens (the sampling checks a few tokens)
    check_budget_holds_ar_runs(parts, ids, cfg.generation.max_new_tokens, mc.max_position_embeddings, cfg.source_path);
  std::vector<Drafter*> drafters;
  for (size_t i = 0; i < cfg.drafters.size(); ++i) {
    try {
      drafters.push_back(&parts.add_drafter(cfg.drafters[i].options));
    } catch (const Error& e) {
      throw in_config(e, "drafter", "drafters[" + std::to_string(i) + "]", cfg.source_path);
    }
  }
  // Every check begins many sequences on few prompts: drafters may keep their prompt state (a
  // draft model's prefill) as the target's prefill is memoized (PrefillMemo, below). Released
  // before `parts` goes.
  struct PromptReuse {
    const std::vector<Drafter*>& d;
    explicit PromptReuse(const std::vector<Drafter*>& x) : d(x) {
      for (Drafter* p : d) p->reuse_prompt_state(true);
    }
    ~PromptReuse() {
      for (Drafter* p : d) p->reuse_prompt_state(false);
    }
  } prompt_reuse(drafters);
  const KvTarget kvt = parts.kv_target();
  // Which drafters hand the verifier draft logits (model drafters; eagle and plugins that fill
  // DraftBlock::logits under sampling): the analytic and verifier rows and the drafter-side
  // controls need them.
  // Which report q rows without logits (a sampling plugin): q_at_temperature_1 and shared_draws
  // run on them too (engine_controls.h).
  std::vector<bool> has_logits(drafters.size(), false);
  std::vector<DrafterSampling> sampling_kind(drafters.size());
  for (size_t i = 0; i < drafters.size(); ++i) {
    DrafterProbe probe;
    has_logits[i] = model_drafter(logits_drafter(*drafters[i])) != nullptr ||
                    (!ids.empty() && drafter_step_rows(model, tok, ids[0], logits_drafter(*drafters[i]),
                                                       cfg.drafters[i].options, kvt, cfg.sampling.seed, &probe));
    sampling_kind[i] = DrafterSampling{has_logits[i], has_logits[i] || probe.q_rows, has_logits[i] || probe.draws};
  }

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
    // A drafter that proposed nothing in any greedy run was never verified: its "identical to AR"
    // says nothing of it (it read PASS; the sampling check already failed such a drafter).
    for (size_t d = 0; d < drafters.size(); ++d) {
      bool any = false;
      for (const GreedyRow& row : rep.greedy) any = any || (row.drafter == cfg.drafters[d].label && row.check.drafted > 0);
      if (!any && !ids.empty() && !eq.gammas.empty()) {
        rep.greedy_pass = false;
        rep.failures.push_back("greedy: tests nothing: drafter " + cfg.drafters[d].label +
                               " proposed no tokens in any greedy run, so none of its drafts was verified; give "
                               "generation.max_new_tokens room for a step (at least 2) and prompts it drafts on");
      }
    }
  }

  // 2. Analytic check of one verification step.
  const std::vector<SamplingCombo> sweep = combos(eq);
  std::map<std::string, std::vector<LogitPair>> verifier_pairs;  // draft label -> real (p, q) logit rows
  if (eq.analytic || eq.verifier) {
    rep.ran_analytic = eq.analytic;
    struct Draft {
      std::string label;
      const Model* model = nullptr;  // a model drafter's model, or
      std::vector<int64_t> layers;
      size_t engine = SIZE_MAX;      // another drafter (index into drafters), through the engine
    };
    std::vector<Draft> drafts;
    for (size_t i = 0; i < drafters.size(); ++i) {
      if (const ModelDrafter* md = model_drafter(logits_drafter(*drafters[i]))) {
        drafts.push_back({cfg.drafters[i].label, &md->model(), md->layers()});
      } else if (has_logits[i]) {
        Draft x;  // a drafter with draft logits of its own (eagle, a plugin): its rows via the engine
        x.label = cfg.drafters[i].label;
        x.engine = i;
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
    progress((eq.analytic ? "analytic check: " : "verifier check rows: ") + std::to_string(ids.size()) + " prompts x " +
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
        const std::vector<float> tl_model = checked_logits(kTargetModelSource, next_token_logits(model, context));
        for (const Draft& d : drafts) {
          std::vector<float> tl = tl_model, dl;
          int64_t context_len = static_cast<int64_t>(context.size());
          if (d.engine != SIZE_MAX) {  // the rows after one sampled token (drafter_step_rows)
            const std::optional<LogitPair> rows =
                drafter_step_rows(model, tok, context, logits_drafter(*drafters[d.engine]), cfg.drafters[d.engine].options, kvt,
                                  stream_id({static_cast<int64_t>(p), off, static_cast<int64_t>(d.engine), 7}));
            if (!rows) continue;  // no draft at this context
            tl = rows->target;
            dl = rows->draft;
            context_len += 1;
          } else {
            dl = checked_logits("drafter " + d.label, next_token_logits(*d.model, context, d.layers));
          }
          if (eq.verifier) verifier_pairs[d.label].push_back({tl, dl});
          if (!eq.analytic) continue;
          for (const SamplingCombo& c : sweep) {
            AnalyticRow row;
            row.prompt = static_cast<int64_t>(p);
            row.prompt_id = prompts[p].id;
            row.context_len = context_len;
            row.draft = d.label;
            row.sampling = c.s;
            row.errors = analytic_step_errors(tl.data(), dl.data(), mc.vocab_size, c.s);
            rep.analytic_max_error = std::max({rep.analytic_max_error, row.errors.lossless, row.errors.deterministic});
            rep.analytic.push_back(std::move(row));
          }
        }
      }
    }
    if (eq.analytic && !(rep.analytic_max_error < kAnalyticTolerance)) {
      rep.analytic_pass = false;
      rep.failures.push_back("analytic: max |P(first token) - p| = " + fmt("%.3g", rep.analytic_max_error) +
                             " >= tolerance " + fmt("%g", kAnalyticTolerance));
    }
  }

  // 2b. The real verifier, Monte Carlo, on the same real rows.
  if (eq.verifier) {
    rep.ran_verifier = true;
    for (int k : eq.verifier_gammas)  // per draft x sampling setting
      rep.verifier_family += static_cast<int64_t>(verifier_pairs.size() * sweep.size()) *
                             (1 + static_cast<int64_t>(verifier_positions(k) - 1) * kVerifierClasses);
    // Controls at the draft length nearest 4: long enough that later rows occur, short enough
    // that whole blocks are still accepted (the bonus control: below).
    int control_k = eq.verifier_gammas.front();
    for (int k : eq.verifier_gammas)
      if (std::abs(k - 4) < std::abs(control_k - 4)) control_k = k;
    const double delta = eq.alpha / static_cast<double>(std::max<int64_t>(1, rep.verifier_family));
    for (const auto& [label, pairs] : verifier_pairs)
      for (size_t si = 0; si < sweep.size(); ++si) {
        const SamplingOptions& s = sweep[si].s;
        if (mc.vocab_size > kMaxVerifierFullVocab && (s.top_k == 0 || s.top_k > kMaxVerifierFullVocab)) {
          bool covered = false;  // another setting of the sweep that does run (a top_k within the bound)
          for (const SamplingCombo& c : sweep) covered = covered || (c.s.top_k > 0 && c.s.top_k <= kMaxVerifierFullVocab);
          rep.notes.push_back("verifier check: " + label + ", " + sampling_label(s) + " not run: " +
                              (s.top_k == 0 ? std::string("without a top_k") : "with top_k " + std::to_string(s.top_k)) +
                              " the rows span more than " + std::to_string(kMaxVerifierFullVocab) + " of the " +
                              std::to_string(mc.vocab_size) + "-token vocabulary (too slow at " +
                              std::to_string(eq.verifier_samples) + " draws); " +
                              (covered ? "the sweep's other top_k settings cover it"
                                       : "give equivalence.top_ks a value from 1 to " +
                                             std::to_string(kMaxVerifierFullVocab) + " to run it"));
          continue;
        }
        progress("verifier check: " + label + ", " + sampling_label(s) + ": " + std::to_string(eq.verifier_gammas.size()) +
                 " draft lengths x " + std::to_string(eq.verifier_samples) + " draws + controls");
        // bonus_from_row_k-1 acts only on bonus tokens: it runs at the draft length whose lossless
        // cell emitted the most of them (ties: nearest 4). At a length where no draw accepts a
        // whole block it could not be caught, and a correct verifier would fail the check.
        int bonus_k = control_k;
        int64_t most_bonus = -1;
        for (int k : eq.verifier_gammas) {
          rep.verifier.push_back(run_verifier_cell(pairs, label, s, k, eq.verifier_samples, delta,
                                                   cfg.sampling.seed ^ stream_id({static_cast<int64_t>(si), k, 7})));
          const int64_t b = rep.verifier.back().bonus;
          if (b > most_bonus || (b == most_bonus && std::abs(k - 4) < std::abs(bonus_k - 4))) {
            most_bonus = b;
            bonus_k = k;
          }
        }
        for (VerifierControl ctl : verifier_controls(s)) {
          const bool bonus_control = ctl.name == "bonus_from_row_k-1";
          if (bonus_control && most_bonus == 0 && ctl.applicable) {
            ctl.applicable = false;
            ctl.note = "no draw accepted a whole block at any draft length (no bonus token to draw from the wrong row)";
          }
          const int k = bonus_control ? bonus_k : control_k;
          for (auto it = rep.verifier.rbegin(); it != rep.verifier.rend() && it->draft == label; ++it)
            if (it->k == k && it->sampling.temperature == s.temperature && it->sampling.top_k == s.top_k &&
                it->sampling.top_p == s.top_p)
              mark_control_for_cell(ctl, *it);
          rep.verifier_controls.push_back(run_verifier_control(pairs, label, s, ctl, k, eq.verifier_samples,
                                                               eq.control_alpha, cfg.sampling.seed ^ stream_id({static_cast<int64_t>(si), k, 8})));
        }
      }
    finalize_verifier_verdict(rep);
  }

  // 3 + 4. Empirical sampling check with negative controls.
  if (eq.sampling) {
    rep.ran_sampling = true;
    const int m_max = *std::max_element(eq.positions.begin(), eq.positions.end());
    // Position j >= 2 of the first step is its draft row j - 2; the bonus is position gamma + 2.
    // Positions short of that test only the first rows: a bug confined to later draft rows (a q
    // off by one row, a penalty on generated tokens, a warper from row 1 on) passed unnoticed.
    for (int gamma : eq.gammas) {
      if (m_max >= gamma + 2) continue;
      const std::string unrecorded =
          m_max == gamma + 1 ? "bonus token (position " + std::to_string(gamma + 2) + ") is not recorded, so a bug confined to it"
                             : "draft rows " + std::to_string(std::max(0, m_max - 1)) + ".." + std::to_string(gamma - 1) +
                                   " and bonus token (positions " + std::to_string(m_max + 1) + ".." +
                                   std::to_string(gamma + 2) + ") are not recorded, so a bug confined to them";
      rep.notes.push_back("sampling: positions reach m = " + std::to_string(m_max) + ": at gamma " + std::to_string(gamma) +
                          " the first step's " + unrecorded + " is not tested; " +
                          (gamma + 2 <= 16 ? "positions up to gamma + 2 = " + std::to_string(gamma + 2) + " cover a whole step"
                                           : "positions go up to 16, short of a whole step at this gamma"));
    }
    std::vector<int> joints(eq.positions.begin(), eq.positions.end());
    std::sort(joints.begin(), joints.end());
    joints.erase(std::unique(joints.begin(), joints.end()), joints.end());
    std::vector<int> marginals;
    for (int pos = 1; pos <= m_max; ++pos)
      if (pos > 1 || std::find(joints.begin(), joints.end(), 1) == joints.end()) marginals.push_back(pos);
    const int64_t n = eq.samples;
    // The TV radius accounts for the number of tests: each at alpha / (lossless tests of the sweep).
    // With EOS and stop strings active a draw may end early (padded with an "ended" category):
    // only the two-sample tests apply then, not the one-sample tests against the exact p.
    const int64_t exact_tests = eq.eos_and_stop ? 0 : m_max >= 2 ? 2 : 1;
    const int64_t lossless_tests =
        eq.contexts * static_cast<int64_t>(sweep.size()) *
        (exact_tests + static_cast<int64_t>(drafters.size() * eq.gammas.size()) *
                           static_cast<int64_t>(joints.size() + marginals.size() + static_cast<size_t>(exact_tests)));
    const double me = options.min_expected, delta = eq.alpha / static_cast<double>(std::max<int64_t>(1, lossless_tests));
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
        plan.stop_active = eq.eos_and_stop;
        if (eq.eos_and_stop) plan.stop = cfg.generation.stop;
        plan.stream = stream_id({ci, static_cast<int64_t>(si), -1, 0, 0});
        progress("sampling: context " + g.prompt_id + ", " + sampling_label(s) + ": " + std::to_string(n) + " AR draws");
        const Draws ar = draw_ar(memo, tok, plan, kvt);
        g.ar_seconds = ar.seconds;
        g.verified_positions_vary = verified_positions_vary(ar, static_cast<int64_t>(std::ceil(me)));
        ExactReference ref;
        if (!eq.eos_and_stop)
          ref = naming_logits_source(kTargetModelSource, [&] {
            return exact_reference(oracle, s, n, me, options.max_exact_prefixes, m_max >= 2);
          });
        g.exact_prefixes = static_cast<int64_t>(ref.prefixes.size());
        g.exact_covered = ref.has_joint ? ref.covered : kNaN;
        if (!eq.eos_and_stop)
          for (CellTest& t : compare_with_exact(ar, ref, "ar", n, me, delta)) {
            TestRow row;
            row.group = g.index;
            row.test = std::move(t);
            rep.tests.push_back(std::move(row));
          }
        rep.groups.push_back(g);
        auto tests_of = [&](const Draws& d, const std::string& name, int64_t at_n) {
          std::vector<CellTest> t = compare_with_ar(ar, d, name, joints, marginals, at_n, me, delta);
          if (eq.eos_and_stop) return t;
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

            // 4. Negative controls through the same engine, tests and N.
            const size_t nc = rep.control_names.size();
            std::vector<Draws> controls(nc);
            std::vector<bool> ran(nc, false);

            for (size_t k = 0; k < nc; ++k) {
              ControlOutcome o;
              o.name = rep.control_names[k];
              o.note = engine_control_skip_reason(o.name, s, sampling_kind[di], gamma, m_max);
              if (o.note.empty()) {
                const EngineControl ctl = make_engine_control(o.name);
                plan.stream = stream_id({ci, static_cast<int64_t>(si), static_cast<int64_t>(di), gamma,
                                         static_cast<int64_t>(2 + k)});
                controls[k] = draw_speculative(memo, tok, plan, *drafters[di], dopts, kvt, ctl.rule);
                ran[k] = o.ran = true;
                if (ctl.divergence) o.q_tv = ctl.divergence->mean();
                if (controls[k].drafted == 0) o.note = "the drafter proposed no tokens";
              }
              cell.controls.push_back(std::move(o));
            }
            for (size_t k = 0; k < nc; ++k) {
              if (!ran[k]) continue;
              ControlOutcome& o = cell.controls[k];
              const std::string& name = o.name;
              bool testable = false;  // some test has a degree of freedom
              for (CellTest& t : tests_of(controls[k], name, n)) {
                o.min_p = std::min(o.min_p, t.stats.p_value);
                ++o.tests;
                testable = testable || t.stats.dof > 0;
                TestRow row;
                row.group = g.index;
                row.cell = cell.index;
                row.test = std::move(t);
                rep.tests.push_back(std::move(row));
              }
              const bool tiny_q_bug = !std::isnan(o.q_tv) && o.q_tv < kMinControlQTv;
              o.applicable = controls[k].drafted > 0 && testable && !tiny_q_bug;
              if (controls[k].drafted > 0 && !testable)
                o.note = "no test has a degree of freedom: the target is (nearly) deterministic at the recorded "
                         "positions, so no rule can change them";
              else if (tiny_q_bug)
                o.note = "q drawn and q reported differ by a mean TV of only " + fmt("%.3g", o.q_tv) +
                         " on the rows the engine visited: too small a bug to require catching";
              o.caught = o.tests > 0 && o.min_p * static_cast<double>(o.tests) < eq.control_alpha;
              const std::vector<PowerPoint> curve = power_curve(
                  std::min(options.power_start, n), n, eq.control_alpha,
                  [&](int64_t at_n) { return tests_of(controls[k], name, at_n); });
              for (const PowerPoint& pt : curve) {
                if (pt.caught && o.power_n < 0) o.power_n = pt.n;
                rep.power.push_back({cell.index, name, pt});
              }
            }

            // Frequencies of the most common tokens per position, for plots.
            for (int pos = 0; pos < m_max; ++pos) {
              const auto fa = position_counts(ar, pos, n), fs = position_counts(spec, pos, n);
              std::vector<std::map<Token, int64_t>> fc(nc);
              for (size_t k = 0; k < nc; ++k)
                if (ran[k]) fc[k] = position_counts(controls[k], pos, n);
              std::map<Token, int64_t> total;
              for (const auto& [t, c] : fa) total[t] += c;
              for (const auto& [t, c] : fs) total[t] += c;
              for (size_t k = 0; k < nc; ++k)
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
                f.text = t == kEndedDraw ? "<ended>" : tok.token_text(t);
                f.ar = count(fa, t);
                f.speculative = count(fs, t);
                for (size_t k = 0; k < nc; ++k) f.controls.push_back(ran[k] ? count(fc[k], t) : -1);
                if (t == kEndedDraw || ref.p1.empty()) {
                  f.exact = kNaN;  // EOS and stop strings active: no exact reference
                } else if (pos == 0) {
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

}  // namespace speclab
