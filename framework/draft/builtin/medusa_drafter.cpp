#include "framework/draft/builtin/medusa_drafter.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <cstring>

#include "framework/core/error.h"
#include "framework/core/model.h"
#include "framework/draft/builtin/head_token.h"

namespace speclab {

MedusaDrafter::MedusaDrafter(std::shared_ptr<const MedusaHeads> heads, const DrafterEnv& env) : heads_(std::move(heads)) {
  SPECLAB_CHECK(env.target != nullptr, "medusa needs the target");
  const ModelConfig& t = env.target->config();
  const ModelConfig& h = heads_->target;
  if (t.hidden_size != h.hidden_size || t.vocab_size != h.vocab_size || t.num_hidden_layers != h.num_hidden_layers)
    throw Error(ErrorKind::kConfig, "the medusa heads were built for another target shape", "drafter", "draft_model");
  at::NoGradGuard no_grad;
  blocks_ = env.target->pack_matrix(at::cat(heads_->weight, 0));  // [K d, d]
  if (blocks_) {
    lm_ = env.target->pack_matrix(heads_->lm_head);
    SPECLAB_CHECK(lm_ != nullptr, "medusa: the target packed one matrix and not another");
  }
}

void MedusaDrafter::begin(SeqId, const TokenList&) {
  first_pos_ = -1;
  n_rows_ = 0;
}

void MedusaDrafter::end(SeqId) {
  first_pos_ = -1;
  n_rows_ = 0;
}

void MedusaDrafter::observe_target_hidden(SeqId, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                                          int64_t first_pos) {
  SPECLAB_CHECK(hidden.size() == 1 && d == heads_->target.hidden_size, "medusa: unexpected target hidden states");
  rows_.assign(hidden[0], hidden[0] + n * d);
  first_pos_ = first_pos;
  n_rows_ = n;
}

void MedusaDrafter::head_logits(const float* f, int64_t k) {
  const int64_t d = heads_->target.hidden_size, hv = heads_->head_vocab();
  logits_.resize(static_cast<size_t>(k * hv));
  if (!blocks_) {
    const at::Tensor ft = at::from_blob(const_cast<float*>(f), {1, d}, at::kFloat);
    for (int64_t j = 1; j <= k; ++j) {
      const at::Tensor l = medusa_logits(*heads_, j, ft).contiguous();
      std::memcpy(&logits_[static_cast<size_t>((j - 1) * hv)], l.data_ptr<float>(), sizeof(float) * hv);
    }
    return;
  }
  const int64_t K = heads_->n_heads();
  wf_.resize(static_cast<size_t>(K * d));
  h_.resize(static_cast<size_t>(k * d));
  blocks_->multiply(f, nullptr, wf_.data(), 1);  // W_j f for every head j
  for (int64_t j = 0; j < k; ++j) {
    const float* b = heads_->bias[static_cast<size_t>(j)].data_ptr<float>();
    for (int64_t e = 0; e < d; ++e) {
      const float z = wf_[static_cast<size_t>(j * d + e)] + b[e];
      h_[static_cast<size_t>(j * d + e)] = f[e] + z / (1.0f + std::exp(-z));
    }
  }
  lm_->multiply(h_.data(), nullptr, logits_.data(), k);
}

DraftBlock MedusaDrafter::propose(const DraftContext& ctx, int max_k) {
  at::NoGradGuard no_grad;
  DraftBlock b;
  const int64_t k = std::min<int64_t>(max_k, heads_->n_heads());
  if (k < 1) return b;
  const int64_t at_pos = static_cast<int64_t>(ctx.tokens->size()) - 2;  // the feature that gave the pending token
  SPECLAB_CHECK(at_pos >= first_pos_ && at_pos < first_pos_ + n_rows_ && first_pos_ >= 0,
                "medusa: the target's feature at position " + std::to_string(at_pos) + " was not observed");
  const int64_t d = heads_->target.hidden_size;
  const float* hrow = &rows_[static_cast<size_t>((at_pos - first_pos_) * d)];
  // f = RMSNorm(h) * final_norm (target_features), in double for the sum of squares.
  double ss = 0.0;
  for (int64_t e = 0; e < d; ++e) ss += static_cast<double>(hrow[e]) * hrow[e];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + heads_->target.rms_norm_eps));
  const float* w = heads_->final_norm.data_ptr<float>();
  f_.resize(static_cast<size_t>(d));
  for (int64_t e = 0; e < d; ++e) f_[static_cast<size_t>(e)] = hrow[e] * r * w[e];
  head_logits(f_.data(), k);
  const int64_t hv = heads_->head_vocab();
  for (int64_t j = 0; j < k; ++j)
    if (!append_head_token(&logits_[static_cast<size_t>(j * hv)], heads_->vocab_ids.data_ptr<int64_t>(), hv,
                           heads_->target.vocab_size, ctx, b, full_logits_))
      break;
  return b;
}

}  // namespace speclab
