// LoadedTarget — a model loaded and ready to run: the loader's facts (config, tokenizer, chat
// template, provenance; models/loaded_model.h) and the stateless Model built from its weights.
// Every command's target (generate, bench, run, check, train-draft) is loaded through
// load_target(). load_model() is also called for the draft_model drafter (session_parts.cpp),
// for the target's tensors in training and distilled drafts (draft_training.cpp) and for bench's
// --draft-model (cmd_bench.cpp). export reads the GGUF file itself.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "framework/core/model.h"
#include "framework/core/model_source.h"
#include "models/loaded_model.h"

namespace speclab {

struct LoadedTarget {
  LoadedModel info;              // config, tokenizer, chat template (weights moved into `model`)
  std::unique_ptr<Model> model;  // stateless; per-sequence state lives in a KV manager
  double load_seconds = 0.0;
};

// Resolves a named entry, loads and builds the model. Throws speclab::Error naming the file
// and field on any bad input.
std::unique_ptr<LoadedTarget> load_target(const ModelSource& source);

// The model of `source`, already loaded from it (models/model_loader.h); source.activations
// picks the activation type; head_vocab > 0 reduces the LM head to that many frequent tokens
// (a draft's, DrafterOptions::draft_vocab; models/llama/llama_model.h).
std::unique_ptr<Model> build_model(LoadedModel& loaded, const ModelSource& source, int64_t head_vocab = 0);

// The source of a draft model at `path` (format `format`) for `target`: the draft runs as its
// target was asked to (device, dtype, weights, activations). "auto" dtype stays "auto", so a
// native CPU target keeps a native draft (its resolved "float32" would dequantize it).
ModelSource draft_source_for(const LoadedModel& target, const std::string& path, const std::string& format = "auto");

// One LoadedTarget per distinct source (path, format, tokenizer, weights, activations), loaded on first use.
class TargetCache {
 public:
  LoadedTarget& get(const ModelSource& source);

 private:
  std::map<std::string, std::unique_ptr<LoadedTarget>> targets_;
};

}  // namespace speclab
