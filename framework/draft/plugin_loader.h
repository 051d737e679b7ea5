// Loading drafter plugins: a shared library that exports the one C entry point of
// framework/draft/plugin_abi.h (STYLE.md §6). docs/plugins.md shows how to write one.
//
// Two steps, both used by DrafterRegistry::load_plugin (framework/draft/registry.h):
//
//   LoadedPlugin p = load_drafter_plugin(path);          // dlopen + ABI check, once per file
//   std::unique_ptr<Drafter> d = make_plugin_drafter(p, options, env);   // per drafter
//
// Lifetime: the library stays loaded while a LoadedPlugin copy or a drafter made from it is
// alive (each holds a reference to the dlopen handle), so the code of a live drafter is never
// unmapped; dlclose runs when the last of them is gone. A LoadedPlugin may be copied freely.
//
// Exceptions: the plugin's `create` reports failure through its error buffer (exceptions never
// cross the C boundary). The drafter's virtual methods are ordinary C++ calls; anything other
// than a speclab::Error that they throw is rethrown as Error(kBadInput, ..., path, <method>),
// and what propose() returns is checked against the DraftBlock contract (framework/draft/
// drafter.h) before the engine sees it.
#pragma once

#include <memory>
#include <string>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/draft/plugin_abi.h"

namespace speclab {

struct LoadedPlugin {
  std::string path;          // the file as given to load_drafter_plugin
  std::string name;          // descriptor->name: the drafter name for YAML / --drafter
  std::string description;   // descriptor->description ("" when the plugin gives none)
  // The dlopen handle; dlclose runs when the last copy of this pointer is released.
  std::shared_ptr<void> library;
  // The plugin's static descriptor; points into `library`, valid while `library` is held.
  const SpeclabDrafterPlugin* descriptor = nullptr;
};

// dlopen(path, RTLD_NOW | RTLD_LOCAL), resolves SPECLAB_DRAFTER_PLUGIN_SYMBOL, calls it and
// checks the descriptor: abi_version first (== SPECLAB_DRAFTER_ABI_VERSION), then a non-empty
// name and non-null create/destroy. A path without a '/' is taken relative to the working
// directory (never searched for on the library path).
//
// Throws Error(kConfig, ..., path, "plugin") when the file does not exist ("no such file") or
// is not a regular file, when dlopen fails (the message carries dlerror(): not an ELF shared
// library, wrong architecture, an undefined symbol, ...), when the symbol is missing, when the
// entry point returns null, on an ABI version mismatch ("built for drafter ABI version X, this
// SpecLab expects Y"), and on a null/empty name or a null create/destroy. Nothing stays loaded
// after a throw.
LoadedPlugin load_drafter_plugin(const std::string& path);

// Calls plugin.descriptor->create(&options, <host services table over env>, ...) and returns the
// drafter wrapped so that deleting it calls plugin.descriptor->destroy and then releases the table
// (framework/draft/host_services.h: its model and KV functions use env.target, env.kv and
// env.target_pool, which must outlive the drafter) and its reference to the library. `options` is
// only read during the call (a plugin copies what it needs).
//
// Throws Error(kConfig, "<name>: <the plugin's error text>", plugin.path, "plugin") when create
// returns null (or, against the ABI contract, throws), and Error(kInternal) when `plugin` holds
// no descriptor or library (a default-constructed LoadedPlugin).
//
// Also Error(kConfig, ..., plugin.path, "plugin") when the drafter's name() differs from the
// descriptor's name. The drafter's propose() is checked against the DraftBlock contract and the
// host's q-row checks (draft_block_check.h), each failure an Error(kBadInput, ..., plugin.path,
// "propose"); under confidence_threshold (DraftContext::min_confidence) its drafts from the first
// gated position whose reported confidence is below the threshold are dropped, and a block without
// confidences is refused.
std::unique_ptr<Drafter> make_plugin_drafter(const LoadedPlugin& plugin, const DrafterOptions& options,
                                             const DrafterEnv& env);

// While a call into a plugin drafter's code runs: "<path>: <method>: the plugin crashed in
// <name>.<method>()", else nullptr. A lock-free atomic read of a string that lives as long as the
// drafter, so that a fatal-signal handler may print it (experiments/speclab/main.cpp).
const char* plugin_call_in_progress();

}  // namespace speclab
