#include "framework/draft/builtin/model_drafter.h"

#include <algorithm>

#include "framework/core/error.h"
#include "framework/core/token_tensor.h"

namespace speclab {

std::unique_ptr<ModelDrafter> ModelDrafter::separate(std::unique_ptr<Model> model, const DrafterEnv& env) {
  SPECLAB_CHECK(env.kv != nullptr, "draft_model needs the shared KV manager");
  if (model->config().vocab_size != env.vocab_size)
    throw Error(ErrorKind::kConfig,
                "the draft model's vocabulary (" + std::to_string(model->config().vocab_size) +
                    " tokens) does not match the target's (" + std::to_string(env.vocab_size) +
                    "): a draft model must share the target's tokenizer",
                "drafter", "draft_model");
  std::unique_ptr<ModelDrafter> d(new ModelDrafter());
  d->name_ = "draft_model";
  d->owned_ = std::move(model);
  d->model_ = d->owned_.get();
  d->kv_ = env.kv;
  d->pool_ = env.kv->add_pool(d->model_->config().kv_geometry());
  return d;
}

std::unique_ptr<ModelDrafter> ModelDrafter::layer_skip(const DrafterEnv& env, std::vector<int64_t> layers) {
  SPECLAB_CHECK(env.kv != nullptr && env.target != nullptr, "layer_skip needs the target and the KV manager");
  const int64_t L = env.target->config().num_hidden_layers;
  if (layers.empty())
    throw Error(ErrorKind::kConfig, "expected at least one layer (draft_layers or draft_layers_first)", "drafter",
                "draft_layers");
  for (int64_t l : layers)
    if (l < 0 || l >= L)
      throw Error(ErrorKind::kConfig,
                  "layer " + std::to_string(l) + " is out of range: the target has layers 0.." + std::to_string(L - 1),
                  "drafter", "draft_layers");
  std::unique_ptr<ModelDrafter> d(new ModelDrafter());
  d->name_ = "layer_skip";
  d->model_ = env.target;
  d->kv_ = env.kv;
  d->layers_ = std::move(layers);
  return d;
}

void ModelDrafter::begin(SeqId seq, const TokenList& prompt) {
  if (pool_ < 0) {
    dseq_ = seq;
    return;
  }
  if (dseq_ >= 0) (void)kv_->release(dseq_);
  dseq_ = -1;
  if (keep_prompt_ && prompt_seq_ >= 0 && prompt == prompt_tokens_) {
    dseq_ = kv_->fork(prompt_seq_);  // the prompt's committed blocks, shared (copy-on-write)
    return;
  }
  dseq_ = kv_->create(pool_);
  // The prompt in one forward (positions 0..P-1); propose() then feeds only what follows it. A
  // prompt that fills a separate draft's own context, or goes beyond it, is not fed: the pending
  // token's position is past the context, so propose() drafts nothing (a prompt of exactly the
  // context was prefilled for nothing until 2026-12-06).
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > 0 && n < model_->config().max_position_embeddings) {
    kv_->reserve(dseq_, n);
    ForwardOptions fo;
    fo.logits_last_n = 1;
    (void)model_->forward(token_tensor(prompt), position_tensor(0, n), kv_->view_at(dseq_, 0, n), fo);
    SPECLAB_CHECK(kv_->commit(dseq_, n) == KvStatus::kOk, "draft prompt commit");
  }
  if (keep_prompt_) {
    release_prompt();
    prompt_seq_ = kv_->fork(dseq_);
    prompt_tokens_ = prompt;
  }
}

void ModelDrafter::reuse_prompt_state(bool on) {
  keep_prompt_ = on && pool_ >= 0;
  if (!keep_prompt_) release_prompt();
}

void ModelDrafter::release_prompt() {
  if (prompt_seq_ >= 0) (void)kv_->release(prompt_seq_);
  prompt_seq_ = -1;
  prompt_tokens_.clear();
}

DraftBlock ModelDrafter::propose(const DraftContext& ctx, int max_k) {
  const TokenList& t = *ctx.tokens;
  const int64_t T = static_cast<int64_t>(t.size());
  context_at_propose_ = T;
  const bool own = pool_ >= 0;
  // A separate model catches up on every token it has not seen; layer_skip starts at the
  // pending token, whose context K/V the target already wrote.
  const int64_t start = own ? kv_->length(dseq_) : T - 1;
  SPECLAB_CHECK(start >= 0 && start < T, "draft cache is ahead of the context");
  // A separate draft may hold a shorter context than the target's: its i-th forward reads
  // positions up to T - 1 + i, so it drafts at most ctx - T + 1 tokens, and none once the context
  // itself is beyond it (the target decodes on alone; the output is unchanged). It stopped the
  // run with "position out of range" until 2026-12-05.
  if (own) {
    const int64_t room = model_->config().max_position_embeddings - T + 1;
    if (room <= 0) return {};
    max_k = static_cast<int>(std::min<int64_t>(max_k, room));
  }
  TokenList feed(t.begin() + start, t.end());
  kv_->reserve(dseq_, static_cast<int64_t>(feed.size()) + max_k);

  const SamplingOptions& s = *ctx.sampling;
  const int64_t vocab = model_->config().vocab_size;
  ForwardOptions fo;
  fo.layers = layers_;
  fo.logits_last_n = 1;
  DraftBlock b;
  int64_t pos = start;
  for (int i = 0; i < max_k; ++i) {
    const int64_t n = static_cast<int64_t>(feed.size());
    at::Tensor logits = model_->forward(token_tensor(feed), position_tensor(pos, n),
                                        kv_->view_at(dseq_, pos, n), fo);
    if (own) SPECLAB_CHECK(kv_->commit(dseq_, n) == KvStatus::kOk, "draft commit");
    pos += n;
    at::Tensor row = logits[0].contiguous();
    const float* lp = row.data_ptr<float>();
    Token x;
    float conf = 1.0f;
    if (s.greedy()) {
      x = argmax(lp, vocab);
      if (ctx.min_confidence > 0.0) {
        SamplingOptions plain;
        plain.temperature = 1.0;
        logits_to_probs(lp, vocab, plain, scratch_);
        conf = scratch_[static_cast<size_t>(x)];
      }
    } else {
      std::vector<float> q;
      logits_to_probs(lp, vocab, s, q);
      x = sample(q, *ctx.rng);
      conf = *std::max_element(q.begin(), q.end());
      if (ctx.confidence_applies(b.tokens.size()) && conf < ctx.min_confidence) break;
      b.probs.push_back(std::move(q));
      if (ctx.want_logits) b.logits.emplace_back(lp, lp + vocab);
    }
    if (s.greedy() && ctx.confidence_applies(b.tokens.size()) && conf < ctx.min_confidence) break;
    b.tokens.push_back(x);
    b.confidence.push_back(conf);
    feed.assign(1, x);
  }
  return b;
}

void ModelDrafter::accept(SeqId, int n_accepted) {
  if (pool_ < 0) return;  // layer_skip: the engine rolls the shared sequence back
  const int64_t valid = context_at_propose_ + n_accepted;
  if (kv_->length(dseq_) > valid) SPECLAB_CHECK(kv_->truncate(dseq_, valid) == KvStatus::kOk, "draft rollback");
}

void ModelDrafter::end(SeqId) {
  if (pool_ >= 0 && dseq_ >= 0) {
    (void)kv_->release(dseq_);
    dseq_ = -1;
  }
}

}  // namespace speclab
