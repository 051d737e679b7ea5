// Distribution-equivalence checks (framework/equivalence/): the statistics against independent
// references (mpmath, R's p.adjust, pearson_chi_square), and the checks on a real model
// (stories260K) through the real engines:
//   - greedy speculative output equals AR output on every reference prompt, drafter and gamma,
//     and a verification pass that disagrees with AR is classified "bug";
//   - the exact first-token distribution of one verification step equals p (error < 1e-6) on
//     real contexts, while the faulty rules' errors are large;
//   - at N = 20,000 draws per subject the chi-square/G tests do not reject the lossless engine
//     (Holm-adjusted p >= 0.001), and both negative controls (always-accept, top-p-on-p-only)
//     are rejected at p < 1e-6 with the same tests and N;
//   - same seed -> same statistics; bad input -> clear errors; `speclab check` exit codes and the
//     /equivalence HDF5 group.
// The sampling test runs two cells of the sweep (the full sweep is configs/equivalence.yaml):
// T=1.0, top_p=0.9, top_k=0, gamma=4 and T=0.5, top_p=1.0, top_k=20, gamma=1, on the prompt
// "The little dog" with a layer_skip draft of the first 3 of stories260K's 5 layers (acceptance
// between 0.2 and 0.7 there, so accepted, recovered and bonus tokens all occur).
#include "tests/torch_catch.h"

#include <ATen/Parallel.h>
#include <H5Cpp.h>
#include <c10/core/InferenceMode.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "experiments/app/session_parts.h"
#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "framework/core/rng.h"
#include "framework/draft/registry.h"
#include "framework/equivalence/engine_controls.h"
#include "framework/equivalence/equivalence_hdf5.h"
#include "experiments/app/equivalence_runner.h"
#include "framework/equivalence/model_taps.h"
#include "framework/equivalence/sample_tests.h"
#include "framework/verify/stats.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"
#include "tests/support/stories260k.h"

using namespace speclab;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using testing::Stories;

Stories& stories() {
  static bool once = [] {
    // A 260K-parameter model: threads only add overhead. SpecLab's kernels run on its own pool
    // (framework/core/thread_pool.h), whose second thread spun beside this model's
    // microsecond-long matmuls: the N = 20000 sampling case took 42 s and 83 CPU-seconds on two
    // threads, 38 s and 38 CPU-seconds on one (2-core AMD EPYC, 2026-12-07), and under CTest's two
    // jobs the spinning thread took the other job's core.
    at::set_num_threads(1);
    set_compute_threads(1);
    return true;
  }();
  (void)once;
  return testing::stories();
}

std::vector<std::string> reference_prompts() {
  std::vector<std::string> out;
  for (const nlohmann::json& r : testing::stories_reference_records()) out.push_back(r.at("prompt"));
  return out;
}

// Adds `bump` to the logit of `token` in every verification pass (a forward of several tokens
// that does not start at position 0): a broken verifier whose logits disagree with AR's.
class BrokenVerification : public Model {
 public:
  BrokenVerification(const Model& inner, Token token, float bump) : inner_(inner), token_(token), bump_(bump) {}
  const ModelConfig& config() const override { return inner_.config(); }
  uint64_t weight_bytes() const override { return inner_.weight_bytes(); }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                     const ForwardOptions& opts = {}) const override {
    at::Tensor out = inner_.forward(tokens, positions, kv, opts);
    if (tokens.size(0) > 1 && positions[0].item<int64_t>() > 0) out.select(1, token_).add_(bump_);
    return out;
  }

 private:
  const Model& inner_;
  Token token_;
  float bump_;
};

// A planted tie-breaking bug: in every row of a verification pass (n > 1 after the prefill) the
// runner-up logit is raised to exactly the top one, so argmax (lowest index wins) may pick the
// runner-up; in AR steps (n = 1) it is raised to one ulp below the top, so AR keeps the top.
// Where the two differ, AR's margin is one ulp and the verification margin is 0: a "numerical"
// flip by margins alone, which the strict rule must call a bug. No bit-identity promise
// (row_exact_batch() stays 0), so only the margin rule can catch it.
class TieBreakingBug : public Model {
 public:
  explicit TieBreakingBug(const Model& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  uint64_t weight_bytes() const override { return inner_.weight_bytes(); }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const KvView& kv,
                     const ForwardOptions& opts = {}) const override {
    at::Tensor out = inner_.forward(tokens, positions, kv, opts).contiguous();  // [n_out, vocab]
    const bool verify = tokens.size(0) > 1 && positions[0].item<int64_t>() > 0;
    if (tokens.size(0) > 1 && !verify) return out;  // the prefill: shared by both engines
    const int64_t vocab = out.size(1);
    for (int64_t r = 0; r < out.size(0); ++r) {
      float* row = out[r].data_ptr<float>();
      int64_t top = 0, second = -1;
      for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > row[top]) top = v;
      for (int64_t v = 0; v < vocab; ++v)
        if (v != top && (second < 0 || row[v] > row[second])) second = v;
      row[second] = verify ? row[top] : std::nextafter(row[top], -std::numeric_limits<float>::infinity());
    }
    return out;
  }

 private:
  const Model& inner_;
};

// A KV manager and a layer_skip drafter (first 3 layers, gamma 3) over `target`, and the greedy
// check of `target` with them: the setup of the planted-bug tests.
struct BrokenTargetRun {
  explicit BrokenTargetRun(const Model& target) : target_(&target) {
    pool = kv.add_pool(target.config().kv_geometry());
    options.name = "layer_skip";
    options.draft_layers_first = 3;
    options.num_speculative_tokens = 3;
    drafter = drafter_registry().create(options, DrafterEnv{&target, &kv, pool, target.config().vocab_size});
  }
  GreedyCheck check(const TokenDecoder& tokenizer, const TokenList& prompt, const GenerationOptions& gen) {
    return check_greedy(*target_, tokenizer, prompt, gen, *drafter, options, {&kv, pool});
  }
  const Model* target_ = nullptr;
  KvCacheManager kv{KvOptions{}};
  PoolId pool{};
  DrafterOptions options;
  std::unique_ptr<Drafter> drafter;
};

// A config for the runner on stories260K with one prompt and a layer_skip drafter.
ExperimentConfig stories_config(int64_t samples, double t, double top_p, int64_t top_k, int gamma) {
  ExperimentConfig c;
  c.name = "test_equivalence";
  c.source_path = "test_equivalence";
  c.models.target.path = "stories260K";
  c.prompts.chat = "off";
  c.prompts.inline_prompts = {{"dog", "", "The little dog"}};
  DrafterEntry d;
  d.label = "layer_skip";
  d.options.name = "layer_skip";
  d.options.draft_layers_first = 3;
  c.drafters = {d};
  c.generation.max_new_tokens = 24;
  c.sampling.seed = 20240501;
  EquivalenceOptions eq;
  eq.greedy = false;
  eq.analytic = false;
  eq.sampling = true;
  eq.samples = samples;
  eq.positions = {1, 2};
  eq.temperatures = {t};
  eq.top_ps = {top_p};
  eq.top_ks = {top_k};
  eq.gammas = {gamma};
  eq.contexts = 1;
  eq.verifier = false;  // tests/stats/test_verifier_check.cpp; the end-to-end test turns it on
  // The realistic ones ("realistic controls" below has all): top_p_on_p_only only where top_p < 1,
  // since a listed control that no setting exercises is refused.
  eq.controls = top_p < 1.0 ? std::vector<std::string>{"always_accept", "top_p_on_p_only"}
                            : std::vector<std::string>{"always_accept"};
  c.equivalence = eq;
  return c;
}

int run_cli(const std::string& args, std::string* out_text = nullptr) {
  const fs::path dir = fs::path(SPECLAB_BINARY_DIR) / "test_equivalence_tmp";
  const std::string out = (dir / "cli.out").string(), err = (dir / "cli.err").string();
  const std::string cmd = std::string(SPECLAB_CLI) + " " + args + " > '" + out + "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  if (out_text) {
    std::ifstream f(out);
    std::ifstream e(err);
    *out_text = std::string(std::istreambuf_iterator<char>(f), {}) + std::string(std::istreambuf_iterator<char>(e), {});
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

fs::path temp_dir() {
  const fs::path dir = fs::path(SPECLAB_BINARY_DIR) / "test_equivalence_tmp";
  fs::create_directories(dir);
  return dir;
}

}  // namespace

// ---- statistics ---------------------------------------------------------------------------------

