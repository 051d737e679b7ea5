#include "framework/draft/builtin/sources_first.h"

#include <algorithm>

#include "framework/core/error.h"

namespace speclab {

namespace {

int capped(int max_k, int cap) { return cap > 0 ? std::min(max_k, cap) : max_k; }

}  // namespace

SourcesFirstDrafter::SourcesFirstDrafter(std::vector<Source> sources, std::unique_ptr<Drafter> fallback,
                                         int fallback_cap)
    : sources_(std::move(sources)), fallback_(std::move(fallback)), fallback_cap_(fallback_cap),
      steps_(sources_.size() + 1, 0) {
  SPECLAB_CHECK(fallback_ != nullptr, "draft sources first: no drafter to fall back on");
  SPECLAB_CHECK(!sources_.empty(), "draft sources first: no source");
  SPECLAB_CHECK(fallback_cap_ >= 0, "draft sources first: a negative cap on the drafter");
  for (const Source& s : sources_) SPECLAB_CHECK(s.drafter != nullptr && s.cap >= 0, "draft sources first: bad source");
}

int64_t SourcesFirstDrafter::steps_from(size_t i) const {
  SPECLAB_CHECK(i < steps_.size(), "draft sources first: no source " + std::to_string(i));
  return steps_[i];
}

std::string SourcesFirstDrafter::name() const {
  std::string n;
  for (const Source& s : sources_) n += s.drafter->name() + "+";
  return n + fallback_->name();
}

void SourcesFirstDrafter::begin(SeqId seq, const TokenList& prompt) {
  proposer_ = -1;
  for (Source& s : sources_) s.drafter->begin(seq, prompt);
  fallback_->begin(seq, prompt);
}

DraftBlock SourcesFirstDrafter::propose(const DraftContext& ctx, int max_k) {
  proposer_ = -1;
  if (max_k <= 0) return {};
  for (size_t i = 0; i < sources_.size(); ++i) {
    DraftBlock b = sources_[i].drafter->propose(ctx, capped(max_k, sources_[i].cap));
    if (b.tokens.empty()) continue;
    proposer_ = static_cast<int>(i);
    ++steps_[i];
    if (b.source.empty()) b.source = sources_[i].drafter->name();
    return b;
  }
  proposer_ = static_cast<int>(sources_.size());
  ++steps_.back();
  DraftBlock f = fallback_->propose(ctx, capped(max_k, fallback_cap_));
  if (f.source.empty()) f.source = fallback_->name();
  return f;
}

void SourcesFirstDrafter::accept(SeqId seq, int n_accepted) {
  if (proposer_ >= 0 && proposer_ < static_cast<int>(sources_.size()))
    sources_[static_cast<size_t>(proposer_)].drafter->accept(seq, n_accepted);
  else if (proposer_ == static_cast<int>(sources_.size()))
    fallback_->accept(seq, n_accepted);
  proposer_ = -1;
}

void SourcesFirstDrafter::end(SeqId seq) {
  proposer_ = -1;
  for (Source& s : sources_) s.drafter->end(seq);
  fallback_->end(seq);
}

}  // namespace speclab
