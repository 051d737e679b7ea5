// DraftTrainData — the target's teacher-forced sequences that every draft trainer reads
// (eagle_trainer.h, medusa_trainer.h), and the one rule that turns a (seed, step) into a batch.
//
// Batches: step s (0-based, before its update) draws sequences with batch_rng(seed, s), each
// uniformly among those not drawn yet, until their pairs reach batch_tokens (or every sequence
// is drawn). A batch is therefore a pure function of (seed, step): a resumed run continues
// exactly as an uninterrupted one. A trainer may draw more from the same Rng after the batch
// (EAGLE's feature noise); that too is a function of (seed, step).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/rng.h"

namespace speclab {

// Teacher-forced sequences of the target.
struct DraftTrainData {
  at::Tensor features;          // [N, d] float32 the target's features (eagle_features) at each position
  at::Tensor aux;               // [N, A d] float32 an EAGLE head's auxiliary features (eagle_aux_features of
                                // its aux layers, side by side) at each position; undefined when A = 0
  at::Tensor tokens;            // [N] int64 the token at each position
  at::Tensor target_top1;       // [N] int64 the target's argmax at each position (predicts the next token)
  std::vector<int64_t> offsets;  // [S + 1] sequence s is rows [offsets[s], offsets[s + 1])
  // [S] prompt tokens at the start of each sequence (the rest is the target's answer), or empty
  // when unknown (data cached before the field existed: every row then counts as answer).
  std::vector<int64_t> prompt_lengths;

  int64_t n_sequences() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t n_pairs() const;  // training pairs: sum over sequences of (length - 1)
};

// Throws Error(kBadInput, what) unless d has a sequence of two or more tokens and its tensors
// agree with its offsets and with the target's hidden size (and prompt_lengths, when given, has
// one length per sequence, none longer than its sequence; aux, when defined, one row per position).
void check_train_data(const DraftTrainData& d, int64_t hidden, const std::string& what);

// The Rng of step `step`'s batch (0-based).
Rng batch_rng(uint64_t seed, int64_t step);

// The batch's sequence indices, drawn from rng as the header describes.
std::vector<int64_t> draw_sequences(const DraftTrainData& d, int64_t batch_tokens, Rng& rng);

// Target token id -> row of a head over `vocab_ids` ([V'] int64), -100 (cross-entropy's ignore
// index) for ids outside it: [vocab] int64.
at::Tensor head_row_index(const at::Tensor& vocab_ids, int64_t vocab);

// The pair rows of sequences `seqs`: position i of each sequence [a, b) for i in [a, b - 1).
struct PairRows {
  at::Tensor in_rows;    // [n] int64 row i
  at::Tensor positions;  // [n] int64 i - a
  at::Tensor segments;   // [n] int64 index of the sequence in seqs
  at::Tensor seq_end;    // [n] int64 b, the end row of i's sequence
  at::Tensor answer_row;  // [n] int64 a + the sequence's prompt length (a when unknown)
};

// Which pairs validation counts: those whose label, the target's top-1 at row label_rows[j],
// sits at an answer row (>= p.answer_row). Those are the predictions a drafter makes at
// inference: the target itself emits the first answer token from the prompt's last row, and
// every draft after it is labelled by an answer row (EAGLE's pair i by row i + 1, Medusa head k
// by row i + k, a draft model's by row i). label_rows: [n] int64; returns [n] bool.
at::Tensor answer_labels(const PairRows& p, const at::Tensor& label_rows);
PairRows pairs_of(const DraftTrainData& d, const std::vector<int64_t>& seqs);

// Calls f(pairs_of(d, seqs)) for the sequences of d in order, `chunk` at a time (a chunk without
// pairs is skipped): how the trainers evaluate, in bounded memory.
void for_each_pair_chunk(const DraftTrainData& d, int64_t chunk, const std::function<void(const PairRows&)>& f);

}  // namespace speclab