TEST_CASE("two-sample chi-square, G and TV match an independent mpmath computation", "[equivalence][stats]") {
  // Reference: the textbook formulas evaluated in Python with mpmath at 30 digits
  // (X² = Σ (O-E)²/E, G = 2 Σ O ln(O/E), E = row total x column total / N, p = Q(dof/2, X²/2)).
  TestStatistics r = two_sample_test({120, 80, 60, 40}, {100, 95, 70, 35});
  CHECK(r.dof == 3);
  CHECK(r.cells == 4);
  CHECK(r.statistic == Approx(4.2064602064602065).epsilon(1e-12));
  CHECK(r.p_value == Approx(0.24001589146178755).epsilon(1e-10));
  CHECK(r.g_statistic == Approx(4.2115596589367117).epsilon(1e-12));
  CHECK(r.g_p_value == Approx(0.23950708953062084).epsilon(1e-10));
  CHECK(r.tv == Approx(1.0 / 12.0).epsilon(1e-12));
  CHECK(r.n_a == 300);
  CHECK(r.n_b == 300);

  // The last three categories (combined counts 7, 3, 3: expected < 5 in each sample) are pooled
  // into one cell, which reaches 5 and stays on its own: the 2 x 3 table [200 150 6; 190 160 7].
  TestStatistics q = two_sample_test({200, 150, 3, 2, 1}, {190, 160, 4, 1, 2});
  CHECK(q.cells == 3);
  CHECK(q.dof == 2);
  CHECK(q.statistic == Approx(0.65451274142615848).epsilon(1e-12));
  CHECK(q.p_value == Approx(0.72089890196814682).epsilon(1e-10));
  CHECK(q.g_statistic == Approx(0.65467156731101278).epsilon(1e-12));
  CHECK(q.tv == Approx(0.029584867654927139).epsilon(1e-10));

  // Identical samples: nothing to reject. A category seen in one sample only is a strong signal.
  TestStatistics same = two_sample_test({50, 30, 20}, {50, 30, 20});
  CHECK(same.statistic == 0.0);
  CHECK(same.p_value == 1.0);
  TestStatistics apart = two_sample_test({500, 0}, {0, 500});
  CHECK(apart.p_value < 1e-100);
  CHECK(apart.tv == 1.0);

  CHECK_THROWS_AS(two_sample_test({1, 2}, {1}), Error);
  CHECK_THROWS_AS(two_sample_test({0, 0}, {1, 2}), Error);
  CHECK_THROWS_AS(two_sample_test({-1, 2}, {1, 2}), Error);
}

TEST_CASE("one-sample test agrees with pearson_chi_square and mpmath, and the pooled form equals the dense one",
          "[equivalence][stats]") {
  TestStatistics r = one_sample_test({48, 35, 17}, {0.5, 0.3, 0.2});
  CHECK(r.statistic == Approx(1.3633333333333333).epsilon(1e-12));
  CHECK(r.p_value == Approx(0.50577333395561323).epsilon(1e-10));
  CHECK(r.g_statistic == Approx(1.3459925110392418).epsilon(1e-12));
  CHECK(r.g_p_value == Approx(0.5101776627874918).epsilon(1e-10));

  // Random sparse tables: the same statistic, dof and p-value as framework/verify/stats.h.
  Rng rng(7);
  for (int rep = 0; rep < 50; ++rep) {
    const int k = 5 + static_cast<int>(rng.uniform() * 60);
    std::vector<double> p(static_cast<size_t>(k));
    std::vector<int64_t> obs(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) {
      p[static_cast<size_t>(i)] = std::pow(rng.uniform(), 4.0);  // many small cells
      obs[static_cast<size_t>(i)] = static_cast<int64_t>(rng.uniform() * 40);
    }
    obs[0] += 1;
    const ChiSquareResult ref = pearson_chi_square(obs, p, 5.0);
    const TestStatistics mine = one_sample_test(obs, p, 5.0);
    INFO("rep " << rep);
    CHECK(mine.statistic == Approx(ref.statistic).epsilon(1e-12));
    CHECK(mine.dof == ref.dof);
    CHECK(mine.cells == ref.n_cells);
    CHECK(mine.p_value == Approx(ref.p_value).epsilon(1e-9).margin(1e-300));

    // Pre-aggregating the sparse cells gives the same test.
    double sum = 0.0;
    int64_t n = 0;
    for (int i = 0; i < k; ++i) {
      sum += p[static_cast<size_t>(i)];
      n += obs[static_cast<size_t>(i)];
    }
    std::vector<double> reg_p;
    std::vector<int64_t> reg_o;
    double pool_p = 0.0;
    int64_t pool_o = 0;
    for (int i = 0; i < k; ++i) {
      const double pi = p[static_cast<size_t>(i)] / sum;
      if (static_cast<double>(n) * pi >= 5.0) {
        reg_p.push_back(pi);
        reg_o.push_back(obs[static_cast<size_t>(i)]);
      } else {
        pool_p += pi;
        pool_o += obs[static_cast<size_t>(i)];
      }
    }
    const TestStatistics pooled = one_sample_test_pooled(reg_o, reg_p, pool_p, pool_o, 0, 5.0);
    CHECK(pooled.statistic == Approx(mine.statistic).epsilon(1e-9));
    CHECK(pooled.dof == mine.dof);
    CHECK(pooled.tv == Approx(mine.tv).epsilon(1e-9));
  }
  // A draw in a cell of probability 0 is impossible under the reference.
  TestStatistics imp = one_sample_test({10, 10, 1}, {0.5, 0.5, 0.0});
  CHECK(std::isinf(imp.statistic));
  CHECK(imp.p_value == 0.0);
  CHECK_THROWS_AS(one_sample_test_pooled({5}, {0.5}, 0.2, 1, 0), Error);  // probabilities sum to 0.7
}

TEST_CASE("holm_adjust matches R's p.adjust(method = 'holm')", "[equivalence][stats]") {
  // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") -> 0.03 0.06 0.06 0.02
  const std::vector<double> adj = holm_adjust({0.01, 0.04, 0.03, 0.005});
  REQUIRE(adj.size() == 4);
  CHECK(adj[0] == Approx(0.03));
  CHECK(adj[1] == Approx(0.06));
  CHECK(adj[2] == Approx(0.06));
  CHECK(adj[3] == Approx(0.02));
  // R: p.adjust(c(0.5, 0.001, 0.2), "holm") -> 0.5 0.003 0.4
  const std::vector<double> b = holm_adjust({0.5, 0.001, 0.2});
  CHECK(b[0] == Approx(0.5));
  CHECK(b[1] == Approx(0.003));
  CHECK(b[2] == Approx(0.4));
  CHECK(holm_adjust({}).empty());
  CHECK_THROWS_AS(holm_adjust({0.1, std::nan("")}), Error);
  CHECK_THROWS_AS(holm_adjust({1.5}), Error);
}

TEST_CASE("the two-sample test holds its level under equality, has power under a difference, and the BHC "
          "radius covers the L1 deviation",
          "[equivalence][stats]") {
  Rng rng(11);
  auto draw = [&](const std::vector<double>& p, int64_t n) {
    std::vector<int64_t> c(p.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      double u = rng.uniform(), acc = 0.0;
      size_t j = 0;
      for (; j + 1 < p.size(); ++j) {
        acc += p[j];
        if (u < acc) break;
      }
      c[j] += 1;
    }
    return c;
  };
  const std::vector<double> p = {0.4, 0.2, 0.15, 0.1, 0.05, 0.04, 0.03, 0.02, 0.006, 0.004};
  std::vector<double> q = p;
  q[0] -= 0.06;
  q[1] += 0.06;
  int below_05 = 0, caught = 0, l1_outside = 0;
  const int reps = 300;
  for (int rep = 0; rep < reps; ++rep) {
    const auto a = draw(p, 2000), b = draw(p, 2000), c = draw(q, 2000);
    below_05 += two_sample_test(a, b).p_value < 0.05;
    caught += two_sample_test(a, c).p_value < 0.05;
    double l1 = 0.0;
    for (size_t j = 0; j < p.size(); ++j) l1 += std::fabs(static_cast<double>(a[j]) / 2000.0 - p[j]);
    l1_outside += l1 >= bhc_l1_radius(static_cast<int64_t>(p.size()), 2000, 0.1);
  }
  // Level 0.05 over 300 replications: expected 15 rejections (binomial sd ~3.8).
  CHECK(below_05 >= 3);
  CHECK(below_05 <= 30);
  CHECK(caught > reps / 2);
  CHECK(l1_outside <= reps / 10);
  CHECK(bhc_l1_radius(10, 2000, 0.1) == Approx(std::sqrt(2.0 * (10 * std::log(2.0) + std::log(10.0)) / 2000.0)));
  CHECK_THROWS_AS(bhc_l1_radius(0, 10, 0.1), Error);
  CHECK_THROWS_AS(bhc_l1_radius(3, 10, 1.0), Error);
}

// ---- model taps ---------------------------------------------------------------------------------

