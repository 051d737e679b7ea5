// Tests for the safetensors reader/writer and HF checkpoint directories.
//
// Outside references: the fixtures in tests/fixtures/safetensors were written by the
// `safetensors` PyPI package (scripts/make_safetensors_fixture.py); the tiny checkpoints below
// use the tensor names, shapes and config.json keys transformers writes for LlamaForCausalLM
// and Qwen2ForCausalLM; the tokenizer ids were computed with the `tokenizers` package.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "framework/core/error.h"
#include "models/loaded_model.h"
#include "models/loaders/hf_model.h"
#include "models/loaders/safetensors.h"

using namespace speclab;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kFixtures = std::string(SPECLAB_SOURCE_DIR) + "/tests/fixtures/safetensors/";

// A fresh directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "speclab_st_XXXXXX").string();
    if (!::mkdtemp(&tmpl[0])) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out);
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a literal header and byte buffer.
std::string raw_safetensors(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Deterministic test values in [-1, 1).
HostTensor make_tensor(std::vector<int64_t> shape, int seed) {
  HostTensor t;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < t.data.size(); ++i)
    t.data[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * seed));
  return t;
}

// The float32 values a tensor reads back as after a round trip through `dtype`.
std::vector<float> through(const std::vector<float>& v, SafetensorsDtype dtype) {
  std::vector<float> out(v);
  for (float& x : out) {
    if (dtype == SafetensorsDtype::kF16) x = half_to_float(float_to_half(x));
    if (dtype == SafetensorsDtype::kBF16) x = bf16_to_float(float_to_bf16(x));
  }
  return out;
}

template <typename F>
std::string error_of(F&& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "<no error>";
}

// ---- tiny HF checkpoints ---------------------------------------------------------------------

// config.json as transformers 4.42 writes it for a SmolLM2-style LlamaForCausalLM.
const char* kLlamaConfig = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 16,
  "initializer_range": 0.02,
  "intermediate_size": 24,
  "max_position_embeddings": 64,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 272
}
)";

// config.json as transformers 4.43 writes it for a Qwen2.5-style Qwen2ForCausalLM.
const char* kQwen2Config = R"({
  "architectures": [
    "Qwen2ForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 16,
  "initializer_range": 0.02,
  "intermediate_size": 24,
  "max_position_embeddings": 128,
  "max_window_layers": 2,
  "model_type": "qwen2",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 1,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 272
}
)";

const char* kChatMLTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

// Tensor names and shapes exactly as transformers' save_pretrained writes them, with the
// Llama/Qwen2 dimensions spelled out (hidden 16, heads 4 x head_dim 4, intermediate 24).
WeightMap hf_tensors(int64_t kv_heads, bool qkv_bias, bool lm_head, int64_t layers = 2) {
  const int64_t vocab = 272, hidden = 16, q_out = 4 * 4, kv_out = kv_heads * 4, inter = 24;
  WeightMap w;
  int seed = 0;
  w["model.embed_tokens.weight"] = make_tensor({vocab, hidden}, seed++);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = make_tensor({hidden}, seed++);
    w[p + "self_attn.q_proj.weight"] = make_tensor({q_out, hidden}, seed++);
    w[p + "self_attn.k_proj.weight"] = make_tensor({kv_out, hidden}, seed++);
    w[p + "self_attn.v_proj.weight"] = make_tensor({kv_out, hidden}, seed++);
    if (qkv_bias) {
      w[p + "self_attn.q_proj.bias"] = make_tensor({q_out}, seed++);
      w[p + "self_attn.k_proj.bias"] = make_tensor({kv_out}, seed++);
      w[p + "self_attn.v_proj.bias"] = make_tensor({kv_out}, seed++);
    }
    w[p + "self_attn.o_proj.weight"] = make_tensor({hidden, q_out}, seed++);
    w[p + "post_attention_layernorm.weight"] = make_tensor({hidden}, seed++);
    w[p + "mlp.gate_proj.weight"] = make_tensor({inter, hidden}, seed++);
    w[p + "mlp.up_proj.weight"] = make_tensor({inter, hidden}, seed++);
    w[p + "mlp.down_proj.weight"] = make_tensor({hidden, inter}, seed++);
  }
  w["model.norm.weight"] = make_tensor({hidden}, seed++);
  if (lm_head) w["lm_head.weight"] = make_tensor({vocab, hidden}, seed++);
  return w;
}

// UTF-8 of one code point (< 0x800 is all the GPT-2 byte alphabet needs).
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A minimal HF byte-level BPE tokenizer.json: 3 special tokens, the 256 GPT-2 byte symbols
// (ids 3..258) and 5 merges (ids 259..263).
std::string tiny_tokenizer_json() {
  std::vector<uint32_t> cps(256, 0);
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    cps[b] = printable ? b : 256 + n++;
  }
  json vocab = json::object();
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  json added = json::array();
  for (int i = 0; i < 3; ++i) {
    vocab[specials[i]] = i;
    added.push_back({{"id", i}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  for (uint32_t b = 0; b < 256; ++b) vocab[utf8(cps[b])] = 3 + b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {utf8(cps[' ']), "w"}};
  json merge_list = json::array();
  int id = 259;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(a + " " + b);
  }
  json level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json tj = {{"version", "1.0"},
             {"truncation", nullptr},
             {"padding", nullptr},
             {"added_tokens", added},
             {"normalizer", nullptr},
             {"pre_tokenizer", level},
             {"post_processor", level},
             {"decoder", level},
             {"model",
              {{"type", "BPE"},
               {"dropout", nullptr},
               {"unk_token", nullptr},
               {"continuing_subword_prefix", nullptr},
               {"end_of_word_suffix", nullptr},
               {"fuse_unk", false},
               {"byte_fallback", false},
               {"vocab", vocab},
               {"merges", merge_list}}}};
  return tj.dump();
}

