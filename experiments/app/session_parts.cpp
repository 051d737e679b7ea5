#include "experiments/app/session_parts.h"

#include <algorithm>
#include <map>
#include <memory>

#include "framework/core/error.h"
#include "experiments/app/draft_training.h"
#include "framework/draft/builtin/eagle_drafter.h"
#include "framework/draft/builtin/medusa_drafter.h"
#include "framework/draft/builtin/model_drafter.h"
#include "framework/draft/builtin/retrieval_drafter.h"
#include "models/model_loader.h"

namespace speclab {

namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A draft model must share the target's vocabulary: the same number of ids, each standing for
// the same bytes. Error(kConfig, "drafter", "draft_model") naming both otherwise.
void check_same_vocabulary(const LoadedModel& draft, const LoadedModel& target) {
  const int64_t n = draft.config.vocab_size, n_target = target.config.vocab_size;
  std::string differs;
  if (n != n_target) {
    differs = "the sizes differ";
  } else {
    const int64_t n_text = std::min(draft.tokenizer->vocab_size(), target.tokenizer->vocab_size());
    for (Token t = 0; t < n_text && differs.empty(); ++t)
      if (draft.tokenizer->token_bytes(t) != target.tokenizer->token_bytes(t))
        differs = "token " + std::to_string(t) + " is '" + draft.tokenizer->token_text(t) + "' in the draft model, '" +
                  target.tokenizer->token_text(t) + "' in the target";
  }
  if (differs.empty()) return;
  throw Error(ErrorKind::kConfig,
              "the draft model's vocabulary (" + base_name(draft.source) + ", " + std::to_string(n) +
                  " tokens) does not match the target's (" + base_name(target.source) + ", " +
                  std::to_string(n_target) + " tokens; " + differs + "): a draft model must share the target's tokenizer",
              "drafter", "draft_model");
}

// Loads a draft (a draft model, an eagle head, medusa heads, a retrieval datastore) with load(). An error
// that names no field (the file missing or unreadable) is rethrown naming draft_model (or
// draft_model_tokenizer, for that file), and,
// where no draft_model was given, that `path` is the default one for this target.
template <class Load>
auto with_draft_field(Load load, const std::string& path, const DrafterOptions& o) -> decltype(load()) {
  try {
    return load();
  } catch (const Error& e) {
    // The draft's model source (load_model: file "model") names the drafter's own keys.
    if (e.file() == "model" && (e.field() == "tokenizer" || e.field() == "format"))
      throw Error(e.kind(), e.message(), "drafter", "draft_model_" + e.field());
    if (!e.field().empty()) throw;
    throw Error(e.kind(),
                e.message() + (o.draft_model.empty()
                                   ? " (no draft_model given: the default trained " + o.name +
                                         " draft for this target; `speclab train-draft` writes it, docs/train-draft.md)"
                                   : ""),
                e.file().empty() ? path : e.file(),
                !o.draft_model_tokenizer.empty() && e.file() == o.draft_model_tokenizer ? "draft_model_tokenizer"
                                                                                         : "draft_model");
  }
}

}  // namespace

Error in_config(const Error& e, const std::string& section, const std::string& key, const std::string& source_path,
                const std::string& note) {
  if (e.file() == section)
    return Error(e.kind(), e.message() + note, source_path, key + (e.field().empty() ? "" : "." + e.field()));
  // A drafter's error in a file it read (a trained draft, a datastore) keeps that file, and names
  // the entry's key that pointed at it: "drafters[1].retrieval_datastore", not the bare option.
  if (section == "drafter" && !e.field().empty() && e.field().rfind(key, 0) != 0) {
    std::string field = e.field();
    if (field.rfind(section + ".", 0) == 0) field = field.substr(section.size() + 1);
    return Error(e.kind(), e.message() + note, e.file(), key + "." + field);
  }
  return e;
}

