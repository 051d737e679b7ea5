#include "framework/draft/builtin/eagle_drafter.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/model.h"
#include "framework/draft/builtin/head_token.h"

namespace speclab {

EagleDrafter::EagleDrafter(std::shared_ptr<const EagleHead> head, const DrafterEnv& env) : head_(std::move(head)) {
  SPECLAB_CHECK(env.kv != nullptr && env.target != nullptr, "eagle needs the target and the KV manager");
  const ModelConfig& t = env.target->config();
  const ModelConfig& h = head_->target;
  if (t.hidden_size != h.hidden_size || t.vocab_size != h.vocab_size || t.num_attention_heads != h.num_attention_heads ||
      t.num_key_value_heads != h.num_key_value_heads || t.head_dim != h.head_dim)
    throw Error(ErrorKind::kConfig, "the eagle head was built for another target shape", "drafter", "draft_model");
  kv_ = env.kv;
  KvGeometry g = t.kv_geometry();
  g.n_layers = head_->n_layers();
  g.device = "cpu";  // the head runs on the CPU whatever the target's device
  g.dtype = "float32";
  pool_ = kv_->add_pool(g);
  packed_ = PackedEagleHead::make(*head_, *env.target);
}

std::vector<int64_t> EagleDrafter::target_hidden_layers() const {
  std::vector<int64_t> layers = head_->aux_layers;
  layers.push_back(head_->target.num_hidden_layers - 1);
  return layers;
}

void EagleDrafter::begin(SeqId, const TokenList& prompt) {
  if (hseq_ >= 0) (void)kv_->release(hseq_);
  hseq_ = kv_->create(pool_);
  head_len_ = 0;
  known_.clear();
  known_aux_.clear();
  prompt_ = prompt;
}

void EagleDrafter::observe_target_hidden(SeqId, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                                         int64_t first_pos) {
  const size_t A = head_->aux_layers.size();
  SPECLAB_CHECK(hidden.size() == A + 1 && d == head_->target.hidden_size, "eagle: unexpected target hidden states");
  SPECLAB_CHECK(first_pos >= head_len_, "eagle: target features behind the head");
  // Keep the features of positions before first_pos that the head has not consumed yet.
  const int64_t known_rows = static_cast<int64_t>(known_.size()) / d;
  const int64_t keep = std::min<int64_t>(known_rows, first_pos - head_len_);
  SPECLAB_CHECK(keep == first_pos - head_len_, "eagle: a gap in the target features");
  known_.resize(static_cast<size_t>((keep + n) * d));
  float* f = known_.data() + keep * d;
  const int64_t w = head_->aux_width();
  known_aux_.resize(static_cast<size_t>((keep + n) * w));
  if (packed_) {
    packed_->features(hidden[A], n, f);
    for (size_t l = 0; l < A; ++l) packed_->aux_features(hidden[l], n, known_aux_.data() + keep * w + l * d, w);
  } else {
    at::NoGradGuard no_grad;
    const auto rows = [&](const float* h) { return at::from_blob(const_cast<float*>(h), {n, d}, at::kFloat); };
    const at::Tensor t = eagle_features(*head_, rows(hidden[A])).contiguous();
    std::copy(t.data_ptr<float>(), t.data_ptr<float>() + n * d, f);
    if (A > 0) {
      std::vector<at::Tensor> a;
      for (size_t l = 0; l < A; ++l) a.push_back(eagle_aux_features(rows(hidden[l]), head_->target.rms_norm_eps));
      const at::Tensor at_ = at::cat(a, 1).contiguous();
      std::copy(at_.data_ptr<float>(), at_.data_ptr<float>() + n * w, known_aux_.data() + keep * w);
    }
  }
  // The prompt's features: the head's prefill over the pairs the prompt completes (the last
  // prompt position waits for the first emitted token, fed by the first propose()). It ran in the
  // first propose() and was timed as that step's drafting (2026-12-06: an 8,184-token prompt
  // gave c = 6 for step 0 against 0.005 after).
  if (!prompt_.empty() && first_pos == 0 && head_len_ == 0) {
    const int64_t pre = std::min<int64_t>(static_cast<int64_t>(prompt_.size()), n) - 1;
    if (pre >= 1) {
      at::NoGradGuard no_grad;
      kv_->reserve(hseq_, pre);
      out_.resize(static_cast<size_t>(pre * d));
      next_.assign(prompt_.begin() + 1, prompt_.begin() + 1 + pre);
      run_head(known_.data(), w > 0 ? known_aux_.data() : nullptr, next_.data(), pre, 0, out_.data());
      known_.erase(known_.begin(), known_.begin() + pre * d);
      known_aux_.erase(known_aux_.begin(), known_aux_.begin() + pre * w);
      head_len_ = pre;
    }
  }
  prompt_.clear();
}

void EagleDrafter::run_head(const float* features, const float* aux, const int64_t* next, int64_t n, int64_t pos,
                            float* out) {
  const int64_t d = head_->target.hidden_size;
  const KvView v = kv_->view_at(hseq_, pos, n);
  if (packed_) {
    packed_->step(features, aux, next, n, pos, v, out);
  } else {
    const at::Tensor f = at::from_blob(const_cast<float*>(features), {n, d}, at::kFloat);
    const at::Tensor t = at::from_blob(const_cast<int64_t*>(next), {n}, at::kLong);
    const at::Tensor a =
        aux ? at::from_blob(const_cast<float*>(aux), {n, head_->aux_width()}, at::kFloat) : at::Tensor();
    at::Tensor x = eagle_input(*head_, f, t, a);
    const at::Tensor rows = at::arange(pos, pos + n, at::kLong).unsqueeze(1);
    const at::Tensor allowed = at::arange(v.ctx_len, at::kLong).unsqueeze(0).le(rows);  // [n, ctx]
    for (int64_t l = 0; l < head_->n_layers(); ++l) {
      const EagleQkv qkv = eagle_qkv(*head_, l, x, at::arange(pos, pos + n, at::kLong));
      at::Tensor kc = v.k_cache[l], vc = v.v_cache[l];  // [slots, KVH, hd]
      kc.index_copy_(0, v.write_slots, qkv.k);
      vc.index_copy_(0, v.write_slots, qkv.v);
      const at::Tensor k_ctx = v.read_base >= 0 ? kc.narrow(0, v.read_base, v.ctx_len) : kc.index_select(0, v.read_slots);
      const at::Tensor v_ctx = v.read_base >= 0 ? vc.narrow(0, v.read_base, v.ctx_len) : vc.index_select(0, v.read_slots);
      x = eagle_attend(*head_, l, x, qkv, k_ctx, v_ctx, allowed);
    }
    const at::Tensor o = x.contiguous();
    std::copy(o.data_ptr<float>(), o.data_ptr<float>() + n * d, out);
  }
  SPECLAB_CHECK(kv_->commit(hseq_, n) == KvStatus::kOk, "eagle: commit");
}

DraftBlock EagleDrafter::propose(const DraftContext& ctx, int max_k) {
  at::NoGradGuard no_grad;
  const TokenList& t = *ctx.tokens;
  const int64_t T = static_cast<int64_t>(t.size()), d = head_->target.hidden_size;
  // Drop the previous step's speculative pairs; feed the target's new ones, positions
  // [head_len_, T - 1): the feature of position T - 2 with the pending token t[T - 1].
  if (kv_->length(hseq_) > head_len_) SPECLAB_CHECK(kv_->truncate(hseq_, head_len_) == KvStatus::kOk, "eagle: rollback");
  const int64_t n_new = T - 1 - head_len_;
  SPECLAB_CHECK(n_new >= 1 && static_cast<int64_t>(known_.size()) >= n_new * d, "eagle: missing target features");
  kv_->reserve(hseq_, n_new + max_k);
  next_.assign(t.begin() + head_len_ + 1, t.end());
  out_.resize(static_cast<size_t>(n_new * d));
  const int64_t w = head_->aux_width();
  run_head(known_.data(), w > 0 ? known_aux_.data() : nullptr, next_.data(), n_new, head_len_, out_.data());
  known_.erase(known_.begin(), known_.begin() + n_new * d);
  known_aux_.erase(known_aux_.begin(), known_aux_.begin() + n_new * w);
  head_len_ = T - 1;
  // f: the predicted feature of the last pair.
  f_.assign(out_.end() - d, out_.end());
  const int64_t vocab = head_->target.vocab_size;
  const int64_t hv = head_->head_vocab();
  DraftBlock b;
  int64_t pos = head_len_;
  for (int i = 0; i < max_k; ++i) {
    const float* lp;
    at::Tensor logits;
    if (packed_) {
      head_logits_.resize(static_cast<size_t>(hv));
      packed_->logits(f_.data(), head_logits_.data());
      lp = head_logits_.data();
    } else {
      logits = eagle_logits(*head_, at::from_blob(f_.data(), {1, d}, at::kFloat))[0].contiguous();  // [V']
      lp = logits.data_ptr<float>();
    }
    if (!append_head_token(lp, head_->vocab_ids.data_ptr<int64_t>(), hv, vocab, ctx, b, full_logits_)) break;
    if (i + 1 == max_k) break;
    const int64_t x = b.tokens.back();
    out_.resize(static_cast<size_t>(d));
    run_head(f_.data(), nullptr, &x, 1, pos++, out_.data());
    f_.assign(out_.begin(), out_.end());
  }
  return b;
}

void EagleDrafter::accept(SeqId, int) {
  if (hseq_ >= 0 && kv_->length(hseq_) > head_len_)
    SPECLAB_CHECK(kv_->truncate(hseq_, head_len_) == KvStatus::kOk, "eagle: rollback");
}

void EagleDrafter::end(SeqId) {
  if (hseq_ >= 0) {
    (void)kv_->release(hseq_);
    hseq_ = -1;
  }
  known_.clear();
  known_aux_.clear();
}

}  // namespace speclab