TEST_CASE("PrefillMemo is bit-identical to the model it wraps", "[equivalence][taps]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  PrefillMemo memo(*s.model);
  const TokenList ids = s.info.tokenizer->encode("Tom and Sue went to the park", true);
  GenerationOptions gen;
  gen.max_new_tokens = 40;
  gen.ignore_eos = true;
  SamplingOptions samp;
  samp.temperature = 0.8;
  samp.top_k = 40;
  for (uint64_t seed : {1u, 2u, 3u}) {
    samp.seed = seed;
    GenerationResult a = generate_ar(*s.model, *s.info.tokenizer, ids, gen, samp);
    GenerationResult b = generate_ar(memo, *s.info.tokenizer, ids, gen, samp);
    CHECK(a.tokens == b.tokens);
  }
  CHECK(memo.misses() == 1);
  CHECK(memo.hits() == 2);
  // Logits and K/V of a hit equal a fresh computation exactly.
  KvCacheManager kv(kv_options_for(s.model->config(), 64));
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> v(ids.begin(), ids.end());
  at::Tensor toks = at::tensor(v, at::kLong);
  KvSequence s1(kv, pool), s2(kv, pool);
  kv.reserve(s1.id(), n);
  kv.reserve(s2.id(), n);
  at::Tensor l1 = s.model->forward(toks, at::arange(n, at::kLong), kv.view(s1.id(), n), ForwardOptions{{}, 1});
  at::Tensor l2 = memo.forward(toks, at::arange(n, at::kLong), kv.view(s2.id(), n), ForwardOptions{{}, 1});
  CHECK(memo.hits() == 3);
  CHECK(at::equal(l1, l2));
  REQUIRE(kv.commit(s1.id(), n) == KvStatus::kOk);
  REQUIRE(kv.commit(s2.id(), n) == KvStatus::kOk);
  const KvView a = kv.view_at(s1.id(), 0, n), b = kv.view_at(s2.id(), 0, n);
  CHECK(at::equal(a.k_cache.index_select(1, a.write_slots), b.k_cache.index_select(1, b.write_slots)));
  CHECK(at::equal(a.v_cache.index_select(1, a.write_slots), b.v_cache.index_select(1, b.write_slots)));
  // Hidden states asked for (the eagle drafter asks for the last layer's) are remembered too: the
  // first such call is computed, the second answered from the memo, both equal the model's.
  {
    ForwardOptions fo{{}, 1};
    fo.hidden_layers = {s.model->config().num_hidden_layers - 1};
    std::vector<at::Tensor> h[3];
    at::Tensor lh[3];
    for (int r = 0; r < 3; ++r) {
      KvCacheManager kvh(kv_options_for(s.model->config(), 64));
      const PoolId ph = kvh.add_pool(s.model->config().kv_geometry());
      KvSequence sh(kvh, ph);
      kvh.reserve(sh.id(), n);
      fo.hidden_out = &h[r];
      lh[r] = (r == 0 ? static_cast<const Model&>(*s.model) : static_cast<const Model&>(memo))
                  .forward(toks, at::arange(n, at::kLong), kvh.view(sh.id(), n), fo);
      REQUIRE(h[r].size() == 1);
    }
    CHECK(memo.misses() == 2);  // the first call with hidden layers
    CHECK(memo.hits() == 4);    // the second
    for (int r = 1; r < 3; ++r) {
      CHECK(at::equal(h[0][0], h[r][0]));
      CHECK(at::equal(lh[0], lh[r]));
    }
  }
  // A different prompt is computed, not answered from the memo.
  const TokenList other = s.info.tokenizer->encode("The little dog", true);
  GenerationResult c = generate_ar(memo, *s.info.tokenizer, other, gen, samp);
  CHECK(memo.misses() == 3);
  CHECK(c.tokens == generate_ar(*s.model, *s.info.tokenizer, other, gen, samp).tokens);
}

// ---- 1. greedy exactness ------------------------------------------------------------------------

TEST_CASE("greedy exactness on stories260K: every reference prompt, drafter and gamma matches AR",
          "[equivalence][greedy]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  KvOptions kvo;
  kvo.budget_bytes = 64 << 20;
  KvCacheManager kv(kvo);
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
  std::vector<DrafterOptions> drafters(3);
  drafters[0].name = "prompt_lookup";
  drafters[1].name = "layer_skip";
  drafters[1].draft_layers_first = 3;
  drafters[2].name = "draft_model";
  drafters[2].draft_model = "stories260K";
  GenerationOptions gen;
  gen.max_new_tokens = 120;
  int runs = 0;
  for (DrafterOptions o : drafters) {
    auto drafter = drafter_registry().create(o, env);
    for (int gamma : {1, 4}) {
      o.num_speculative_tokens = gamma;
      for (const std::string& prompt : reference_prompts()) {
        const TokenList ids = s.info.tokenizer->encode(prompt, true);
        GreedyCheck g = check_greedy(*s.model, *s.info.tokenizer, ids, gen, *drafter, o, {&kv, pool});
        INFO(o.name << " gamma " << gamma << ": " << prompt);
        CHECK(g.match);
        CHECK(g.classification == "match");
        CHECK(g.first_divergence == -1);
        CHECK(g.n_ar == g.n_spec);
        CHECK(g.n_ar > 0);
        // The CPU backend promises bit-identical rows (Model::row_exact_batch), so both passes
        // computed exactly the same logits for the same prefixes.
        CHECK(g.bit_identity);
        CHECK(g.max_logit_diff == 0.0);
        ++runs;
      }
    }
  }
  CHECK(runs == 3 * 2 * 5);  // 3 drafters x 2 gammas x run.c's 5 reference prompts
  CHECK(kv.bytes_used() == 0);
}

TEST_CASE("the greedy check calls a verification pass that disagrees with AR a bug", "[equivalence][greedy]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  const Token victim = 100;
  BrokenVerification broken(*s.model, victim, 50.0f);
  BrokenTargetRun run(broken);
  GenerationOptions gen;
  gen.max_new_tokens = 40;
  const TokenList ids = s.info.tokenizer->encode("Once upon a time", true);
  GreedyCheck g = run.check(*s.info.tokenizer, ids, gen);
  CHECK_FALSE(g.match);
  CHECK(g.first_divergence >= 1);  // position 0 comes from the (correct) prefill
  CHECK(g.spec_token == victim);
  CHECK(g.ar_token != victim);
  CHECK(g.margin_verify > 10.0);
  CHECK(g.classification == "bug");
  CHECK(g.max_logit_diff >= 49.0);
}

TEST_CASE("a planted tie-breaking bug fails the greedy check (a margin of 0 is never numerical)",
          "[equivalence][greedy]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  TieBreakingBug broken(*s.model);
  CHECK(broken.row_exact_batch() == 0);
  BrokenTargetRun run(broken);
  GenerationOptions gen;
  gen.max_new_tokens = 60;
  int diverged = 0;
  for (const std::string& prompt : reference_prompts()) {
    const TokenList ids = s.info.tokenizer->encode(prompt, true);
    GreedyCheck g = run.check(*s.info.tokenizer, ids, gen);
    INFO(prompt << ": classification " << g.classification << ", margins " << g.margin_ar << " / " << g.margin_verify);
    CHECK_FALSE(g.bit_identity);
    if (g.match) continue;
    ++diverged;
    CHECK(g.margin_verify == 0.0);
    CHECK(g.margin_ar > 0.0);
    CHECK(g.margin_ar <= g.tolerance);  // by margins alone this flip looks numerical
    CHECK(g.classification == "bug");
  }
  CHECK(diverged > 0);  // the planted bug did change some output
}

TEST_CASE("divergence classification and the numerical tolerance", "[equivalence][greedy]") {
  CHECK(classify_divergence(1e-6, 2e-6, 1e-4) == "numerical");
  CHECK(classify_divergence(0.0, 1e-6, 1e-4) == "bug");  // a tie is never numerical
  CHECK(classify_divergence(1e-6, 0.0, 1e-4) == "bug");
  CHECK(classify_divergence(1e-6, 0.5, 1e-4) == "bug");
  CHECK(classify_divergence(0.5, 1e-6, 1e-4) == "bug");
  CHECK(classify_divergence(std::nan(""), 0.0, 1e-4) == "bug");
  const float row[] = {1.0f, 3.0f, 2.5f, -4.0f};
  CHECK(top2_margin(row, 4) == Approx(0.5));
  CHECK(top2_margin(row, 1) == 0.0);
  CHECK_THROWS_AS(top2_margin(row, 0), Error);
  ModelConfig c;
  c.num_hidden_layers = 5;
  c.hidden_size = 64;
  c.intermediate_size = 172;
  // 8 (2L + 1) sqrt(K_max) 2^-24 |logit|
  CHECK(numerical_tolerance(c, 10.0) == Approx(8.0 * 11.0 * std::sqrt(172.0) * std::ldexp(1.0, -24) * 10.0));
  c.num_hidden_layers = 30;
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  CHECK(numerical_tolerance(c, 1.0) == Approx(1.14e-3).epsilon(0.01));
}

// ---- 2. analytic ------------------------------------------------------------------------------

