// The decoder's layer loop, written once over a backend (STYLE.md, "Backends, not copies").
//
// Per layer: RMSNorm -> q/k/v projection -> RoPE on q and k, K/V written to the cache slots ->
// causal attention over the context -> output projection + residual -> RMSNorm -> gate/up
// projection -> SwiGLU -> down projection + residual. Then the final RMSNorm and the LM head on
// the last rows that want logits.
//
// A backend `Ops` is one device's implementation of these steps. It is constructed for one
// forward call (tokens, positions, KvView) and provides, with `Rows` its activation type, a
// row-major [n, cols] block of float32:
//   Rows embed()                                    token embeddings, [n, hidden]
//   Rows rms_norm(const Rows& x, const at::Tensor& w /*[cols]*/)           [n, cols]
//   Rows linear(const WeightMatrix& w, const Rows& x /*[n, w.in]*/, const at::Tensor& bias)
//                                                   x W^T (+ bias), [n, w.out]
//   void rope_and_store(int64_t layer, Rows& qkv /*[n, q_dim + 2 kv_dim]*/)
//                                                   RoPE on the q and k heads at the tokens'
//                                                   positions; k and v written to kv.write_slots
//   Rows attention(int64_t layer, const Rows& qkv)  causal attention of the q heads over the
//                                                   layer's cache, [n, q_dim]
//   Rows swiglu(const Rows& gate_up /*[n, 2 inter]*/)                      [n, inter]
//   void add(Rows& x, const Rows& y)                x += y
//   Rows last_rows(const Rows& x, int64_t k)        rows [n - k, n) of x
//   at::Tensor view(const Rows& x)                  x as a tensor (valid until the next step)
//   at::Tensor logits(const Rows& h /*[k, hidden]*/) h LM_head^T as an owning [k, vocab] tensor
//   void begin_layer()                              a new layer starts: temporaries of the
//                                                   previous one may be reused
// Ops is a template parameter rather than a virtual interface so that the CPU backend's steps
// inline over raw buffers: a decode step runs ~10 steps per layer and libtorch dispatch would
// cost more than their math.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "framework/core/model.h"
#include "framework/core/step_profile.h"
#include "models/llama/llama_weights.h"

namespace speclab {

// x: [n, hidden], the residual stream after layer `l`: copied, as float32 on the CPU, into every
// opts.hidden_out entry that asks for l.
inline void keep_hidden(const ForwardOptions& opts, int64_t l, const at::Tensor& x) {
  for (size_t i = 0; i < opts.hidden_layers.size(); ++i)
    if (opts.hidden_layers[i] == l)
      (*opts.hidden_out)[i] = x.to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

// Runs `layers` (ascending indices into w.layers) on n tokens and returns the logits of the last
// n_out rows: [n_out, vocab].
template <class Ops>
at::Tensor run_layers(Ops& ops, const LlamaWeights& w, const std::vector<int64_t>& layers, int64_t n, int64_t n_out,
                      const ForwardOptions& opts) {
  StepClock clock(opts.profile);  // per-step wall time when opts.profile is set (step_profile.h)
  auto x = ops.embed();
  clock.lap(LoopStep::kEmbed);
  for (int64_t l : layers) {
    const LlamaLayer& L = w.layers[static_cast<size_t>(l)];
    ops.begin_layer();
    auto h = ops.rms_norm(x, L.attn_norm);
    clock.lap(LoopStep::kNorm);
    auto qkv = ops.linear(L.w_qkv, h, L.b_qkv);
    clock.lap(LoopStep::kQkv);
    ops.rope_and_store(l, qkv);
    clock.lap(LoopStep::kRopeStore);
    auto att = ops.attention(l, qkv);
    clock.lap(LoopStep::kAttention);
    auto o = ops.linear(L.w_o, att, at::Tensor());
    clock.lap(LoopStep::kOutProj);
    ops.add(x, o);
    clock.lap(LoopStep::kAdd);
    auto h2 = ops.rms_norm(x, L.mlp_norm);
    clock.lap(LoopStep::kNorm);
    auto gate_up = ops.linear(L.w_gate_up, h2, at::Tensor());
    clock.lap(LoopStep::kGateUp);
    auto act = ops.swiglu(gate_up);
    clock.lap(LoopStep::kSwiglu);
    auto down = ops.linear(L.w_down, act, at::Tensor());
    clock.lap(LoopStep::kDown);
    ops.add(x, down);
    clock.lap(LoopStep::kAdd);
    if (!opts.hidden_layers.empty()) keep_hidden(opts, l, ops.view(x));
  }
  ops.begin_layer();
  auto hf = ops.rms_norm(ops.last_rows(x, n_out < n ? n_out : n), w.final_norm);
  clock.lap(LoopStep::kNorm);
  at::Tensor logits = ops.logits(hf);
  clock.lap(LoopStep::kLmHead);
  clock.finish();
  return logits;
}

}  // namespace speclab
