#include "framework/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "framework/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#define SPECLAB_X86 1
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*() operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace speclab {

namespace {

const char* const kSection = "sampling";

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

// A top-p candidate: `key` orders candidates (descending logit, then ascending token id) with
// one integer comparison; `w` is its unnormalised softmax weight.
struct Cand {
  uint64_t key;
  double w;
  uint32_t bucket;  // floor((max - logit) / T * kBucketsPerUnit), clamped: coarse order
};

// Top-p buckets candidates by log-weight so that only the bucket where the cumulative mass
// crosses top_p has to be ordered exactly.
constexpr uint32_t kBuckets = 1024;
constexpr double kBucketsPerUnit = 16.0;  // bucket width 1/16 in log-weight

// Maps a non-NaN float to a uint32 with the same order.
inline uint32_t ordered_bits(float v) {
  if (v == 0.0f) v = 0.0f;  // -0 == +0: one key, so the lower id ranks first as for any tie
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

inline uint64_t cand_key(float logit, int32_t id) {
  return (static_cast<uint64_t>(ordered_bits(logit)) << 32) |
         (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

inline int32_t cand_id(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key & 0xFFFFFFFFu));
}

// Per-thread buffers reused across calls, so that a decode loop does not allocate V-sized
// temporaries at every step (they grow once to the largest vocab seen on the thread).
struct Scratch {
  std::vector<float> values;  // [vocab] a copy of the logits for nth_element (large top_k),
                              // or a min-heap of the top_k largest logits (small top_k)
  std::vector<Cand> cands;    // [n_cand] tokens that survived top-k with weight > 0
  std::vector<Cand> boundary; // [n_boundary] the candidates of the top-p boundary bucket
  std::vector<double> bucket_mass = std::vector<double>(kBuckets);  // [kBuckets]
  std::vector<int32_t> survivors;  // [n] indices that pass top-k, in order (SIMD prefilter)
  std::vector<double> weights;     // [vocab, rounded up to 4] every token's weight (no top-k, AVX2)
  std::vector<int32_t> buckets;    // [vocab, rounded up to 4] every token's top-p bucket (idem)
  std::vector<double> hist4;       // [4, kBuckets] interleaved bucket masses (idem)
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

#ifdef SPECLAB_X86
bool have_avx2_fma();
float max_avx2(const float* logits, int64_t n, bool& bad);
int64_t heap_scan_avx2(const float* logits, int64_t from, int64_t to, std::vector<float>& heap);
#endif

// One element of the top-k heap scan: x replaces the heap's minimum when larger.
inline void heap_offer(std::vector<float>& v, float x) {
  if (x > v.front()) {
    std::pop_heap(v.begin(), v.end(), std::greater<float>());
    v.back() = x;
    std::push_heap(v.begin(), v.end(), std::greater<float>());
  }
}

// The k-th largest of logits[0..vocab) (counting repeats), 0 < k < vocab.
float kth_largest(const float* logits, int64_t vocab, int64_t k, Scratch& sc) {
  std::vector<float>& v = sc.values;
  v.clear();
  if (k <= 256) {
    // One pass with a min-heap of the k largest seen so far: most elements are rejected by
    // one comparison with the heap's minimum; a replacement costs O(log k).
    v.assign(logits, logits + k);
    std::make_heap(v.begin(), v.end(), std::greater<float>());
    int64_t i = k;
#ifdef SPECLAB_X86
    if (have_avx2_fma()) i = heap_scan_avx2(logits, k, vocab, v);
#endif
    for (; i < vocab; ++i) heap_offer(v, logits[i]);
    return v.front();
  }
  v.assign(logits, logits + vocab);
  const auto kth = v.begin() + (k - 1);
  std::nth_element(v.begin(), kth, v.end(), std::greater<float>());
  return *kth;
}

// Number of leading candidates kept by top-p, and their total weight. On return
// c[0 .. n_keep) are the kept candidates (in no particular order). Rule: in descending key
// order (= descending probability, ties by lower token id), candidate j is kept iff j == 0 or
// the weight before it is < stop_at. Found by repeatedly halving the unresolved range with
// nth_element (O(n) overall, worst case included), then sorting the small rest.
size_t nucleus(std::vector<Cand>& c, double stop_at, double& kept_mass) {
  const auto before = [](const Cand& a, const Cand& b) { return a.key > b.key; };
  // Invariants: c[0 .. lo) are the lo first candidates in order, all kept, of total weight
  // acc; the answer n_keep is in (lo, hi] (or lo == 0).
  size_t lo = 0, hi = c.size();
  double acc = 0.0;
  auto it = [&c](size_t i) { return c.begin() + static_cast<std::ptrdiff_t>(i); };
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(it(lo), it(mid), it(hi), before);
    double m = 0.0;
    for (size_t j = lo; j < mid; ++j) m += c[j].w;
    if (acc + m >= stop_at) {
      hi = mid;  // the weight before position mid already reaches top_p
    } else {
      acc += m;
      lo = mid;
    }
  }
  std::sort(it(lo), it(hi), before);
  size_t n_keep = lo;
  for (; n_keep < hi; ++n_keep) {
    if (n_keep > 0 && acc >= stop_at) break;
    acc += c[n_keep].w;
  }
  kept_mass = acc;
  return n_keep;
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


// ---- softmax_prob -------------------------------------------------------------------------

// Validates every logit (no NaN, no +inf, at least one finite) and returns the maximum.
float checked_max(const float* logits, int64_t vocab) {
  const float kInf = std::numeric_limits<float>::infinity();
  float m = -kInf;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == kInf) bad_logit(i, v);
    m = std::max(m, v);
  }
  if (m == -kInf)
    throw Error(ErrorKind::kBadInput, "expected at least one finite logit, found all -inf",
                kSection, "logits");
  return m;
}

double sum_exp_scalar(const float* logits, int64_t n, float m) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  return s;
}

#ifdef SPECLAB_X86
bool have_avx512f() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

// Max of logits[0, n) (n a multiple of 16) and whether any lane held NaN or +inf.
__attribute__((target("avx512f"))) float max_avx512(const float* logits, int64_t n, bool& bad) {
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 flagged = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(logits + i);
    flagged |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v, inf, _CMP_EQ_OQ);
    m = _mm512_max_ps(m, v);
  }
  bad = flagged != 0;
  return _mm512_reduce_max_ps(m);
}

