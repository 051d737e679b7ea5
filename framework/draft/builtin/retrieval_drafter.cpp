#include "framework/draft/builtin/retrieval_drafter.h"

namespace speclab {

DraftBlock RetrievalDrafter::propose(const DraftContext& ctx, int max_k) {
  const RetrievalDraft d =
      store_->draft(*ctx.tokens, min_n_, max_n_, max_k, ctx.min_confidence, ctx.confidence_from_token);
  DraftBlock b;
  b.tokens = d.tokens;
  b.confidence = d.support;
  return b;
}

}  // namespace speclab
