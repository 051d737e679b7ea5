// ChatTemplate against jinja2 renderings of the real templates (SmolLM2's from its GGUF, the
// standard Llama 3 and Llama 2 chat templates): tests/fixtures/tokenizer/
// chat_template_reference.json, written by scripts/make_tokenizer_reference.py.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "models/chat_template.h"

using namespace speclab;
using nlohmann::json;

namespace {

json load_reference() {
  std::ifstream in(std::string(SPECLAB_SOURCE_DIR) + "/tests/fixtures/tokenizer/chat_template_reference.json");
  REQUIRE(in.good());
  return json::parse(in);
}

std::vector<ChatMessage> to_messages(const json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

const char* kSmolSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

}  // namespace

TEST_CASE("ChatTemplate: renders exactly like jinja2", "[chat]") {
  json ref = load_reference();
  int rendered = 0, rejected = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["template"];
    ChatTemplate t = ChatTemplate::from_jinja(ref["templates"][name].get<std::string>(), name);
    const auto messages = to_messages(c["messages"]);
    const bool gen = c["add_generation_prompt"];
    INFO("template " << name << ", " << c["messages"].dump() << ", add_generation_prompt " << gen);
    if (c["expected"].is_null()) {
      CHECK_THROWS_AS(t.render(messages, gen), Error);
      ++rejected;
    } else {
      CHECK(t.render(messages, gen) == c["expected"].get<std::string>());
      ++rendered;
    }
  }
  CHECK(rendered >= 40);
  CHECK(rejected >= 1);
}

