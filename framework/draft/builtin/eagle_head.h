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
// EAGLE's head has one decoder layer. A deeper head (`head.layers` L > 1) stacks L of them,
// layer l reading layer l-1's output and attending over its own K/V; f^ is the last one's
// output. The first layer keeps the one-layer head's tensor names ("layer."), layer l >= 1 is
// "layers.<l>.", so a shallower head is the first layers of a deeper one (train.init grows it
// with layers whose o and down projections are 0: each such layer is the identity, and the grown
// head starts out computing exactly what the shallower head computed).
// E, the target's final norm and W_lm are the target's, frozen. W_head is W_lm itself (V' = V)
// or its rows of the N most frequent target tokens (FR-Spec's reduced head, V' = N; vocab_ids
// maps row -> target token id). The layer has the target's shapes (heads, kv heads, head_dim,
// intermediate size), RoPE in the HF rotate_half layout.
//
// Auxiliary layers (EAGLE-3's feature fusion, Li et al. 2025, section 3.2: the last layer is
// specialised for the very next token, lower layers carry more of what follows). With aux_layers
// l_1..l_A, fc also reads a_i = [RMS(h^{l_1}_i) ; ... ; RMS(h^{l_A}_i)], the target's residual
// stream after those layers at position i, each row scaled to unit RMS (no weight):
//   x_i = fc([f_i ; E[t_{i+1}] ; a_i])                [n, (2 + A) d] -> [n, d]
// Only the first draft step has them: a later step's input is the head's own f^, and its a is 0
// (also in training, eagle_forward_unrolled). A head without aux layers (A = 0) is the EAGLE head
// above, and one with A > 0 whose fc columns over a are 0 computes exactly what it computes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/model_config.h"
#include "framework/draft/builtin/decoder_layer.h"

namespace speclab {

struct EagleHead {
  ModelConfig target;  // the target's config: shapes, rope_theta, rms_norm_eps
  std::vector<int64_t> aux_layers;  // target layers (each below the last) fc also reads; empty: EAGLE

  // Trained (float32):
  at::Tensor fc_weight;          // [d, (2 + A) d], A = aux_layers.size()
  at::Tensor fc_bias;            // [d]
  std::vector<DecoderLayerWeights> layers;  // L >= 1 decoder layers (decoder_layer.h), without biases

  // Frozen, from the target (float32):
  at::Tensor embed;       // [V, d] the target's token embeddings
  at::Tensor final_norm;  // [d]    the target's final RMSNorm weight
  at::Tensor lm_head;     // [V', d] the target's LM head rows of vocab_ids (all rows when V' = V)
  at::Tensor vocab_ids;   // [V'] int64 target token id of each lm_head row

