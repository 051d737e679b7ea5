// The plugin boundary: a drafter plugin is a shared library exporting ONE extern "C" symbol,
//
//   extern "C" const SpeclabDrafterPlugin* speclab_drafter_plugin(void);
//
// returning a static descriptor. SpecLab checks `abi_version == SPECLAB_DRAFTER_ABI_VERSION`
// before touching anything else and refuses the plugin with a clear error on a mismatch.
// `create` builds a speclab::Drafter (framework/draft/drafter.h) from the options and the table
// of host services (framework/draft/host_api.h: the drafter's random stream, the sampling
// transform, the target model on the shared KV cache); the plugin is compiled against the same
// SpecLab headers and C++ standard library as the host, which the ABI version stands for (bump
// it whenever drafter.h, drafter_options.h, host_api.h's existing entries or this file change).
// Errors inside `create` are reported by returning nullptr and writing a message to `error`
// (at most `error_len` bytes, NUL-terminated): exceptions never cross the boundary.
//
// ABI history: 1 — create(options, const DrafterEnv*, ...): the env's C++ pointers were of no use
// to a plugin (the host exports no symbols). 2 — create(options, const SpeclabHostApi*, ...).
// 3 — DrafterOptions::draft_vocab (the struct's layout changed);
// Drafter::target_hidden_layers() and observe_target_hidden() (new virtual functions).
// 4 — DraftContext::want_logits, DraftBlock::source, and confidence_from_token in DrafterOptions
// and DraftContext (the structs' layouts changed; want_logits and source came in without a bump).
// 5 — DrafterOptions::retrieval_min and retrieval_max (the struct's layout changed).
// 6 — DrafterOptions::retrieval_first (the struct's layout changed).
// 7 — DrafterOptions::retrieval_datastore (the struct's layout changed).
//
// The C++ standard library is part of the ABI too (a std::string or std::vector crosses the
// boundary in DrafterOptions and Drafter's functions), so SPECLAB_DRAFTER_ABI_VERSION is the
// number above with a flag for a library whose layout differs from the usual one: libstdc++'s
// pre-C++11 std::string (`-D_GLIBCXX_USE_CXX11_ABI=0`, as older PyTorch wheels build) or libc++.
// A plugin built with the other layout is refused by name instead of crashing in `create`
// (until 2026-12-06 it loaded and crashed the host). Plugins built with the usual layout carry
// the bare number, so those built before the flags existed still load.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/draft/drafter.h"
#include "framework/draft/host_api.h"

#define SPECLAB_DRAFTER_ABI_NUMBER 7u
#define SPECLAB_DRAFTER_ABI_FLAG_OLD_STRING 0x10000u  // libstdc++ with _GLIBCXX_USE_CXX11_ABI=0
#define SPECLAB_DRAFTER_ABI_FLAG_LIBCXX 0x20000u      // LLVM's libc++
#if defined(_LIBCPP_VERSION)
#define SPECLAB_DRAFTER_ABI_LIBRARY SPECLAB_DRAFTER_ABI_FLAG_LIBCXX
#elif defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI == 0
#define SPECLAB_DRAFTER_ABI_LIBRARY SPECLAB_DRAFTER_ABI_FLAG_OLD_STRING
#else
#define SPECLAB_DRAFTER_ABI_LIBRARY 0u
#endif
#define SPECLAB_DRAFTER_ABI_VERSION (SPECLAB_DRAFTER_ABI_NUMBER | SPECLAB_DRAFTER_ABI_LIBRARY)
#define SPECLAB_DRAFTER_PLUGIN_SYMBOL "speclab_drafter_plugin"

namespace speclab {
struct DrafterOptions;
}  // namespace speclab

extern "C" {

struct SpeclabDrafterPlugin {
  uint32_t abi_version;  // SPECLAB_DRAFTER_ABI_VERSION the plugin was built with (number | library flag)
  const char* name;      // the drafter name used in YAML / --drafter
  const char* description;
  // Returns a new Drafter (owned by the caller, deleted with `destroy`) or nullptr + error.
  // `host` (never null) stays valid until `destroy` has returned for this drafter.
  speclab::Drafter* (*create)(const speclab::DrafterOptions* options, const SpeclabHostApi* host, char* error,
                              size_t error_len);
  void (*destroy)(speclab::Drafter* drafter);
};

typedef const SpeclabDrafterPlugin* (*SpeclabDrafterPluginEntry)(void);
}

// The host-table handles of what propose() is given (valid during that call).
inline SpeclabRng* speclab_rng(const speclab::DraftContext& ctx) { return reinterpret_cast<SpeclabRng*>(ctx.rng); }
inline const SpeclabSampling* speclab_sampling(const speclab::DraftContext& ctx) {
  return reinterpret_cast<const SpeclabSampling*>(ctx.sampling);
}
