// Rendering a configured prompt into token ids, shared by `speclab run` (experiment_runner) and
// `speclab check` (equivalence_runner) so both feed the model the same tokens.
#pragma once

#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/io/experiment_config.h"
#include "models/loaded_model.h"

namespace speclab {

// Turn answers.size() (0-based) of conversation `p` (p.turns not empty): its user turns up to
// that one, each earlier turn followed by its answer (`answers`: the text the run generated for
// it, as FastChat and Spec-Bench put the model's own answers into MT-bench's second turn), then
// the assistant header, under prompts.system. Throws Error(kConfig, cfg.source_path,
// "prompts.field") where the chat template is not applied: a conversation needs one.
inline TokenList render_config_turn(const LoadedModel& m, const ExperimentConfig& cfg, const Prompt& p,
                                    const std::vector<std::string>& answers) {
  check_chat_renders(m, cfg.prompts.chat, cfg.source_path, "prompts.chat", "chat: off");
  if (!use_chat_template(m, cfg.prompts.chat) || !m.chat_template.available())
    throw Error(ErrorKind::kConfig,
                "expected the chat template for prompt '" + p.id + "', a conversation of " +
                    std::to_string(p.turns.size()) + " user turns (prompts.field names a list), found chat: " +
                    cfg.prompts.chat + (m.chat_template.available() ? "" : " with " + m.source + ", which ships none") +
                    "; use chat: on with a model that ships a template, or name one turn (field: turns.0)",
                cfg.source_path, "prompts.field");
  std::vector<ChatMessage> messages;
  for (size_t t = 0; t <= answers.size() && t < p.turns.size(); ++t) {
    messages.push_back({"user", p.turns[t]});
    if (t < answers.size()) messages.push_back({"assistant", answers[t]});
  }
  return encode_conversation(m, messages, cfg.prompts.system);
}

// p.text under prompts.chat / prompts.system of `cfg` (models/loaded_model.h: encode_prompt);
// for a conversation, its first turn (render_config_turn).
// Throws Error(kConfig, cfg.source_path, "prompts.chat") for chat: on with a model that ships no
// chat template, or chat: on or auto with one SpecLab cannot render (check_chat_renders), and
// Error(kConfig, ..., "prompts.system") for a system message where no template is applied.
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
  if (!p.turns.empty()) return render_config_turn(m, cfg, p, {});
  return encode_prompt(m, p.text, use_chat, cfg.prompts.system);
}

}  // namespace speclab
