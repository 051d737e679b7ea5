// The raw-buffer CPU forward pass (LlamaModel::forward_cpu) against the libtorch-op
// implementation (ForwardOptions::aten_reference) on real models: stories260K (float32) and
// SmolLM2-135M-Instruct with packed Q4_1/Q8_0 weights against the same weights dequantized to
// float32. Prefill, single-token decode and a verification-sized batch, through a KvView that
// gathers scattered slots (as the paged KV manager produces) and through a contiguous range.
#include "tests/torch_catch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/kv_geometry.h"
#include "framework/core/step_profile.h"
#include "models/llama/gemv.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"
#include "tests/support/stories260k.h"

using namespace speclab;

namespace {

// A cache with `slots` slots; sequence position p lives in slot perm[p].
struct ScatteredKv {
  at::Tensor k, v;
  std::vector<int64_t> perm;
  ScatteredKv(const ModelConfig& c, int64_t slots, bool scattered, at::ScalarType dtype = at::kFloat) {
    // An int8 cache holds each head's scale in 4 bytes after its values (KvGeometry).
    const int64_t hs = dtype == at::kChar ? c.head_dim + KvGeometry::kInt8ScaleBytes : c.head_dim;
    k = at::zeros({c.num_hidden_layers, slots, c.num_key_value_heads, hs}, at::TensorOptions().dtype(dtype));
    v = at::zeros_like(k);
    perm.resize(static_cast<size_t>(slots));
    std::iota(perm.begin(), perm.end(), 0);
    if (scattered) std::reverse(perm.begin(), perm.end());
  }
  KvView view(int64_t start, int64_t n, bool contiguous) const {
    KvView kv;
    kv.k_cache = k;
    kv.v_cache = v;
    std::vector<int64_t> w(perm.begin() + start, perm.begin() + start + n), r(perm.begin(), perm.begin() + start + n);
    kv.write_slots = at::tensor(w, at::kLong);
    kv.ctx_len = start + n;
    if (contiguous)
      kv.read_base = 0;
    else
      kv.read_slots = at::tensor(r, at::kLong);
    return kv;
  }
};

// Runs prefill of `prompt`, then decode steps of `steps`, then one batch of `batch`, on both
// paths with separate caches; returns the largest |logit difference| and the logit scale.
std::pair<double, double> compare_paths(const Model& fast, const Model& ref, const std::vector<int64_t>& prompt,
                                        const std::vector<int64_t>& steps, const std::vector<int64_t>& batch,
                                        bool scattered, at::ScalarType kv_dtype = at::kFloat) {
  const ModelConfig& c = fast.config();
  const int64_t total = static_cast<int64_t>(prompt.size() + steps.size() + batch.size());
  ScatteredKv kv_fast(c, total + 3, scattered, kv_dtype), kv_ref(c, total + 3, scattered, kv_dtype);
  ForwardOptions ref_opts;
  ref_opts.aten_reference = true;
  double worst = 0.0, scale = 0.0;
  int64_t pos = 0;
  auto step = [&](const std::vector<int64_t>& toks) {
    const int64_t n = static_cast<int64_t>(toks.size());
    at::Tensor t = at::tensor(toks, at::kLong);
    at::Tensor p = at::arange(pos, pos + n, at::kLong);
    at::Tensor a = fast.forward(t, p, kv_fast.view(pos, n, !scattered));
    at::Tensor b = ref.forward(t, p, kv_ref.view(pos, n, !scattered), ref_opts);
    REQUIRE(a.sizes() == b.sizes());
    worst = std::max(worst, (a - b).abs().max().item<double>());
    scale = std::max(scale, b.abs().max().item<double>());
    pos += n;
  };
  step(prompt);
  for (int64_t s : steps) step({s});
  step(batch);
  return {worst, scale};
}

}  // namespace

TEST_CASE("CPU forward path equals the libtorch-op path on stories260K", "[model][cpu_path]") {
  auto& s = testing::stories();
  const std::vector<int64_t> prompt = {1, 403, 407, 261, 378, 425, 281, 261, 1131 % 512, 66, 77, 88};
  for (bool scattered : {false, true}) {
    const auto [diff, scale] = compare_paths(*s.model, *s.model, prompt, {301, 12, 99}, {5, 6, 7, 8, 9}, scattered);
    INFO("scattered " << scattered << " max |diff| " << diff << " logit scale " << scale);
    // float32, 5 layers of 64-wide dot products: differences are summation-order rounding.
    CHECK(diff < 1e-4 * std::max(1.0, scale));
  }
}

