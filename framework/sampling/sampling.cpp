#include "framework/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "framework/core/error.h"

namespace speclab {

namespace {

const char* const kSection = "sampling";

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

// Per-thread buffers reused across calls, so that a decode loop does not allocate V-sized
// temporaries at every step.
struct Scratch {
  std::vector<float> values;     // [vocab] a copy of the logits for nth_element
  std::vector<double> weights;   // [vocab] exp((logit - max) / temperature), 0 when masked
  std::vector<int32_t> ids;      // [n_candidates] token ids for the nucleus partial sort
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

void check_vocab(const void* data, int64_t vocab, const char* field) {
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max())
    throw Error(ErrorKind::kBadInput,
                "expected a vocabulary size in [1, 2^31 - 1], found " + std::to_string(vocab),
                kSection, field);
  if (data == nullptr)
    throw Error(ErrorKind::kBadInput, "expected a data pointer, found null", kSection, field);
}

[[noreturn]] void bad_logit(int64_t i, float v) {
  throw Error(ErrorKind::kBadInput,
              "expected finite logits or -inf, found " + num(v) + " at index " + std::to_string(i),
              kSection, "logits");
}

}  // namespace

void SamplingOptions::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0)
    throw Error(ErrorKind::kConfig,
                "expected a finite temperature >= 0 (0 = greedy), found " + num(temperature),
                kSection, "temperature");
  if (!(top_p > 0.0 && top_p <= 1.0))
    throw Error(ErrorKind::kConfig, "expected top_p in (0, 1] (1 = off), found " + num(top_p),
                kSection, "top_p");
  if (top_k < 0)
    throw Error(ErrorKind::kConfig,
                "expected top_k >= 0 (0 = off), found " + std::to_string(top_k), kSection,
                "top_k");
}

int32_t argmax(const float* logits, int64_t vocab) {
  check_vocab(logits, vocab, "logits");
  int64_t best = 0;
  float best_v = logits[0];
  if (std::isnan(best_v)) bad_logit(0, best_v);
  for (int64_t i = 1; i < vocab; ++i) {
    const float v = logits[i];
    if (std::isnan(v)) bad_logit(i, v);
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

void logits_to_probs(const float* logits, int64_t vocab, const SamplingOptions& opts,
                     std::vector<float>& probs) {
  opts.validate();
  check_vocab(logits, vocab, "logits");

  // Pass 1: validate, find the maximum (its index is the greedy answer: first maximum wins).
  const float kInf = std::numeric_limits<float>::infinity();
  float max_v = -kInf;
  int64_t max_i = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == kInf) bad_logit(i, v);
    if (v > max_v) {
      max_v = v;
      max_i = i;
    }
  }
  if (max_i < 0)
    throw Error(ErrorKind::kBadInput, "expected at least one finite logit, found all -inf",
                kSection, "logits");

  probs.assign(static_cast<size_t>(vocab), 0.0f);
  if (opts.greedy()) {
    probs[static_cast<size_t>(max_i)] = 1.0f;
    return;
  }

  Scratch& sc = scratch();

  // Top-k: the k-th largest logit is the threshold; every logit >= it survives (HF keeps
  // ties). Temperature > 0 preserves the order, so thresholding the raw logits is the same
  // as thresholding the scaled ones.
  float threshold = -kInf;
  if (opts.top_k > 0 && opts.top_k < vocab) {
    sc.values.assign(logits, logits + vocab);
    const auto kth = sc.values.begin() + (opts.top_k - 1);
    std::nth_element(sc.values.begin(), kth, sc.values.end(), std::greater<float>());
    threshold = *kth;
  }

  // Temperature and unnormalised softmax weights, in double. Subtracting the maximum first
  // is the usual overflow guard; softmax((l - m) / T) == softmax(l / T).
  sc.weights.assign(static_cast<size_t>(vocab), 0.0);
  double* w = sc.weights.data();
  const double t = opts.temperature;
  const double m = max_v;
  double total = 0.0;
  int64_t n_positive = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (v >= threshold && v != -kInf) {
      const double e = std::exp((static_cast<double>(v) - m) / t);
      w[i] = e;
      total += e;
      n_positive += (e > 0.0);
    }
  }
  // The maximum contributes exp(0) = 1, so total >= 1.

  if (opts.top_p >= 1.0) {
    for (int64_t i = 0; i < vocab; ++i)
      if (w[i] > 0.0) probs[static_cast<size_t>(i)] = static_cast<float>(w[i] / total);
    return;
  }

  // Top-p: walk the candidates in descending probability (ties: lower id first) and stop at
  // the first token whose preceding cumulative mass has reached top_p. Tokens of weight 0
  // would be dropped by HF's rule anyway (their ascending cumulative sum is 0). The sort is
  // extended in growing chunks so that a small nucleus costs O(V + n log m), not O(V log V).
  std::vector<int32_t>& ids = sc.ids;
  ids.clear();
  ids.reserve(static_cast<size_t>(n_positive));
  for (int64_t i = 0; i < vocab; ++i)
    if (w[i] > 0.0) ids.push_back(static_cast<int32_t>(i));
  const auto by_prob_desc = [w](int32_t a, int32_t b) {
    return w[a] > w[b] || (w[a] == w[b] && a < b);
  };
  const double stop_at = (opts.top_p - kTopPTolerance) * total;
  const size_t n = ids.size();
  size_t sorted = 0;
  size_t chunk = 64;
  size_t n_keep = 0;
  double cum = 0.0;  // mass of ids[0 .. n_keep)
  bool done = false;
  while (!done) {
    const size_t upto = std::min(n, sorted + chunk);
    std::partial_sort(ids.begin() + static_cast<std::ptrdiff_t>(sorted),
                      ids.begin() + static_cast<std::ptrdiff_t>(upto), ids.end(), by_prob_desc);
    for (; n_keep < upto; ++n_keep) {
      if (n_keep > 0 && cum >= stop_at) {
        done = true;
        break;
      }
      cum += w[ids[n_keep]];
    }
    sorted = upto;
    if (sorted == n) done = true;
    chunk *= 4;
  }
  // Renormalise over the nucleus; cum is exactly its mass.
  for (size_t j = 0; j < n_keep; ++j) {
    const int32_t id = ids[j];
    probs[static_cast<size_t>(id)] = static_cast<float>(w[id] / cum);
  }
}

int32_t sample(const float* probs, int64_t n, Rng& rng) {
  check_vocab(probs, n, "probs");
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = probs[i];
    if (!(v >= 0.0f))
      throw Error(ErrorKind::kBadInput,
                  "expected probabilities >= 0, found " + num(v) + " at index " +
                      std::to_string(i),
                  kSection, "probs");
    total += v;
  }
  if (!(total > 0.0) || !std::isfinite(total))
    throw Error(ErrorKind::kBadInput,
                "expected a positive finite probability sum, found " + num(total), kSection,
                "probs");
  const double u = rng.uniform() * total;
  double cum = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] > 0.0f) {
      cum += probs[i];
      last = i;
      if (u < cum) return static_cast<int32_t>(i);
    }
  }
  // Only reachable when rounding leaves u * total >= the final cumulative sum.
  return static_cast<int32_t>(last);
}

int32_t sample(const std::vector<float>& probs, Rng& rng) {
  return sample(probs.data(), static_cast<int64_t>(probs.size()), rng);
}

}  // namespace speclab
