// Speculative decoding on a real model (stories260K): losslessness under greedy decoding for
// every built-in drafter and gamma, KV rollback leaving no trace, the paged cache's gather path
// agreeing with the contiguous one, and the bad-input errors of the drafter layer.
#include "tests/torch_catch.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "experiments/app/session_parts.h"
#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "framework/core/token_tensor.h"
#include "framework/draft/builtin/head_token.h"
#include "framework/draft/builtin/prompt_lookup.h"
#include "framework/draft/builtin/sources_first.h"
#include "framework/draft/registry.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/spec_decode.h"
#include "framework/engine/verifier.h"
#include "framework/kv/contiguous_kv.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"
#include "tests/support/catch_error.h"
#include "tests/support/stories260k.h"

using namespace speclab;
using testing::stories;
using testing::Stories;

namespace {

std::vector<std::string> reference_prompts() {
  std::vector<std::string> out;
  for (const auto& rec : testing::stories_reference_records()) out.push_back(rec.at("prompt"));
  return out;
}

struct Run {
  SpecResult spec;
  GenerationResult ar;
};

Run run_both(const DrafterOptions& dopts, const std::string& prompt, int64_t max_new, int32_t block_size = 16,
             Stories& s = stories()) {
  KvOptions kvo;
  kvo.block_size = block_size;
  kvo.budget_bytes = 64 << 20;
  KvCacheManager kv(kvo);
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
  auto drafter = drafter_registry().create(dopts, env);
  TokenList ids = s.info.tokenizer->encode(prompt, true);
  GenerationOptions gen;
  gen.max_new_tokens = max_new;
  SamplingOptions greedy;
  Run r;
  r.spec = generate_speculative(*s.model, *s.info.tokenizer, ids, gen, greedy, *drafter, dopts, {&kv, pool});
  r.ar = generate_ar(*s.model, *s.info.tokenizer, ids, gen, greedy, KvMode::kCached, {}, {&kv, pool});
  CHECK(kv.bytes_used() == 0);  // every sequence released
  return r;
}

std::string stories_path() { return "stories260K"; }  // named entry: model + tok512.bin

}  // namespace

TEST_CASE("greedy speculative decoding is token-identical to AR for every drafter and gamma", "[spec][greedy]") {
  struct Variant {
    const char* label;
    DrafterOptions o;
  };
  std::vector<Variant> variants;
  {
    DrafterOptions o;
    o.name = "prompt_lookup";
    variants.push_back({"prompt_lookup", o});
    o.name = "layer_skip";
    o.draft_layers = {0, 1, 2};
    variants.push_back({"layer_skip first 3", o});
    o.draft_layers = {0, 2, 4};
    variants.push_back({"layer_skip 0,2,4", o});
    o.name = "draft_model";
    o.draft_layers.clear();
    o.draft_model = stories_path();
    o.draft_model_format = "auto";
    variants.push_back({"draft_model (same model)", o});
    o.draft_vocab = 150;  // the same model with its LM head cut to 150 of its 253 ordinary pieces (FR-Spec)
    variants.push_back({"draft_model (same model, head of 150 pieces)", o});
    o.draft_vocab = 0;
    o.name = "layer_skip";
    o.draft_layers = {0, 1};
    o.schedule = "heuristic";
    variants.push_back({"layer_skip heuristic", o});
    o.schedule = "cost";  // lengths from measured timings: any sequence of them must stay exact
    variants.push_back({"layer_skip cost", o});
    o.schedule = "constant";
    o.confidence_threshold = 0.5;
    variants.push_back({"layer_skip confidence 0.5", o});
    DrafterOptions pl;
    pl.name = "prompt_lookup";
    pl.schedule = "cost";
    variants.push_back({"prompt_lookup cost", pl});
    // Lookup first, a drafter where the context has no match (sources_first.h): blocks from either
    // source, a layer-skip draft on the target's own sequence and a draft model on its own cache
    // that misses the steps the lookup drafted.
    DrafterOptions lf;
    lf.name = "layer_skip";
    lf.draft_layers = {0, 1};
    lf.prompt_lookup_first = true;
    lf.prompt_lookup_min = 2;
    variants.push_back({"prompt_lookup_first + layer_skip", lf});
    lf.name = "draft_model";
    lf.draft_layers.clear();
    lf.draft_model = stories_path();
    lf.draft_vocab = 300;
    lf.fallback_speculative_tokens = 1;
    variants.push_back({"prompt_lookup_first + draft_model, fallback 1", lf});
  }
  for (const auto& v : variants) {
    // Over the variant's runs: identical output must come from drafts verified, some accepted and
    // (unless the draft is the target itself) some rejected and rolled back, not from a drafter
    // that proposed nothing.
    int64_t drafted = 0, accepted = 0, ended_by_eos = 0;
    for (int gamma : {1, 2, 4, 8}) {
      for (const auto& prompt : reference_prompts()) {
        DrafterOptions o = v.o;
        o.num_speculative_tokens = gamma;
        o.max_speculative_tokens = 16;
        // The self-draft runs to its EOS (stories end within 400 tokens), to cross the EOS cut.
        const bool self_draft = std::string(v.label) == "draft_model (same model)";
        Run r = run_both(o, prompt, self_draft ? 400 : 120, gamma == 2 ? 4 : 16);
        INFO(v.label << ", gamma " << gamma << ", prompt: " << prompt);
        REQUIRE(r.spec.tokens == r.ar.tokens);
        CHECK(r.spec.text == r.ar.text);
        for (const auto& st : r.spec.steps) {
          CHECK(st.drafted <= (v.o.schedule == "heuristic" ? 16 : gamma));
          CHECK(st.drafted >= 0);
          CHECK(st.accepted <= st.drafted);
          drafted += st.drafted;
          accepted += st.accepted;
        }
        if (std::string(v.label) == "draft_model (same model)") {
          // The draft is the target: every draft token must be accepted.
          CHECK(r.spec.acceptance_rate() == 1.0);
          // ... and every accepted draft emitted: the drafts after a drafted EOS are cut. They
          // were verified and recorded as accepted in a run that had ended (until 2026-12-06).
          // Each step emits its accepted drafts and then its verdict's token, the last step
          // perhaps without the latter (when a draft ended the run), after the prefill's token.
          int64_t emitted_by_steps = 0;
          for (const auto& st : r.spec.steps) emitted_by_steps += st.accepted + 1;
          CHECK(static_cast<int64_t>(r.spec.tokens.size()) >= emitted_by_steps);
          if (r.spec.stop_reason == StopReason::kEos) ++ended_by_eos;
        }
      }
    }
    INFO(v.label << ": " << accepted << " of " << drafted << " draft tokens accepted");
    CHECK(accepted > 0);
    if (std::string(v.label) == "draft_model (same model)") CHECK(ended_by_eos > 0);  // the cut was exercised
    // The reduced head keeps the frequent pieces (frequent_head_ids): the target drafting for
    // itself through it keeps most drafts (with the byte-fallback pieces counted among the 150 it
    // kept none of the ordinary pieces and accepted nothing; here about 0.37).
    if (std::string(v.label) == "draft_model (same model, head of 150 pieces)") CHECK(accepted * 4 > drafted);
    if (std::string(v.label) == "draft_model (same model)")
      CHECK(accepted == drafted);
    else
      CHECK(accepted < drafted);
  }
}

