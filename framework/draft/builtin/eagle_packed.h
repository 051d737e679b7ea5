// PackedEagleHead — the EAGLE head's drafting forward (eagle_head.h, same equations) on the
// target's own matrix kernels (Model::pack_matrix) and plain loops over raw buffers.
//
// The libtorch version (eagle_head.h) is what training differentiates; run per drafted token it
// costs ~40 small ops, i.e. more than a whole target step on a 135M model. This one packs the
// head's matrices once (fc; per layer q|k|v, o, gate|up, down; the LM head rows) in the storage
// the target uses (Q8_0 against int8 activations), so a draft token of a one-layer head reads
// ~1/9 of the bytes of a SmolLM2 step (each further layer adds its four matrices). Attention
// over the head's KV runs on the target's attention kernel (Model::attend_rows) where it has
// one, else in a plain loop; the rest (RMSNorm, RoPE, SiLU) are plain loops in place.
// Its products differ from the float32 head's by the matrices' quantization: the drafter reports
// the q it sampled from, so losslessness does not depend on it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/core/kv_view.h"
#include "framework/core/model.h"
#include "framework/draft/builtin/eagle_head.h"

namespace speclab {

class PackedEagleHead {
 public:
  // nullptr when `target` has no packed kernels (Model::pack_matrix returns nullptr).
  static std::unique_ptr<PackedEagleHead> make(const EagleHead& head, const Model& target);

  // The pairs (features[i], next[i]) at head positions [pos, pos + n): writes layer l's K/V to
  // kv.write_slots of cache layer l (an L-layer cache, L = head.n_layers()) and attends causally
  // over kv's ctx_len = pos + n positions. features: [n, d] float32; aux: [n, A d] the rows' aux features, or null
  // (a = 0, computed with fc's other columns only; ignored when A = 0); next: [n] token ids;
  // out: [n, d] f^.
  void step(const float* features, const float* aux, const int64_t* next, int64_t n, int64_t pos, const KvView& kv,
            float* out);
  // The target's features of its last layer's residual stream (eagle_features: the final
  // RMSNorm) in a plain loop. hidden: [n, d]; out: [n, d].
  void features(const float* hidden, int64_t n, float* out) const;
  // One aux layer's features (eagle_aux_features: unit-weight RMSNorm) in a plain loop.
  // hidden: [n, d]; out: row i at out + i * out_stride, d floats.
  void aux_features(const float* hidden, int64_t n, float* out, int64_t out_stride) const;
  // Head logits of one predicted feature f [d]: out [V'] in lm_head row order (vocab_ids).
  void logits(const float* f, float* out);
  int64_t head_vocab() const { return lm_->rows(); }

 private:
  PackedEagleHead() = default;
  // cos and sin of the RoPE angles at position pos, [hd / 2] each (computed once per position).
  const float* rope_cos(int64_t pos);
  const float* rope_sin(int64_t pos) { return rope_cos(pos) + inv_freq_.size(); }
  // Causal attention of the n rows at positions [pos, pos + n) over kv's layer l: att_ from qkv_out_.
  void attend(int64_t l, int64_t n, int64_t pos, const KvView& kv);
  // Decoder layer l of the n rows: its input in x_, its output to y [n, d] (y may be x_).
  void layer_step(int64_t l, int64_t n, int64_t pos, const KvView& kv, float* y);

  struct Layer {  // one decoder layer's packed matrices
    std::shared_ptr<const PackedMatrix> qkv, o, gate_up, down;
  };

  const EagleHead* head_ = nullptr;
  const Model* target_ = nullptr;                 // its attention kernel (Model::attend_rows)
  std::shared_ptr<const PackedMatrix> fc_, lm_;
  std::vector<Layer> layers_;
  std::shared_ptr<const PackedMatrix> fc_base_;   // fc's columns over [f ; E[next]] (heads with aux layers)
  std::vector<double> inv_freq_;                  // [hd/2] RoPE frequencies
  std::vector<float> rope_;                       // [positions, 2, hd/2]: cos, then sin
  std::vector<int64_t> limits_;                   // [n] keys each row attends
  std::vector<float> in_, x_, xn_, qkv_out_, att_, h_, gu_, act_, scores_;  // scratch
};

}  // namespace speclab
