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
// tokens) runs as prompt i finishes, so completions arrive out of prompt order.
//
// Output: greedy only. Each prompt's tokens equal generate_ar's with greedy sampling, token for
// token, where the model promises bit-identical rows (Model::row_exact_batch() > 0: the width is
// then clamped to it). Without that promise (row_exact_batch() == 0) a batched row may differ from
// a single one in its last bits, and so may a near-tie argmax. tests/unit/test_batch_decode.cpp
// compares the two on real models.
#pragma once

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

  void validate() const;  // Error(kConfig, ..., "batch", "width")
};

// prompts: token ids including BOS when the model wants one; each must fit the model context
// (Error(kBadInput, ..., "prompt") as generate_ar). Prompts are started in index order.
void generate_ar_batch(const Model& model, const TokenDecoder& decoder, const std::vector<TokenList>& prompts,
                       const GenerationOptions& gen, const BatchDecodeOptions& options,
                       const std::function<void(size_t index, const TokenList& tokens)>& on_done);

}  // namespace speclab