TEST_CASE("analytic: the first token of one verification step is distributed exactly as p on stories260K",
          "[equivalence][analytic]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  const std::vector<int64_t> layers = {0, 1, 2};
  double worst = 0.0, aa = 0.0, tp = 0.0;
  int rows = 0;
  for (const std::string& prompt : reference_prompts()) {
    TokenList ctx = s.info.tokenizer->encode(prompt, true);
    GenerationOptions gen;
    gen.max_new_tokens = 16;
    const TokenList cont = generate_ar(*s.model, *s.info.tokenizer, ctx, gen, SamplingOptions{}).tokens;
    for (size_t off : {size_t{0}, size_t{8}, size_t{16}}) {
      TokenList c = ctx;
      c.insert(c.end(), cont.begin(), cont.begin() + static_cast<std::ptrdiff_t>(std::min(off, cont.size())));
      const std::vector<float> p = next_token_logits(*s.model, c);
      const std::vector<float> q = next_token_logits(*s.model, c, layers);
      for (double t : {0.5, 1.0})
        for (double top_p : {1.0, 0.9})
          for (int64_t top_k : {int64_t{0}, int64_t{20}}) {
            SamplingOptions so;
            so.temperature = t;
            so.top_p = top_p;
            so.top_k = top_k;
            const AnalyticErrors e = analytic_step_errors(p.data(), q.data(), s.model->config().vocab_size, so);
            INFO(prompt << " +" << off << " T=" << t << " top_p=" << top_p << " top_k=" << top_k);
            CHECK(e.lossless < 1e-6);
            CHECK(e.deterministic < 1e-6);
            worst = std::max({worst, e.lossless, e.deterministic});
            aa = std::max(aa, e.always_accept);
            if (top_p < 1.0) {
              CHECK_FALSE(std::isnan(e.top_p_on_p_only));
              tp = std::max(tp, e.top_p_on_p_only);
            } else {
              CHECK(std::isnan(e.top_p_on_p_only));
            }
            ++rows;
          }
    }
  }
  CHECK(rows == 5 * 3 * 8);
  CHECK(worst < 1e-6);
  // The faulty rules are far off on the same p and q: the enumeration can fail.
  CHECK(aa > 0.05);
  CHECK(tp > 1e-3);
  // Next-token logits computed as the engine does: the target's equal the AR decode logits.
  const TokenList ctx = s.info.tokenizer->encode("The little dog", true);
  const std::vector<float> p = next_token_logits(*s.model, ctx);
  GenerationOptions one;
  one.max_new_tokens = 1;
  CHECK(generate_ar(*s.model, *s.info.tokenizer, ctx, one, SamplingOptions{}).tokens[0] ==
        argmax(p.data(), static_cast<int64_t>(p.size())));
  SamplingOptions greedy;
  CHECK_THROWS_AS(analytic_step_errors(p.data(), p.data(), static_cast<int64_t>(p.size()), greedy), Error);
  CHECK_THROWS_AS(next_token_logits(*s.model, TokenList{}), Error);
}

// ---- 3 + 4. empirical sampling check with negative controls --------------------------------------

TEST_CASE("sampling on stories260K at N = 20000: the lossless engine passes and both controls are caught",
          "[equivalence][sampling]") {
  c10::InferenceMode guard;
  stories();  // threads
  struct Cell {
    double t, top_p;
    int64_t top_k;
    int gamma;
  };
  for (const Cell& cell : {Cell{1.0, 0.9, 0, 4}, Cell{0.5, 1.0, 20, 1}}) {
    const ExperimentConfig cfg = stories_config(20000, cell.t, cell.top_p, cell.top_k, cell.gamma);
    const EquivalenceReport r = run_equivalence(cfg);
    INFO(format_equivalence_report(r));
    REQUIRE(r.cells.size() == 1);
    const SamplingCell& c = r.cells[0];
    CHECK(c.n == 20000);
    CHECK(c.acceptance_rate > 0.1);
    CHECK(c.acceptance_rate < 0.95);
    // Lossless engines: Pearson (Holm-adjusted) and G (Bonferroni) do not reject at 0.001.
    int lossless = 0, speculative = 0;
    for (const TestRow& t : r.tests) {
      if (t.test.subject != "ar" && t.test.subject != "speculative") continue;
      CHECK(t.in_family);  // one Holm family, position 1 included
      ++lossless;
      speculative += t.test.subject == "speculative";
      INFO(t.test.subject << " " << t.test.test << " m=" << t.test.m << ": X2 " << t.test.stats.statistic << ", dof "
                          << t.test.stats.dof << ", p " << t.test.stats.p_value);
      CHECK(t.test.stats.n_a == 20000);
      CHECK(t.holm_p >= 0.001);
      CHECK(t.test.stats.g_p_value * static_cast<double>(r.family_size) >= 0.001);
      CHECK(t.test.stats.dof >= 1);  // something was tested
      CHECK(t.test.stats.tv <= t.test.stats.tv_radius);
    }
    // speculative: joint m=1, joint m=2, marginal 2, exact 1, exact 2; ar: exact 1, exact 2.
    CHECK(speculative == 5);
    CHECK(lossless == 7);
    CHECK(r.family_size == 7);  // every lossless test, position 1 included (a second family gave up to 2 alpha)
    CHECK(r.sampling_pass);
    // Negative controls: rejected by the same tests at the same N, p < 1e-6 after Bonferroni.
    REQUIRE(c.controls.size() == (cell.top_p < 1.0 ? 2u : 1u));
    const ControlOutcome& aa = *c.control("always_accept");
    REQUIRE(aa.applicable);
    CHECK(aa.caught);
    CHECK(aa.min_p * static_cast<double>(aa.tests) < 1e-6);
    CHECK(aa.power_n > 0);
    CHECK(aa.power_n <= 20000);
    if (cell.top_p < 1.0) {
      const ControlOutcome& tp = *c.control("top_p_on_p_only");
      REQUIRE(tp.applicable);
      CHECK(tp.caught);
      CHECK(tp.min_p * static_cast<double>(tp.tests) < 1e-6);
      CHECK(tp.power_n > 0);
    } else {  // at top_p = 1 it has nothing to change: listing it is refused (the bad-input test below)
      CHECK(c.control("top_p_on_p_only") == nullptr);
    }
    CHECK(r.controls_pass);
    CHECK(r.pass());
    // The power curve starts at 250 and doubles up to N.
    std::vector<int64_t> grid;
    for (const PowerRow& p : r.power)
      if (p.control == "always_accept") grid.push_back(p.point.n);
    CHECK(grid == std::vector<int64_t>{250, 500, 1000, 2000, 4000, 8000, 16000, 20000});
    // Position 1 precedes verification: no rule can change it, so its marginal never catches a control.
    for (const TestRow& t : r.tests)
      if (t.test.subject == "always_accept" && t.test.test == "joint" && t.test.m == 1) CHECK(t.test.stats.p_value > 1e-6);
  }
}

// stories_config's layer_skip 3/5 behind 2- to 3-gram prompt lookup (gamma 3, the wrapped drafter
// drafting at most 2) on a repetitive context, positions 2..5.
ExperimentConfig lookup_first_config(int64_t samples, double t, int64_t top_k) {
  ExperimentConfig cfg = stories_config(samples, t, 1.0, top_k, 3);
  cfg.prompts.inline_prompts[0].text = "The little dog was happy. The little dog";
  DrafterOptions& o = cfg.drafters[0].options;
  o.prompt_lookup_first = true;
  o.prompt_lookup_min = 2;
  o.fallback_speculative_tokens = 2;
  cfg.equivalence->positions = {2, 3, 4, 5};
  return cfg;
}

// A drafter behind prompt lookup (prompt_lookup_first; sources_first.h) mixes blocks of two kinds
// in one sequence: lookup continuations without q (one-hot) and layer-skip drafts with their q.
// Through the engine at T 0.7 and 1 on a repetitive context: the first block is the lookup's
// ("little dog" was seen: "was happy. The"), later ones either kind, as the draws go. Positions
// 2..5 cover the first block and the next. Lossless, and always-accept is caught.
TEST_CASE("prompt_lookup_first under sampling: lookup and drafter blocks in one sequence stay lossless",
          "[equivalence][sampling][prompt_lookup]") {
  c10::InferenceMode guard;
  stories();
  for (double t : {0.7, 1.0}) {
    ExperimentConfig cfg = lookup_first_config(8000, t, 0);
    cfg.equivalence->controls = {"always_accept"};
    const EquivalenceReport r = run_equivalence(cfg);
    INFO("T " << t << "\n" << format_equivalence_report(r));
    REQUIRE(r.cells.size() == 1);
    const SamplingCell& c = r.cells[0];
    CHECK(c.n == 8000);
    CHECK(c.acceptance_rate > 0.1);
    CHECK(r.sampling_pass);
    const ControlOutcome& aa = *c.control("always_accept");
    CHECK(aa.applicable);
    CHECK(aa.caught);
    CHECK(r.controls_pass);
    CHECK(r.pass());
  }

  // The drafter-side controls and the verifier check see the wrapped layer_skip draft: its blocks
  // carry logits, the lookup's do not (until 2026-11-29 the controls stopped the check with "needs
  // the draft's raw logits", and the drafter counted as one without logits whenever the lookup
  // answered the trial step, so the verifier check tested a substitute draft).
  ExperimentConfig cfg = lookup_first_config(4000, 0.7, 5);
  cfg.equivalence->controls = {"q_drawn_top_k"};
  cfg.equivalence->verifier = true;
  cfg.equivalence->verifier_gammas = {1, 2};
  cfg.equivalence->verifier_samples = 20000;
  const EquivalenceReport r = run_equivalence(cfg);
  INFO(format_equivalence_report(r));
  REQUIRE(r.cells.size() == 1);
  const ControlOutcome& qk = *r.cells[0].control("q_drawn_top_k");
  CHECK(qk.ran);
  CHECK_THAT(qk.note, !Contains("no draft logits"));
  CHECK(qk.q_tv > 0.0);
  REQUIRE_FALSE(r.verifier.empty());
  for (const VerifierCellRow& v : r.verifier) CHECK(v.draft == "layer_skip");
  CHECK(r.sampling_pass);
  CHECK(r.verifier_pass);
}

