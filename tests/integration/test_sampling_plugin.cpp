// The host services table (framework/draft/host_api.h, host_services.h) on the real stories260K
// model, and the sampling plugin built on it (experiments/plugins/sampling_drafter, built out of
// tree as docs/plugins.md tells a user to):
//   - the table's forward is the target's Model::forward on the shared KV (hidden states too), and
//     it refuses what would corrupt the target's sequence;
//   - uniform() is the drafter's stream and probs()/argmax() are the engine's own functions;
//   - first_layers, run by the real engine, is token for token the built-in layer_skip draft of the
//     same layers (same q, same draws from the same stream);
//   - `speclab check` (run_equivalence on configs/equivalence_plugin.yaml, smaller N) passes
//     first_layers and fails first_layers_biased, which reports a q other than the one it drew from.
#include "tests/torch_catch.h"

#include <c10/core/InferenceMode.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "experiments/app/equivalence_runner.h"
#include "experiments/app/session_parts.h"
#include "framework/draft/host_services.h"
#include "framework/draft/plugin_abi.h"
#include "framework/engine/spec_decode.h"
#include "framework/io/experiment_config.h"
#include "tests/support/plugin_build.h"
#include "tests/support/stories260k.h"

using namespace speclab;
using testing::stories;
using testing::Stories;

namespace {

const std::string kSource = SPECLAB_SOURCE_DIR;

struct SamplingPlugins {
  std::string good;    // first_layers.so
  std::string biased;  // first_layers_biased.so
};

const SamplingPlugins& plugins() {
  static const SamplingPlugins p = [] {
    const testing::PluginBuildLock lock;
    const std::string dir = testing::build_example_plugin("sampling_drafter", "sampling_drafter");
    return SamplingPlugins{dir + "/first_layers.so", dir + "/first_layers_biased.so"};
  }();
  return p;
}

KvOptions kv_options() {
  KvOptions o;
  o.block_size = 16;
  o.budget_bytes = 32 << 20;
  return o;
}

// The target's KV, one sequence with `prompt` prefilled and committed (as the Session leaves it
// before the drafter proposes), and the host table over them.
struct TargetKv {
  Stories& s = stories();
  KvCacheManager kv{kv_options()};
  PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  KvSequence seq{kv, pool};
  HostServices host{DrafterEnv{s.model.get(), &kv, pool, s.model->config().vocab_size}};
  const SpeclabHostApi& api = *host.api();
  char error[512] = {};

  explicit TargetKv(const std::vector<int64_t>& prompt) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    kv.reserve(seq.id(), n);
    s.model->forward(at::tensor(prompt, at::kLong), at::arange(n, at::kLong), kv.view(seq.id(), n));
    REQUIRE(kv.commit(seq.id(), n) == KvStatus::kOk);
  }
  int64_t vocab() const { return s.model->config().vocab_size; }
};

const std::vector<int64_t> kPrompt = {1, 403, 407, 261, 378};

