// Writes the seed corpora of the fuzz harnesses: small valid files made with SpecLab's own
// writers (GGUF, safetensors), tiny llama2.c checkpoints, and the small files of
// tests/fixtures/, configs/ and ../shared/models/stories260K (tok512.bin). Nothing large is
// copied: every seed is at most a few KB, so libFuzzer's mutations stay fast.
//   make_seeds <source dir> <shared dir> <corpus dir>   (writes <corpus dir>/<harness>/seed_*)
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "models/loaders/gguf.h"
#include "models/loaders/safetensors.h"

namespace {

std::string g_corpus;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_seed(const std::string& harness, const std::string& name, const std::string& bytes) {
  const std::string dir = g_corpus + "/" + harness;
  ::mkdir(g_corpus.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/seed_" + name, std::ios::binary) << bytes;
}

void copy_seed(const std::string& harness, const std::string& name, const std::string& path,
               const std::string& prefix = {}) {
  const std::string bytes = read_file(path);
  if (bytes.empty() || bytes.size() > (64u << 10)) return;  // missing or too large for a seed
  write_seed(harness, name, prefix + bytes);
}

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01f * float(int(i % 37) - 18);
  return v;
}

// A one-layer llama GGUF with a SentencePiece ("llama") or byte-level ("gpt2") vocabulary.
void gguf_model(const std::string& tmp, bool bpe) {
  using namespace speclab;
  const int64_t D = 32, F = 64, V = 16, H = 2, KV = 1, hd = D / H;
  GgufMetadata md;
  md.emplace_back("general.architecture", GgufValue::str("llama"));
  md.emplace_back("llama.block_count", GgufValue::u32(1));
  md.emplace_back("llama.embedding_length", GgufValue::u32(D));
  md.emplace_back("llama.feed_forward_length", GgufValue::u32(F));
  md.emplace_back("llama.attention.head_count", GgufValue::u32(H));
  md.emplace_back("llama.attention.head_count_kv", GgufValue::u32(KV));
  md.emplace_back("llama.context_length", GgufValue::u32(64));
  md.emplace_back("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  std::vector<std::string> tokens;
  if (bpe) {
    tokens = {"a", "b", "c", "Ġ", "ab", "Ġa", "abc", "<|im_start|>", "<|im_end|>", "d", "e", "f", "g", "h", "i", "j"};
    md.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
    md.emplace_back("tokenizer.ggml.pre", GgufValue::str("smollm"));
    md.emplace_back("tokenizer.ggml.merges", GgufValue::array(GgufArray::of_strings({"a b", "Ġ a", "ab c"})));
    std::vector<int32_t> types(tokens.size(), 1);
    types[7] = types[8] = 3;
    md.emplace_back("tokenizer.ggml.token_type", GgufValue::array(GgufArray::of_int32(types)));
    md.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(8));
    md.emplace_back("tokenizer.chat_template",
                    GgufValue::str("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                                   "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"));
  } else {
    tokens = {"<unk>", "<s>", "</s>", "<0x41>", "<0x0A>", "▁", "a", "b", "▁a", "ab", "▁ab", "c", "d", "e", "f", "g"};
    std::vector<float> scores(tokens.size());
    for (size_t i = 0; i < scores.size(); ++i) scores[i] = -float(i);
    std::vector<int32_t> types(tokens.size(), 1);
    types[0] = 2;
    types[1] = types[2] = 3;
    types[3] = types[4] = 6;
    md.emplace_back("tokenizer.ggml.model", GgufValue::str("llama"));
    md.emplace_back("tokenizer.ggml.scores", GgufValue::array(GgufArray::of_float32(scores)));
    md.emplace_back("tokenizer.ggml.token_type", GgufValue::array(GgufArray::of_int32(types)));
    md.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    md.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  }
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::array(GgufArray::of_strings(tokens)));

  struct T {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
  };
  const std::vector<T> ts = {
      {"token_embd.weight", {V, D}, GgmlType::Q8_0},  {"output_norm.weight", {D}, GgmlType::F32},
      {"blk.0.attn_norm.weight", {D}, GgmlType::F32}, {"blk.0.ffn_norm.weight", {D}, GgmlType::F32},
      {"blk.0.attn_q.weight", {H * hd, D}, GgmlType::Q4_0},
      {"blk.0.attn_k.weight", {KV * hd, D}, GgmlType::Q4_1},
      {"blk.0.attn_v.weight", {KV * hd, D}, GgmlType::F16},
      {"blk.0.attn_output.weight", {D, H * hd}, GgmlType::F32},
      {"blk.0.ffn_gate.weight", {F, D}, GgmlType::F32}, {"blk.0.ffn_up.weight", {F, D}, GgmlType::F16},
      {"blk.0.ffn_down.weight", {D, F}, GgmlType::Q8_0}};
  std::vector<std::vector<float>> data;
  std::vector<GgufTensorToWrite> out;
  for (const T& t : ts) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    data.push_back(ramp(n));
  }
  for (size_t i = 0; i < ts.size(); ++i) out.push_back({ts[i].name, ts[i].shape, ts[i].type, data[i].data()});
  write_gguf(tmp, md, out);
  write_seed("fuzz_gguf", bpe ? "llama_bpe.gguf" : "llama_spm.gguf", read_file(tmp));
  std::remove(tmp.c_str());
}

void safetensors_seeds(const std::string& tmp) {
  using namespace speclab;
  WeightMap w;
  w["a.weight"].shape = {2, 3};
  w["a.weight"].data = ramp(6);
  w["b"].shape = {};
  w["b"].data = {1.5f};
  w["c.bias"].shape = {4};
  w["c.bias"].data = ramp(4);
  int i = 0;
  for (SafetensorsDtype dt : {SafetensorsDtype::kF32, SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
    write_safetensors(tmp, w, dt, {{"format", "pt"}});
    write_seed("fuzz_safetensors", "written_" + std::to_string(i++) + ".safetensors", read_file(tmp));
  }
  std::remove(tmp.c_str());
}

// llama2.c checkpoint: 7 int32 header then the float32 weights (see models/loaders/llama2c.h).
std::string llama2c_checkpoint(int32_t D, int32_t F, int32_t L, int32_t H, int32_t KV, int32_t V, int32_t S) {
  std::string b;
  for (int32_t v : {D, F, L, H, KV, V, S}) b += u32(uint32_t(v));
  const int64_t hd = D / H, Va = V < 0 ? -V : V, kv = KV * hd;
  const int64_t floats = Va * D + L * D + L * D * D + 2 * L * kv * D + L * D * D + L * D + 3 * L * F * D + D +
                         S * hd + (V < 0 ? Va * D : 0);
  const std::vector<float> w = ramp(size_t(floats));
  b.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: make_seeds <source dir> <shared dir> <corpus dir>\n";
    return 2;
  }
  const std::string src = argv[1], shared = argv[2];
  g_corpus = argv[3];
  const std::string tmp = g_corpus + "/.tmp_seed";
  ::mkdir(g_corpus.c_str(), 0755);
  try {
    // GGUF: the test fixtures plus two tiny complete models.
    copy_seed("fuzz_gguf", "python_writer.gguf", src + "/tests/fixtures/gguf/python_writer.gguf");
    copy_seed("fuzz_gguf", "python_dequant.gguf", src + "/tests/fixtures/gguf/python_dequant.gguf");
    gguf_model(tmp, false);
    gguf_model(tmp, true);
    // safetensors
    for (const char* f : {"tiny", "tiny_bf16", "tiny_f16"})
      copy_seed("fuzz_safetensors", std::string(f) + ".safetensors",
                src + "/tests/fixtures/safetensors/" + f + ".safetensors");
    safetensors_seeds(tmp);
    // llama2.c checkpoints (vocab 64 = the harness's tokenizer; negative: unshared classifier)
    write_seed("fuzz_llama2c", "shared.bin", llama2c_checkpoint(8, 16, 1, 2, 2, 64, 4));
    write_seed("fuzz_llama2c", "unshared_gqa.bin", llama2c_checkpoint(8, 16, 2, 2, 1, -64, 4));
    const std::string ckpt_head = read_file(shared + "/models/stories260K/stories260K.bin").substr(0, 28);
    if (ckpt_head.size() == 28) write_seed("fuzz_llama2c", "stories260K_header.bin", ckpt_head);
    // tokenizer.bin: harness prefix (u32 vocab_size, u32 text length, text), then the file
    const std::string text = "Once upon a time, there was a \xe2\x96\x81 caf\xc3\xa9 \xf0\x9f\x98\x80\n";
    copy_seed("fuzz_tokenizer_bin", "tok512.bin", shared + "/models/stories260K/tok512.bin",
              u32(512) + u32(uint32_t(text.size())) + text);
    std::string small = u32(5);
    for (const char* p : {"<unk>", "<s>", "</s>", "<0x41>", "a", "b", "ab", " "}) {
      const float score = -1.0f;
      small += std::string(reinterpret_cast<const char*>(&score), 4) + u32(uint32_t(std::strlen(p))) + p;
    }
    write_seed("fuzz_tokenizer_bin", "small.bin", u32(8) + u32(6) + "abA ab" + small);
    // tokenizer.json: harness prefix (u32 text length, text), then the JSON
    copy_seed("fuzz_tokenizer_json", "tiny_bpe.json", src + "/tests/fixtures/tokenizer/tiny_bpe_tokenizer.json",
              u32(uint32_t(text.size())) + text);
    // YAML experiment configs
    for (const char* f : {"demo", "drafter_comparison", "equivalence", "equivalence_smollm2", "gamma_sweep",
                          "temperature_sweep", "tiny_stories"})
      copy_seed("fuzz_yaml_config", std::string(f) + ".yaml", src + "/configs/" + f + ".yaml");
  } catch (const std::exception& e) {
    std::cerr << "make_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
