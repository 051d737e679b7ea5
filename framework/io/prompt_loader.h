// Prompt loading: the prompts an experiment runs, from its `prompts` section (PromptsOptions).
//
// JSONL files (".jsonl", or ".jsonl.gz" read decompressed) come first, in the order listed and
// relative to the config file's directory, then `sources` (each file with its own keys, a
// category filter and a per-category cap, PromptSource), then the inline prompts; `limit` keeps
// the first N.
// One JSON object per line (blank lines skipped, a UTF-8 BOM allowed); `field`, `id_field` and
// `category_field` are dotted paths ("turns.0" indexes objects and arrays). Ids default to
// "<file name>:<line>" and "inline:<n>".
#pragma once

#include <string>
#include <vector>

namespace speclab {

struct ExperimentConfig;

struct Prompt {
  std::string id, category, text;
};

// Error(kIo) for a file that cannot be read; Error(kBadInput) naming "<file>:<line>" for a line
// that is not a JSON object or lacks the field, for a corrupt .gz, for more than 1 GiB of text,
// and when there are no prompts at all; Error(kConfig) naming the config file and
// `prompts.sources[i].categories` for a listed category that no line of that file has.
// Errors about the config's keys name them as a run config's `prompts.*`.
std::vector<Prompt> load_prompts(const ExperimentConfig& config);

}  // namespace speclab
