// Batched greedy AR decoding: many prompts, one forward per step for all the sequences in flight
// (Model::forward_decode_batch), for throughput work such as the target answering thousands of
// training prompts (`speclab train-draft`'s data stage, experiments/app/draft_training.h).
//
//   generate_ar_batch(model, decoder, prompts, gen, options, on_done)
//
// Up to options.width sequences are in flight. A sequence starts with its own prefill (one
// forward over its prompt, as generate_ar's), then decodes one token per step beside the others;
// when it stops (StopCriteria: EOS, gen.max_new_tokens, a stop string, the context) its KV
// sequence is released and the next prompt takes its place (continuous batching). on_done(i,
// answer) runs as prompt i finishes, so completions arrive out of prompt order.
//
// Output: greedy only. Each prompt's tokens equal generate_ar's with greedy sampling, token for
// token, where the model promises bit-identical rows (Model::row_exact_batch() > 0: the width is
// then clamped to it). Without that promise (row_exact_batch() == 0) a batched row may differ from
// a single one in its last bits, and so may a near-tie argmax. tests/integration/test_smollm2.cpp
// ([batch]) compares the two on a real model.
//
// With options.hidden_layers, the answer also carries what teacher forcing prompt + answer
// through the model would give, row by row, from the passes that produced it: the prefill's rows
// and each decode step's row (the answer's last token is fed once more for its own row). Those
// rows are the model's prefill and decode arithmetic, which agree with a single teacher-forced
// pass to float rounding (SmolLM2 on the CPU backend with int8 activations: the same bits).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "framework/core/model.h"
#include "framework/core/token_decoder.h"
#include "framework/engine/generation.h"

namespace speclab {

struct BatchDecodeOptions {
  // Sequences decoded together, >= 1. Larger widths read the weights once for more tokens; each
  // row still attends its own context.
  int64_t width = 16;
  // Layers whose residual stream (ForwardOptions::hidden_layers) each answer returns for every
  // position of prompt + answer; empty: none, and no row but the prompt's last computes logits.
  std::vector<int64_t> hidden_layers;

  void validate() const;  // Error(kConfig, ..., "batch", "width")
};

struct BatchAnswer {
  TokenList tokens;                 // the new tokens, including the one that triggered the stop
  // With hidden_layers (else empty), over the rows = prompt + tokens positions:
  std::vector<at::Tensor> hidden;   // [hidden_layers.size()] of [rows, hidden] float32
  at::Tensor top1;                  // [rows] int64, the model's argmax at each position
};

// prompts: token ids including BOS when the model wants one; each must fit the model context
// (Error(kBadInput, ..., "prompt") as generate_ar). Prompts are started in index order.
void generate_ar_batch(const Model& model, const TokenDecoder& decoder, const std::vector<TokenList>& prompts,
                       const GenerationOptions& gen, const BatchDecodeOptions& options,
                       const std::function<void(size_t index, const BatchAnswer& answer)>& on_done);

}  // namespace speclab
