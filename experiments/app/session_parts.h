// SessionParts — what the Sessions of one target run with: one KV manager shared by the target
// and every drafter (one budget), the target's pool in it, and the drafters, built through the
// application's registry. The only place where drafters are built, for every command.
//
//   SessionParts parts(target, kv_options);
//   Drafter& d = parts.add_drafter(options);          // Error(kConfig, "drafter", ...) when bad
//   Session s(*target.model, *target.info.tokenizer, parts.kv_target());
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "experiments/app/loaded_target.h"
#include "framework/core/error.h"
#include "framework/draft/registry.h"
#include "framework/engine/session.h"
#include "framework/kv/kv_cache_manager.h"

namespace speclab {

// The framework's built-in drafters (prompt_lookup, layer_skip) plus draft_model, whose factory
// loads the draft model named in the options, and eagle, medusa and retrieval, which load the
// file named by draft_model (default: default_draft_path(), draft_training.h) and need `target`
// (Error kConfig, "drafter", "name" without it). With `target` (kept by pointer; must outlive the
// registry), draft_model refuses a model whose vocabulary differs from the target's (Error
// kConfig, "drafter", "draft_model", naming both files and sizes).
DrafterRegistry drafter_registry(const LoadedModel* target = nullptr);

// An error of SessionParts or add_drafter() as the config file names it: `e` from `section` ("kv",
// "drafter") becomes one in `source_path` at `key` + "." + its field ("drafters[1].draft_layers_first"),
// its message followed by `note`. A drafter's error that names another file (a trained draft, a
// datastore) keeps the file, its field prefixed by `key` ("drafters[1].retrieval_datastore");
// any other error is `e` itself.
Error in_config(const Error& e, const std::string& section, const std::string& key, const std::string& source_path,
                const std::string& note = "");

class SessionParts;
// Error(kConfig, source_path, "kv.budget_bytes") unless the KV budget holds the longest prompt's
// AR run to max_new_tokens (prompt + max_new_tokens - 1 positions of the target's cache, at most
// context_len - 1, where every run stops): found before any run instead of after the earlier
// prompts' runs (a file with a larger budget cannot --resume one with this). Drafters' caches and
// verification rows need more; those fail when they run, naming kv.budget_bytes too. `note` ends
// the message (e.g. the sweep point). prompts: token ids per prompt.
void check_budget_holds_ar_runs(const SessionParts& parts, const std::vector<TokenList>& prompts,
                                int64_t max_new_tokens, int64_t context_len, const std::string& source_path,
                                const std::string& note = "");

class SessionParts {
 public:
  // Error(kConfig, "kv", "budget_bytes") when the budget holds no block of the target's KV
  // geometry (KvOptions::validate's own errors name "kv.<key>" in full; the config validated
  // them first).
  SessionParts(const LoadedTarget& target, const KvOptions& kv);

  Drafter& add_drafter(const DrafterOptions& options);
  Drafter& drafter(size_t i) { return *drafters_.at(i); }
  size_t n_drafters() const { return drafters_.size(); }

  const LoadedTarget& target() const { return target_; }
  KvCacheManager& kv() { return *kv_; }
  KvTarget kv_target() const { return {kv_.get(), pool_}; }
  DrafterEnv env() const;

 private:
  const LoadedTarget& target_;
  std::unique_ptr<KvCacheManager> kv_;
  PoolId pool_ = 0;
  DrafterRegistry registry_;
  std::vector<std::unique_ptr<Drafter>> drafters_;
};

}  // namespace speclab
