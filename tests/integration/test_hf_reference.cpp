// HF reference: SpecLab's HF-checkpoint path (load_hf_dir + LlamaModel) against HF transformers,
// an outside implementation, on small LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM
// checkpoints. test_cross_format only compares the HF path with SpecLab's own llama2.c loader
// (plain Llama, default head_dim); this covers what that cannot: Qwen2's q/k/v biases, tied
// embeddings, Mistral, head_dim != hidden / heads, GQA and MQA, rope_theta 5e5 and 1e6,
// rms_norm_eps 1e-5 and 1e-6, BF16 and F16 storage, and transformers v5's config.json spelling.
//
// The fixtures (tests/fixtures/hf_reference/<case>.json) come from scripts/make_hf_reference.py:
// transformers' config.json for the case, the parameter names and shapes, every parameter set
// from a closed formula (weight_values below: integer hashing, so both languages make the same
// float32 bits, which the per-tensor FNV-1a hashes prove), and the float32 eager-attention logits
// of a fixed 24-token sequence (full logits at 4 positions; argmax, max, logsumexp and sum at
// every position). The tests make the same weights, write the checkpoint with write_hf_dir in the
// case's storage dtype, load it with load_hf_dir, once with write_hf_dir's config.json and once
// with transformers' own, and compare prefill logits (LlamaModel + ContiguousKv) on both of
// SpecLab's CPU backends. Negative controls show the comparison can fail: q/k rows in the
// interleaved (Meta/GGUF) RoPE layout, a wrong rope_theta, and Qwen2 without its biases.
//
// Two hidden cases need Python and are run by hand (commands in scripts/make_hf_reference.py):
// [.hf-dirs] loads the directories transformers itself wrote (save_pretrained, one sharded, plus
// probe configs and configs SpecLab must refuse); [.write-dirs] writes write_hf_dir directories
// for `make_hf_reference.py --check-dirs` to load in transformers.
#include "tests/torch_catch.h"

#include <c10/core/InferenceMode.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/kv/contiguous_kv.h"
#include "models/llama/llama_model.h"
#include "models/loaders/hf_model.h"
#include "models/loaders/safetensors.h"
#include "models/tokenizers/byte_level_bpe.h"
#include "tests/support/build_tmp_dir.h"
#include "tests/support/byte_level_tokenizer_json.h"

using namespace speclab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(SPECLAB_SOURCE_DIR) + "/tests/fixtures/hf_reference/";
const char* const kCases[] = {"llama_gqa_head_dim", "qwen2_tied_bf16", "mistral_head_dim_f16", "llama_tied_defaults",
                              "qwen2_mqa_untied"};

// Max |SpecLab - transformers| over the logits allowed. Both run the same float32 computation with
// the same weights (storage rounding included); what differs is summation order (BLAS kernels,
// attention) and float32 pow/sin/cos in the RoPE tables, each a few ulps. |logits| < 5 here
// (ulp <= 4.8e-7); measured: 0.95e-6 to 2.5e-6 (the WARN lines). 1e-4 leaves room for other BLAS
// builds while every negative control moves the logits by more than 0.8.
constexpr double kTolerance = 1e-4;