// stories260K with an int8 K/V cache (kv_dtype int8; KvGeometry): the pool is sized for the heads'
// scale bytes, and verification rows, rollback and layer skip's draft passes all read int8 heads.
TEST_CASE("greedy speculative decoding over an int8 K/V cache is token-identical to AR", "[spec][greedy][kv_int8]") {
  static Stories s8 = [] {
    Placement placement;
    placement.kv_dtype = "int8";
    return testing::load_stories(placement);
  }();
  REQUIRE(s8.model->config().kv_geometry().dtype == "int8");
  REQUIRE(s8.model->config().kv_geometry().stored_head_dim() == s8.model->config().head_dim + 4);
  std::vector<DrafterOptions> variants(3);
  variants[0].name = "prompt_lookup";
  variants[1].name = "layer_skip";
  variants[1].draft_layers = {0, 2, 4};
  variants[2].name = "layer_skip";
  variants[2].draft_layers = {0, 1};
  variants[2].schedule = "cost";
  int64_t accepted = 0;
  for (const DrafterOptions& v : variants)
    for (int gamma : {1, 4})
      for (const auto& prompt : reference_prompts()) {
        DrafterOptions o = v;
        o.num_speculative_tokens = gamma;
        Run r = run_both(o, prompt, 120, 16, s8);
        INFO(v.name << " schedule " << v.schedule << ", gamma " << gamma << ", prompt: " << prompt);
        REQUIRE(r.spec.tokens == r.ar.tokens);
        for (const auto& st : r.spec.steps) accepted += st.accepted;
      }
  CHECK(accepted > 0);  // verification rows really were kept, not only bonus tokens
}

TEST_CASE("a draft model begun from its kept prompt state drafts exactly as after a fresh begin", "[spec][reuse]") {
  Stories& s = stories();
  KvOptions kvo;
  kvo.budget_bytes = 64 << 20;
  KvCacheManager kv(kvo);
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
  DrafterOptions o;
  o.name = "draft_model";
  o.draft_model = stories_path();
  o.draft_vocab = 300;  // q differs from p, so the draws and the acceptances vary
  o.num_speculative_tokens = 4;
  auto drafter = drafter_registry().create(o, env);
  const TokenList ids = s.info.tokenizer->encode(reference_prompts().at(0), true);
  GenerationOptions gen;
  gen.max_new_tokens = 24;
  gen.ignore_eos = true;
  auto run = [&](uint64_t seed) {
    SamplingOptions t1;
    t1.temperature = 1.0;
    t1.seed = seed;
    return generate_speculative(*s.model, *s.info.tokenizer, ids, gen, t1, *drafter, o, {&kv, pool});
  };
  auto same = [](const SpecResult& a, const SpecResult& b) {
    REQUIRE(a.tokens == b.tokens);
    REQUIRE(a.steps.size() == b.steps.size());
    for (size_t i = 0; i < a.steps.size(); ++i) {
      CHECK(a.steps[i].accepted == b.steps[i].accepted);
      CHECK(a.steps[i].q == b.steps[i].q);  // the draft's probabilities, bit for bit
      CHECK(a.steps[i].p == b.steps[i].p);
    }
  };
  std::vector<SpecResult> fresh;
  for (uint64_t seed : {1, 2, 3}) fresh.push_back(run(seed));
  CHECK(kv.bytes_used() == 0);
  drafter->reuse_prompt_state(true);
  const SpecResult first = run(1);  // prefills and keeps the prompt
  same(first, fresh[0]);
  const int64_t kept = kv.bytes_used();
  CHECK(kept > 0);  // the kept prompt sequence
  for (uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed << ", begun from the kept prompt");
    same(run(seed), fresh[seed - 1]);
    CHECK(kv.bytes_used() == kept);  // each forked sequence released, the prompt still kept
  }
  drafter->reuse_prompt_state(false);
  CHECK(kv.bytes_used() == 0);
  // Negative control: a different prompt is not answered from the kept one.
  drafter->reuse_prompt_state(true);
  (void)run(1);
  const TokenList other = s.info.tokenizer->encode(reference_prompts().at(1), true);
  SamplingOptions t1;
  t1.temperature = 1.0;
  t1.seed = 1;
  const SpecResult b = generate_speculative(*s.model, *s.info.tokenizer, other, gen, t1, *drafter, o, {&kv, pool});
  drafter->reuse_prompt_state(false);
  const SpecResult b_fresh = generate_speculative(*s.model, *s.info.tokenizer, other, gen, t1, *drafter, o, {&kv, pool});
  same(b, b_fresh);
  CHECK(kv.bytes_used() == 0);
}