// Issue 14, items 2 and 3 through `speclab check` itself: the realistic controls are keys of the
// `equivalence` section and run through the real engine. stories260K, "The little dog was happy.
// The little dog" (open-ended and repetitive), layer_skip 3/5, gamma 2, T = 0.7, top_k = 5,
// positions up to gamma + 2 = 4 (a whole first block: drafts, recovered and bonus tokens).
TEST_CASE("realistic controls through speclab check: each is caught, the lossless engine passes",
          "[equivalence][sampling][controls]") {
  c10::InferenceMode guard;
  stories();
  ExperimentConfig cfg = stories_config(8000, 0.7, 1.0, 5, 2);
  cfg.prompts.inline_prompts[0].text = "The little dog was happy. The little dog";
  cfg.equivalence->positions = {2, 3, 4};
  // Every control but top_p_on_p_only, which top_p = 1 leaves nothing to change (listing it is
  // refused; the N = 20000 test above catches it at top_p 0.9).
  cfg.equivalence->controls.clear();
  for (const std::string& name : engine_control_names())
    if (name != "top_p_on_p_only") cfg.equivalence->controls.push_back(name);
  const EquivalenceReport r = run_equivalence(cfg);
  INFO(format_equivalence_report(r));
  REQUIRE(r.cells.size() == 1);
  const SamplingCell& c = r.cells[0];
  REQUIRE(c.controls.size() == 8);
  CHECK(r.sampling_pass);
  CHECK(c.detectable_tv > 0.0);
  CHECK(c.detectable_tv < 0.1);
  for (const char* name : {"always_accept", "replacement_from_p", "bonus_from_row_k-1", "q_at_temperature_1",
                           "residual_unnormalised", "p_row_off_by_one", "shared_draws"}) {
    INFO(name);
    const ControlOutcome& o = *c.control(name);
    CHECK(o.applicable);
    CHECK(o.caught);
    CHECK(o.power_n > 0);
    WARN("speclab check control " << name << " (stories260K, layer_skip 3/5, gamma 2, T=0.7 top_k=5, positions "
                                  "2..4): caught at N = " << o.power_n << ", q TV " << o.q_tv);
  }
  // q drawn from the top-5 but reported in full: applicable when the truncation matters on the
  // visited rows (q TV >= 0.015), and then it must be caught.
  const ControlOutcome& qk = *c.control("q_drawn_top_k");
  CHECK(qk.ran);
  CHECK(qk.q_tv > 0.0);
  if (qk.applicable) CHECK(qk.caught);
  WARN("q_drawn_top_k: q TV " << qk.q_tv << ", " << (qk.caught ? "caught at N = " + std::to_string(qk.power_n) : qk.note));
  CHECK(r.controls_pass);
  CHECK(r.pass());

  // The bonus control needs the bonus among the recorded positions: at gamma 4 (bonus at 6) it
  // cannot run, so listing it is refused, saying why. EOS and the stop string "happy" active (the
  // context's own continuation, so many draws stop within the recorded positions): draws that
  // stop are padded with "ended", only the two-sample tests run, and the lossless engine still
  // passes.
  cfg = stories_config(2000, 0.7, 1.0, 5, 4);
  cfg.prompts.inline_prompts[0].text = "The little dog was happy. The little dog";
  cfg.equivalence->positions = {2, 3, 4};
  cfg.equivalence->controls = {"bonus_from_row_k-1", "always_accept"};
  cfg.equivalence->eos_and_stop = true;
  cfg.generation.stop = {"happy"};
  CHECK_THROWS_WITH(run_equivalence(cfg), Contains("bonus_from_row_k-1") && Contains("gamma + 2 = 6"));
  cfg.equivalence->controls = {"always_accept"};
  const EquivalenceReport e = run_equivalence(cfg);
  INFO(format_equivalence_report(e));
  REQUIRE(e.cells.size() == 1);
  CHECK(e.cells[0].control("always_accept")->caught);
  bool ended = false;
  for (const TestRow& t : e.tests) CHECK(t.test.test != "exact");
  for (const FrequencyRow& f : e.frequencies) ended = ended || f.token == kEndedDraw;
  CHECK(ended);  // some draws stopped within 4 tokens
  CHECK(e.sampling_pass);
}

TEST_CASE("draws and statistics are a pure function of the seed", "[equivalence][sampling]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  KvCacheManager kv(KvOptions{});
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
  DrafterOptions o;
  o.name = "layer_skip";
  o.draft_layers_first = 3;
  o.num_speculative_tokens = 2;
  auto drafter = drafter_registry().create(o, env);
  DrawPlan plan;
  plan.context = s.info.tokenizer->encode("The little dog", true);
  plan.sampling.temperature = 1.0;
  plan.m = 3;
  plan.n = 300;
  plan.seed_base = 99;
  plan.stream = 5;
  PrefillMemo memo(*s.model);
  const Draws a = draw_speculative(memo, *s.info.tokenizer, plan, *drafter, o, {&kv, pool});
  const Draws b = draw_speculative(*s.model, *s.info.tokenizer, plan, *drafter, o, {&kv, pool});  // no memo
  CHECK(a.tokens == b.tokens);
  CHECK(a.accepted == b.accepted);
  CHECK(a.n() == 300);
  plan.stream = 6;
  const Draws ar = draw_ar(memo, *s.info.tokenizer, plan, {&kv, pool});
  const auto t1 = compare_with_ar(ar, a, "speculative", {1, 2, 3}, {2, 3}, 300, 5.0, 1e-3);
  const auto t2 = compare_with_ar(ar, b, "speculative", {1, 2, 3}, {2, 3}, 300, 5.0, 1e-3);
  REQUIRE(t1.size() == 5);
  for (size_t i = 0; i < t1.size(); ++i) {
    CHECK(t1[i].stats.statistic == t2[i].stats.statistic);
    CHECK(t1[i].stats.p_value == t2[i].stats.p_value);
  }
  plan.seed_base = 100;
  plan.stream = 5;
  const Draws c = draw_speculative(memo, *s.info.tokenizer, plan, *drafter, o, {&kv, pool});
  CHECK(c.tokens != a.tokens);
  // Three rounds of splitmix64 (Steele, Lea & Flood 2014), computed apart from the code in Python.
  CHECK(draw_seed(1, 2, 3) == 0xd0734750fde362b3ULL);
  CHECK(draw_seed(1, 2, 3) != draw_seed(1, 2, 4));
  CHECK(draw_seed(1, 2, 3) != draw_seed(1, 3, 3));
  CHECK(kv.bytes_used() == 0);  // stopped draws released their sequences
  // Temperature 0 is refused with the reason.
  plan.sampling.temperature = 0.0;
  CHECK_THROWS_WITH(draw_ar(memo, *s.info.tokenizer, plan, {&kv, pool}), Contains("temperature"));
}

// ---- verdict, bad input, HDF5, CLI ---------------------------------------------------------------