// sum_i exp(logits[i] - m) over [0, n), n a multiple of 16, every logit <= m. exp(x) for x <= 0:
// x = k ln2 + r with k = round(x / ln2), |r| <= ln2 / 2 (Cody-Waite split of ln2), e^r by its
// degree-7 Taylor polynomial (truncation error < 5e-9 relative), times 2^k by vscalefps, which
// flushes to 0 below the float range. x is clamped at -104 (e^-104 < the smallest float), so
// -inf logits give 0. Each 16-lane block is added in double.
__attribute__((target("avx512f"))) double sum_exp_avx512(const float* logits, int64_t n, float m) {
  const __m512 vm = _mm512_set1_ps(m), lo = _mm512_set1_ps(-104.0f);
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __m512 c2 = _mm512_set1_ps(1.0f / 2), c3 = _mm512_set1_ps(1.0f / 6), c4 = _mm512_set1_ps(1.0f / 24),
               c5 = _mm512_set1_ps(1.0f / 120), c6 = _mm512_set1_ps(1.0f / 720), c7 = _mm512_set1_ps(1.0f / 5040),
               one = _mm512_set1_ps(1.0f);
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 x = _mm512_max_ps(_mm512_sub_ps(_mm512_loadu_ps(logits + i), vm), lo);
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, ln2_hi, x);
    r = _mm512_fnmadd_ps(k, ln2_lo, r);
    __m512 p = _mm512_fmadd_ps(c7, r, c6);
    p = _mm512_fmadd_ps(p, r, c5);
    p = _mm512_fmadd_ps(p, r, c4);
    p = _mm512_fmadd_ps(p, r, c3);
    p = _mm512_fmadd_ps(p, r, c2);
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    const __m512 e = _mm512_scalef_ps(p, k);
    acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

bool have_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

// max_avx512 with 8 lanes (n a multiple of 8).
__attribute__((target("avx2,fma"))) float max_avx2(const float* logits, int64_t n, bool& bad) {
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 flagged = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(logits + i);
    flagged = _mm256_or_ps(flagged, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(v, inf, _CMP_EQ_OQ)));
    m = _mm256_max_ps(m, v);
  }
  bad = _mm256_movemask_ps(flagged) != 0;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  return *std::max_element(lanes, lanes + 8);
}

// The heap scan of kth_largest over logits[from, to) in blocks of 8: a block whose lanes are
// all <= the heap's minimum is skipped with one compare (the minimum only grows, so the scalar
// loop would reject each of them too); the others offer their lanes in order, as the scalar
// loop does. Returns where the blocks stopped (the caller finishes the tail).
__attribute__((target("avx2,fma"))) int64_t heap_scan_avx2(const float* logits, int64_t from, int64_t to,
                                                            std::vector<float>& heap) {
  int64_t i = from;
  for (; i + 8 <= to; i += 8) {
    const __m256 x = _mm256_loadu_ps(logits + i);
    unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(heap.front()), _CMP_GT_OQ)));
    while (mask != 0) {
      heap_offer(heap, logits[i + __builtin_ctz(mask)]);
      mask &= mask - 1;
    }
  }
  return i;
}