TEST_CASE("CPU forward path with packed Q4_1/Q8_0 weights equals float32 weights through libtorch ops (SmolLM2)",
          "[model][cpu_path][smollm2]") {
  const std::string path = std::string(SPECLAB_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path))
    FAIL("the default model is missing: expected " + path + " (scripts/setup.sh installs it)");
  ModelSource src;
  src.path = path;
  src.weights = "native";
  LoadedModel packed_info = load_model(src);
  src.weights = "f32";
  LoadedModel f32_info = load_model(src);
  src.weights = "native";
  LoadedModel int8_info = load_model(src);
  LlamaModel packed(packed_info, Activations::kF32), f32(f32_info), int8(int8_info, Activations::kInt8);
  CHECK(packed.weight_storage().find("Q4_1") != std::string::npos);
  CHECK(packed.weight_bytes() * 4 < f32.weight_bytes());
  const std::vector<int64_t> prompt = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 2, 198, 1, 4093, 198};
  const auto [diff, scale] = compare_paths(packed, f32, prompt, {504, 3458}, {314, 3575, 282, 4649, 314}, true);
  INFO("max |diff| " << diff << " logit scale " << scale);
  // Same dequantized values; 30 layers of float32 rounding in a different order.
  CHECK(diff < 2e-3 * std::max(1.0, scale));
  CHECK(diff > 0.0);  // the two really are different code paths
  // int8 activations: every matmul input moves by up to half a quantization step per element
  // (qgemm.h); over 30 layers that is a few percent of the logit scale, far below what a wrong
  // scale, offset or sign in a kernel would cause (test_qgemm checks the kernels themselves).
  const auto [diff8, scale8] = compare_paths(int8, f32, prompt, {504, 3458}, {314, 3575, 282, 4649, 314}, true);
  INFO("int8 activations: max |diff| " << diff8 << " logit scale " << scale8);
  CHECK(diff8 < 0.1 * std::max(1.0, scale8));
  CHECK(diff8 > diff);
}

namespace {

// stories260K over a cache of `dtype` on both paths: the largest |logit difference| over
// prefill, decode steps and a batch, through scattered and contiguous slots, within
// `tol` x the logit scale.
void check_paths_over_cache(at::ScalarType dtype, double tol) {
  auto& s = testing::stories();
  const std::vector<int64_t> prompt = {1, 403, 407, 261, 378, 425, 281, 261, 1131 % 512, 66, 77, 88};
  for (bool scattered : {false, true}) {
    const auto [diff, scale] = compare_paths(*s.model, *s.model, prompt, {301, 12, 99}, {5, 6, 7, 8, 9}, scattered, dtype);
    INFO("scattered " << scattered << " max |diff| " << diff << " logit scale " << scale);
    CHECK(diff < tol * std::max(1.0, scale));
  }
}

// stories260K over a cache of `dtype`: one pass over n tokens (a verification of n - 1 drafts)
// against n AR steps, bit for bit, and against AR steps over a float32 cache: different (the
// cache's precision shows, so the check can fail) but within `tol` x the logit scale. Both
// caches must end up holding the same bytes.
void check_verification_rows_over_cache(at::ScalarType dtype, double tol) {
  auto& s = testing::stories();
  const ModelConfig& c = s.model->config();
  const std::vector<int64_t> prompt = {1, 403, 407, 261, 378, 425, 281}, batch = {261, 66, 77, 88, 301};
  const int64_t p0 = static_cast<int64_t>(prompt.size()), n = static_cast<int64_t>(batch.size());
  auto prefilled = [&](at::ScalarType t) {
    auto kv = std::make_unique<ScatteredKv>(c, 16, true, t);
    s.model->forward(at::tensor(prompt, at::kLong), at::arange(p0, at::kLong), kv->view(0, p0, false));
    return kv;
  };
  auto verify_kv = prefilled(dtype);
  const at::Tensor together = s.model->forward(at::tensor(batch, at::kLong), at::arange(p0, p0 + n, at::kLong),
                                               verify_kv->view(p0, n, false));  // [n, vocab]
  auto ar_kv = prefilled(dtype), f32_kv = prefilled(at::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor t = at::tensor(std::vector<int64_t>{batch[static_cast<size_t>(i)]}, at::kLong);
    const at::Tensor p = at::full({1}, p0 + i, at::kLong);
    const at::Tensor alone = s.model->forward(t, p, ar_kv->view(p0 + i, 1, false));  // [1, vocab]
    const at::Tensor f32 = s.model->forward(t, p, f32_kv->view(p0 + i, 1, false));
    INFO("row " << i);
    CHECK(at::equal(together[i], alone[0]));
    CHECK_FALSE(at::equal(f32[0], alone[0]));
    CHECK((f32[0] - alone[0]).abs().max().item<double>() < tol * std::max(1.0, f32.abs().max().item<double>()));
  }
  CHECK(at::equal(verify_kv->k, ar_kv->k));
  CHECK(at::equal(verify_kv->v, ar_kv->v));
}

}  // namespace