// Writes a Llama checkpoint (BF16, like SmolLM2) into `dir` and returns its float32 tensors.
WeightMap write_llama_dir(const TempDir& dir) {
  write_bytes(dir / "config.json", kLlamaConfig);
  write_bytes(dir / "generation_config.json",
              R"({"_from_model_config": true, "bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.42.3"})");
  write_bytes(dir / "tokenizer.json", tiny_tokenizer_json());
  write_bytes(dir / "tokenizer_config.json", json({{"chat_template", kChatMLTemplate}}).dump());
  WeightMap w = hf_tensors(/*kv_heads=*/2, /*qkv_bias=*/false, /*lm_head=*/true);
  write_safetensors(dir / "model.safetensors", w, SafetensorsDtype::kBF16, {{"format", "pt"}});
  return w;
}

// Writes a Qwen2 checkpoint (F16, tied embeddings, q/k/v biases) into `dir`.
WeightMap write_qwen2_dir(const TempDir& dir) {
  write_bytes(dir / "config.json", kQwen2Config);
  write_bytes(dir / "generation_config.json",
              R"({"bos_token_id": 0, "do_sample": true, "eos_token_id": [2, 0], "top_p": 0.8})");
  write_bytes(dir / "tokenizer.json", tiny_tokenizer_json());
  WeightMap w = hf_tensors(/*kv_heads=*/1, /*qkv_bias=*/true, /*lm_head=*/false);
  write_safetensors(dir / "model.safetensors", w, SafetensorsDtype::kF16, {{"format", "pt"}});
  return w;
}

void check_weights_equal(const WeightMap& loaded, const WeightMap& written, SafetensorsDtype dtype) {
  REQUIRE(loaded.size() == written.size());
  for (const auto& [name, t] : written) {
    INFO(name);
    REQUIRE(loaded.count(name));
    CHECK(loaded.at(name).shape == t.shape);
    CHECK(loaded.at(name).data == through(t.data, dtype));
  }
}

void rewrite_config(const TempDir& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(read_bytes(dir / "config.json"));
  edit(j);
  write_bytes(dir / "config.json", j.dump(2));
}

}  // namespace

// ---- conversions -----------------------------------------------------------------------------

TEST_CASE("half and bfloat16 conversions round to nearest even", "[safetensors]") {
  // Hand-derived binary16 encodings.
  CHECK(float_to_half(1.0f) == 0x3C00);
  CHECK(float_to_half(-2.0f) == 0xC000);
  CHECK(float_to_half(65504.0f) == 0x7BFF);
  CHECK(float_to_half(65520.0f) == 0x7C00);                 // tie rounds up to inf
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);    // tie to even (zero)
  CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);    // 1.5 units: tie to even (2)
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(float_to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7C00) == 0x7C00);
  CHECK((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x03FF) != 0);
  CHECK(half_to_float(0x3555) == 0.333251953125f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(std::isinf(half_to_float(0xFC00)));
  CHECK(std::isnan(half_to_float(0x7E00)));
  // Every finite half survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaNs
    if (float_to_half(half_to_float(static_cast<uint16_t>(h))) != h) FAIL("half " << h);
  }

  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);          // tie to even (down)
  CHECK(float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);          // tie to even (up)
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);    // rounds to inf
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bf16_to_float(0xC020) == -2.5f);
}

// ---- reading the Python-written fixtures -----------------------------------------------------

TEST_CASE("reads a file written by the safetensors Python package", "[safetensors]") {
  const SafetensorsFile f = SafetensorsFile::open(kFixtures + "tiny.safetensors");
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.metadata().at("note") == "speclab fixture");
  CHECK(f.tensors().size() == 5);
  CHECK(f.info("i64").dtype == "I64");
  CHECK(f.info("half").shape == std::vector<int64_t>{3, 5});

  const std::vector<float> src = {1.0f, 1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11),
                                  65504.0f, 65519.0f, 65520.0f, -70000.0f, std::ldexp(1.0f, -24),
                                  std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), -0.0f, 0.1f,
                                  std::numeric_limits<float>::quiet_NaN(), 1.0f / 3.0f,
                                  std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)};
  const HostTensor s = f.read("src");
  REQUIRE(s.shape == std::vector<int64_t>{3, 5});
  REQUIRE(s.data.size() == src.size());
  for (size_t i = 0; i < src.size(); ++i) CHECK(float_bits(s.data[i]) == float_bits(src[i]));

  // numpy's float16 conversion, widened by our reader.
  const std::vector<float> half_expected = {1.0f, 1.0f, 1.0f + std::ldexp(1.0f, -9), 65504.0f, 65504.0f,
                                            INFINITY, -INFINITY, std::ldexp(1.0f, -24), 0.0f,
                                            std::ldexp(1.0f, -24), -0.0f, 0.0999755859375f, NAN,
                                            0.333251953125f, std::ldexp(1.0f, -14)};
  const HostTensor h = f.read("half");
  for (size_t i = 0; i < half_expected.size(); ++i) {
    INFO(i);
    if (std::isnan(half_expected[i])) CHECK(std::isnan(h.data[i]));
    else CHECK(float_bits(h.data[i]) == float_bits(half_expected[i]));
  }

  const HostTensor b = f.read("bf16");
  CHECK(b.shape == std::vector<int64_t>{2, 3});
  CHECK(b.data == std::vector<float>{1.0f, -2.5f, 0.15625f, std::ldexp(1.0f, 127), -std::ldexp(1.0f, -130),
                                     448.0f});

  const HostTensor e = f.read("empty");
  CHECK(e.shape == std::vector<int64_t>{0, 4});
  CHECK(e.data.empty());

  ErrorKind kind{};
  const std::string msg = error_of([&] { f.read("i64"); }, &kind);
  CHECK(kind == ErrorKind::kUnsupported);
  CHECK_THAT(msg, Catch::Contains("tiny.safetensors") && Catch::Contains("i64") && Catch::Contains("I64"));
  CHECK_THAT(error_of([&] { read_safetensors(kFixtures + "tiny.safetensors"); }), Catch::Contains("I64"));
  CHECK_THAT(error_of([&] { f.read("nope"); }), Catch::Contains("nope"));
}

