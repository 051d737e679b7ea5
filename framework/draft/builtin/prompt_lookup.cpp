#include "framework/draft/builtin/prompt_lookup.h"

#include <algorithm>

namespace speclab {

TokenList PromptLookupDrafter::lookup(const TokenList& t, int min_n, int max_n, int max_k) {
  const int64_t T = static_cast<int64_t>(t.size());
  for (int n = std::min<int64_t>(max_n, T - 1); n >= min_n; --n) {
    const int64_t suffix = T - n;
    // Latest start j < suffix with t[j, j+n) == t[suffix, T) and at least one token after it.
    for (int64_t j = suffix - 1; j >= 0; --j) {
      if (!std::equal(t.begin() + j, t.begin() + j + n, t.begin() + suffix)) continue;
      const int64_t from = j + n;
      const int64_t to = std::min<int64_t>(from + max_k, T);
      if (to <= from) continue;
      return TokenList(t.begin() + from, t.begin() + to);
    }
  }
  return {};
}

DraftBlock PromptLookupDrafter::propose(const DraftContext& ctx, int max_k) {
  DraftBlock b;
  b.tokens = lookup(*ctx.tokens, min_n_, max_n_, max_k);
  return b;
}

}  // namespace speclab