TEST_CASE("a reduced LM head keeps its tokens' logits bit for bit and gives -inf to the rest", "[spec][draft_vocab]") {
  Stories& s = stories();
  const int64_t V = s.model->config().vocab_size;
  // A SentencePiece vocabulary: <unk>, <s>, </s>, then the 256 <0xXX> byte-fallback pieces (ids
  // 3..258), then the ordinary pieces in merge order. The head keeps EOS (id 1, run.c's) and the
  // 99 lowest ordinary pieces, 259..357. Until 2026-12-05 it kept the 99 lowest ids, 96 of them
  // byte-fallback pieces (the target drafting for itself through a head of 259 ids accepted 0.4%
  // of its drafts).
  // (99: a head of whole groups of 4 rows. A last partial group runs the matrix kernels' one-row
  // tail, whose last bits may differ from the full head's (a draft's proposal only: the verifier
  // reads the target's own head); with 100 pieces the last one differed by 5e-6.)
  const std::vector<int64_t> ids = frequent_head_ids(*s.info.tokenizer, V, 99);
  CHECK(s.info.tokenizer->token_text(3) == "<0x00>");
  CHECK(s.info.tokenizer->token_text(258) == "<0xFF>");
  const size_t n_eos = s.info.tokenizer->eos_ids().size();
  REQUIRE(ids.size() == 99 + n_eos);
  for (Token e : s.info.tokenizer->eos_ids()) CHECK(std::find(ids.begin(), ids.end(), e) != ids.end());
  CHECK(ids[n_eos] == 259);
  CHECK(ids.back() == 357);
  // Asked for the whole vocabulary (a distilled draft trained with vocab_top_n 0): every id.
  CHECK(frequent_head_ids(*s.info.tokenizer, V, V).size() == static_cast<size_t>(V));
  // (The greedy-identity test's "head of 150 pieces" variant drafts through such a head.)

  ModelSource src;
  src.path = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  src.tokenizer = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/tok512.bin";
  src.format = "llama2c";
  LoadedModel loaded = load_model(src);
  LlamaModel reduced(loaded, Activations::kInt8, 99);

  const TokenList prompt = s.info.tokenizer->encode("Once upon a time, there was a little girl", true);
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto logits_of = [&](const Model& m) {
    KvOptions kvo;
    kvo.budget_bytes = 16 << 20;
    KvCacheManager kv(kvo);
    const PoolId pool = kv.add_pool(m.config().kv_geometry());
    const SeqId seq = kv.create(pool);
    kv.reserve(seq, n);
    at::Tensor out = m.forward(token_tensor(prompt), at::arange(0, n, at::kLong), kv.view_at(seq, 0, n));  // [n, V]
    (void)kv.release(seq);
    return out;
  };
  const at::Tensor full = logits_of(*s.model), cut = logits_of(reduced);
  REQUIRE(cut.sizes() == full.sizes());
  const at::Tensor kept = at::tensor(ids, at::kLong);
  CHECK(at::equal(cut.index_select(1, kept), full.index_select(1, kept)));
  at::Tensor dropped_mask = at::ones({V}, at::kBool);
  dropped_mask.index_fill_(0, kept, false);
  const at::Tensor dropped = cut.index_select(1, dropped_mask.nonzero().squeeze(1));
  CHECK(dropped.numel() == n * (V - static_cast<int64_t>(ids.size())));
  CHECK(at::all(at::isinf(dropped) & (dropped < 0)).item<bool>());
  // The full model does put mass there: a check that could fail.
  CHECK(at::all(at::isfinite(full)).item<bool>());
}

TEST_CASE("the heuristic schedule grows after full acceptance and shrinks otherwise", "[spec][schedule]") {
  DrafterOptions o;
  o.name = "draft_model";
  o.draft_model = stories_path();
  o.draft_model_format = "auto";
  o.num_speculative_tokens = 2;
  o.max_speculative_tokens = 10;
  o.schedule = "heuristic";
  Run r = run_both(o, "Once upon a time", 100);
  REQUIRE(r.spec.tokens == r.ar.tokens);
  // Always fully accepted (same model): 2, 4, 6, 8, 10, 10, ... until the length limit clips it.
  REQUIRE(r.spec.steps.size() >= 5);
  CHECK(r.spec.steps[0].drafted == 2);
  CHECK(r.spec.steps[1].drafted == 4);
  CHECK(r.spec.steps[2].drafted == 6);
  CHECK(r.spec.steps[3].drafted == 8);
  CHECK(r.spec.steps[4].drafted == 10);
}

TEST_CASE("rollback leaves no trace: rejected drafts do not change later logits", "[spec][kv]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  const ModelConfig& c = s.model->config();
  TokenList prompt = s.info.tokenizer->encode("Lily and Ben played in the garden", true);
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> pv(prompt.begin(), prompt.end());
  const TokenList follow = {300, 301, 302, 303, 304, 305};

  // Decode `follow` after a verification pass over [follow[0], junk...] that keeps only
  // follow[0]; returns the logits of each later single-token step.
  auto run = [&](const TokenList& junk) {
    KvOptions kvo;
    kvo.block_size = 4;  // drafts cross block boundaries
    kvo.budget_bytes = 8 << 20;
    KvCacheManager kv(kvo);
    PoolId pool = kv.add_pool(c.kv_geometry());
    KvSequence seq(kv, pool);
    const SeqId id = seq.id();
    kv.reserve(id, n);
    s.model->forward(at::tensor(pv, at::kLong), at::arange(n, at::kLong), kv.view(id, n));
    REQUIRE(kv.commit(id, n) == KvStatus::kOk);
    std::vector<int64_t> verify = {follow[0]};
    verify.insert(verify.end(), junk.begin(), junk.end());
    const int64_t k1 = static_cast<int64_t>(verify.size());
    kv.reserve(id, k1);
    s.model->forward(at::tensor(verify, at::kLong), at::arange(n, n + k1, at::kLong), kv.view_at(id, n, k1));
    REQUIRE(kv.commit(id, 1) == KvStatus::kOk);
    REQUIRE(kv.truncate(id, n + 1) == KvStatus::kOk);
    std::vector<at::Tensor> out;
    for (size_t i = 1; i < follow.size(); ++i) {
      const int64_t pos = kv.length(id);
      kv.reserve(id, 1);
      out.push_back(s.model->forward(at::full({1}, static_cast<int64_t>(follow[i]), at::kLong),
                                     at::full({1}, pos, at::kLong), kv.view(id, 1)));
      REQUIRE(kv.commit(id, 1) == KvStatus::kOk);
    }
    return out;
  };
  auto a = run({17, 18, 19, 20, 21, 22, 23});
  auto b = run({400, 401, 402, 403, 404, 405, 406});
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i], b[i]));  // bit-identical
  // It can fail: keeping the junk (no rollback) changes the logits.
  KvOptions kvo;
  kvo.block_size = 4;
  kvo.budget_bytes = 8 << 20;
  KvCacheManager kv(kvo);
  PoolId pool = kv.add_pool(c.kv_geometry());
  KvSequence seq(kv, pool);
  kv.reserve(seq.id(), n + 3);
  std::vector<int64_t> with_junk = pv;
  with_junk.insert(with_junk.end(), {follow[0], 17, 18});
  s.model->forward(at::tensor(with_junk, at::kLong), at::arange(n + 3, at::kLong), kv.view(seq.id(), n + 3));
  REQUIRE(kv.commit(seq.id(), n + 3) == KvStatus::kOk);
  kv.reserve(seq.id(), 1);
  at::Tensor polluted = s.model->forward(at::full({1}, static_cast<int64_t>(follow[1]), at::kLong),
                                         at::full({1}, n + 1, at::kLong), kv.view(seq.id(), 1));
  CHECK_FALSE(at::equal(polluted, a[0]));
}