// The indices j in [from, to) with logits[j] >= threshold and logits[j] > -inf, in order, 8
// lanes at a time; returns where the blocks stopped.
__attribute__((target("avx2,fma"))) int64_t survivors_avx2(const float* logits, int64_t from, int64_t to,
                                                            float threshold, std::vector<int32_t>& out) {
  const __m256 t = _mm256_set1_ps(threshold), ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = from;
  for (; i + 8 <= to; i += 8) {
    const __m256 x = _mm256_loadu_ps(logits + i);
    unsigned mask = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(x, t, _CMP_GE_OQ), _mm256_cmp_ps(x, ninf, _CMP_NEQ_OQ))));
    while (mask != 0) {
      out.push_back(static_cast<int32_t>(i + __builtin_ctz(mask)));
      mask &= mask - 1;
    }
  }
  return i;
}

// sum_exp_avx512 with 8 lanes (n a multiple of 8). Without vscalefps, 2^k is built in the
// exponent field, which needs k >= -126: x is clamped at -87 (e^-87 = 1.6e-38), so a logit more
// than 87 below the maximum adds at most 1.6e-38 instead of its true tiny weight; the sum is >= 1
// (the maximum adds 1), so this is far below float resolution.
__attribute__((target("avx2,fma"))) double sum_exp_avx2(const float* logits, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m), lo = _mm256_set1_ps(-87.0f);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 c2 = _mm256_set1_ps(1.0f / 2), c3 = _mm256_set1_ps(1.0f / 6), c4 = _mm256_set1_ps(1.0f / 24),
               c5 = _mm256_set1_ps(1.0f / 120), c6 = _mm256_set1_ps(1.0f / 720), c7 = _mm256_set1_ps(1.0f / 5040),
               one = _mm256_set1_ps(1.0f);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_max_ps(_mm256_sub_ps(_mm256_loadu_ps(logits + i), vm), lo);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, ln2_hi, x);
    r = _mm256_fnmadd_ps(k, ln2_lo, r);
    __m256 p = _mm256_fmadd_ps(c7, r, c6);
    p = _mm256_fmadd_ps(p, r, c5);
    p = _mm256_fmadd_ps(p, r, c4);
    p = _mm256_fmadd_ps(p, r, c3);
    p = _mm256_fmadd_ps(p, r, c2);
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// ---- logits_to_probs without top-k: every token's weight, 4 lanes of double at a time -------

// exp(-x) for 4 lanes of x >= 0 (x = (max - logit) / T, computed as a product with 1 / T).
// -x = k ln2 + r with k = round(-x / ln2) (the 1.5 * 2^52 shifter rounds to nearest), r by two
// FMAs against ln2 in double-double, |r| <= ln2 / 2; e^r by its degree-13 Taylor polynomial
// (truncation below 5e-18 relative, under double rounding), times 2^k built in the exponent
// field. Within about 1 ulp of std::exp. Lanes with x > 104 (e^-104 < 7e-46, below the smallest
// float, so such a token's probability is 0 either way; this includes -inf logits, x = +inf)
// give exactly 0.
// e^r's Taylor coefficients 1/13!, 1/12!, ..., 1/1!, 1/0!, highest first (Horner order), shared
// by the 4- and 8-lane exps so that they stay the same polynomial.
constexpr double kExpTaylor[14] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                   1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
                                   1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5,
                                   1.0,                1.0};

__attribute__((target("avx2,fma"))) inline __m256d exp_neg_avx2(__m256d x) {
  const __m256d y = _mm256_sub_pd(_mm256_setzero_pd(), _mm256_min_pd(x, _mm256_set1_pd(104.0)));
  const __m256d shifter = _mm256_set1_pd(6755399441055744.0);  // 1.5 * 2^52
  const __m256d kd = _mm256_fmadd_pd(y, _mm256_set1_pd(1.4426950408889634074), shifter);
  const __m256d k = _mm256_sub_pd(kd, shifter);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(0x1.62e42fefa39efp-1), y);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(0x1.abc9e3b39803fp-56), r);
  __m256d p = _mm256_set1_pd(kExpTaylor[0]);
  for (int i = 1; i < 14; ++i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kExpTaylor[i]));
  // kd's low mantissa bits hold k (kd and the shifter share their exponent): 2^k = (k + 1023) << 52.
  const __m256i ki = _mm256_sub_epi64(_mm256_castpd_si256(kd), _mm256_castpd_si256(shifter));
  const __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(ki, _mm256_set1_epi64x(1023)), 52));
  return _mm256_and_pd(_mm256_mul_pd(p, two_k), _mm256_cmp_pd(x, _mm256_set1_pd(104.0), _CMP_LE_OQ));
}

