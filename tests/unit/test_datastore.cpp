// The retrieval drafter's datastore (framework/draft/builtin/datastore.h): hand-worked corpora
// (the longest match, the most frequent continuation, ties, separators, the support threshold),
// and random corpora against a brute-force reference that scans every position of every sequence
// instead of searching a suffix array. Torch-free.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "framework/core/error.h"
#include "framework/draft/builtin/datastore.h"

using namespace speclab;

namespace {

// REST's draft by brute force: every (sequence, end) whose last n tokens are the context's last n
// and that has a token after them; then, token by token, the most frequent next token among the
// occurrences still consistent with the draft (ties: the smaller id).
RetrievalDraft reference_draft(const std::vector<TokenList>& corpus, const TokenList& context, int min_n, int max_n,
                               int max_k, double min_support, int support_from) {
  RetrievalDraft r;
  const int T = static_cast<int>(context.size());
  for (int n = std::min(max_n, T); n >= min_n; --n) {
    std::vector<std::pair<size_t, size_t>> occ;  // (sequence, index of the token after the match)
    for (size_t s = 0; s < corpus.size(); ++s)
      for (size_t e = static_cast<size_t>(n); e < corpus[s].size(); ++e)
        if (std::equal(context.end() - n, context.end(), corpus[s].begin() + static_cast<long>(e) - n)) occ.push_back({s, e});
    if (occ.empty() || max_k == 0) continue;
    r.match_length = n;
    r.occurrences = static_cast<int64_t>(occ.size());
    for (int d = 0; d < max_k; ++d) {
      std::map<Token, int64_t> counts;
      int64_t continuing = 0;
      for (auto [s, e] : occ)
        if (e + static_cast<size_t>(d) < corpus[s].size()) {
          ++counts[corpus[s][e + static_cast<size_t>(d)]];
          ++continuing;
        }
      if (continuing == 0) break;
      Token best = -1;
      int64_t best_count = 0;
      for (auto [t, c] : counts)
        if (c > best_count) best = t, best_count = c;  // ascending ids: ties keep the smaller
      const float support = static_cast<float>(best_count) / static_cast<float>(continuing);
      if (d + 1 >= support_from && support < min_support) break;
      r.tokens.push_back(best);
      r.support.push_back(support);
      std::vector<std::pair<size_t, size_t>> kept;
      for (auto [s, e] : occ)
        if (e + static_cast<size_t>(d) < corpus[s].size() && corpus[s][e + static_cast<size_t>(d)] == best) kept.push_back({s, e});
      occ = kept;
    }
    return r;
  }
  return r;
}

}  // namespace

TEST_CASE("datastore: the longest match, its most frequent continuation and each token's support", "[datastore]") {
  const std::vector<TokenList> corpus = {{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 3, 4, 6}, {7, 2, 3}};
  const Datastore store(corpus);
  CHECK(store.n_sequences() == 4);
  CHECK(store.n_tokens() == 16);
  // "2 3" occurs 4 times, 3 of them with a token after: 4 (twice) or 5. After "2 3 4" only one
  // occurrence goes on (the first ends there), with 6.
  RetrievalDraft d = store.draft({9, 2, 3}, 1, 8, 4);
  CHECK(d.match_length == 2);
  CHECK(d.occurrences == 3);
  CHECK(d.tokens == TokenList{4, 6});
  REQUIRE(d.support.size() == 2);
  CHECK(d.support[0] == Approx(2.0 / 3.0));
  CHECK(d.support[1] == Approx(1.0));
  // The longest suffix wins: "1 2 3" (3 occurrences, all continued) over "2 3" and "3".
  d = store.draft({1, 2, 3}, 1, 8, 1);
  CHECK(d.match_length == 3);
  CHECK(d.occurrences == 3);
  CHECK(d.tokens == TokenList{4});
  // max_n caps it.
  CHECK(store.draft({1, 2, 3}, 1, 2, 1).match_length == 2);
  // min_n: "9 3" does not occur, and "3" alone is not allowed.
  CHECK(store.draft({9, 3}, 2, 8, 4).tokens.empty());
  CHECK(store.draft({9, 3}, 2, 8, 4).match_length == 0);
  CHECK(store.draft({9, 3}, 1, 8, 4).match_length == 1);
  // max_k 0: nothing.
  CHECK(store.draft({1, 2, 3}, 1, 8, 0).tokens.empty());
}

TEST_CASE("datastore: ties go to the smaller id, no draft crosses from one sequence into the next", "[datastore]") {
  const Datastore ties({{1, 5}, {1, 3}});
  const RetrievalDraft d = ties.draft({1}, 1, 8, 4);
  CHECK(d.tokens == TokenList{3});
  REQUIRE(d.support.size() == 1);
  CHECK(d.support[0] == Approx(0.5));
  // "2" ends its sequence: it has no continuation, although "3 4" follows it in the corpus.
  const Datastore two({{1, 2}, {3, 4}});
  CHECK(two.draft({2}, 1, 8, 4).match_length == 0);
  CHECK(two.draft({1}, 1, 8, 4).tokens == TokenList{2});
  // A match that only occurs at a sequence's end falls back to a shorter one that continues.
  const Datastore shorter({{5, 6}, {6, 8}});
  const RetrievalDraft s = shorter.draft({5, 6}, 1, 8, 4);
  CHECK(s.match_length == 1);
  CHECK(s.tokens == TokenList{8});
}