TEST_CASE("the writer's bytes equal the safetensors Python package's", "[safetensors]") {
  TempDir dir;
  const HostTensor src = SafetensorsFile::open(kFixtures + "tiny.safetensors").read("src");

  WeightMap w;
  w["b.weight"] = src;
  w["a.bias"] = HostTensor{{5}, std::vector<float>(src.data.begin(), src.data.begin() + 5), 0, {}};
  w["scalar"] = HostTensor{{}, {src.data[6]}, 0, {}};
  write_safetensors(dir / "f16.safetensors", w, SafetensorsDtype::kF16, {{"format", "pt"}});
  CHECK(read_bytes(dir / "f16.safetensors") == read_bytes(kFixtures + "tiny_f16.safetensors"));

  const std::vector<float> bf = {1.0f, -2.5f, 0.15625f, std::ldexp(1.0f, 127), -std::ldexp(1.0f, -130), 448.0f};
  WeightMap wb;
  wb["x"] = HostTensor{{3, 2}, bf, 0, {}};
  write_safetensors(dir / "bf16.safetensors", wb, SafetensorsDtype::kBF16, {{"format", "pt"}});
  CHECK(read_bytes(dir / "bf16.safetensors") == read_bytes(kFixtures + "tiny_bf16.safetensors"));

  // Header padding: 8 + N is a multiple of 8, padded with spaces.
  const std::string bytes = read_bytes(dir / "bf16.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  CHECK(bytes[8 + n - 1] == ' ');
}

TEST_CASE("write then read back F32, F16 and BF16", "[safetensors]") {
  TempDir dir;
  WeightMap w;
  w["z.last"] = make_tensor({3, 7}, 1);
  w["a.first"] = make_tensor({5}, 2);
  w["m.empty"] = HostTensor{{2, 0, 3}, {}, 0, {}};
  w["m.scalar"] = HostTensor{{}, {0.625f}, 0, {}};
  for (SafetensorsDtype dtype : {SafetensorsDtype::kF32, SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
    INFO(to_string(dtype));
    const std::string path = dir / (std::string(to_string(dtype)) + ".safetensors");
    write_safetensors(path, w, dtype);
    const SafetensorsFile f = SafetensorsFile::open(path);
    CHECK(f.metadata().empty());
    for (const auto& entry : f.tensors()) CHECK(entry.second.dtype == to_string(dtype));
    // Tensors are laid out in name order.
    CHECK(f.info("a.first").begin == 0);
    CHECK(f.info("z.last").end == f.file_size() - f.data_start());
    check_weights_equal(read_safetensors(path), w, dtype);
  }
  // The conversions are not the identity (so the comparison above can fail).
  CHECK(through(w["z.last"].data, SafetensorsDtype::kBF16) != w["z.last"].data);

  // Tensors named `exact` stay F32 in a F16 file: integer ids above 2048 survive.
  WeightMap ids;
  ids["ids"] = HostTensor{{2}, {49151.0f, 2049.0f}, 0, {}};
  ids["w"] = make_tensor({2, 2}, 3);
  write_safetensors(dir / "mixed.safetensors", ids, SafetensorsDtype::kF16, {}, {"ids"});
  const SafetensorsFile mixed = SafetensorsFile::open(dir / "mixed.safetensors");
  CHECK(mixed.info("ids").dtype == "F32");
  CHECK(mixed.info("w").dtype == "F16");
  CHECK(read_safetensors(dir / "mixed.safetensors").at("ids").data == ids["ids"].data);
  CHECK(through(ids["ids"].data, SafetensorsDtype::kF16) != ids["ids"].data);  // F16 would not keep them

  HostTensor bad{{2, 3}, {1.0f}, 0, {}};
  CHECK_THAT(error_of([&] { write_safetensors(dir / "bad.safetensors", {{"t", bad}}, SafetensorsDtype::kF32); }),
             Catch::Contains("t") && Catch::Contains("expected 6"));
  CHECK_THAT(error_of([&] {
               write_safetensors(dir / "bad.safetensors", {{"__metadata__", w["a.first"]}}, SafetensorsDtype::kF32);
             }),
             Catch::Contains("__metadata__"));
}

// ---- malformed files -------------------------------------------------------------------------

TEST_CASE("malformed safetensors files give errors naming file and field", "[safetensors]") {
  TempDir dir;
  const std::string p = dir / "bad.safetensors";
  auto expect = [&](const std::string& bytes, std::vector<std::string> parts,
                    ErrorKind want = ErrorKind::kBadInput) {
    write_bytes(p, bytes);
    ErrorKind kind{};
    const std::string msg = error_of([&] { SafetensorsFile::open(p); }, &kind);
    INFO(msg);
    CHECK(kind == want);
    CHECK_THAT(msg, Catch::Contains("bad.safetensors"));
    for (const auto& part : parts) CHECK_THAT(msg, Catch::Contains(part));
  };
  const std::string good_header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = raw_safetensors(good_header, std::string(8, '\0'));
  write_bytes(p, good);
  CHECK(SafetensorsFile::open(p).read("t").data == std::vector<float>{0.0f, 0.0f});

  expect("", {"header length", "found 0 bytes"});
  expect(good.substr(0, 5), {"header length"});
  expect(le64(1000) + good_header, {"header length", "1000", "past the end"});
  expect(le64(~uint64_t{0}) + good_header, {"header length", "exceeds the limit"});
  expect(good.substr(0, good.size() - 3), {"t.data_offsets", "run past the byte buffer"});  // truncated
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", std::string(8, '\0')),
         {"header", "not valid JSON"});
  expect(raw_safetensors("[1]", ""), {"header", "'{'"});
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", std::string(8, '\0')),
         {"t.data_offsets", "[8, 16)"});
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"t.data_offsets", "expected 12"});
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"t.shape[0]", "non-negative"});
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"t.shape[0]", "string"});
  expect(raw_safetensors(
             R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
             std::string(8, '\0')),
         {"t.shape", "overflow"});
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0')),
         {"t.data_offsets", "begin <= end"});
  expect(raw_safetensors(R"({"t":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')),
         {"t.data_offsets", "missing"});
  expect(raw_safetensors(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"t.dtype", "Q4"}, ErrorKind::kUnsupported);
  expect(raw_safetensors(R"({"__metadata__":{"format":1}})", ""), {"__metadata__.format", "string"});
  expect(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         std::string(8, '\0')),
         {"b.data_offsets", "overlap", "'a'"});
  expect(raw_safetensors(std::string(50, '[') + std::string(50, ']'), ""), {"header"});
  expect(raw_safetensors("{" + std::string(100, '[') + std::string(100, ']') + "}", ""), {"header", "nests"});
  CHECK_THAT(error_of([&] { SafetensorsFile::open(dir / "missing.safetensors"); }),
             Catch::Contains("missing.safetensors") && Catch::Contains("cannot open"));

  // F64 parses (its size is known) but does not read.
  write_bytes(p, raw_safetensors(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                                 std::string(8, '\0')));
  ErrorKind kind{};
  CHECK_THAT(error_of([&] { SafetensorsFile::open(p).read("d"); }, &kind),
             Catch::Contains("d.dtype") && Catch::Contains("F64"));
  CHECK(kind == ErrorKind::kUnsupported);
}

