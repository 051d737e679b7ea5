// ModelSource — where a model comes from: a path or a named entry, its format, and how its
// weights are held. The options struct of `models.target` / `models.draft` and `--model`; the
// loaders (models/model_loader.h) resolve and load it.
#pragma once

#include <string>
#include <vector>

namespace speclab {

struct ModelSource {
  std::string path;
  std::string format = "auto";  // auto | gguf | safetensors | llama2c | random (path random:<shape>)
  std::string tokenizer;  // llama2.c only: tokenizer.bin (default: tokenizer.bin beside the model)
  // "native": GGUF F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL, Q2_K..Q6_K and IQ4_XS matrices stay in their blocks and the model computes
  // with them directly (llama.cpp's precision for weights); "f32": every tensor is dequantized to
  // float32 at load. Other formats are float32 either way.
  std::string weights = "native";
  // How activations meet packed weights: "int8" (each activation row quantized per block to int8,
  // integer dot products, as llama.cpp), "f32" (float32 rows against the decoded blocks), or
  // "auto" (int8; float32, F16 and BF16 weights always compute in float32).
  std::string activations = "auto";
  // Where the model runs: "cpu", "cuda" or "cuda:N" (weights, K/V and activations live there).
  std::string device = "cpu";
  // The dtype of weights, activations and K/V: "auto" (on the CPU: the weights as the file holds
  // them, as `weights` says; on CUDA: bfloat16), or "float32", "bfloat16", "float16", to which
  // quantized weights are dequantized at load (on the CPU this runs the libtorch-op backend).
  std::string dtype = "auto";
  // The dtype of the K/V cache: "auto", "float32", "float16" or "int8". float16 halves the bytes
  // attention reads per token, and int8 (CPU only: int8 values with one float32 scale per token
  // and kv head, KvGeometry) takes head_dim + 4 bytes per head instead of 2 head_dim; auto is float16 for quantized GGUF weights on the native CPU path (as
  // llama.cpp's default cache) and the model's dtype otherwise. On CUDA the cache always holds the
  // model's dtype.
  std::string kv_dtype = "auto";

  // throws Error(kConfig) on an empty path, unknown format, weights, activations, device, dtype
  // or kv_dtype, and on activations int8 with weights f32 (which compute in float32)
  void validate() const;

  // The values each key accepts, in the order errors list them; the one list that validate() and
  // the YAML reader (framework/io/config_schema.cpp) both check against.
  static const std::vector<std::string>& formats();
  static const std::vector<std::string>& weights_kinds();
  static const std::vector<std::string>& activations_kinds();
  static const std::vector<std::string>& dtypes();
  static const std::vector<std::string>& kv_dtypes();
};

// Whether `d` names a device: "cpu", "cuda" or "cuda:N" (N up to three digits).
bool valid_device(const std::string& d);

// "" when `value` is one of `allowed`, else "expected one of a, b, c, found '<value>'" (what
// ModelSource::validate() says for each of its lists; DrafterOptions for draft_model_format).
std::string not_one_of(const std::string& value, const std::vector<std::string>& allowed);

// A named entry: a short name for a model that scripts/setup.sh installs under .cache/models (or
// that ../shared holds). models/model_loader.h resolves it to a file; the config loader keeps it
// as written instead of resolving it against the YAML file's directory.
struct NamedModel {
  const char* name;       // "qwen2.5-coder-1.5b-instruct"
  const char* alias;      // a second accepted spelling, or ""
  const char* format;     // "gguf" or "llama2c"
  const char* root;       // "models" (.cache/models, SPECLAB_MODELS_DIR) or "shared" (../shared)
  const char* file;       // relative to root
  const char* tokenizer;  // relative to root; llama2c only, else ""
  const char* install;    // how to install it, for the error when the file is missing
};

// Every named entry, in the order the CLI help lists them.
const std::vector<NamedModel>& named_models();
// The entry called `name` (or with that alias), or nullptr.
const NamedModel* find_named_model(const std::string& name);
// "smollm2-135m-instruct, stories260K, ..." for help texts and errors.
std::string named_model_list();

}  // namespace speclab
