#include "framework/draft/drafter_options.h"

#include <algorithm>
#include <functional>

#include "framework/core/error.h"
#include "framework/core/model_source.h"
#include "framework/io/config_util.h"

namespace speclab {

namespace {
void bad(const std::string& field, const std::string& msg) { throw Error(ErrorKind::kConfig, msg, "drafter", field); }
}  // namespace

void DrafterOptions::validate() const {
  if (name.empty()) bad("name", "expected a drafter name, found nothing");
  if (num_speculative_tokens <= 0 || num_speculative_tokens > 64)
    bad("num_speculative_tokens", "expected gamma in 1..64, found " + std::to_string(num_speculative_tokens));
  if (schedule != "constant" && schedule != "heuristic" && schedule != "cost")
    bad("schedule", "expected constant, heuristic or cost, found '" + schedule + "'");
  // The heuristic schedule's cap, which only that schedule reads: under constant and cost a
  // gamma above the default 16 needed it raised too, to no effect (until 2026-12-06).
  if (max_speculative_tokens < 1 || max_speculative_tokens > 64)
    bad("max_speculative_tokens", "expected 1..64, found " + std::to_string(max_speculative_tokens));
  if (schedule == "heuristic" && max_speculative_tokens < num_speculative_tokens)
    bad("max_speculative_tokens", "expected gamma (" + std::to_string(num_speculative_tokens) +
                                      ") <= max_speculative_tokens <= 64 under the heuristic schedule, found " +
                                      std::to_string(max_speculative_tokens) +
                                      (max_speculative_tokens == 16 ? " (16 is the default: a gamma above 16 needs it set too)"
                                                                    : ""));
  if (!(confidence_threshold >= 0.0 && confidence_threshold < 1.0))
    bad("confidence_threshold", "expected a probability in [0, 1), found " + config::to_text(confidence_threshold));
  if (confidence_from_token < 1 || confidence_from_token > 64)
    bad("confidence_from_token", "expected a draft position 1..64, found " + std::to_string(confidence_from_token));
  if (confidence_from_token > 1 && confidence_threshold == 0.0)
    bad("confidence_from_token", "expected confidence_threshold > 0 beside it (it says where the threshold starts), "
                                 "found confidence_from_token: " + std::to_string(confidence_from_token) +
                                 " and confidence_threshold: 0");
  // The largest n-gram matched (HF max_matching_ngram_size): each step scans the context once per length.
  if (prompt_lookup_max < 1 || prompt_lookup_max > 64)
    bad("prompt_lookup_max", "expected an n-gram length in 1..64, found " + std::to_string(prompt_lookup_max));
  if (prompt_lookup_min < 1 || prompt_lookup_max < prompt_lookup_min)
    bad("prompt_lookup_min", "expected 1 <= prompt_lookup_min <= prompt_lookup_max, found " +
                                 std::to_string(prompt_lookup_min) + " and " + std::to_string(prompt_lookup_max));
  if (prompt_lookup_first && name == "prompt_lookup")
    bad("prompt_lookup_first", "expected another drafter to fall back on; prompt_lookup already drafts by lookup");
  // Not capped at num_speculative_tokens: a step's gamma caps it anyway, so a gamma sweep can keep one value.
  if (fallback_speculative_tokens < 0 || fallback_speculative_tokens > 64)
    bad("fallback_speculative_tokens", "expected 0..64 (0 = the step's gamma), found " +
                                           std::to_string(fallback_speculative_tokens));
  if (retrieval_first && name == "retrieval")
    bad("retrieval_first", "expected another drafter to fall back on; retrieval already drafts from the datastore");
  if (!retrieval_datastore.empty() && !retrieval_first)
    bad("retrieval_datastore", std::string("expected retrieval_first: true beside it (it names the datastore "
                                           "retrieval_first reads), found retrieval_first: false") +
                                   (name == "retrieval" ? "; the retrieval drafter reads its datastore from draft_model" : ""));
  if (fallback_speculative_tokens > 0 && !prompt_lookup_first && !retrieval_first)
    bad("fallback_speculative_tokens", "expected prompt_lookup_first: true or retrieval_first: true beside it (it caps "
                                       "the drafter behind them), found neither");
  if (retrieval_max < 1 || retrieval_max > 64)
    bad("retrieval_max", "expected a suffix length in 1..64, found " + std::to_string(retrieval_max));
  if (retrieval_min < 1 || retrieval_min > retrieval_max)
    bad("retrieval_min", "expected 1 <= retrieval_min <= retrieval_max <= 64, found " + std::to_string(retrieval_min) +
                             " and " + std::to_string(retrieval_max));
  if (const std::string why = not_one_of(draft_model_format, ModelSource::formats()); !why.empty())
    bad("draft_model_format", why);
  if (draft_vocab < 0) bad("draft_vocab", "expected >= 0 (0 = the whole vocabulary), found " + std::to_string(draft_vocab));
  if (draft_layers_first < 0) bad("draft_layers_first", "expected >= 0, found " + std::to_string(draft_layers_first));
  if (!draft_layers.empty() && draft_layers_first > 0)
    bad("draft_layers", "expected either draft_layers or draft_layers_first, found both");
  for (size_t i = 1; i < draft_layers.size(); ++i)
    if (draft_layers[i] <= draft_layers[i - 1]) bad("draft_layers", "expected a strictly ascending list of layer indices");
  for (int64_t l : draft_layers)
    if (l < 0) bad("draft_layers", "expected layer indices >= 0, found " + std::to_string(l));
}

const std::vector<std::string>& builtin_drafter_names() {
  static const std::vector<std::string> names = {"prompt_lookup", "layer_skip", "draft_model", "eagle", "medusa", "retrieval"};
  return names;
}

std::string canonical_drafter_name(const std::string& name) { return name == "ngram" ? "prompt_lookup" : name; }

namespace {

// key -> the built-ins that read it, and whether an options struct sets it off its default.
struct KeyRow {
  const char* key;
  std::vector<std::string> readers;
  std::function<bool(const DrafterOptions&)> set;
};

// Whether member `m` of an options struct differs from a default DrafterOptions'.
template <class T>
std::function<bool(const DrafterOptions&)> off_default(T DrafterOptions::*m) {
  return [m](const DrafterOptions& o) { return !(o.*m == DrafterOptions{}.*m); };
}

const std::vector<KeyRow>& key_rows() {
  using O = DrafterOptions;
  // prompt_lookup copies tokens with no probability to gate on.
  static const std::vector<std::string> gated = {"layer_skip", "draft_model", "eagle", "medusa", "retrieval"};
  static const std::vector<KeyRow> rows = {
      {"prompt_lookup_min", {"prompt_lookup"}, off_default(&O::prompt_lookup_min)},
      {"prompt_lookup_max", {"prompt_lookup"}, off_default(&O::prompt_lookup_max)},
      {"retrieval_min", {"retrieval"}, off_default(&O::retrieval_min)},
      {"retrieval_max", {"retrieval"}, off_default(&O::retrieval_max)},
      {"draft_layers", {"layer_skip"}, off_default(&O::draft_layers)},
      {"draft_layers_first", {"layer_skip"}, off_default(&O::draft_layers_first)},
      {"draft_model", {"draft_model", "eagle", "medusa", "retrieval"}, off_default(&O::draft_model)},
      {"draft_model_format", {"draft_model"}, off_default(&O::draft_model_format)},
      {"draft_model_tokenizer", {"draft_model"}, off_default(&O::draft_model_tokenizer)},
      {"draft_vocab", {"draft_model"}, off_default(&O::draft_vocab)},
      {"confidence_threshold", gated, off_default(&O::confidence_threshold)},
      {"confidence_from_token", gated, off_default(&O::confidence_from_token)},
      {"params", {}, off_default(&O::params)},
  };
  return rows;
}

}  // namespace

DrafterKeyReaders drafter_key_readers(const std::string& key) {
  for (const KeyRow& r : key_rows())
    if (key == r.key) return {true, r.readers};
  return {};
}

bool drafter_reads_key(const DrafterOptions& o, const std::string& key) {
  if (!o.plugin.empty()) return true;
  const DrafterKeyReaders r = drafter_key_readers(key);
  if (!r.listed || std::find(r.readers.begin(), r.readers.end(), o.name) != r.readers.end()) return true;
  if (o.prompt_lookup_first && key.rfind("prompt_lookup_", 0) == 0) return true;  // the prompt-lookup source
  if (o.retrieval_first && (key.rfind("retrieval_", 0) == 0 || key.rfind("confidence_", 0) == 0)) return true;
  return false;
}

std::vector<std::string> unread_drafter_keys(const DrafterOptions& o) {
  std::vector<std::string> out;
  for (const KeyRow& r : key_rows())
    if (r.set(o) && !drafter_reads_key(o, r.key)) out.push_back(r.key);
  return out;
}

std::vector<int64_t> layer_skip_layers(const DrafterOptions& o, int64_t n_layers) {
  if (!o.draft_layers.empty()) return o.draft_layers;
  const int64_t first = o.draft_layers_first > 0 ? o.draft_layers_first : n_layers / 2;
  if (first > n_layers)
    throw Error(ErrorKind::kConfig, "expected at most " + std::to_string(n_layers) + " layers, found " +
                                        std::to_string(first), "drafter", "draft_layers_first");
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < first; ++l) layers.push_back(l);
  return layers;
}

}  // namespace speclab