TEST_CASE("verdict: Holm over the family, a rejected test or a missed control fails the check",
          "[equivalence][verdict]") {
  EquivalenceReport r;
  r.alpha = 0.01;
  r.control_alpha = 1e-6;
  r.groups.resize(1);
  r.cells.resize(1);
  r.control_names = {"always_accept"};
  r.cells[0].controls.resize(1);
  r.cells[0].controls[0].name = "always_accept";
  r.cells[0].controls[0].applicable = true;
  r.cells[0].controls[0].min_p = 1e-9;  // caught: finalize judges it from min p and its tests
  r.cells[0].controls[0].tests = 2;
  auto row = [](const char* subject, double p, int64_t cell) {
    TestRow t;
    t.cell = cell;
    t.test.subject = subject;
    t.test.test = "joint";
    t.test.stats.p_value = p;
    return t;
  };
  r.tests = {row("speculative", 0.004, 0), row("speculative", 0.5, 0), row("ar", 0.02, -1),
             row("always_accept", 1e-9, 0), row("always_accept", 0.3, 0)};
  finalize_sampling_verdict(r);
  CHECK(r.family_size == 3);
  CHECK(r.tests[0].holm_p == Approx(0.012));  // 3 x 0.004
  CHECK_FALSE(r.tests[0].reject);
  CHECK_FALSE(r.sampling_pass);  // no test rejects, but cell 0 tests nothing (below)
  CHECK(r.tests[3].reject);  // 1e-9 x 2 tests < 1e-6
  CHECK_FALSE(r.tests[4].reject);
  CHECK(r.controls_pass);
  // Every speculative test of cell 0 has 0 degrees of freedom: the cell compares nothing, which
  // fails the check (issue 14: no vacuous passes).
  CHECK_FALSE(r.sampling_pass);
  REQUIRE(r.failures.size() == 1);
  CHECK_THAT(r.failures[0], Contains("0 degrees of freedom") && Contains("tests nothing"));
  CHECK_FALSE(r.cells[0].pass);  // the cell's own row agrees (sampling_cells.pass read 1 until 2026-12-06)
  r.tests[1].test.stats.dof = 3;
  finalize_sampling_verdict(r);
  CHECK(r.failures.empty());
  CHECK(r.sampling_pass);
  CHECK(r.cells[0].pass);
  // Position-1 tests (m = 1: the prefill sample) are in the one Holm family, so that the check's
  // family-wise error rate is alpha (a family of their own at alpha gave up to 2 alpha).
  {
    EquivalenceReport q = r;
    TestRow p1 = row("speculative", 0.004, 0);
    p1.test.m = 1;
    p1.test.stats.dof = 2;
    q.tests.push_back(p1);
    finalize_sampling_verdict(q);
    CHECK(q.family_size == 4);
    CHECK(q.tests.back().in_family);
    CHECK(q.tests.back().holm_p == Approx(0.016));  // 4 x 0.004: the smallest of 4
    CHECK(q.tests[0].holm_p == Approx(0.016));      // max(4 x 0.004, 3 x 0.004)
    // At alpha 0.015 neither family alone would reject with its own Holm (0.004 alone: 0.004;
    // 0.004 among 3: 0.012), the one family of 4 does not either: the rate is alpha, not 2 alpha.
  }
  // A drafter that proposed no tokens in any draw of any cell (acceptance NaN) verified nothing:
  // a failure. One cell without drafts beside cells with drafts is a note.
  {
    EquivalenceReport q = r;
    q.cells[0].drafter = "lookup";
    q.cells[0].acceptance_rate = std::nan("");
    finalize_sampling_verdict(q);
    CHECK_FALSE(q.sampling_pass);
    REQUIRE(q.failures.size() == 1);
    CHECK_THAT(q.failures[0], Contains("drafter lookup") && Contains("proposed no tokens") && Contains("tests nothing"));
    q.cells.push_back(q.cells[0]);
    q.cells[1].index = 1;
    q.cells[1].acceptance_rate = 0.5;
    finalize_sampling_verdict(q);
    CHECK(q.sampling_pass);
    CHECK(q.failures.empty());
    REQUIRE(q.notes.size() == 1);
    CHECK_THAT(q.notes[0], Contains("cell 0") && Contains("proposed no tokens"));
  }
  r.tests[0].test.stats.p_value = 0.001;  // 3 x 0.001 < 0.01
  r.cells[0].controls[0].min_p = 0.3;  // not caught
  finalize_sampling_verdict(r);
  CHECK_FALSE(r.sampling_pass);
  CHECK_FALSE(r.cells[0].pass);
  CHECK_FALSE(r.controls_pass);
  CHECK_FALSE(r.pass());
  REQUIRE(r.failures.size() == 2);
  CHECK_THAT(r.failures[0], Contains("rejects equality"));
  CHECK_THAT(r.failures[1], Contains("NOT caught"));
}

// A speculative joint test of cell 0 at a verified position that rejects nothing.
TestRow passing_joint_test() {
  TestRow t;
  t.cell = 0;
  t.test.subject = "speculative";
  t.test.test = "joint";
  t.test.m = 2;
  t.test.stats.p_value = 0.5;
  t.test.stats.dof = 3;
  return t;
}

TEST_CASE("verdict: a control is caught only where the lossless family would reject it too",
          "[equivalence][verdict]") {
  // control_alpha < alpha did not ensure it (found by a probe, 2026-12-06): at control_alpha 9e-4, a
  // control with min p 5e-5 over 7 tests counted as caught (3.5e-4 < 9e-4) while Holm over 64
  // lossless tests rejects only below 1e-3 / 64 = 1.6e-5.
  EquivalenceReport r;
  r.alpha = 1e-3;
  r.control_alpha = 9e-4;
  r.groups.resize(1);
  r.cells.resize(1);
  r.cells[0].acceptance_rate = 0.5;
  r.control_names = {"shared_draws"};
  r.cells[0].controls.resize(1);
  ControlOutcome& o = r.cells[0].controls[0];
  o.name = "shared_draws";
  o.applicable = true;
  o.tests = 7;
  o.min_p = 5e-5;
  r.tests.assign(64, passing_joint_test());
  TestRow c = r.tests[0];
  c.test.subject = "shared_draws";
  c.test.stats.p_value = 5e-5;
  r.tests.push_back(c);
  r.power = {{0, "shared_draws", {250, 4e-5, 7, true}}, {0, "shared_draws", {500, 5e-5, 7, true}}};
  finalize_sampling_verdict(r);
  CHECK(r.family_size == 64);
  CHECK_FALSE(o.caught);
  CHECK(o.power_n == -1);  // the power grid's catches at 250 and 500 are no catch either
  CHECK_FALSE(r.power[0].point.caught);
  CHECK_FALSE(r.tests.back().reject);
  CHECK_FALSE(r.controls_pass);
  REQUIRE(r.failures.size() == 1);
  CHECK_THAT(r.failures[0], Contains("shared_draws NOT caught") && Contains("p x 64 lossless tests < alpha 0.001"));
  // Below both thresholds it is caught, with its power N.
  o.min_p = 1e-6;
  r.tests.back().test.stats.p_value = 1e-6;
  r.power[1].point.min_p = 1e-6;
  finalize_sampling_verdict(r);
  CHECK(o.caught);
  CHECK(o.power_n == 500);
  CHECK(r.tests.back().reject);
  CHECK(r.controls_pass);
  CHECK(r.failures.empty());
}

TEST_CASE("verdict: a control that ran in no cell fails when listed, is noted when defaulted, and none at all fails",
          "[equivalence][verdict]") {
  EquivalenceReport r;
  r.alpha = 0.001;
  r.control_alpha = 1e-6;
  r.groups.resize(1);
  r.cells.resize(2);
  r.control_names = {"always_accept", "q_drawn_top_k"};
  for (size_t c = 0; c < 2; ++c) {
    r.cells[c].index = static_cast<int64_t>(c);
    r.cells[c].acceptance_rate = 0.5;
    r.cells[c].controls.resize(2);
    r.cells[c].controls[0].name = "always_accept";
    r.cells[c].controls[0].applicable = true;
    r.cells[c].controls[0].min_p = 1e-9;
    r.cells[c].controls[0].tests = 1;
    r.cells[c].controls[1].name = "q_drawn_top_k";
    r.cells[c].controls[1].note = "top_k = 0: the drafter draws from the full q";
  }
  r.tests = {passing_joint_test()};
  // Listed by name (equivalence.controls) and n/a in every cell: the check fails, naming it.
  r.controls_listed = true;
  finalize_sampling_verdict(r);
  CHECK(r.sampling_pass);
  CHECK_FALSE(r.controls_pass);
  REQUIRE(r.failures.size() == 1);
  CHECK_THAT(r.failures[0], Contains("q_drawn_top_k ran in no cell") && Contains("top_k = 0") &&
                                Contains("equivalence.controls"));
  // Applicable in one cell: nothing to say (the other cell's n/a is that cell's business).
  {
    EquivalenceReport q = r;
    q.cells[1].controls[1].applicable = true;
    q.cells[1].controls[1].min_p = 1e-9;
    q.cells[1].controls[1].tests = 1;
    finalize_sampling_verdict(q);
    CHECK(q.controls_pass);
    CHECK(q.failures.empty());
  }
  // Each cell's distinct reason is named (the first cell's alone hid the other's).
  {
    EquivalenceReport q = r;
    q.cells[1].controls[1].note = "the drafter reports q rows but no draft logits";
    finalize_sampling_verdict(q);
    REQUIRE(q.failures.size() == 1);
    CHECK_THAT(q.failures[0], Contains("top_k = 0: the drafter draws from the full q; the drafter reports q rows"));
  }
  // From the default list (all controls): a note, and the check passes on the others. A note that
  // is not the verdict's own (the verifier's, the runner's) stays (it was cleared until 2026-12-06).
  r.controls_listed = false;
  r.notes = {"verifier check: a setting not run"};
  finalize_sampling_verdict(r);
  finalize_sampling_verdict(r);  // idempotent
  CHECK(r.controls_pass);
  CHECK(r.failures.empty());
  REQUIRE(r.notes.size() == 2);
  CHECK(r.notes[0] == "verifier check: a setting not run");
  CHECK_THAT(r.notes[1], Contains("q_drawn_top_k ran in no cell"));
  // No control ran anywhere: the pass would rest on no demonstrated power, so it fails.
  for (SamplingCell& c : r.cells) c.controls[0].applicable = false;
  finalize_sampling_verdict(r);
  CHECK_FALSE(r.controls_pass);
  REQUIRE_FALSE(r.failures.empty());
  CHECK_THAT(r.failures[0], Contains("no negative control could run in any cell"));
}

