// LoadedModel — everything a loader returns: config, canonical weights, tokenizer, chat
// template and provenance. Torch-free; models/llama builds the runtime model from it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/chat_template.h"
#include "framework/core/model_config.h"
#include "framework/core/model_source.h"
#include "models/tokenizers/tokenizer.h"
#include "models/weights.h"

namespace speclab {

struct LoadedModel {
  ModelConfig config;
  WeightMap weights;                     // canonical HF names, float32 or packed blocks (see weights.h)
  std::shared_ptr<Tokenizer> tokenizer;  // never null after a successful load
  ChatTemplate chat_template;            // family kNone when the model ships none
  std::string source;                    // path it was loaded from
  std::string format;                    // "gguf", "safetensors", "llama2c"
  std::string storage_types;             // on-disk tensor types, e.g. "Q4_1 x 211, Q6_K x 1, F32 x 61"
  uint64_t file_bytes = 0;               // bytes of weight data on disk
  bool add_bos = true;                   // prepend tokenizer->bos_id() when encoding a prompt
  ModelSource origin;                    // the resolved source: load_model(origin) loads it again
  // A synthetic model (models/loaders/synthetic.h): `weights` is empty and the model draws
  // random weights of the config's shapes on its own device.
  bool random_weights = false;
};

// Whether a `chat` setting ("on", "off" or "auto") applies the model's chat template: "on", or
// "auto" when the model ships one.
bool use_chat_template(const LoadedModel& m, const std::string& chat);

// Refuses a `chat` setting of "on" or "auto" when the model ships a chat template SpecLab cannot
// render (ChatTemplate::unrenderable()): Error(kConfig, file, field) that names the template and
// `off` (how the caller's user switches it off, e.g. "--chat off"). Until 2026-12-06 "auto" ran
// such a model on the bare prompt text without a word.
void check_chat_renders(const LoadedModel& m, const std::string& chat, const std::string& file,
                        const std::string& field, const std::string& off);

// The token ids of a prompt: `text` as the user message of the model's chat template (after a
// system message when `system` is not empty, then the assistant header) when use_chat, else
// `text` itself; BOS when the model wants one. The one rendering used by `speclab generate`,
// `speclab run` and `speclab check`, so their prompts are token-identical.
// Throws Error(kConfig, file = m.source, field "chat_template") when use_chat and the model
// ships no template; callers that can name their own option check chat_template.available().
TokenList encode_prompt(const LoadedModel& m, const std::string& text, bool use_chat, const std::string& system = "");

// The token ids of a conversation in the chat template: `system` (when not empty), then
// `messages` (user and assistant turns, in order), then the assistant header; BOS when the model
// wants one. encode_prompt(m, text, true, system) is encode_conversation(m, {{"user", text}},
// system). Throws as encode_prompt does when the model ships no template.
TokenList encode_conversation(const LoadedModel& m, const std::vector<ChatMessage>& messages,
                              const std::string& system = "");

}  // namespace speclab
