// Cross-format loading: the same stories260K weights written as an HF safetensors directory and
// as GGUF files must give the same model as the llama2.c checkpoint they came from.
//
// The reference is stories260K.bin (llama2.c, q/k rows in the interleaved Meta layout, which
// load_llama2c un-permutes to HF's rotate_half layout). The tests write:
//   - an HF directory with write_hf_dir (LlamaForCausalLM, F32 or BF16) plus a byte-level BPE
//     tokenizer.json they generate (load_hf_dir requires one; the tests feed token ids, so it only
//     has to load and cover the 512 ids);
//   - GGUF files the way llama.cpp's convert_hf_to_gguf.py does for a Llama checkpoint: GGUF
//     tensor names, q/k rows permuted back to the interleaved layout (permute_rope_rows), 1-D
//     tensors F32, the llama2.c SentencePiece vocabulary as a "llama" tokenizer, in F32 and Q8_0
//     (tensors whose rows are not a multiple of the Q8_0 block of 32 fall back to F16, as in
//     convert_hf_to_gguf.py);
// and compare prefill logits over every position of a real prompt (LlamaModel + ContiguousKv).
// Negative controls show the comparisons can fail: a GGUF written without the q/k permutation
// must give clearly different logits, and an HF directory with one tensor of the wrong shape must
// be refused with an error naming that tensor.
#include "tests/torch_catch.h"

#include <c10/core/InferenceMode.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/engine/ar_decode.h"
#include "framework/kv/contiguous_kv.h"
#include "models/llama/llama_model.h"
#include "models/loaders/gguf.h"
#include "models/loaders/gguf_model.h"
#include "models/loaders/hf_model.h"
#include "models/loaders/safetensors.h"
#include "models/model_loader.h"
#include "models/tokenizers/byte_level_bpe.h"
#include "models/tokenizers/sentencepiece_bpe.h"
#include "tests/support/build_tmp_dir.h"
#include "tests/support/byte_level_tokenizer_json.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

const std::string kStories = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K";
const char* kPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her dog, Max. One day, they found a big red ball under a tree.";

// A fresh directory under the build tree for one test (tests/support/build_tmp_dir.h).
struct TempDir : test::BuildTmpDir {
  explicit TempDir(const std::string& name) : BuildTmpDir("cross_format", name) {}
};

// The llama2.c checkpoint, loaded once; callers copy it (LlamaModel takes the weights out).
const LoadedModel& stories() {
  static const LoadedModel m = [] {
    ModelSource src;
    src.path = kStories + "/stories260K.bin";
    src.tokenizer = kStories + "/tok512.bin";
    src.format = "llama2c";
    return load_model(src);
  }();
  return m;
}

TokenList prompt_ids() { return stories().tokenizer->encode(kPrompt, /*add_bos=*/true); }

// ---- HF directory -----------------------------------------------------------------------------


void write_hf_copy(const std::string& dir, const LoadedModel& m, SafetensorsDtype dtype) {
  HfWriteOptions o;
  o.architecture = "LlamaForCausalLM";
  o.dtype = dtype;
  o.bos_token_id = 1;
  o.eos_token_ids = {2};
  write_hf_dir(dir, m.config, m.weights, o);  // config.json, generation_config.json, model.safetensors
  test::write_byte_level_tokenizer_json(dir + "/tokenizer.json", m.config.vocab_size);
}

// ---- GGUF -------------------------------------------------------------------------------------

// Canonical HF name -> GGUF name (the inverse of gguf_to_hf_name for Llama tensors).
std::string hf_to_gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::map<std::string, std::string> block = {
      {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.o_proj.weight", "attn_output.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},    {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
  };
  const std::string prefix = "model.layers.";
  REQUIRE(hf.compare(0, prefix.size(), prefix) == 0);
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const auto it = block.find(hf.substr(dot + 1));
  REQUIRE(it != block.end());
  return "blk." + layer + "." + it->second;
}

struct GgufCopyOptions {
  GgmlType matrix_type = GgmlType::F32;  // 2-D tensors; 1-D tensors are always F32
  bool permute_qk = true;                // false: the deliberate bug of the negative control
};

