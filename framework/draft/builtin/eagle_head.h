// EagleHead — the EAGLE draft head (Li et al. 2024, "EAGLE: Speculative Sampling Requires
// Rethinking Feature Uncertainty"), its weights and its forward, shared by training
// (framework/train/eagle_trainer.h, through libtorch autograd) and drafting (eagle_drafter.h).
//
// Notation: t_i the token at position i; f_i the target's feature at position i, i.e. its
// last layer's residual stream after the final RMSNorm (what the LM head reads, so that
// logits_i = W_lm f_i predict t_{i+1}). The head maps the pair (f_i, t_{i+1}) at position i to
// a prediction of f_{i+1}:
//   x_i   = fc([f_i ; E[t_{i+1}]])                    [n, 2d] -> [n, d]   (fc has a bias)
//   h_i   = x_i + o(Attn(RoPE(q(N1 x)), RoPE(k(N1 x)), v(N1 x)))         one Llama decoder layer
//   f^_{i+1} = h_i + down(silu(gate(N2 h)) * up(N2 h))                   (N = RMSNorm)
//   logits = f^ W_head^T                               [n, V']
// E, the target's final norm and W_lm are the target's, frozen. W_head is W_lm itself (V' = V)
// or its rows of the N most frequent target tokens (FR-Spec's reduced head, V' = N; vocab_ids
// maps row -> target token id). The layer has the target's shapes (heads, kv heads, head_dim,
// intermediate size), RoPE in the HF rotate_half layout.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/model_config.h"
#include "framework/draft/builtin/decoder_layer.h"

namespace speclab {

struct EagleHead {
  ModelConfig target;  // the target's config: shapes, rope_theta, rms_norm_eps

  // Trained (float32):
  at::Tensor fc_weight;          // [d, 2d]
  at::Tensor fc_bias;            // [d]
  DecoderLayerWeights layer;     // the decoder layer (decoder_layer.h), without biases

  // Frozen, from the target (float32):
  at::Tensor embed;       // [V, d] the target's token embeddings
  at::Tensor final_norm;  // [d]    the target's final RMSNorm weight
  at::Tensor lm_head;     // [V', d] the target's LM head rows of vocab_ids (all rows when V' = V)
  at::Tensor vocab_ids;   // [V'] int64 target token id of each lm_head row

  // The trained tensors by their safetensors name ("fc.weight", "layer.self_attn.q_proj.weight"...).
  std::map<std::string, at::Tensor*> trained();
  std::map<std::string, const at::Tensor*> trained() const;
  int64_t head_vocab() const { return lm_head.size(0); }
};

// A fresh head for `target` with weights drawn from a seeded normal (std 0.02; norms 1, fc
// bias 0): deterministic given the seed. Frozen tensors are left undefined.
EagleHead init_eagle_head(const ModelConfig& target, uint64_t seed);

// The target's features f from its last layer's residual stream: RMSNorm(h) * final_norm (the
// target's final norm weight [d] and epsilon). Every drafter on target features uses this.
at::Tensor target_features(const at::Tensor& hidden /*[n, d]*/, const at::Tensor& final_norm /*[d]*/,
                           double eps);  // -> [n, d]
// target_features with the head's frozen final norm.
at::Tensor eagle_features(const EagleHead& head, const at::Tensor& hidden /*[n, d]*/);  // -> [n, d]

// The head's layer input x = fc([f ; E[next]]).
at::Tensor eagle_input(const EagleHead& head, const at::Tensor& features /*[n, d]*/,
                       const at::Tensor& next_tokens /*[n] int64*/);  // -> [n, d]

// q, k, v of the layer for x at `positions` (RoPE applied to q and k): decoder_qkv.
using EagleQkv = LayerQkv;
EagleQkv eagle_qkv(const EagleHead& head, const at::Tensor& x /*[n, d]*/, const at::Tensor& positions /*[n] int64*/);

// The rest of the layer: attention of q over (k_ctx, v_ctx) where allowed[i][j], then the MLP.
// Returns the predicted features f^ [n, d].
at::Tensor eagle_attend(const EagleHead& head, const at::Tensor& x /*[n, d]*/, const EagleQkv& qkv,
                        const at::Tensor& k_ctx /*[c, KVH, hd]*/, const at::Tensor& v_ctx /*[c, KVH, hd]*/,
                        const at::Tensor& allowed /*[n, c] bool*/);

// Head logits over the head's vocabulary (lm_head rows).
at::Tensor eagle_logits(const EagleHead& head, const at::Tensor& predicted /*[n, d]*/);  // -> [n, V']

// The whole head over packed training sequences: row r attends to rows r' <= r of its own
// segment (segment ids [n] int64). Returns f^ [n, d].
at::Tensor eagle_forward_packed(const EagleHead& head, const at::Tensor& features /*[n, d]*/,
                                const at::Tensor& next_tokens /*[n]*/, const at::Tensor& positions /*[n]*/,
                                const at::Tensor& segments /*[n]*/);

// Draft steps 1..steps of the head over packed training sequences, as drafting runs them
// (training-time test: EAGLE-3, Li et al. 2025, section 3.3; HASS, Zhang et al. 2024). Step 1 is
// eagle_forward_packed. In step k > 1, row r (a pair of position p >= k - 1 in its sequence)
// stands for the k-th draft token after the verified prefix ending at row s = r - k + 1: its
// input feature is step k-1's prediction at row r - 1 (the head's own guess of f_r; detached
// from the graph when detach_inputs), its token the true next one (an accepted chain), and it
// attends to what the drafter's KV holds then: step 1's K/V of rows <= s of its sequence (the
// target's real features) and step m's K/V of row s + m - 1 for m = 2..k (its own earlier
// drafts, itself last). Returns [steps] predictions f^, each [n, d]; the rows of step k with
// position < k - 1 have no such chain and must be ignored.
std::vector<at::Tensor> eagle_forward_unrolled(const EagleHead& head, const at::Tensor& features /*[n, d]*/,
                                               const at::Tensor& next_tokens /*[n]*/,
                                               const at::Tensor& positions /*[n]*/, const at::Tensor& segments /*[n]*/,
                                               int64_t steps, bool detach_inputs = true);

}  // namespace speclab
