#include "framework/train/train_data.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "framework/core/error.h"

namespace speclab {

int64_t DraftTrainData::n_pairs() const {
  int64_t n = 0;
  for (int64_t s = 0; s + 1 < static_cast<int64_t>(offsets.size()); ++s) n += std::max<int64_t>(0, offsets[s + 1] - offsets[s] - 1);
  return n;
}

void check_train_data(const DraftTrainData& d, int64_t hidden, const std::string& what) {
  if (d.n_sequences() < 1 || d.n_pairs() < 1)
    throw Error(ErrorKind::kBadInput, "expected at least one sequence of two or more tokens", what);
  const int64_t n = d.offsets.back();
  if (d.features.dim() != 2 || d.features.size(0) != n || d.features.size(1) != hidden || d.tokens.numel() != n ||
      d.target_top1.numel() != n)
    throw Error(ErrorKind::kBadInput, "features, tokens and target_top1 disagree with the offsets or the target", what);
  if (d.aux.defined() && (d.aux.dim() != 2 || d.aux.size(0) != n || d.aux.size(1) % hidden != 0))
    throw Error(ErrorKind::kBadInput, "aux features disagree with the offsets or the target's hidden size", what);
  if (!d.prompt_lengths.empty()) {
    if (static_cast<int64_t>(d.prompt_lengths.size()) != d.n_sequences())
      throw Error(ErrorKind::kBadInput, "prompt_lengths needs one entry per sequence", what);
    for (int64_t s = 0; s < d.n_sequences(); ++s)
      if (d.prompt_lengths[s] < 0 || d.prompt_lengths[s] > d.offsets[s + 1] - d.offsets[s])
        throw Error(ErrorKind::kBadInput,
                    "sequence " + std::to_string(s) + ": expected a prompt length within the sequence", what);
  }
}

Rng batch_rng(uint64_t seed, int64_t step) { return Rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) + 1); }

std::vector<int64_t> draw_sequences(const DraftTrainData& d, int64_t batch_tokens, Rng& rng) {
  std::vector<int64_t> seqs;
  int64_t pairs = 0;
  const int64_t S = d.n_sequences();
  std::vector<char> used(static_cast<size_t>(S), 0);
  while (pairs < batch_tokens && static_cast<int64_t>(seqs.size()) < S) {
    int64_t s = static_cast<int64_t>(rng.uniform() * static_cast<double>(S)) % S;
    while (used[static_cast<size_t>(s)]) s = (s + 1) % S;
    used[static_cast<size_t>(s)] = 1;
    seqs.push_back(s);
    pairs += d.offsets[s + 1] - d.offsets[s] - 1;
  }
  return seqs;
}

at::Tensor head_row_index(const at::Tensor& vocab_ids, int64_t vocab) {
  at::Tensor index = at::full({vocab}, -100, at::kLong);
  index.index_put_({vocab_ids}, at::arange(vocab_ids.size(0), at::kLong));
  return index;
}

PairRows pairs_of(const DraftTrainData& d, const std::vector<int64_t>& seqs) {
  std::vector<int64_t> rows, pos, seg, end, answer;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t a = d.offsets[seqs[s]], b = d.offsets[seqs[s] + 1];
    const int64_t first_answer = a + (d.prompt_lengths.empty() ? 0 : d.prompt_lengths[seqs[s]]);
    for (int64_t i = a; i + 1 < b; ++i) {
      rows.push_back(i);
      pos.push_back(i - a);
      seg.push_back(static_cast<int64_t>(s));
      end.push_back(b);
      answer.push_back(first_answer);
    }
  }
  return {at::tensor(rows, at::kLong), at::tensor(pos, at::kLong), at::tensor(seg, at::kLong), at::tensor(end, at::kLong),
          at::tensor(answer, at::kLong)};
}

at::Tensor answer_labels(const PairRows& p, const at::Tensor& label_rows) { return label_rows.ge(p.answer_row); }

void for_each_pair_chunk(const DraftTrainData& d, int64_t chunk, const std::function<void(const PairRows&)>& f) {
  for (int64_t s0 = 0; s0 < d.n_sequences(); s0 += chunk) {
    std::vector<int64_t> seqs;
    for (int64_t s = s0; s < std::min(d.n_sequences(), s0 + chunk); ++s) seqs.push_back(s);
    const PairRows p = pairs_of(d, seqs);
    if (p.in_rows.numel() > 0) f(p);
  }
}

}  // namespace speclab