void write_gguf_copy(const std::string& path, const LoadedModel& m, const GgufCopyOptions& opts) {
  const ModelConfig& c = m.config;
  const auto* spm = dynamic_cast<const SentencePieceBpe*>(m.tokenizer.get());
  REQUIRE(spm != nullptr);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (Token id = 0; id < spm->vocab_size(); ++id) {
    pieces.push_back(spm->token_text(id));
    scores.push_back(spm->score(id));
    types.push_back(spm->token_type(id));
  }
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  GgufMetadata md = {
      {"general.architecture", GgufValue::str("llama")},
      {"general.name", GgufValue::str("stories260K")},
      {"general.file_type", u32(opts.matrix_type == GgmlType::Q8_0 ? 7 : 0)},  // LLAMA_FTYPE_MOSTLY_Q8_0 / ALL_F32
      {"llama.context_length", u32(c.max_position_embeddings)},
      {"llama.embedding_length", u32(c.hidden_size)},
      {"llama.block_count", u32(c.num_hidden_layers)},
      {"llama.feed_forward_length", u32(c.intermediate_size)},
      {"llama.rope.dimension_count", u32(c.head_dim)},
      {"llama.attention.head_count", u32(c.num_attention_heads)},
      {"llama.attention.head_count_kv", u32(c.num_key_value_heads)},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(c.rms_norm_eps))},
      {"llama.rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta))},
      {"tokenizer.ggml.model", GgufValue::str("llama")},
      {"tokenizer.ggml.tokens", GgufValue::array(GgufArray::of_strings(pieces))},
      {"tokenizer.ggml.scores", GgufValue::array(GgufArray::of_float32(scores))},
      {"tokenizer.ggml.token_type", GgufValue::array(GgufArray::of_int32(types))},
      {"tokenizer.ggml.bos_token_id", u32(1)},
      {"tokenizer.ggml.eos_token_id", u32(2)},
      {"tokenizer.ggml.add_space_prefix", GgufValue::boolean(spm->add_space_prefix())},
  };

  // q/k rows go back to the interleaved layout: copies, so the source stays canonical.
  WeightMap permuted;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    for (const auto& [proj, heads] : {std::pair<std::string, int64_t>{"q_proj.weight", c.num_attention_heads},
                                      std::pair<std::string, int64_t>{"k_proj.weight", c.num_key_value_heads}}) {
      HostTensor t = m.weights.at(p + proj);
      if (opts.permute_qk) permute_rope_rows(t, heads);
      permuted.emplace(p + proj, std::move(t));
    }
  }
  std::vector<GgufTensorToWrite> tensors;
  for (const auto& [name, t] : m.weights) {
    const HostTensor& src = permuted.count(name) ? permuted.at(name) : t;
    GgufTensorToWrite w;
    w.name = hf_to_gguf_name(name);
    w.shape = src.shape;
    w.data = src.data.data();
    if (src.shape.size() == 1) {
      w.type = GgmlType::F32;
    } else if (opts.matrix_type == GgmlType::Q8_0 && src.shape.back() % 32 != 0) {
      w.type = GgmlType::F16;  // convert_hf_to_gguf.py's fallback when rows do not split into blocks
    } else {
      w.type = opts.matrix_type;
    }
    tensors.push_back(w);
  }
  write_gguf(path, md, tensors);
}

// ---- comparisons ------------------------------------------------------------------------------

// Prefill logits of `m` (a copy is made: LlamaModel takes the weights) for `ids`: [n, vocab].
at::Tensor prefill_logits(LoadedModel m, const TokenList& ids) {
  c10::InferenceMode guard;
  LlamaModel model(m);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> v(ids.begin(), ids.end());
  ContiguousKv kv(model.config().kv_geometry(), n);
  return model.forward(at::tensor(v, at::kLong), at::arange(n, at::kLong), kv.append_view(n)).clone();
}

TokenList greedy_continuation(LoadedModel m, const TokenList& ids, int64_t n_new) {
  LlamaModel model(m);
  GenerationOptions gen;
  gen.max_new_tokens = n_new;
  gen.ignore_eos = true;
  return generate_ar(model, *m.tokenizer, ids, gen, SamplingOptions{}).tokens;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a - b).abs().max().item<double>();
}

void check_same_config(const ModelConfig& a, const ModelConfig& b) {
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.hidden_size == b.hidden_size);
  CHECK(a.intermediate_size == b.intermediate_size);
  CHECK(a.num_hidden_layers == b.num_hidden_layers);
  CHECK(a.num_attention_heads == b.num_attention_heads);
  CHECK(a.num_key_value_heads == b.num_key_value_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.max_position_embeddings == b.max_position_embeddings);
  CHECK(a.tie_word_embeddings == b.tie_word_embeddings);
  CHECK(a.attention_bias == b.attention_bias);
  CHECK(a.rope_theta == b.rope_theta);
  // eps is stored as float32 in GGUF; the model adds it to float32 tensors, where 1e-5 and
  // float(1e-5) are the same number.
  CHECK(static_cast<float>(a.rms_norm_eps) == static_cast<float>(b.rms_norm_eps));
}

