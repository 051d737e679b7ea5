// Choosing a draft token from a draft head's logits over its vocabulary: the target's whole
// vocabulary, or a reduced head's rows (FR-Spec: row j is target token ids[j]). Shared by the
// drafters on target features (eagle_drafter.h, medusa_drafter.h).
//
// Greedy: the argmax over the head's rows (ties: the lowest token id); its confidence is its
// probability at temperature 1 over those rows. Sampling: q = logits_to_probs (sampling.h) over
// the head's rows, placed at their token ids in a full-vocabulary row (tokens outside the head at
// probability 0, as logits of -inf would give), and one sample draw over the head's rows; its
// confidence is max q. The drafter reports q (and, when ctx.want_logits, the logits behind it),
// so the engine's rejection sampling stays lossless whatever the head predicts.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/draft/drafter.h"

namespace speclab {

// Appends the chosen token (and, sampling, its q and, when ctx.want_logits, its full logits) to
// `b` and returns true; or, when ctx.confidence_applies(b.tokens.size()) (a threshold that
// applies at this draft position) and the token's confidence is below ctx.min_confidence,
// appends nothing and returns false (drafting stops there). logits: [hv] in head row order; ids: [hv] target ids;
// vocab: the target's vocabulary size; scratch: reused between calls.
bool append_head_token(const float* logits, const int64_t* ids, int64_t hv, int64_t vocab, const DraftContext& ctx,
                       DraftBlock& b, std::vector<float>& scratch);

}  // namespace speclab
