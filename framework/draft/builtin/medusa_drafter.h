// MedusaDrafter — the `medusa` drafter: K Medusa heads (medusa_heads.h, Cai et al. 2024) drafting
// from the target's own last-layer feature.
//
// It asks the engine for the target's last layer (Drafter::target_hidden_layers) and keeps the
// rows of the latest target forward. At propose(), with T context tokens (t[T-1] the pending
// token), the target's feature f at position T-2 is the one whose LM head gave t[T-1]; head k
// drafts t[T-1+k] from it, k = 1..min(K, max_k). The heads do not see each other's tokens:
// drafting costs one pass, whatever k (on the target's kernels, Model::pack_matrix: the K
// residual blocks as one [K d, d] matrix, then the shared LM head once for the K rows). Token
// choice: head_token.h (greedy argmax; sampling draws from q over the full vocabulary and reports
// it, q independent of the earlier drafts, which rejection sampling allows). A
// confidence_threshold stops at the first head below it (from draft position
// confidence_from_token on). No KV of its own.
// Lossless as every drafter: the target verifies each token.
#pragma once

#include <memory>
#include <vector>

#include "framework/core/packed_matrix.h"
#include "framework/draft/builtin/medusa_heads.h"
#include "framework/draft/drafter.h"

namespace speclab {

class MedusaDrafter : public Drafter {
 public:
  // heads: trained and frozen tensors set, for env.target's config. Error(kConfig, "drafter",
  // "draft_model") when the heads' shapes do not fit the target.
  MedusaDrafter(std::shared_ptr<const MedusaHeads> heads, const DrafterEnv& env);

  std::string name() const override { return "medusa"; }
  void begin(SeqId seq, const TokenList& prompt) override;
  DraftBlock propose(const DraftContext& ctx, int max_k) override;
  void accept(SeqId, int) override {}
  void end(SeqId seq) override;
  std::vector<int64_t> target_hidden_layers() const override { return {heads_->target.num_hidden_layers - 1}; }
  void observe_target_hidden(SeqId seq, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                             int64_t first_pos) override;

 private:
  // logits_ [k, V'] of heads 1..k from the feature f [d].
  void head_logits(const float* f, int64_t k);

  std::shared_ptr<const MedusaHeads> heads_;
  std::shared_ptr<const PackedMatrix> blocks_, lm_;  // on the target's kernels, or null (libtorch ops)
  std::vector<float> rows_;   // [n_rows_, d] the latest target forward's last-layer rows
  int64_t first_pos_ = -1, n_rows_ = 0;
  std::vector<float> f_, wf_, h_, logits_, full_logits_;  // scratch
};

}  // namespace speclab