// Both paths round K and V to binary16 as they store them and widen them exactly as they read:
// the comparison has the float32 cache's tolerance (its K/V inputs differ in the last float32
// bits, which rarely crosses a binary16 rounding boundary).
TEST_CASE("float16 K/V cache: the CPU path equals the libtorch-op path over the same cache (stories260K)",
          "[model][cpu_path][kv_f16]") {
  check_paths_over_cache(at::kHalf, 1e-3);
}

TEST_CASE("float16 K/V cache: a verification row's logits are the AR step's bit for bit, and differ from float32's",
          "[model][cpu_path][kv_f16][bitwise]") {
  check_verification_rows_over_cache(at::kHalf, 1e-2);
}

// Both paths quantize each head with quantize_kv_heads and read q * s; their K/V inputs differ in
// the last float32 bits, which can move one element across a rounding boundary (one step, 1/127
// of the head's largest value), as for float16's binary16 boundary, and the bound is float16's
// (measured: 6e-6 against a logit scale of 19, no element crossed). A wrong scale (a head's or
// the softmax's) moves logits by whole units.
TEST_CASE("int8 K/V cache: the CPU path equals the libtorch-op path over the same cache (stories260K)",
          "[model][cpu_path][kv_int8]") {
  check_paths_over_cache(at::kChar, 1e-3);
}

// Against float32's: the quantization moves these rows' logits by up to 0.64 of a scale of 17
// (0.038; deterministic inputs, so the bound's margin does not vary from run to run).
TEST_CASE("int8 K/V cache: a verification row's logits are the AR step's bit for bit, and near float32's",
          "[model][cpu_path][kv_int8][bitwise]") {
  check_verification_rows_over_cache(at::kChar, 5e-2);
}

TEST_CASE("a cache of the wrong shape is refused: an int8 cache without its scale bytes, wrong kv heads",
          "[model][cpu_path][kv_int8]") {
  auto& s = testing::stories();
  const ModelConfig& c = s.model->config();
  const std::vector<int64_t> prompt = {1, 403, 407};
  auto run = [&](at::ScalarType dtype, int64_t kv_heads, int64_t last) {
    const at::Tensor k = at::zeros({c.num_hidden_layers, 8, kv_heads, last}, at::TensorOptions().dtype(dtype));
    KvView kv;
    kv.k_cache = k;
    kv.v_cache = at::zeros_like(k);
    kv.write_slots = at::arange(3, at::kLong);
    kv.ctx_len = 3;
    kv.read_base = 0;
    s.model->forward(at::tensor(prompt, at::kLong), at::arange(3, at::kLong), kv);
  };
  const int64_t D = c.head_dim, KVH = c.num_key_value_heads;
  CHECK_NOTHROW(run(at::kChar, KVH, D + 4));
  CHECK_NOTHROW(run(at::kFloat, KVH, D));
  CHECK_THROWS_AS(run(at::kChar, KVH, D), Error);  // int8 heads need their 4 scale bytes
  CHECK_THROWS_AS(run(at::kFloat, KVH, D + 4), Error);
  CHECK_THROWS_AS(run(at::kFloat, KVH + 1, D), Error);
}

