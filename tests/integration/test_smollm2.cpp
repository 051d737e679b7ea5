// SmolLM2-135M-Instruct (GGUF Q4_1, the default real model) against llama.cpp.
//
// Reference: tests/fixtures/smollm2/llamacpp_greedy.json, written by
// scripts/make_llamacpp_reference.py with llama-cpp-python (versions recorded in the file): six
// chat prompts rendered with the GGUF's Jinja chat template (checked there with jinja2),
// tokenized by llama.cpp (and, agreeing, by the PyPI `tokenizers` package), then 48 greedy
// tokens with the per-step top-1 minus top-2 logit margin.
//
// Precision: llama.cpp runs on the quantized weights with its own kernels (Q4_1 weights dotted
// with activations quantized to 8 bits); SpecLab dequantizes the same Q4_1/Q8_0 blocks to float32
// and does dense float32 math. The fixture also holds an independent float64 NumPy run on the
// dequantized weights (the arithmetic SpecLab does, at higher precision): it reproduces every
// llama.cpp token of the six prompts, but its top-2 margins differ from llama.cpp's by 0.09
// (median), 0.27 (90th percentile) and 0.67 (max) logits over the 198 steps. So:
//   - against llama.cpp, greedy paths must agree until a step where llama.cpp's margin is small
//     enough for that quantization noise to flip it; the continuations after it are not compared;
//   - against the float64 run, which differs from float32 only by rounding (~1e-4 logits,
//     measured), the paths must agree wherever its margin is clearly above rounding noise.
#include "tests/torch_catch.h"

#include <nlohmann/json.hpp>

#include <c10/core/InferenceMode.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>

#include "experiments/app/experiment_runner.h"
#include "framework/core/error.h"
#include "framework/core/token_tensor.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/batch_decode.h"
#include "framework/io/experiment_config.h"
#include "framework/io/hdf5_recorder.h"
#include "framework/kv/contiguous_kv.h"
#include "models/llama/llama_model.h"
#include "models/loaders/dequant.h"
#include "models/model_loader.h"

using namespace speclab;

