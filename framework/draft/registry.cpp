#include "framework/draft/registry.h"

#include "framework/core/error.h"
#include "framework/draft/builtin/model_drafter.h"
#include "framework/draft/builtin/prompt_lookup.h"
#include "framework/draft/plugin_loader.h"
#include "models/llama/llama_model.h"
#include "models/model_loader.h"

namespace speclab {

void DrafterRegistry::add(const std::string& name, DrafterFactory factory) { factories_[name] = std::move(factory); }

std::vector<std::string> DrafterRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& kv : factories_) out.push_back(kv.first);
  return out;
}

void DrafterRegistry::load_plugin(const std::string& path) {
  auto plugin = std::make_shared<LoadedPlugin>(load_drafter_plugin(path));
  const std::string name = plugin->descriptor->name;
  add(name, [plugin](const DrafterOptions& o, const DrafterEnv& env) { return make_plugin_drafter(*plugin, o, env); });
}

std::unique_ptr<Drafter> DrafterRegistry::create(const DrafterOptions& options, const DrafterEnv& env) {
  options.validate();
  if (!options.plugin.empty()) load_plugin(options.plugin);
  auto it = factories_.find(options.name);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::kConfig, "unknown drafter '" + options.name + "'; known drafters: " + known +
                                        " (or load a plugin with --plugin / drafter.plugin)",
                "drafter", "name");
  }
  return it->second(options, env);
}

void register_builtin_drafters(DrafterRegistry& r) {
  r.add("prompt_lookup", [](const DrafterOptions& o, const DrafterEnv&) -> std::unique_ptr<Drafter> {
    return std::make_unique<PromptLookupDrafter>(o);
  });
  r.add("layer_skip", [](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    std::vector<int64_t> layers = o.draft_layers;
    if (layers.empty()) {
      const int64_t L = env.target ? env.target->config().num_hidden_layers : 0;
      const int64_t first = o.draft_layers_first > 0 ? o.draft_layers_first : L / 2;
      if (first > L)
        throw Error(ErrorKind::kConfig, "expected at most " + std::to_string(L) + " layers, found " +
                                            std::to_string(first), "drafter", "draft_layers_first");
      for (int64_t l = 0; l < first; ++l) layers.push_back(l);
    }
    return ModelDrafter::layer_skip(env, layers);
  });
  r.add("draft_model", [](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    if (o.draft_model.empty())
      throw Error(ErrorKind::kConfig, "expected a draft model path or named entry", "drafter", "draft_model");
    ModelSource src;
    src.path = o.draft_model;
    src.format = o.draft_model_format;
    LoadedModel loaded = load_model(src);
    return ModelDrafter::separate(std::make_unique<LlamaModel>(loaded), env);
  });
}

DrafterRegistry DrafterRegistry::with_builtins() {
  DrafterRegistry r;
  register_builtin_drafters(r);
  return r;
}

}  // namespace speclab