TEST_CASE("the paged cache's gather path equals the contiguous path bit for bit", "[spec][kv]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  const ModelConfig& c = s.model->config();
  TokenList ids = s.info.tokenizer->encode("The little dog ran to the park and saw a big red ball", true);
  const int64_t n = static_cast<int64_t>(ids.size());
  KvOptions kvo;
  kvo.block_size = 2;
  kvo.budget_bytes = 8 << 20;
  KvCacheManager kv(kvo);
  PoolId pool = kv.add_pool(c.kv_geometry());
  KvSequence a(kv, pool), b(kv, pool);
  ContiguousKv ref(c.kv_geometry(), n);
  // Interleave two sequences token by token so that their blocks alternate.
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor tok = at::full({1}, static_cast<int64_t>(ids[i]), at::kLong);
    at::Tensor pos = at::full({1}, i, at::kLong);
    kv.reserve(a.id(), 1);
    KvView va = kv.view(a.id(), 1);
    at::Tensor la = s.model->forward(tok, pos, va);
    REQUIRE(kv.commit(a.id(), 1) == KvStatus::kOk);
    kv.reserve(b.id(), 1);
    s.model->forward(at::full({1}, int64_t(5), at::kLong), pos, kv.view(b.id(), 1));
    REQUIRE(kv.commit(b.id(), 1) == KvStatus::kOk);
    at::Tensor lr = s.model->forward(tok, pos, ref.append_view(1));
    ref.commit(1);
    if (i >= 4) CHECK(va.read_base < 0);  // really the gather path
    CHECK(at::equal(la, lr));
  }
}

TEST_CASE("prompt lookup proposes the continuation of the latest earlier match", "[spec][prompt_lookup]") {
  //             0  1  2  3  4  5  6  7  8  9
  TokenList t = {5, 6, 7, 8, 9, 5, 6, 7, 1, 5, 6};
  CHECK(PromptLookupDrafter::lookup(t, 1, 3, 3) == TokenList{7, 1, 5});  // "5 6" last seen at 5 -> 7 1 5
  CHECK(PromptLookupDrafter::lookup(t, 3, 3, 3).empty());               // "1 5 6" never seen before
  CHECK(PromptLookupDrafter::lookup({1, 2, 3}, 1, 3, 4).empty());
  CHECK(PromptLookupDrafter::lookup({4, 4, 4}, 1, 1, 5) == TokenList{4});
}

TEST_CASE("append_head_token: greedy argmax (lowest id on ties) and its softmax confidence against the threshold",
          "[spec][head_token]") {
  SamplingOptions greedy;
  Rng rng(1);
  std::vector<float> scratch;
  auto ctx_at = [&](double threshold) { return DraftContext{0, nullptr, 0, &greedy, &rng, threshold}; };
  // Rows 10, 20, 30: row 20 wins; its probability 1 / (1 + e^-1.5 + e^-1) = 0.6285317 (by hand).
  const float lp[3] = {0.5f, 2.0f, 1.0f};
  const int64_t ids[3] = {10, 20, 30};
  DraftBlock b;
  CHECK(append_head_token(lp, ids, 3, 64, ctx_at(0.6), b, scratch));
  CHECK(b.tokens == TokenList{20});
  REQUIRE(b.confidence.size() == 1);
  CHECK(b.confidence[0] == Approx(0.6285317).epsilon(1e-6));
  CHECK_FALSE(append_head_token(lp, ids, 3, 64, ctx_at(0.65), b, scratch));  // below: nothing appended
  CHECK(b.tokens.size() == 1);
  const float tie[2] = {1.0f, 1.0f};
  const int64_t tie_ids[2] = {7, 3};
  CHECK(append_head_token(tie, tie_ids, 2, 64, ctx_at(0.0), b, scratch));
  CHECK(b.tokens.back() == 3);
  // An 8,192-row head: the confidence equals a float64 softmax of the same logits.
  std::vector<float> big(8192);
  std::vector<int64_t> big_ids(8192);
  Rng g(7);
  for (size_t j = 0; j < big.size(); ++j) {
    big[j] = static_cast<float>(g.uniform() * 12.0);
    big_ids[j] = static_cast<int64_t>(j);
  }
  const size_t best = static_cast<size_t>(std::max_element(big.begin(), big.end()) - big.begin());
  double z = 0.0;
  for (float v : big) z += std::exp(static_cast<double>(v) - big[best]);
  DraftBlock c;
  CHECK(append_head_token(big.data(), big_ids.data(), 8192, 8192, ctx_at(1e-9), c, scratch));
  CHECK(c.tokens == TokenList{static_cast<Token>(best)});
  CHECK(c.confidence[0] == Approx(1.0 / z).epsilon(1e-6));
}