// w[i] = exp(-(m - logits[i]) / t) for i < n (n a multiple of 4), and, when bucket is not null,
// bucket[i] = min(floor((m - logits[i]) / t * kBucketsPerUnit), kBuckets - 1), the scalar path's
// quantities with / t as * (1 / t) (the buckets stay monotone in the logit, as top-p needs).
// Returns the sum of the weights (4 lanes, added at the end).
__attribute__((target("avx2,fma"))) double weights_avx2(const float* logits, int64_t n, double m, double t,
                                                         double* w, int32_t* bucket) {
  const __m256d vm = _mm256_set1_pd(m), vt = _mm256_set1_pd(1.0 / t);
  const __m256d per_unit = _mm256_set1_pd(kBucketsPerUnit), last = _mm256_set1_pd(kBuckets - 1);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d x0 = _mm256_mul_pd(_mm256_sub_pd(vm, _mm256_cvtps_pd(_mm_loadu_ps(logits + i))), vt);
    const __m256d x1 = _mm256_mul_pd(_mm256_sub_pd(vm, _mm256_cvtps_pd(_mm_loadu_ps(logits + i + 4))), vt);
    const __m256d e0 = exp_neg_avx2(x0), e1 = exp_neg_avx2(x1);
    _mm256_storeu_pd(w + i, e0);
    _mm256_storeu_pd(w + i + 4, e1);
    acc0 = _mm256_add_pd(acc0, e0);
    acc1 = _mm256_add_pd(acc1, e1);
    if (bucket) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bucket + i), _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_mul_pd(x0, per_unit), last)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bucket + i + 4), _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_mul_pd(x1, per_unit), last)));
    }
  }
  for (; i < n; i += 4) {
    const __m256d x = _mm256_mul_pd(_mm256_sub_pd(vm, _mm256_cvtps_pd(_mm_loadu_ps(logits + i))), vt);
    const __m256d e = exp_neg_avx2(x);
    _mm256_storeu_pd(w + i, e);
    acc0 = _mm256_add_pd(acc0, e);
    if (bucket)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bucket + i), _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_mul_pd(x, per_unit), last)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// probs[i] = (keep[i] ? w[i] / total : 0) as float for i < n (n a multiple of 4); keep: bucket[i]
// < edge, or every i when bucket is null.
__attribute__((target("avx2,fma"))) void normalise_avx2(const double* w, const int32_t* bucket, int32_t edge,
                                                         int64_t n, double total, float* probs) {
  const __m256d vt = _mm256_set1_pd(1.0 / total);
  const __m128i ve = _mm_set1_epi32(edge);
  for (int64_t i = 0; i < n; i += 4) {
    __m128 p = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_loadu_pd(w + i), vt));
    if (bucket)
      p = _mm_and_ps(p, _mm_castsi128_ps(_mm_cmplt_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bucket + i)), ve)));
    _mm_storeu_ps(probs + i, p);
  }
}

// exp_neg_avx2, weights_avx2 and normalise_avx2 on 8 lanes (AVX-512F and VL): the same operations per
// lane (vscalefpd multiplies by 2^k exactly, as the exponent-field product does), and the sum in
// the same order (lanes 0-3 and 4-7 stand for weights_avx2's two accumulators; a 4-lane tail goes
// to lanes 0-3 only), so both give the same bits.
__attribute__((target("avx512f,avx512vl"))) inline __m512d exp_neg_avx512(__m512d x) {
  const __m512d y = _mm512_sub_pd(_mm512_setzero_pd(), _mm512_min_pd(x, _mm512_set1_pd(104.0)));
  const __m512d shifter = _mm512_set1_pd(6755399441055744.0);
  const __m512d k = _mm512_sub_pd(_mm512_fmadd_pd(y, _mm512_set1_pd(1.4426950408889634074), shifter), shifter);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(0x1.62e42fefa39efp-1), y);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(0x1.abc9e3b39803fp-56), r);
  __m512d p = _mm512_set1_pd(kExpTaylor[0]);
  for (int i = 1; i < 14; ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kExpTaylor[i]));
  return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(x, _mm512_set1_pd(104.0), _CMP_LE_OQ), _mm512_scalef_pd(p, k));
}

