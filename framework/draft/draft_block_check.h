// The host's check of every block a drafter proposes, built-in or plugin, before the target
// verifies it: a drafter that reports a q other than a distribution (a truncated candidate list,
// unnormalised scores) would silently bias the output, so it is refused instead.
#pragma once

#include <string>

#include "framework/draft/drafter.h"

namespace speclab {

// Probabilities in a q row must sum to 1 within this (float32 rows of up to ~150k entries).
constexpr double kDraftProbSumTolerance = 1e-4;

// Throws Error(kBadInput, message, "drafter '<name>'", field) unless: tokens.size() <= max_k
// (field "tokens"); every token in [0, vocab) ("tokens"); probs empty or one row per token
// ("probs"), each row of `vocab` entries, all finite and >= 0, summing to 1 within
// kDraftProbSumTolerance, and q(token) > 0 for the row's own token (it was drawn from q).
void check_draft_block(const DraftBlock& block, int max_k, int64_t vocab, const std::string& drafter_name);

}  // namespace speclab