// A fresh directory under the build tree for one test (tests/support/build_tmp_dir.h).
struct TempDir : test::BuildTmpDir {
  explicit TempDir(const std::string& name) : BuildTmpDir("hf_reference", name) {}
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// ---- the weight formula (scripts/make_hf_reference.py: weight_values) --------------------------

uint32_t fnv1a32(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t h = 0x811C9DC5u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x01000193u;
  return h;
}

uint32_t mix32(uint32_t x) {  // Chris Wellons' lowbias32
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Element i of tensor `name`: center + scale * u with u = ((h >> 8) - 2^23) / 2^23 and
// h = lowbias32(fnv1a32(name) + i * 0x9E3779B9 mod 2^32), in double (exact), rounded to float.
std::vector<float> weight_values(const std::string& name, int64_t n) {
  double center = 0.0, scale = 0.125;
  if (ends_with(name, "norm.weight")) {
    center = 1.0;
    scale = 0.25;
  } else if (ends_with(name, ".bias")) {
    scale = 0.5;
  } else if (name == "model.embed_tokens.weight" || name == "lm_head.weight" ||
             name.find(".q_proj.") != std::string::npos || name.find(".k_proj.") != std::string::npos) {
    scale = 0.25;
  }
  const uint32_t seed = fnv1a32(name.data(), name.size());
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = mix32(seed + static_cast<uint32_t>(i) * 0x9E3779B9u);
    const double u = static_cast<double>(static_cast<int64_t>(h >> 8) - (int64_t{1} << 23)) * 0x1p-23;
    v[static_cast<size_t>(i)] = static_cast<float>(center + scale * u);
  }
  return v;
}

// Every tensor `config` calls for, from the formula.
WeightMap formula_weights(const ModelConfig& config) {
  WeightMap w;
  for (const auto& [name, shape] : expected_weight_shapes(config)) {
    HostTensor t;
    t.shape = shape;
    t.data = weight_values(name, t.numel());
    w.emplace(name, std::move(t));
  }
  return w;
}

// ---- the checkpoint ---------------------------------------------------------------------------


SafetensorsDtype storage_dtype(const std::string& torch_name) {
  if (torch_name == "bfloat16") return SafetensorsDtype::kBF16;
  if (torch_name == "float16") return SafetensorsDtype::kF16;
  REQUIRE(torch_name == "float32");
  return SafetensorsDtype::kF32;
}

// One fixture: its config as SpecLab reads transformers' config.json, and the formula weights.
struct Case {
  json ref;
  HfConfig hf;
  WeightMap weights;
  TokenList ids;
};

// `fixture`: a tests/fixtures/hf_reference/<case>.json, or a reference.json of --save-dir.
Case load_case_file(const std::string& fixture, const TempDir& tmp) {
  Case c;
  c.ref = read_json(fixture);
  write_text(tmp / "transformers_config.json", c.ref.at("config_json").dump(2) + "\n");
  c.hf = read_hf_config(tmp / "transformers_config.json");
  c.weights = formula_weights(c.hf.config);
  for (const auto& id : c.ref.at("token_ids")) c.ids.push_back(id.get<Token>());
  return c;
}

Case load_case(const std::string& name, const TempDir& tmp) {
  Case c = load_case_file(kFixtures + name + ".json", tmp);
  REQUIRE(c.ref.at("case") == name);
  return c;
}

// write_hf_dir's checkpoint of `weights` in the case's storage dtype; with `transformers_config`
// the config.json is replaced by the one transformers wrote.
std::string write_checkpoint(const Case& c, const ModelConfig& config, const WeightMap& weights,
                             const std::string& dir, bool transformers_config) {
  HfWriteOptions o;
  o.architecture = c.hf.architecture;
  o.dtype = storage_dtype(c.ref.at("storage_dtype"));
  o.bos_token_id = c.hf.bos_token_id;
  o.eos_token_ids = c.hf.eos_token_ids;
  write_hf_dir(dir, config, weights, o);
  // 256 byte tokens, no merges: load_hf_dir pads the vocabulary up to vocab_size.
  test::write_byte_level_tokenizer_json(dir + "/tokenizer.json", 256);
  if (transformers_config) write_text(dir + "/config.json", c.ref.at("config_json").dump(2) + "\n");
  return dir;
}

// ---- comparisons ------------------------------------------------------------------------------

// Prefill logits of `m` (a copy: LlamaModel takes the weights) for `ids`: [n, vocab] float32.
at::Tensor prefill_logits(LoadedModel m, const TokenList& ids, bool aten_reference) {
  c10::InferenceMode guard;
  LlamaModel model(m, Activations::kF32);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> v(ids.begin(), ids.end());
  ContiguousKv kv(model.config().kv_geometry(), n);
  ForwardOptions opts;
  opts.aten_reference = aten_reference;
  return model.forward(at::tensor(v, at::kLong), at::arange(n, at::kLong), kv.append_view(n), opts).clone();
}

at::Tensor to_tensor(const json& values /*[n] or [n, vocab] numbers*/) {
  std::vector<float> flat;
  int64_t rows = 1;
  if (values.at(0).is_array()) {
    rows = static_cast<int64_t>(values.size());
    for (const auto& row : values)
      for (const auto& x : row) flat.push_back(x.get<float>());
  } else {
    for (const auto& x : values) flat.push_back(x.get<float>());
  }
  at::Tensor t = at::tensor(flat, at::kFloat);
  return values.at(0).is_array() ? t.view({rows, -1}) : t;
}

// How far `logits` [n, vocab] is from transformers' for the first n positions of the sequence:
// the max abs difference over the stored full rows and the per-position max and logsumexp, and
// of sum / vocab; and the positions whose argmax differs although SpecLab's top two are further
// apart than kTolerance.
struct Deviation {
  double max_abs = 0.0;
  int64_t argmax_mismatches = 0;
};

Deviation deviation(const at::Tensor& logits /*[n, vocab] float32*/, const json& ref) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  REQUIRE(n <= static_cast<int64_t>(ref.at("argmax").size()));
  const at::Tensor l = logits.to(at::kDouble);
  Deviation d;
  auto worst = [&](const at::Tensor& a, const at::Tensor& b) {
    REQUIRE(a.sizes() == b.sizes());
    d.max_abs = std::max(d.max_abs, (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>());
  };
  std::vector<int64_t> pos;
  std::vector<int64_t> rows;
  for (size_t k = 0; k < ref.at("positions").size(); ++k) {
    if (ref.at("positions")[k].get<int64_t>() >= n) continue;
    pos.push_back(ref.at("positions")[k].get<int64_t>());
    rows.push_back(static_cast<int64_t>(k));
  }
  REQUIRE(!pos.empty());
  const at::Tensor ref_rows = to_tensor(ref.at("logits")).index_select(0, at::tensor(rows, at::kLong));
  worst(l.index_select(0, at::tensor(pos, at::kLong)), ref_rows);
  worst(std::get<0>(l.max(1)), to_tensor(ref.at("max")).slice(0, 0, n));
  worst(at::logsumexp(l, 1), to_tensor(ref.at("logsumexp")).slice(0, 0, n));
  worst(l.sum(1) / vocab, to_tensor(ref.at("sum")).slice(0, 0, n).to(at::kDouble) / vocab);
  const at::Tensor top2 = std::get<0>(l.topk(2, 1));
  for (int64_t i = 0; i < n; ++i) {
    const bool clear = top2[i][0].item<double>() - top2[i][1].item<double>() > kTolerance;
    if (clear && l[i].argmax().item<int64_t>() != ref.at("argmax")[i].get<int64_t>()) ++d.argmax_mismatches;
  }
  return d;
}

// The loaded tensors are the ones transformers ran with: same names and float32 bits.
void check_weights(const LoadedModel& m, const json& ref) {
  CHECK(m.weights.size() == ref.at("weights_fnv1a32").size());
  for (const auto& [name, hash] : ref.at("weights_fnv1a32").items()) {
    INFO("tensor " << name);
    REQUIRE(m.weights.count(name) == 1);
    const HostTensor& t = m.weights.at(name);
    CHECK(t.shape == ref.at("tensors").at(name).get<std::vector<int64_t>>());
    CHECK(fnv1a32(t.data.data(), t.data.size() * sizeof(float)) == hash.get<uint32_t>());
  }
}

// Over the first `n` tokens of the case (0: all).
double logits_deviation(const LoadedModel& m, const Case& c, bool aten_reference, int64_t* argmax_mismatches,
                        size_t n = 0) {
  const TokenList ids(c.ids.begin(), c.ids.begin() + static_cast<std::ptrdiff_t>(n ? n : c.ids.size()));
  const Deviation d = deviation(prefill_logits(m, ids, aten_reference), c.ref);
  if (argmax_mismatches) *argmax_mismatches = d.argmax_mismatches;
  return d.max_abs;
}

}  // namespace

