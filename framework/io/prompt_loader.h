// Prompt loading: the prompts an experiment runs, from its `prompts` section (PromptsOptions).
//
// JSONL files (".jsonl", or ".jsonl.gz" read decompressed) come first, in the order listed and
// relative to the config file's directory, then `sources` (each file with its own keys, a
// category filter and a per-category cap, PromptSource), then the inline prompts; `limit` keeps
// the first N.
// One JSON object per line (blank lines skipped, a UTF-8 BOM allowed); `field`, `id_field` and
// `category_field` are dotted paths ("turns.0" indexes objects and arrays). Ids default to
// "<file name>:<line>" and "inline:<n>".
//
// Conversations: where `field` names a list of strings (MT-bench's `turns`), the prompt is a
// conversation of that many user turns. `speclab run` answers each turn in the chat template and
// puts its answer into the next turn's prompt (experiments/app/prompt_render.h). A list of one
// string is a plain prompt.
#pragma once

#include <string>
#include <vector>

namespace speclab {

struct ExperimentConfig;

struct Prompt {
  std::string id, category;
  // The prompt text; for a conversation, conversation_text(turns) (what /prompts records).
  std::string text;
  // A conversation's user turns, in order (two or more); empty for a one-message prompt.
  std::vector<std::string> turns;
};

// A conversation's turns as /prompts records them (and its answers as /runs/text does): a JSON
// array of strings, a byte that is not well-formed UTF-8 written as U+FFFD.
std::string conversation_text(const std::vector<std::string>& turns);

// Error(kIo) for a file that cannot be read; Error(kBadInput) naming "<file>:<line>" for a line
// that is not a JSON object or lacks the field, for a corrupt .gz, for more than 1 GiB of text,
// and when there are no prompts at all; Error(kConfig) naming the config file and
// `prompts.sources[i].categories` for a listed category that no line of that file has.
// Errors about the config's keys name them as a run config's `prompts.*`.
std::vector<Prompt> load_prompts(const ExperimentConfig& config);

}  // namespace speclab