void check_budget_holds_ar_runs(const SessionParts& parts, const std::vector<TokenList>& prompts,
                                int64_t max_new_tokens, int64_t context_len, const std::string& source_path,
                                const std::string& note) {
  const KvTarget kt = parts.kv_target();
  const BlockPool& pool = kt.kv->blocks().pool(kt.pool);
  int64_t longest = 0;
  for (const TokenList& ids : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
  // A run stops when prompt + generated tokens reach the context (StopCriteria), so it never holds
  // more than context_len - 1 positions (max_new_tokens clipped first: it has no upper bound).
  const int64_t ctx = context_len > 0 ? context_len : int64_t(1) << 40;  // 0: the model names none
  const int64_t positions = std::min(longest + std::min(max_new_tokens, ctx) - 1, ctx - 1);
  const bool capped = longest + std::min(max_new_tokens, ctx) - 1 > ctx - 1;  // it read "512 - 1 = 57"
  const int64_t blocks = (positions + pool.block_size() - 1) / pool.block_size();
  if (blocks > kt.kv->bytes_budget() / pool.bytes_per_block())
    throw Error(ErrorKind::kConfig,
                "expected a budget that holds the longest prompt's AR run to generation.max_new_tokens (" +
                    std::to_string(longest) + " prompt tokens + " + std::to_string(max_new_tokens) +
                    " new - 1" + (capped ? ", capped at the context's " + std::to_string(ctx) + " - 1," : "") +
                    " = " + std::to_string(positions) + " positions: " + std::to_string(blocks) + " blocks of " +
                    std::to_string(pool.bytes_per_block()) + " bytes), found " + std::to_string(kt.kv->bytes_budget()) +
                    " bytes (EOS could stop it sooner; the budget must not rely on it)" + note,
                source_path, "kv.budget_bytes");
}

DrafterRegistry drafter_registry(const LoadedModel* target) {
  DrafterRegistry r = DrafterRegistry::with_builtins();
  r.add("draft_model", [target](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    if (o.draft_model.empty())
      throw Error(ErrorKind::kConfig, "expected a draft model path or named entry", "drafter", "draft_model");
    const std::string& path = o.draft_model;
    ModelSource src;
    if (target != nullptr) {
      src = draft_source_for(*target, path, o.draft_model_format);
    } else {
      src.path = path;
      src.format = o.draft_model_format;
      if (env.target != nullptr) src.device = env.target->config().device;
    }
    src.tokenizer = o.draft_model_tokenizer;
    // A reduced head larger than the vocabulary would silently be the whole one.
    const auto check_draft_vocab = [&](int64_t vocab) {
      if (o.draft_vocab > vocab)
        throw Error(ErrorKind::kConfig,
                    "expected at most the draft's vocabulary of " + std::to_string(vocab) +
                        " tokens (0 = all of them), found " + std::to_string(o.draft_vocab),
                    "drafter", "draft_vocab");
    };
    if (target != nullptr && is_trained_draft_file(path)) {  // distilled by `speclab train-draft`
      if (!o.draft_model_tokenizer.empty())
        throw Error(ErrorKind::kConfig,
                    "expected no tokenizer file with a draft distilled by `speclab train-draft`, which uses the "
                    "target's tokenizer, found '" + o.draft_model_tokenizer + "'",
                    "drafter", "draft_model_tokenizer");
      // Its errors name the key, as eagle's and medusa's do (they named the file alone until 2026-12-06).
      DistilledDraft d = with_draft_field([&] { return load_distilled_draft(path, *target); }, path, o);
      check_draft_vocab(d.model.config.vocab_size);
      return ModelDrafter::separate(build_model(d.model, src, o.draft_vocab > 0 ? o.draft_vocab : d.head_vocab), env);
    }
    LoadedModel loaded = with_draft_field([&] { return load_model(src); }, path, o);
    if (target != nullptr) check_same_vocabulary(loaded, *target);
    check_draft_vocab(loaded.config.vocab_size);
    return ModelDrafter::separate(build_model(loaded, src, o.draft_vocab), env);
  });
  // eagle and medusa: a draft trained by `speclab train-draft` for this target; draft_model names
  // its file (default: default_draft_path(target, name)).
  r.add("eagle", [target](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    if (target == nullptr) throw Error(ErrorKind::kConfig, "eagle needs the loaded target", "drafter", "name");
    const std::string path = o.draft_model.empty() ? default_draft_path(*target, "eagle") : o.draft_model;
    return std::make_unique<EagleDrafter>(with_draft_field([&] { return load_eagle_head(path, *target); }, path, o),
                                          env);
  });
  r.add("medusa", [target](const DrafterOptions& o, const DrafterEnv& env) -> std::unique_ptr<Drafter> {
    if (target == nullptr) throw Error(ErrorKind::kConfig, "medusa needs the loaded target", "drafter", "name");
    const std::string path = o.draft_model.empty() ? default_draft_path(*target, "medusa") : o.draft_model;
    return std::make_unique<MedusaDrafter>(with_draft_field([&] { return load_medusa_heads(path, *target); }, path, o),
                                           env);
  });
  // retrieval: the datastore `speclab train-draft` built for this target (architecture retrieval),
  // loaded once per file and shared by the entries that name it (each load sorts the corpus).
  auto stores = std::make_shared<std::map<std::string, std::shared_ptr<const Datastore>>>();
  r.add("retrieval", [target, stores](const DrafterOptions& o, const DrafterEnv&) -> std::unique_ptr<Drafter> {
    if (target == nullptr) throw Error(ErrorKind::kConfig, "retrieval needs the loaded target", "drafter", "name");
    const std::string path = o.draft_model.empty() ? default_draft_path(*target, "retrieval") : o.draft_model;
    std::shared_ptr<const Datastore>& store = (*stores)[path];
    if (!store) store = with_draft_field([&] { return load_datastore(path, *target); }, path, o);
    return std::make_unique<RetrievalDrafter>(store, o.retrieval_min, o.retrieval_max);
  });
  return r;
}

SessionParts::SessionParts(const LoadedTarget& target, const KvOptions& kv)
    : target_(target), kv_(std::make_unique<KvCacheManager>(kv)), registry_(drafter_registry(&target.info)) {
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
