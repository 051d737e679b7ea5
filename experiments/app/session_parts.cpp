#include "experiments/app/session_parts.h"

#include "framework/core/error.h"
#include "framework/draft/builtin/model_drafter.h"
#include "models/model_loader.h"

namespace speclab {

DrafterRegistry drafter_registry() {
  DrafterRegistry r = DrafterRegistry::with_builtins();
  r.add("draft_model", [](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    if (o.draft_model.empty())
      throw Error(ErrorKind::kConfig, "expected a draft model path or named entry", "drafter", "draft_model");
    ModelSource src;
    src.path = o.draft_model;
    src.format = o.draft_model_format;
    LoadedModel loaded = load_model(src);
    return ModelDrafter::separate(build_model(loaded, src), env);
  });
  return r;
}

SessionParts::SessionParts(const LoadedTarget& target, const KvOptions& kv)
    : target_(target), kv_(std::make_unique<KvCacheManager>(kv)), registry_(drafter_registry()) {
  pool_ = kv_->add_pool(target.model->config().kv_geometry());
}

DrafterEnv SessionParts::env() const {
  DrafterEnv env;
  env.target = target_.model.get();
  env.kv = kv_.get();
  env.target_pool = pool_;
  env.vocab_size = target_.model->config().vocab_size;
  return env;
}

Drafter& SessionParts::add_drafter(const DrafterOptions& options) {
  drafters_.push_back(registry_.create(options, env()));
  return *drafters_.back();
}

}  // namespace speclab