TEST_CASE("ChatTemplate: detects the SmolLM2 template and its default system prompt", "[chat]") {
  json ref = load_reference();
  const std::string src = ref["templates"]["smollm2"];
  ChatTemplate t = ChatTemplate::from_jinja(src, "smollm2.gguf");
  CHECK(t.family() == ChatTemplate::Family::kChatML);
  CHECK(t.available());
  CHECK(t.default_system() == kSmolSystem);
  CHECK(t.render({{"user", "Hi"}}, true) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  // The same template as written in a tokenizer_config.json string with escaped newlines.
  std::string escaped;
  for (char ch : src) escaped += (ch == '\n') ? std::string("\\n") : std::string(1, ch);
  CHECK(ChatTemplate::from_jinja(escaped, "tokenizer_config.json").default_system() == kSmolSystem);

  CHECK(ChatTemplate::from_jinja(ref["templates"]["llama3"].get<std::string>(), "x").family() ==
        ChatTemplate::Family::kLlama3);
  CHECK(ChatTemplate::from_jinja(ref["templates"]["llama2"].get<std::string>(), "x").family() ==
        ChatTemplate::Family::kLlama2);
}

TEST_CASE("ChatTemplate: ChatML without a default system prompt", "[chat]") {
  // Qwen-style template where the system turn comes only from the messages.
  const std::string src =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
      "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  ChatTemplate t = ChatTemplate::from_jinja(src, "x");
  CHECK(t.default_system().empty());
  CHECK(t.render({{"user", "Hi"}}, false) == "<|im_start|>user\nHi<|im_end|>\n");
  CHECK(ChatTemplate::chatml("Sys").render({{"user", "Hi"}}, true) ==
        "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("ChatTemplate: unrecognised templates and roles are errors", "[chat][errors]") {
  try {
    ChatTemplate::from_jinja("{{ messages[0]['content'] }}", "model.gguf");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kUnsupported);
    CHECK(e.file() == "model.gguf");
    CHECK(e.field() == "chat_template");
  }
  CHECK_THROWS_AS(ChatTemplate::from_jinja("", "x"), Error);
  // Templates that share a family's marker but render otherwise (both were rendered as the
  // family's, found by a probe on 2026-12-06): Mistral v0.3's [INST] without <<SYS>> (the system
  // message joins the last user turn, no space before [/INST]) and Llama 3.1's, whose system block
  // names a knowledge cutoff and a date. The standard Llama 2 and 3.0 templates, the controls, are
  // recognised (above, and rendered like jinja2 in the first test case).
  const std::string mistral =
      "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
      "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
      "{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
      "{%- if loop.last and system_message is defined %}{{- '[INST] ' + system_message + '\\n\\n' + "
      "message['content'] + '[/INST]' }}{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
      "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token}}{%- endif %}{%- endfor %}";
  CHECK_THROWS_WITH(ChatTemplate::from_jinja(mistral, "x"), Catch::Contains("without <<SYS>> (Mistral's family)"));
  const std::string llama31 =
      "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
      "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
      "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}{{- system_message }}{{- \"<|eot_id|>\" }}";
  CHECK_THROWS_WITH(ChatTemplate::from_jinja(llama31, "x"), Catch::Contains("Llama 3.1-style"));
  // A Llama 3 header template that does not trim the messages (SpecLab's renders them trimmed).
  std::string no_trim = load_reference()["templates"]["llama3"].get<std::string>();
  no_trim.replace(no_trim.find(" | trim"), 7, "");
  CHECK_THROWS_WITH(ChatTemplate::from_jinja(no_trim, "x"), Catch::Contains("found one that does not"));
  ChatTemplate none;
  CHECK_FALSE(none.available());
  CHECK_THROWS_AS(none.render({{"user", "Hi"}}, true), Error);
  json ref = load_reference();
  ChatTemplate llama2 = ChatTemplate::from_jinja(ref["templates"]["llama2"].get<std::string>(), "x");
  CHECK_THROWS_AS(llama2.render({{"user", "a"}, {"user", "b"}}, true), Error);
  CHECK_THROWS_AS(llama2.render({{"assistant", "a"}}, true), Error);
}

TEST_CASE("ChatTemplate: ChatML variants are refused and plain ChatML templates are not", "[chat][errors]") {
  // Each of these writes <|im_start|> but renders otherwise; all were rendered as plain ChatML
  // until 2026-12-07 (a probe compared jinja2's renderings: 14 to 43 prompt tokens where
  // SpecLab's plain ChatML gave 19, or 10 where the default system prompt was dropped).
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"phi4",
       "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + "
       "message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + "
       "message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}{% if add_generation_prompt %}"
       "{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"},
      {"qwq",
       "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + "
       "'\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"},
      {"yi",
       "{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}{% endif %}"
       "{% if system_message is defined %}{{ system_message }}{% endif %}{% for message in messages %}"
       "{% set content = message['content'] %}{% if message['role'] == 'user' %}{{ '<|im_start|>user\\n' + content + "
       "'<|im_end|>\\n<|im_start|>assistant\\n' }}{% elif message['role'] == 'assistant' %}{{ content + '<|im_end|>' + "
       "'\\n' }}{% endif %}{% endfor %}"},
      {"metadata",
       "{%- set system_message = '## Metadata\\n\\nKnowledge Cutoff Date: June 2025\\n\\n' -%}{{- "
       "'<|im_start|>system\\n' + system_message + '<|im_end|>\\n' -}}{%- for message in messages %}{{ '<|im_start|>' + "
       "message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
       "{{ '<|im_start|>assistant\\n' }}{% endif %}"},
      {"variable default",
       "{% set default_system = 'You are a helpful assistant.' %}{% if messages[0]['role'] != 'system' %}{{ "
       "'<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}{% endif %}{% for message in messages %}{{ "
       "'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
      {"trim",
       "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + "
       "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
      {"raw text",
       "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
       "{% endfor %}<|im_start|>assistant\n"},
      // From the review of the first version of the check, which took these for plain ChatML:
      {"default split over literals",
       "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n' + 'You are a helpful assistant.' + "
       "'<|im_end|>\n' }}{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
       "message['content'] + '<|im_end|>\n' }}{% endfor %}{{ '<|im_start|>assistant\n' }}"},
      {"conditional set",
       "{%- set system_message = messages[0]['content'] if messages[0]['role'] == 'system' else 'You are helpful.' %}"
       "{{ '<|im_start|>system\n' + system_message + '<|im_end|>\n' }}{% for message in messages %}{{ '<|im_start|>' + "
       "message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}{{ '<|im_start|>assistant\n' }}"},
      {"namespace",
       "{% set ns = namespace(sys='You are helpful.') %}{% for message in messages %}{{ '<|im_start|>' + "
       "message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}{{ '<|im_start|>assistant\n' }}"},
      {"colon after the role",
       "{% for message in messages %}{{ '<|im_start|>' + message['role'] + ': ' + message['content'] + "
       "'<|im_end|>\n' }}{% endfor %}{{ '<|im_start|>assistant\n' }}"},
      {"no line break after im_end",
       "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
       "' ' }}{% endfor %}{{ '<|im_start|>assistant\n' }}"},
  };
  for (const auto& [name, src] : variants) {
    INFO("template " << name);
    try {
      ChatTemplate::from_jinja(src, "model.gguf");
      FAIL_CHECK("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kUnsupported);
      CHECK(e.file() == "model.gguf");
      CHECK(e.field() == "chat_template");
      CHECK_THAT(e.message(), Catch::Contains("ChatML variant"));
    }
  }
  // The controls: SmolLM2's and both Qwen2.5-Coder GGUFs' templates (rendered like jinja2 in
  // test_qwen and above), and Qwen2.5-Math's, a plain ChatML template with another default
  // system prompt.
  json ref = load_reference();
  CHECK(ChatTemplate::from_jinja(ref["templates"]["smollm2"].get<std::string>(), "x").default_system() == kSmolSystem);
  std::ifstream qin(std::string(SPECLAB_SOURCE_DIR) + "/tests/fixtures/qwen/chat_template.json");
  REQUIRE(qin.good());
  const json qwen = json::parse(qin);
  for (const char* size : {"0.5b", "1.5b"}) {
    INFO("qwen " << size);
    const ChatTemplate t = ChatTemplate::from_jinja(qwen["templates"][size].get<std::string>(), size);
    CHECK(t.default_system() == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  }
  const std::string math =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nPlease reason step by step, and put your final answer "
      "within \\\\boxed{}.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if (message.role == \"user\") "
      "or (message.role == \"system\" and not loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + "
      "message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- "
      "'<|im_start|>assistant\\n' }}{%- endif %}";
  CHECK(ChatTemplate::from_jinja(math, "x").default_system() ==
        "Please reason step by step, and put your final answer within \\boxed{}.");
  // Plain ChatML written per role, and an empty {% set %}, render as plain ChatML: accepted.
  const std::string per_role =
      "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|im_start|>user\n' + message['content'] + "
      "'<|im_end|>\n' }}{% elif message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' + message['content'] + "
      "'<|im_end|>\n' }}{% elif message['role'] == 'system' %}{{ '<|im_start|>system\n' + message['content'] + "
      "'<|im_end|>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  CHECK(ChatTemplate::from_jinja(per_role, "x").family() == ChatTemplate::Family::kChatML);
  const std::string empty_set =
      "{%- set system_message = '' -%}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
      "}}{% endif %}";
  CHECK(ChatTemplate::from_jinja(empty_set, "x").family() == ChatTemplate::Family::kChatML);
}
