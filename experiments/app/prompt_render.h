// Rendering a configured prompt into token ids, shared by `speclab run` (experiment_runner) and
// `speclab check` (equivalence_runner) so both feed the model the same tokens.
#pragma once

#include "framework/core/error.h"
#include "framework/io/experiment_config.h"
#include "models/loaded_model.h"

namespace speclab {

// p.text under prompts.chat / prompts.system of `cfg` (models/loaded_model.h: encode_prompt).
// Throws Error(kConfig, cfg.source_path, "prompts.chat") for chat: on with a model that ships no
// chat template, or chat: on or auto with one SpecLab cannot render (check_chat_renders), and Error(kConfig, ..., "prompts.system") for a system message where no template
// is applied.
inline TokenList render_config_prompt(const LoadedModel& m, const ExperimentConfig& cfg, const Prompt& p) {
  check_chat_renders(m, cfg.prompts.chat, cfg.source_path, "prompts.chat", "chat: off");
  const bool use_chat = use_chat_template(m, cfg.prompts.chat);
  if (use_chat && !m.chat_template.available())
    throw Error(ErrorKind::kConfig, "expected a model with a chat template for chat: on, found none in " + m.source,
                cfg.source_path, "prompts.chat");
  // A system message goes into the chat template: without one it was dropped silently.
  if (!use_chat && !cfg.prompts.system.empty())
    throw Error(ErrorKind::kConfig,
                "expected no system message where no chat template is applied (chat: " + cfg.prompts.chat +
                    (cfg.prompts.chat == "auto" ? ", and " + m.source + " ships none" : "") +
                    "): it would be dropped; remove it or use a model with a chat template",
                cfg.source_path, "prompts.system");
  return encode_prompt(m, p.text, use_chat, cfg.prompts.system);
}

}  // namespace speclab