TEST_CASE("append_head_token under sampling: q at the head's token ids, raw logits only when asked",
          "[spec][head_token]") {
  SamplingOptions t1;
  t1.temperature = 1.0;
  Rng rng(3);
  std::vector<float> scratch;
  // Rows 10, 20, 30 of a 64-token vocabulary: q = softmax(lp) there (by hand: e^0.5, e^2, e^1 over
  // their sum), 0 elsewhere.
  const float lp[3] = {0.5f, 2.0f, 1.0f};
  const int64_t ids[3] = {10, 20, 30};
  const double z = std::exp(0.5) + std::exp(2.0) + std::exp(1.0);
  for (const bool want : {false, true}) {
    DraftContext ctx{0, nullptr, 0, &t1, &rng, 0.0};
    ctx.want_logits = want;
    DraftBlock b;
    REQUIRE(append_head_token(lp, ids, 3, 64, ctx, b, scratch));
    REQUIRE(b.probs.size() == 1);
    REQUIRE(b.probs[0].size() == 64);
    for (int64_t v = 0; v < 64; ++v) {
      const double want_q = v == 10 ? std::exp(0.5) / z : v == 20 ? std::exp(2.0) / z : v == 30 ? std::exp(1.0) / z : 0.0;
      CHECK(b.probs[0][static_cast<size_t>(v)] == Approx(want_q).margin(1e-7));
    }
    CHECK(b.probs[0][static_cast<size_t>(b.tokens[0])] > 0.0f);
    if (!want) {
      CHECK(b.logits.empty());  // nobody reads them: no [vocab] copy per draft token
    } else {
      REQUIRE(b.logits.size() == 1);
      REQUIRE(b.logits[0].size() == 64);
      CHECK(b.logits[0][20] == 2.0f);
      CHECK(b.logits[0][0] == -INFINITY);
    }
  }
}

TEST_CASE("target_probs: rows on the worker threads equal logits_to_probs row by row, errors included",
          "[spec][verifier]") {
  const int64_t rows = 6, vocab = 49157;
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  Rng g(9);
  for (float& v : logits) v = static_cast<float>(g.uniform() * 30.0 - 20.0);
  SamplingOptions s;
  s.temperature = 0.8;
  s.top_p = 0.9;
  const int threads = compute_threads();
  for (int t : {1, 2, 3}) {
    INFO(t << " threads");
    set_compute_threads(t);
    const auto p = target_probs(logits.data(), rows, vocab, s);
    REQUIRE(p.size() == static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> want;
      logits_to_probs(logits.data() + r * vocab, vocab, s, want);
      CHECK(p[static_cast<size_t>(r)] == want);
    }
    std::vector<float> bad = logits;
    bad[static_cast<size_t>(4 * vocab + 17)] = NAN;  // a worker's row: its error reaches the caller
    CHECK_THROWS_AS(target_probs(bad.data(), rows, vocab, s), Error);
  }
  set_compute_threads(threads);
}

// A drafter that records what SourcesFirstDrafter asks of it, and drafts `k` copies of token 7.
class RecordingDrafter : public Drafter {
 public:
  std::string name() const override { return "recorder"; }
  void begin(SeqId, const TokenList&) override { ++begins; }
  DraftBlock propose(const DraftContext&, int max_k) override {
    asked.push_back(max_k);
    DraftBlock b;
    b.tokens.assign(static_cast<size_t>(max_k), 7);
    return b;
  }
  void accept(SeqId, int n) override { accepted.push_back(n); }
  void end(SeqId) override { ++ends; }
  std::vector<int64_t> target_hidden_layers() const override { return {3}; }
  void observe_target_hidden(SeqId, const std::vector<const float*>&, int64_t n, int64_t, int64_t first_pos) override {
    observed.push_back({first_pos, n});
  }
  int begins = 0, ends = 0;
  std::vector<int> asked, accepted;
  std::vector<std::pair<int64_t, int64_t>> observed;
};

// Prompt lookup over 2- and 3-grams as a first source, uncapped.
static SourcesFirstDrafter::Source lookup_source() {
  DrafterOptions lo;
  lo.prompt_lookup_min = 2;
  lo.prompt_lookup_max = 3;
  return {std::make_unique<PromptLookupDrafter>(lo), 0};
}

TEST_CASE("prompt_lookup_first: a lookup block where the context has a match, else the drafter's, and the drafter "
          "hears only of its own blocks", "[spec][prompt_lookup]") {
  auto rec = std::make_unique<RecordingDrafter>();
  RecordingDrafter& r = *rec;
  std::vector<SourcesFirstDrafter::Source> sources;
  sources.push_back(lookup_source());
  SourcesFirstDrafter d(std::move(sources), std::move(rec), 2);
  CHECK(d.name() == "prompt_lookup+recorder");
  CHECK(d.target_hidden_layers() == std::vector<int64_t>{3});
  SamplingOptions greedy;
  Rng rng(1);
  d.begin(0, {5, 6, 7});
  CHECK(r.begins == 1);
  // "5 6" was seen before, followed by 8 9 5: the lookup drafts, the recorder is not asked.
  TokenList t = {5, 6, 8, 9, 5, 6};
  DraftContext ctx{0, &t, 3, &greedy, &rng, 0.0};
  const DraftBlock lb = d.propose(ctx, 4);
  CHECK(lb.tokens == TokenList{8, 9, 5, 6});
  CHECK(lb.source == "prompt_lookup");  // logged per step (/steps/source)
  d.accept(0, 2);
  CHECK(r.asked.empty());
  CHECK(r.accepted.empty());
  // Every target forward's rows reach the drafter, whoever drafted.
  const float row[1] = {0.f};
  d.observe_target_hidden(0, {row}, 3, 1, 5);
  CHECK(r.observed == std::vector<std::pair<int64_t, int64_t>>{{5, 3}});
  // "9 4" and "4" alone: no 2-gram match; the recorder drafts, capped at fallback 2 of gamma 4.
  t = {5, 6, 8, 9, 4};
  const DraftBlock fb = d.propose(ctx, 4);
  CHECK(fb.tokens == TokenList{7, 7});
  CHECK(fb.source == "recorder");
  d.accept(0, 1);
  CHECK(r.asked == std::vector<int>{2});
  CHECK(r.accepted == std::vector<int>{1});
  CHECK(d.propose(ctx, 1).tokens == TokenList{7});  // a step's gamma below the cap
  CHECK(r.asked == std::vector<int>{2, 1});
  CHECK(d.propose(ctx, 0).tokens.empty());  // gamma 0 (schedule: cost): nobody is asked
  CHECK(r.asked.size() == 2);
  d.accept(0, 0);
  CHECK(r.accepted.size() == 1);  // the gamma-0 step was not the recorder's
  CHECK(d.steps_from(0) == 1);
  CHECK(d.steps_from(1) == 2);
  d.end(0);
  CHECK(r.ends == 1);
}

