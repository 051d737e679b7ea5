// Model-based drafters: an autoregressive draft from a model.
//
//   draft_model  a separate small model (same vocabulary as the target) with its own sequence in
//                its own pool of the shared KvCacheManager. begin() prefills the prompt in one
//                forward; before drafting it feeds, in one forward, every context token it has
//                not seen yet (its cache is truncated to the accepted prefix after each step).
//                With reuse_prompt_state(true) it keeps the last prompt's prefilled sequence
//                and begins a sequence on the same prompt as a fork of it (shared blocks,
//                copy-on-write): the same K/V, so the same drafts, without the prefill.
//   layer_skip   self-speculation: the target itself running only a subset of its layers
//                (the first k, or an explicit ascending list). It shares the target's KV
//                sequence: for context positions it reads the K/V the target's verification
//                pass wrote (all layers, full-model values); for its own draft positions it
//                writes only the layers it runs, into the target's reserved slots past the
//                committed length. The verification pass then overwrites those positions in
//                every layer, so for accepted tokens the skipped (and the run) layers' K/V are
//                the full model's, and rejected positions are rolled back by the engine's
//                truncate. Nothing is recomputed and no second cache exists.
// Under sampling the draft samples from its processed distribution q (same transform as p)
// and returns q; under greedy decoding it drafts argmax and returns no probabilities.
#pragma once

#include <memory>
#include <vector>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/core/model.h"

namespace speclab {

class ModelDrafter : public Drafter {
 public:
  // draft_model: owns `model`, gets its own pool in env.kv.
  static std::unique_ptr<ModelDrafter> separate(std::unique_ptr<Model> model, const DrafterEnv& env);
  // layer_skip: runs `layers` of env.target on the target's own sequence.
  static std::unique_ptr<ModelDrafter> layer_skip(const DrafterEnv& env, std::vector<int64_t> layers);

  std::string name() const override { return name_; }
  void begin(SeqId seq, const TokenList& prompt) override;
  DraftBlock propose(const DraftContext& ctx, int max_k) override;
  void accept(SeqId seq, int n_accepted) override;
  void end(SeqId seq) override;
  void reuse_prompt_state(bool on) override;

  // The draft's model (the target itself for layer_skip) and the layers it runs (empty = all):
  // what the equivalence checks read to compute the exact draft distribution q.
  const Model& model() const { return *model_; }
  const std::vector<int64_t>& layers() const { return layers_; }

 private:
  ModelDrafter() = default;

  std::string name_;
  std::unique_ptr<Model> owned_;
  const Model* model_ = nullptr;
  KvCacheManager* kv_ = nullptr;
  PoolId pool_ = -1;            // own pool (draft_model) or -1 (shares the target's sequence)
  std::vector<int64_t> layers_;  // empty = all
  SeqId dseq_ = -1;             // the sequence the draft writes to
  int64_t context_at_propose_ = 0;  // tokens->size() when the last block was proposed
  bool keep_prompt_ = false;        // reuse_prompt_state(true)
  SeqId prompt_seq_ = -1;           // the kept prefilled prompt (draft_model), or -1
  TokenList prompt_tokens_;         // its tokens
  void release_prompt();
  std::vector<float> scratch_;
};

}  // namespace speclab
