#include "framework/equivalence/sampling_check.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <unordered_map>

#include "framework/core/error.h"
#include "framework/core/token_tensor.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/verify/faulty_acceptance.h"

namespace speclab {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }


std::vector<double> to_double_normalised(const std::vector<float>& p) {
  double sum = 0.0;
  for (float x : p) sum += x;
  std::vector<double> out(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = static_cast<double>(p[i]) / sum;
  return out;
}


GenerationOptions draw_generation(int64_t max_new, const DrawPlan& plan) {
  GenerationOptions gen;
  gen.max_new_tokens = max_new;
  gen.ignore_eos = !plan.stop_active;
  if (plan.stop_active) gen.stop = plan.stop;
  return gen;
}

// A draw of m tokens; with stop_active a shorter one (EOS or a stop string) is padded.
void check_draw_length(TokenList& got, int m, bool stop_active) {
  if (stop_active && static_cast<int>(got.size()) < m) got.resize(static_cast<size_t>(m), kEndedDraw);
  if (static_cast<int>(got.size()) != m)
    throw Error(ErrorKind::kBadInput,
                "expected every draw to emit " + std::to_string(m) + " tokens, found " + std::to_string(got.size()) +
                    ": the context leaves too little room in the model's context window",
                "sampling check", "context");
}

// Category index of the tokens [from, from + len) of each of the first n draws of a and b.
struct Categories {
  std::vector<int64_t> a, b;
};
Categories categorize(const Draws& x, const Draws& y, int from, int len, int64_t n) {
  std::unordered_map<std::string, size_t> index;
  Categories c;
  auto add = [&](const Draws& d, int which) {
    for (int64_t i = 0; i < n; ++i) {
      const Token* t = d.tokens.data() + i * d.m + from;
      std::string key(reinterpret_cast<const char*>(t), sizeof(Token) * static_cast<size_t>(len));
      auto it = index.find(key);
      size_t j;
      if (it == index.end()) {
        j = index.size();
        index.emplace(std::move(key), j);
        c.a.push_back(0);
        c.b.push_back(0);
      } else {
        j = it->second;
      }
      (which == 0 ? c.a : c.b)[j] += 1;
    }
  };
  add(x, 0);
  add(y, 1);
  return c;
}

void check_prefix(const Draws& d, int64_t n, const char* what) {
  if (n < 1 || n > d.n())
    throw Error(ErrorKind::kBadInput,
                "expected 1 <= n <= " + std::to_string(d.n()) + " draws, found " + std::to_string(n), "sampling check",
                what);
}

}  // namespace

