// DrafterOptions — the YAML `drafter` section / `speclab generate --drafter ...` flags.
// Knob names follow HF GenerationConfig / vLLM speculative_config where one exists.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace speclab {

struct DrafterOptions {
  std::string name = "prompt_lookup";   // built-in name, or a plugin's name when `plugin` is set
  std::string plugin;                   // path to a plugin .so (optional)
  int num_speculative_tokens = 4;       // gamma: max draft tokens per step (vLLM name; HF num_assistant_tokens)
  // Draft-length schedule: "constant", "heuristic" (HF: +2 after full acceptance, -1 otherwise) or
  // "cost" (the gamma in 0..num_speculative_tokens with the most tokens per second under measured
  // costs; framework/draft/draft_length.h).
  std::string schedule = "constant";
  int max_speculative_tokens = 16;      // cap for the heuristic schedule (only it reads it)
  // Stop drafting when the drafter's top probability falls below this (HF
  // assistant_confidence_threshold, llama.cpp --draft-p-min). 0 = off.
  double confidence_threshold = 0.0;
  // The first draft position (1-based) the threshold applies to: earlier tokens are always
  // drafted (e.g. 2: every step drafts at least one token, a second and later only while
  // confident). 1 = from the first.
  int confidence_from_token = 1;
  // prompt_lookup (HF prompt_lookup_num_tokens is gamma; vLLM prompt_lookup_min/max)
  int prompt_lookup_min = 1;
  int prompt_lookup_max = 3;
  // Any drafter but prompt_lookup: draft the continuation of the latest earlier n-gram match
  // (prompt_lookup_min..prompt_lookup_max, as prompt_lookup does) when there is one, and ask the
  // drafter only when there is none, for at most fallback_speculative_tokens of its own tokens
  // (0: the step's gamma; a larger value than a step's gamma is capped by it).
  // framework/draft/builtin/sources_first.h.
  bool prompt_lookup_first = false;
  int fallback_speculative_tokens = 0;
  // retrieval: the suffix lengths of the context matched in the datastore, longest first
  // (framework/draft/builtin/retrieval_drafter.h).
  int retrieval_min = 1;
  int retrieval_max = 8;
  // Any drafter but retrieval: where prompt lookup (with prompt_lookup_first) has no match, draft
  // the continuation of the context's longest suffix match (retrieval_min..retrieval_max tokens)
  // in the target's default retrieval datastore, and ask the drafter only when neither matched.
  // fallback_speculative_tokens caps the datastore's tokens as the drafter's. Matches as short as
  // one token are found for nearly every context, so a retrieval_min of 2 or more leaves the
  // drafter the steps without a longer match. framework/draft/builtin/sources_first.h.
  bool retrieval_first = false;
  // With retrieval_first: the datastore it reads (a .safetensors from `speclab train-draft`,
  // architecture: retrieval, built for this target); "": the target's default one, as the
  // retrieval drafter's (draft_model's comment below). The retrieval drafter itself names its
  // datastore with draft_model.
  std::string retrieval_datastore;
  // layer_skip: the target's layers the draft runs: an explicit ascending list, or the first
  // `draft_layers_first` layers when the list is empty.
  std::vector<int64_t> draft_layers;
  int64_t draft_layers_first = 0;
  // draft_model: a model path or named entry (+ format); eagle, medusa: the trained draft, and
  // retrieval: its datastore (.safetensors from `speclab train-draft`; default
  // .cache/drafts/<target file stem>.<eagle|medusa|retrieval>.safetensors, else the one shipped
  // under assets/drafts/)
  std::string draft_model;
  std::string draft_model_format = "auto";
  // draft_model: a llama2.c draft's tokenizer.bin ("": the one beside the model).
  std::string draft_model_tokenizer;
  // draft_model: compute the draft's LM head over only its N most frequent tokens (FR-Spec, Zhao
  // et al. 2025), taken as the N lowest token ids (byte-level BPE ids follow merge order, i.e.
  // frequency in the tokenizer's corpus) plus the end-of-sequence and <|...|> control tokens.
  // q is zero outside them, so the output stays the target's (the verifier rejects what q
  // cannot propose); the draft reads N / vocab of its head's bytes. 0 = the whole vocabulary.
  int64_t draft_vocab = 0;
  // Free-form parameters for plugins (key -> value as text).
  std::map<std::string, std::string> params;

  // Throws Error(kConfig, ..., "drafter", <field>) with expected vs found.
  void validate() const;
  // The most tokens one step drafts: max_speculative_tokens under the heuristic schedule, gamma
  // under constant and cost (cost picks 0..gamma; until 2026-12-06 this said its cap, which cost
  // never reads). A confidence_from_token beyond it never applies.
  int longest_draft() const { return schedule == "heuristic" ? max_speculative_tokens : num_speculative_tokens; }
};

// The built-in drafter names, in registration order: prompt_lookup, layer_skip, draft_model, eagle,
// medusa, retrieval. The one list (config validation reads it; the application's registry registers exactly these).
const std::vector<std::string>& builtin_drafter_names();

// layer_skip's layers for a target of `n_layers` layers: draft_layers when given, else the first
// draft_layers_first layers (default: the first half). Error(kConfig, "drafter",
// "draft_layers_first") when more layers are asked for than the target has.
std::vector<int64_t> layer_skip_layers(const DrafterOptions& options, int64_t n_layers);

// Which built-in drafters read a DrafterOptions key, by its YAML name ("prompt_lookup_max",
// "draft_layers", "params", ...): the one table behind generate's "does not read it" and the
// config's refusal of a key written on, or swept over, entries whose drafters would ignore it.
struct DrafterKeyReaders {
  bool listed = false;               // false: every built-in reads the key (gamma, schedule, ...)
  std::vector<std::string> readers;  // the built-ins that read it; empty: only a plugin's drafter
};
DrafterKeyReaders drafter_key_readers(const std::string& key);

// Whether the drafter of `o` reads `key`: a plugin's may read any key; a built-in reads those
// drafter_key_readers lists for it, and its sources more: prompt_lookup_first adds
// prompt_lookup_min/max, retrieval_first retrieval_min/max and confidence_threshold /
// confidence_from_token (the datastore source gates on them).
bool drafter_reads_key(const DrafterOptions& o, const std::string& key);

// The keys of drafter_key_readers' table that `o` sets off their DrafterOptions defaults and its
// drafter does not read (empty for a plugin's), in the table's order.
std::vector<std::string> unread_drafter_keys(const DrafterOptions& o);

// A drafter name as the registry knows it: vLLM's method name "ngram" is prompt_lookup (YAML's
// drafter.name and generate's --drafter alike); any other name as given.
std::string canonical_drafter_name(const std::string& name);

}  // namespace speclab