namespace {

// A divergence from llama.cpp is accepted only where llama.cpp's top-1 minus top-2 logit margin
// is below this. A flip needs a margin error larger than the margin; the margin errors between
// llama.cpp and exact dequantized math measured on this fixture reach 0.67 (see the top of the
// file), so 0.75 admits every flip that quantization noise can cause, while a real defect (a
// wrong norm, RoPE or mask) moves logits by whole units and flips tokens with larger margins.
constexpr double kMarginTolerance = 0.75;
// Float32 vs the float64 reference: rounding moves logits by ~1e-4 (measured 1e-4 at most on
// the "colors" prompt), so a token whose float64 margin exceeds 1e-2 must be reproduced.
constexpr double kRoundingMargin = 1e-2;
// Every prompt must reproduce at least this many reference tokens (or all of them when the
// reference is shorter): the fixture prompts were chosen so that the float64 dequantized
// reference matches llama.cpp over all of their tokens.
constexpr size_t kMinMatched = 16;

struct SmolLM2 {
  LoadedModel info;  // weights moved out into `model`; tokenizer and template stay
  std::unique_ptr<LlamaModel> model;
};

SmolLM2 load_smollm2(Activations act, const std::string& kv_dtype = "auto") {
  SmolLM2 out;
  ModelSource src;
  src.path = "smollm2-135m-instruct";
  out.info = load_model(src);
  Placement placement;
  placement.kv_dtype = kv_dtype;
  out.model = std::make_unique<LlamaModel>(out.info, act, 0, placement);
  return out;
}

// Float32 activations against the packed weights: the precision the tolerances below were
// measured for (the commands default to int8 activations; see the int8 test case at the end).
SmolLM2& smollm2() {
  static SmolLM2 s = load_smollm2(Activations::kF32);
  return s;
}

// How many leading tokens of `r` equal the llama.cpp reference `expected`.
size_t matched_prefix(const TokenList& expected, const TokenList& r) {
  size_t matched = 0;
  while (matched < expected.size() && matched < r.size() && expected[matched] == r[matched]) ++matched;
  return matched;
}

const nlohmann::json& reference() {
  static nlohmann::json doc = [] {
    const std::string path = std::string(SPECLAB_SOURCE_DIR) + "/tests/fixtures/smollm2/llamacpp_greedy.json";
    std::ifstream in(path);
    if (!in.good()) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
  }();
  return doc;
}

const nlohmann::json& record(const std::string& name) {
  for (const auto& rec : reference().at("prompts"))
    if (rec.at("name") == name) return rec;
  throw std::runtime_error("no reference prompt named " + name);
}

TokenList prompt_ids(const std::string& user) {
  SmolLM2& s = smollm2();
  const std::string text = s.info.chat_template.render({{"user", user}}, true);
  return s.info.tokenizer->encode(text, s.info.add_bos);
}

// Greedy generation for one reference prompt, computed once and shared by the test cases.
const GenerationResult& greedy_cached(const std::string& name) {
  static std::map<std::string, GenerationResult> memo;
  auto it = memo.find(name);
  if (it != memo.end()) return it->second;
  SmolLM2& s = smollm2();
  const auto& rec = record(name);
  GenerationOptions gen;
  gen.max_new_tokens = reference().at("settings").at("max_new_tokens");
  SamplingOptions greedy;
  GenerationResult r = generate_ar(*s.model, *s.info.tokenizer, prompt_ids(rec.at("user")), gen, greedy);
  return memo.emplace(name, std::move(r)).first->second;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

TEST_CASE("SmolLM2 chat prompts render and tokenize exactly as llama.cpp", "[smollm2][reference][tokenizer]") {
  SmolLM2& s = smollm2();
  REQUIRE(reference().at("prompts").size() == 6);
  CHECK_FALSE(s.info.add_bos);  // GGUF tokenizer.ggml.add_bos_token = false
  REQUIRE(s.info.chat_template.family() == ChatTemplate::Family::kChatML);
  CHECK(s.info.tokenizer->is_eos(reference().at("settings").at("eos_id").get<Token>()));
  for (const auto& rec : reference().at("prompts")) {
    const std::string user = rec.at("user");
    INFO("prompt " << rec.at("name").get<std::string>() << ": " << user);
    const std::string text = s.info.chat_template.render({{"user", user}}, true);
    CHECK(text == rec.at("rendered").get<std::string>());
    const TokenList ids = s.info.tokenizer->encode(text, s.info.add_bos);
    CHECK(ids == rec.at("prompt_ids").get<TokenList>());
    CHECK(ids == rec.at("tokenizers_prompt_ids").get<TokenList>());  // HF `tokenizers`, same ids
    CHECK(s.info.tokenizer->decode(ids) == text);
  }
}

TEST_CASE("SmolLM2 greedy decoding follows llama.cpp until a near-tie", "[smollm2][reference]") {
  for (const auto& rec : reference().at("prompts")) {
    const std::string name = rec.at("name");
    const TokenList expected = rec.at("tokens").get<TokenList>();
    const auto& steps = rec.at("steps");
    const GenerationResult& r = greedy_cached(name);
    INFO("prompt " << name << ": " << rec.at("user").get<std::string>());
    INFO("SpecLab text: " << r.text);
    INFO("llama.cpp text: " << rec.at("text").get<std::string>());

    const size_t matched = matched_prefix(expected, r.tokens);
    const size_t need = std::min(kMinMatched, expected.size());
    if (matched == expected.size()) {
      WARN(name << ": all " << matched << " llama.cpp tokens reproduced");
      CHECK(r.tokens.size() == expected.size());  // same stop (EOS or max_new_tokens)
      CHECK(r.text == rec.at("text").get<std::string>());
    } else if (matched < r.tokens.size()) {
      const double margin = steps.at(matched).at("margin");
      const Tokenizer& tok = *smollm2().info.tokenizer;
      WARN(name << ": matches llama.cpp for " << matched << " of " << expected.size() << " tokens; then llama.cpp "
                << expected[matched] << " '" << tok.token_text(expected[matched]) << "' vs SpecLab "
                << r.tokens[matched] << " '" << tok.token_text(r.tokens[matched]) << "' (llama.cpp top-2 margin "
                << margin << ", runner-up " << steps.at(matched).at("second").get<Token>() << ")");
      CHECK(margin < kMarginTolerance);
      CHECK(matched >= need);
    } else {
      // SpecLab stopped early (EOS) although llama.cpp went on: a mismatch in stop handling.
      FAIL(name << ": SpecLab produced " << r.tokens.size() << " tokens, llama.cpp " << expected.size());
    }
  }
}

TEST_CASE("SmolLM2 greedy decoding equals the float64 dequantized reference", "[smollm2][reference]") {
  for (const auto& rec : reference().at("prompts")) {
    const std::string name = rec.at("name");
    const TokenList expected = rec.at("f64_dequant_tokens").get<TokenList>();
    const auto margins = rec.at("f64_dequant_margins").get<std::vector<double>>();
    REQUIRE(margins.size() == expected.size());
    const GenerationResult& r = greedy_cached(name);
    INFO("prompt " << name << "; SpecLab text: " << r.text);
    // Compare up to (and including) the first step whose float64 margin is within rounding noise.
    size_t compare = expected.size();
    for (size_t i = 0; i < margins.size(); ++i)
      if (margins[i] < kRoundingMargin) {
        compare = i + 1;
        break;
      }
    for (size_t i = 0; i < compare; ++i) {
      INFO("step " << i << ", float64 margin " << margins[i]);
      REQUIRE(i < r.tokens.size());
      if (margins[i] >= kRoundingMargin) REQUIRE(r.tokens[i] == expected[i]);
    }
    if (compare == expected.size()) CHECK(r.tokens.size() == expected.size());
  }
}

TEST_CASE("SmolLM2 answers are fluent and on topic", "[smollm2][quality]") {
  {
    const GenerationResult& r = greedy_cached("fact");
    INFO("text: " << r.text);
    CHECK(r.text.find("Tokyo") != std::string::npos);
    CHECK(r.stop_reason == StopReason::kEos);
  }
  {
    const GenerationResult& r = greedy_cached("colors");
    INFO("text: " << r.text);
    const std::string t = lower(r.text);
    int colors = 0;
    for (const char* c : {"red", "blue", "green", "yellow", "orange", "purple", "black", "white"})
      colors += t.find(c) != std::string::npos;
    CHECK(colors >= 2);
  }
  {
    const GenerationResult& r = greedy_cached("code");
    INFO("text: " << r.text);
    CHECK(r.text.find("def ") != std::string::npos);
    CHECK(r.text.find("[::-1]") != std::string::npos);
  }
}

TEST_CASE("SmolLM2's quantized GGUF gets a float16 K/V cache by default, as llama.cpp", "[smollm2][kv_dtype]") {
  CHECK(smollm2().model->config().kv_geometry().dtype == "float16");
  CHECK(smollm2().model->config().kv_geometry().element_bytes() == 2);
}

// Any packed layer matrix makes the weights quantized: llama.cpp's Q4_K_S file of Qwen2.5-0.5B
// stores blk.0.ffn_down in another type than the rest (Q5_K, loaded as float32 until Q5_K was
// packed), and until 2026-12-07 that one matrix decided (a float32 cache beside the packed rest). Layer 0's down projection
// dequantized here stands for it; every matrix dequantized (--weights f32) keeps float32.
TEST_CASE("kv_dtype auto: float16 when any layer matrix is packed, not only layer 0's down projection",
          "[smollm2][kv_dtype]") {
  ModelSource src;
  src.path = "smollm2-135m-instruct";
  LoadedModel mixed = load_model(src);
  HostTensor& down0 = mixed.weights.at("model.layers.0.mlp.down_proj.weight");
  REQUIRE(down0.is_packed());
  unpack_to_f32(down0, "down_proj");
  const LlamaModel m(mixed, Activations::kInt8);
  CHECK(m.config().kv_geometry().dtype == "float16");
  src.weights = "f32";
  LoadedModel dense = load_model(src);
  const LlamaModel f(dense, Activations::kInt8);
  CHECK(f.config().kv_geometry().dtype == "float32");
}

// The matmuls' multiply-accumulates per row (`speclab bench`'s arithmetic roof), against the count
// from SmolLM2-135M's published shape (hidden 576, intermediate 1536, 30 layers, 9 query heads and
// 3 kv heads of 64, vocabulary 49,152, tied head): per layer q/k/v 576 x (576 + 2 x 192), o 576 x
// 576, gate/up 576 x 2 x 1536 and down 1536 x 576, and the head 49,152 x 576.
TEST_CASE("SmolLM2's matmul MACs per row: the published shape's count, by the arithmetic that meets them",
          "[smollm2][roof]") {
  const double per_layer = 576.0 * (576 + 2 * 192) + 576.0 * 576 + 576.0 * 2 * 1536 + 1536.0 * 576;
  const double expected = 30 * per_layer + 49152.0 * 576;
  REQUIRE(expected == 134479872.0);
  // Float32 activations: every packed matrix meets float32 rows.
  const LlamaModel::RowMacs f = smollm2().model->matmul_macs_per_row();
  CHECK(f.f32 == expected);
  CHECK(f.int8 == 0.0);
  // Int8 activations (the commands' default): every Q4_1 / Q8_0 matrix meets int8 rows.
  const SmolLM2 s8 = load_smollm2(Activations::kInt8);
  const LlamaModel::RowMacs i = s8.model->matmul_macs_per_row();
  CHECK(i.int8 == expected);
  CHECK(i.f32 == 0.0);
}

TEST_CASE("SmolLM2 cached and naive decoding agree token for token", "[smollm2]") {
  SmolLM2& s = smollm2();
  for (const char* name : {"colors", "code"}) {
    GenerationOptions gen;
    gen.max_new_tokens = 24;
    SamplingOptions greedy;
    const TokenList ids = prompt_ids(record(name).at("user"));
    auto cached = generate_ar(*s.model, *s.info.tokenizer, ids, gen, greedy, KvMode::kCached);
    auto naive = generate_ar(*s.model, *s.info.tokenizer, ids, gen, greedy, KvMode::kNaive);
    INFO("prompt " << name);
    CHECK(cached.tokens.size() == 24);
    CHECK(cached.tokens == naive.tokens);
    CHECK(cached.text == naive.text);
  }
}

TEST_CASE("SmolLM2 prefill logits equal one-by-one decoding logits and llama.cpp's", "[smollm2]") {
  // Prefill and step-by-step decoding do the same float32 math in a different summation order
  // (one [n, k] matmul vs n [1, k] ones, softmax over a masked row vs a shorter row). Float32
  // rounding (eps 1.2e-7) of sums over <= 1536 terms through 30 layers gives logit differences
  // of order 1e-4 (measured: 7e-5 on logits of magnitude ~30); we allow 2e-3, far below the
  // whole-logit change that any real difference (a wrong position, mask or cache slot) causes,
  // as the negative control below shows.
  constexpr double kTol = 2e-3;
  c10::InferenceMode guard;
  SmolLM2& s = smollm2();
  const ModelConfig& c = s.model->config();
  const auto& rec = record("colors");
  const TokenList ids = prompt_ids(rec.at("user"));
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> v(ids.begin(), ids.end());
  at::Tensor toks = at::tensor(v, at::kLong);

  ContiguousKv kv_a(c.kv_geometry(), n);
  at::Tensor all = s.model->forward(toks, at::arange(n, at::kLong), kv_a.append_view(n));  // [n, vocab]
  kv_a.commit(n);
  REQUIRE(all.size(0) == n);
  REQUIRE(all.size(1) == c.vocab_size);

  ContiguousKv kv_b(c.kv_geometry(), n);
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor one = s.model->forward(toks.narrow(0, i, 1), at::full({1}, i, at::kLong), kv_b.append_view(1));
    kv_b.commit(1);
    const double diff = (one[0] - all[i]).abs().max().item<double>();
    worst = std::max(worst, diff);
    INFO("position " << i);
    CHECK(diff < kTol);
  }
  WARN("largest prefill vs step-by-step logit difference: " << worst << " (tolerance " << kTol << ")");

  // Negative control: the last token at a wrong position (no context) must differ clearly.
  ContiguousKv kv_c(c.kv_geometry(), 1);
  at::Tensor alone = s.model->forward(toks.narrow(0, n - 1, 1), at::full({1}, 0, at::kLong), kv_c.append_view(1));
  CHECK((alone[0] - all[n - 1]).abs().max().item<double>() > 100 * kTol);

  // The absolute scale against llama.cpp: its logit for the token it chose first, and the order
  // of its top-2, within the quantization noise bound of kMarginTolerance (measured here: 0.013
  // on the logit, 0.06 on the margin).
  const auto& step0 = rec.at("steps").at(0);
  at::Tensor last = all[n - 1];
  const double ours = last[step0.at("token").get<int64_t>()].item<double>();
  CHECK(std::abs(ours - step0.at("logit").get<double>()) < kMarginTolerance);
  const double our_margin =
      ours - last[step0.at("second").get<int64_t>()].item<double>();
  CHECK(std::abs(our_margin - step0.at("margin").get<double>()) < kMarginTolerance);
}

namespace {

// Greedy AR on every reference prompt with `s`: returns how many prompts reproduce every llama.cpp
// token, and a summary line. Requires every divergence to be a near-tie for llama.cpp (margin
// below kMarginTolerance) after at least `min_matched` tokens, or at the prompt's first near-tie
// where that comes sooner (the colors prompt has one at its 7th token, margin 0.034, where the
// int8 K/V cache on AVX2-only kernels diverged; until 2026-12-07 that failed the test although
// it is the same near-tie the margin check accepts anywhere later).
std::pair<int, std::string> follow_reference(SmolLM2& s, size_t min_matched) {
  int all = 0;
  std::string summary;
  for (const auto& rec : reference().at("prompts")) {
    const std::string name = rec.at("name");
    const TokenList expected = rec.at("tokens").get<TokenList>();
    GenerationOptions gen;
    gen.max_new_tokens = reference().at("settings").at("max_new_tokens");
    const std::string text = s.info.chat_template.render({{"user", rec.at("user").get<std::string>()}}, true);
    const GenerationResult r =
        generate_ar(*s.model, *s.info.tokenizer, s.info.tokenizer->encode(text, s.info.add_bos), gen, SamplingOptions{});
    const size_t matched = matched_prefix(expected, r.tokens);
    INFO("prompt " << name << "; SpecLab text: " << r.text);
    if (matched == expected.size() && r.tokens.size() == expected.size()) {
      ++all;
      summary += " " + name + ": all " + std::to_string(matched) + ";";
      continue;
    }
    REQUIRE(matched < r.tokens.size());
    const double margin = rec.at("steps").at(matched).at("margin");
    summary += " " + name + ": " + std::to_string(matched) + "/" + std::to_string(expected.size()) + " (margin " +
               std::to_string(margin).substr(0, 5) + ");";
    CHECK(margin < kMarginTolerance);
    size_t first_tie = 0;
    while (first_tie < expected.size() && rec.at("steps").at(first_tie).at("margin").get<double>() >= kMarginTolerance)
      ++first_tie;
    CHECK(matched >= std::min({min_matched, first_tie, expected.size()}));
  }
  return {all, summary};
}

}  // namespace

// int8 activations (each activation row quantized per 32-block to int8, llama.cpp's scheme for
// these weights, though SpecLab keeps the block scale in float32 where llama.cpp rounds it to
// f16): the same reference prompts. Reported: how many prompts reproduce every llama.cpp token.
// Required: every divergence is a near-tie for llama.cpp (margin below kMarginTolerance), after
// at least 8 tokens; a wrong int8 kernel (scale, offset or sign) moves logits by
// whole units and diverges at once on a confident token.
TEST_CASE("SmolLM2 with int8 activations follows llama.cpp until a near-tie", "[smollm2][reference][int8]") {
  SmolLM2 s8 = load_smollm2(Activations::kInt8);
  REQUIRE(s8.model->activations() == Activations::kInt8);
  const auto [all, summary] = follow_reference(s8, 8);
  WARN("int8 activations: " << all << " of " << reference().at("prompts").size()
                            << " llama.cpp reference prompts reproduce every token;" << summary);
}

// An int8 K/V cache (kv_dtype int8: each head's values rounded to 1/127 of its largest, where
// llama.cpp's default cache is float16) with int8 activations, as `--kv-dtype int8` runs: the
// same requirement, reported the same way.
TEST_CASE("SmolLM2 with an int8 K/V cache follows llama.cpp until a near-tie", "[smollm2][reference][kv_int8]") {
  SmolLM2 s8 = load_smollm2(Activations::kInt8, "int8");
  REQUIRE(s8.model->config().kv_geometry().dtype == "int8");
  const auto [all, summary] = follow_reference(s8, 8);
  WARN("int8 K/V cache and activations: " << all << " of " << reference().at("prompts").size()
                                         << " llama.cpp reference prompts reproduce every token;" << summary);
}

// Batched decoding (engine/batch_decode.h, LlamaModel::forward_decode_batch): one pass for the
// next token of several sequences. Row b must be what a one-row forward of sequence b alone
// computes, bit for bit (matmul rows are row-exact, and each sequence attends its own context in
// its own attention call), so that the batched answers of `train-draft` are generate_ar's.
namespace {

// Three sequences of different lengths prefilled one by one into one paged cache, then one more
// token each: the single forwards' logits, and the views of that last step.
struct ThreeSequences {
  std::unique_ptr<KvCacheManager> kv;
  std::vector<std::unique_ptr<KvSequence>> seqs;
  std::vector<KvView> views;
  at::Tensor tokens, positions;
};

ThreeSequences three_sequences(const Model& m, const std::vector<TokenList>& prompts) {
  ThreeSequences t;
  t.kv = std::make_unique<KvCacheManager>(kv_options_for(m.config(), 3 * 256));
  const PoolId pool = t.kv->add_pool(m.config().kv_geometry());
  std::vector<int64_t> toks, pos;
  for (const TokenList& p : prompts) {
    t.seqs.push_back(std::make_unique<KvSequence>(*t.kv, pool));
    const SeqId id = t.seqs.back()->id();
    const int64_t n = static_cast<int64_t>(p.size()) - 1;  // the last token is the batched step's
    t.kv->reserve(id, n + 1);
    TokenList head(p.begin(), p.end() - 1);
    m.forward(token_tensor(head), position_tensor(0, n), t.kv->view(id, n), ForwardOptions{{}, 1});
    REQUIRE(t.kv->commit(id, n) == KvStatus::kOk);
    t.views.push_back(t.kv->view(id, 1));
    toks.push_back(p.back());
    pos.push_back(n);
  }
  t.tokens = at::tensor(toks, at::kLong);
  t.positions = at::tensor(pos, at::kLong);
  return t;
}

}  // namespace

TEST_CASE("SmolLM2 batched decode rows are the one-row forwards' logits bit for bit, each over its own context",
          "[smollm2][batch]") {
  for (const char* kv_dtype : {"auto", "int8"}) {
    SmolLM2 s = load_smollm2(Activations::kInt8, kv_dtype);
    const std::vector<TokenList> prompts = {prompt_ids("Name three colors."),
                                            prompt_ids("Write a haiku about the sea, then explain it line by line."),
                                            prompt_ids("Hi")};
    ThreeSequences t = three_sequences(*s.model, prompts);
    std::vector<at::Tensor> single;
    for (size_t b = 0; b < t.views.size(); ++b) {
      const int64_t i = static_cast<int64_t>(b);
      single.push_back(s.model->forward(t.tokens.narrow(0, i, 1), t.positions.narrow(0, i, 1), t.views[b]));
    }
    const at::Tensor batched = s.model->forward_decode_batch(t.tokens, t.positions, t.views);
    REQUIRE(batched.sizes() == at::IntArrayRef({3, s.model->config().vocab_size}));
    for (int64_t b = 0; b < 3; ++b) CHECK(at::equal(batched[b], single[static_cast<size_t>(b)][0]));
    // Model's default (B forwards one after the other, copied into rows; what LlamaModel runs
    // where the views are not all on the CPU backend's storage): the same rows, and each hidden
    // state row is that sequence's.
    ForwardOptions with_hidden;
    with_hidden.hidden_layers = {0, s.model->config().num_hidden_layers - 1};
    std::vector<at::Tensor> hidden;
    with_hidden.hidden_out = &hidden;
    const at::Tensor one_by_one = s.model->Model::forward_decode_batch(t.tokens, t.positions, t.views, with_hidden);
    CHECK(at::equal(one_by_one, batched));
    REQUIRE(hidden.size() == 2);
    for (size_t b = 0; b < t.views.size(); ++b) {
      const int64_t i = static_cast<int64_t>(b);
      std::vector<at::Tensor> h;
      ForwardOptions fo = with_hidden;
      fo.hidden_out = &h;
      s.model->forward(t.tokens.narrow(0, i, 1), t.positions.narrow(0, i, 1), t.views[b], fo);
      for (size_t l = 0; l < 2; ++l) CHECK(at::equal(hidden[l][i], h[l][0]));
    }
    CHECK_FALSE(at::equal(hidden[0][0], hidden[0][1]));
    // The check can fail: with the first two views swapped, rows 0 and 1 attend the other
    // sequence's context, and their logits move.
    std::vector<KvView> swapped = {t.views[1], t.views[0], t.views[2]};
    const at::Tensor wrong = s.model->forward_decode_batch(t.tokens, t.positions, swapped);
    CHECK_FALSE(at::equal(wrong[0], single[0][0]));
    CHECK((wrong[1] - single[1][0]).abs().max().item<float>() > 0.1f);
    CHECK(at::equal(wrong[2], single[2][0]));
  }
}

TEST_CASE("SmolLM2 batched greedy decoding (generate_ar_batch) equals generate_ar token for token",
          "[smollm2][batch]") {
  SmolLM2 s = load_smollm2(Activations::kInt8);
  std::vector<TokenList> prompts;
  for (const auto& rec : reference().at("prompts")) prompts.push_back(prompt_ids(rec.at("user")));
  prompts.push_back(prompt_ids("Hi"));
  prompts.push_back(prompt_ids("Reply with the single word yes."));  // stops early at EOS
  GenerationOptions gen;
  gen.max_new_tokens = 40;
  SamplingOptions greedy;
  std::vector<TokenList> ar;
  std::vector<StopReason> reasons;
  for (const TokenList& p : prompts) {
    const GenerationResult r = generate_ar(*s.model, *s.info.tokenizer, p, gen, greedy);
    ar.push_back(r.tokens);
    reasons.push_back(r.stop_reason);
  }
  CHECK(std::count(reasons.begin(), reasons.end(), StopReason::kEos) >= 1);  // lanes refill mid-run
  for (int64_t width : {1, 3, 16}) {
    std::vector<TokenList> got(prompts.size());
    std::vector<size_t> order;
    BatchDecodeOptions bo;
    bo.width = width;
    generate_ar_batch(*s.model, *s.info.tokenizer, prompts, gen, bo, [&](size_t i, const BatchAnswer& a) {
      got[i] = a.tokens;
      CHECK(a.hidden.empty());
      order.push_back(i);
    });
    INFO("width " << width);
    REQUIRE(order.size() == prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) CHECK(got[i] == ar[i]);
  }
  BatchDecodeOptions bad;
  bad.width = 0;
  CHECK_THROWS_AS(generate_ar_batch(*s.model, *s.info.tokenizer, prompts, gen, bad, {}), Error);
}

// With hidden layers, each answer carries the rows teacher forcing prompt + answer would give
// (what train-draft's features are made of), from the passes that generated it: the same
// tokens, and rows equal to one teacher-forced pass's to float rounding (prefill and decode
// arithmetic differ in their last bits), a top-1 that is the answer itself.
TEST_CASE("SmolLM2 batched decoding keeps each answer's hidden rows: a teacher-forced pass's, to rounding",
          "[smollm2][batch]") {
  SmolLM2 s = load_smollm2(Activations::kInt8);
  const ModelConfig& c = s.model->config();
  const std::vector<TokenList> prompts = {prompt_ids("Name three colors."), prompt_ids("Hi"),
                                          prompt_ids("Write a haiku about the sea.")};
  GenerationOptions gen;
  gen.max_new_tokens = 24;
  BatchDecodeOptions bo;
  bo.width = 2;
  bo.hidden_layers = {3, c.num_hidden_layers - 1};
  std::vector<BatchAnswer> got(prompts.size());
  generate_ar_batch(*s.model, *s.info.tokenizer, prompts, gen, bo, [&](size_t i, const BatchAnswer& a) { got[i] = a; });
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("prompt " << i);
    const TokenList& p = prompts[i];
    TokenList seq = p;
    seq.insert(seq.end(), got[i].tokens.begin(), got[i].tokens.end());
    const int64_t n = static_cast<int64_t>(seq.size());
    CHECK(got[i].tokens == generate_ar(*s.model, *s.info.tokenizer, p, gen, SamplingOptions{}).tokens);
    REQUIRE(got[i].hidden.size() == 2);
    REQUIRE(got[i].top1.size(0) == n);
    // The answer is the top-1 of the rows before it.
    for (size_t k = 0; k < got[i].tokens.size(); ++k)
      CHECK(got[i].top1[static_cast<int64_t>(p.size() + k) - 1].item<int64_t>() == got[i].tokens[k]);
    ContiguousKv kv(c.kv_geometry(), n);
    std::vector<at::Tensor> hidden;
    ForwardOptions fo;
    fo.hidden_layers = bo.hidden_layers;
    fo.hidden_out = &hidden;
    const at::Tensor logits = s.model->forward(token_tensor(seq), at::arange(n, at::kLong), kv.append_view(n), fo);
    for (size_t l = 0; l < 2; ++l) {
      REQUIRE(got[i].hidden[l].sizes() == hidden[l].sizes());
      const double scale = hidden[l].abs().max().item<double>();
      const double diff = (got[i].hidden[l] - hidden[l]).abs().max().item<double>();
      CHECK(diff < 1e-2 * scale);
      // The check can fail: the rows one position off differ by far more.
      const double shifted = (got[i].hidden[l].narrow(0, 1, n - 1) - hidden[l].narrow(0, 0, n - 1)).abs().max().item<double>();
      CHECK(shifted > 0.1 * scale);
    }
    // Every row's top-1 is the teacher-forced pass's, but where the two top logits are a near-tie.
    const at::Tensor forced = logits.argmax(-1);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t a = got[i].top1[r].item<int64_t>(), b = forced[r].item<int64_t>();
      if (a != b) CHECK(std::abs(logits[r][a].item<float>() - logits[r][b].item<float>()) < 0.05f);
    }
  }
}

