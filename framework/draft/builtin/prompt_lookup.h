// prompt_lookup — n-gram drafting from the context itself (Saxena 2023, "prompt lookup
// decoding"; HF prompt_lookup_num_tokens, vLLM ngram prompt_lookup_min/max).
// For n from prompt_lookup_max down to prompt_lookup_min, find the most recent earlier
// occurrence of the last n tokens in prompt + generated text and propose the tokens that
// followed it (up to max_k). Deterministic: no probabilities (q is one-hot).
#pragma once

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"

namespace speclab {

class PromptLookupDrafter : public Drafter {
 public:
  explicit PromptLookupDrafter(const DrafterOptions& o) : min_n_(o.prompt_lookup_min), max_n_(o.prompt_lookup_max) {}
  std::string name() const override { return "prompt_lookup"; }
  void begin(SeqId, const TokenList&) override {}
  DraftBlock propose(const DraftContext& ctx, int max_k) override;
  void accept(SeqId, int) override {}

  // The lookup itself, exposed for tests: continuation of the latest earlier match.
  static TokenList lookup(const TokenList& tokens, int min_n, int max_n, int max_k);

 private:
  int min_n_, max_n_;
};

}  // namespace speclab