std::vector<float> row(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

TEST_CASE("the host table's forward is Model::forward on the shared KV, hidden states included", "[plugins][host]") {
  c10::InferenceMode guard;
  TargetKv t(kPrompt);
  const SpeclabHostApi& api = t.api;
  const ModelConfig& c = t.s.model->config();
  CHECK(api.version == SPECLAB_HOST_API_VERSION);
  CHECK(api.size == sizeof(SpeclabHostApi));
  CHECK(api.model.vocab_size == c.vocab_size);
  CHECK(api.model.n_layers == c.num_hidden_layers);
  CHECK(api.model.hidden_size == c.hidden_size);
  CHECK(api.model.max_positions == c.max_position_embeddings);

  // Two draft tokens past the committed prefix, first three layers, hidden states after 2 and 0.
  const int64_t n0 = static_cast<int64_t>(kPrompt.size());
  REQUIRE(api.kv_reserve(api.host, t.seq.id(), 4, t.error, sizeof t.error) == SPECLAB_OK);
  const std::vector<int32_t> tokens = {425, 281};
  const std::vector<int64_t> layers = {0, 1, 2}, hidden_layers = {2, 0};
  std::vector<float> logits(2 * c.vocab_size), hidden(2 * 2 * c.hidden_size);
  SpeclabForward f{};
  f.seq = t.seq.id();
  f.tokens = tokens.data();
  f.n = 2;
  f.start = n0;
  f.layers = layers.data();
  f.n_layers = 3;
  f.n_logits = 2;
  f.logits = logits.data();
  f.hidden_layers = hidden_layers.data();
  f.n_hidden = 2;
  f.hidden = hidden.data();
  REQUIRE(api.forward(api.host, &f, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK(t.kv.length(t.seq.id()) == n0);  // nothing committed: the engine commits

  // The same pass through Model::forward (it rewrites the same slots with the same K/V).
  ForwardOptions fo;
  fo.layers = layers;
  fo.hidden_layers = hidden_layers;
  std::vector<at::Tensor> hs;
  fo.hidden_out = &hs;
  const at::Tensor ref = t.s.model->forward(at::tensor(std::vector<int64_t>{425, 281}, at::kLong),
                                            at::arange(n0, n0 + 2, at::kLong), t.kv.view_at(t.seq.id(), n0, 2), fo);
  CHECK(logits == row(ref));
  REQUIRE(hs.size() == 2);
  std::vector<float> ref_hidden = row(hs[0]);
  const std::vector<float> h0 = row(hs[1]);
  ref_hidden.insert(ref_hidden.end(), h0.begin(), h0.end());
  CHECK(hidden == ref_hidden);

  // Only the last row when n_logits = 1, no copy without a buffer; a full-depth pass differs.
  std::vector<float> last(c.vocab_size), full(c.vocab_size);
  f.n_logits = 1;
  f.logits = last.data();
  f.hidden_layers = nullptr;
  f.n_hidden = 0;
  f.hidden = nullptr;
  REQUIRE(api.forward(api.host, &f, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK(std::equal(last.begin(), last.end(), logits.begin() + c.vocab_size));
  f.layers = nullptr;
  f.n_layers = 0;
  f.logits = full.data();
  REQUIRE(api.forward(api.host, &f, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK(full != last);
}

TEST_CASE("the host table answers misuse with codes and keeps out of the target's prefix", "[plugins][host]") {
  c10::InferenceMode guard;
  TargetKv t(kPrompt);
  const SpeclabHostApi& api = t.api;
  const int64_t n0 = static_cast<int64_t>(kPrompt.size());
  REQUIRE(api.kv_reserve(api.host, t.seq.id(), 2, t.error, sizeof t.error) == SPECLAB_OK);
  int32_t token = 5;
  std::vector<float> logits(t.vocab());
  auto forward = [&](SpeclabForward f) {
    std::memset(t.error, 0, sizeof t.error);
    return api.forward(api.host, &f, t.error, sizeof t.error);
  };
  SpeclabForward ok{};
  ok.seq = t.seq.id();
  ok.tokens = &token;
  ok.n = 1;
  ok.start = n0;
  ok.n_logits = 1;
  ok.logits = logits.data();
  REQUIRE(forward(ok) == SPECLAB_OK);

  auto refused = [&](SpeclabForward f, const std::string& expected) {
    INFO("expected: " << expected);
    CHECK(forward(f) == SPECLAB_E_BAD_INPUT);
    CHECK_THAT(std::string(t.error), Catch::Contains(expected));
  };
  SpeclabForward f = ok;
  f.start = n0 - 1;  // would overwrite the target's K/V of an accepted token
  refused(f, "start: expected start >= 5 (the committed length) on a sequence this drafter does not own, found 4");
  f = ok;
  f.start = n0 + 40;
  refused(f, "are not all reserved");
  f = ok;
  int32_t bad_token = static_cast<int32_t>(t.vocab());
  f.tokens = &bad_token;
  refused(f, "tokens[0]: expected a token id in [0, 512), found 512");
  const std::vector<int64_t> descending = {2, 1};
  f = ok;
  f.layers = descending.data();
  f.n_layers = 2;
  refused(f, "layers[1]: expected ascending layers");
  const std::vector<int64_t> first = {0}, skipped = {3};
  std::vector<float> hidden(t.s.model->config().hidden_size);
  f = ok;
  f.layers = first.data();
  f.n_layers = 1;
  f.hidden_layers = skipped.data();
  f.n_hidden = 1;
  f.hidden = hidden.data();
  refused(f, "hidden_layers[0]: expected one of the layers that run, found 3");
  f = ok;
  f.n_logits = 2;
  refused(f, "n_logits: expected 1 <= n_logits <= n = 1, found 2");
  f = ok;
  f.seq = 12345;
  refused(f, "expected a live KV sequence");

  // The engine commits and rolls back the target's sequence, never the drafter.
  CHECK(api.kv_commit(api.host, t.seq.id(), 1, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("expected a sequence this drafter created with seq_create"));
  CHECK(api.kv_truncate(api.host, t.seq.id(), 0, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK(api.seq_release(api.host, t.seq.id(), t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK(t.kv.length(t.seq.id()) == n0);

  // A message longer than the buffer is cut and terminated; a null host is refused.
  char tiny[8];
  std::memset(tiny, 'x', sizeof tiny);
  CHECK(api.kv_commit(api.host, t.seq.id(), 1, tiny, sizeof tiny) == SPECLAB_E_BAD_INPUT);
  CHECK(std::strlen(tiny) == sizeof tiny - 1);
  CHECK(api.kv_reserve(nullptr, t.seq.id(), 1, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  // Past the target's positions: refused before any block is taken (it reserved them, and forward
  // refused the positions later). Past the KV budget (a host without a target has no position
  // limit to check first): a resource error.
  CHECK(api.kv_reserve(api.host, t.seq.id(), int64_t{1} << 40, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("kv_reserve: n: expected at most") &&
                                       Catch::Contains("less the sequence's length"));
  {
    HostServices no_target(DrafterEnv{nullptr, &t.kv, t.pool, t.vocab()});
    const SpeclabHostApi& nt = *no_target.api();
    CHECK(nt.kv_reserve(nt.host, t.seq.id(), int64_t{1} << 40, t.error, sizeof t.error) == SPECLAB_E_RESOURCE);
  }

  // The drafter's own sequences: everything is allowed, and what it leaves is released with it.
  int64_t own = -1, leaked = -1, length = -1;
  REQUIRE(api.seq_create(api.host, &own, t.error, sizeof t.error) == SPECLAB_OK);
  REQUIRE(api.kv_reserve(api.host, own, 3, t.error, sizeof t.error) == SPECLAB_OK);
  const std::vector<int32_t> three = {1, 403, 407};
  std::vector<float> three_logits(t.vocab());
  f = ok;
  f.seq = own;
  f.tokens = three.data();
  f.n = 3;
  f.start = 0;
  f.logits = three_logits.data();
  REQUIRE(forward(f) == SPECLAB_OK);
  REQUIRE(api.kv_commit(api.host, own, 3, t.error, sizeof t.error) == SPECLAB_OK);
  REQUIRE(api.kv_length(api.host, own, &length, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK(length == 3);
  f.n = 1;
  f.start = 1;  // rewriting its own prefix is the drafter's business
  REQUIRE(forward(f) == SPECLAB_OK);
  REQUIRE(api.kv_truncate(api.host, own, 1, t.error, sizeof t.error) == SPECLAB_OK);
  REQUIRE(api.kv_length(api.host, own, &length, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK(length == 1);
  // Misuse of its own sequence, each named with the argument and the lengths (they read "seq: the
  // KV manager answered out of range", or let a pass read positions never written).
  CHECK(api.kv_truncate(api.host, own, 5, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("kv_truncate: new_len: expected 0 <= new_len <= the length 1, "
                                                   "found 5"));
  CHECK(api.kv_commit(api.host, own, 1, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);  // truncated away
  CHECK_THAT(std::string(t.error), Catch::Contains("kv_commit: n: expected positions that a forward wrote"));
  CHECK(api.kv_commit(api.host, own, 1000, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("kv_reserve first"));
  f.start = 2;  // position 1 was discarded by the truncate
  CHECK(forward(f) == SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("forward: start: expected start <= 1") &&
                                       Catch::Contains("read unwritten"));
  f.start = 1;  // the control: right after the written positions
  CHECK(forward(f) == SPECLAB_OK);
  f.start = 2;  // and on after it, before any commit (a drafter writing ahead)
  CHECK(forward(f) == SPECLAB_OK);
  CHECK(api.kv_commit(api.host, own, 2, t.error, sizeof t.error) == SPECLAB_OK);
  REQUIRE(api.seq_release(api.host, own, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK_FALSE(t.kv.blocks().contains(own));
  CHECK(api.seq_release(api.host, own, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);  // again
  CHECK_THAT(std::string(t.error), Catch::Contains("(released already, or never issued)"));
  {
    HostServices other(DrafterEnv{t.s.model.get(), &t.kv, t.pool, t.vocab()});
    REQUIRE(other.api()->seq_create(other.api()->host, &leaked, t.error, sizeof t.error) == SPECLAB_OK);
    REQUIRE(other.api()->kv_reserve(other.api()->host, leaked, 20, t.error, sizeof t.error) == SPECLAB_OK);
    CHECK(t.kv.blocks().contains(leaked));
  }
  CHECK_FALSE(t.kv.blocks().contains(leaked));

  // Without a target model (a bare DrafterEnv) the model and KV functions say so.
  HostServices bare(DrafterEnv{});
  CHECK(bare.api()->model.n_layers == 0);
  CHECK(bare.api()->forward(bare.api()->host, &ok, t.error, sizeof t.error) == SPECLAB_E_CONFIG);
  CHECK_THAT(std::string(t.error), Catch::Contains("this host has no"));
}

TEST_CASE("final_norm() and lm_head() (table version 2) are the target's own output head", "[plugins][host]") {
  c10::InferenceMode guard;
  TargetKv t(kPrompt);
  const SpeclabHostApi& api = t.api;
  const ModelConfig& c = t.s.model->config();
  REQUIRE(api.version >= 2);
  // The last layer's residual stream of a two-token pass, and that pass's logits.
  const int64_t n0 = static_cast<int64_t>(kPrompt.size()), last = c.num_hidden_layers - 1;
  t.kv.reserve(t.seq.id(), 2);
  ForwardOptions fo;
  fo.hidden_layers = {last};
  std::vector<at::Tensor> hs;
  fo.hidden_out = &hs;
  const at::Tensor logits = t.s.model->forward(at::tensor(std::vector<int64_t>{425, 281}, at::kLong),
                                               at::arange(n0, n0 + 2, at::kLong), t.kv.view_at(t.seq.id(), n0, 2), fo);
  const std::vector<float> hidden = row(hs[0]);
  std::vector<float> features(2 * c.hidden_size), out(2 * c.vocab_size);
  REQUIRE(api.final_norm(api.host, hidden.data(), 2, features.data(), t.error, sizeof t.error) == SPECLAB_OK);
  REQUIRE(api.lm_head(api.host, features.data(), 2, out.data(), t.error, sizeof t.error) == SPECLAB_OK);
  // The forward's logits up to the summation order of the norm (float32 stories260K).
  const at::Tensor got = at::tensor(out).view({2, c.vocab_size});
  const double scale = logits.abs().max().item<double>();
  CHECK((got - logits).abs().max().item<double>() < 1e-4 * scale);
  // Negative control: the LM head on the un-normalised rows is far off.
  std::vector<float> raw(2 * c.vocab_size);
  REQUIRE(api.lm_head(api.host, hidden.data(), 2, raw.data(), t.error, sizeof t.error) == SPECLAB_OK);
  CHECK((at::tensor(raw).view({2, c.vocab_size}) - logits).abs().max().item<double>() > 1e-2 * scale);
  // Misuse: codes and one-line messages.
  CHECK(api.final_norm(api.host, nullptr, 2, features.data(), t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("final_norm") && Catch::Contains("rows"));
  CHECK(api.lm_head(api.host, features.data(), 0, out.data(), t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
  HostServices bare{DrafterEnv{nullptr, nullptr, -1, c.vocab_size}};
  CHECK(bare.api()->lm_head(bare.api()->host, features.data(), 1, out.data(), t.error, sizeof t.error) ==
        SPECLAB_E_CONFIG);
}

TEST_CASE("uniform() is the drafter's stream, probs() and argmax() the engine's functions", "[plugins][host]") {
  c10::InferenceMode guard;
  TargetKv t(kPrompt);
  const SpeclabHostApi& api = t.api;
  // What propose() gets from the Session: the drafter's stream and the run's sampling options.
  SamplingOptions sampling;
  sampling.seed = 2024;
  Rng session_stream = Rng::stream(sampling.seed, 1);
  DraftContext ctx;
  ctx.rng = &session_stream;
  ctx.sampling = &sampling;
  Rng expected = Rng::stream(sampling.seed, 1), verifier(sampling.seed);
  bool differs_from_verifier = false;
  for (int i = 0; i < 64; ++i) {
    const double u = api.uniform(speclab_rng(ctx));
    CHECK(u == expected.uniform());
    differs_from_verifier = differs_from_verifier || u != verifier.uniform();
  }
  CHECK(differs_from_verifier);
  CHECK(std::isnan(api.uniform(nullptr)));

  // probs() against logits_to_probs, bit for bit, under several transforms.
  std::vector<float> logits(t.vocab());
  int32_t pending = 425;
  SpeclabForward f{};
  f.seq = t.seq.id();
  f.tokens = &pending;
  f.n = 1;
  f.start = static_cast<int64_t>(kPrompt.size());
  f.n_logits = 1;
  f.logits = logits.data();
  REQUIRE(api.kv_reserve(api.host, t.seq.id(), 1, t.error, sizeof t.error) == SPECLAB_OK);
  REQUIRE(api.forward(api.host, &f, t.error, sizeof t.error) == SPECLAB_OK);
  for (const auto& [temperature, top_k, top_p] :
       std::vector<std::tuple<double, int64_t, double>>{{0.0, 0, 1.0}, {1.0, 0, 1.0}, {0.7, 20, 0.9}, {1.3, 0, 0.5}}) {
    sampling.temperature = temperature;
    sampling.top_k = top_k;
    sampling.top_p = top_p;
    INFO("T " << temperature << " top_k " << top_k << " top_p " << top_p);
    std::vector<float> q(t.vocab(), -1.0f), ref;
    REQUIRE(api.probs(speclab_sampling(ctx), logits.data(), t.vocab(), q.data(), t.error, sizeof t.error) == SPECLAB_OK);
    logits_to_probs(logits.data(), t.vocab(), sampling, ref);
    CHECK(q == ref);
    CHECK(api.is_greedy(speclab_sampling(ctx)) == (temperature == 0.0 ? 1 : 0));
  }
  int32_t best = -1;
  REQUIRE(api.argmax(logits.data(), t.vocab(), &best, t.error, sizeof t.error) == SPECLAB_OK);
  CHECK(best == argmax(logits.data(), t.vocab()));
  logits[3] = std::nanf("");
  std::vector<float> q(t.vocab());
  CHECK(api.probs(speclab_sampling(ctx), logits.data(), t.vocab(), q.data(), t.error, sizeof t.error) ==
        SPECLAB_E_BAD_INPUT);
  CHECK_THAT(std::string(t.error), Catch::Contains("found nan at index 3"));
  CHECK(api.argmax(logits.data(), t.vocab(), &best, t.error, sizeof t.error) == SPECLAB_E_BAD_INPUT);
}

namespace {

// One run of the real engine with a drafter from the application's registry.
SpecResult run_engine(const DrafterOptions& dopts, const SamplingOptions& sampling, int64_t max_new) {
  Stories& s = stories();
  KvCacheManager kv(kv_options());
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
  std::unique_ptr<Drafter> drafter = drafter_registry().create(dopts, env);
  const TokenList ids = s.info.tokenizer->encode("The little dog was happy. The little dog", true);
  GenerationOptions gen;
  gen.max_new_tokens = max_new;
  gen.ignore_eos = true;
  SpecResult r = generate_speculative(*s.model, *s.info.tokenizer, ids, gen, sampling, *drafter, dopts, {&kv, pool});
  CHECK(kv.bytes_used() == 0);  // every sequence released
  return r;
}

DrafterOptions plugin_options(const std::string& path, const std::string& name) {
  DrafterOptions o;
  o.plugin = path;
  o.name = name;
  o.params["layers"] = "3";
  o.num_speculative_tokens = 4;
  return o;
}

std::vector<int> acceptances(const SpecResult& r) {
  std::vector<int> out;
  for (const SpecStep& s : r.steps) out.push_back(s.accepted);
  return out;
}

}  // namespace

TEST_CASE("first_layers in the engine is layer_skip's draft: same tokens, same acceptances", "[plugins][sampling]") {
  c10::InferenceMode guard;
  DrafterOptions layer_skip;
  layer_skip.name = "layer_skip";
  layer_skip.draft_layers_first = 3;
  layer_skip.num_speculative_tokens = 4;
  const DrafterOptions plugin = plugin_options(plugins().good, "first_layers");

  SamplingOptions sampling;
  sampling.temperature = 0.8;
  sampling.top_p = 0.9;
  sampling.seed = 11;
  const SpecResult built_in = run_engine(layer_skip, sampling, 48);
  const SpecResult through_table = run_engine(plugin, sampling, 48);
  REQUIRE(built_in.tokens.size() == 48);
  CHECK(through_table.tokens == built_in.tokens);
  CHECK(acceptances(through_table) == acceptances(built_in));
  CHECK(through_table.acceptance_rate() > 0.0);

  // The comparison can fail: the biased control draws differently from the same stream.
  const SpecResult biased = run_engine(plugin_options(plugins().biased, "first_layers_biased"), sampling, 48);
  CHECK((biased.tokens != built_in.tokens || acceptances(biased) != acceptances(built_in)));

  // Greedy: argmax drafts, no q, and the output is AR's (layer_skip's, which is AR's).
  const SamplingOptions greedy;
  CHECK(run_engine(plugin, greedy, 32).tokens == run_engine(layer_skip, greedy, 32).tokens);
  // Greedy with a confidence threshold: the example reports the argmax's probability at
  // temperature 1, as layer_skip does, so both stop drafting at the same positions (it reported
  // none, and the host refused the block, until 2026-12-06).
  DrafterOptions gated = plugin, gated_ls = layer_skip;
  gated.confidence_threshold = gated_ls.confidence_threshold = 0.5;
  const SpecResult gp = run_engine(gated, greedy, 32), gl = run_engine(gated_ls, greedy, 32);
  CHECK(gp.tokens == gl.tokens);
  CHECK(acceptances(gp) == acceptances(gl));
  int drafted = 0;
  for (const SpecStep& st : gp.steps) drafted += st.drafted;
  CHECK(drafted < 4 * static_cast<int>(gp.steps.size()));  // the threshold did stop some drafts
}

TEST_CASE("speclab check passes first_layers and fails first_layers_biased", "[plugins][sampling][equivalence]") {
  c10::InferenceMode guard;
  auto check = [&](const std::string& path, const std::string& name) {
    // configs/equivalence_plugin.yaml at a smaller N (its own N is sized for the CLI), at one
    // setting with the control that N catches (the q-row controls: the next test case).
    const ExperimentConfig config = load_experiment_config(
        kSource + "/configs/equivalence_plugin.yaml",
        {"drafters.0.plugin=" + path, "drafters.0.name=" + name, "equivalence.samples=1500",
         "equivalence.temperatures=[1.0]", "equivalence.positions=[1,2]", "equivalence.controls=[always_accept]"},
        ConfigUse::kCheck);
    return run_equivalence(config);
  };
  const EquivalenceReport good = check(plugins().good, "first_layers");
  INFO(format_equivalence_report(good));
  CHECK(good.pass());
  CHECK(good.greedy_pass);
  REQUIRE(!good.cells.empty());
  CHECK(good.cells[0].acceptance_rate > 0.0);

  const EquivalenceReport biased = check(plugins().biased, "first_layers_biased");
  INFO(format_equivalence_report(biased));
  CHECK_FALSE(biased.pass());
  CHECK_FALSE(biased.sampling_pass);
  CHECK(biased.greedy_pass);  // greedy drafts are argmax in both builds: only sampling can tell
  bool speculative_rejected = false;
  for (const std::string& f : biased.failures)
    speculative_rejected = speculative_rejected || f.rfind("sampling: speculative ", 0) == 0;
  CHECK(speculative_rejected);
}

// A plugin that samples and reports q rows, without draft logits: q_at_temperature_1 (rebuilt from
// the q rows) and shared_draws run on it and are caught, and the check notes positions short of a
// whole step. Until 2026-12-06 both were n/a for a plugin ("a deterministic drafter"), and its
// "controls ok" rested on always_accept alone, which shows no power against a misreported q.
TEST_CASE("speclab check: the q-row controls run on a sampling plugin and are caught", "[plugins][sampling][equivalence]") {
  c10::InferenceMode guard;
  const ExperimentConfig config = load_experiment_config(
      kSource + "/configs/equivalence_plugin.yaml",
      {"drafters.0.plugin=" + plugins().good, "drafters.0.name=first_layers", "equivalence.samples=4000",
       "equivalence.temperatures=[0.7]", "equivalence.top_ps=[1.0]", "equivalence.positions=[1,2]",
       "equivalence.controls=[q_at_temperature_1,shared_draws]", "equivalence.greedy=false"},
      ConfigUse::kCheck);
  const EquivalenceReport r = run_equivalence(config);
  INFO(format_equivalence_report(r));
  CHECK(r.pass());
  REQUIRE(r.cells.size() == 1);
  REQUIRE(r.cells[0].controls.size() == 2);
  for (const ControlOutcome& o : r.cells[0].controls) {
    INFO(o.name << ": " << o.note);
    CHECK(o.applicable);
    CHECK(o.caught);
  }
  CHECK(r.cells[0].controls[0].q_tv > 0.05);  // q at T = 0.7 vs at T = 1 on these rows (0.14 measured)
  bool short_note = false;  // positions [1, 2] at gamma 4: rows 1..3 and the bonus unrecorded
  for (const std::string& n : r.notes) short_note = short_note || n.find("positions reach m = 2: at gamma 4 the first step's draft rows 1..3 and bonus token "
                                                                  "(positions 3..6) are not recorded") != std::string::npos;
  CHECK(short_note);
}