// A source that drafts `tokens` where the context ends in `trigger`, else nothing; it counts what
// SourcesFirstDrafter forwards to it.
class TriggeredSource : public Drafter {
 public:
  TriggeredSource(Token trigger, TokenList tokens) : trigger_(trigger), tokens_(std::move(tokens)) {}
  std::string name() const override { return "triggered"; }
  void begin(SeqId, const TokenList&) override { ++begins; }
  DraftBlock propose(const DraftContext& ctx, int max_k) override {
    asked.push_back(max_k);
    DraftBlock b;
    if (!ctx.tokens->empty() && ctx.tokens->back() == trigger_)
      b.tokens.assign(tokens_.begin(), tokens_.begin() + std::min<int64_t>(max_k, static_cast<int64_t>(tokens_.size())));
    return b;
  }
  void accept(SeqId, int n) override { accepted.push_back(n); }
  void end(SeqId) override { ++ends; }
  int begins = 0, ends = 0;
  std::vector<int> asked, accepted;

 private:
  Token trigger_;
  TokenList tokens_;
};

TEST_CASE("retrieval_first: two sources asked in order, the drafter only where both are empty, each hears only of its "
          "own blocks", "[spec][prompt_lookup]") {
  auto rec = std::make_unique<RecordingDrafter>();
  auto src = std::make_unique<TriggeredSource>(4, TokenList{11, 12, 13});
  RecordingDrafter& r = *rec;
  TriggeredSource& ts = *src;
  std::vector<SourcesFirstDrafter::Source> sources;
  sources.push_back(lookup_source());
  sources.push_back({std::move(src), 2});
  SourcesFirstDrafter d(std::move(sources), std::move(rec), 1);
  CHECK(d.name() == "prompt_lookup+triggered+recorder");
  CHECK(d.n_sources() == 2);
  SamplingOptions greedy;
  Rng rng(1);
  d.begin(0, {5, 6, 4});
  CHECK(ts.begins == 1);
  CHECK(r.begins == 1);
  // A 2-gram match ("5 6") and the trigger: the lookup wins, nobody else is asked.
  TokenList t = {5, 6, 4, 9, 5, 6};
  DraftContext ctx{0, &t, 3, &greedy, &rng, 0.0};
  DraftBlock b = d.propose(ctx, 4);
  CHECK(b.tokens == TokenList{4, 9, 5, 6});
  CHECK(b.source == "prompt_lookup");
  d.accept(0, 3);
  CHECK(ts.asked.empty());
  CHECK(r.asked.empty());
  CHECK(ts.accepted.empty());
  // No 2-gram match, the context ends in the trigger: the second source drafts, capped at 2.
  t = {5, 6, 8, 9, 4};
  b = d.propose(ctx, 4);
  CHECK(b.tokens == TokenList{11, 12});
  CHECK(b.source == "triggered");
  d.accept(0, 1);
  CHECK(ts.asked == std::vector<int>{2});
  CHECK(ts.accepted == std::vector<int>{1});
  CHECK(r.asked.empty());
  // Neither: the drafter, capped at 1; the source was asked and answered nothing.
  t = {5, 6, 8, 9, 3};
  b = d.propose(ctx, 4);
  CHECK(b.tokens == TokenList{7});
  CHECK(b.source == "recorder");
  d.accept(0, 0);
  CHECK(ts.asked == std::vector<int>{2, 2});
  CHECK(ts.accepted == std::vector<int>{1});
  CHECK(r.asked == std::vector<int>{1});
  CHECK(r.accepted == std::vector<int>{0});
  CHECK(d.steps_from(0) == 1);
  CHECK(d.steps_from(1) == 1);
  CHECK(d.steps_from(2) == 1);
  d.end(0);
  CHECK(ts.ends == 1);
  CHECK(r.ends == 1);
}

TEST_CASE("the registry puts the sources its options name in front of a drafter, and refuses a datastore it cannot "
          "make", "[spec][prompt_lookup]") {
  DrafterRegistry reg = DrafterRegistry::with_builtins();  // no retrieval: the application registers it
  reg.add("recorder", [](const DrafterOptions&, const DrafterEnv&) -> std::unique_ptr<Drafter> {
    return std::make_unique<RecordingDrafter>();
  });
  DrafterOptions o;
  o.name = "recorder";
  const DrafterEnv env{};
  CHECK(reg.create(o, env)->name() == "recorder");
  o.prompt_lookup_first = true;
  CHECK(reg.create(o, env)->name() == "prompt_lookup+recorder");
  o.retrieval_first = true;
  const Error e = test::catch_error([&] { reg.create(o, env); });
  CHECK(e.kind() == ErrorKind::kConfig);
  CHECK(e.field() == "retrieval_first");
  CHECK_THAT(e.what(), Catch::Contains("needs the retrieval drafter"));
}