TEST_CASE("Five small HF checkpoints give the logits of HF transformers", "[hf-reference]") {
  const std::string name = GENERATE(from_range(std::begin(kCases), std::end(kCases)));
  INFO("case " << name);
  TempDir tmp(name);
  const Case c = load_case(name, tmp);
  CHECK(c.ref.at("architecture") == c.hf.architecture);
  INFO("transformers " << c.ref.at("transformers_version").get<std::string>());

  // The formula's tensors are exactly the parameters transformers' model has.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [n, s] : c.ref.at("tensors").items()) shapes[n] = s.get<std::vector<int64_t>>();
  CHECK(expected_weight_shapes(c.hf.config) == shapes);

  // The config fields that change the computation, against transformers' config.json.
  const json& j = c.ref.at("config_json");
  const ModelConfig& cfg = c.hf.config;
  const int64_t default_head_dim = j.at("hidden_size").get<int64_t>() / j.at("num_attention_heads").get<int64_t>();
  CHECK(cfg.head_dim == j.value("head_dim", default_head_dim));
  CHECK(cfg.num_key_value_heads == j.at("num_key_value_heads").get<int64_t>());
  CHECK(cfg.rope_theta == j.at("rope_parameters").at("rope_theta").get<double>());
  CHECK(cfg.rms_norm_eps == j.at("rms_norm_eps").get<double>());
  CHECK(cfg.tie_word_embeddings == j.at("tie_word_embeddings").get<bool>());
  CHECK(cfg.attention_bias == (c.hf.architecture == "Qwen2ForCausalLM"));

  for (const bool transformers_config : {false, true}) {
    INFO((transformers_config ? "config.json from transformers" : "config.json from write_hf_dir"));
    const std::string dir =
        write_checkpoint(c, cfg, c.weights, tmp / (transformers_config ? "hf_tf" : "hf"), transformers_config);
    const LoadedModel m = load_hf_dir(dir);
    CHECK(m.config.head_dim == cfg.head_dim);
    CHECK(m.config.rope_theta == cfg.rope_theta);
    CHECK(m.config.rms_norm_eps == cfg.rms_norm_eps);
    CHECK(m.config.tie_word_embeddings == cfg.tie_word_embeddings);
    CHECK(m.config.attention_bias == cfg.attention_bias);
    check_weights(m, c.ref);
    for (const bool aten : {false, true}) {
      int64_t mismatches = -1;
      const double d = logits_deviation(m, c, aten, &mismatches);
      WARN(name << (transformers_config ? " (transformers config.json)" : "")
                << (aten ? " aten backend" : " cpu backend") << ": max |SpecLab - transformers| = " << d);
      CHECK(d <= kTolerance);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("A wrong RoPE layout or rope_theta or missing Qwen2 biases give clearly different logits",
          "[hf-reference][negative]") {
  // Each control changes one thing the HF path must get right; each moves the logits by far more
  // than kTolerance (measured: see the WARN lines), so the comparison above can fail.
  SECTION("q/k rows in the interleaved RoPE layout (a GGUF-style checkpoint read as HF)") {
    TempDir tmp("layout");
    const Case c = load_case("llama_gqa_head_dim", tmp);
    WeightMap w = c.weights;
    for (int64_t l = 0; l < c.hf.config.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      permute_rope_rows(w.at(p + "q_proj.weight"), c.hf.config.num_attention_heads);
      permute_rope_rows(w.at(p + "k_proj.weight"), c.hf.config.num_key_value_heads);
    }
    const LoadedModel good = load_hf_dir(write_checkpoint(c, c.hf.config, c.weights, tmp / "good", false));
    const LoadedModel bad = load_hf_dir(write_checkpoint(c, c.hf.config, w, tmp / "bad", false));
    const double d_good = logits_deviation(good, c, false, nullptr), d_bad = logits_deviation(bad, c, false, nullptr);
    WARN("interleaved q/k rows: max deviation " << d_bad << " (correct layout: " << d_good << ")");
    CHECK(d_good <= kTolerance);
    CHECK(d_bad > 0.1);
  }
  SECTION("rope_theta 10000 where transformers used 500000") {
    TempDir tmp("theta");
    const Case c = load_case("llama_gqa_head_dim", tmp);
    REQUIRE(c.hf.config.rope_theta == 500000.0);
    ModelConfig wrong = c.hf.config;
    wrong.rope_theta = 10000.0;
    const LoadedModel bad = load_hf_dir(write_checkpoint(c, wrong, c.weights, tmp / "bad", false));
    const double d_bad = logits_deviation(bad, c, false, nullptr);
    WARN("rope_theta 10000: max deviation " << d_bad);
    CHECK(d_bad > 0.1);
  }
  SECTION("Qwen2 q/k/v biases zeroed") {
    TempDir tmp("bias");
    const Case c = load_case("qwen2_tied_bf16", tmp);
    WeightMap w = c.weights;
    for (auto& [name, t] : w)
      if (ends_with(name, ".bias")) std::fill(t.data.begin(), t.data.end(), 0.0f);
    const LoadedModel bad = load_hf_dir(write_checkpoint(c, c.hf.config, w, tmp / "bad", false));
    const double d_bad = logits_deviation(bad, c, false, nullptr);
    WARN("Qwen2 without biases: max deviation " << d_bad);
    CHECK(d_bad > 0.1);
  }
}

TEST_CASE("Directories written by transformers save_pretrained give transformers' logits or are refused",
          "[.hf-dirs]") {
  // Hidden: needs `make_hf_reference.py --save-dir DIR` and SPECLAB_HF_REFERENCE_DIRS=DIR. Each
  // DIR/<case>/ holds what save_pretrained wrote, a tokenizer.json and reference.json; a case
  // whose reference.json has "refuse" must fail to load with an error containing it. A sliding
  // window shorter than the sequence caps SpecLab's context at the window (hf_model.h), inside
  // which sliding-window attention is full attention: only that prefix is compared.
  const char* root = std::getenv("SPECLAB_HF_REFERENCE_DIRS");
  REQUIRE(root != nullptr);
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "reference.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  REQUIRE(!dirs.empty());
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    INFO("case " << name);
    const json ref = read_json((dir / "reference.json").string());
    if (ref.at("refuse").is_string()) {
      const std::string field = ref.at("refuse").get<std::string>();
      std::string message = "(loaded without an error)";
      try {
        (void)load_hf_dir(dir.string());
      } catch (const Error& e) {
        message = e.what();
      }
      WARN(name << ": " << message);
      CHECK_THAT(message, Catch::Contains(field));
      continue;
    }
    TempDir tmp(name);
    const Case c = load_case_file((dir / "reference.json").string(), tmp);
    try {
      const LoadedModel m = load_hf_dir(dir.string());
      CHECK(m.config.head_dim == c.hf.config.head_dim);
      check_weights(m, c.ref);
      const size_t n = std::min(c.ids.size(), static_cast<size_t>(m.config.max_position_embeddings));
      int64_t mismatches = -1;
      const double d = logits_deviation(m, c, false, &mismatches, n);
      WARN(name << " (" << m.storage_types << ", first " << n << " tokens): max |SpecLab - transformers| = " << d
                << ", argmax mismatches " << mismatches);
      CHECK(d <= kTolerance);
      CHECK(mismatches == 0);
    } catch (const Error& e) {
      FAIL_CHECK(name << ": " << e.what());
    }
  }
}

TEST_CASE("write_hf_dir directories for transformers to load", "[.write-dirs]") {
  // Hidden: with SPECLAB_HF_WRITE_DIR=DIR, writes DIR/<case>/ for every fixture case (what the
  // first test loads); `make_hf_reference.py --check-dirs DIR` loads them in transformers and
  // compares. (A Llama with attention_bias is refused by write_hf_dir: transformers would expect
  // an o_proj bias too.)
  const char* root = std::getenv("SPECLAB_HF_WRITE_DIR");
  REQUIRE(root != nullptr);
  TempDir tmp("write");
  for (const char* name : kCases) {
    const Case c = load_case(name, tmp);
    write_checkpoint(c, c.hf.config, c.weights, std::string(root) + "/" + name, false);
  }
}
