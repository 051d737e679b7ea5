#include "models/loaders/synthetic.h"

#include <vector>

#include "framework/core/error.h"

namespace speclab {

namespace {

struct Shape {
  const char* name;
  int64_t vocab, hidden, inter, layers, heads, kv_heads, max_pos;
  double theta;
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"llama-7b", 32000, 4096, 11008, 32, 32, 32, 4096, 10000.0},
      {"llama-1b", 32000, 2048, 5632, 22, 32, 4, 4096, 10000.0},
      {"smollm2-135m", 49152, 576, 1536, 30, 9, 3, 8192, 100000.0},
      {"tiny", 512, 128, 256, 2, 4, 2, 1024, 10000.0},  // for tests: milliseconds on any device
  };
  return s;
}

// Bytes b <-> ids b + 3; 0 unknown, 1 BOS, 2 EOS, ids past 258 stand for nothing.
class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(int64_t vocab) : vocab_(vocab) {
    set_bos_id(1);
    set_eos_ids({2});
    texts_.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) texts_[i] = "<" + std::to_string(i) + ">";
  }
  TokenList encode(std::string_view text, bool add_bos) const override {
    TokenList ids;
    if (add_bos) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(static_cast<Token>(c) + 3);
    return ids;
  }
  std::string decode(const TokenList& tokens) const override {
    std::string out;
    for (Token t : tokens) out += token_bytes(t);
    return out;
  }
  std::string token_bytes(Token id) const override {
    return id >= 3 && id < 259 ? std::string(1, static_cast<char>(id - 3)) : std::string();
  }
  const std::string& token_text(Token id) const override { return texts_.at(static_cast<size_t>(id)); }
  int64_t vocab_size() const override { return vocab_; }

 private:
  int64_t vocab_;
  std::vector<std::string> texts_;
};

}  // namespace

bool is_synthetic_path(const std::string& path) { return path.compare(0, 7, "random:") == 0; }

std::string synthetic_shape_list() {
  std::string out;
  for (const Shape& s : shapes()) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

LoadedModel load_synthetic(const std::string& path) {
  const std::string name = is_synthetic_path(path) ? path.substr(7) : path;
  for (const Shape& s : shapes()) {
    if (name != s.name) continue;
    LoadedModel m;
    ModelConfig& c = m.config;
    c.architecture = "llama";
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.inter;
    c.num_hidden_layers = s.layers;
    c.num_attention_heads = s.heads;
    c.num_key_value_heads = s.kv_heads;
    c.head_dim = s.hidden / s.heads;
    c.max_position_embeddings = s.max_pos;
    c.rope_theta = s.theta;
    c.rms_norm_eps = 1e-5;
    c.validate(path);
    m.tokenizer = std::make_shared<ByteTokenizer>(s.vocab);
    m.source = path;
    m.format = "random";
    m.storage_types = "random";
    m.random_weights = true;
    m.origin.path = path;
    m.origin.format = "random";
    return m;
  }
  throw Error(ErrorKind::kConfig, "unknown synthetic model '" + path + "': expected random:<shape>, shape one of " +
                                      synthetic_shape_list(),
              "model", "path");
}

}  // namespace speclab
