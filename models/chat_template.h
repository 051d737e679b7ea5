// ChatTemplate — renders a list of chat messages into prompt text for an instruct model.
//
// Templates are recognised from the Jinja source shipped with the model (GGUF
// `tokenizer.chat_template`, HF `tokenizer_config.json`) and rendered natively: ChatML
// (SmolLM2, Qwen2; with the default system prompt the template injects when the first
// message is not a system message), Llama 3.0 header ids, and Llama 2 [INST] with its <<SYS>>
// block. An unrecognised template throws Error(kUnsupported) naming the source, as do templates
// that share a family's marker but render otherwise: Llama 3.1-style ones (a "Cutting Knowledge
// Date" system block, tool turns), [INST] templates without <<SYS>> (Mistral's), and ChatML
// variants (<|im_sep|>, <think>, trimmed content, text in {% set %} variables, other literals
// around <|im_start|>; chatml_variant() in the .cpp lists what plain ChatML may write).
#pragma once

#include <string>
#include <vector>

namespace speclab {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  enum class Family { kNone, kChatML, kLlama3, kLlama2 };

  ChatTemplate() = default;
  // Detects the family from Jinja source text. `source` names the file for errors.
  static ChatTemplate from_jinja(const std::string& jinja, const std::string& source);
  static ChatTemplate chatml(std::string default_system = {});
  // A template the model ships that from_jinja() does not recognise: not available(), but
  // unrenderable() says why, so that chat: auto refuses it instead of silently running without
  // it. `why`: from_jinja's error, "<file>: <field>: <message>".
  static ChatTemplate unrenderable_one(std::string why);

  Family family() const { return family_; }
  bool available() const { return family_ != Family::kNone; }
  // Empty unless the model ships a template SpecLab cannot render (unrenderable_one).
  const std::string& unrenderable() const { return unrenderable_; }
  const std::string& default_system() const { return default_system_; }

  // Renders messages and, when add_generation_prompt, the assistant turn header.
  // The BOS token is *not* included (the tokenizer adds it when the model wants one).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  Family family_ = Family::kNone;
  std::string default_system_;
  std::string unrenderable_;
};

}  // namespace speclab