__attribute__((target("avx512f,avx512vl"))) double weights_avx512(const float* logits, int64_t n, double m, double t,
                                                          double* w, int32_t* bucket) {
  const __m512d vm = _mm512_set1_pd(m), vt = _mm512_set1_pd(1.0 / t);
  const __m512d per_unit = _mm512_set1_pd(kBucketsPerUnit), last = _mm512_set1_pd(kBuckets - 1);
  __m512d acc = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 lanes = n - i >= 8 ? __mmask8(0xFF) : __mmask8(0x0F);
    const __m512d x = _mm512_mul_pd(_mm512_sub_pd(vm, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(lanes, logits + i))), vt);
    const __m512d e = _mm512_maskz_mov_pd(lanes, exp_neg_avx512(x));
    _mm512_mask_storeu_pd(w + i, lanes, e);
    acc = _mm512_add_pd(acc, e);
    if (bucket)
      _mm256_mask_storeu_epi32(bucket + i, lanes, _mm512_cvttpd_epi32(_mm512_min_pd(_mm512_mul_pd(x, per_unit), last)));
  }
  alignas(64) double l[8];
  _mm512_store_pd(l, acc);
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

__attribute__((target("avx512f,avx512vl"))) void normalise_avx512(const double* w, const int32_t* bucket, int32_t edge,
                                                          int64_t n, double total, float* probs) {
  const __m512d vt = _mm512_set1_pd(1.0 / total);
  const __m256i ve = _mm256_set1_epi32(edge);
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 lanes = n - i >= 8 ? __mmask8(0xFF) : __mmask8(0x0F);
    __m256 p = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_maskz_loadu_pd(lanes, w + i), vt));
    __mmask8 keep = lanes;
    if (bucket) keep &= _mm256_cmplt_epi32_mask(_mm256_maskz_loadu_epi32(lanes, bucket + i), ve);
    _mm256_mask_storeu_ps(probs + i, lanes, _mm256_maskz_mov_ps(keep, p));
  }
}

// Appends the candidates of bucket `edge` (weight > 0, index < vocab) to out, in index order;
// bucket: [n], n a multiple of 8 or 4 (a last block of 4 is scanned alone).
__attribute__((target("avx2,fma"))) void boundary_avx2(const float* logits, const double* w, const int32_t* bucket,
                                                        int64_t n, int64_t vocab, uint32_t edge, std::vector<Cand>& out) {
  const __m256i ve = _mm256_set1_epi32(static_cast<int32_t>(edge));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    unsigned hit = static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bucket + i)), ve))));
    while (hit != 0) {
      const int64_t j = i + __builtin_ctz(hit);
      hit &= hit - 1;
      if (j < vocab && w[j] > 0.0) out.push_back(Cand{cand_key(logits[j], static_cast<int32_t>(j)), w[j], edge});
    }
  }
  for (int64_t j = i; j < n; ++j)
    if (bucket[j] == static_cast<int32_t>(edge) && j < vocab && w[j] > 0.0)
      out.push_back(Cand{cand_key(logits[j], static_cast<int32_t>(j)), w[j], edge});
}

