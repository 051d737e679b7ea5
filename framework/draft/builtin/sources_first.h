// SourcesFirstDrafter — free draft sources first, another drafter where none of them has a draft:
// `prompt_lookup_first: true` (prompt lookup) and `retrieval_first: true` (the retrieval
// datastore) on any drafter entry but those two themselves.
//
// Each step the sources are asked in order (prompt lookup before the datastore). A source answers
// with the continuation of a match in text (the context itself, PromptLookupDrafter::lookup; the
// target's own earlier answers, Datastore::draft) or with an empty block where it has no match;
// the first non-empty block is the step's, and the wrapped drafter is not asked. Only when every
// source is empty does the wrapped drafter propose. Each source and the drafter draft up to
// their own cap (0: max_k). The sources are complementary: a lookup continuation is right most
// often where the text repeats itself (extraction, code, arithmetic), the datastore where the
// target's phrasing recurs across conversations, and a trained head elsewhere; on SmolLM2's
// MT-bench first turns the EAGLE head behind 2- to 3-gram lookup at gamma 4 (head gamma 1)
// accepted 0.49 of its drafts against the head's 0.39 and lookup's 0.42 alone
// (docs/train-draft.md).
//
// Contract with the wrapped drafter: begin(), end(), target_hidden_layers() and every
// observe_target_hidden() are forwarded as they come, so a drafter on target features sees every
// forward's rows; propose() is asked only on steps without a source's block, and accept() follows
// only its own proposals. A drafter must therefore take its context from DraftContext::tokens,
// not from the tokens it proposed (every built-in one does). The sources get begin(), end() and
// accept() after their own proposals, never target features. Every source sees the same
// DraftContext as the drafter: the entry's confidence_threshold also stops the retrieval
// datastore's draft at a token whose support is below it (a first token below it leaves the
// step to the next source). A source block carries what its
// source reports (prompt lookup and retrieval: no probabilities, q one-hot at its tokens) and a
// fallback block whatever its drafter reports: the verifier treats each block on its own, so the
// output stays the target's. Each block names its source (DraftBlock::source: the source's or
// the wrapped drafter's name unless it named one itself), which the experiment file keeps per
// step (/steps/source).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/draft/drafter.h"

namespace speclab {

class SourcesFirstDrafter : public Drafter {
 public:
  struct Source {
    std::unique_ptr<Drafter> drafter;  // proposes an empty block where it has no match
    int cap = 0;                       // tokens it drafts at most per step (0: max_k)
  };
  // sources: at least one, in the order asked; fallback: the drafter asked when they are all
  // empty, drafting at most fallback_cap tokens (0: max_k). Error(kInternal) on no source, null
  // drafters or negative caps.
  SourcesFirstDrafter(std::vector<Source> sources, std::unique_ptr<Drafter> fallback, int fallback_cap);

  // "prompt_lookup+retrieval+<wrapped name>": the sources' names, then the wrapped drafter's.
  std::string name() const override;
  void begin(SeqId seq, const TokenList& prompt) override;
  DraftBlock propose(const DraftContext& ctx, int max_k) override;
  void accept(SeqId seq, int n_accepted) override;
  void end(SeqId seq) override;
  void reuse_prompt_state(bool on) override { fallback_->reuse_prompt_state(on); }
  std::vector<int64_t> target_hidden_layers() const override { return fallback_->target_hidden_layers(); }
  void observe_target_hidden(SeqId seq, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                             int64_t first_pos) override {
    fallback_->observe_target_hidden(seq, hidden, n, d, first_pos);
  }

  // Steps whose block came from source i (i < n_sources()) or, at i = n_sources(), from the
  // wrapped drafter, since construction. Error(kInternal) for i > n_sources().
  int64_t steps_from(size_t i) const;
  size_t n_sources() const { return sources_.size(); }
  // The wrapped drafter: the one whose draft logits (and q) the sampling checks test, since the
  // sources' blocks carry none (`speclab check`, experiments/app/equivalence_runner.cpp).
  Drafter& fallback() { return *fallback_; }

 private:
  std::vector<Source> sources_;
  std::unique_ptr<Drafter> fallback_;
  int fallback_cap_;
  int proposer_ = -1;            // who proposed the last block: a source index, n_sources() for the
                                 // wrapped drafter, -1 for nobody
  std::vector<int64_t> steps_;   // [n_sources() + 1]
};

}  // namespace speclab