// ---- HF directories --------------------------------------------------------------------------

TEST_CASE("loads a LlamaForCausalLM directory as HF writes it", "[safetensors][hf]") {
  TempDir dir;
  const WeightMap w = write_llama_dir(dir);
  const LoadedModel m = load_hf_dir(dir.str());

  const ModelConfig& c = m.config;
  CHECK(c.architecture == "llama");
  CHECK(c.vocab_size == 272);
  CHECK(c.hidden_size == 16);
  CHECK(c.intermediate_size == 24);
  CHECK(c.num_hidden_layers == 2);
  CHECK(c.num_attention_heads == 4);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.head_dim == 4);  // default hidden / heads
  CHECK(c.max_position_embeddings == 64);
  CHECK(c.rope_theta == 100000.0);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);

  check_weights_equal(m.weights, w, SafetensorsDtype::kBF16);
  CHECK(m.format == "safetensors");
  CHECK(m.source == dir.str());
  CHECK(m.storage_types == "BF16 x 21");
  uint64_t bytes = 0;
  for (const auto& entry : w) bytes += 2 * static_cast<uint64_t>(entry.second.numel());
  CHECK(m.file_bytes == bytes);

  REQUIRE(m.tokenizer);
  // tokenizer.json has 264 tokens and config.json's vocab_size is 272: the ids between are
  // padding the model may emit, which decode to nothing (as HF's decode skips them). Until
  // 2026-12-06 a run that emitted one stopped on "expected a token id in [0, 264)".
  CHECK(m.tokenizer->vocab_size() == 272);
  CHECK(m.tokenizer->decode({262, 264, 271, 263}) == m.tokenizer->decode({262, 263}));
  CHECK(m.tokenizer->token_bytes(270).empty());
  CHECK_THROWS_AS(m.tokenizer->decode({272}), Error);
  CHECK(m.tokenizer->bos_id() == 1);
  CHECK(m.tokenizer->eos_ids() == TokenList{2});
  // Ids from the `tokenizers` package for the same tokenizer.json.
  CHECK(m.tokenizer->encode("hello world", false) == TokenList{262, 263, 114, 117, 111, 103});
  CHECK(m.tokenizer->encode("<|im_start|>hello<|im_end|>", false) == TokenList{1, 262, 2});
  CHECK(m.chat_template.family() == ChatTemplate::Family::kChatML);
}

