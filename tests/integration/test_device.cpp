// Placement (models/llama/placement.h): models on a device and in a dtype, and synthetic models.
//
// On every machine: the dense CPU paths against the native one (float32 bit for bit, bfloat16
// within rounding), synthetic models, the KV storage following the model, and the errors for a
// device this build or machine lacks. Where a CUDA device is present (the lent GPU machine; see
// docs/gpu.md): stories260K on CUDA against the CPU, the batch invariance that makes a
// verification row equal to an AR step there, and greedy speculative decoding token-identical to
// AR on the device. Without one, those cases say so in one line and return.
#include "tests/torch_catch.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "experiments/app/loaded_target.h"
#include "experiments/app/session_parts.h"
#include "framework/core/error.h"
#include "framework/core/token_tensor.h"
#include "framework/draft/builtin/model_drafter.h"
#include "framework/engine/ar_decode.h"
#include "framework/engine/spec_decode.h"
#include "framework/kv/contiguous_kv.h"
#include "framework/kv/kv_storage.h"
#include "models/llama/placement.h"
#include "tests/bad_inputs/cli_process.h"
#include "tests/support/catch_error.h"
#include "tests/support/required_resources.h"

#include <nlohmann/json.hpp>

using namespace speclab;
using speclab::testing::RunResult;
using speclab::testing::run_cli;

namespace {

ModelSource stories_source(const std::string& device = "cpu", const std::string& dtype = "auto") {
  ModelSource s;
  s.path = "stories260K";
  s.device = device;
  s.dtype = dtype;
  return s;
}

// [n, vocab] float32 logits of every position of `ids` in one forward, on a fresh cache.
at::Tensor logits_of(const Model& m, const TokenList& ids) {
  c10::InferenceMode guard;
  const int64_t n = static_cast<int64_t>(ids.size());
  ContiguousKv kv(m.config().kv_geometry(), n);
  return m.forward(token_tensor(ids), at::arange(n, at::kLong), kv.append_view(n));
}

// Row i of the logits computed one token at a time (AR steps), [n, vocab].
at::Tensor stepwise_logits(const Model& m, const TokenList& ids) {
  c10::InferenceMode guard;
  const int64_t n = static_cast<int64_t>(ids.size());
  ContiguousKv kv(m.config().kv_geometry(), n);
  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < n; ++i) {
    rows.push_back(m.forward(token_tensor({ids[i]}), at::tensor({i}, at::kLong), kv.append_view(1)));
    kv.commit(1);
  }
  return at::cat(rows, 0);
}

// The prompt's first `prefix` tokens in one forward, then the rest as one n-row pass on top.
at::Tensor split_logits(const Model& m, const TokenList& ids, int64_t prefix) {
  c10::InferenceMode guard;
  const int64_t n = static_cast<int64_t>(ids.size());
  ContiguousKv kv(m.config().kv_geometry(), n);
  const TokenList head(ids.begin(), ids.begin() + prefix), tail(ids.begin() + prefix, ids.end());
  at::Tensor a = m.forward(token_tensor(head), at::arange(prefix, at::kLong), kv.append_view(prefix));
  kv.commit(prefix);
  at::Tensor b = m.forward(token_tensor(tail), at::arange(prefix, n, at::kLong), kv.append_view(n - prefix));
  return at::cat({a, b}, 0);
}

bool cuda_or_say(const char* what) {
  return !testing::skip_without_cuda(cuda_device_available(), std::string("no CUDA device in this process (CPU libtorch or "
                                                                          "no GPU) for ") + what);
}

const TokenList kPrompt = {1, 403, 261, 426, 301, 1078 % 512, 280, 269, 306, 395, 295, 262, 370};

}  // namespace

TEST_CASE("dense float32 on the CPU computes what the native path does, bit for bit", "[device]") {
  auto native = load_target(stories_source());
  auto dense = load_target(stories_source("cpu", "float32"));
  CHECK(dense->model->config().dtype == "float32");
  CHECK(dense->model->row_exact_batch() == native->model->row_exact_batch());
  CHECK(at::equal(logits_of(*native->model, kPrompt), logits_of(*dense->model, kPrompt)));
}

