#include "models/loaders/gguf_model.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "framework/core/error.h"
#include "models/loaders/dequant.h"
#include "models/loaders/gguf.h"
#include "models/tokenizers/byte_level_bpe.h"
#include "models/tokenizers/sentencepiece_bpe.h"

namespace speclab {

namespace {

// GGUF per-block tensor stem -> HF module path inside model.layers.N.
const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> names = {
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"attn_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"},
  };
  return names;
}

bool is_rope_permuted_arch(const std::string& arch) { return arch == "llama" || arch == "mistral"; }

// Rethrows a component's error (which may not know the file) with the file named.
[[noreturn]] void rethrow_with_file(const Error& e, const std::string& path) {
  if (!e.file().empty()) throw e;
  throw Error(e.kind(), e.message(), path, e.field());
}

ModelConfig read_config(const GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  if (c.architecture != "llama" && c.architecture != "mistral" && c.architecture != "qwen2")
    throw Error(ErrorKind::kUnsupported,
                "expected one of llama, mistral, qwen2; found '" + c.architecture + "'", f.path,
                "general.architecture");
  const std::string p = c.architecture + ".";
  c.num_hidden_layers = f.get_int(p + "block_count");
  // Each layer has at least 9 tensors: bound the count before anything is sized by it.
  const int64_t max_layers = static_cast<int64_t>(f.tensors.size() / 9);
  if (c.num_hidden_layers > max_layers)
    throw Error(ErrorKind::kBadInput,
                "expected at most " + std::to_string(max_layers) + " layers (the file has " +
                    std::to_string(f.tensors.size()) + " tensors), found " +
                    std::to_string(c.num_hidden_layers),
                f.path, p + "block_count");
  c.hidden_size = f.get_int(p + "embedding_length");
  c.intermediate_size = f.get_int(p + "feed_forward_length");
  c.num_attention_heads = f.get_int(p + "attention.head_count");
  c.num_key_value_heads = f.get_int(p + "attention.head_count_kv", c.num_attention_heads);
  const int64_t default_head_dim =
      c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  c.head_dim = f.get_int(p + "attention.key_length", default_head_dim);
  const int64_t value_length = f.get_int(p + "attention.value_length", c.head_dim);
  if (value_length != c.head_dim)
    throw Error(ErrorKind::kUnsupported,
                "value heads of size " + std::to_string(value_length) +
                    " differ from key heads of size " + std::to_string(c.head_dim),
                f.path, p + "attention.value_length");
  const int64_t rope_dims = f.get_int(p + "rope.dimension_count", c.head_dim);
  if (rope_dims != c.head_dim)
    throw Error(ErrorKind::kUnsupported,
                "partial rotary embeddings are not supported: expected " +
                    std::to_string(c.head_dim) + " (the head size), found " +
                    std::to_string(rope_dims),
                f.path, p + "rope.dimension_count");
  const std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling != "none")
    throw Error(ErrorKind::kUnsupported,
                "RoPE scaling is not supported: expected 'none', found '" + scaling + "'", f.path,
                p + "rope.scaling.type");
  c.max_position_embeddings = f.get_int(p + "context_length");
  c.rms_norm_eps = f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = f.get_float(p + "rope.freq_base", 10000.0);

  const GgufTensorInfo* embed = f.find_tensor("token_embd.weight");
  if (!embed)
    throw Error(ErrorKind::kBadInput, "required tensor is missing", f.path,
                "tensor token_embd.weight");
  if (embed->dims.size() != 2)
    throw Error(ErrorKind::kBadInput,
                "expected 2 dimensions, found " + std::to_string(embed->dims.size()), f.path,
                "tensor token_embd.weight");
  c.vocab_size = static_cast<int64_t>(embed->dims[1]);
  const int64_t declared_vocab = f.get_int(p + "vocab_size", c.vocab_size);
  if (declared_vocab != c.vocab_size)
    throw Error(ErrorKind::kBadInput,
                "expected " + std::to_string(c.vocab_size) +
                    " (the rows of token_embd.weight), found " + std::to_string(declared_vocab),
                f.path, p + "vocab_size");
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.validate(f.path);
  return c;
}