AcceptanceRule always_accept_rule() {
  return {[](const VerifyInputs& in) {
            return faulty::verify_always_accept(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
          },
          true};
}

namespace {

// The TV distance between each drawn q row and the reported one, added to `divergence`.
void add_divergence(QDivergence* divergence, const std::vector<std::vector<float>>& drawn,
                    const std::vector<std::vector<float>>& reported) {
  if (!divergence) return;
  for (size_t i = 0; i < drawn.size() && i < reported.size(); ++i) {
    double l1 = 0.0;
    for (size_t v = 0; v < reported[i].size() && v < drawn[i].size(); ++v)
      l1 += std::abs(static_cast<double>(reported[i][v]) - static_cast<double>(drawn[i][v]));
    divergence->tv_sum += 0.5 * l1;
    divergence->rows += 1;
  }
}

// q: [vocab], a q row drawn at temperature T: q^T renormalised over q's support, the law at
// temperature 1 over the same support (softmax(l / T)^T is proportional to softmax(l)).
// In logs, relative to the largest entry: q^T itself underflows to 0 for every entry at large T.
std::vector<float> q_row_at_temperature_1(const std::vector<float>& q, double temperature) {
  std::vector<double> w(q.size(), 0.0);
  float top = 0.f;
  for (float x : q) top = std::max(top, x);
  const double log_top = std::log(static_cast<double>(top));
  double sum = 0.0;
  for (size_t v = 0; v < q.size(); ++v)
    if (q[v] > 0.f) sum += (w[v] = std::exp(temperature * (std::log(static_cast<double>(q[v])) - log_top)));
  std::vector<float> out(q.size(), 0.f);
  for (size_t v = 0; v < q.size(); ++v) out[v] = static_cast<float>(w[v] / sum);
  return out;
}

// The real verifier handed a q recomputed from the draft logits under `reported(run sampling)`,
// while the draft tokens were drawn under the run's sampling: a drafter that reports another q
// than the one it sampled from. `from_q_rows`: a block with q rows and no logits (a sampling plugin) reports
// q_row_at_temperature_1 of its rows (only q_at_temperature_1 can be rebuilt from a q row).
AcceptanceRule reported_q_rule(const char* name, std::function<void(SamplingOptions&)> reported,
                               std::shared_ptr<QDivergence> divergence, bool from_q_rows = false) {
  return {[name, reported, divergence, from_q_rows](const VerifyInputs& in) {
    const DraftBlock& d = *in.draft;
    if (from_q_rows && !d.tokens.empty() && d.logits.empty() && d.probs.size() == d.tokens.size()) {
      std::vector<std::vector<float>> q1(d.tokens.size());
      for (size_t i = 0; i < d.tokens.size(); ++i) q1[i] = q_row_at_temperature_1(d.probs[i], in.sampling->temperature);
      add_divergence(divergence.get(), d.probs, q1);
      return verify_rejection(d.tokens, *in.p, q1, *in.rng);
    }
    // A block without logits (a prompt-lookup or retrieval source's, behind prompt_lookup_first /
    // retrieval_first) has no q to misreport: verified as the lossless engine does, so the
    // control acts on the wrapped drafter's blocks.
    if (d.tokens.empty() || d.logits.empty()) return verify_rejection(d.tokens, *in.p, d.probs, *in.rng);
    if (d.logits.size() != d.tokens.size())
      throw Error(ErrorKind::kConfig,
                  std::string("the ") + name + " control needs the draft's raw logits (a model drafter under sampling); this "
                  "drafter returned " + std::to_string(d.logits.size()) + " logit rows for " +
                      std::to_string(d.tokens.size()) + " tokens",
                  "equivalence", "negative_controls");
    SamplingOptions raw = *in.sampling;
    reported(raw);
    std::vector<std::vector<float>> q_raw(d.tokens.size());
    for (size_t i = 0; i < d.tokens.size(); ++i) logits_to_probs(d.logits[i].data(), in.vocab, raw, q_raw[i]);
    add_divergence(divergence.get(), d.probs, q_raw);
    return verify_rejection(d.tokens, *in.p, q_raw, *in.rng);
  },
          true, /*needs_draft_logits=*/true};
}

}  // namespace

AcceptanceRule top_p_on_p_only_rule(std::shared_ptr<QDivergence> divergence) {
  return reported_q_rule("top-p-on-p-only", [](SamplingOptions& s) { s.top_p = 1.0; }, std::move(divergence));
}

AcceptanceRule q_at_temperature_1_rule(std::shared_ptr<QDivergence> divergence) {
  return reported_q_rule("q-at-temperature-1", [](SamplingOptions& s) { s.temperature = 1.0; }, std::move(divergence),
                         /*from_q_rows=*/true);
}

AcceptanceRule q_drawn_top_k_rule(std::shared_ptr<QDivergence> divergence) {
  return reported_q_rule("q-drawn-top-k", [](SamplingOptions& s) { s.top_k = 0; }, std::move(divergence));
}

AcceptanceRule replacement_from_p_rule() {
  return {[](const VerifyInputs& in) {
            return faulty::verify_replacement_from_p(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
          },
          true};
}

AcceptanceRule bonus_from_previous_row_rule() {
  return {[](const VerifyInputs& in) {
            return faulty::verify_bonus_from_previous_row(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
          },
          true};
}

AcceptanceRule residual_unnormalised_rule() {
  return {[](const VerifyInputs& in) {
            return faulty::verify_residual_unnormalised(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
          },
          true};
}

AcceptanceRule shared_draws_rule() {
  return {[](const VerifyInputs& in) {
            SPECLAB_CHECK(in.draft_rng_at_propose != nullptr, "shared_draws: the engine passes the drafter's stream");
            Rng shared = *in.draft_rng_at_propose;
            VerifyInputs same = in;
            same.rng = &shared;
            return lossless_acceptance(same);
          },
          false};
}

AcceptanceRule p_row_off_by_one_rule() {
  return {[](const VerifyInputs& in) {
            return faulty::verify_p_row_off_by_one(in.draft->tokens, *in.p, in.draft->probs, *in.rng);
          },
          true};
}

void Draws::append(const Draws& more) {
  if (more.m != m) throw Error(ErrorKind::kBadInput, "expected draws of " + std::to_string(m) + " tokens, found " +
                                                         std::to_string(more.m), "sampling check", "draws");
  tokens.insert(tokens.end(), more.tokens.begin(), more.tokens.end());
  drafted += more.drafted;
  accepted += more.accepted;
  steps += more.steps;
  seconds += more.seconds;
}

uint64_t draw_seed(uint64_t base, uint64_t stream, int64_t index) {
  uint64_t s = base;
  uint64_t x = splitmix64(s);
  s = x ^ stream;
  x = splitmix64(s);
  s = x ^ static_cast<uint64_t>(index);
  return splitmix64(s);
}

void DrawPlan::validate() const {
  sampling.validate();
  if (sampling.greedy())
    throw Error(ErrorKind::kConfig,
                "expected a temperature > 0: at temperature 0 both engines are deterministic, so a sampling check "
                "would compare one token sequence with itself; greedy decoding is checked by equivalence.greedy",
                "equivalence", "temperatures");
  if (m < 1) throw Error(ErrorKind::kConfig, "expected m >= 1 tokens per draw, found " + std::to_string(m), "equivalence", "positions");
  if (n < 1) throw Error(ErrorKind::kConfig, "expected n >= 1 draws, found " + std::to_string(n), "equivalence", "samples");
  if (context.empty()) throw Error(ErrorKind::kBadInput, "expected a non-empty context, found none", "sampling check", "context");
}

Draws draw_ar(const Model& target, const TokenDecoder& tokenizer, const DrawPlan& plan, KvTarget kv) {
  plan.validate();
  const auto t0 = Clock::now();
  Draws d;
  d.m = plan.m;
  d.tokens.reserve(static_cast<size_t>(plan.n * plan.m));
  const GenerationOptions gen = draw_generation(plan.m, plan);
  SamplingOptions s = plan.sampling;
  for (int64_t i = 0; i < plan.n; ++i) {
    s.seed = draw_seed(plan.seed_base, plan.stream, plan.first + i);
    GenerationResult r = generate_ar(target, tokenizer, plan.context, gen, s, KvMode::kCached, {}, kv);
    check_draw_length(r.tokens, plan.m, plan.stop_active);
    d.tokens.insert(d.tokens.end(), r.tokens.begin(), r.tokens.end());
  }
  d.seconds = since(t0);
  return d;
}

Draws draw_speculative(const Model& target, const TokenDecoder& tokenizer, const DrawPlan& plan, Drafter& drafter,
                       const DrafterOptions& dopts, KvTarget kv, const AcceptanceRule& rule) {
  plan.validate();
  const auto t0 = Clock::now();
  Draws d;
  d.m = plan.m;
  d.tokens.reserve(static_cast<size_t>(plan.n * plan.m));
  const GenerationOptions gen = draw_generation(std::max(plan.m, dopts.num_speculative_tokens + 2), plan);
  SamplingOptions s = plan.sampling;
  // Counts every verification step of every draw, and collects each draw's tokens.
  struct Tally : StepObserver {
    Draws* d = nullptr;
    TokenList got;
    void on_token(Token t) override { got.push_back(t); }
    void on_step(SpecStep& r) override {
      d->drafted += r.drafted;
      d->accepted += r.accepted;
      d->steps += 1;
    }
  } tally;
  tally.d = &d;
  Session session(target, tokenizer, kv, rule);
  session.add_observer(tally);
  for (int64_t i = 0; i < plan.n; ++i) {
    s.seed = draw_seed(plan.seed_base, plan.stream, plan.first + i);
    tally.got.clear();
    session.begin({plan.context, {&drafter, dopts}, gen, s});
    while (!session.done() && static_cast<int>(tally.got.size()) < plan.m) session.step();
    session.end();
    if (static_cast<int>(tally.got.size()) > plan.m) tally.got.resize(static_cast<size_t>(plan.m));
    check_draw_length(tally.got, plan.m, plan.stop_active);
    d.tokens.insert(d.tokens.end(), tally.got.begin(), tally.got.end());
  }
  d.seconds = since(t0);
  return d;
}

struct NextTokenOracle::Impl {
  const Model* model = nullptr;
  std::unique_ptr<KvCacheManager> kv;
  std::unique_ptr<KvSequence> seq;
  int64_t n = 0;
};

NextTokenOracle::NextTokenOracle(const Model& target, TokenList context) : impl_(new Impl) {
  try {
    const ModelConfig& c = target.config();
    check_prompt_fits(context, c);
    impl_->model = &target;
    impl_->n = static_cast<int64_t>(context.size());
    impl_->kv = std::make_unique<KvCacheManager>(kv_options_for(c, impl_->n + 1));
    const PoolId pool = impl_->kv->add_pool(c.kv_geometry());
    impl_->seq = std::make_unique<KvSequence>(*impl_->kv, pool);
    const SeqId sid = impl_->seq->id();
    impl_->kv->reserve(sid, impl_->n);
    at::Tensor logits = target.forward(token_tensor(context), at::arange(impl_->n, at::kLong),
                                       impl_->kv->view(sid, impl_->n), ForwardOptions{{}, 1});
    SPECLAB_CHECK(impl_->kv->commit(sid, impl_->n) == KvStatus::kOk, "commit of the context");
    at::Tensor row = logits[0].contiguous();
    first_.assign(row.data_ptr<float>(), row.data_ptr<float>() + c.vocab_size);
    impl_->kv->reserve(sid, 1);
  } catch (...) {
    delete impl_;
    throw;
  }
}

NextTokenOracle::~NextTokenOracle() {
  impl_->seq.reset();  // release the sequence before its manager
  delete impl_;
}

int64_t NextTokenOracle::vocab() const { return static_cast<int64_t>(first_.size()); }

const std::vector<float>& NextTokenOracle::second(Token t0) {
  auto it = second_.find(t0);
  if (it != second_.end()) return it->second;
  if (t0 < 0 || t0 >= vocab())
    throw Error(ErrorKind::kBadInput, "token " + std::to_string(t0) + " is outside the vocabulary", "sampling check", "t0");
  const SeqId sid = impl_->seq->id();
  at::Tensor logits = impl_->model->forward(at::full({1}, static_cast<int64_t>(t0), at::kLong),
                                            at::full({1}, impl_->n, at::kLong), impl_->kv->view_at(sid, impl_->n, 1));
  at::Tensor row = logits[0].contiguous();
  return second_.emplace(t0, std::vector<float>(row.data_ptr<float>(), row.data_ptr<float>() + vocab())).first->second;
}

ExactReference exact_reference(NextTokenOracle& oracle, const SamplingOptions& sampling, int64_t n,
                               double min_expected, int64_t max_prefixes, bool joint) {
  const int64_t vocab = oracle.vocab();
  std::vector<float> probs;
  logits_to_probs(oracle.first().data(), vocab, sampling, probs);
  ExactReference ref;
  ref.p1 = to_double_normalised(probs);
  if (!joint) return ref;
  std::vector<Token> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), Token{0});
  std::stable_sort(order.begin(), order.end(), [&](Token x, Token y) { return ref.p1[x] > ref.p1[y]; });
  for (Token t0 : order) {
    if (static_cast<int64_t>(ref.prefixes.size()) >= max_prefixes) break;
    if (static_cast<double>(n) * ref.p1[static_cast<size_t>(t0)] < min_expected) break;
    logits_to_probs(oracle.second(t0).data(), vocab, sampling, probs);
    ref.prefixes.push_back(t0);
    ref.p2.push_back(to_double_normalised(probs));
    ref.covered += ref.p1[static_cast<size_t>(t0)];
  }
  ref.has_joint = true;
  return ref;
}

bool verified_positions_vary(const Draws& draws, int64_t min_count) {
  const int64_t n = draws.n();
  for (int j = 1; j < draws.m; ++j) {
    // prefix (tokens 0..j-1) -> token at j -> count
    std::map<std::vector<Token>, std::map<Token, int64_t>> next;
    for (int64_t i = 0; i < n; ++i) {
      const auto first = draws.tokens.begin() + static_cast<std::ptrdiff_t>(i * draws.m);
      ++next[std::vector<Token>(first, first + j)][draws.at(i, j)];
    }
    for (const auto& [prefix, counts] : next) {
      int often = 0;
      for (const auto& [token, count] : counts) often += count >= min_count;
      if (often >= 2) return true;
    }
  }
  return false;
}

std::vector<CellTest> compare_with_ar(const Draws& ar, const Draws& subject, const std::string& name,
                                      const std::vector<int>& joints, const std::vector<int>& marginals, int64_t n,
                                      double min_expected, double delta) {
  check_prefix(ar, n, "ar");
  check_prefix(subject, n, "subject");
  std::vector<CellTest> out;
  for (int m : joints) {
    if (m < 1 || m > ar.m || m > subject.m)
      throw Error(ErrorKind::kBadInput, "joint of " + std::to_string(m) + " tokens asked of draws with " +
                                            std::to_string(std::min(ar.m, subject.m)), "sampling check", "joints");
    Categories c = categorize(subject, ar, 0, m, n);
    out.push_back({name, "joint", m, two_sample_test(c.a, c.b, min_expected, delta)});
  }
  for (int pos : marginals) {
    if (pos < 1 || pos > ar.m || pos > subject.m)
      throw Error(ErrorKind::kBadInput, "position " + std::to_string(pos) + " asked of draws with " +
                                            std::to_string(std::min(ar.m, subject.m)) + " tokens", "sampling check", "marginals");
    Categories c = categorize(subject, ar, pos - 1, 1, n);
    out.push_back({name, "marginal", pos, two_sample_test(c.a, c.b, min_expected, delta)});
  }
  return out;
}

std::vector<CellTest> compare_with_exact(const Draws& subject, const ExactReference& ref, const std::string& name,
                                         int64_t n, double min_expected, double delta) {
  check_prefix(subject, n, "subject");
  const size_t vocab = ref.p1.size();
  std::vector<CellTest> out;
  {
    std::vector<int64_t> obs(vocab, 0);
    for (int64_t i = 0; i < n; ++i) {
      const Token t = subject.at(i, 0);
      if (t < 0 || static_cast<size_t>(t) >= vocab)
        throw Error(ErrorKind::kBadInput, "drawn token outside the vocabulary", "sampling check", "draws");
      obs[static_cast<size_t>(t)] += 1;
    }
    out.push_back({name, "exact", 1, one_sample_test(obs, ref.p1, min_expected, delta)});
  }
  if (!ref.has_joint || subject.m < 2) return out;

  // Observed (t0, t1) pairs, split into: t0 in S (by pair), t0 outside S, impossible.
  std::unordered_map<Token, size_t> slot;
  for (size_t s = 0; s < ref.prefixes.size(); ++s) slot.emplace(ref.prefixes[s], s);
  std::unordered_map<int64_t, int64_t> pair_count;  // s * vocab + t1 -> count
  int64_t outside = 0, impossible = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Token t0 = subject.at(i, 0), t1 = subject.at(i, 1);
    if (t0 < 0 || static_cast<size_t>(t0) >= vocab || ref.p1[static_cast<size_t>(t0)] == 0.0) {
      ++impossible;
      continue;
    }
    auto it = slot.find(t0);
    if (it == slot.end()) {
      ++outside;
      continue;
    }
    if (t1 < 0 || static_cast<size_t>(t1) >= vocab || ref.p2[it->second][static_cast<size_t>(t1)] == 0.0) {
      ++impossible;
      continue;
    }
    pair_count[static_cast<int64_t>(it->second) * static_cast<int64_t>(vocab) + t1] += 1;
  }
  const double dn = static_cast<double>(n);
  std::vector<double> probs;
  std::vector<int64_t> obs;
  double pool_prob = 0.0;
  int64_t pool_obs = 0;
  for (size_t s = 0; s < ref.prefixes.size(); ++s) {
    const double w = ref.p1[static_cast<size_t>(ref.prefixes[s])];
    for (size_t t1 = 0; t1 < vocab; ++t1) {
      const double q = ref.p2[s][t1];
      if (q == 0.0) continue;
      const double prob = w * q;
      auto it = pair_count.find(static_cast<int64_t>(s) * static_cast<int64_t>(vocab) + static_cast<int64_t>(t1));
      const int64_t o = it == pair_count.end() ? 0 : it->second;
      if (dn * prob >= min_expected) {
        probs.push_back(prob);
        obs.push_back(o);
      } else {
        pool_prob += prob;
        pool_obs += o;
      }
    }
  }
  const double rest = std::max(0.0, 1.0 - ref.covered);
  if (rest > 0.0) {
    probs.push_back(rest);
    obs.push_back(outside);
  } else {
    impossible += outside;
  }
  out.push_back({name, "exact", 2, one_sample_test_pooled(obs, probs, pool_prob, pool_obs, impossible, min_expected, delta)});
  return out;
}

std::vector<PowerPoint> power_curve(int64_t start, int64_t n_max, double control_alpha,
                                    const std::function<std::vector<CellTest>(int64_t)>& run_tests) {
  if (start < 1 || n_max < 1)
    throw Error(ErrorKind::kBadInput, "expected a grid start and a maximum >= 1", "sampling check", "power");
  std::vector<int64_t> grid;
  for (int64_t n = start; n < n_max; n *= 2) grid.push_back(n);
  grid.push_back(n_max);
  std::vector<PowerPoint> out;
  for (int64_t n : grid) {
    PowerPoint pt;
    pt.n = n;
    for (const CellTest& t : run_tests(n)) {
      pt.min_p = std::min(pt.min_p, t.stats.p_value);
      ++pt.tests;
    }
    pt.caught = pt.tests > 0 && pt.min_p * static_cast<double>(pt.tests) < control_alpha;
    out.push_back(pt);
  }
  return out;
}

std::map<Token, int64_t> position_counts(const Draws& d, int position, int64_t n) {
  check_prefix(d, n, "draws");
  std::map<Token, int64_t> out;
  for (int64_t i = 0; i < n; ++i) out[d.at(i, position)] += 1;
  return out;
}

}  // namespace speclab