// The draft model runs as its target was asked to (device, dtype, weights, activations). A
// native GGUF target once got a draft dequantized to float32 (its resolved dtype was copied in
// place of "auto"), which made the Qwen pair's draft 3.5x slower than the 0.5B decodes alone.
TEST_CASE("a draft_model drafter is loaded as its target: native blocks stay native, activations follow", "[device]") {
  for (const char* act : {"auto", "f32"}) {
    INFO("target activations " << act);
    ModelSource src;
    src.path = "smollm2-135m-instruct";
    src.activations = act;
    auto t = load_target(src);
    KvOptions kvo;
    kvo.budget_bytes = 64 << 20;
    SessionParts parts(*t, kvo);
    DrafterOptions o;
    o.name = "draft_model";
    o.draft_model = "smollm2-135m-instruct";  // the target's own file: the two must compute alike
    const auto* md = dynamic_cast<const ModelDrafter*>(&parts.add_drafter(o));
    REQUIRE(md != nullptr);
    CHECK(md->model().weight_storage() == t->model->weight_storage());
    CHECK(md->model().weight_storage().find("Q4_1") != std::string::npos);
    CHECK(at::equal(logits_of(md->model(), kPrompt), logits_of(*t->model, kPrompt)));
  }
}

TEST_CASE("kv_dtype: the cache's dtype as asked, auto the model's for float32 weights, and CUDA keeps the model's",
          "[device][kv_dtype]") {
  auto plain = load_target(stories_source());  // float32 weights: auto keeps float32
  CHECK(plain->model->config().kv_geometry().dtype == "float32");
  ModelSource half = stories_source();
  half.kv_dtype = "float16";
  auto f16 = load_target(half);
  const KvGeometry g = f16->model->config().kv_geometry();
  CHECK(g.dtype == "float16");
  CHECK(g.element_bytes() == 2);
  CHECK(kv_storage_options(g).dtype() == at::kHalf);
  CHECK(f16->model->config().dtype == "float32");  // the activations stay float32
  // The same weights over a binary16 cache: close to float32's logits, not equal.
  const at::Tensor a = logits_of(*plain->model, kPrompt), b = logits_of(*f16->model, kPrompt);
  CHECK_FALSE(at::equal(a, b));
  CHECK((a - b).abs().max().item<double>() < 1e-2 * std::max(1.0, a.abs().max().item<double>()));
  // int8: head_dim int8 values and a 4-byte scale per head; pools are sized for both.
  ModelSource q8 = stories_source();
  q8.kv_dtype = "int8";
  auto i8 = load_target(q8);
  const KvGeometry g8 = i8->model->config().kv_geometry();
  CHECK(g8.dtype == "int8");
  CHECK(g8.element_bytes() == 1);
  CHECK(g8.stored_head_dim() == g8.head_dim + 4);
  CHECK(g8.bytes_per_token(g8.element_bytes()) ==
        static_cast<size_t>(2 * g8.n_layers * g8.n_kv_heads * (g8.head_dim + 4)));
  CHECK(kv_storage_options(g8).dtype() == at::kChar);
  CHECK(kv_storage_shape(g8, 7) == std::vector<int64_t>{g8.n_layers, 7, g8.n_kv_heads, g8.head_dim + 4});
  const at::Tensor c8 = logits_of(*i8->model, kPrompt);
  CHECK_FALSE(at::equal(a, c8));
  // Rounding each head to 1/127 of its largest value moves this toy model's sharp logits (scale
  // 18.5) by up to 1.6 (binary16: 0.03); a wrong scale or layout moves them by far more (the
  // kernels themselves are checked against float64 in test_attention_cpu, and the two backends
  // against each other in test_cpu_path).
  CHECK((a - c8).abs().max().item<double>() < 0.15 * std::max(1.0, a.abs().max().item<double>()));
  ModelSource bad = stories_source();
  bad.kv_dtype = "bfloat16";
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("expected one of auto, float32, float16, int8, found 'bfloat16'"));
  if (!cuda_or_say("a CUDA cache in another dtype")) return;
  ModelSource cuda = stories_source("cuda", "bfloat16");
  cuda.kv_dtype = "float16";
  const Error e = test::catch_error([&] { load_target(cuda); });
  CHECK(e.kind() == ErrorKind::kConfig);
  CHECK(std::string(e.what()).find("kv_dtype") != std::string::npos);
}