// A cell whose verified positions are each a function of the first token tests nothing there:
// its tests' degrees of freedom all come from position 1, the prefill's sample (the audit's
// "One day, a little" at T 0.2, top_p 0.9: joint-2, marginal-2 and joint-1 gave one X2 of dof 1).
TEST_CASE("verdict: degrees of freedom from position 1 alone do not make a cell tested", "[equivalence][verdict]") {
  Draws d;
  d.m = 3;
  auto add = [&](std::vector<Token> t, int times) {
    for (int i = 0; i < times; ++i) d.tokens.insert(d.tokens.end(), t.begin(), t.end());
  };
  add({1, 10, 20}, 50);  // position 2 and 3 follow from position 1
  add({2, 11, 21}, 50);
  CHECK_FALSE(verified_positions_vary(d, 5));
  add({2, 12, 21}, 4);   // another token after 2, but too rare to count
  CHECK_FALSE(verified_positions_vary(d, 5));
  add({2, 12, 21}, 1);   // now 5 times: position 2 varies given the prefix [2]
  CHECK(verified_positions_vary(d, 5));
  Draws e;
  e.m = 3;
  for (int i = 0; i < 40; ++i) e.tokens.insert(e.tokens.end(), {7, 8, static_cast<Token>(30 + i % 2)});
  CHECK(verified_positions_vary(e, 5));  // position 3 varies after the prefix [7, 8]

  EquivalenceReport r;
  r.alpha = 0.001;
  r.groups.resize(1);
  r.cells.resize(1);
  r.cells[0].acceptance_rate = 0.5;
  TestRow t = passing_joint_test();
  t.test.stats.dof = 1;
  r.tests = {t};
  finalize_sampling_verdict(r);
  CHECK(r.sampling_pass);
  r.groups[0].verified_positions_vary = false;
  finalize_sampling_verdict(r);
  CHECK_FALSE(r.sampling_pass);
  REQUIRE(r.failures.size() == 1);
  CHECK_THAT(r.failures[0], Contains("tests nothing") && Contains("position 1, the prefill's sample"));
  CHECK_FALSE(r.cells[0].pass);
}

TEST_CASE("verdict: a verifier check that was asked for and ran no cell fails", "[equivalence][verdict]") {
  EquivalenceReport r;
  r.alpha = 0.001;
  finalize_verifier_verdict(r);  // not asked for: nothing to say
  CHECK(r.verifier_pass);
  r.ran_verifier = true;  // asked for, and every setting was skipped (e.g. no top_k with a large vocabulary)
  finalize_verifier_verdict(r);
  CHECK_FALSE(r.verifier_pass);
  REQUIRE(r.failures.size() == 1);
  CHECK_THAT(r.failures[0], Contains("no cell ran") && Contains("equivalence.verifier: false"));
}

TEST_CASE("bad input: too few samples, temperature 0, controls without a verified position", "[equivalence][input]") {
  ExperimentConfig c = stories_config(500, 1.0, 1.0, 0, 1);
  CHECK_THROWS_WITH(run_equivalence(c), Contains("samples") && Contains("pooled"));
  c = stories_config(2000, 1.0, 1.0, 0, 1);
  c.equivalence->temperatures = {0.0, 1.0};
  CHECK_THROWS_WITH(run_equivalence(c), Contains("temperature"));
  c = stories_config(2000, 1.0, 1.0, 0, 1);
  c.equivalence->positions = {1};
  CHECK_THROWS_WITH(run_equivalence(c), Contains("prefill") && Contains("m >= 2"));
  c.equivalence->negative_controls = false;  // position-1 tests see no verification either way
  c.equivalence->controls.clear();            // (a list without negative_controls is refused)
  CHECK_THROWS_WITH(run_equivalence(c), Contains("prefill") && Contains("m >= 2"));
  // A control listed by name that no setting exercises would pass by never running: refused
  // before anything runs, with the reason (top_p = 1 leaves top_p_on_p_only nothing to change;
  // the bonus of a full first block at gamma 1 is position 3, beyond positions 1..2).
  c = stories_config(2000, 1.0, 1.0, 0, 1);
  c.equivalence->controls = {"always_accept", "top_p_on_p_only"};
  CHECK_THROWS_WITH(run_equivalence(c), Contains("equivalence.controls") && Contains("top_p_on_p_only") &&
                                            Contains("top_p = 1"));
  c.equivalence->controls = {"bonus_from_row_k-1"};
  CHECK_THROWS_WITH(run_equivalence(c), Contains("bonus_from_row_k-1") && Contains("gamma + 2 = 3"));
  c = stories_config(2000, 1.0, 1.0, 0, 1);
  c.equivalence->contexts = 3;
  CHECK_THROWS_WITH(run_equivalence(c), Contains("contexts"));
  // A gamma above a drafter's cap, in a config built in code (the CLI refuses it at load): a config
  // error, not an internal one (the cap was raised silently until 2026-12-06).
  c = stories_config(2000, 1.0, 1.0, 0, 1);
  c.equivalence->gammas = {20};
  for (DrafterEntry& d : c.drafters) d.options.schedule = "heuristic";  // the cap only it reads
  CHECK_THROWS_WITH(run_equivalence(c), Contains("max_speculative_tokens") && Contains("(20, of equivalence.gammas)"));
  c = stories_config(2000, 1.0, 1.0, 0, 1);
  c.equivalence.reset();
  CHECK_THROWS_WITH(run_equivalence(c), Contains("equivalence"));
  try {
    c = stories_config(10, 1.0, 1.0, 0, 1);
    run_equivalence(c);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK(e.field() == "equivalence.samples");
  }
}