// logits_to_probs at temperature t > 0 without top-k (every token a candidate), on AVX2 or
// AVX-512: the scalar path's steps, with each weight and the weights' sum in 4- or 8-lane double.
// Products with 1 / T and 1 / total replace the divisions, and the sum's order and exp's last bit
// differ from the scalar path's (each within about 1 ulp of double; on 300 test rows every float
// probability came out the same); the candidates and the top-p rule are the same. A 49,152-token
// row: 35 us against 395 (build/sampling_bench, Zen 5).
void probs_all_avx2(const float* logits, int64_t vocab, const SamplingOptions& opts, float max_v,
                    std::vector<float>& probs, Scratch& sc, bool allow_avx512) {
  const int64_t body = vocab - vocab % 4, padded = body + (vocab % 4 != 0 ? 4 : 0);
  const bool top_p = opts.top_p < 1.0;
  if (sc.weights.size() < static_cast<size_t>(padded)) sc.weights.resize(static_cast<size_t>(padded));
  if (top_p && sc.buckets.size() < static_cast<size_t>(padded)) sc.buckets.resize(static_cast<size_t>(padded));
  double* const w = sc.weights.data();
  int32_t* const b = top_p ? sc.buckets.data() : nullptr;
  // The last vocab % 4 logits go through the same code, padded with -inf (weight 0).
  alignas(16) float tail[4];
  std::fill(tail, tail + 4, -std::numeric_limits<float>::infinity());
  std::copy(logits + body, logits + vocab, tail);
  static const bool have512 = have_avx512f() && __builtin_cpu_supports("avx512vl");
  const bool avx512 = allow_avx512 && have512;
  const auto weights = avx512 ? weights_avx512 : weights_avx2;
  const auto normalise_n = avx512 ? normalise_avx512 : normalise_avx2;
  double total = weights(logits, body, max_v, opts.temperature, w, b);
  if (padded > body) total += weights(tail, 4, max_v, opts.temperature, w + body, b ? b + body : nullptr);
  probs.resize(static_cast<size_t>(vocab));
  const auto normalise = [&](const int32_t* keep_below, int32_t edge, double by) {
    normalise_n(w, keep_below, edge, body, by, probs.data());
    if (padded > body) {
      alignas(16) float out[4];
      normalise_n(w + body, keep_below ? keep_below + body : nullptr, edge, 4, by, out);
      std::copy(out, out + (vocab - body), probs.data() + body);
    }
  };
  if (!top_p) {
    normalise(nullptr, 0, total);
    return;
  }
  // Top-p, as below. The buckets' masses go into four interleaved histograms (a run of tokens in
  // one bucket would otherwise wait on each other's stores); the last bucket's is never read.
  const double stop_at = (opts.top_p - kTopPTolerance) * total;
  std::vector<double>& hist = sc.hist4;
  hist.assign(4 * kBuckets, 0.0);
  for (int64_t i = 0; i < padded; ++i) hist[static_cast<size_t>((i & 3) * kBuckets + b[i])] += w[i];
  uint32_t edge = 0;
  double before_edge = 0.0;
  const auto mass = [&](uint32_t k) { return (hist[k] + hist[kBuckets + k]) + (hist[2 * kBuckets + k] + hist[3 * kBuckets + k]); };
  while (edge + 1 < kBuckets && before_edge + mass(edge) < stop_at) before_edge += mass(edge++);
  std::vector<Cand>& boundary = sc.boundary;
  boundary.clear();
  boundary_avx2(logits, w, b, padded, vocab, edge, boundary);
  double boundary_kept = 0.0;
  const size_t n_boundary = nucleus(boundary, stop_at - before_edge, boundary_kept);
  const double kept_mass = before_edge + boundary_kept;
  normalise(b, static_cast<int32_t>(edge), kept_mass);
  for (size_t j = 0; j < n_boundary; ++j)
    probs[static_cast<size_t>(cand_id(boundary[j].key))] = static_cast<float>(boundary[j].w / kept_mass);
}
#endif

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
                "expected top_k >= 0 (0, or vLLM's -1, = off), found " + std::to_string(top_k), kSection,
                "top_k");
}

double softmax_prob(const float* logits, int64_t vocab, int32_t token) {
  return softmax_prob(logits, vocab, token, 16);
}

double softmax_prob(const float* logits, int64_t vocab, int32_t token, int max_lanes) {
  check_vocab(logits, vocab, "logits");
  if (token < 0 || token >= vocab)
    throw Error(ErrorKind::kBadInput,
                "expected a token in [0, " + std::to_string(vocab) + "), found " + std::to_string(token),
                kSection, "token");
#ifdef SPECLAB_X86
  const bool avx512 = max_lanes >= 16 && have_avx512f(), avx2 = max_lanes >= 8 && have_avx2_fma();
  if (avx512 || avx2) {
    const int64_t lanes = avx512 ? 16 : 8;
    const int64_t body = vocab - vocab % lanes;
    bool bad = false;
    float m = body == 0      ? -std::numeric_limits<float>::infinity()
              : avx512 ? max_avx512(logits, body, bad)
                       : max_avx2(logits, body, bad);
    if (bad) m = checked_max(logits, vocab);  // throws, naming the first bad index
    for (int64_t i = body; i < vocab; ++i) {
      const float v = logits[i];
      if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) bad_logit(i, v);
      m = std::max(m, v);
    }
    if (m == -std::numeric_limits<float>::infinity()) checked_max(logits, vocab);  // throws: all -inf
    const double total = (avx512 ? sum_exp_avx512(logits, body, m) : sum_exp_avx2(logits, body, m)) +
                         sum_exp_scalar(logits + body, vocab - body, m);
    return std::exp(static_cast<double>(logits[token]) - m) / total;
  }
#endif
  const float m = checked_max(logits, vocab);
  return std::exp(static_cast<double>(logits[token]) - m) / sum_exp_scalar(logits, vocab, m);
}

void check_logits(const float* logits, int64_t vocab) {
  check_vocab(logits, vocab, "logits");
  (void)checked_max(logits, vocab);
}

