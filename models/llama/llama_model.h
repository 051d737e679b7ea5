// LlamaModel — the one decoder implementation for Llama 2/3, SmolLM/SmolLM2, Qwen2, Mistral and
// llama2.c checkpoints: RMSNorm, RoPE (HF rotate_half layout, rope_theta), GQA, SwiGLU MLP,
// optional q/k/v bias, tied or untied embeddings. float32 activations, or int8 against packed
// weights; the layer loop is models/llama/layer_loop.h, run by one backend per device.
//
// Stateless (STYLE.md §2): forward() reads and writes K/V only through the KvView it is given.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/model.h"
#include "models/llama/llama_weights.h"
#include "models/llama/placement.h"
#include "models/loaded_model.h"

namespace speclab {

struct CudaGraphCache;  // aten_backend.cpp

// The token ids a reduced LM head keeps (FR-Spec, Zhao et al. 2025: "the N most frequent"), since
// BPE ids follow merge order, i.e. frequency in the tokenizer's training corpus. Ascending.
// n >= vocab: every id below vocab (the whole head).
//   byte-level BPE (SmolLM2, Qwen2, Llama 3): the n lowest ids below `vocab`, plus every
//     end-of-sequence id and every control token written <|...|> (chat-template markers),
//     wherever they sit;
//   SentencePiece (llama2.c, GGUF "llama"): the n lowest ids among the ordinary pieces (token types
//     normal and user-defined: not unknown, control, unused or byte-fallback ones), plus every
//     end-of-sequence id. Such vocabularies begin with their control pieces (<unk>, <s>, </s>) and
//     the 256 <0xXX> byte-fallback pieces, which stand for characters the pieces do not cover and
//     are rare by construction: until 2026-12-05 they were counted among the n, so a head of 300
//     on stories260K's 512-piece vocabulary kept 41 pieces and drafted almost nothing.
std::vector<int64_t> frequent_head_ids(const Tokenizer& tok, int64_t vocab, int64_t n);

class LlamaModel : public Model {
 public:
  // Takes the weights out of `loaded` (its WeightMap is left empty) to avoid a second copy.
  // `activations`: how activations meet packed weights (llama_weights.h). `head_vocab` > 0 (and
  // below the vocabulary): the LM head keeps only the rows of frequent_head_ids(head_vocab), and
  // forward() returns -inf logits for every other token (a draft's reduced head, FR-Spec).
  // `placement`: the device and dtype (placement.h); config().device and ::dtype report it.
  explicit LlamaModel(LoadedModel& loaded, Activations activations = Activations::kInt8, int64_t head_vocab = 0,
                      const Placement& placement = {});