TEST_CASE("write_equivalence attaches its group to its own experiment's file only", "[equivalence][hdf5]") {
  const fs::path dir = temp_dir();
  const std::string run_h5 = (dir / "attach_run.h5").string();
  fs::remove(run_h5);
  // A stand-in for `speclab run`'s file: /runs and the root `name` attribute are what it reads.
  const auto make_run_file = [&](const std::string& name) {
    H5::H5File f(run_h5, H5F_ACC_TRUNC);
    f.createGroup("runs");
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    const char* p = name.c_str();
    f.openGroup("/").createAttribute("name", t, H5::DataSpace(H5S_SCALAR)).write(t, &p);
  };
  EquivalenceReport r;
  r.name = "mine";
  make_run_file("theirs");
  try {
    write_equivalence(run_h5, r, {}, true);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK(e.field() == "output.path");
    CHECK_THAT(e.message(), Contains("experiment 'theirs'") && Contains("'mine'"));
  }
  {
    H5::H5File f(run_h5, H5F_ACC_RDONLY);  // untouched
    CHECK(H5Lexists(f.getId(), "equivalence", H5P_DEFAULT) == 0);
  }
  // A running writer holds an exclusive flock: refused, the file untouched.
  make_run_file("mine");
  {
    const int fd = ::open(run_h5.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    CHECK_THROWS_WITH(write_equivalence(run_h5, r, {}, true), Contains("running `speclab run`"));
    ::close(fd);
  }
  // A write that fails half way (the file size limit, as a full disk would) leaves the experiment
  // file as it was, and no temporary beside it: until 2026-12-07 the group was written into the
  // file in place, and a failed write left its /runs unreadable for good.
  {
    const auto bytes = [&] {
      std::ifstream in(run_h5, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    const std::string before = bytes();
    std::string message;
    {
      // The limit and the ignored SIGXFSZ (the write fails with EFBIG instead) last for this block
      // only, whatever it throws.
      struct SizeLimit {
        rlimit old{};
        void (*handler)(int) = SIG_DFL;
        explicit SizeLimit(rlim_t bytes) {
          REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
          rlimit low = old;
          low.rlim_cur = bytes;
          handler = std::signal(SIGXFSZ, SIG_IGN);
          REQUIRE(::setrlimit(RLIMIT_FSIZE, &low) == 0);
        }
        ~SizeLimit() {
          ::setrlimit(RLIMIT_FSIZE, &old);
          std::signal(SIGXFSZ, handler);
        }
      } limit(before.size() / 2);
      try {
        write_equivalence(run_h5, r, {}, true);
      } catch (const Error& e) {
        message = e.what();
      }
    }
    CHECK_THAT(message, Contains("could not write the equivalence results"));
    CHECK(bytes() == before);
    int temporaries = 0;
    for (const auto& e : fs::directory_iterator(dir))
      temporaries += e.path().filename().string().rfind("attach_run.h5.", 0) == 0;
    CHECK(temporaries == 0);
  }
  // Through a symbolic link: the experiment file it leads to gets the group, and the link stays a
  // link (a rename replaced the link itself with a copy, and the run's file got nothing).
  const std::string link_h5 = (dir / "attach_link.h5").string();
  fs::remove(link_h5);
  fs::create_symlink(fs::path(run_h5).filename(), link_h5);
  write_equivalence(link_h5, r, {"name: mine\nsampling: {seed: 777}\n", "abc123"}, true);
  CHECK(fs::is_symlink(link_h5));
  H5::H5File f(run_h5, H5F_ACC_RDONLY);
  CHECK(H5Lexists(f.getId(), "runs", H5P_DEFAULT) > 0);  // the experiment's own data kept
  CHECK(H5Lexists(f.getId(), "equivalence", H5P_DEFAULT) > 0);
  // The check's own config and build are in its group (the root's are the run's): a check of
  // other settings left no record of them.
  H5::Group eq = f.openGroup("equivalence");
  H5::DataSet ds = eq.openDataSet("config_yaml");
  std::string yaml;
  ds.read(yaml, ds.getStrType());
  CHECK(yaml == "name: mine\nsampling: {seed: 777}\n");
  std::string rev;
  H5::Attribute a = eq.openAttribute("git_revision");
  a.read(a.getStrType(), rev);
  CHECK(rev == "abc123");
}

TEST_CASE("run_equivalence end to end: all checks, the /equivalence HDF5 group, speclab check exit codes",
          "[equivalence][hdf5][cli]") {
  c10::InferenceMode guard;
  stories();
  ExperimentConfig c = stories_config(1000, 1.0, 0.9, 0, 2);
  c.equivalence->greedy = true;
  c.equivalence->analytic = true;
  c.equivalence->verifier = true;
  c.equivalence->verifier_samples = 20000;
  c.equivalence->verifier_gammas = {4};
  c.prompts.inline_prompts.push_back({"park", "", "Tom and Sue went to the park"});
  DrafterEntry lookup;
  lookup.label = "prompt_lookup";
  lookup.options.name = "prompt_lookup";
  c.drafters.push_back(lookup);
  // A context that repeats itself, so that prompt_lookup drafts (a drafter that never drafts
  // fails the check: it verified nothing).
  c.prompts.inline_prompts[0].text = "The little dog was happy. The little dog";
  const EquivalenceReport r = run_equivalence(c);
  INFO(format_equivalence_report(r));
  CHECK(r.greedy.size() == 2 * 2 * 1);
  for (const GreedyRow& g : r.greedy) CHECK(g.check.classification == "match");
  CHECK(r.analytic.size() == 2 * 3 * 1);  // prompts x offsets x model drafts x 1 sampling setting
  CHECK(r.analytic_max_error < 1e-6);
  REQUIRE(r.verifier.size() == 1);  // one model draft x one sampling setting x k = 4
  CHECK(r.verifier[0].k == 4);
  CHECK(r.verifier[0].n == 20000);
  CHECK(r.verifier[0].verdict.tested > 0);
  CHECK(r.verifier_controls.size() == 5);
  CHECK(r.cells.size() == 2);
  CHECK(r.cells[1].drafter == "prompt_lookup");
  CHECK(r.cells[1].control("top_p_on_p_only")->note.find("reports no q") != std::string::npos);
  CHECK(r.sampling_pass);
  CHECK(r.greedy_pass);
  CHECK(r.analytic_pass);
  CHECK(r.cells[0].control("always_accept")->caught);
  CHECK_FALSE(r.frequencies.empty());
  const std::string text = format_equivalence_report(r);
  CHECK_THAT(text, Contains("Holm-Bonferroni"));
  CHECK_THAT(text, Contains("[2b] verifier check"));
  CHECK_THAT(text, Contains("closed form"));
  CHECK_THAT(text, Contains("verdict:"));

  const fs::path dir = temp_dir();
  const std::string h5 = (dir / "eq.h5").string();
  fs::remove(h5);
  write_equivalence(h5, r, {"name: test\n", "abc"}, false);
  CHECK_THROWS_WITH(write_equivalence(h5, r, {}, false), Contains("--overwrite"));
  write_equivalence(h5, r, {}, true);
  {
    H5::H5File f(h5, H5F_ACC_RDONLY);
    H5::Group eq = f.openGroup("equivalence");
    int64_t version = 0;
    eq.openAttribute("schema_version").read(H5::PredType::NATIVE_INT64, &version);
    CHECK(version == 1);
    std::string verdict;
    H5::Attribute va = eq.openAttribute("verdict");
    va.read(va.getStrType(), verdict);
    CHECK(verdict == (r.pass() ? "pass" : "fail"));
    for (const char* table : {"greedy", "analytic", "sampling_groups", "sampling_cells", "sampling_tests", "power",
                              "frequencies", "failures", "notes", "verifier", "verifier_controls"}) {
      H5::Group t = eq.openGroup(table);
      int64_t complete = -1;
      t.openAttribute("complete").read(H5::PredType::NATIVE_INT64, &complete);
      INFO(table);
      CHECK(t.getNumObjs() > 0);  // each table has its columns, so the loop below checks something
      for (hsize_t i = 0; i < t.getNumObjs(); ++i) {
        H5::DataSet ds = t.openDataSet(t.getObjnameByIdx(i));
        hsize_t dims[1] = {0};
        REQUIRE(ds.getSpace().getSimpleExtentNdims() == 1);
        ds.getSpace().getSimpleExtentDims(dims);
        INFO(table << "/" << t.getObjnameByIdx(i));
        CHECK(static_cast<int64_t>(dims[0]) == complete);
        CHECK(ds.getTypeClass() != H5T_COMPOUND);
      }
    }
    int64_t tests = 0;
    eq.openGroup("sampling_tests").openAttribute("complete").read(H5::PredType::NATIVE_INT64, &tests);
    CHECK(tests == static_cast<int64_t>(r.tests.size()));
    std::vector<double> p(static_cast<size_t>(tests));
    eq.openGroup("sampling_tests").openDataSet("p_value").read(p.data(), H5::PredType::NATIVE_DOUBLE);
    CHECK(p[0] == r.tests[0].test.stats.p_value);
  }

#ifdef SPECLAB_CLI
  // The CLI on a YAML config: 0 when everything passes, 2 on bad input (nothing written).
  const std::string yaml = (dir / "check.yaml").string();
  {
    std::ofstream y(yaml);
    y << "name: cli_check\n"
         "models:\n  target: {path: stories260K}\n"
         "prompts:\n  chat: off\n  inline:\n    - {id: dog, text: \"The little dog\"}\n"
         "drafters:\n  - name: layer_skip\n    draft_layers_first: 3\n"
         "generation:\n  max_new_tokens: 16\n"
         "sampling: {seed: 7}\n"
         "equivalence:\n  samples: 1000\n  positions: [1, 2]\n  temperatures: [1.0]\n  top_ps: [1.0]\n"
         "  top_ks: [0]\n  gammas: [2]\n  contexts: 1\n  verifier: false\n"
         "  controls: [always_accept]\n";
  }
  const std::string out = (dir / "cli.h5").string();
  fs::remove(out);
  std::string log;
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --quiet", &log) == 0);
  INFO(log);
  CHECK_THAT(log, Contains("verdict: PASS"));
  CHECK(fs::exists(out));
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --quiet", &log) == 2);  // exists, no --overwrite
  CHECK_THAT(log, Contains("--overwrite"));
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --overwrite --set equivalence.samples=100", &log) == 2);
  CHECK_THAT(log, Contains("samples"));
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --overwrite --set 'equivalence.temperatures=[0]'", &log) == 2);
  CHECK_THAT(log, Contains("temperature"));
  CHECK(run_cli("check '" + (dir / "missing.yaml").string() + "'", &log) == 2);
  // One token per run leaves no step to draft in: the greedy check verified nothing, and read
  // PASS (found by a probe on 2026-12-06).
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --overwrite --quiet --set generation.max_new_tokens=1 "
                "--set equivalence.sampling=false --set equivalence.analytic=false",
                &log) == 1);
  CHECK_THAT(log, Contains("greedy: tests nothing: drafter layer_skip proposed no tokens"));
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --overwrite --set 'equivalence.controls=[always_acept]'", &log) == 2);
  CHECK_THAT(log, Contains("equivalence.controls") && Contains("always_acept") && Contains("replacement_from_p"));
  // A finding, not a crash: at N = 1000 the top-p-on-p-only control (top_p = 0.9) is not caught
  // (it needs a few thousand draws here), so the check has no demonstrated power: exit 1, and
  // the results are still written.
  CHECK(run_cli("check '" + yaml + "' --out '" + out + "' --overwrite --quiet --set 'equivalence.top_ps=[0.9]' "
                "--set 'equivalence.controls=[always_accept,top_p_on_p_only]'",
                &log) == 1);
  CHECK_THAT(log, Contains("top_p_on_p_only NOT caught"));
  CHECK_THAT(log, Contains("verdict: FAIL"));
  CHECK(fs::exists(out));
  // speclab report on check's own file (refused as "not a SpecLab experiment file" until
  // 2026-12-06): the failures listed (a failed check's messages were left out) and the empirical
  // vs exact frequencies plotted (equivalence.png was never drawn for check's files).
  const fs::path rep = dir / "rep";
  CHECK(run_cli("report '" + out + "' --out '" + rep.string() + "'", &log) == 0);
  INFO(log);
  std::ifstream md_in(rep / "report.md");
  const std::string md((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
  CHECK_THAT(md, Contains("### Failures (") && Contains("top_p_on_p_only") && Contains("### /equivalence/sampling_cells"));
  CHECK(fs::exists(rep / "equivalence.png"));
  CHECK(fs::file_size(rep / "equivalence.png") > 1000);
#endif
}