TEST_CASE("float16 on the CPU: runs where libtorch multiplies float16 there, else refused naming dtype", "[device]") {
  bool half_mm = true;  // libtorch 1.13: "addmm_impl_cpu_" not implemented for 'Half'; 2.x: supported
  try {
    const at::Tensor x = at::ones({2, 2}, at::TensorOptions().dtype(at::kHalf));
    (void)at::mm(x, x);
  } catch (const c10::Error&) {
    half_mm = false;
  }
  if (half_mm) {
    auto f16 = load_target(stories_source("cpu", "float16"));
    CHECK(f16->model->config().dtype == "float16");
    CHECK(logits_of(*f16->model, kPrompt).scalar_type() == at::kFloat);
  } else {
    const Error e = test::catch_error([&] { load_target(stories_source("cpu", "float16")); });
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK(std::string(e.what()).find("dtype: expected bfloat16 or float32 on the CPU") != std::string::npos);
  }
}

TEST_CASE("bfloat16 on the CPU tracks float32 within bfloat16 rounding, its K/V stored in bfloat16", "[device]") {
  auto f32 = load_target(stories_source());
  auto bf16 = load_target(stories_source("cpu", "bfloat16"));
  const ModelConfig& c = bf16->model->config();
  CHECK(c.dtype == "bfloat16");
  CHECK(c.kv_geometry().element_bytes() == 2);
  CHECK(kv_storage_options(c.kv_geometry()).dtype() == at::kBFloat16);
  CHECK(bf16->model->row_exact_batch() == 0);  // library matmuls: no per-row promise
  CHECK(bf16->model->weight_storage().find("bfloat16") != std::string::npos);
  const at::Tensor a = logits_of(*f32->model, kPrompt), b = logits_of(*bf16->model, kPrompt);
  REQUIRE(b.scalar_type() == at::kFloat);
  REQUIRE(b.sizes() == a.sizes());
  const double spread = a.std().item<double>();
  const double err = (a - b).abs().max().item<double>();
  INFO("max |f32 - bf16| = " << err << ", logit std " << spread);
  CHECK(err < 0.1 * spread);
  // Negative control: the same bound fails for the logits of another prompt.
  TokenList other = kPrompt;
  std::reverse(other.begin() + 1, other.end());
  CHECK_FALSE((a - logits_of(*bf16->model, other)).abs().max().item<double>() < 0.1 * spread);
  // The argmax of the last position (the next greedy token) agrees.
  CHECK(a[-1].argmax().item<int64_t>() == b[-1].argmax().item<int64_t>());
}

TEST_CASE("synthetic random:<shape> models load without a file and run", "[device]") {
  ModelSource s;
  s.path = "random:tiny";
  auto t = load_target(s);
  CHECK(t->info.format == "random");
  CHECK(t->model->config().num_hidden_layers == 2);
  const at::Tensor l = logits_of(*t->model, {1, 5, 9, 200});
  CHECK(l.sizes() == at::IntArrayRef({4, 512}));
  CHECK(at::isfinite(l).all().item<bool>());
  CHECK(at::equal(l, stepwise_logits(*t->model, {1, 5, 9, 200})));  // the CPU backend's row exactness
  s.path = "random:llama-13b";
  try {
    load_target(s);
    FAIL("an unknown shape must be refused");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK(std::string(e.what()).find("llama-7b") != std::string::npos);
  }
}