// MT-bench's second turns (issue 13 measured first turns only): a prompt whose field is a list of
// user turns runs as one conversation, each turn asked after the answer this run gave to the one
// before (as FastChat and Spec-Bench do). The reference is the same model decoding turn by turn
// by hand (generate_ar over encode_conversation), so leaving the first answer out of the second
// prompt, reusing the first prompt, or recording one turn only fails here.
TEST_CASE("speclab run: a conversation's second turn follows the run's own first answer", "[smollm2][turns]") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("speclab_turns_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string t1 = "Name three colours of the rainbow.", t2 = "Which of them is the warmest? Explain briefly.";
  {
    std::ofstream f(dir + "/mt.jsonl");
    f << nlohmann::json{{"id", "c1"}, {"turns", {t1, t2}}}.dump() << "\n";
  }
  const int64_t max_new = 12;
  ExperimentConfig c = parse_experiment_config(
      "name: turns\nmodels: {target: {path: smollm2-135m-instruct}}\n"
      "prompts: {files: [mt.jsonl], field: turns, id_field: id, chat: on}\n"
      "generation: {max_new_tokens: " + std::to_string(max_new) + "}\n"
      "drafters: [{name: prompt_lookup, num_speculative_tokens: 3}]\nwarmup: 0\n"
      "output: {path: " + dir + "/turns.h5}\n",
      dir + "/turns.yaml");
  const ExperimentOutcome out = run_experiment(c, RunnerOptions{});
  const ExperimentData d = read_experiment(dir + "/turns.h5");
  REQUIRE(d.runs.size() == 2);
  REQUIRE(d.prompts.size() == 1);
  CHECK(d.prompts[0].text == conversation_text({t1, t2}));

  // By hand, with the activations the run resolves `auto` to for this Q4_1 file.
  SmolLM2 s = load_smollm2(Activations::kInt8);
  const Tokenizer& tok = *s.info.tokenizer;
  GenerationOptions gen;
  gen.max_new_tokens = max_new;
  const SamplingOptions greedy;
  const TokenList p1 = encode_conversation(s.info, {{"user", t1}});
  const GenerationResult r1 = generate_ar(*s.model, tok, p1, gen, greedy);
  const TokenList p2 = encode_conversation(s.info, {{"user", t1}, {"assistant", r1.text}, {"user", t2}});
  const GenerationResult r2 = generate_ar(*s.model, tok, p2, gen, greedy);
  REQUIRE_FALSE(r1.text.empty());
  TokenList expected = r1.tokens;
  expected.insert(expected.end(), r2.tokens.begin(), r2.tokens.end());
  for (const RunRecord& r : d.runs) {
    INFO(r.key.method);
    CHECK(r.turns == 2);
    CHECK(r.tokens == expected);
    CHECK(r.n_generated == static_cast<int64_t>(expected.size()));
    CHECK(r.n_prompt_tokens == static_cast<int64_t>(p1.size() + p2.size()));
    CHECK(r.text == conversation_text({r1.text, r2.text}));
  }
  const RunRecord& ar = d.runs[0].key.method == kArMethod ? d.runs[0] : d.runs[1];
  const RunRecord& spec = d.runs[0].key.method == kArMethod ? d.runs[1] : d.runs[0];
  CHECK(ar.target_forwards == r1.forward_calls + r2.forward_calls);
  CHECK(spec.lossless == 1);
  // Each turn's first token comes from its prefill: the decoded tokens are n_generated - 2.
  REQUIRE(out.summary.overall.size() == 1);
  CHECK(out.summary.overall[0].ar_decode_tokens == ar.n_generated - 2);
  CHECK(out.summary.overall[0].spec_decode_tokens == spec.n_generated - 2);
  // The Python reader (analysis/speclab_h5.py) counts the turns as the C++ summary does.
  {
    std::ofstream py(dir + "/cross.py");
    py << "import math, sys\nsys.path.insert(0, '" << SPECLAB_SOURCE_DIR << "/analysis')\n"
       << "from speclab_h5 import Experiment, compute_summary\n"
       << "e = Experiment(sys.argv[1]); c = compute_summary(e)['overall']; f = e.summary['overall']\n"
       << "assert [int(t) for t in e.runs['turns']] == [2, 2], e.runs['turns']\n"
       << "for col in ('speedup', 'cost_ratio', 'tau'):\n"
       << "    a, b = float(f[col][0]), float(c[col][0])\n"
       << "    assert math.isfinite(a) and abs(a - b) <= 1e-9 * max(1, abs(a)), (col, a, b)\n";
  }
  const std::string cmd = "/usr/bin/python3 '" + dir + "/cross.py' '" + dir + "/turns.h5' > '" + dir + "/cross.out' 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream log(dir + "/cross.out");
  INFO(std::string(std::istreambuf_iterator<char>(log), {}));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // The report says the prompts were conversations.
  const std::string rep = "/usr/bin/python3 '" + std::string(SPECLAB_SOURCE_DIR) + "/analysis/report.py' '" + dir +
                          "/turns.h5' --out '" + dir + "/rep' > '" + dir + "/rep.out' 2>&1";
  REQUIRE(std::system(rep.c_str()) == 0);
  std::ifstream md(dir + "/rep/report.md");
  CHECK_THAT(std::string(std::istreambuf_iterator<char>(md), {}),
             Catch::Matchers::Contains("| prompts | 1, conversations: 2 turns a run, each turn after the run's own answers |"));
  std::filesystem::remove_all(dir);
}
