// Datastore — the token corpus of the `retrieval` drafter: REST's retrieval-based drafting (He et
// al. 2024, "REST: Retrieval-Based Speculative Decoding", NAACL), over a suffix array. Torch-free.
//
// Vocabulary:
//   corpus     the sequences, concatenated with a separator after each; a suffix is a start
//              position in it, read up to (not across) its separator
//   match      the longest suffix of the context, of n tokens with min_n <= n <= max_n, that
//              occurs in the corpus with at least one token after it; its occurrences are a
//              half-open range [lo, hi) of the suffix array (suffixes sorted by their tokens)
//   draft      from the match, token by token: the token that most often follows the drafted
//              prefix among the occurrences still consistent with it (ties: the smaller id), with
//              its support: how many of those occurrences it continues / how many continue at
//              all. The occurrences not continued by it are dropped (REST's trie, walked along
//              its most frequent branch).
//
// Invariants: sequences hold token ids >= 0; the suffix array orders every suffix by its first
// kCompareDepth tokens (ties by start position), which covers any match plus draft; lookups are
// deterministic and do not change the datastore (safe to share between drafters and threads).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/core/types.h"

namespace speclab {

struct RetrievalDraft {
  TokenList tokens;             // [k] drafted tokens
  std::vector<float> support;   // [k] the share of the consistent occurrences each token continues, in (0, 1]
  int match_length = 0;         // n of the match (0: none)
  int64_t occurrences = 0;      // occurrences of the match in the corpus that a token follows
};

class Datastore {
 public:
  // Suffixes are ordered by at most this many tokens: a match of n tokens drafting k needs
  // n + k <= kCompareDepth (retrieval_max 64 and gamma 64 fit).
  static constexpr int kCompareDepth = 128;

  // The corpus of `sequences` ([S][len_s] token ids, each >= 0, else Error(kBadInput, "token
  // ...")). Builds the suffix array: O(N log N) comparisons of at most kCompareDepth tokens, N the
  // corpus size.
  explicit Datastore(const std::vector<TokenList>& sequences);

  // The draft continuing `context` ([T] token ids; its last tokens are matched): up to max_k
  // tokens, stopping early where no occurrence continues, or where a token's support is below
  // min_support (a token at 1-based draft position i < support_from is kept regardless).
  // 1 <= min_n <= max_n, max_n + max_k <= kCompareDepth (Error(kBadInput) otherwise).
  RetrievalDraft draft(const TokenList& context, int min_n, int max_n, int max_k, double min_support = 0.0,
                       int support_from = 1) const;

  int64_t n_sequences() const { return n_sequences_; }
  int64_t n_tokens() const { return static_cast<int64_t>(corpus_.size()) - n_sequences_; }  // separators excluded

  // For tests: the suffix array (start positions in the corpus, sorted).
  const std::vector<int64_t>& suffix_array() const { return suffixes_; }

 private:
  // The range [lo, hi) of suffixes that start with pattern[0, n) and have a token after it.
  std::pair<int64_t, int64_t> occurrences(const Token* pattern, int n) const;
  // Token d of the suffix at suffix-array index i. Callers only ask where tokens [0, d) are
  // known not to be separators (they matched a pattern or a drafted prefix), so the read stays
  // within the suffix's sequence or lands on its separator.
  Token at(int64_t i, int d) const;

  static constexpr Token kSeparator = -1;
  std::vector<Token> corpus_;      // [N] tokens, kSeparator after each sequence
  std::vector<int64_t> suffixes_;  // [suffixes] starts of the suffixes (every non-separator position)
  int64_t n_sequences_ = 0;
};

}  // namespace speclab