  // The trained tensors by their safetensors name ("fc.weight", "layer.self_attn.q_proj.weight"...).
  std::map<std::string, at::Tensor*> trained();
  std::map<std::string, const at::Tensor*> trained() const;
  int64_t head_vocab() const { return lm_head.size(0); }
  int64_t n_layers() const { return static_cast<int64_t>(layers.size()); }  // L
  int64_t aux_width() const { return static_cast<int64_t>(aux_layers.size()) * target.hidden_size; }  // A d
};

// A fresh head for `target` with weights drawn from a seeded normal (std 0.02; norms 1, fc
// bias 0): deterministic given the seed. Draw order: fc over [f ; E], the first layer, fc's
// columns over a, then layers 1..L-1, so what a one-layer head draws does not depend on
// aux_layers or n_layers. Frozen tensors are left undefined.
EagleHead init_eagle_head(const ModelConfig& target, uint64_t seed, const std::vector<int64_t>& aux_layers = {},
                          int64_t n_layers = 1);

// The safetensors prefix of layer l's tensors: "layer." for l = 0, "layers.<l>." after it.
std::string eagle_layer_prefix(int64_t l);

// The target's features f from its last layer's residual stream: RMSNorm(h) * final_norm (the
// target's final norm weight [d] and epsilon). Every drafter on target features uses this.
at::Tensor target_features(const at::Tensor& hidden /*[n, d]*/, const at::Tensor& final_norm /*[d]*/,
                           double eps);  // -> [n, d]
// target_features with the head's frozen final norm.
at::Tensor eagle_features(const EagleHead& head, const at::Tensor& hidden /*[n, d]*/);  // -> [n, d]

// The auxiliary features a from the residual stream of one aux layer: RMS-normalised rows
// (unit weight, the target's epsilon). The drafter's a row is these, one per aux layer, side by side.
at::Tensor eagle_aux_features(const at::Tensor& hidden /*[n, d]*/, double eps);  // -> [n, d]

// The head's layer input x = fc([f ; E[next] ; a]); aux undefined: a = 0 (a later draft step).
at::Tensor eagle_input(const EagleHead& head, const at::Tensor& features /*[n, d]*/,
                       const at::Tensor& next_tokens /*[n] int64*/,
                       const at::Tensor& aux = {} /*[n, A d] or undefined*/);  // -> [n, d]

// q, k, v of layer l for its input x at `positions` (RoPE applied to q and k): decoder_qkv.
// Layer 0's input is eagle_input's x, layer l's the output of layer l - 1.
using EagleQkv = LayerQkv;
EagleQkv eagle_qkv(const EagleHead& head, int64_t l, const at::Tensor& x /*[n, d]*/,
                   const at::Tensor& positions /*[n] int64*/);

// The rest of layer l: attention of q over (k_ctx, v_ctx) where allowed[i][j], then the MLP.
// Returns the layer's output [n, d]; the last layer's is the predicted features f^.
at::Tensor eagle_attend(const EagleHead& head, int64_t l, const at::Tensor& x /*[n, d]*/, const EagleQkv& qkv,
                        const at::Tensor& k_ctx /*[c, KVH, hd]*/, const at::Tensor& v_ctx /*[c, KVH, hd]*/,
                        const at::Tensor& allowed /*[n, c] bool*/);

// Head logits over the head's vocabulary (lm_head rows).
at::Tensor eagle_logits(const EagleHead& head, const at::Tensor& predicted /*[n, d]*/);  // -> [n, V']

// The whole head over packed training sequences: row r attends to rows r' <= r of its own
// segment (segment ids [n] int64). Returns f^ [n, d].
// aux: the rows' a, or undefined (0).
at::Tensor eagle_forward_packed(const EagleHead& head, const at::Tensor& features /*[n, d]*/,
                                const at::Tensor& next_tokens /*[n]*/, const at::Tensor& positions /*[n]*/,
                                const at::Tensor& segments /*[n]*/, const at::Tensor& aux = {} /*[n, A d]*/);

// Draft steps 1..steps of the head over packed training sequences, as drafting runs them
// (training-time test: EAGLE-3, Li et al. 2025, section 3.3; HASS, Zhang et al. 2024). Step 1 is
// eagle_forward_packed. In step k > 1, row r (a pair of position p >= k - 1 in its sequence)
// stands for the k-th draft token after the verified prefix ending at row s = r - k + 1: its
// input feature is step k-1's prediction at row r - 1 (the head's own guess of f_r; detached
// from the graph when detach_inputs), its token the true next one (an accepted chain), and it
// attends to what the drafter's KV holds then: step 1's K/V of rows <= s of its sequence (the
// target's real features) and step m's K/V of row s + m - 1 for m = 2..k (its own earlier
// drafts, itself last); in a deeper head, each layer attends so over its own K/V. Returns
// [steps] predictions f^, each [n, d]; the rows of step k with position < k - 1 have no such
// chain and must be ignored. aux: step 1's a (undefined: 0);
// steps k > 1 read a = 0, as drafting does.
std::vector<at::Tensor> eagle_forward_unrolled(const EagleHead& head, const at::Tensor& features /*[n, d]*/,
                                               const at::Tensor& next_tokens /*[n]*/,
                                               const at::Tensor& positions /*[n]*/, const at::Tensor& segments /*[n]*/,
                                               int64_t steps, bool detach_inputs = true,
                                               const at::Tensor& aux = {} /*[n, A d]*/);

}  // namespace speclab
