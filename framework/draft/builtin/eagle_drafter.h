// EagleDrafter — the `eagle` drafter: an EagleHead (eagle_head.h) drafting from the target's own
// last-layer features (Li et al. 2024).
//
// It asks the engine for the target's last layer (Drafter::target_hidden_layers) and turns each
// row into a feature f_i (eagle_features); a head with aux layers (eagle_head.h) also asks for
// those and keeps each position's a_i, which only the pairs of the target's own rows read (a
// drafted pair's a is 0). Its layers (one, or head.n_layers()) keep K/V in its own sequence of
// its own pool (that many layers of the target's KV geometry) in the shared KvCacheManager, one
// slot per head position i, the pair (f_i, t_{i+1}). The prompt's features (the engine passes them
// right after begin(), in the drafter's prefill phase) are fed at once for the pairs whose next
// token the prompt holds, positions [0, T - 1) of a T-token prompt: that pass is the head's
// prefill, timed as the drafter's begin (GenerationResult::draft_prefill_seconds), not as the
// first step's drafting. Each propose():
//   1. feeds the pairs whose feature the target has given since the last step (positions up to
//      the one before the pending token; rows of rejected drafts are never used), and commits them;
//   2. drafts max_k tokens: the head's predicted feature gives the logits of the next token
//      (argmax when greedy; a draw from q = logits_to_probs over the full vocabulary otherwise,
//      tokens outside a reduced head at probability 0), and (predicted feature, drafted token)
//      is the next pair. These speculative pairs are truncated at the next propose/accept,
//      since their features were the head's guesses, not the target's.
//      With a confidence_threshold, drafting stops at the first token whose probability under
//      the head (greedy: softmax at temperature 1 over its rows; sampling: q) is below it (from
//      draft position confidence_from_token on; earlier tokens are always drafted); EAGLE-2
//      (Li et al. 2024b) shows the draft's confidence tracks acceptance, and every row not
//      drafted is a row the verification pass does not pay for.
// The forward runs on the target's own matrix kernels (eagle_packed.h) where the target packs
// matrices (Model::pack_matrix), else on libtorch ops (eagle_head.h).
// Lossless as every drafter: the target verifies each token (greedy output equals AR's).
#pragma once

#include <memory>
#include <vector>

#include "framework/draft/builtin/eagle_head.h"
#include "framework/draft/builtin/eagle_packed.h"
#include "framework/draft/drafter.h"
#include "framework/kv/kv_cache_manager.h"

namespace speclab {

class EagleDrafter : public Drafter {
 public:
  // head: trained and frozen tensors set, for env.target's config. Error(kConfig, "drafter",
  // "draft_model") when the head's shapes do not fit the target.
  EagleDrafter(std::shared_ptr<const EagleHead> head, const DrafterEnv& env);

  std::string name() const override { return "eagle"; }
  void begin(SeqId seq, const TokenList& prompt) override;
  DraftBlock propose(const DraftContext& ctx, int max_k) override;
  void accept(SeqId seq, int n_accepted) override;
  void end(SeqId seq) override;
  // The aux layers, then the last.
  std::vector<int64_t> target_hidden_layers() const override;
  void observe_target_hidden(SeqId seq, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                             int64_t first_pos) override;

 private:
  // One head step over the pairs at positions [pos, pos + n): writes and commits their K/V.
  // features: [n, d]; aux: [n, A d] or null (a = 0); next: [n] token ids; out: [n, d] f^.
  void run_head(const float* features, const float* aux, const int64_t* next, int64_t n, int64_t pos, float* out);

  std::shared_ptr<const EagleHead> head_;
  std::unique_ptr<PackedEagleHead> packed_;  // the head on the target's kernels, or null (libtorch ops)
  std::vector<float> head_logits_;  // [V'] scratch
  KvCacheManager* kv_ = nullptr;
  PoolId pool_ = -1;
  SeqId hseq_ = -1;          // the head's KV sequence
  int64_t head_len_ = 0;     // head positions computed from the target's features
  std::vector<float> known_;  // [m, d] target features of positions [head_len_, head_len_ + m)
  std::vector<float> known_aux_;  // [m, A d] their aux features (empty when A = 0)
  std::vector<float> full_logits_;  // [vocab] scratch
  std::vector<float> out_, f_;      // [n, d] head outputs; [d] the feature the next token is drafted from
  std::vector<int64_t> next_;       // [n] the tokens paired with the new features
  TokenList prompt_;                // begin()'s prompt until its features arrive (then empty)
};

}  // namespace speclab
