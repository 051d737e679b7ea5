#include "framework/draft/registry.h"

#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/printable_text.h"
#include "framework/draft/builtin/sources_first.h"
#include "framework/draft/builtin/model_drafter.h"
#include "framework/draft/builtin/prompt_lookup.h"
#include "framework/draft/plugin_loader.h"
#include "framework/core/model.h"

namespace speclab {

void DrafterRegistry::add(const std::string& name, DrafterFactory factory) { factories_[name] = std::move(factory); }

std::vector<std::string> DrafterRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& kv : factories_) out.push_back(kv.first);
  return out;
}

std::string DrafterRegistry::load_plugin(const std::string& path) {
  auto plugin = std::make_shared<LoadedPlugin>(load_drafter_plugin(path));
  const std::string name = plugin->descriptor->name;
  // The file itself, links resolved: one .so reached through a symlink is the same plugin (dlopen
  // returns the same handle), not a second file exporting the name.
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
  if (ec) resolved = std::filesystem::absolute(path).lexically_normal();
  const std::string file = resolved.string();
  const auto known = plugin_files_.find(name);
  // A built-in's name or alias: "ngram" (prompt_lookup's vLLM name) reached the plugin where a
  // config written for vLLM meant prompt lookup.
  const std::string builtin = factories_.count(name) > 0 ? name : canonical_drafter_name(name);
  if (known == plugin_files_.end() && factories_.count(builtin) > 0)
    throw Error(ErrorKind::kConfig,
                "expected a plugin whose drafter is not named as a built-in one, found " + path + " exporting '" +
                    name + "'" + (builtin != name ? " (an alias of " + builtin + ")" : "") +
                    " (it would replace the built-in drafter); rename the plugin's drafter",
                "drafter", "plugin");
  if (known != plugin_files_.end() && known->second != file)
    throw Error(ErrorKind::kConfig,
                "expected one plugin file per drafter name, found '" + name + "' exported by " + known->second +
                    " and by " + path + " (the later would replace the earlier for every entry)",
                "drafter", "plugin");
  plugin_files_[name] = file;
  plugin_descriptions_[name] = plugin->description;
  add(name, [plugin](const DrafterOptions& o, const DrafterEnv& env) { return make_plugin_drafter(*plugin, o, env); });
  return name;
}

std::string DrafterRegistry::plugin_description(const std::string& name) const {
  const auto it = plugin_descriptions_.find(name);
  return it == plugin_descriptions_.end() ? "" : it->second;
}

std::unique_ptr<Drafter> DrafterRegistry::create(const DrafterOptions& options, const DrafterEnv& env) {
  options.validate();
  if (!options.plugin.empty()) {
    const std::string exported = load_plugin(options.plugin);
    // The entry runs the drafter its plugin exports: another name ran that drafter instead (a
    // built-in, or another plugin's) while the results carried it, and left the plugin unused.
    if (options.name != exported)
      throw Error(ErrorKind::kConfig,
                  "expected the drafter that " + options.plugin + " exports ('" + exported + "'" +
                      (plugin_description(exported).empty() ? "" : ": " + one_line(plugin_description(exported))) +
                      "), found '" + options.name + "'",
                  "drafter", "name");
  }
  auto it = factories_.find(options.name);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::kConfig, "unknown drafter '" + options.name + "'; known drafters: " + known +
                                        " (or load a plugin with --plugin / drafter.plugin)",
                "drafter", "name");
  }
  if (options.retrieval_first && factories_.count("retrieval") == 0)
    throw Error(ErrorKind::kConfig, "retrieval_first needs the retrieval drafter, which this registry does not have",
                "drafter", "retrieval_first");
  std::unique_ptr<Drafter> d = it->second(options, env);
  if (!options.prompt_lookup_first && !options.retrieval_first) return d;
  std::vector<SourcesFirstDrafter::Source> sources;
  if (options.prompt_lookup_first) sources.push_back({std::make_unique<PromptLookupDrafter>(options), 0});
  if (options.retrieval_first) {
    // The datastore retrieval_datastore names, else the one the retrieval drafter would load by
    // default for this target (the entry's own draft_model names the drafter's file, not the
    // datastore).
    DrafterOptions r = options;
    r.name = "retrieval";
    r.plugin.clear();
    r.draft_model = options.retrieval_datastore;
    r.retrieval_datastore.clear();
    r.draft_model_format = "auto";
    r.prompt_lookup_first = r.retrieval_first = false;
    r.fallback_speculative_tokens = 0;
    std::unique_ptr<Drafter> store;
    try {
      store = create(r, env);
    } catch (const Error& e) {
      // Its errors name draft_model, which here is the drafter's file, and may suggest giving one:
      // name the key that asked for the datastore, and how to build one.
      std::string msg = e.message();
      const size_t note = msg.find(" (no draft_model given");
      if (note != std::string::npos) msg.erase(note);
      const bool named = !options.retrieval_datastore.empty();
      throw Error(e.kind(),
                  std::string(named ? "retrieval_first's datastore: " : "retrieval_first's default datastore: ") + msg +
                      " (build one with `speclab train-draft`, architecture: retrieval" +
                      (named ? "" : ", output.path this file, or name another with retrieval_datastore") +
                      "; docs/train-draft.md)",
                  e.file(), named ? "retrieval_datastore" : "retrieval_first");
    }
    sources.push_back({std::move(store), options.fallback_speculative_tokens});
  }
  return std::make_unique<SourcesFirstDrafter>(std::move(sources), std::move(d), options.fallback_speculative_tokens);
}

void register_builtin_drafters(DrafterRegistry& r) {
  r.add("prompt_lookup", [](const DrafterOptions& o, const DrafterEnv&) -> std::unique_ptr<Drafter> {
    return std::make_unique<PromptLookupDrafter>(o);
  });
  r.add("layer_skip", [](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    const int64_t n_layers = env.target ? env.target->config().num_hidden_layers : 0;
    return ModelDrafter::layer_skip(env, layer_skip_layers(o, n_layers));
  });
}

DrafterRegistry DrafterRegistry::with_builtins() {
  DrafterRegistry r;
  register_builtin_drafters(r);
  return r;
}

}  // namespace speclab