TEST_CASE("loads a Qwen2ForCausalLM directory with biases and tied embeddings", "[safetensors][hf]") {
  TempDir dir;
  WeightMap w = write_qwen2_dir(dir);
  // A tied checkpoint that still carries lm_head.weight, and an old-style RoPE buffer: both dropped.
  WeightMap extra = w;
  extra["lm_head.weight"] = make_tensor({272, 16}, 99);
  extra["model.layers.0.self_attn.rotary_emb.inv_freq"] = make_tensor({2}, 98);
  write_safetensors(dir / "model.safetensors", extra, SafetensorsDtype::kF16, {{"format", "pt"}});

  const LoadedModel m = load_hf_dir(dir.str());
  const ModelConfig& c = m.config;
  CHECK(c.architecture == "qwen2");
  CHECK(c.num_key_value_heads == 1);
  CHECK(c.head_dim == 4);
  CHECK(c.max_position_embeddings == 128);  // use_sliding_window is false
  CHECK(c.rope_theta == 1000000.0);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.tie_word_embeddings);
  CHECK(c.attention_bias);
  check_weights_equal(m.weights, w, SafetensorsDtype::kF16);
  CHECK(m.weights.count("model.layers.1.self_attn.k_proj.bias"));
  CHECK(m.weights.at("model.layers.1.self_attn.k_proj.bias").shape == std::vector<int64_t>{4});
  CHECK(m.storage_types == "F16 x 26");
  // generation_config.json wins over config.json.
  CHECK(m.tokenizer->bos_id() == 0);
  CHECK(m.tokenizer->eos_ids() == TokenList{2, 0});
  CHECK_FALSE(m.chat_template.available());

  // use_sliding_window slides in the layers from max_window_layers on (transformers' layer_types):
  // at 2 of 2 layers none does, and the context stays 128 (it was cut to the window, 32); from
  // layer 1 on one does, and the context is the window.
  std::string cfg = kQwen2Config;
  const auto set = [&cfg](const std::string& from, const std::string& to) {
    const size_t at = cfg.find(from);
    REQUIRE(at != std::string::npos);
    cfg.replace(at, from.size(), to);
  };
  set("\"use_sliding_window\": false", "\"use_sliding_window\": true");
  write_bytes(dir / "config.json", cfg);
  CHECK(load_hf_dir(dir.str()).config.max_position_embeddings == 128);
  set("\"max_window_layers\": 2", "\"max_window_layers\": 1");
  write_bytes(dir / "config.json", cfg);
  CHECK(load_hf_dir(dir.str()).config.max_position_embeddings == 32);
}

TEST_CASE("the BOS a prompt starts with is tokenizer.json's post-processor's, whatever config.json says",
          "[safetensors][hf]") {
  // config.json's bos_token_id replaced it (found by a probe, 2026-12-06); HF's encode() adds the
  // post-processor's token.
  TempDir dir;
  write_qwen2_dir(dir);
  json tj = json::parse(tiny_tokenizer_json());
  tj["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [
      {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]})");
  write_bytes(dir / "tokenizer.json", tj.dump());
  const LoadedModel m = load_hf_dir(dir.str());  // config.json and generation_config.json: bos 0
  CHECK(m.add_bos);
  CHECK(m.tokenizer->bos_id() == 1);
  CHECK(m.tokenizer->encode("he", m.add_bos) == TokenList{1, 259});
}

// A template from_jinja() does not recognise (Phi-3's turn markers) loaded as "no template", so
// chat: auto ran the bare prompt text without a word (found by a probe on 2026-12-06). The model
// still loads, and chat: on or auto is refused naming the option; off runs.
TEST_CASE("an HF chat template SpecLab cannot render is refused under chat auto and on", "[safetensors][hf][chat]") {
  TempDir dir;
  write_llama_dir(dir);
  const LoadedModel chatml = load_hf_dir(dir.str());
  CHECK(chatml.chat_template.unrenderable().empty());
  CHECK_NOTHROW(check_chat_renders(chatml, "auto", "c.yaml", "prompts.chat", "chat: off"));  // the control

  write_bytes(dir / "tokenizer_config.json",
              json({{"chat_template", "{% for m in messages %}<|user|>\n{{ m.content }}<|end|>\n<|assistant|>\n"
                                      "{% endfor %}"}}).dump());
  const LoadedModel m = load_hf_dir(dir.str());
  CHECK_FALSE(m.chat_template.available());
  CHECK_THAT(m.chat_template.unrenderable(),
             Catch::StartsWith(std::string(dir / "tokenizer_config.json") + ": chat_template: expected a ChatML"));
  for (const char* chat : {"auto", "on"}) {
    try {
      check_chat_renders(m, chat, "c.yaml", "prompts.chat", "chat: off");
      FAIL("no error for chat " << chat);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kConfig);
      CHECK(e.file() == "c.yaml");
      CHECK(e.field() == "prompts.chat");
      CHECK_THAT(e.message(), Catch::StartsWith("the model ships a chat template SpecLab cannot render (" +
                                                m.chat_template.unrenderable() + "); use chat: off"));
    }
  }
  CHECK_NOTHROW(check_chat_renders(m, "off", "c.yaml", "prompts.chat", "chat: off"));
}

