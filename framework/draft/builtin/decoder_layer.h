// DecoderLayer — one Llama/Qwen2 decoder layer on libtorch ops, differentiable: the layer the
// trained drafts are made of (the EAGLE head's one layer, eagle_head.h; the distilled draft
// model's 1-8 layers, framework/train/small_draft.h). The runtime model (models/llama) has its
// own kernels; tests compare the two.
//
//   h   = x + o(Attn(RoPE(q(N1 x) + bq), RoPE(k(N1 x) + bk), v(N1 x) + bv))
//   out = h + down(silu(gate(N2 h)) * up(N2 h))            N = RMSNorm (weight, eps)
// Attention is grouped-query (H query heads share KVH key/value heads), softmax over the
// context positions a row may see, scaled by 1/sqrt(head_dim). RoPE is HF's rotate_half layout
// (models/weights.h) with base rope_theta.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "framework/core/model_config.h"
#include "framework/core/rng.h"

namespace speclab {

struct DecoderLayerWeights {
  at::Tensor input_norm;              // [d]
  at::Tensor q_proj, k_proj, v_proj;  // [H*hd, d], [KVH*hd, d], [KVH*hd, d]
  at::Tensor q_bias, k_bias, v_bias;  // [H*hd], [KVH*hd], [KVH*hd]; undefined = no bias
  at::Tensor o_proj;                  // [d, H*hd]
  at::Tensor post_norm;               // [d]
  at::Tensor gate_proj, up_proj;      // [I, d]
  at::Tensor down_proj;               // [d, I]

  // The tensors by HF name under `prefix` ("model.layers.3." -> "model.layers.3.self_attn.q_proj.weight"),
  // the biases only when defined.
  std::map<std::string, at::Tensor*> named(const std::string& prefix);
};

// A layer of `c`'s shapes: projections drawn from `rng` ~ normal(0, 0.02) in the order q, k, v,
// o, gate, up, down; norms 1; biases (when c.attention_bias) 0. Deterministic given the Rng.
DecoderLayerWeights init_decoder_layer(const ModelConfig& c, Rng& rng);

// `shape` filled from `rng` ~ normal(0, std) (Box-Muller, two values per pair of draws), float32.
at::Tensor normal_tensor(Rng& rng, const std::vector<int64_t>& shape, double std);

// x * rsqrt(mean(x^2) + eps) * w over the last dim.
at::Tensor rms_norm_rows(const at::Tensor& x /*[n, d]*/, const at::Tensor& w /*[d]*/, double eps);  // -> [n, d]

// q, k, v of the layer for x at `positions` (RoPE applied to q and k).
struct LayerQkv {
  at::Tensor q;  // [n, H, hd]
  at::Tensor k;  // [n, KVH, hd]
  at::Tensor v;  // [n, KVH, hd]
};
LayerQkv decoder_qkv(const ModelConfig& c, const DecoderLayerWeights& w, const at::Tensor& x /*[n, d]*/,
                     const at::Tensor& positions /*[n] int64*/);

// The rest of the layer: attention of qkv.q over (k_ctx, v_ctx) where allowed[i][j], then the
// MLP. Returns the layer output [n, d].
at::Tensor decoder_attend(const ModelConfig& c, const DecoderLayerWeights& w, const at::Tensor& x /*[n, d]*/,
                          const LayerQkv& qkv, const at::Tensor& k_ctx /*[c, KVH, hd]*/,
                          const at::Tensor& v_ctx /*[c, KVH, hd]*/, const at::Tensor& allowed /*[n, c] bool*/);

// Packed training sequences: row r may see rows r' <= r of its own segment.
at::Tensor causal_segment_mask(const at::Tensor& segments /*[n] int64*/);  // -> [n, n] bool

// The whole layer over packed sequences (decoder_qkv + decoder_attend with causal_segment_mask).
at::Tensor decoder_layer_packed(const ModelConfig& c, const DecoderLayerWeights& w, const at::Tensor& x /*[n, d]*/,
                                const at::Tensor& positions /*[n]*/, const at::Tensor& segments /*[n]*/);  // -> [n, d]

}  // namespace speclab
