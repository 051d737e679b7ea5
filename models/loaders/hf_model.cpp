#include "models/loaders/hf_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/core/error.h"
#include "models/tokenizers/byte_level_bpe.h"

namespace speclab {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxJsonFileBytes = 64ull << 20;  // config/index/tokenizer_config files

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot open (does it exist?)", path);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error(ErrorKind::kIo, "cannot read", path);
  if (static_cast<uint64_t>(size) > kMaxJsonFileBytes)
    throw Error(ErrorKind::kBadInput,
                "file of " + std::to_string(size) + " bytes exceeds the limit of " +
                    std::to_string(kMaxJsonFileBytes) + " bytes",
                path);
  in.seekg(0, std::ios::beg);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(&text[0], size);
  if (in.gcount() != size) throw Error(ErrorKind::kIo, "short read", path);
  return text;
}

json read_json_object(const std::string& path) {
  const std::string text = read_text_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kBadInput, std::string("not valid JSON: ") + e.what(), path);
  }
  if (!j.is_object())
    throw Error(ErrorKind::kBadInput, std::string("expected a JSON object, found ") + j.type_name(), path);
  return j;
}

std::string describe(const json& v) {
  if (v.is_number()) return "number " + v.dump();
  return v.type_name();
}

// Typed access to the fields of one JSON object, with errors naming the file and key.
class Fields {
 public:
  Fields(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  // The value of `key`, or nullptr when absent or null.
  const json* get(const std::string& key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& require(const std::string& key) const {
    const json* v = get(key);
    if (!v) throw Error(ErrorKind::kBadInput, "missing field", file_, key);
    return *v;
  }

  int64_t to_int(const json& v, const std::string& key) const {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        throw Error(ErrorKind::kBadInput, "integer " + v.dump() + " is out of range", file_, key);
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    throw Error(ErrorKind::kBadInput, "expected integer, found " + describe(v), file_, key);
  }
  int64_t integer(const std::string& key) const { return to_int(require(key), key); }
  int64_t integer_or(const std::string& key, int64_t fallback) const {
    const json* v = get(key);
    return v ? to_int(*v, key) : fallback;
  }
  double number_or(const std::string& key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) throw Error(ErrorKind::kBadInput, "expected number, found " + describe(*v), file_, key);
    return v->get<double>();
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean())
      throw Error(ErrorKind::kBadInput, "expected boolean, found " + describe(*v), file_, key);
    return v->get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_string()) throw Error(ErrorKind::kBadInput, "expected string, found " + describe(*v), file_, key);
    return v->get<std::string>();
  }
  // An int or a list of ints (HF eos_token_id); empty when absent/null.
  TokenList token_ids(const std::string& key) const {
    const json* v = get(key);
    TokenList out;
    if (!v) return out;
    auto one = [&](const json& x, const std::string& k) {
      const int64_t id = to_int(x, k);
      if (id < 0 || id > INT32_MAX)
        throw Error(ErrorKind::kBadInput, "expected a token id >= 0, found " + std::to_string(id), file_, k);
      out.push_back(static_cast<Token>(id));
    };
    if (v->is_array()) {
      for (size_t i = 0; i < v->size(); ++i) one((*v)[i], key + "[" + std::to_string(i) + "]");
    } else {
      one(*v, key);
    }
    return out;
  }

 private:
  const json& j_;
  std::string file_;
};

struct ArchInfo {
  const char* name;        // architectures[0]
  const char* model_type;  // config.json model_type
  const char* short_name;  // ModelConfig::architecture
};
constexpr ArchInfo kArchs[] = {
    {"LlamaForCausalLM", "llama", "llama"},
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"MistralForCausalLM", "mistral", "mistral"},
};

const ArchInfo* find_arch(const std::string& name) {
  for (const auto& a : kArchs)
    if (name == a.name) return &a;
  return nullptr;
}

