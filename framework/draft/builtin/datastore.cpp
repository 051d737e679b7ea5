#include "framework/draft/builtin/datastore.h"

#include <algorithm>
#include <string>

#include "framework/core/error.h"

namespace speclab {

Datastore::Datastore(const std::vector<TokenList>& sequences) {
  size_t total = 0;
  for (const TokenList& s : sequences) total += s.size() + 1;
  corpus_.reserve(total);
  for (size_t q = 0; q < sequences.size(); ++q) {
    for (Token t : sequences[q]) {
      if (t < 0)
        throw Error(ErrorKind::kBadInput,
                    "token " + std::to_string(t) + " in sequence " + std::to_string(q) + ": expected ids >= 0");
      suffixes_.push_back(static_cast<int64_t>(corpus_.size()));
      corpus_.push_back(t);
    }
    corpus_.push_back(kSeparator);
  }
  n_sequences_ = static_cast<int64_t>(sequences.size());
  const Token* c = corpus_.data();
  // Every suffix ends at a separator, so a comparison never reads past the corpus.
  std::sort(suffixes_.begin(), suffixes_.end(), [c](int64_t a, int64_t b) {
    for (int d = 0; d < kCompareDepth; ++d) {
      const Token x = c[a + d], y = c[b + d];
      if (x != y) return x < y;
      if (x == kSeparator) break;
    }
    return a < b;
  });
}

Token Datastore::at(int64_t i, int d) const {
  return corpus_[static_cast<size_t>(suffixes_[static_cast<size_t>(i)] + d)];
}

std::pair<int64_t, int64_t> Datastore::occurrences(const Token* pattern, int n) const {
  // -1 / 0 / +1: the suffix's first n tokens against the pattern (a separator sorts first).
  auto compare = [&](int64_t i) {
    const Token* s = corpus_.data() + suffixes_[static_cast<size_t>(i)];
    for (int d = 0; d < n; ++d) {
      if (s[d] != pattern[d]) return s[d] < pattern[d] ? -1 : 1;
      if (s[d] == kSeparator) return -1;  // not reached: pattern tokens are >= 0
    }
    return 0;
  };
  int64_t lo = 0, hi = static_cast<int64_t>(suffixes_.size());
  // First suffix >= pattern, then first > pattern: binary searches over the sorted suffixes.
  int64_t a = lo, b = hi;
  while (a < b) {
    const int64_t m = a + (b - a) / 2;
    if (compare(m) < 0) a = m + 1; else b = m;
  }
  lo = a;
  b = hi;
  while (a < b) {
    const int64_t m = a + (b - a) / 2;
    if (compare(m) <= 0) a = m + 1; else b = m;
  }
  hi = a;
  // Those ending right after the pattern sort first (the separator is the smallest token).
  a = lo;
  b = hi;
  while (a < b) {
    const int64_t m = a + (b - a) / 2;
    if (at(m, n) == kSeparator) a = m + 1; else b = m;
  }
  return {a, hi};
}

RetrievalDraft Datastore::draft(const TokenList& context, int min_n, int max_n, int max_k, double min_support,
                                int support_from) const {
  if (min_n < 1 || max_n < min_n || max_k < 0 || max_n + max_k > kCompareDepth)
    throw Error(ErrorKind::kBadInput, "Datastore::draft: expected 1 <= min_n <= max_n and max_n + max_k <= " +
                                          std::to_string(kCompareDepth) + ", found min_n " + std::to_string(min_n) +
                                          ", max_n " + std::to_string(max_n) + ", max_k " + std::to_string(max_k));
  RetrievalDraft r;
  if (max_k == 0) return r;
  for (Token t : context)
    if (t < 0) return r;  // no corpus token matches it (not reached for real token ids)
  const int64_t T = static_cast<int64_t>(context.size());
  for (int n = static_cast<int>(std::min<int64_t>(max_n, T)); n >= min_n; --n) {
    auto [lo, hi] = occurrences(context.data() + (T - n), n);
    if (lo >= hi) continue;
    r.match_length = n;
    r.occurrences = hi - lo;
    for (int d = n; d < n + max_k; ++d) {
      // The occurrences in [lo, hi) share tokens [0, d) and are sorted by token d: each
      // continuation is one run. Those without one (a separator) come first.
      int64_t i = lo, e = hi;
      while (i < e) {
        const int64_t m = i + (e - i) / 2;
        if (at(m, d) == kSeparator) i = m + 1; else e = m;
      }
      const int64_t continuing = hi - i;
      if (continuing == 0) break;
      int64_t best_lo = i, best_hi = i;
      while (i < hi) {
        const Token t = at(i, d);
        int64_t a = i + 1, b = hi;  // end of t's run
        while (a < b) {
          const int64_t m = a + (b - a) / 2;
          if (at(m, d) == t) a = m + 1; else b = m;
        }
        if (a - i > best_hi - best_lo) best_lo = i, best_hi = a;  // strict: ties keep the smaller id
        i = a;
      }
      const float support = static_cast<float>(best_hi - best_lo) / static_cast<float>(continuing);
      const int position = d - n + 1;
      if (position >= support_from && support < min_support) break;
      r.tokens.push_back(at(best_lo, d));
      r.support.push_back(support);
      lo = best_lo;
      hi = best_hi;
    }
    return r;
  }
  return r;
}

}  // namespace speclab
