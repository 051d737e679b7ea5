#include "models/loaders/llama2c.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/regular_file.h"
#include "models/tokenizers/sentencepiece_bpe.h"

namespace speclab {

namespace {

class Reader {
 public:
  Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw Error(ErrorKind::kIo, "cannot open file", path);
    require_regular_file(path);
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }
  uint64_t size() const { return size_; }
  uint64_t offset() { return static_cast<uint64_t>(in_.tellg()); }

  void read_floats(const std::string& field, std::vector<int64_t> shape, HostTensor& out) {
    out.shape = std::move(shape);
    const uint64_t n = static_cast<uint64_t>(out.numel());
    const uint64_t need = n * sizeof(float);
    if (offset() + need > size_)
      throw Error(ErrorKind::kBadInput,
                  "file is truncated: expected " + std::to_string(need) + " bytes at offset " +
                      std::to_string(offset()) + ", file has " + std::to_string(size_),
                  path_, field);
    out.data.resize(n);
    in_.read(reinterpret_cast<char*>(out.data.data()), static_cast<std::streamsize>(need));
  }
  void skip(const std::string& field, uint64_t bytes) {
    if (offset() + bytes > size_)
      throw Error(ErrorKind::kBadInput, "file is truncated while skipping " + std::to_string(bytes) + " bytes",
                  path_, field);
    in_.seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
  }
  void read_header(int32_t (&h)[7]) {
    if (size_ < sizeof(h))
      throw Error(ErrorKind::kBadInput,
                  "file is too small for a llama2.c header: expected at least 28 bytes, found " +
                      std::to_string(size_),
                  path_, "header");
    in_.read(reinterpret_cast<char*>(h), sizeof(h));
  }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

// Splits a stacked [L, rows, cols] tensor into per-layer canonical names.
void split_layers(const HostTensor& stacked, const std::string& suffix, WeightMap& out) {
  const int64_t layers = stacked.shape[0];
  const int64_t per = stacked.numel() / layers;
  std::vector<int64_t> shape(stacked.shape.begin() + 1, stacked.shape.end());
  for (int64_t l = 0; l < layers; ++l) {
    HostTensor t;
    t.shape = shape;
    t.data.assign(stacked.data.begin() + l * per, stacked.data.begin() + (l + 1) * per);
    out["model.layers." + std::to_string(l) + "." + suffix] = std::move(t);
  }
}

}  // namespace

LoadedModel load_llama2c(const std::string& path, const std::string& tokenizer_path) {
  Reader r(path);
  int32_t h[7];
  r.read_header(h);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    const int64_t v = (i == 5) ? std::abs(static_cast<int64_t>(h[i])) : h[i];
    if (v <= 0 || v > (1 << 24))
      throw Error(ErrorKind::kBadInput,
                  "expected a positive header value below 2^24, found " + std::to_string(h[i]) +
                      " (is this a llama2.c checkpoint?)",
                  path, std::string("header.") + names[i]);
  }
  LoadedModel m;
  ModelConfig& c = m.config;
  c.architecture = "llama";
  c.hidden_size = h[0];
  c.intermediate_size = h[1];
  c.num_hidden_layers = h[2];
  c.num_attention_heads = h[3];
  c.num_key_value_heads = h[4];
  const bool shared = h[5] > 0;
  c.vocab_size = std::abs(h[5]);
  c.max_position_embeddings = h[6];
  c.tie_word_embeddings = shared;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  if (c.hidden_size % c.num_attention_heads != 0)
    throw Error(ErrorKind::kBadInput, "dim " + std::to_string(c.hidden_size) +
                                          " is not divisible by n_heads " + std::to_string(c.num_attention_heads),
                path, "header.n_heads");
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.validate(path);

  // Exact size check up front: a truncated or padded file is reported before reading.
  const int64_t L = c.num_hidden_layers, D = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  // Every header value is below 2^24, so a product of three can reach 2^72: the sum is formed
  // in 128 bits and compared with the file size before anything is narrowed or allocated.
  using u128 = unsigned __int128;
  const u128 floats128 = u128(V) * D + u128(L) * D + u128(L) * D * q_dim + u128(2) * L * kv_dim * D +
                         u128(L) * q_dim * D + u128(L) * D + u128(3) * L * F * D + u128(D) +
                         u128(c.max_position_embeddings) * c.head_dim + (shared ? 0 : u128(V) * D);
  const u128 expected128 = 28 + floats128 * 4;
  if (expected128 > std::numeric_limits<uint64_t>::max())
    throw Error(ErrorKind::kBadInput,
                "file size disagrees with the header: the header describes more than 2^64 bytes "
                "of weights, the file has " + std::to_string(r.size()) + " bytes",
                path, "size");
  const uint64_t floats = static_cast<uint64_t>(floats128);
  const uint64_t expected = static_cast<uint64_t>(expected128);
  if (r.size() != expected)
    throw Error(ErrorKind::kBadInput,
                "file size disagrees with the header: expected " + std::to_string(expected) +
                    " bytes, found " + std::to_string(r.size()) + (r.size() < expected ? " (truncated?)" : ""),
                path, "size");

  HostTensor t;
  r.read_floats("token_embedding_table", {V, D}, m.weights["model.embed_tokens.weight"]);
  r.read_floats("rms_att_weight", {L, D}, t);
  split_layers(t, "input_layernorm.weight", m.weights);
  r.read_floats("wq", {L, q_dim, D}, t);
  split_layers(t, "self_attn.q_proj.weight", m.weights);
  r.read_floats("wk", {L, kv_dim, D}, t);
  split_layers(t, "self_attn.k_proj.weight", m.weights);
  r.read_floats("wv", {L, kv_dim, D}, t);
  split_layers(t, "self_attn.v_proj.weight", m.weights);
  r.read_floats("wo", {L, D, q_dim}, t);
  split_layers(t, "self_attn.o_proj.weight", m.weights);
  r.read_floats("rms_ffn_weight", {L, D}, t);
  split_layers(t, "post_attention_layernorm.weight", m.weights);
  r.read_floats("w1", {L, F, D}, t);
  split_layers(t, "mlp.gate_proj.weight", m.weights);
  r.read_floats("w2", {L, D, F}, t);
  split_layers(t, "mlp.down_proj.weight", m.weights);
  r.read_floats("w3", {L, F, D}, t);
  split_layers(t, "mlp.up_proj.weight", m.weights);
  r.read_floats("rms_final_weight", {D}, m.weights["model.norm.weight"]);
  r.skip("freq_cis", static_cast<uint64_t>(c.max_position_embeddings * c.head_dim) * 4);
  if (!shared) r.read_floats("wcls", {V, D}, m.weights["lm_head.weight"]);

  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    unpermute_rope_rows(m.weights[p + "q_proj.weight"], c.num_attention_heads);
    unpermute_rope_rows(m.weights[p + "k_proj.weight"], c.num_key_value_heads);
  }
  validate_weights(c, m.weights, path);

  auto tok = SentencePieceBpe::from_llama2c(tokenizer_path, c.vocab_size);
  tok->set_bos_id(1);
  tok->set_eos_ids({1});
  m.tokenizer = std::move(tok);
  m.source = path;
  m.format = "llama2c";
  m.storage_types = "F32 x " + std::to_string(m.weights.size());
  m.file_bytes = floats * 4;
  return m;
}

}  // namespace speclab