TEST_CASE("speclab bench on synthetic shapes: decode, verification and the speculative step's engine share",
          "[device][bench]") {
  // The paths `speclab bench --device cuda --model random:llama-7b --draft-model random:llama-1b`
  // takes on the GPU (docs/gpu.md), on the CPU at the tiny shape: figures present and sane.
  const RunResult r = run_cli({"bench", "--model", "random:tiny", "--contexts", "16", "32", "--steps", "3",
                               "--naive-steps", "1", "--prefill", "8", "--verify-context", "16", "--draft-model",
                               "random:tiny", "--spec-steps", "4", "--llama-cpp", "off", "--ab", "--json"});
  INFO(testing::describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  CHECK(j.at("device") == "cpu");
  CHECK(j.at("decode_tok_s").at("16").get<double>() > 0);
  // The first and last contexts again over an int8 K/V cache (the model's own is float32 here).
  CHECK(j.at("decode_tok_s_kv_int8").at("16").get<double>() > 0);
  CHECK(j.at("decode_tok_s_kv_int8").at("32").get<double>() > 0);
  // Each round's ratio t_n / t_1 is exactly 1 for n = 1, so its median is too; every other size
  // has a cost and a fastest pass.
  CHECK(j.at("verify_cost").at("1").get<double>() == 1.0);
  CHECK(j.at("verify_cost").contains("17"));
  for (const auto& [n, cost] : j.at("verify_cost").items()) {
    INFO("n = " << n);
    CHECK(cost.get<double>() > 0.0);
    CHECK(j.at("verify_ms").at(n).get<double>() > 0.0);
  }
  // The int8 cache's passes: their costs and the milliseconds the text prints (the milliseconds
  // were not in the JSON until 2026-12-06).
  for (const char* n : {"5", "9", "17"}) {
    INFO("int8 n = " << n);
    CHECK(j.at("verify_cost_kv_int8").at(n).get<double>() > 0.0);
    CHECK(j.at("verify_ms_kv_int8").at(n).get<double>() > 0.0);
  }
  CHECK(j.at("verify_ms_kv_int8").at("1").get<double>() > 0.0);
  // The long-context ratio's bandwidth floor, (weights + K/V at 16) / (weights + K/V at 32): below
  // 1, and higher over int8 K/V (fewer bytes per token) than over the model's float32.
  const double floor32 = j.at("context_ratio_floor").at("float32").get<double>();
  const double floor8 = j.at("context_ratio_floor").at("int8").get<double>();
  CHECK(floor32 > 0.0);
  CHECK(floor32 < floor8);
  CHECK(floor8 < 1.0);
  // The verification passes' arithmetic roof (experiments/app/pass_roof.h), printed wherever the
  // kernels are not scalar. random:tiny's MACs per row by hand: 2 layers of q/k/v 128 x (128 + 2 x
  // 64), o 128 x 128, gate/up 128 x 2 x 256 and down 256 x 128, and the head 512 x 128, all float32
  // weights; attention over the 16-key verify context, 2 layers x 4 heads x 32 x 16 x 2. Each
  // printed bound is max(reads, n x row) over the median one-row pass, from the printed parts (the
  // reads at the one-row pass's own rate where it beat the bandwidth test: tiny's bytes sit in the
  // caches, so they never exceed that pass).
  if (j.at("kernel_isa") != "scalar") {
    const nlohmann::json& roof = j.at("pass_roof");
    CHECK(roof.at("matmul_f32_macs").get<double>() ==
          2 * (128.0 * 256 + 128.0 * 128 + 128.0 * 512 + 256.0 * 128) + 512.0 * 128);
    CHECK(roof.at("matmul_int8_macs").get<double>() == 0.0);
    CHECK(roof.at("attention_macs").get<double>() == 2 * 4 * 32 * 16 * 2.0);
    CHECK(j.at("arith_peak").at("f32_gmacs").get<double>() > 0.0);
    const double row = roof.at("row_ms").get<double>(), one = roof.at("one_row_ms").get<double>();
    const double reads = roof.at("memory_ms").get<double>();
    CHECK(reads <= one * (1 + 1e-9));
    CHECK(j.at("verify_cost_roof_bandwidth_gb_s").get<double>() > 0.0);
    for (const int n : {5, 9, 17}) {
      INFO("n = " << n);
      CHECK(j.at("verify_cost_roof").at(std::to_string(n)).get<double>() == Approx(std::max(reads, n * row) / one));
      CHECK(j.at("verify_cost_roof_at_roof").at(std::to_string(n)).get<double>() ==
            Approx(std::max(reads, n * row) / std::max(reads, row)));
    }
    CHECK(j.contains("verify_cost_roof_kv_int8"));
    // ... recomputable from its own pass figures, as the model cache's are.
    const nlohmann::json& roof8 = j.at("pass_roof_kv_int8");
    const double row8 = roof8.at("row_ms").get<double>(), one8 = roof8.at("one_row_ms").get<double>();
    const double reads8 = roof8.at("memory_ms").get<double>();
    for (const int n : {5, 9, 17}) {
      INFO("int8 cache, n = " << n);
      CHECK(j.at("verify_cost_roof_kv_int8").at(std::to_string(n)).get<double>() ==
            Approx(std::max(reads8, n * row8) / one8));
    }
  }
  // --ab: every pass size timed with the switch at 0 and at 1 (framework/core/ab_variant.h), an
  // even number of rounds (5 asked: 6).
  REQUIRE(j.contains("ab"));
  CHECK(j.at("ab").at("context").get<int64_t>() == 16);
  CHECK(j.at("ab").at("rounds").get<int64_t>() == 6);
  for (const char* n : {"1", "2", "3", "5", "9", "17"}) {
    INFO("--ab n = " << n);
    const nlohmann::json& p = j.at("ab").at("passes").at(n);
    CHECK(p.at("a_ms").get<double>() > 0.0);
    CHECK(p.at("b_ms").get<double>() > 0.0);
    CHECK(p.at("b_over_a").get<double>() > 0.0);
  }
  const nlohmann::json& spec = j.at("spec");
  CHECK(spec.at("alpha").get<double>() == 1.0);  // the draft is the target itself: every draft accepted
  CHECK(spec.at("outside_share").get<double>() >= 0.0);
  CHECK(spec.at("outside_share").get<double>() < 1.0);
  CHECK(spec.at("step_ms").get<double>() >=
        spec.at("target_ms").get<double>() + spec.at("draft_ms").get<double>() - 1e-9);
  // Without llama.cpp a figure's llama.cpp value and ratio are null (they were 0.0, which reads as
  // a measured rate).
  for (const auto& f : j.at("figures")) {
    INFO(f.dump());
    CHECK(f.at("llama_cpp").is_null());
    CHECK(f.at("ratio").is_null());
  }
  // One context: no context ratio row (it printed "decode at context 16 / at 16" = 1.00).
  const RunResult one = run_cli({"bench", "--model", "random:tiny", "--contexts", "16", "--steps", "2",
                                 "--naive-steps", "1", "--prefill", "8", "--verify-context", "16", "--verify-reps", "1",
                                 "--llama-cpp", "off", "--json"});
  REQUIRE(one.exit_code == 0);
  for (const auto& f : nlohmann::json::parse(one.out.substr(one.out.find('{'))).at("figures"))
    CHECK(f.at("figure").get<std::string>().rfind("decode at context", 0) != 0);
  // A draft of another vocabulary (512 tokens against SmolLM2's 49,152) is refused with exit code 2.
  const RunResult bad = run_cli({"bench", "--model", "random:tiny", "--contexts", "16", "--steps", "2",
                                 "--draft-model", "random:smollm2-135m", "--llama-cpp", "off"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("vocabulary") != std::string::npos);
}

TEST_CASE("device and dtype are validated, and CUDA is refused cleanly where there is none", "[device]") {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda0", "CUDA"}) {
    ModelSource s = stories_source(bad);
    CHECK_THROWS_AS(s.validate(), Error);
  }
  CHECK_THROWS_AS(stories_source("cpu", "fp8").validate(), Error);
  CHECK_NOTHROW(stories_source("cuda:1", "float16").validate());
  if (cuda_device_available()) {
    WARN("skipped (the refusal): this process has a CUDA device");
    return;
  }
  try {
    load_target(stories_source("cuda"));
    FAIL("device cuda must be refused without CUDA");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
    CHECK(e.field() == "device");
  }
#ifdef SPECLAB_CLI
  const std::string cmd = std::string(SPECLAB_CLI) + " generate --model stories260K --device cuda -n 2 " +
                          "--prompt 'Once' > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(status) == 2);
#endif
}

TEST_CASE("CUDA: stories260K in float32 matches the CPU", "[device][cuda]") {
  if (!cuda_or_say("CUDA float32 against the CPU")) return;
  auto cpu = load_target(stories_source());
  auto gpu = load_target(stories_source("cuda", "float32"));
  CHECK(gpu->model->config().device == "cuda:0");
  const at::Tensor a = logits_of(*cpu->model, kPrompt), b = logits_of(*gpu->model, kPrompt);
  REQUIRE(b.device().is_cpu());
  const double err = (a - b).abs().max().item<double>();
  INFO("max |cpu - cuda| = " << err);
  CHECK(err < 1e-3 * (1.0 + a.abs().max().item<double>()));
}

TEST_CASE("CUDA: a row of an n-row pass is bit-identical to the same row as an AR step", "[device][cuda]") {
  if (!cuda_or_say("CUDA batch invariance")) return;
  for (const char* dtype : {"bfloat16", "float16", "float32"}) {
    for (const char* path : {"stories260K", "random:tiny"}) {
      ModelSource s = stories_source("cuda", dtype);
      s.path = path;
      auto t = load_target(s);
      const Model& m = *t->model;
      REQUIRE(m.row_exact_batch() >= 9);
      const at::Tensor steps = stepwise_logits(m, kPrompt);
      for (int64_t prefix : {1, 4, 8}) {
        INFO(path << " " << dtype << ", verification of " << (kPrompt.size() - prefix) << " rows after " << prefix);
        CHECK(at::equal(split_logits(m, kPrompt, prefix), steps));
      }
      // Asking for hidden states runs the calls eagerly (no CUDA graph): the same bits.
      c10::InferenceMode guard;
      const int64_t n = static_cast<int64_t>(kPrompt.size());
      ContiguousKv kv(m.config().kv_geometry(), n);
      std::vector<at::Tensor> hidden;
      ForwardOptions eager;
      eager.hidden_layers = {0};
      eager.hidden_out = &hidden;
      const at::Tensor first = m.forward(token_tensor({kPrompt[0]}), at::tensor({int64_t(0)}, at::kLong),
                                         kv.append_view(1), eager);
      CHECK(at::equal(first, steps.narrow(0, 0, 1)));
      CHECK(hidden.at(0).sizes() == at::IntArrayRef({1, m.config().hidden_size}));
    }
  }
  // Negative control: the comparison sees a difference that rounding makes (float16 vs bfloat16).
  ModelSource h = stories_source("cuda", "float16"), b = stories_source("cuda", "bfloat16");
  CHECK_FALSE(at::equal(stepwise_logits(*load_target(h)->model, kPrompt),
                        stepwise_logits(*load_target(b)->model, kPrompt)));
}

TEST_CASE("CUDA: greedy speculative decoding is token-identical to AR on the device", "[device][cuda]") {
  if (!cuda_or_say("CUDA greedy speculative decoding")) return;
  for (const char* dtype : {"bfloat16", "float32"}) {
    auto t = load_target(stories_source("cuda", dtype));
    SessionParts parts(*t, kv_options_for(t->model->config(), 4096));
    for (const char* name : {"prompt_lookup", "layer_skip", "draft_model"}) {
      DrafterOptions o;
      o.name = name;
      o.num_speculative_tokens = 4;
      if (std::string(name) == "layer_skip") o.draft_layers = {0, 1, 2};
      if (std::string(name) == "draft_model") o.draft_model = "stories260K";
      Drafter& d = parts.add_drafter(o);
      const TokenList ids = t->info.tokenizer->encode("The little dog was happy. The little dog", true);
      GenerationOptions gen;
      gen.max_new_tokens = 48;
      const SamplingOptions greedy;
      const KvTarget kv = parts.kv_target();
      const SpecResult spec = generate_speculative(*t->model, *t->info.tokenizer, ids, gen, greedy, d, o, kv);
      const GenerationResult ar = generate_ar(*t->model, *t->info.tokenizer, ids, gen, greedy, KvMode::kCached, {}, kv);
      INFO(name << " on cuda " << dtype);
      CHECK(spec.tokens == ar.tokens);
      CHECK(spec.tokens.size() == 48);
    }
  }
}
