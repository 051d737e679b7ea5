// ModelSource — where a model comes from: a path or a named entry, its format, and how its
// weights are held. The options struct of `models.target` / `models.draft` and `--model`; the
// loaders (models/model_loader.h) resolve and load it.
#pragma once

#include <string>

namespace speclab {

struct ModelSource {
  std::string path;
  std::string format = "auto";
  std::string tokenizer;  // llama2.c only: tokenizer.bin (default: tokenizer.bin beside the model)
  // "native": GGUF Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K matrices stay in their quantized blocks and the model computes
  // with them directly (llama.cpp's precision for weights); "f32": every tensor is dequantized to
  // float32 at load. Other formats are float32 either way.
  std::string weights = "native";
  // How activations meet packed weights: "int8" (each activation row quantized per block to int8,
  // integer dot products, as llama.cpp), "f32" (float32 rows against the decoded blocks), or
  // "auto" (int8; float32 weights always compute in float32).
  std::string activations = "auto";

  void validate() const;  // throws Error(kConfig) on an empty path, unknown format, weights or activations
};

}  // namespace speclab