int32_t argmax(const float* logits, int64_t vocab) {
  check_vocab(logits, vocab, "logits");
#if defined(SPECLAB_X86) && defined(__SSE2__)
  // Fast path (a greedy step scans 4 to 9 rows of 32k to 150k logits): the maximum and any NaN
  // in 4-wide SSE, then the first index holding that maximum (+0 and -0 compare equal, as in the
  // scalar loop). With a NaN the scalar loop below reports the first one.
  {
    __m128 mx = _mm_set1_ps(-std::numeric_limits<float>::infinity());
    __m128 nan = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= vocab; i += 4) {
      const __m128 v = _mm_loadu_ps(logits + i);
      nan = _mm_or_ps(nan, _mm_cmpunord_ps(v, v));
      mx = _mm_max_ps(mx, v);
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, mx);
    float m = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
    bool any_nan = _mm_movemask_ps(nan) != 0;
    for (; i < vocab; ++i) {
      any_nan |= std::isnan(logits[i]);
      m = std::max(m, logits[i]);
    }
    if (!any_nan) {
      const __m128 target = _mm_set1_ps(m);
      int64_t j = 0;
      for (; j + 4 <= vocab; j += 4) {
        const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(logits + j), target));
        if (hit != 0) return static_cast<int32_t>(j + __builtin_ctz(static_cast<unsigned>(hit)));
      }
      for (; j < vocab; ++j)
        if (logits[j] == m) return static_cast<int32_t>(j);
    }
  }
#endif
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
  logits_to_probs(logits, vocab, opts, probs, 16);
}

void logits_to_probs(const float* logits, int64_t vocab, const SamplingOptions& opts, std::vector<float>& probs,
                     int max_lanes) {
  opts.validate();
  check_vocab(logits, vocab, "logits");

  // Pass 1: validate, find the maximum (its index is the greedy answer: first maximum wins).
  // With AVX2, the maximum and the validation of 8-lane blocks first (max is exact, so the value
  // is the scalar loop's); a NaN or +inf sends the scan to the scalar loop, which names the
  // first one. The index is looked up only for greedy.
  const float kInf = std::numeric_limits<float>::infinity();
  float max_v = -kInf;
  int64_t scanned = 0;
#ifdef SPECLAB_X86
  if (have_avx2_fma()) {
    const int64_t body = vocab - vocab % 8;
    bool bad = false;
    const float m = body > 0 ? max_avx2(logits, body, bad) : -kInf;
    if (!bad) {
      max_v = m;
      scanned = body;
    }
  }
#endif
  for (int64_t i = scanned; i < vocab; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == kInf) bad_logit(i, v);
    if (v > max_v) max_v = v;
  }
  if (max_v == -kInf)
    throw Error(ErrorKind::kBadInput, "expected at least one finite logit, found all -inf",
                kSection, "logits");
  // top_k = 1 keeps the first maximum alone, as greedy decoding does: with HF's ties kept, two
  // equal top logits were sampled between, while runs counted it deterministic (speculative
  // output compared with AR's token for token, greedy repeats no new trials).
  if (opts.greedy() || opts.top_k == 1) {
    probs.assign(static_cast<size_t>(vocab), 0.0f);
    int64_t max_i = 0;
    while (logits[max_i] != max_v) ++max_i;  // the first maximum
    probs[static_cast<size_t>(max_i)] = 1.0f;
    return;
  }

  Scratch& sc = scratch();

  // Top-k: the k-th largest logit is the threshold; every logit >= it survives (HF keeps
  // ties). Temperature > 0 preserves the order, so thresholding the raw logits is the same
  // as thresholding the scaled ones.
  float threshold = -kInf;
  if (opts.top_k > 0 && opts.top_k < vocab) threshold = kth_largest(logits, vocab, opts.top_k, sc);
#ifdef SPECLAB_X86
  // (1 / T must be finite: the vector path multiplies by it; a subnormal T takes the scalar path.)
  if (threshold == -kInf && max_lanes >= 8 && have_avx2_fma() && std::isfinite(1.0 / opts.temperature))
    return probs_all_avx2(logits, vocab, opts, max_v, probs, sc, max_lanes >= 16);
#endif
  probs.assign(static_cast<size_t>(vocab), 0.0f);

  // Temperature and unnormalised softmax weights of the candidates, in double. Subtracting
  // the maximum first is the usual overflow guard: softmax((l - m) / T) == softmax(l / T).
  // Tokens whose weight underflows to 0 are not candidates (HF's top-p drops them too).
  std::vector<Cand>& cands = sc.cands;
  cands.clear();
  const double t = opts.temperature;
  const double m = max_v;
  double total = 0.0;
  const auto offer = [&](int64_t i) {
    const float v = logits[i];
    const double x = (m - static_cast<double>(v)) / t;  // >= 0: minus the log-weight
    const double e = std::exp(-x);
    if (e > 0.0) {
      const double b = x * kBucketsPerUnit;
      const uint32_t bucket = b < kBuckets - 1 ? static_cast<uint32_t>(b) : kBuckets - 1;
      cands.push_back(Cand{cand_key(v, static_cast<int32_t>(i)), e, bucket});
      total += e;
    }
  };
  int64_t from = 0;