// Same names, shapes and bit patterns.
void check_bit_identical(const WeightMap& a, const WeightMap& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO("tensor " << name);
    REQUIRE(b.count(name) == 1);
    const HostTensor& u = b.at(name);
    REQUIRE(t.shape == u.shape);
    REQUIRE(t.data.size() == u.data.size());
    CHECK(std::memcmp(t.data.data(), u.data.data(), t.data.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("stories260K as HF safetensors (F32) and GGUF (F32) equals the llama2.c checkpoint",
          "[cross-format]") {
  TempDir tmp("f32");
  const LoadedModel& ref = stories();
  write_hf_copy(tmp / "hf", ref, SafetensorsDtype::kF32);
  write_gguf_copy(tmp / "stories.gguf", ref, {});

  const LoadedModel hf = load_hf_dir(tmp / "hf");
  const LoadedModel gguf = load_gguf(tmp / "stories.gguf");
  CHECK(hf.format == "safetensors");
  CHECK(gguf.format == "gguf");
  CHECK(hf.storage_types == "F32 x " + std::to_string(ref.weights.size()));
  CHECK(gguf.storage_types == "F32 x " + std::to_string(ref.weights.size()));
  check_same_config(ref.config, hf.config);
  check_same_config(ref.config, gguf.config);
  // The GGUF vocabulary is the llama2.c one, so it encodes the prompt the same way.
  CHECK(gguf.tokenizer->encode(kPrompt, true) == prompt_ids());

  // F32 storage and the permute/unpermute pair are exact (both only copy floats and reorder
  // rows), so every loader must produce the same bits.
  check_bit_identical(ref.weights, hf.weights);
  check_bit_identical(ref.weights, gguf.weights);

  // With bit-identical weights and inputs the forward pass is the same computation. The only
  // freedom left is the BLAS kernel's summation order, which could differ between runs by a few
  // float32 ulps of the logits (|logit| < 20: ulp ~2e-6), hence 1e-5 rather than 0.
  const TokenList ids = prompt_ids();
  REQUIRE(ids.size() > 30);
  const at::Tensor l_ref = prefill_logits(ref, ids);
  const at::Tensor l_hf = prefill_logits(hf, ids);
  const at::Tensor l_gguf = prefill_logits(gguf, ids);
  REQUIRE(l_ref.size(0) == static_cast<int64_t>(ids.size()));
  REQUIRE(l_ref.size(1) == ref.config.vocab_size);
  const double d_hf = max_abs_diff(l_ref, l_hf), d_gguf = max_abs_diff(l_ref, l_gguf);
  INFO("llama2.c vs HF: " << d_hf << ", llama2.c vs GGUF: " << d_gguf);
  CHECK(d_hf <= 1e-5);
  CHECK(d_gguf <= 1e-5);
}

TEST_CASE("stories260K as GGUF Q8_0 stays within Q8_0 error of the F32 model", "[cross-format][q8_0]") {
  TempDir tmp("q8_0");
  const LoadedModel& ref = stories();
  write_gguf_copy(tmp / "stories-q8_0.gguf", ref, {GgmlType::Q8_0, true});
  const LoadedModel q8 = load_gguf(tmp / "stories-q8_0.gguf");
  // 5 layers x 6 of the 7 matrices + token_embd are Q8_0; ffn_down (rows of 172) falls back to
  // F16; 11 norms stay F32.
  CHECK(q8.storage_types == "Q8_0 x 31, F32 x 11, F16 x 5");
  check_same_config(ref.config, q8.config);

  // Every weight against the format's definition (ggml quantize_row_q8_0_ref): a block of 32
  // consecutive weights of a row stores d = max|w| / 127 as F16 (d16) and q = round(w / d), and
  // decodes to q * d16, so |q * d16 - w| <= d / 2 + 127 |d16 - d|. The q/k rows were permuted
  // before quantizing and un-permuted after; blocks lie inside rows, so they are unaffected.
  for (const auto& [name, t] : ref.weights) {
    INFO("tensor " << name);
    const HostTensor& u = q8.weights.at(name);
    REQUIRE(u.shape == t.shape);
    size_t bad = 0;
    if (t.shape.size() == 1) {  // F32
      bad = std::memcmp(u.data.data(), t.data.data(), t.data.size() * sizeof(float)) == 0 ? 0 : 1;
    } else if (t.shape.back() % 32 != 0) {  // F16: half an F16 ulp (2^-11 relative; 2^-25 subnormal)
      for (size_t i = 0; i < t.data.size(); ++i)
        bad += std::fabs(u.data[i] - t.data[i]) > std::max(std::ldexp(std::fabs(t.data[i]), -11), 0x1p-25f);
    } else {
      for (size_t b = 0; b < t.data.size(); b += 32) {
        float amax = 0.0f;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(t.data[i]));
        const float d = amax / 127.0f, d16 = half_to_float(float_to_half(d));
        const double bound = 0.5 * d + 127.0 * std::fabs(d16 - d) + 1e-6 * amax;  // + float slack
        for (size_t i = b; i < b + 32; ++i) bad += std::fabs(u.data[i] - t.data[i]) > bound;
      }
    }
    CHECK(bad == 0);
  }

  // Logits. The BF16 copy below (every weight within 2^-8 relative) moves the logits by ~0.12 at
  // most and ~0.02 on average. Q8_0's error is up to half a step of max|w|/127 per block, i.e.
  // 2-5x larger than BF16's for the typical weight, which sits well below its block's maximum,
  // and this tiny model has no redundancy to average it out: measured 0.27 max, 0.047 mean. We
  // allow 0.6 max and 0.1 mean (about 2x the measurement); wrong scales, block order or row
  // layout give errors of order 1 and more (the un-permuted control below).
  const TokenList ids = prompt_ids();
  const at::Tensor l_ref = prefill_logits(ref, ids);
  const at::Tensor l_q8 = prefill_logits(q8, ids);
  const double d = max_abs_diff(l_ref, l_q8);
  const double mean = (l_ref - l_q8).abs().mean().item<double>();
  INFO("Q8_0 vs F32 logits: max " << d << ", mean " << mean);
  WARN("stories260K Q8_0 vs F32 prefill logits: max abs diff " << d << ", mean " << mean);
  CHECK(d < 0.6);
  CHECK(mean < 0.1);
  CHECK(d > 0.0);  // the file really was quantized

  // Greedy continuation (40 tokens). Q8_0 noise can only flip the argmax where the F32 model's
  // top two candidates are close. On this prompt the two agree for 18 tokens; then, at the start
  // of a line, F32 picks " Lily" and Q8_0 " Max", F32's runner-up. We pin that: the continuations
  // agree until the first difference, which comes no earlier than token 16, and there Q8_0 chose
  // F32's second choice, whose logit is within 0.2 of the first (measured: 0.037).
  const TokenList a = greedy_continuation(ref, ids, 40);
  const TokenList b = greedy_continuation(q8, ids, 40);
  REQUIRE(a.size() == 40);
  REQUIRE(b.size() == 40);
  size_t agree = 0;
  while (agree < a.size() && a[agree] == b[agree]) ++agree;
  INFO("F32:  " << stories().tokenizer->decode(a) << "\nQ8_0: " << stories().tokenizer->decode(b));
  WARN("stories260K Q8_0 vs F32 greedy: " << agree << " of 40 tokens agree before the first difference");
  CHECK(agree >= 16);
  if (agree < a.size()) {
    TokenList seq = ids;
    seq.insert(seq.end(), a.begin(), a.begin() + static_cast<std::ptrdiff_t>(agree));
    const at::Tensor last = prefill_logits(ref, seq)[static_cast<int64_t>(seq.size()) - 1];
    const auto top2 = last.topk(2);
    const at::Tensor values = std::get<0>(top2), indices = std::get<1>(top2);
    const double margin = (values[0] - values[1]).item<double>();
    INFO("F32 top-2 at the first difference: " << indices[0].item<int64_t>() << ", " << indices[1].item<int64_t>()
                                               << ", margin " << margin);
    CHECK(indices[0].item<int64_t>() == a[agree]);
    CHECK(indices[1].item<int64_t>() == b[agree]);
    CHECK(margin < 0.2);
  }
}

TEST_CASE("stories260K as HF safetensors in BF16 stays within bfloat16 error", "[cross-format][bf16]") {
  TempDir tmp("bf16");
  const LoadedModel& ref = stories();
  write_hf_copy(tmp / "hf-bf16", ref, SafetensorsDtype::kBF16);
  const LoadedModel bf = load_hf_dir(tmp / "hf-bf16");
  CHECK(bf.storage_types == "BF16 x " + std::to_string(ref.weights.size()));
  check_same_config(ref.config, bf.config);
  // Each weight is the nearest bfloat16 (8 significant bits): off by at most half a unit in the
  // last place, 2^-8 relative to the weight.
  for (const auto& [name, t] : ref.weights) {
    const HostTensor& u = bf.weights.at(name);
    REQUIRE(u.shape == t.shape);
    bool ok = true;
    for (size_t i = 0; i < t.data.size() && ok; ++i)
      ok = std::fabs(u.data[i] - t.data[i]) <= std::ldexp(std::fabs(t.data[i]), -8);
    INFO("tensor " << name);
    CHECK(ok);
  }
  // Per-weight error <= 2^-8 = 0.4% relative (vs Q8_0's <= 0.4% of the block maximum): the same
  // reasoning as for Q8_0 gives logits within a few hundredths; 0.25 max, 0.05 mean.
  const TokenList ids = prompt_ids();
  const at::Tensor l_ref = prefill_logits(ref, ids);
  const at::Tensor l_bf = prefill_logits(bf, ids);
  const double d = max_abs_diff(l_ref, l_bf);
  const double mean = (l_ref - l_bf).abs().mean().item<double>();
  INFO("BF16 vs F32 logits: max " << d << ", mean " << mean);
  WARN("stories260K BF16 vs F32 prefill logits: max abs diff " << d << ", mean " << mean);
  CHECK(d < 0.25);
  CHECK(mean < 0.05);
  CHECK(d > 0.0);
}

TEST_CASE("a decode step's weight bytes leave out an untied embedding table, not a tied one", "[cross-format][bytes]") {
  // The bench's bandwidth floor divides step_weight_bytes() by the memory bandwidth: an untied
  // table (Qwen2.5-Coder-1.5B's, 130 MB) is read only at the step's token rows, a tied one is
  // the LM head too and is streamed every step.
  LoadedModel tied_m = stories();
  REQUIRE(tied_m.config.tie_word_embeddings);
  LoadedModel untied_m = stories();
  untied_m.config.tie_word_embeddings = false;
  untied_m.weights["lm_head.weight"] = untied_m.weights.at("model.embed_tokens.weight");
  const uint64_t table = static_cast<uint64_t>(untied_m.weights.at("lm_head.weight").numel()) * sizeof(float);
  LlamaModel tied(tied_m), untied(untied_m);
  CHECK(tied.step_weight_bytes() == tied.weight_bytes());
  CHECK(untied.weight_bytes() == tied.weight_bytes() + table);
  CHECK(untied.step_weight_bytes() == tied.weight_bytes());
}

TEST_CASE("negative control: a GGUF written without the q/k RoPE permutation gives other logits",
          "[cross-format][negative]") {
  TempDir tmp("nopermute");
  const LoadedModel& ref = stories();
  write_gguf_copy(tmp / "unpermuted.gguf", ref, {GgmlType::F32, /*permute_qk=*/false});
  const LoadedModel bad = load_gguf(tmp / "unpermuted.gguf");  // loads: only the row order is wrong
  const TokenList ids = prompt_ids();
  const at::Tensor l_ref = prefill_logits(ref, ids);
  const at::Tensor l_bad = prefill_logits(bad, ids);
  // Position 0 attends only to itself: softmax over one key is 1 whatever q and k are, so the
  // first row agrees; every later position mixes values with wrong attention weights.
  CHECK(max_abs_diff(l_ref[0], l_bad[0]) <= 1e-5);
  const int64_t n = l_ref.size(0);
  const double d = max_abs_diff(l_ref.narrow(0, 1, n - 1), l_bad.narrow(0, 1, n - 1));
  INFO("un-permuted GGUF vs reference: max abs diff " << d);
  CHECK(d > 1e-2);
}

TEST_CASE("negative control: an HF directory with a tensor of the wrong shape is refused naming it",
          "[cross-format][negative]") {
  TempDir tmp("badshape");
  const LoadedModel& ref = stories();
  const std::string dir = tmp / "hf";
  write_hf_copy(dir, ref, SafetensorsDtype::kF32);
  REQUIRE_NOTHROW(load_hf_dir(dir));

  // Rewrite model.safetensors with up_proj of layer 3 transposed in shape ([172, 64] ->
  // [64, 172]: same element count, so only the shape check can catch it).
  WeightMap corrupt = ref.weights;
  const std::string victim = "model.layers.3.mlp.up_proj.weight";
  std::swap(corrupt.at(victim).shape[0], corrupt.at(victim).shape[1]);
  write_safetensors(dir + "/model.safetensors", corrupt, SafetensorsDtype::kF32, {{"format", "pt"}});
  try {
    load_hf_dir(dir);
    FAIL("load_hf_dir accepted a tensor of the wrong shape");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK(e.field() == victim);
    CHECK(e.file() == dir + "/model.safetensors");
    const std::string what = e.what();
    CHECK(what.find("expected [172, 64], found [64, 172]") != std::string::npos);
  }
}