std::string arch_list() {
  std::string s;
  for (const auto& a : kArchs) s += std::string(s.empty() ? "" : ", ") + a.name;
  return s;
}

// transformers v5 writes RoPE's settings as one object, `rope_parameters` ({"rope_theta": ...,
// "rope_type": "default", ...}), where v4 wrote a top-level `rope_theta` and `rope_scaling`. Its
// theta, or the top-level one (default 10000, transformers' default); both present must agree.
// A type other than default (scaling), or per-layer-type parameters, is Error(kUnsupported).
double read_rope_theta(const Fields& f) {
  const double top = f.number_or("rope_theta", 10000.0);
  const json* rp = f.get("rope_parameters");
  if (!rp) return top;
  if (!rp->is_object())
    throw Error(ErrorKind::kBadInput, "expected an object, found " + describe(*rp), f.file(), "rope_parameters");
  for (const char* k : {"rope_type", "type"}) {
    const auto it = rp->find(k);
    if (it == rp->end()) continue;
    const std::string type = it->is_string() ? it->get<std::string>() : it->dump();
    if (type != "default")
      throw Error(ErrorKind::kUnsupported,
                  "RoPE scaling is not supported (expected rope_type 'default', found '" + type + "': " + rp->dump() +
                      ")",
                  f.file(), "rope_parameters");
  }
  for (const auto& item : rp->items())
    if (item.value().is_object())
      throw Error(ErrorKind::kUnsupported,
                  "RoPE parameters per layer type are not supported (expected one set, found '" + item.key() +
                      "': " + item.value().dump() + ")",
                  f.file(), "rope_parameters");
  const auto it = rp->find("rope_theta");
  if (it == rp->end()) return top;
  if (!it->is_number())
    throw Error(ErrorKind::kBadInput, "expected number, found " + describe(*it), f.file(), "rope_parameters.rope_theta");
  const double theta = it->get<double>();
  if (f.get("rope_theta") && theta != top)
    throw Error(ErrorKind::kBadInput,
                "expected the top-level rope_theta's value, " + json(top).dump() + ", found " + json(theta).dump(),
                f.file(), "rope_parameters.rope_theta");
  return theta;
}

// Why a LlamaForCausalLM with attention_bias: true is refused, reading and writing.
const char* const kLlamaAttentionBias =
    "expected false, found true: LlamaForCausalLM's attention_bias puts a bias on o_proj as well as on "
    "q/k/v, and SpecLab's attention has q/k/v biases only (Qwen2ForCausalLM's)";

void check_rope_scaling(const Fields& f) {
  const json* rs = f.get("rope_scaling");
  if (!rs) return;
  std::string type = "?";
  if (rs->is_object()) {
    for (const char* k : {"rope_type", "type"}) {
      auto it = rs->find(k);
      if (it != rs->end() && it->is_string()) {
        type = it->get<std::string>();
        break;
      }
    }
    if (type == "default") return;  // plain RoPE spelled out
  }
  throw Error(ErrorKind::kUnsupported,
              "RoPE scaling is not supported (expected null, found type '" + type + "': " + rs->dump() + ")",
              f.file(), "rope_scaling");
}

// Takes bos/eos from `f` when it has them.
void read_special_ids(const Fields& f, HfConfig& out) {
  if (f.get("bos_token_id")) {
    const TokenList bos = f.token_ids("bos_token_id");
    if (bos.size() != 1)
      throw Error(ErrorKind::kBadInput, "expected one token id, found " + std::to_string(bos.size()), f.file(),
                  "bos_token_id");
    out.bos_token_id = bos[0];
  }
  if (f.get("eos_token_id")) out.eos_token_ids = f.token_ids("eos_token_id");
}

