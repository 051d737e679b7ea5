// retrieval — REST's retrieval-based drafting (He et al. 2024, NAACL): the continuation of the
// context's longest suffix match in a datastore of text the target wrote itself (its answers to
// training prompts, `speclab train-draft` with `architecture: retrieval`; datastore.h).
//
// Each step: the longest suffix of prompt + emitted tokens, of retrieval_min..retrieval_max
// tokens, that occurs in the corpus; then, up to max_k tokens, the token that most often follows
// the drafted prefix there (REST's trie along its most frequent branch). No model runs, so the
// draft costs microseconds, and no state is kept per sequence. Deterministic: no probabilities
// (q is one-hot, as prompt_lookup's), so the verifier keeps the output the target's. A block's
// confidence is each token's support (the share of the matching occurrences it continues);
// confidence_threshold stops the draft at a token below it, as for the model drafters.
#pragma once

#include <memory>
#include <string>

#include "framework/draft/builtin/datastore.h"
#include "framework/draft/drafter.h"

namespace speclab {

class RetrievalDrafter : public Drafter {
 public:
  // 1 <= min_n <= max_n <= 64 (DrafterOptions::validate checks the keys).
  RetrievalDrafter(std::shared_ptr<const Datastore> store, int min_n, int max_n)
      : store_(std::move(store)), min_n_(min_n), max_n_(max_n) {}
  std::string name() const override { return "retrieval"; }
  void begin(SeqId, const TokenList&) override {}
  DraftBlock propose(const DraftContext& ctx, int max_k) override;
  void accept(SeqId, int) override {}

 private:
  std::shared_ptr<const Datastore> store_;
  int min_n_, max_n_;
};

}  // namespace speclab