TEST_CASE("CPU path comparison detects a skipped layer: the check can fail", "[model][cpu_path]") {
  auto& s = testing::stories();
  const ModelConfig& c = s.model->config();
  ScatteredKv a(c, 8, false), b(c, 8, false);
  ForwardOptions skip;
  skip.layers = {0, 1, 2, 3};  // one layer fewer
  at::Tensor t = at::tensor(std::vector<int64_t>{1, 403, 407}, at::kLong), p = at::arange(3, at::kLong);
  at::Tensor full = s.model->forward(t, p, a.view(0, 3, true));
  at::Tensor partial = s.model->forward(t, p, b.view(0, 3, true), skip);
  CHECK((full - partial).abs().max().item<double>() > 1e-2);
}

TEST_CASE("hidden states: the CPU path equals the libtorch-op path, and the last one gives the logits",
          "[model][cpu_path][hidden]") {
  auto& s = testing::stories();
  const ModelConfig& c = s.model->config();
  const int64_t n = 6, last = c.num_hidden_layers - 1;
  const at::Tensor t = at::tensor(std::vector<int64_t>{1, 403, 407, 261, 378, 425}, at::kLong);
  const at::Tensor p = at::arange(n, at::kLong);
  ScatteredKv a(c, 8, true), b(c, 8, true), sub(c, 8, true);
  std::vector<at::Tensor> fast_h, ref_h, sub_h;
  ForwardOptions fast, ref;
  fast.hidden_layers = ref.hidden_layers = {last, 0, 1};
  fast.hidden_out = &fast_h;
  ref.hidden_out = &ref_h;
  ref.aten_reference = true;
  const at::Tensor logits = s.model->forward(t, p, a.view(0, n, false), fast);
  const at::Tensor ref_logits = s.model->forward(t, p, b.view(0, n, false), ref);
  REQUIRE(fast_h.size() == 3);
  REQUIRE(ref_h.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO("hidden_layers[" << i << "]");
    REQUIRE(fast_h[i].sizes() == at::IntArrayRef({n, c.hidden_size}));
    REQUIRE(ref_h[i].sizes() == fast_h[i].sizes());
    const double scale = ref_h[i].abs().max().item<double>();
    CHECK((fast_h[i] - ref_h[i]).abs().max().item<double>() < 1e-4 * std::max(1.0, scale));
  }
  CHECK((fast_h[0] - fast_h[1]).abs().max().item<double>() > 1e-2);  // different layers differ

  // The last layer's residual stream, through the final RMSNorm and the LM head (weights from
  // an independent load: the model took its own copy), is the model's logits.
  ModelSource src;
  src.path = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  src.tokenizer = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/tok512.bin";
  src.format = "llama2c";
  const LoadedModel w = load_model(src);
  auto weight = [&](const std::string& name) {
    const HostTensor& h = w.weights.at(name);
    return at::tensor(h.data, at::kFloat).view(h.shape);
  };
  const at::Tensor head = weight(w.weights.count("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight");
  const at::Tensor& x = fast_h[0];  // [n, hidden]
  const at::Tensor normed = x * at::rsqrt(x.pow(2).mean({-1}, true) + c.rms_norm_eps) * weight("model.norm.weight");
  const at::Tensor from_hidden = at::matmul(normed, head.t());  // [n, vocab]
  const double scale = ref_logits.abs().max().item<double>();
  CHECK((from_hidden - logits).abs().max().item<double>() < 1e-4 * std::max(1.0, scale));
  CHECK((from_hidden - ref_logits).abs().max().item<double>() < 1e-4 * std::max(1.0, scale));

  // A layer subset with logits for the last token only still returns every token's hidden state,
  // the same as the full pass's after that layer (layers run in order).
  ForwardOptions subset;
  subset.layers = {0, 1};
  subset.logits_last_n = 1;
  subset.hidden_layers = {1};
  subset.hidden_out = &sub_h;
  CHECK(s.model->forward(t, p, sub.view(0, n, false), subset).size(0) == 1);
  REQUIRE(sub_h.size() == 1);
  CHECK((sub_h[0] - fast_h[2]).abs().max().item<double>() < 1e-6);
  subset.hidden_layers = {2};  // not run
  CHECK_THROWS_WITH(s.model->forward(t, p, sub.view(0, n, false), subset),
                    Catch::Contains("hidden layer 2 is not one of the layers that run"));
}

TEST_CASE("step profile: every step of the layer loop is timed, on both paths, and the logits do not change",
          "[model][cpu_path][profile]") {
  auto& s = testing::stories();
  const ModelConfig& c = s.model->config();
  const at::Tensor t = at::tensor(std::vector<int64_t>{1, 403, 407, 261, 378}, at::kLong);
  const at::Tensor p = at::arange(5, at::kLong);
  for (bool aten : {false, true}) {
    INFO("libtorch-op path " << aten);
    ScatteredKv a(c, 8, true), b(c, 8, true);
    ForwardOptions plain, profiled;
    plain.aten_reference = profiled.aten_reference = aten;
    StepProfile prof;
    profiled.profile = &prof;
    const at::Tensor x = s.model->forward(t, p, a.view(0, 5, false), plain);
    const at::Tensor y = s.model->forward(t, p, b.view(0, 5, false), profiled);
    CHECK(at::equal(x, y));
    CHECK(prof.forwards == 1);
    for (int k = 0; k < static_cast<int>(LoopStep::kCount); ++k) {
      INFO("step " << loop_step_name(static_cast<LoopStep>(k)));
      CHECK(prof.seconds[static_cast<size_t>(k)] > 0.0);
    }
    // A second forward adds to the same profile.
    const StepProfile before = prof;
    s.model->forward(t.slice(0, 0, 1), at::arange(5, 6, at::kLong), b.view(5, 1, false), profiled);
    CHECK(prof.forwards == 2);
    CHECK(prof.at(LoopStep::kAttention) > before.at(LoopStep::kAttention));
  }
}

// Batch decode's teacher-forcing mode asks for every prompt row's logits (logits_last_n = 0),
// where generate_ar asks for the last row's alone. The LM head runs in pieces of at most
// kMaxRowExact rows, so the last row's logits are the same bits either way, and so is the first
// answer token; before 2026-12-05 a prompt of more than 32 rows took the n-row float kernels
// (16-lane sums on AVX-512) for all of them, and its last row differed from a 1-row head's.
TEST_CASE("a row's logits are the same bits whether the LM head runs over every prompt row or the last alone",
          "[model][cpu_path]") {
  auto& s = testing::stories();
  const ModelConfig& c = s.model->config();
  for (int64_t n : {5, 33, 70}) {
    INFO("prompt of " << n << " tokens");
    std::vector<int64_t> toks(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = 1 + (i * 37 + 11) % (c.vocab_size - 1);
    const at::Tensor t = at::tensor(toks, at::kLong), p = at::arange(n, at::kLong);
    ScatteredKv a(c, n, false), b(c, n, false);
    ForwardOptions all, last;
    all.logits_last_n = 0;
    last.logits_last_n = 1;
    const at::Tensor every = s.model->forward(t, p, a.view(0, n, true), all);
    const at::Tensor one = s.model->forward(t, p, b.view(0, n, true), last);
    REQUIRE(every.size(0) == n);
    REQUIRE(one.size(0) == 1);
    CHECK(at::equal(every[n - 1], one[0]));
  }
  // The check can fail: on AVX-512 one float32 matmul call of 33 rows (what the LM head ran before
  // it was cut into pieces) gives its last row other bits than a 1-row call.
  if (kernel_isa() < KernelIsa::kAvx512) {
    WARN("no AVX-512 here: every row count runs the same 8-lane float kernel, so the unchunked head "
         "would pass too");
    return;
  }
  const int64_t rows = 33, out = 512, in = 64;
  std::vector<float> w(static_cast<size_t>(out * in)), x(static_cast<size_t>(rows * in));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * 0.1f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<float> all(static_cast<size_t>(rows * out)), last(static_cast<size_t>(out));
  gemm_small_f32(w.data(), x.data(), nullptr, all.data(), rows, out, in);
  gemm_small_f32(w.data(), x.data() + (rows - 1) * in, nullptr, last.data(), 1, out, in);
  CHECK(std::memcmp(all.data() + (rows - 1) * out, last.data(), last.size() * sizeof(float)) != 0);
}