void check_special_ids(const HfConfig& c, const std::string& source) {
  const int64_t v = c.config.vocab_size;
  if (c.bos_token_id >= v)
    throw Error(ErrorKind::kBadInput,
                "expected a token id below vocab_size " + std::to_string(v) + ", found " +
                    std::to_string(c.bos_token_id),
                source, "bos_token_id");
  for (Token id : c.eos_token_ids)
    if (id >= v)
      throw Error(ErrorKind::kBadInput,
                  "expected token ids below vocab_size " + std::to_string(v) + ", found " + std::to_string(id),
                  source, "eos_token_id");
}

// One tensor of the checkpoint and the file it lives in.
struct TensorLocation {
  std::string name;
  size_t file_index;
};

// The safetensors files of `dir` and which tensor lives where.
struct WeightFiles {
  std::vector<SafetensorsFile> files;
  std::vector<TensorLocation> tensors;
  std::string listing;  // the file that lists the tensors (model.safetensors or the index)
};

WeightFiles open_weight_files(const std::string& dir) {
  WeightFiles w;
  const std::string single = join(dir, "model.safetensors");
  const std::string index_path = join(dir, "model.safetensors.index.json");
  if (file_exists(single)) {
    w.listing = single;
    w.files.push_back(SafetensorsFile::open(single));
    for (const auto& entry : w.files[0].tensors()) w.tensors.push_back({entry.first, 0});
    return w;
  }
  if (!file_exists(index_path))
    throw Error(ErrorKind::kIo,
                "no weights: expected model.safetensors or model.safetensors.index.json in the directory "
                "(PyTorch .bin checkpoints are not supported)",
                dir);
  w.listing = index_path;
  const json index = read_json_object(index_path);
  auto wm = index.find("weight_map");
  if (wm == index.end()) throw Error(ErrorKind::kBadInput, "missing field", index_path, "weight_map");
  if (!wm->is_object())
    throw Error(ErrorKind::kBadInput, std::string("expected an object, found ") + wm->type_name(), index_path,
                "weight_map");
  std::map<std::string, size_t> file_ids;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const std::string field = "weight_map." + it.key();
    if (!it->is_string())
      throw Error(ErrorKind::kBadInput, std::string("expected a shard file name, found ") + it->type_name(),
                  index_path, field);
    const std::string shard = it->get<std::string>();
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\\') != std::string::npos)
      throw Error(ErrorKind::kBadInput, "expected a file name inside the directory, found '" + shard + "'",
                  index_path, field);
    auto found = file_ids.find(shard);
    if (found == file_ids.end()) {
      const std::string shard_path = join(dir, shard);
      if (!file_exists(shard_path))
        throw Error(ErrorKind::kIo, "shard file '" + shard + "' named in " + index_path + " does not exist",
                    shard_path, it.key());
      found = file_ids.emplace(shard, w.files.size()).first;
      w.files.push_back(SafetensorsFile::open(shard_path));
    }
    if (!w.files[found->second].contains(it.key()))
      throw Error(ErrorKind::kBadInput, "tensor listed in " + index_path + " is not in the shard",
                  w.files[found->second].path(), it.key());
    w.tensors.push_back({it.key(), found->second});
  }
  return w;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string storage_summary(const std::map<std::string, int>& counts) {
  std::vector<std::pair<std::string, int>> v(counts.begin(), counts.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s;
  for (const auto& [dtype, n] : v) s += (s.empty() ? "" : ", ") + dtype + " x " + std::to_string(n);
  return s;
}

ChatTemplate read_chat_template(const std::string& dir) {
  const std::string jinja_path = join(dir, "chat_template.jinja");
  // An empty template is none (as before templates SpecLab cannot render were refused).
  auto from = [](const std::string& jinja, const std::string& source) {
    return jinja.empty() ? ChatTemplate() : ChatTemplate::from_jinja(jinja, source);
  };
  if (file_exists(jinja_path)) return from(read_text_file(jinja_path), jinja_path);
  const std::string tc_path = join(dir, "tokenizer_config.json");
  if (!file_exists(tc_path)) return ChatTemplate();
  const json tc = read_json_object(tc_path);
  auto it = tc.find("chat_template");
  if (it == tc.end() || it->is_null()) return ChatTemplate();
  if (it->is_string()) return from(it->get<std::string>(), tc_path);
  if (it->is_array()) {
    // Several named templates: [{"name": "default", "template": "..."}, ...].
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", json()) == "default") {
        auto t = entry.find("template");
        if (t != entry.end() && t->is_string())
          return from(t->get<std::string>(), tc_path);
      }
    }
    throw Error(ErrorKind::kUnsupported, "expected a template named 'default' in the list", tc_path,
                "chat_template");
  }
  throw Error(ErrorKind::kBadInput, std::string("expected a string, found ") + it->type_name(), tc_path,
              "chat_template");
}

}  // namespace

