#include "models/chat_template.h"

#include <algorithm>
#include <string>
#include <vector>

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

// What a template writes and does, as far as the ChatML check below needs: each tag ({{ }} or
// {% %}) with its text and its string literals in order, and the text outside tags.
struct JinjaLiteral {
  std::string text;        // escapes resolved
  bool subscript = false;  // a key in [...] (message['content']), not text written out
};
struct JinjaTag {
  bool statement = false;  // {% %}; else {{ }}
  std::string text;        // with each literal as '' (empty), 'k' (subscript) or '#' (other text)
  std::vector<JinjaLiteral> literals;
};
struct JinjaPieces {
  std::vector<JinjaTag> tags;
  std::vector<std::string> raw;  // text outside tags, emitted as it stands
};

JinjaPieces split_jinja(const std::string& jinja) {
  JinjaPieces p;
  size_t raw_start = 0, i = 0;
  while (true) {
    size_t open = jinja.find('{', i);
    while (open != std::string::npos && !(open + 1 < jinja.size() && (jinja[open + 1] == '{' ||
                                                                      jinja[open + 1] == '%' || jinja[open + 1] == '#')))
      open = jinja.find('{', open + 1);  // a lone '{' is raw text
    if (open == std::string::npos) {
      if (raw_start < jinja.size()) p.raw.push_back(jinja.substr(raw_start));
      return p;
    }
    if (open > raw_start) p.raw.push_back(jinja.substr(raw_start, open - raw_start));
    const char kind = jinja[open + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t j = open + 2;
    JinjaTag tag;
    tag.statement = kind == '%';
    while (j < jinja.size() && jinja.compare(j, 2, close) != 0) {
      if (kind != '#' && (jinja[j] == '\'' || jinja[j] == '"')) {
        size_t end;
        JinjaLiteral lit;
        lit.text = read_literal(jinja, j, end);
        size_t before = tag.text.find_last_not_of(' ');
        lit.subscript = before != std::string::npos && tag.text[before] == '[';
        tag.text += lit.text.empty() ? "''" : lit.subscript ? "'k'" : "'#'";
        tag.literals.push_back(std::move(lit));
        if (end == std::string::npos) {  // unclosed: the rest is one literal
          p.tags.push_back(std::move(tag));
          return p;
        }
        j = end + 1;
        continue;
      }
      tag.text += jinja[j++];
    }
    if (kind != '#') p.tags.push_back(std::move(tag));
    raw_start = i = std::min(j + 2, jinja.size());
  }
}

// Why a template that writes <|im_start|> would not render as plain ChatML (SmolLM2's, Qwen2's:
// "<|im_start|>" + role + "\n" + content + "<|im_end|>\n" per message, an optional default
// system turn written as one literal, and "<|im_start|>assistant\n" as the generation prompt), or
// "" when it would. Every such template was rendered as plain ChatML until 2026-12-07 (found by a
// probe): Phi-4's <|im_sep|>, a reasoning model's "<think>" generation prompt, Yi's bare system
// text, a trimmed content, a default system prompt held in a {% set %} variable or split over
// literals, another separator after the role or none after <|im_end|>.
std::string chatml_variant(const std::string& jinja, const std::string& default_system) {
  const JinjaPieces p = split_jinja(jinja);
  bool role_line = false, generation_prompt = false;
  const std::string default_turn = "<|im_start|>system\n" + default_system + "<|im_end|>\n";
  const auto shown = [](const std::string& lit) {
    std::string out;
    for (char c : lit) out += c == '\n' ? std::string("\\n") : std::string(1, c);
    return out.size() > 60 ? out.substr(0, 57) + "..." : out;
  };
  for (const std::string& r : p.raw) {
    if (r.find("<|im_sep|>") != std::string::npos) return "it writes <|im_sep|> after the role (Phi-4's format)";
    if (r.find("<|im_start|>") != std::string::npos) return "it writes <|im_start|> as text outside its tags";
  }
  if (jinja.find("<think>") != std::string::npos || jinja.find("</think>") != std::string::npos)
    return "it opens or strips <think> blocks (a reasoning model's format)";
  for (const JinjaTag& t : p.tags) {
    for (const char* f : {"trim", ".strip(", ".lstrip(", ".rstrip("})
      if (t.text.find(f) != std::string::npos) return std::string("it trims text (") + f + ")";
    // {% set name = ... %} with text of its own: a default system prompt or a metadata block the
    // template may write, where only literals in place are read. An empty literal, a subscript key
    // and a value without literals (tool_call.function) are no text.
    if (t.statement) {
      const size_t set = t.text.find_first_not_of(" -+");
      if (set != std::string::npos && t.text.compare(set, 4, "set ") == 0 && t.text.find("'#'") != std::string::npos)
        return "it keeps text in a {% set %} variable that it may write into the prompt";
      continue;
    }
    const std::vector<JinjaLiteral>& lits = t.literals;
    for (size_t i = 0; i < lits.size(); ++i) {
      const std::string& lit = lits[i].text;
      if (lits[i].subscript) continue;
      if (lit.find("<|im_sep|>") != std::string::npos) return "it writes <|im_sep|> after the role (Phi-4's format)";
      // The next literal written out in the same expression, if any.
      const JinjaLiteral* next = nullptr;
      for (size_t j = i + 1; j < lits.size() && !next; ++j)
        if (!lits[j].subscript) next = &lits[j];
      if (lit == "<|im_start|>") {
        role_line = true;
        if (next && next->text.compare(0, 1, "\n") != 0)
          return "it writes '" + shown(next->text) + "' after the role, not a line break";
        continue;
      }
      if (lit == "<|im_end|>" && next && next->text.compare(0, 1, "\n") != 0)
        return "it writes '" + shown(next->text) + "' after <|im_end|>, not a line break";
      if (lit.find("<|im_start|>") == std::string::npos) continue;
      if (lit == "<|im_start|>assistant\n") generation_prompt = true;
      if (lit == "<|im_start|>user\n" || lit == "<|im_start|>assistant\n" || lit == "<|im_start|>system\n") {
        role_line = true;
        // A role header followed by other text written out in the same expression, other than
        // the turn's end: a system turn (or a default) the check cannot read.
        for (size_t j = i + 1; j < lits.size(); ++j)
          if (!lits[j].subscript && !lits[j].text.empty() && lits[j].text != "<|im_end|>" &&
              lits[j].text != "<|im_end|>\n" && lits[j].text != "\n")
            return "it writes '" + shown(lits[j].text) + "' into a turn after '" + shown(lit) + "'";
        continue;
      }
      if (lit == "<|im_start|>assistant" || lit == "<|im_start|>user" ||
          (!default_system.empty() && lit == default_turn))
        continue;
      return "it writes '" + shown(lit) + "', which plain ChatML does not";
    }
  }
  if (!role_line) return "it writes no '<|im_start|>' + role line";
  if (!generation_prompt) return "its generation prompt is not '<|im_start|>assistant\\n'";
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
    const std::string variant = chatml_variant(jinja, t.default_system_);
    if (!variant.empty())
      throw Error(ErrorKind::kUnsupported,
                  "expected a plain ChatML chat template, found a ChatML variant (" + variant +
                      "), which SpecLab does not render",
                  source, "chat_template");
  } else if (jinja.find("<|start_header_id|>") != std::string::npos) {
    // Llama 3.1 and later write a system block of their own (knowledge cutoff and date, tools):
    // rendered as 3.0's, every prompt lost it, silently (found by a probe on 2026-12-06).
    if (jinja.find("Cutting Knowledge Date") != std::string::npos || jinja.find("ipython") != std::string::npos)
      throw Error(ErrorKind::kUnsupported,
                  "expected a Llama 3.0 chat template, found a Llama 3.1-style one (it writes a \"Cutting Knowledge "
                  "Date\" system block and tool turns), which SpecLab does not render",
                  source, "chat_template");
    // 3.0's template trims each message (`| trim`), which render_llama3 does; one that does not kept
    // the spaces SpecLab stripped (found by a probe on 2026-12-07).
    if (jinja.find("trim") == std::string::npos && jinja.find(".strip(") == std::string::npos)
      throw Error(ErrorKind::kUnsupported,
                  "expected a Llama 3.0 chat template, which trims each message (| trim), found one that does not, "
                  "which SpecLab does not render",
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
