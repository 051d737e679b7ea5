// Synthetic models: real architectures' shapes with random weights, which the model draws on its
// own device at build time, so that benchmarks run at the sizes that matter (a 7B target, a 1B
// draft) without a download. The path names the shape: "random:llama-7b" (Llama-2-7B),
// "random:llama-1b" (TinyLlama-1.1B's shape with Llama-2's vocabulary), "random:smollm2-135m",
// and "random:tiny" (2 layers, d 128, vocabulary 512) for tests.
// Their tokenizer maps bytes to ids 3..258 and back; id 1 is BOS and id 2 EOS. Timing only: the
// text they generate means nothing.
#pragma once

#include <string>

#include "models/loaded_model.h"

namespace speclab {

// Whether `path` names a synthetic model ("random:..."), whatever the shape.
bool is_synthetic_path(const std::string& path);

// The shapes, for help texts and errors: "llama-7b, llama-1b, smollm2-135m, tiny".
std::string synthetic_shape_list();

// A LoadedModel with the shape's config, the synthetic tokenizer, no weights and
// random_weights set. Throws Error(kConfig, field "path") for an unknown shape.
LoadedModel load_synthetic(const std::string& path);

}  // namespace speclab