// Prompt lookup whose begin() takes a known time, as a draft model's prefill of the prompt does.
class SlowBeginDrafter : public PromptLookupDrafter {
 public:
  using PromptLookupDrafter::PromptLookupDrafter;
  void begin(SeqId seq, const TokenList& prompt) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    PromptLookupDrafter::begin(seq, prompt);
  }
};

TEST_CASE("the drafter's begin() is timed as prompt processing, apart from the decode phase", "[spec][timing]") {
  // Each of prefill, draft prefill and decode is its own interval inside the call, so their sum
  // fits in the call's wall time; with begin() counted in decode too, the sum would exceed it by
  // the 150 ms sleep.
  c10::InferenceMode guard;
  Stories& s = stories();
  DrafterOptions o;
  o.name = "prompt_lookup";
  SlowBeginDrafter drafter(o);
  TokenList ids = s.info.tokenizer->encode("Once upon a time, there was a little girl", true);
  GenerationOptions gen;
  gen.max_new_tokens = 24;
  const auto t0 = std::chrono::steady_clock::now();
  const SpecResult r = generate_speculative(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}, drafter, o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.draft_prefill_seconds >= 0.15);
  CHECK(r.prefill_seconds > 0.0);
  CHECK(r.decode_seconds > 0.0);
  CHECK(r.prefill_seconds + r.draft_prefill_seconds + r.decode_seconds <= wall);
  // Without a drafter there is no drafter prefill.
  const GenerationResult ar = generate_ar(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{});
  CHECK(ar.draft_prefill_seconds == 0.0);
}

TEST_CASE("at the context's end every verified token is emitted, and the KV peaks count the prefill",
          "[spec][context][kv]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  const int64_t context = s.model->config().max_position_embeddings;
  // A prompt 7 tokens short of the context; the model drafting for itself keeps every draft, so
  // the steps run into the context with whole blocks.
  TokenList ids;
  while (static_cast<int64_t>(ids.size()) < context - 7) {
    for (Token t : s.info.tokenizer->encode("Once upon a time, there was a little girl named Lily.", false))
      ids.push_back(t);
  }
  ids.resize(static_cast<size_t>(context - 7));
  DrafterOptions o;
  o.name = "draft_model";
  o.draft_model = stories_path();
  o.num_speculative_tokens = 8;
  o.max_speculative_tokens = 8;
  KvOptions kvo;
  kvo.budget_bytes = 64 << 20;
  for (const int64_t max_new : {int64_t{7}, int64_t{20}}) {  // 7: the limit and the context meet; 20: the context stops it
    INFO("max_new_tokens " << max_new);
    KvCacheManager kv(kvo);
    const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
    DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
    auto drafter = drafter_registry().create(o, env);
    GenerationOptions gen;
    gen.max_new_tokens = max_new;
    const SpecResult r =
        generate_speculative(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}, *drafter, o, {&kv, pool});
    const GenerationResult ar =
        generate_ar(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}, KvMode::kCached, {}, {&kv, pool});
    CHECK(r.tokens == ar.tokens);
    REQUIRE(r.tokens.size() == 7);
    // The prefill's token, then n + 1 per step: no step verified a draft whose token the context
    // cut off (before the fix, the last step drafted one more and its bonus token was dropped).
    int64_t yielded = 1;
    for (const SpecStep& st : r.steps) yielded += st.accepted + 1;
    CHECK(yielded == static_cast<int64_t>(r.tokens.size()));
  }
  // One or two new tokens: the peaks are the prefill's (they were sampled only after decode
  // steps: 0). A run of one token does not start the drafter (2026-12-07): the draft model
  // prefills nothing; with two it does, and its prefilled prompt counts (its own pool).
  for (const int64_t n : {1, 2})
  for (const bool with_drafter : {false, true}) {
    INFO((with_drafter ? "draft_model" : "AR") << ", " << n << " new tokens");
    KvCacheManager kv(kvo);
    const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
    DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
    GenerationOptions gen;
    gen.max_new_tokens = n;
    const TokenList prompt(ids.begin(), ids.begin() + 100);
    GenerationResult r;
    if (with_drafter) {
      auto drafter = drafter_registry().create(o, env);
      r = generate_speculative(*s.model, *s.info.tokenizer, prompt, gen, SamplingOptions{}, *drafter, o, {&kv, pool});
    } else {
      r = generate_ar(*s.model, *s.info.tokenizer, prompt, gen, SamplingOptions{}, KvMode::kCached, {}, {&kv, pool});
    }
    CHECK(static_cast<int64_t>(r.tokens.size()) == n);
    CHECK(r.kv_seq_peak_bytes > 0);
    if (with_drafter && n == 2) CHECK(r.kv_peak_bytes > r.kv_seq_peak_bytes);
    else CHECK(r.kv_peak_bytes == r.kv_seq_peak_bytes);
  }
}