std::shared_ptr<Tokenizer> read_tokenizer(const GgufFile& f, const ModelConfig& config) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens == 0 || n_tokens > config.vocab_size)
    throw Error(ErrorKind::kBadInput,
                "expected 1 to " + std::to_string(config.vocab_size) +
                    " tokens (the rows of token_embd.weight), found " + std::to_string(n_tokens),
                f.path, "tokenizer.ggml.tokens");
  std::vector<int32_t> types;
  if (f.has("tokenizer.ggml.token_type")) types = f.get_int32_array("tokenizer.ggml.token_type");
  // Control tokens that end a text in every model that has them. A GGUF names one EOS, but the
  // model's HF generation_config may list more (Qwen2.5-Instruct: <|im_end|> and <|endoftext|>),
  // and llama.cpp ends generation on these too. This is HF's set, deliberately: llama.cpp's
  // end-of-generation set for Qwen2.5-Coder also holds <|fim_pad|>, <|repo_name|> and
  // <|file_sep|> (llama_vocab_is_eog), which HF's generation_config does not; a model that emits
  // one of them continues here and stops in llama.cpp (an audit could not make either emit them).
  TokenList end_markers;
  constexpr int32_t kControl = 3;  // GGUF token_type CONTROL
  for (size_t i = 0; i < types.size() && i < tokens.size(); ++i)
    if (types[i] == kControl)
      for (const char* m : {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>",
                            "<end_of_turn>"})
        if (tokens[i] == m) end_markers.push_back(static_cast<Token>(i));

  std::shared_ptr<Tokenizer> tok;
  try {
    if (model == "gpt2") {
      tok = std::make_shared<ByteLevelBpe>(
          std::move(tokens), f.get_string_array("tokenizer.ggml.merges"), std::move(types),
          f.get_string("tokenizer.ggml.pre", "default"));
    } else if (model == "llama") {
      tok = std::make_shared<SentencePieceBpe>(
          std::move(tokens), f.get_float_array("tokenizer.ggml.scores"), std::move(types),
          f.get_bool("tokenizer.ggml.add_space_prefix", true));
    } else {
      throw Error(ErrorKind::kUnsupported, "expected gpt2 or llama, found '" + model + "'", f.path,
                  "tokenizer.ggml.model");
    }
  } catch (const Error& e) {
    // The tokenizer names its inputs (scores, token_type[3], merges[7]); here they are the GGUF
    // keys they came from.
    const std::string base = e.field().substr(0, e.field().find('['));
    if (e.file().empty() && (base == "tokens" || base == "scores" || base == "token_type" || base == "merges"))
      throw Error(e.kind(), e.message(), f.path, "tokenizer.ggml." + e.field());
    rethrow_with_file(e, f.path);
  }

  auto token_id = [&](const std::string& key) -> Token {
    const int64_t id = f.get_int(key, -1);
    if (id != -1 && (id < 0 || id >= n_tokens))
      throw Error(ErrorKind::kBadInput,
                  "expected a token id in [0, " + std::to_string(n_tokens) + "), found " +
                      std::to_string(id),
                  f.path, key);
    return static_cast<Token>(id);
  };
  tok->set_bos_id(token_id("tokenizer.ggml.bos_token_id"));
  TokenList eos;
  auto add_eos = [&](Token id) {
    if (id >= 0 && std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  };
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    add_eos(token_id(key));
  for (Token id : end_markers) add_eos(id);
  tok->set_eos_ids(std::move(eos));
  return tok;
}

std::string describe_storage(const GgufFile& f) {
  std::map<std::string, int> counts;
  for (const GgufTensorInfo& t : f.tensors) ++counts[t.type_name()];
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s;
  for (const auto& [name, n] : sorted) {
    if (!s.empty()) s += ", ";
    s += name + " x " + std::to_string(n);
  }
  return s;
}

}  // namespace

