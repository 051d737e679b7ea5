#include "framework/draft/builtin/lookup_first.h"

#include <algorithm>

#include "framework/core/error.h"
#include "framework/draft/builtin/prompt_lookup.h"

namespace speclab {

LookupFirstDrafter::LookupFirstDrafter(std::unique_ptr<Drafter> fallback, int min_n, int max_n, int fallback_k)
    : fallback_(std::move(fallback)), min_n_(min_n), max_n_(max_n), fallback_k_(fallback_k) {
  SPECLAB_CHECK(fallback_ != nullptr, "prompt_lookup_first: no drafter to fall back on");
  SPECLAB_CHECK(min_n_ >= 1 && max_n_ >= min_n_ && fallback_k_ >= 0, "prompt_lookup_first: bad n-gram range or cap");
}

std::string LookupFirstDrafter::name() const { return "prompt_lookup+" + fallback_->name(); }

void LookupFirstDrafter::begin(SeqId seq, const TokenList& prompt) {
  fallback_proposed_ = false;
  fallback_->begin(seq, prompt);
}

DraftBlock LookupFirstDrafter::propose(const DraftContext& ctx, int max_k) {
  fallback_proposed_ = false;
  DraftBlock b;
  if (max_k <= 0) return b;
  b.tokens = PromptLookupDrafter::lookup(*ctx.tokens, min_n_, max_n_, max_k);
  if (!b.tokens.empty()) {
    ++lookup_steps_;
    b.source = "prompt_lookup";
    return b;
  }
  fallback_proposed_ = true;
  ++fallback_steps_;
  DraftBlock f = fallback_->propose(ctx, fallback_k_ > 0 ? std::min(max_k, fallback_k_) : max_k);
  if (f.source.empty()) f.source = fallback_->name();
  return f;
}

void LookupFirstDrafter::accept(SeqId seq, int n_accepted) {
  if (fallback_proposed_) fallback_->accept(seq, n_accepted);
  fallback_proposed_ = false;
}

void LookupFirstDrafter::end(SeqId seq) {
  fallback_proposed_ = false;
  fallback_->end(seq);
}

}  // namespace speclab