TEST_CASE("datastore: the support threshold stops the draft, from support_from on", "[datastore]") {
  const Datastore store({{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 3, 4, 6}, {7, 2, 3}});
  // First token 4 at support 2/3.
  CHECK(store.draft({9, 2, 3}, 1, 8, 4, 0.7).tokens.empty());
  CHECK(store.draft({9, 2, 3}, 1, 8, 4, 0.6).tokens == TokenList{4, 6});
  // From the second token on: 4 goes regardless, 6 (support 1) passes.
  CHECK(store.draft({9, 2, 3}, 1, 8, 4, 0.7, 2).tokens == TokenList{4, 6});
  const Datastore split({{1, 2, 3}, {1, 2, 4}});
  CHECK(split.draft({1}, 1, 8, 4, 0.7, 2).tokens == TokenList{2});  // 3 or 4 at 1/2 each
}

TEST_CASE("datastore: random corpora draft as a brute-force scan does", "[datastore]") {
  std::mt19937_64 rng(20261128);
  for (int trial = 0; trial < 60; ++trial) {
    const int vocab = 2 + static_cast<int>(rng() % 6);  // small alphabets: many repeats and ties
    std::vector<TokenList> corpus(1 + rng() % 12);
    for (TokenList& s : corpus) {
      s.resize(rng() % 40);
      for (Token& t : s) t = static_cast<Token>(rng() % static_cast<uint64_t>(vocab));
    }
    const Datastore store(corpus);
    // The suffix array orders every corpus position.
    int64_t positions = 0;
    for (const TokenList& s : corpus) positions += static_cast<int64_t>(s.size());
    REQUIRE(static_cast<int64_t>(store.suffix_array().size()) == positions);
    for (int q = 0; q < 40; ++q) {
      TokenList context(1 + rng() % 10);
      for (Token& t : context) t = static_cast<Token>(rng() % static_cast<uint64_t>(vocab + 1));  // vocab: unseen
      const int min_n = 1 + static_cast<int>(rng() % 3);
      const int max_n = min_n + static_cast<int>(rng() % 6);
      const int max_k = static_cast<int>(rng() % 7);
      const double min_support = (rng() % 3 == 0) ? 0.0 : static_cast<double>(rng() % 100) / 100.0;
      const int support_from = 1 + static_cast<int>(rng() % 3);
      INFO("trial " << trial << " query " << q);
      const RetrievalDraft got = store.draft(context, min_n, max_n, max_k, min_support, support_from);
      const RetrievalDraft want = reference_draft(corpus, context, min_n, max_n, max_k, min_support, support_from);
      CHECK(got.tokens == want.tokens);
      CHECK(got.support == want.support);
      if (max_k > 0) {
        CHECK(got.match_length == want.match_length);
        CHECK(got.occurrences == want.occurrences);
      }
    }
  }
}

TEST_CASE("datastore: long repeats: matches of 64 tokens drafting 64, the whole compare depth", "[datastore]") {
  // Runs of one token longer than kCompareDepth, so suffixes tie over the whole depth the suffix
  // array is sorted by, and a match of up to 64 tokens drafts up to 64 more.
  std::mt19937_64 rng(7);
  std::vector<TokenList> corpus;
  for (int s = 0; s < 4; ++s) {
    TokenList seq;
    for (int run = 0; run < 3; ++run) seq.insert(seq.end(), 60 + rng() % 150, static_cast<Token>(rng() % 2));
    corpus.push_back(seq);
  }
  corpus.push_back(TokenList(300, 1));
  const Datastore store(corpus);
  for (int q = 0; q < 30; ++q) {
    TokenList context(1 + rng() % 90, static_cast<Token>(rng() % 2));
    if (q % 3 == 0) context.push_back(static_cast<Token>(1 - context.back()));
    const int max_n = 1 + static_cast<int>(rng() % 64);
    const int max_k = std::min(64, Datastore::kCompareDepth - max_n);
    INFO("query " << q << ": context of " << context.size() << ", max_n " << max_n << ", max_k " << max_k);
    const RetrievalDraft got = store.draft(context, 1, max_n, max_k);
    const RetrievalDraft want = reference_draft(corpus, context, 1, max_n, max_k, 0.0, 1);
    CHECK(got.tokens == want.tokens);
    CHECK(got.support == want.support);
    CHECK(got.match_length == want.match_length);
    CHECK(got.occurrences == want.occurrences);
  }
  // The largest draft the depth allows: a match of 64 and 64 tokens.
  CHECK(store.draft(TokenList(64, 1), 64, 64, 64).tokens.size() == 64);
}

TEST_CASE("datastore: bad arguments and negative tokens are refused", "[datastore]") {
  CHECK_THROWS_WITH(Datastore({{1, 2}, {3, -4}}), Catch::Contains("token -4 in sequence 1"));
  const Datastore store({{1, 2, 3}});
  CHECK_THROWS_AS(store.draft({1}, 0, 8, 4), Error);
  CHECK_THROWS_AS(store.draft({1}, 3, 2, 4), Error);
  CHECK_THROWS_AS(store.draft({1}, 1, 8, Datastore::kCompareDepth), Error);
  // An empty corpus and an empty context draft nothing.
  CHECK(Datastore({}).draft({1, 2}, 1, 8, 4).tokens.empty());
  CHECK(store.draft({}, 1, 8, 4).tokens.empty());
}
