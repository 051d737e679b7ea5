// Drafter registry: built-ins registered explicitly in register_builtin_drafters() (no static
// initialisers, STYLE.md §6), plugins loaded from a shared library by path.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"

namespace speclab {

using DrafterFactory = std::function<std::unique_ptr<Drafter>(const DrafterOptions&, const DrafterEnv&)>;

class DrafterRegistry {
 public:
  // A registry with the framework's built-ins: prompt_lookup, layer_skip. draft_model, eagle,
  // medusa and retrieval, which load files, are added by the application layer
  // (drafter_registry() in experiments/app/session_parts.h).
  static DrafterRegistry with_builtins();

  void add(const std::string& name, DrafterFactory factory);
  std::vector<std::string> names() const;
  // Loads the plugin at `path` and registers the drafter it exports; returns that drafter's name.
  // Throws Error(kConfig) naming the file on a missing file/symbol or an ABI version mismatch, and
  // Error(kConfig, ..., "drafter", "plugin") when the name is a built-in drafter's or another
  // plugin file's (the later registration replaced the earlier, so entries ran another drafter).
  std::string load_plugin(const std::string& path);
  // The description a loaded plugin's descriptor gives for drafter `name` ("" for a built-in, an
  // unknown name, or a plugin that gives none).
  std::string plugin_description(const std::string& name) const;
  // Builds options.name (loading options.plugin first when set: then options.name must be the
  // drafter that plugin exports, Error(kConfig, ..., "drafter", "name") otherwise, quoting the
  // plugin's description). An unknown
  // name gives Error(kConfig) listing the known ones. With prompt_lookup_first or retrieval_first, the
  // drafter is wrapped in a SourcesFirstDrafter that tries prompt lookup and/or the target's
  // default retrieval datastore first. retrieval_first without a "retrieval" factory in this
  // registry gives Error(kConfig, "drafter", "retrieval_first").
  std::unique_ptr<Drafter> create(const DrafterOptions& options, const DrafterEnv& env);

 private:
  std::map<std::string, DrafterFactory> factories_;
  std::map<std::string, std::string> plugin_files_;  // drafter name -> the plugin file that exports it
  std::map<std::string, std::string> plugin_descriptions_;  // drafter name -> its descriptor's description
};

void register_builtin_drafters(DrafterRegistry& registry);

}  // namespace speclab