  const ModelConfig& config() const override { return config_; }
  // Runs the layer loop (layer_loop.h) on the backend of the KV storage's device: the CPU
  // backend (cpu_backend.cpp) for float32 host caches and host weights, else the libtorch-op
  // backend (aten_backend.cpp), which ForwardOptions::aten_reference also selects.
  at::Tensor forward(const at::Tensor& tokens /*[n] int64*/, const at::Tensor& positions /*[n] int64*/, const KvView& kv,
                     const ForwardOptions& opts = {}) const override;
  // On the CPU backend, one pass of B rows (cpu_backend.cpp): the matmuls over all rows, the
  // attention one call per sequence; bit-identical per row to forward() where B <= kMaxRowExact.
  // Elsewhere (a device cache, views over different storages) Model's default, B forwards.
  at::Tensor forward_decode_batch(const at::Tensor& tokens /*[B] int64*/, const at::Tensor& positions /*[B] int64*/,
                                  const std::vector<KvView>& kv, const ForwardOptions& opts = {}) const override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  uint64_t step_weight_bytes() const override { return step_weight_bytes_; }
  std::string weight_storage() const override { return weight_storage_; }
  Activations activations() const { return activations_; }
  // Multiply-accumulates per activation row of every matmul a forward runs (q/k/v, o, gate/up,
  // down in each layer, and the LM head at its kept rows), by the arithmetic that meets the
  // weights on the CPU: int8 dot products (packed weights against int8 activations) or float32.
  // `speclab bench`'s arithmetic roof divides them by the CPU's peak rates (arith_peak.h).
  struct RowMacs {
    double int8 = 0, f32 = 0;
  };
  RowMacs matmul_macs_per_row() const;
  // kMaxRowExact (32) on the CPU backend: its matmuls (gemv.h, qgemm.h), attention
  // (attention_cpu.h) and row operations compute each row independently of the batch.
  // kCudaPadRows (16) on CUDA with SpecLab's attention kernel: every call of up to that many
  // rows is padded to exactly that many, so that each library op sees one shape whatever n, and
  // the attention kernel (framework/cuda/paged_attention.h) is batch-invariant by design.
  // 0 elsewhere (dense 16-bit weights on the CPU).
  int64_t row_exact_batch() const override;
  // Rows a CUDA forward of up to this many tokens is padded to (row_exact_batch()).
  static constexpr int64_t kCudaPadRows = 16;
  // CUDA forwards of up to this many rows (after padding) replay captured CUDA graphs, one per
  // (layers, cache storage, rows, 256-position context bucket), unless SPECLAB_CUDA_GRAPHS=0 or
  // hidden states are asked for. A replay computes the same bits as the eager calls.
  static constexpr int64_t kCudaGraphRows = 64;
  // Whether this model's CUDA forwards replay graphs (a CUDA libtorch, on CUDA, not turned off).
  bool uses_cuda_graphs() const;
  // pack_f32_matrix(w, activations()) behind linear(): Q8_0 against int8 activations.
  std::shared_ptr<const PackedMatrix> pack_matrix(const at::Tensor& w /*[out, in] float32*/) const override;
  // cpu::attend_rows (attention_cpu.h) over the float32 cache, whatever this model's device.
  bool attend_rows(const AttentionRows& call) const override;
  // The final RMSNorm (libtorch ops, float32) and the LM head (the CPU kernels with this model's
  // activations on the CPU; libtorch ops in the placement's dtype on a device).
  at::Tensor final_norm(const at::Tensor& hidden /*[n, hidden]*/) const override;     // -> [n, hidden]
  at::Tensor lm_head(const at::Tensor& features /*[n, hidden]*/) const override;  // -> [n, vocab]

 private:
  // Moves the loader's weights into w_ (packed blocks stay packed; q/k/v and gate/up stacked).
  void take_weights(WeightMap& w);
  // opts.layers, or every layer when it is empty; throws on an index out of range.
  std::vector<int64_t> layers_to_run(const ForwardOptions& opts) const;
  // Checks opts.hidden_layers against the layers that run and sizes *opts.hidden_out.
  void prepare_hidden(const ForwardOptions& opts) const;
  // Checks the view's caches against this model's shape and its read side (Error(kInternal)).
  void check_cache(const KvView& kv) const;
  // Whether the CPU backend can serve this call (CPU float32 contiguous caches and weights).
  bool can_run_cpu(const KvView& kv) const;
  // The two backends' entry points; arguments as forward().
  at::Tensor forward_cpu(const at::Tensor& tokens /*[n]*/, const at::Tensor& positions /*[n]*/, const KvView& kv,
                         const ForwardOptions& opts) const;
  // [k, head ids] -> [k, vocab] with -inf for the tokens a reduced head leaves out (no-op otherwise).
  at::Tensor full_vocab(const at::Tensor& logits) const;
  at::Tensor forward_aten(const at::Tensor& tokens /*[n]*/, const at::Tensor& positions /*[n]*/, const KvView& kv,
                          const ForwardOptions& opts) const;
  // forward_aten's captured path: t, p, ws [rows] host int64 (tokens, positions, write slots,
  // padded); returns the host float32 logits of rows [n - n_out, n). CUDA libtorch builds only.
  at::Tensor forward_graphed(const at::Tensor& t, const at::Tensor& p, const at::Tensor& ws, const KvView& kv,
                             const ForwardOptions& opts, int64_t n, int64_t n_out, int64_t rows_out) const;

  ModelConfig config_;
  ResolvedPlacement placement_;
  LlamaWeights w_;
  at::Tensor head_ids_;  // [rows of w_.lm_head] int64 token ids, or undefined (the whole vocabulary)
  Activations activations_;
  uint64_t weight_bytes_ = 0, step_weight_bytes_ = 0;
  std::string weight_storage_;
  // Captured forwards (an execution cache, no sequence state): made on first use.
  mutable std::shared_ptr<CudaGraphCache> cuda_graphs_;
};

}  // namespace speclab
