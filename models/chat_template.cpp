#include "models/chat_template.h"

#include "framework/core/error.h"
#include "models/tokenizers/unicode.h"

namespace speclab {

namespace {

// The body of the Jinja string literal that starts right after s[quote_pos] (a ' or "),
// with its escapes resolved; npos in `end` when the literal is not closed.
std::string read_literal(const std::string& s, size_t quote_pos, size_t& end) {
  const char quote = s[quote_pos];
  std::string out;
  for (size_t i = quote_pos + 1; i < s.size(); ++i) {
    char c = s[i];
    if (c == quote) {
      end = i;
      return out;
    }
    if (c == '\\' && i + 1 < s.size()) {
      char e = s[++i];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        default: out += e;  // \\, \', \"
      }
      continue;
    }
    out += c;
  }
  end = std::string::npos;
  return out;
}

// The default system prompt a ChatML template writes as one literal
// '<|im_start|>system\n...<|im_end|>\n' (SmolLM2, Qwen2), or "" when there is none.
std::string find_default_system(const std::string& jinja) {
  const std::string head = "<|im_start|>system\n";
  const std::string tail = "<|im_end|>";
  for (size_t pos = jinja.find('<'); pos != std::string::npos; pos = jinja.find('<', pos + 1)) {
    if (pos == 0 || (jinja[pos - 1] != '\'' && jinja[pos - 1] != '"')) continue;
    size_t end;
    const std::string lit = read_literal(jinja, pos - 1, end);
    if (end == std::string::npos) break;
    if (lit.compare(0, head.size(), head) != 0) continue;
    const size_t stop = lit.find(tail, head.size());
    if (stop == std::string::npos || stop == head.size()) continue;  // e.g. '<|im_start|>system\n' + content
    return lit.substr(head.size(), stop - head.size());
  }
  return {};
}

// Python's str.strip() (what Jinja's trim filter and .strip() call).
std::string py_strip(const std::string& s) {
  auto is_space = [](uint32_t cp) {
    return unicode::is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F);
  };
  size_t b = 0;
  while (b < s.size()) {
    unicode::Decoded d = unicode::decode_utf8(s, b);
    if (!is_space(d.cp)) break;
    b += d.len;
  }
  size_t e = b;
  for (size_t i = b; i < s.size();) {
    unicode::Decoded d = unicode::decode_utf8(s, i);
    i += d.len;
    if (!is_space(d.cp)) e = i;
  }
  return s.substr(b, e - b);
}

std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& default_system) {
  std::string out;
  // The template injects its system turn inside the message loop, only when the first
  // message is not a system message (so not at all for an empty conversation).
  if (!messages.empty() && messages[0].role != "system" && !default_system.empty())
    out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + py_strip(m.content) + "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama 2 chat: optional system message folded into the first user turn; turns must
// alternate user/assistant; each user turn after the first starts with a literal "<s>".
std::string render_llama2(const std::vector<ChatMessage>& messages) {
  if (messages.empty())  // the template reads messages[0]
    throw Error(ErrorKind::kBadInput, "expected at least one message, found none", "", "messages");
  size_t first = 0;
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (has_system) first = 1;
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const size_t idx = i - first;
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != (idx % 2 == 0))
      throw Error(ErrorKind::kBadInput,
                  "expected roles alternating user/assistant/user/..., found \"" + m.role +
                      "\" at message " + std::to_string(i),
                  "", "messages");
    std::string content = m.content;
    if (idx == 0 && has_system)
      content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + m.content;
    if (m.role == "user")
      out += std::string(idx == 0 ? "" : "<s>") + "[INST] " + py_strip(content) + " [/INST]";
    else if (m.role == "assistant")
      out += " " + py_strip(content) + " </s>";
  }
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja, const std::string& source) {
  ChatTemplate t;
  if (jinja.find("<|im_start|>") != std::string::npos) {
    t.family_ = Family::kChatML;
    t.default_system_ = find_default_system(jinja);
  } else if (jinja.find("<|start_header_id|>") != std::string::npos) {
    // Llama 3.1 and later write a system block of their own (knowledge cutoff and date, tools):
    // rendered as 3.0's, every prompt lost it, silently (found by a probe on 2026-12-06).
    if (jinja.find("Cutting Knowledge Date") != std::string::npos || jinja.find("ipython") != std::string::npos)
      throw Error(ErrorKind::kUnsupported,
                  "expected a Llama 3.0 chat template, found a Llama 3.1-style one (it writes a \"Cutting Knowledge "
                  "Date\" system block and tool turns), which SpecLab does not render",
                  source, "chat_template");
    t.family_ = Family::kLlama3;
  } else if (jinja.find("[INST]") != std::string::npos) {
    // Llama 2 folds the system message into a <<SYS>> block; Mistral's [INST] templates do not
    // (they join it to the last user turn with a blank line, and put no space before [/INST]):
    // they were rendered as Llama 2's, every prompt tokenized differently from HF's.
    if (jinja.find("<<SYS>>") == std::string::npos)
      throw Error(ErrorKind::kUnsupported,
                  "expected a Llama 2 chat template ([INST] with a <<SYS>> block), found an [INST] template "
                  "without <<SYS>> (Mistral's family), which SpecLab does not render",
                  source, "chat_template");
    t.family_ = Family::kLlama2;
  } else {
    throw Error(ErrorKind::kUnsupported,
                "expected a ChatML (<|im_start|>), Llama 3 (<|start_header_id|>) or Llama 2 "
                "([INST]) chat template, found " +
                    (jinja.empty() ? std::string("an empty one") : "an unrecognised one"),
                source, "chat_template");
  }
  return t;
}

ChatTemplate ChatTemplate::chatml(std::string default_system) {
  ChatTemplate t;
  t.family_ = Family::kChatML;
  t.default_system_ = std::move(default_system);
  return t;
}

ChatTemplate ChatTemplate::unrenderable_one(std::string why) {
  ChatTemplate t;
  t.unrenderable_ = std::move(why);
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  switch (family_) {
    case Family::kChatML: return render_chatml(messages, add_generation_prompt, default_system_);
    case Family::kLlama3: return render_llama3(messages, add_generation_prompt);
    case Family::kLlama2: return render_llama2(messages);
    case Family::kNone: break;
  }
  throw Error(ErrorKind::kUnsupported, "expected a chat template, found none", "", "chat_template");
}

}  // namespace speclab