#ifdef SPECLAB_X86
  // With top-k, few logits pass the threshold: find them 8 lanes at a time, then offer them in
  // index order as the loop below does (the same candidates, weights and sum).
  if (threshold > -kInf && have_avx2_fma()) {
    sc.survivors.clear();
    from = survivors_avx2(logits, 0, vocab, threshold, sc.survivors);
    for (int32_t i : sc.survivors) offer(i);
  }
#endif
  for (int64_t i = from; i < vocab; ++i) {
    const float v = logits[i];
    if (v >= threshold && v != -kInf) offer(i);
  }
  // The maximum contributes exp(0) = 1, so total >= 1 and cands is not empty.

  if (opts.top_p >= 1.0) {
    for (const Cand& c : cands)
      probs[static_cast<size_t>(cand_id(c.key))] = static_cast<float>(c.w / total);
    return;
  }

  // Top-p: by descending probability (= descending logit, as T > 0 and exp is monotone;
  // ties: lower id first), keep candidate j iff it is the first or the mass before it is
  // < top_p (within kTopPTolerance). Buckets are ordered like the candidates, so every
  // candidate of a bucket before the boundary bucket (the first where the cumulative mass
  // reaches top_p) is kept, every one after it dropped, and only the boundary bucket is
  // ordered exactly.
  const double stop_at = (opts.top_p - kTopPTolerance) * total;
  std::vector<double>& mass = sc.bucket_mass;
  std::fill(mass.begin(), mass.end(), 0.0);
  for (const Cand& c : cands) mass[c.bucket] += c.w;
  uint32_t edge = 0;
  double before_edge = 0.0;  // mass of the buckets before `edge`
  while (edge + 1 < kBuckets && before_edge + mass[edge] < stop_at) before_edge += mass[edge++];
  // The edge bucket is not empty: an empty one would not have moved the sum past stop_at,
  // and the last one holds all that remains. Its first candidate is kept, since the mass
  // before it (before_edge) is < stop_at.
  std::vector<Cand>& boundary = sc.boundary;
  boundary.clear();
  for (const Cand& c : cands)
    if (c.bucket == edge) boundary.push_back(c);
  double boundary_kept = 0.0;
  const size_t n_boundary = nucleus(boundary, stop_at - before_edge, boundary_kept);
  const double kept_mass = before_edge + boundary_kept;
  for (const Cand& c : cands)
    if (c.bucket < edge) probs[static_cast<size_t>(cand_id(c.key))] = static_cast<float>(c.w / kept_mass);
  for (size_t j = 0; j < n_boundary; ++j)
    probs[static_cast<size_t>(cand_id(boundary[j].key))] = static_cast<float>(boundary[j].w / kept_mass);
}

int32_t sample(const float* probs, int64_t n, Rng& rng) {
  check_vocab(probs, n, "probs");
  // Validation and the sum in one pass; four partial sums shorten the add-latency chain.
  double part[4] = {0.0, 0.0, 0.0, 0.0};
  bool ok = true;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int r = 0; r < 4; ++r) {
      ok &= probs[i + r] >= 0.0f;
      part[r] += probs[i + r];
    }
  for (; i < n; ++i) {
    ok &= probs[i] >= 0.0f;
    part[0] += probs[i];
  }
  if (!ok)
    for (int64_t j = 0; j < n; ++j)
      if (!(probs[j] >= 0.0f))
        throw Error(ErrorKind::kBadInput,
                    "expected probabilities >= 0, found " + num(probs[j]) + " at index " +
                        std::to_string(j),
                    kSection, "probs");
  const double total = (part[0] + part[1]) + (part[2] + part[3]);
  if (!(total > 0.0) || !std::isfinite(total))
    throw Error(ErrorKind::kBadInput,
                "expected a positive finite probability sum, found " + num(total), kSection,
                "probs");
  const double u = rng.uniform() * total;
  double cum = 0.0;
  int64_t last = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (probs[j] > 0.0f) {
      cum += probs[j];
      last = j;
      if (u < cum) return static_cast<int32_t>(j);
    }
  }
  // Only reachable when rounding leaves u * total >= the final cumulative sum.
  return static_cast<int32_t>(last);
}

int32_t sample(const std::vector<float>& probs, Rng& rng) {
  return sample(probs.data(), static_cast<int64_t>(probs.size()), rng);
}

int32_t pick_token(const float* logits, int64_t vocab, const SamplingOptions& sampling, Rng& rng,
                   std::vector<float>& scratch) {
  if (sampling.greedy()) return argmax(logits, vocab);
  logits_to_probs(logits, vocab, sampling, scratch);
  return sample(scratch, rng);
}

}  // namespace speclab