// ---- config ----------------------------------------------------------------------------------

HfConfig read_hf_config(const std::string& config_path, const std::string& generation_config_path) {
  const json j = read_json_object(config_path);
  const Fields f(j, config_path);
  HfConfig out;

  const json& archs = f.require("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    throw Error(ErrorKind::kBadInput, "expected a non-empty list of strings, found " + archs.dump(), config_path,
                "architectures");
  out.architecture = archs[0].get<std::string>();
  const ArchInfo* arch = find_arch(out.architecture);
  if (!arch)
    throw Error(ErrorKind::kUnsupported,
                "expected one of " + arch_list() + ", found '" + out.architecture + "'", config_path,
                "architectures[0]");
  const std::string model_type = f.string_or("model_type", arch->model_type);
  if (model_type != arch->model_type)
    throw Error(ErrorKind::kBadInput,
                std::string("expected '") + arch->model_type + "' for " + arch->name + ", found '" +
                    model_type + "'",
                config_path, "model_type");

  ModelConfig& c = out.config;
  c.architecture = arch->short_name;
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  c.num_key_value_heads = f.integer_or("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads <= 0)
    throw Error(ErrorKind::kBadInput,
                "expected a positive integer, found " + std::to_string(c.num_attention_heads), config_path,
                "num_attention_heads");
  if (f.get("head_dim")) {
    c.head_dim = f.integer("head_dim");
  } else {
    // transformers' default: hidden_size / num_attention_heads. A head count that does not divide
    // the hidden size was blamed on a head_dim the file does not have.
    if (c.hidden_size <= 0 || c.hidden_size % c.num_attention_heads != 0 ||
        (c.hidden_size / c.num_attention_heads) % 2 != 0)
      throw Error(ErrorKind::kBadInput,
                  "expected a num_attention_heads that divides hidden_size (" + std::to_string(c.hidden_size) +
                      ") into heads of an even size (config.json gives no head_dim, so head_dim = hidden_size / "
                      "num_attention_heads), found " + std::to_string(c.num_attention_heads),
                  config_path, "num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings = f.integer("max_position_embeddings");
  c.rope_theta = read_rope_theta(f);
  c.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  const std::string arch_name = arch->name;
  if (arch_name == "Qwen2ForCausalLM") {
    c.attention_bias = true;  // Qwen2's q/k/v projections always carry a bias
  } else if (arch_name == "MistralForCausalLM") {
    c.attention_bias = false;
  } else {
    c.attention_bias = f.boolean_or("attention_bias", false);
    // transformers' LlamaAttention gives o_proj a bias too under this flag. Until 2026-12-06 such a
    // checkpoint was read as q/k/v biases only, then refused for an "unexpected tensor" o_proj.bias.
    if (c.attention_bias) throw Error(ErrorKind::kUnsupported, kLlamaAttentionBias, f.file(), "attention_bias");
  }
  out.torch_dtype = f.string_or("torch_dtype", "");

  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu")
    throw Error(ErrorKind::kUnsupported, "expected 'silu', found '" + act + "'", config_path, "hidden_act");
  if (f.boolean_or("mlp_bias", false))
    throw Error(ErrorKind::kUnsupported, "MLP biases are not supported (expected false, found true)",
                config_path, "mlp_bias");
  check_rope_scaling(f);
  // Sliding-window attention equals full attention while the context fits in the window. A Qwen2
  // slides in its layers from max_window_layers on (transformers' Qwen2 layer_types; default 28):
  // none where that is past the last layer, whose context was cut to the window all the same.
  const bool sliding =
      arch_name == "MistralForCausalLM" ||
      (arch_name == "Qwen2ForCausalLM" && f.boolean_or("use_sliding_window", false) &&
       f.integer_or("max_window_layers", 28) < c.num_hidden_layers);
  if (sliding) {
    const int64_t window = f.integer_or("sliding_window", 0);
    if (window < 0)
      throw Error(ErrorKind::kBadInput, "expected a positive window, found " + std::to_string(window),
                  config_path, "sliding_window");
    if (window > 0 && window < c.max_position_embeddings) c.max_position_embeddings = window;
  }

  read_special_ids(f, out);
  c.validate(config_path);
  check_special_ids(out, config_path);

  if (!generation_config_path.empty() && file_exists(generation_config_path)) {
    const json g = read_json_object(generation_config_path);
    read_special_ids(Fields(g, generation_config_path), out);
    check_special_ids(out, generation_config_path);
  }
  return out;
}

// ---- loading ---------------------------------------------------------------------------------

LoadedModel load_hf_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    // A file of the checkpoint given for the checkpoint: name its directory.
    const size_t slash = dir.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
    const bool in_checkpoint = ::stat(dir.c_str(), &st) == 0 && file_exists(join(parent, "config.json"));
    throw Error(ErrorKind::kIo,
                in_checkpoint ? "expected an HF checkpoint directory, found one of its files; pass the directory (" +
                                    parent + ")"
                              : std::string("expected an HF checkpoint directory, found none"),
                dir);
  }
  const std::string config_path = join(dir, "config.json");
  if (!file_exists(config_path))
    throw Error(ErrorKind::kIo, "missing config.json (expected an HF checkpoint directory)", config_path);
  const HfConfig hf = read_hf_config(config_path, join(dir, "generation_config.json"));

  LoadedModel m;
  m.config = hf.config;
  m.source = dir;
  m.format = "safetensors";

  // Check names and shapes from the headers before reading any data.
  const WeightFiles files = open_weight_files(dir);
  const auto expected = expected_weight_shapes(m.config);
  std::vector<const TensorLocation*> to_read;
  std::set<std::string> seen;
  for (const TensorLocation& loc : files.tensors) {
    const SafetensorsFile& file = files.files[loc.file_index];
    if (ends_with(loc.name, ".rotary_emb.inv_freq")) continue;  // a RoPE buffer, recomputed
    if (loc.name == "lm_head.weight" && m.config.tie_word_embeddings) continue;
    auto it = expected.find(loc.name);
    if (it == expected.end())
      throw Error(ErrorKind::kUnsupported,
                  "unexpected tensor: not part of a " + hf.architecture + " checkpoint with this config.json",
                  file.path(), loc.name);
    if (!seen.insert(loc.name).second)
      throw Error(ErrorKind::kBadInput, "tensor appears in more than one file", file.path(), loc.name);
    const SafetensorsTensorInfo& info = file.info(loc.name);
    if (info.shape != it->second)
      throw Error(ErrorKind::kBadInput,
                  "tensor shape disagrees with config.json: expected " + shape_to_string(it->second) +
                      ", found " + shape_to_string(info.shape),
                  file.path(), loc.name);
    to_read.push_back(&loc);
  }
  for (const auto& [name, shape] : expected)
    if (!seen.count(name))
      throw Error(ErrorKind::kBadInput,
                  "required tensor is missing (expected shape " + shape_to_string(shape) + ")", files.listing,
                  name);

  // The tokenizer before the tensor data, so that a bad directory fails fast.
  const std::string tok_path = join(dir, "tokenizer.json");
  if (!file_exists(tok_path))
    throw Error(ErrorKind::kIo, "missing tokenizer.json (expected a byte-level BPE tokenizer.json)", tok_path);
  std::unique_ptr<ByteLevelBpe> bpe = ByteLevelBpe::from_tokenizer_json(tok_path);
  if (!bpe) throw Error(ErrorKind::kInternal, "tokenizer loader returned null", tok_path);
  if (bpe->vocab_size() > m.config.vocab_size)
    throw Error(ErrorKind::kBadInput,
                "tokenizer has " + std::to_string(bpe->vocab_size()) + " tokens, expected at most vocab_size " +
                    std::to_string(m.config.vocab_size) + " of config.json",
                tok_path, "model.vocab");
  // A vocab_size rounded up past the tokenizer (Qwen2.5: 151936 over 151665): the model may emit
  // the ids between, which decode to nothing (until 2026-12-06 the run stopped on "expected a
  // token id in [0, 151665)", naming no file).
  bpe->pad_vocab(m.config.vocab_size);
  std::shared_ptr<Tokenizer> tok = std::move(bpe);
  // HF adds BOS only when tokenizer.json's post_processor says so (Llama 3 does; SmolLM2 and
  // Qwen2 do not): that is the BOS from_tokenizer_json() found.
  m.add_bos = tok->bos_id() >= 0;
  // That BOS is the one the prompt starts with, as HF's encode() adds it: config.json's (or
  // generation_config.json's) bos_token_id replaced it where the two disagree. Without one, the
  // config's id stands for the BOS a chat template may name.
  if (hf.bos_token_id >= 0 && !m.add_bos) tok->set_bos_id(hf.bos_token_id);
  if (!hf.eos_token_ids.empty()) tok->set_eos_ids(hf.eos_token_ids);
  m.tokenizer = std::move(tok);
  try {
    m.chat_template = read_chat_template(dir);
  } catch (const Error& e) {
    // A template we cannot render leaves the model usable without chat formatting (chat: off);
    // chat: auto or on refuses it (check_chat_renders).
    if (e.kind() != ErrorKind::kUnsupported) throw;
    m.chat_template = ChatTemplate::unrenderable_one(e.what());
  }

  std::map<std::string, int> dtype_counts;
  for (const TensorLocation* loc : to_read) {
    const SafetensorsFile& file = files.files[loc->file_index];
    const SafetensorsTensorInfo& info = file.info(loc->name);
    m.weights.emplace(loc->name, file.read(loc->name));
    ++dtype_counts[info.dtype];
    m.file_bytes += info.end - info.begin;
  }
  m.storage_types = storage_summary(dtype_counts);
  validate_weights(m.config, m.weights, dir);

  return m;
}

// ---- writing ---------------------------------------------------------------------------------

namespace {

const char* torch_dtype_name(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::kF32: return "float32";
    case SafetensorsDtype::kF16: return "float16";
    case SafetensorsDtype::kBF16: return "bfloat16";
  }
  return "float32";
}

json ids_json(const TokenList& ids) {
  if (ids.empty()) return nullptr;
  if (ids.size() == 1) return ids[0];
  return ids;
}

// config.json as transformers writes it for `arch` (keys sorted by nlohmann::json's map).
json hf_config_json(const ModelConfig& c, const HfWriteOptions& o, const std::string& dir) {
  const std::string& arch = o.architecture;
  json j;
  j["architectures"] = json::array({arch});
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = o.bos_token_id >= 0 ? json(o.bos_token_id) : json(nullptr);
  j["eos_token_id"] = ids_json(o.eos_token_ids);
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = torch_dtype_name(o.dtype);
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  if (arch == "LlamaForCausalLM") {
    if (c.attention_bias) throw Error(ErrorKind::kUnsupported, kLlamaAttentionBias, dir, "attention_bias");
    j["model_type"] = "llama";
    j["attention_bias"] = c.attention_bias;
    j["head_dim"] = c.head_dim;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    j["rope_scaling"] = nullptr;
  } else if (arch == "Qwen2ForCausalLM") {
    if (!c.attention_bias)
      throw Error(ErrorKind::kUnsupported, "Qwen2 checkpoints always have q/k/v biases (expected true, found false)",
                  dir, "attention_bias");
    if (c.head_dim * c.num_attention_heads != c.hidden_size)
      throw Error(ErrorKind::kUnsupported,
                  "Qwen2 config.json has no head_dim: expected hidden_size / num_attention_heads = " +
                      std::to_string(c.hidden_size / c.num_attention_heads) + ", found " +
                      std::to_string(c.head_dim),
                  dir, "head_dim");
    j["model_type"] = "qwen2";
    j["max_window_layers"] = c.num_hidden_layers;
    j["rope_scaling"] = nullptr;
    j["sliding_window"] = c.max_position_embeddings;
    j["use_sliding_window"] = false;
  } else if (arch == "MistralForCausalLM") {
    if (c.attention_bias)
      throw Error(ErrorKind::kUnsupported, "Mistral has no attention biases (expected false, found true)", dir,
                  "attention_bias");
    j["model_type"] = "mistral";
    j["head_dim"] = c.head_dim;
    j["sliding_window"] = nullptr;
  } else {
    throw Error(ErrorKind::kUnsupported, "expected one of " + arch_list() + ", found '" + arch + "'", dir,
                "architecture");
  }
  return j;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorKind::kIo, "cannot open for writing", path);
  out << text;
  out.flush();
  if (!out) throw Error(ErrorKind::kIo, "write failed", path);
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

void write_hf_dir(const std::string& dir, const ModelConfig& config, const WeightMap& weights,
                  const HfWriteOptions& options) {
  config.validate(dir);
  const json cfg = hf_config_json(config, options, dir);
  const auto expected = expected_weight_shapes(config);
  WeightMap out;  // the tensors to write, in name order
  for (const auto& [name, t] : weights) {
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    if (!expected.count(name))
      throw Error(ErrorKind::kBadInput,
                  "unexpected tensor: not part of a " + options.architecture + " checkpoint with this config", dir,
                  name);
    out.emplace(name, t);
  }
  validate_weights(config, out, dir);

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::kIo, "cannot create directory: " + ec.message(), dir);

  write_text_file(join(dir, "config.json"), cfg.dump(2) + "\n");
  json gen;
  gen["_from_model_config"] = true;
  if (options.bos_token_id >= 0) gen["bos_token_id"] = options.bos_token_id;
  if (!options.eos_token_ids.empty()) gen["eos_token_id"] = ids_json(options.eos_token_ids);
  write_text_file(join(dir, "generation_config.json"), gen.dump(2) + "\n");

  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (options.max_shard_bytes == 0) {
    write_safetensors(join(dir, "model.safetensors"), out, options.dtype, meta);
    return;
  }
  // Greedy split in name order, as transformers' shard_checkpoint does in state-dict order.
  std::vector<WeightMap> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (auto& [name, t] : out) {
    const uint64_t bytes = safetensors_tensor_bytes(t.numel(), options.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, std::move(t));
    shard_bytes += bytes;
    total += bytes;
  }
  json index;
  index["metadata"]["total_size"] = total;
  index["weight_map"] = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i, shards.size());
    for (const auto& entry : shards[i]) index["weight_map"][entry.first] = name;
    write_safetensors(join(dir, name), shards[i], options.dtype, meta);
  }
  write_text_file(join(dir, "model.safetensors.index.json"), index.dump(2) + "\n");
}

}  // namespace speclab