std::string gguf_to_hf_name(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  const std::string prefix = "blk.";
  if (name.compare(0, prefix.size(), prefix) != 0) return {};
  size_t pos = prefix.size();
  const size_t digits_begin = pos;
  while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos]))) ++pos;
  const size_t n_digits = pos - digits_begin;
  if (n_digits == 0 || n_digits > 6 || pos >= name.size() || name[pos] != '.') return {};
  if (n_digits > 1 && name[digits_begin] == '0') return {};
  const std::string layer = name.substr(digits_begin, n_digits);
  const std::string rest = name.substr(pos + 1);  // "attn_q.weight"
  const size_t dot = rest.rfind('.');
  if (dot == std::string::npos) return {};
  const std::string stem = rest.substr(0, dot), suffix = rest.substr(dot + 1);
  if (suffix != "weight" && suffix != "bias") return {};
  const auto it = block_names().find(stem);
  if (it == block_names().end()) return {};
  return "model.layers." + layer + "." + it->second + "." + suffix;
}

LoadedModel load_gguf(const std::string& path, const GgufLoadOptions& options) {
  const GgufFile f = read_gguf(path);
  LoadedModel m;
  m.source = path;
  m.format = "gguf";
  m.config = read_config(f);
  const ModelConfig& c = m.config;
  m.tokenizer = read_tokenizer(f, c);
  // llama.cpp's default: SentencePiece vocabularies add BOS, byte-level BPE ones do not, unless
  // the file says otherwise (SmolLM2 says false).
  m.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", f.get_string("tokenizer.ggml.model", "gpt2") == "llama") &&
              m.tokenizer->bos_id() >= 0;
  if (f.has("tokenizer.chat_template") && !f.get_string("tokenizer.chat_template").empty()) {  // empty: none
    // A template we cannot render leaves the model usable without chat formatting (chat: off);
    // chat: auto or on refuses it (check_chat_renders).
    try {
      m.chat_template = ChatTemplate::from_jinja(f.get_string("tokenizer.chat_template"), path);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnsupported) throw;
      m.chat_template = ChatTemplate::unrenderable_one(e.what());
    }
  }
  m.storage_types = describe_storage(f);

  for (const GgufTensorInfo& info : f.tensors) {
    const std::string field = "tensor " + info.name;
    if (info.name == "rope_freqs.weight")
      throw Error(ErrorKind::kUnsupported,
                  "per-frequency RoPE factors (Llama 3.1 style RoPE scaling) are not supported",
                  path, field);
    const std::string hf = gguf_to_hf_name(info.name);
    if (hf.empty())
      throw Error(ErrorKind::kUnsupported,
                  "unexpected tensor: not part of a " + c.architecture + " decoder", path, field);
    SPECLAB_CHECK(!m.weights.count(hf), "two GGUF names map to " + hf);
    if (options.keep_packed && info.dims.size() == 2 && packable_row(info.type, static_cast<int64_t>(info.dims[0]))) {
      HostTensor t;
      t.shape = info.shape();
      t.storage_type = info.type;
      const uint8_t* src = f.tensor_data(info);
      t.packed.assign(src, src + info.n_bytes);
      m.weights.emplace(hf, std::move(t));
    } else {
      m.weights.emplace(hf, f.load_tensor(info));
    }
    m.file_bytes += info.n_bytes;
  }
  // Shapes and presence are checked before any reordering relies on them (this also rejects
  // layers beyond block_count and biases when the config has none).
  validate_weights(c, m.weights, path);
  const auto expected = expected_weight_shapes(c);
  if (m.weights.size() != expected.size()) {
    for (const auto& [name, t] : m.weights)
      if (!expected.count(name))
        throw Error(ErrorKind::kBadInput,
                    "tensor is not expected by the config (" + std::to_string(c.num_hidden_layers) +
                        " layers, attention_bias " + (c.attention_bias ? "true" : "false") + ")",
                    path, name);
  }

  if (is_rope_permuted_arch(c.architecture)) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
      unpermute_rope_rows(m.weights.at(p + "q_proj.weight"), c.num_attention_heads);
      unpermute_rope_rows(m.weights.at(p + "k_proj.weight"), c.num_key_value_heads);
      if (c.attention_bias) {
        unpermute_rope_rows(m.weights.at(p + "q_proj.bias"), c.num_attention_heads);
        unpermute_rope_rows(m.weights.at(p + "k_proj.bias"), c.num_key_value_heads);
      }
    }
  }
  return m;
}

}  // namespace speclab