// A separate draft model whose context is shorter than the target's: stories260K cut to 64
// positions (its llama2.c header's seq_len, the RoPE tables cut to match) drafting for the
// 512-position stories260K. It drafts while the context fits it and then stops, the target decoding
// on alone: the output is AR's. Before 2026-12-05 the draft's forward at position 64 stopped the
// run with "position out of range", and a prompt beyond 64 tokens failed in begin().
TEST_CASE("a draft model with a shorter context than the target drafts until it is full, then not",
          "[spec][context][draft_model]") {
  c10::InferenceMode guard;
  Stories& s = stories();
  const std::string dir = std::string(SPECLAB_BINARY_DIR) + "/test_spec_decode_short_ctx";
  std::filesystem::create_directories(dir);
  const std::string src = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  const std::string tok = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/tok512.bin";
  const std::string path = dir + "/stories260K_ctx64.bin";
  {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int32_t header[7];
    std::memcpy(header, bytes.data(), sizeof header);
    REQUIRE(header[5] > 0);  // a shared classifier: the file ends with the two RoPE tables
    const int32_t seq_len = header[6], head_half = header[0] / header[3] / 2, cut = 64;
    REQUIRE(seq_len == 512);
    const size_t table = static_cast<size_t>(seq_len) * head_half * sizeof(float);
    const size_t weights_end = bytes.size() - 2 * table, keep = static_cast<size_t>(cut) * head_half * sizeof(float);
    std::vector<char> out(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(weights_end));
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(weights_end),
               bytes.begin() + static_cast<std::ptrdiff_t>(weights_end + keep));  // real, rows 0..63
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(weights_end + table),
               bytes.begin() + static_cast<std::ptrdiff_t>(weights_end + table + keep));  // imaginary
    std::memcpy(out.data() + 6 * sizeof(int32_t), &cut, sizeof cut);
    std::ofstream(path, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
  }
  DrafterOptions o;
  o.name = "draft_model";
  o.draft_model = path;
  o.draft_model_format = "llama2c";
  o.draft_model_tokenizer = tok;
  o.num_speculative_tokens = 4;
  const TokenList story = s.info.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  // 63: the pending token at position 63, the draft's last; 64: the prompt fills the draft's context;
  // 80: beyond it from the start.
  for (const int64_t prompt_len : {int64_t{40}, int64_t{63}, int64_t{64}, int64_t{80}}) {
    INFO("prompt of " << prompt_len << " tokens");
    TokenList ids;
    while (static_cast<int64_t>(ids.size()) < prompt_len) ids.insert(ids.end(), story.begin(), story.end());
    ids.resize(static_cast<size_t>(prompt_len));
    KvOptions kvo;
    kvo.budget_bytes = 64 << 20;
    KvCacheManager kv(kvo);
    const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
    DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
    auto drafter = drafter_registry().create(o, env);
    // Prefilled only where a step can draft (a prompt of exactly the draft's context was
    // prefilled for nothing until 2026-12-06).
    drafter->begin(0, ids);
    CHECK((kv.bytes_used() > 0) == (prompt_len < 64));
    drafter->end(0);
    CHECK(kv.bytes_used() == 0);
    GenerationOptions gen;
    gen.max_new_tokens = 60;
    const SpecResult r =
        generate_speculative(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}, *drafter, o, {&kv, pool});
    const GenerationResult ar =
        generate_ar(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}, KvMode::kCached, {}, {&kv, pool});
    CHECK(r.tokens == ar.tokens);
    REQUIRE(r.tokens.size() == 60);
    // Drafts while the context fits the draft's 64 positions, none after.
    int64_t context = prompt_len + 1, drafted_inside = 0, drafted_beyond = 0;
    for (const SpecStep& st : r.steps) {
      (context <= 64 ? drafted_inside : drafted_beyond) += st.drafted;
      context += st.accepted + 1;
    }
    CHECK(drafted_beyond == 0);
    if (prompt_len < 64) CHECK(drafted_inside > 0);
    CHECK(kv.bytes_used() == 0);
  }
}

TEST_CASE("drafter bad input gives clear errors", "[spec][bad-input]") {
  Stories& s = stories();
  KvOptions kvo;
  KvCacheManager kv(kvo);
  const PoolId pool = kv.add_pool(s.model->config().kv_geometry());
  DrafterEnv env{s.model.get(), &kv, pool, s.model->config().vocab_size};
  auto reg = drafter_registry();
  DrafterOptions o;
  o.name = "nope";
  CHECK_THROWS_WITH(reg.create(o, env), Catch::Contains("known drafters: draft_model, eagle, layer_skip, medusa, prompt_lookup"));
  o.name = "layer_skip";
  o.draft_layers = {0, 9};
  CHECK_THROWS_WITH(reg.create(o, env), Catch::Contains("layer 9 is out of range"));
  o.draft_layers.clear();
  o.num_speculative_tokens = 0;
  CHECK_THROWS_WITH(reg.create(o, env), Catch::Contains("num_speculative_tokens"));
  o.num_speculative_tokens = 4;
  o.name = "draft_model";
  o.draft_model = std::string(SPECLAB_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  o.draft_model_format = "gguf";
  CHECK_THROWS_WITH(reg.create(o, env), Catch::Contains("does not match the target's"));
}

TEST_CASE("the application's registry builds exactly the built-in drafters the config accepts", "[spec][registry]") {
  std::vector<std::string> want = builtin_drafter_names();
  std::sort(want.begin(), want.end());
  CHECK(drafter_registry().names() == want);  // names() is sorted
}

TEST_CASE("SpecResult alpha counts examined positions (run's definition), acceptance_rate every draft", "[spec]") {
  // Step 1 drafts 4 and keeps 1 (positions 1 and 2 examined: the second rejected), step 2 keeps
  // all 4 (4 examined), step 3 drafts none: alpha 5 / 6, acceptance rate 5 / 8.
  SpecResult r;
  r.steps.resize(3);
  r.steps[0].drafted = 4;
  r.steps[0].accepted = 1;
  r.steps[1].drafted = 4;
  r.steps[1].accepted = 4;
  CHECK(r.alpha() == Approx(5.0 / 6.0));
  CHECK(r.acceptance_rate() == Approx(5.0 / 8.0));
  CHECK(SpecResult{}.alpha() == 0.0);
}

TEST_CASE("a run that ends on the prefill's token does not start the drafter", "[spec]") {
  // max_new_tokens 1 (or EOS first): no step drafts, yet a draft model prefilled the whole prompt
  // (an 8,191-token prompt cost EAGLE 4.4 s) and its cache counted in the run's KV peak.
  c10::InferenceMode guard;
  Stories& s = stories();
  const TokenList ids = s.info.tokenizer->encode("Once upon a time", true);
  DrafterOptions o;
  o.name = "recorder";
  o.num_speculative_tokens = 2;
  for (int64_t n : {1, 3}) {
    INFO("max_new_tokens " << n);
    RecordingDrafter d;
    GenerationOptions gen;
    gen.max_new_tokens = n;
    const SpecResult r = generate_speculative(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}, d, o);
    CHECK(static_cast<int64_t>(r.tokens.size()) == n);
    CHECK(d.begins == (n == 1 ? 0 : 1));
    CHECK(d.ends == d.begins);  // end() only for a begun sequence
    CHECK(r.tokens == generate_ar(*s.model, *s.info.tokenizer, ids, gen, SamplingOptions{}).tokens);
  }
}