TEST_CASE("write_hf_dir round-trips, sharded and not, with HF's config keys", "[safetensors][hf]") {
  TempDir ref;
  write_llama_dir(ref);
  const LoadedModel llama = load_hf_dir(ref.str());

  HfWriteOptions opt;
  opt.architecture = "LlamaForCausalLM";
  opt.dtype = SafetensorsDtype::kF32;
  opt.bos_token_id = 1;
  opt.eos_token_ids = {2};

  SECTION("single file") {
    TempDir out;
    write_hf_dir(out.str(), llama.config, llama.weights, opt);
    write_bytes(out / "tokenizer.json", tiny_tokenizer_json());
    const LoadedModel back = load_hf_dir(out.str());
    check_weights_equal(back.weights, llama.weights, SafetensorsDtype::kF32);
    CHECK(back.config.rope_theta == llama.config.rope_theta);
    CHECK(back.config.rms_norm_eps == llama.config.rms_norm_eps);
    CHECK(back.config.max_position_embeddings == llama.config.max_position_embeddings);
    CHECK(back.tokenizer->eos_ids() == TokenList{2});
    CHECK(back.storage_types == "F32 x 21");

    // The keys transformers writes (its version aside; head_dim is written since 4.45).
    std::set<std::string> want, got;
    const json hf_keys = json::parse(kLlamaConfig), our_keys = json::parse(read_bytes(out / "config.json"));
    for (auto& item : hf_keys.items()) want.insert(item.key());
    want.erase("transformers_version");
    want.insert("head_dim");
    for (auto& item : our_keys.items()) got.insert(item.key());
    CHECK(got == want);
    CHECK(our_keys["torch_dtype"] == "float32");
    CHECK(SafetensorsFile::open(out / "model.safetensors").metadata().at("format") == "pt");
  }

  SECTION("sharded with an index") {
    TempDir out;
    opt.dtype = SafetensorsDtype::kBF16;
    opt.max_shard_bytes = 8000;
    write_hf_dir(out.str(), llama.config, llama.weights, opt);
    write_bytes(out / "tokenizer.json", tiny_tokenizer_json());
    CHECK_FALSE(fs::exists(out / "model.safetensors"));
    const json index = json::parse(read_bytes(out / "model.safetensors.index.json"));
    std::set<std::string> shard_files;
    for (auto& item : index["weight_map"].items()) shard_files.insert(item.value().get<std::string>());
    REQUIRE(shard_files.size() >= 3);
    CHECK(*shard_files.begin() == "model-00001-of-0000" + std::to_string(shard_files.size()) + ".safetensors");
    CHECK(index["weight_map"].size() == 21);
    uint64_t total = 0;
    for (const auto& entry : llama.weights) total += 2 * static_cast<uint64_t>(entry.second.numel());
    CHECK(index["metadata"]["total_size"].get<uint64_t>() == total);

    const LoadedModel back = load_hf_dir(out.str());
    check_weights_equal(back.weights, llama.weights, SafetensorsDtype::kBF16);
    CHECK(back.storage_types == "BF16 x 21");

    // A missing shard names the shard file.
    fs::remove(out / *shard_files.rbegin());
    ErrorKind kind{};
    const std::string msg = error_of([&] { load_hf_dir(out.str()); }, &kind);
    CHECK(kind == ErrorKind::kIo);
    CHECK_THAT(msg, Catch::Contains(*shard_files.rbegin()) && Catch::Contains("does not exist"));
  }

  SECTION("Qwen2 round trip keeps biases and tied embeddings") {
    TempDir qref, out;
    write_qwen2_dir(qref);
    const LoadedModel qwen = load_hf_dir(qref.str());
    opt.architecture = "Qwen2ForCausalLM";
    opt.dtype = SafetensorsDtype::kF16;
    opt.eos_token_ids = {2, 0};
    write_hf_dir(out.str(), qwen.config, qwen.weights, opt);
    write_bytes(out / "tokenizer.json", tiny_tokenizer_json());
    const LoadedModel back = load_hf_dir(out.str());
    check_weights_equal(back.weights, qwen.weights, SafetensorsDtype::kF16);
    CHECK(back.config.attention_bias);
    CHECK(back.config.tie_word_embeddings);
    CHECK(back.tokenizer->eos_ids() == TokenList{2, 0});
    std::set<std::string> want, got;
    const json hf_keys = json::parse(kQwen2Config), our_keys = json::parse(read_bytes(out / "config.json"));
    for (auto& item : hf_keys.items()) want.insert(item.key());
    want.erase("transformers_version");
    want.insert("rope_scaling");
    for (auto& item : our_keys.items()) got.insert(item.key());
    CHECK(got == want);
    // Qwen2 cannot express a model without q/k/v biases.
    ModelConfig no_bias = qwen.config;
    no_bias.attention_bias = false;
    CHECK_THAT(error_of([&] { write_hf_dir(out.str(), no_bias, qwen.weights, opt); }),
               Catch::Contains("attention_bias"));
  }
}

