#include "experiments/app/loaded_target.h"

#include <chrono>

#include "models/llama/llama_model.h"
#include "models/model_loader.h"

namespace speclab {

ModelSource draft_source_for(const LoadedModel& target, const std::string& path, const std::string& format) {
  ModelSource src;
  src.path = path;
  src.format = format;
  src.device = target.origin.device;
  src.dtype = target.origin.dtype;
  src.kv_dtype = target.origin.kv_dtype;
  src.weights = target.origin.weights;
  src.activations = target.origin.activations;
  return src;
}

std::unique_ptr<Model> build_model(LoadedModel& loaded, const ModelSource& source, int64_t head_vocab) {
  return std::make_unique<LlamaModel>(loaded, parse_activations(source.activations, "activations"), head_vocab,
                                      Placement{source.device, source.dtype, source.kv_dtype});
}

std::unique_ptr<LoadedTarget> load_target(const ModelSource& source) {
  const auto t0 = std::chrono::steady_clock::now();
  auto t = std::make_unique<LoadedTarget>();
  t->info = load_model(source);
  t->model = build_model(t->info, source);
  t->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

LoadedTarget& TargetCache::get(const ModelSource& s) {
  const std::string key = s.path + "\n" + s.format + "\n" + s.tokenizer + "\n" + s.weights + "\n" + s.activations + "\n" + s.device + "\n" + s.dtype + "\n" + s.kv_dtype;
  auto it = targets_.find(key);
  if (it == targets_.end()) it = targets_.emplace(key, load_target(s)).first;
  return *it->second;
}

}  // namespace speclab
