// LookupFirstDrafter — prompt lookup first, another drafter where the context has no match
// (`prompt_lookup_first: true` on any drafter entry but prompt_lookup itself).
//
// Each step it looks for the latest earlier occurrence of the context's last n tokens
// (prompt_lookup_min <= n <= prompt_lookup_max, PromptLookupDrafter::lookup) and, when there is
// one, proposes up to max_k tokens that followed it, without asking the wrapped drafter. Only
// when there is none does the wrapped drafter propose, up to fallback_speculative_tokens of its
// own (0: max_k). The two sources are complementary: a lookup continuation is right most often
// where the text repeats itself (extraction, code, arithmetic), and a trained head where it does
// not; on SmolLM2's MT-bench first turns the EAGLE head behind 2- to 3-gram lookup at gamma 4
// (head gamma 1) accepted 0.49 of its drafts against the head's 0.39 and lookup's 0.42 alone
// (docs/train-draft.md).
//
// Contract with the wrapped drafter: begin(), end(), target_hidden_layers() and every
// observe_target_hidden() are forwarded as they come, so a drafter on target features sees every
// forward's rows; propose() is asked only on steps without a match, and accept() follows only
// its own proposals. A drafter must therefore take its context from DraftContext::tokens, not
// from the tokens it proposed (every built-in one does). A lookup block carries no
// probabilities (q one-hot at its tokens) and a fallback block whatever its drafter reports:
// the verifier treats each block on its own, so the output stays the target's. Each block names
// its source (DraftBlock::source: "prompt_lookup", or the wrapped drafter's name unless it named
// one itself), which the experiment file keeps per step (/steps/source).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/draft/drafter.h"

namespace speclab {

class LookupFirstDrafter : public Drafter {
 public:
  // min_n <= max_n: the n-gram lengths tried (longest first); fallback_k >= 0: the cap on the
  // wrapped drafter's tokens per step (0: none beyond max_k).
  LookupFirstDrafter(std::unique_ptr<Drafter> fallback, int min_n, int max_n, int fallback_k);

  // "prompt_lookup+<wrapped name>".
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

  // Steps whose block came from the lookup / from the wrapped drafter since construction.
  int64_t lookup_steps() const { return lookup_steps_; }
  int64_t fallback_steps() const { return fallback_steps_; }

 private:
  std::unique_ptr<Drafter> fallback_;
  int min_n_, max_n_, fallback_k_;
  bool fallback_proposed_ = false;  // the last propose() asked the wrapped drafter
  int64_t lookup_steps_ = 0, fallback_steps_ = 0;
};

}  // namespace speclab