TEST_CASE("bad HF directories give errors naming file and field", "[safetensors][hf]") {
  TempDir dir;
  const WeightMap w = write_llama_dir(dir);
  auto load_error = [&](ErrorKind* kind = nullptr) { return error_of([&] { load_hf_dir(dir.str()); }, kind); };
  ErrorKind kind{};

  SECTION("missing config.json") {
    fs::remove(dir / "config.json");
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json"));
    CHECK(kind == ErrorKind::kIo);
  }
  SECTION("missing directory") {
    CHECK_THAT(error_of([&] { load_hf_dir(dir / "nope"); }), Catch::Contains("nope"));
  }
  SECTION("missing field") {
    rewrite_config(dir, [](json& j) { j.erase("hidden_size"); });
    CHECK_THAT(load_error(), Catch::Contains("config.json: hidden_size: missing field"));
  }
  SECTION("wrong type") {
    rewrite_config(dir, [](json& j) { j["num_hidden_layers"] = "2"; });
    CHECK_THAT(load_error(), Catch::Contains("config.json: num_hidden_layers: expected integer, found string"));
    rewrite_config(dir, [](json& j) { j["num_hidden_layers"] = 2.5; });
    CHECK_THAT(load_error(), Catch::Contains("num_hidden_layers: expected integer, found number 2.5"));
    rewrite_config(dir, [](json& j) {
      j["num_hidden_layers"] = 2;
      j["tie_word_embeddings"] = 0;
    });
    CHECK_THAT(load_error(), Catch::Contains("tie_word_embeddings: expected boolean"));
  }
  SECTION("invalid values reach ModelConfig::validate") {
    rewrite_config(dir, [](json& j) { j["num_key_value_heads"] = 3; });
    CHECK_THAT(load_error(), Catch::Contains("config.json: num_key_value_heads"));
  }
  SECTION("a head_dim whose products wrap int64 is refused by its bound") {
    // 2^62 + 8: heads x head_dim wrapped round to the real q rows, passed the shape check and
    // crashed the model's construction (a bus error, no message).
    rewrite_config(dir, [](json& j) { j["head_dim"] = (int64_t{1} << 62) + 8; });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: head_dim: expected at most 65536, found 4611686018427387912"));
    CHECK(kind == ErrorKind::kBadInput);
    rewrite_config(dir, [](json& j) {
      j["head_dim"] = 4;
      j["intermediate_size"] = int64_t{1} << 40;
    });
    CHECK_THAT(load_error(), Catch::Contains("config.json: intermediate_size: expected at most 16777216"));
  }
  SECTION("without head_dim: heads that do not divide hidden_size are named, not a head_dim the file lacks") {
    rewrite_config(dir, [](json& j) {
      j.erase("head_dim");
      j["num_attention_heads"] = 7;
    });
    CHECK_THAT(load_error(), Catch::Contains("config.json: num_attention_heads: expected a num_attention_heads that "
                                             "divides hidden_size") &&
                                 Catch::Contains("found 7"));
  }
  SECTION("unknown architecture") {
    rewrite_config(dir, [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: architectures[0]") &&
                                      Catch::Contains("GPT2LMHeadModel") && Catch::Contains("LlamaForCausalLM"));
    CHECK(kind == ErrorKind::kUnsupported);
  }
  SECTION("model_type disagrees with the architecture") {
    rewrite_config(dir, [](json& j) { j["model_type"] = "qwen2"; });
    CHECK_THAT(load_error(), Catch::Contains("config.json: model_type"));
  }
  SECTION("rope scaling is unsupported") {
    rewrite_config(dir, [](json& j) {
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
    });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: rope_scaling") && Catch::Contains("llama3"));
    CHECK(kind == ErrorKind::kUnsupported);
  }
  SECTION("transformers v5's rope_parameters: its theta is read, scaling and per-layer-type sets refused") {
    rewrite_config(dir, [](json& j) {
      j.erase("rope_theta");
      j["rope_parameters"] = {{"rope_theta", 250000.0}, {"rope_type", "default"}};
    });
    CHECK(load_hf_dir(dir.str()).config.rope_theta == 250000.0);  // was 10000: the key was not read
    rewrite_config(dir, [](json& j) { j["rope_theta"] = 250000.0; });  // both, agreeing
    CHECK(load_hf_dir(dir.str()).config.rope_theta == 250000.0);
    rewrite_config(dir, [](json& j) { j["rope_theta"] = 100000.0; });  // both, disagreeing
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: rope_parameters.rope_theta") &&
                                      Catch::Contains("100000") && Catch::Contains("250000"));
    rewrite_config(dir, [](json& j) {
      j.erase("rope_theta");
      j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "llama3"}, {"factor", 32.0}};
    });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: rope_parameters") && Catch::Contains("llama3"));
    CHECK(kind == ErrorKind::kUnsupported);
    rewrite_config(dir, [](json& j) {
      j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
                              {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "default"}}}};
    });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: rope_parameters") &&
                                      Catch::Contains("per layer type") && Catch::Contains("full_attention"));
    CHECK(kind == ErrorKind::kUnsupported);
    rewrite_config(dir, [](json& j) { j["rope_parameters"] = 3; });
    CHECK_THAT(load_error(), Catch::Contains("config.json: rope_parameters: expected an object"));
  }
  SECTION("hidden_act other than silu") {
    rewrite_config(dir, [](json& j) { j["hidden_act"] = "gelu"; });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: hidden_act") && Catch::Contains("gelu"));
    CHECK(kind == ErrorKind::kUnsupported);
  }
  SECTION("Llama's attention_bias: transformers biases o_proj too") {
    // As transformers writes it: q/k/v/o biases. It was read as q/k/v biases, then refused for an
    // "unexpected tensor" o_proj.bias, naming neither the flag nor the reason (until 2026-12-06).
    rewrite_config(dir, [](json& j) { j["attention_bias"] = true; });
    CHECK_THAT(load_error(&kind), Catch::Contains("config.json: attention_bias: expected false, found true") &&
                                      Catch::Contains("o_proj"));
    CHECK(kind == ErrorKind::kUnsupported);
    // Nor is such a checkpoint written: transformers would read a missing o_proj.bias as zeros, and
    // its save_pretrained of that model would then be refused here.
    LoadedModel m;
    rewrite_config(dir, [](json& j) { j["attention_bias"] = false; });
    m = load_hf_dir(dir.str());
    m.config.attention_bias = true;
    for (int l = 0; l < m.config.num_hidden_layers; ++l)
      for (const char* p : {"q", "k", "v"}) {
        const std::string name = "model.layers." + std::to_string(l) + ".self_attn." + p + "_proj";
        m.weights[name + ".bias"] = make_tensor({m.weights.at(name + ".weight").shape[0]}, 7);
      }
    TempDir out;
    CHECK_THAT(error_of([&] { write_hf_dir(out.str(), m.config, m.weights); }, &kind),
               Catch::Contains("attention_bias: expected false, found true") && Catch::Contains("o_proj"));
    CHECK(kind == ErrorKind::kUnsupported);
    CHECK_FALSE(fs::exists(out / "config.json"));
  }
  SECTION("shape disagrees with config") {
    WeightMap bad = w;
    bad["model.layers.1.self_attn.k_proj.weight"] = make_tensor({16, 8}, 3);
    write_safetensors(dir / "model.safetensors", bad, SafetensorsDtype::kBF16);
    CHECK_THAT(load_error(), Catch::Contains("model.safetensors: model.layers.1.self_attn.k_proj.weight") &&
                                 Catch::Contains("expected [8, 16], found [16, 8]"));
  }
  SECTION("missing tensor") {
    WeightMap bad = w;
    bad.erase("model.norm.weight");
    write_safetensors(dir / "model.safetensors", bad, SafetensorsDtype::kBF16);
    CHECK_THAT(load_error(), Catch::Contains("model.safetensors: model.norm.weight: required tensor is missing"));
  }
  SECTION("unexpected tensor") {
    WeightMap bad = w;
    bad["model.layers.0.mlp.gate_proj.bias"] = make_tensor({24}, 3);
    write_safetensors(dir / "model.safetensors", bad, SafetensorsDtype::kBF16);
    CHECK_THAT(load_error(&kind), Catch::Contains("model.layers.0.mlp.gate_proj.bias"));
    CHECK(kind == ErrorKind::kUnsupported);
  }
  SECTION("unsupported dtype in the checkpoint") {
    // A sharded checkpoint whose model.norm.weight shard stores F64 (16 values = 128 bytes).
    WeightMap rest = w;
    rest.erase("model.norm.weight");
    write_safetensors(dir / "rest.safetensors", rest, SafetensorsDtype::kBF16);
    json header = {{"model.norm.weight", {{"dtype", "F64"}, {"shape", {16}}, {"data_offsets", {0, 128}}}}};
    write_bytes(dir / "norm.safetensors", raw_safetensors(header.dump(), std::string(128, '\0')));
    json index;
    for (const auto& entry : rest) index["weight_map"][entry.first] = "rest.safetensors";
    index["weight_map"]["model.norm.weight"] = "norm.safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    fs::remove(dir / "model.safetensors");
    CHECK_THAT(load_error(&kind), Catch::Contains("norm.safetensors: model.norm.weight.dtype") &&
                                      Catch::Contains("F64"));
    CHECK(kind == ErrorKind::kUnsupported);
  }
  SECTION("truncated weights") {
    const std::string bytes = read_bytes(dir / "model.safetensors");
    write_bytes(dir / "model.safetensors", bytes.substr(0, bytes.size() - 100));
    CHECK_THAT(load_error(), Catch::Contains("model.safetensors") && Catch::Contains("run past the byte buffer"));
  }
  SECTION("no weights at all") {
    fs::remove(dir / "model.safetensors");
    CHECK_THAT(load_error(&kind), Catch::Contains("model.safetensors.index.json"));
    CHECK(kind == ErrorKind::kIo);
  }
  SECTION("index naming a path outside the directory") {
    json index;
    for (const auto& entry : w) index["weight_map"][entry.first] = "model-00001-of-00001.safetensors";
    index["weight_map"]["model.norm.weight"] = "../model-00001-of-00001.safetensors";
    fs::rename(dir / "model.safetensors", dir / "model-00001-of-00001.safetensors");
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    CHECK_THAT(load_error(), Catch::Contains("model.safetensors.index.json: weight_map.model.norm.weight"));
  }
  SECTION("index naming a tensor its shard lacks") {
    json index;
    for (const auto& entry : w) index["weight_map"][entry.first] = "model-00001-of-00001.safetensors";
    index["weight_map"]["model.extra.weight"] = "model-00001-of-00001.safetensors";
    fs::rename(dir / "model.safetensors", dir / "model-00001-of-00001.safetensors");
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    CHECK_THAT(load_error(), Catch::Contains("model-00001-of-00001.safetensors: model.extra.weight"));
  }
  SECTION("missing tokenizer.json") {
    fs::remove(dir / "tokenizer.json");
    CHECK_THAT(load_error(&kind), Catch::Contains("tokenizer.json"));
    CHECK(kind == ErrorKind::kIo);
  }
  SECTION("eos id beyond the vocabulary") {
    write_bytes(dir / "generation_config.json", R"({"eos_token_id": [2, 5000]})");
    CHECK_THAT(load_error(), Catch::Contains("generation_config.json: eos_token_id") && Catch::Contains("5000"));
  }
  SECTION("malformed generation_config.json") {
    write_bytes(dir / "generation_config.json", R"({"eos_token_id": "two"})");
    CHECK_THAT(load_error(), Catch::Contains("generation_config.json: eos_token_id: expected integer, found string"));
  }
}
