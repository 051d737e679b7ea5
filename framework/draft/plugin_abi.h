// The plugin boundary: a drafter plugin is a shared library exporting ONE extern "C" symbol,
//
//   extern "C" const SpeclabDrafterPlugin* speclab_drafter_plugin(void);
//
// returning a static descriptor. SpecLab checks `abi_version == SPECLAB_DRAFTER_ABI_VERSION`
// before touching anything else and refuses the plugin with a clear error on a mismatch.
// `create` builds a speclab::Drafter (framework/draft/drafter.h) from the options; the plugin is
// compiled against the same SpecLab headers and C++ standard library as the host, which the ABI
// version stands for (bump it whenever drafter.h, drafter_options.h or this file change).
// Errors inside `create` are reported by returning nullptr and writing a message to `error`
// (at most `error_len` bytes, NUL-terminated): exceptions never cross the boundary.
#pragma once

#include <cstddef>
#include <cstdint>

#define SPECLAB_DRAFTER_ABI_VERSION 1
#define SPECLAB_DRAFTER_PLUGIN_SYMBOL "speclab_drafter_plugin"

namespace speclab {
class Drafter;
struct DrafterOptions;
struct DrafterEnv;
}  // namespace speclab

extern "C" {

struct SpeclabDrafterPlugin {
  uint32_t abi_version;  // SPECLAB_DRAFTER_ABI_VERSION the plugin was built with
  const char* name;      // the drafter name used in YAML / --drafter
  const char* description;
  // Returns a new Drafter (owned by the caller, deleted with `destroy`) or nullptr + error.
  speclab::Drafter* (*create)(const speclab::DrafterOptions* options, const speclab::DrafterEnv* env, char* error,
                              size_t error_len);
  void (*destroy)(speclab::Drafter* drafter);
};

typedef const SpeclabDrafterPlugin* (*SpeclabDrafterPluginEntry)(void);
}
