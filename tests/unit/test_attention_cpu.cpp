// attend_rows() (models/llama/attention_cpu.h) against a float64 softmax(q k^T scale) v
// reference, on paged (shuffled) and contiguous slots, GQA groups of 1, 3 and 6, contexts 1 to
// 8,192, on every kernel ISA this CPU can run; and the bit-identity contract: a row's output is
// the same bits alone or among n <= 32 rows, and with 1, 2 or 3 threads. Torch-free.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/attention_cpu.h"
#include "models/llama/attention_int8_vnni.h"
#include "models/llama/cpu_ops.h"
#include "models/llama/gemv.h"
#include "models/loaders/dequant.h"
#include "tests/support/kernel_isas.h"
#include "tests/support/sanitized.h"

using namespace speclab;

namespace {

using testing::kSanitized;
using testing::runnable_isas;
using testing::sweep;
struct Restore {
  ~Restore() {
    set_kernel_isa_cap(kKernelIsaMax);
    set_compute_threads(0);
  }
};

// One layer's attention problem: n query rows at the last n positions of a ctx-key context.
struct Case {
  int64_t n, H, KVH, D, ctx, q_stride;
  std::vector<float> q;           // [n, q_stride]
  std::vector<float> k, v;        // [n_slots, KVH * D]
  std::vector<int64_t> slots;     // [ctx], empty for a contiguous base
  int64_t base = 0;
  std::vector<int64_t> limits;    // [n]
  std::vector<uint16_t> k16, v16; // binary16 copies of k, v when half() was called
  std::vector<int8_t> k8, v8;     // int8 heads with scales, [n_slots, KVH, D + 4], when int8() was called

  Case(int64_t n_, int64_t H_, int64_t KVH_, int64_t D_, int64_t ctx_, bool paged, uint32_t seed)
      : n(n_), H(H_), KVH(KVH_), D(D_), ctx(ctx_), q_stride(H_ * D_ + 2 * KVH_ * D_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    const int64_t n_slots = ctx + 37, kv_dim = KVH * D;
    q.resize(static_cast<size_t>(n * q_stride));
    for (float& x : q) x = 1.5f * normal(rng);  // sharper than uniform attention
    k.resize(static_cast<size_t>(n_slots * kv_dim));
    v.resize(k.size());
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    if (paged) {
      std::vector<int64_t> perm(static_cast<size_t>(n_slots));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      slots.assign(perm.begin(), perm.begin() + ctx);
    } else {
      base = 29;
    }
    std::vector<int64_t> positions(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) positions[i] = std::max<int64_t>(0, ctx - n + i);
    limits.resize(static_cast<size_t>(n));
    cpu::causal_limits(positions.data(), n, ctx, limits.data());
  }
  int64_t slot(int64_t j) const { return slots.empty() ? base + j : slots[j]; }

  // Rounds k and v to binary16 (dequant.h's conversions) and keeps the binary16 bits: after this,
  // run(..., true) reads a float16 cache holding exactly the values run(..., false) reads.
  void half() {
    k16.resize(k.size());
    v16.resize(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k16[i] = fp32_to_fp16(k[i]);
      v16[i] = fp32_to_fp16(v[i]);
      k[i] = fp16_to_fp32(k16[i]);
      v[i] = fp16_to_fp32(v16[i]);
    }
  }

  // Quantizes k and v per (slot, kv head) to the int8 layout (quantize_kv_heads) and keeps the
  // dequantized values: after this, run(..., kInt8) reads an int8 cache standing for exactly the
  // values the reference reads.
  void int8() {
    const int64_t hs = D + cpu::kKvInt8ScaleBytes, heads = static_cast<int64_t>(k.size()) / D;
    k8.resize(static_cast<size_t>(heads * hs));
    v8.resize(k8.size());
    cpu::quantize_kv_heads(k.data(), heads, D, k8.data());
    cpu::quantize_kv_heads(v.data(), heads, D, v8.data());
    cpu::dequantize_kv_heads(k8.data(), heads, D, k.data());
    cpu::dequantize_kv_heads(v8.data(), heads, D, v.data());
  }

  // Replaces each query head by the values its int8 quantization (quantize_kv_heads, as the
  // int8 VNNI flavour quantizes queries) stands for: the reference then computes what that
  // flavour's integer scores compute.
  void round_queries_to_int8() {
    std::vector<int8_t> q8(static_cast<size_t>(D + cpu::kKvInt8ScaleBytes));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < H; ++h) {
        float* head = q.data() + i * q_stride + h * D;
        cpu::quantize_kv_heads(head, 1, D, q8.data());
        cpu::dequantize_kv_heads(q8.data(), 1, D, head);
      }
  }

  // Rows [r0, r0 + rows) with their own limits (or `limit_override` for every row when > 0).
  std::vector<float> run(int64_t r0, int64_t rows, int64_t limit_override = 0, bool f16 = false) const {
    return run_kv(r0, rows, limit_override, f16 ? cpu::KvElement::kFloat16 : cpu::KvElement::kFloat32);
  }
  std::vector<float> run_kv(int64_t r0, int64_t rows, int64_t limit_override, cpu::KvElement kv) const {
    std::vector<int64_t> lim(limits.begin() + r0, limits.begin() + r0 + rows);
    if (limit_override > 0) std::fill(lim.begin(), lim.end(), limit_override);
    std::vector<float> out(static_cast<size_t>(rows * H * D), -1.f);
    cpu::AttentionArgs a;
    a.q = q.data() + r0 * q_stride;
    a.q_stride = q_stride;
    a.n = rows;
    a.n_heads = H;
    a.n_kv_heads = KVH;
    a.head_dim = D;
    a.k = kv == cpu::KvElement::kFloat16 ? static_cast<const void*>(k16.data())
          : kv == cpu::KvElement::kInt8  ? static_cast<const void*>(k8.data())
                                         : k.data();
    a.v = kv == cpu::KvElement::kFloat16 ? static_cast<const void*>(v16.data())
          : kv == cpu::KvElement::kInt8  ? static_cast<const void*>(v8.data())
                                         : v.data();
    a.kv = kv;
    a.slots = slots.empty() ? nullptr : slots.data();
    a.slot_base = base;
    a.limits = lim.data();
    a.scale = 1.f / std::sqrt(static_cast<float>(D));
    a.out = out.data();
    cpu::attend_rows(a);
    return out;
  }

  // float64 softmax(q k^T / sqrt(D)) v over keys j < limit, row i, every head: [H * D].
  std::vector<double> reference(int64_t i, int64_t limit) const {
    const int64_t G = H / KVH, kv_dim = KVH * D;
    std::vector<double> out(static_cast<size_t>(H * D), 0.0), s(static_cast<size_t>(limit));
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + i * q_stride + h * D;
      const int64_t g = h / G;
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < limit; ++j) {
        const float* kj = k.data() + slot(j) * kv_dim + g * D;
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(qh[d]) * kj[d];
        s[j] = acc / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j < limit; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < limit; ++j) {
        const float* vj = v.data() + slot(j) * kv_dim + g * D;
        for (int64_t d = 0; d < D; ++d) out[h * D + d] += s[j] / sum * vj[d];
      }
    }
    return out;
  }

  // max |got - reference| over all rows, each row against keys j < limits[i] + limit_shift.
  double max_error(const std::vector<float>& got, int64_t limit_shift = 0) const {
    double err = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<double> ref = reference(i, limits[i] + limit_shift);
      for (int64_t e = 0; e < H * D; ++e) err = std::max(err, std::abs(got[i * H * D + e] - ref[e]));
    }
    return err;
  }
};

constexpr double kTol = 1e-5;
// The int8 VNNI flavour rounds each tile's softmax weights to int16 against the tile's largest
// (attention_int8_vnni.h): up to 1/65534 of it per weight.
constexpr double kTolInt16Weights = 2e-4;

bool same_bits(const float* a, const float* b, int64_t count) {
  return std::memcmp(a, b, static_cast<size_t>(count) * sizeof(float)) == 0;
}

struct Shape {
  int64_t H, KVH, D;
};

}  // namespace

TEST_CASE("attend_rows equals a float64 softmax reference (GQA, paged and contiguous slots)", "[attention]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  // G = 1, 3 (SmolLM2), 6 (Qwen2.5 1.5B); D = 72 has an odd number of 8-float blocks and a
  // tail past 64; D = 36 is not a multiple of 8 (scalar path on every ISA).
  const std::vector<Shape> shapes = {{4, 4, 64}, {9, 3, 64}, {12, 2, 128}, {6, 2, 72}, {3, 1, 36}};
  for (const Shape& sh : shapes)
    for (int64_t ctx :
         sweep({1, 2, 7, 31, 32, 33, 100, 255, 256, 257, 600, 1000}, {1, 2, 7, 31, 32, 33, 255, 256, 257, 1000}))
      for (int64_t n : {1, 5})
        for (bool paged : {true, false}) {
          INFO("H " << sh.H << " KVH " << sh.KVH << " D " << sh.D << " ctx " << ctx << " n " << n << " paged " << paged);
          const Case c(n, sh.H, sh.KVH, sh.D, ctx, paged, static_cast<uint32_t>(ctx * 31 + n + sh.D));
          REQUIRE(c.max_error(c.run(0, n)) < kTol);
        }
}

TEST_CASE("attend_rows stays accurate at context 8,192 and off the split grid", "[attention]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  for (const Shape& sh : std::vector<Shape>{{9, 3, 64}, {12, 2, 128}})
    for (int64_t ctx : {4099, 8192}) {
      INFO("H " << sh.H << " D " << sh.D << " ctx " << ctx);
      const Case c(3, sh.H, sh.KVH, sh.D, ctx, true, static_cast<uint32_t>(ctx + sh.D));
      REQUIRE(c.max_error(c.run(0, 3)) < kTol);
    }
}

TEST_CASE("attend_rows negative controls: an off-by-one limit and a wrong slot fail the comparison", "[attention]") {
  Restore restore;
  for (int64_t ctx : {5, 40, 300}) {
    INFO("ctx " << ctx);
    const Case c(4, 9, 3, 64, ctx, true, 7);
    const std::vector<float> got = c.run(0, 4);
    REQUIRE(c.max_error(got) < kTol);
    // Reference one key short: the comparison must notice the extra key the kernel attended.
    CHECK(c.max_error(got, -1) > 100 * kTol);
    // The kernel reading one key short (limit - 1 for every row) must fail against the true reference.
    Case short_by_one = c;
    for (int64_t& l : short_by_one.limits) l -= 1;
    CHECK(c.max_error(short_by_one.run(0, 4)) > 100 * kTol);
    // Two swapped slots (a paging bug) must fail too.
    Case swapped = c;
    std::swap(swapped.slots[0], swapped.slots[ctx - 1]);
    std::swap(swapped.slots[1], swapped.slots[ctx / 2]);
    CHECK(c.max_error(swapped.run(0, 4)) > 100 * kTol);
  }
}

TEST_CASE("attend_rows: each row is bit-identical alone and among n <= 32 rows", "[attention][bitwise]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  for (const Shape& sh : std::vector<Shape>{{9, 3, 64}, {12, 2, 128}})
    for (int64_t ctx : {40, 300, 530}) {  // rows inside one split and across split boundaries
      const int64_t row = sh.H * sh.D;
      const Case c(32, sh.H, sh.KVH, sh.D, ctx, true, static_cast<uint32_t>(ctx));
      // The single-row results (each with its own causal limit).
      std::vector<std::vector<float>> alone;
      for (int64_t i = 0; i < 32; ++i) alone.push_back(c.run(i, 1, c.limits[i]));
      REQUIRE(c.max_error([&] {
        std::vector<float> all;
        for (const auto& r : alone) all.insert(all.end(), r.begin(), r.end());
        return all;
      }()) < kTol);
      // Under the sanitizers (sanitized.h): every remainder of kRowBlock (8) rows, and one, two
      // and four whole blocks with their neighbours.
      std::vector<int64_t> counts;
      for (int64_t n = 2; n <= 32; ++n)
        if (!kSanitized || n <= 9 || (n >= 15 && n <= 17) || n >= 31) counts.push_back(n);
      for (int64_t n : counts)
        for (int64_t r0 : {int64_t(0), 32 - n}) {
          const std::vector<float> got = c.run(r0, n);
          for (int64_t i = 0; i < n; ++i) {
            INFO("H " << sh.H << " ctx " << ctx << " n " << n << " first row " << r0 << " row " << i);
            REQUIRE(same_bits(got.data() + i * row, alone[r0 + i].data(), row));
          }
        }
      // Negative control: the same row with a limit one longer is not the same bits.
      CHECK_FALSE(same_bits(c.run(0, 1, c.limits[0] + 1).data(), alone[0].data(), row));
    }
}

TEST_CASE("attend_rows: results do not depend on the thread count", "[attention][bitwise][threads]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  // Contexts under one split (240) and of two or three splits (300, 600) are cut by kv head and
  // by row when a call has too few (split, row block) items for the threads (plan_items); 2048
  // and 2500 are not (under the sanitizers 1700 stands for both: 7 splits, the default plan on 2
  // and 3 threads, off the tile grid). Both caches: an item reads (and the scalar flavour widens)
  // only its kv heads.
  for (const Shape& sh : std::vector<Shape>{{9, 3, 64}, {12, 2, 128}})
    for (int64_t ctx : sweep({240, 300, 600, 2048, 2500}, {240, 300, 600, 1700}))
      for (int64_t n : {1, 5, 17})
        for (bool f16 : {false, true}) {
          INFO("H " << sh.H << " ctx " << ctx << " n " << n << " float16 cache " << f16);
          Case c(n, sh.H, sh.KVH, sh.D, ctx, true, static_cast<uint32_t>(ctx + n));
          if (f16) c.half();
          set_compute_threads(1);
          const std::vector<float> one = c.run(0, n, 0, f16);
          for (int threads : {2, 3}) {
            set_compute_threads(threads);
            REQUIRE(compute_threads() == threads);
            const std::vector<float> many = c.run(0, n, 0, f16);
            REQUIRE(same_bits(one.data(), many.data(), static_cast<int64_t>(one.size())));
          }
        }
}

TEST_CASE("store_f16 and load_f16 give dequant.h's binary16 conversions on every ISA", "[attention][f16]") {
  Restore restore;
  std::mt19937 rng(7);
  std::vector<float> x;
  for (float e : {0.f, -0.f, 1.f, -1.f, 65504.f, 65519.f, 65520.f, 1e9f, -1e9f, 6.1e-5f, 5.9e-8f, 3e-8f, 2.9e-8f, 1e-10f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    x.push_back(e);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int i = 0; i < 4000; ++i) x.push_back(normal(rng) * std::ldexp(1.f, static_cast<int>(rng() % 40) - 28));
  for (int i = 0; i < 1000; ++i) {  // exact ties between two binary16 values: round to even
    const uint16_t h = static_cast<uint16_t>(rng() % 0x7bff);
    x.push_back(0.5f * (fp16_to_fp32(h) + fp16_to_fp32(static_cast<uint16_t>(h + 1))));
  }
  const int64_t n = static_cast<int64_t>(x.size());  // not a multiple of 8: the tail runs too
  std::vector<uint16_t> want(x.size()), all(65536);
  for (size_t i = 0; i < x.size(); ++i) want[i] = fp32_to_fp16(x[i]);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  for (KernelIsa isa : runnable_isas()) {
    set_kernel_isa_cap(isa);
    INFO("kernel ISA " << kernel_isa_name(isa));
    std::vector<uint16_t> got(x.size());
    cpu::store_f16(x.data(), got.data(), n);
    CHECK(got == want);
    std::vector<float> wide(65536);
    cpu::load_f16(all.data(), wide.data(), 65536);
    int64_t mismatches = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float ref = fp16_to_fp32(static_cast<uint16_t>(h));
      if (std::isnan(ref) ? !std::isnan(wide[h]) : std::memcmp(&ref, &wide[h], 4) != 0) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
  // Negative control: truncation instead of rounding is caught.
  std::vector<uint16_t> truncated(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    bits &= ~uint32_t(0x1fff);
    float t;
    std::memcpy(&t, &bits, 4);
    truncated[i] = fp32_to_fp16(t);
  }
  CHECK(truncated != want);
}

TEST_CASE("attend_rows over a float16 cache equals a float32 cache of the same values, bit for bit", "[attention][f16]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  for (const Shape& sh : std::vector<Shape>{{9, 3, 64}, {12, 2, 128}, {14, 2, 64}})
    for (int64_t ctx : sweep({1, 40, 530, 2100}, {1, 40, 530, 1100}))  // 1100: 5 splits, as 2100 the default plan
      for (int64_t n : {1, 5, 17}) {
        INFO("H " << sh.H << " ctx " << ctx << " n " << n);
        Case c(n, sh.H, sh.KVH, sh.D, std::max(ctx, n), true, static_cast<uint32_t>(ctx * 7 + n));
        const std::vector<float> before = c.run(0, n);
        c.half();
        const std::vector<float> f32 = c.run(0, n), f16 = c.run(0, n, 0, true);
        REQUIRE(same_bits(f32.data(), f16.data(), static_cast<int64_t>(f16.size())));
        CHECK(c.max_error(f16) < kTol);
        // Each row alone, from the float16 cache: the same bits as among the n rows.
        const int64_t row = sh.H * sh.D;
        for (int64_t i = 0; i < n; ++i)
          REQUIRE(same_bits(c.run(i, 1, c.limits[i], true).data(), f16.data() + i * row, row));
        // Negative control: rounding the cache to binary16 moves the output (the check can fail).
        CHECK_FALSE(same_bits(before.data(), f16.data(), static_cast<int64_t>(f16.size())));
      }
}

TEST_CASE("quantize_kv_heads: absmax scale, round to nearest, exact zeros, and dequantize_kv_heads inverts it",
          "[attention][int8]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t D : {8, 64, 128}) {
    std::vector<float> x(static_cast<size_t>(D)), back(x.size());
    std::vector<int8_t> q(static_cast<size_t>(D + cpu::kKvInt8ScaleBytes));
    for (int rep = 0; rep < 200; ++rep) {
      const float mag = std::ldexp(1.f, static_cast<int>(rng() % 20) - 10);
      for (float& e : x) e = mag * normal(rng);
      cpu::quantize_kv_heads(x.data(), 1, D, q.data());
      float s;
      std::memcpy(&s, q.data() + D, 4);
      float amax = 0.f;
      for (float e : x) amax = std::max(amax, std::fabs(e));
      REQUIRE(s == amax / 127.f);
      cpu::dequantize_kv_heads(q.data(), 1, D, back.data());
      int extremes = 0;
      for (int64_t d = 0; d < D; ++d) {
        REQUIRE(q[d] >= -127);
        REQUIRE(back[d] == static_cast<float>(q[d]) * s);
        // Within half a step (plus float rounding of x * 127 / amax).
        REQUIRE(std::fabs(back[d] - x[d]) <= 0.5f * s * 1.0001f + 1e-30f);
        extremes += std::abs(q[d]) == 127;
      }
      CHECK(extremes >= 1);  // the largest element maps to +-127
    }
  }
  // An all-zero head: scale 0 and zero values, no NaN.
  std::vector<float> zero(64, 0.f), back(64, 1.f);
  std::vector<int8_t> q(68, 5);
  cpu::quantize_kv_heads(zero.data(), 1, 64, q.data());
  cpu::dequantize_kv_heads(q.data(), 1, 64, back.data());
  for (float e : back) CHECK(e == 0.f);
}

TEST_CASE("attend_rows over an int8 cache equals the float64 reference over its values, on every ISA",
          "[attention][int8]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  for (const Shape& sh :
       std::vector<Shape>{{9, 3, 64}, {12, 2, 128}, {4, 4, 64}, {6, 2, 72}, {3, 1, 36}, {8, 4, 8}, {6, 2, 192}, {4, 1, 256}})
    for (int64_t ctx : sweep({1, 7, 33, 257, 530, 2100}, {1, 7, 33, 257, 530, 1100}))
      for (int64_t n : {1, 5})
        for (bool paged : {true, false}) {
          INFO("H " << sh.H << " KVH " << sh.KVH << " D " << sh.D << " ctx " << ctx << " n " << n << " paged " << paged);
          Case c(n, sh.H, sh.KVH, sh.D, std::max(ctx, n), paged, static_cast<uint32_t>(ctx * 13 + n + sh.D));
          const std::vector<float> exact = c.run(0, n);
          c.int8();
          const std::vector<float> got = c.run_kv(0, n, 0, cpu::KvElement::kInt8);
          if (cpu::int8_vnni_attention(cpu::KvElement::kInt8, sh.D)) {
            // The integer flavour: the reference over the queries' int8 values, within the
            // softmax weights' int16 rounding; and further from the unrounded queries' (the
            // queries really are quantized, as attention_int8_vnni.h says).
            Case cq = c;
            cq.round_queries_to_int8();
            const double err = cq.max_error(got), err_unrounded = c.max_error(got);
            INFO("error vs rounded queries " << err << ", vs the float queries " << err_unrounded);
            REQUIRE(err < kTolInt16Weights);
            if (ctx > 1) CHECK(err_unrounded > 4 * err);
          } else {
            REQUIRE(c.max_error(got) < kTol);
          }
          // The kernel's output is that of the quantized values, not the originals (the reference
          // comparison above is what catches a wrong scale: dropping the K scale, or the last
          // key's V scale, fails it).
          if (ctx > 1) CHECK_FALSE(same_bits(exact.data(), got.data(), static_cast<int64_t>(got.size())));
        }
}

TEST_CASE("attend_rows over an int8 cache: a row is bit-identical alone, among n <= 32 rows and on 1-3 threads",
          "[attention][int8][bitwise]") {
  Restore restore;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  if (best_kernel_isa() < KernelIsa::kAvx512Vnni)
    WARN("this CPU has no AVX-512 VNNI: the integer flavour (attention_int8_vnni.h) is not exercised here");
  for (const Shape& sh : std::vector<Shape>{{9, 3, 64}, {12, 2, 128}, {6, 2, 192}, {4, 1, 256}})
    for (int64_t ctx : sweep({40, 300, 2100}, {40, 300, 1700})) {  // 1700: the default plan on 2 and 3 threads
      const int64_t row = sh.H * sh.D;
      Case c(32, sh.H, sh.KVH, sh.D, ctx, true, static_cast<uint32_t>(ctx + 3));
      c.int8();
      std::vector<std::vector<float>> alone;
      for (int64_t i = 0; i < 32; ++i) alone.push_back(c.run_kv(i, 1, c.limits[i], cpu::KvElement::kInt8));
      for (int64_t n : {2, 5, 9, 17, 32})
        for (int threads : {1, 2, 3}) {
          set_compute_threads(threads);
          const std::vector<float> got = c.run_kv(32 - n, n, 0, cpu::KvElement::kInt8);
          for (int64_t i = 0; i < n; ++i) {
            INFO("H " << sh.H << " ctx " << ctx << " n " << n << " threads " << threads << " row " << i);
            REQUIRE(same_bits(got.data() + i * row, alone[32 - n + i].data(), row));
          }
        }
      set_compute_threads(0);
      // Negative control: one scale changed moves the rows that read it.
      Case bumped = c;
      bumped.k8[static_cast<size_t>(bumped.slot(0) * sh.KVH * (sh.D + cpu::kKvInt8ScaleBytes) + sh.D + 3)] ^= 0x01;
      CHECK_FALSE(same_bits(bumped.run_kv(31, 1, c.limits[31], cpu::KvElement::kInt8).data(), alone[31].data(), row));
      // A key only the last row reads, with an infinite V scale (quantize_kv_heads stores one for
      // an infinite value): the other rows, which share its tile, keep their bits.
      Case poisoned = c;
      const float inf = std::numeric_limits<float>::infinity();
      for (int64_t g = 0; g < sh.KVH; ++g)
        std::memcpy(poisoned.v8.data() + (poisoned.slot(ctx - 1) * sh.KVH + g) * (sh.D + cpu::kKvInt8ScaleBytes) + sh.D,
                    &inf, sizeof(float));
      const std::vector<float> among = poisoned.run_kv(0, 32, 0, cpu::KvElement::kInt8);
      for (int64_t i = 0; i < 31; ++i) {
        INFO("H " << sh.H << " ctx " << ctx << " row " << i << " beside a key with an infinite V scale");
        REQUIRE(same_bits(among.data() + i * row, alone[i].data(), row));
      }
    }
}

TEST_CASE("quantize_kv_heads gives the scalar loop's bytes on every ISA, quantize_queries sums them",
          "[attention][int8]") {
  Restore restore;
  for (int64_t D : {8, 36, 64, 128, 192, 256}) {
    Case c(3, 4, 2, D, 10, false, static_cast<uint32_t>(D));
    float* q = c.q.data();
    std::fill(q + c.q_stride, q + c.q_stride + D, 0.f);  // row 1, head 0: all zero (scale 0)
    q[2 * c.q_stride + D + 5] = 1e30f;                   // row 2, head 1: one huge element
    q[2 * c.q_stride + D + 6] = -3e29f;
    q[2 * c.q_stride + 2 * D + 1] = std::nanf("");       // row 2, head 2: a NaN (skipped, stored as -127)
    // Row 1, head 1: so small that 127 / max overflows to inf (products +-inf, and 0 * inf NaN).
    for (int64_t d = 0; d < D; ++d) q[c.q_stride + D + d] = d % 3 == 0 ? 0.f : d % 3 == 1 ? 1e-38f : -2e-38f;
    // Row 0, head 3: values on rounding boundaries after scaling (127 / max = 1: x.5 ties to even).
    for (int64_t d = 0; d < D; ++d) q[3 * D + d] = d == 0 ? 127.f : static_cast<float>(d % 7) - 3.5f;
    const int64_t hs = D + cpu::kKvInt8ScaleBytes;
    std::vector<int8_t> want(static_cast<size_t>(c.n * c.H * hs)), got(want.size());
    set_kernel_isa_cap(KernelIsa::kScalar);
    for (int64_t i = 0; i < c.n; ++i) cpu::quantize_kv_heads(q + i * c.q_stride, c.H, D, want.data() + i * c.H * hs);
    for (KernelIsa isa : runnable_isas()) {
      set_kernel_isa_cap(isa);
      INFO("D " << D << " kernel ISA " << kernel_isa_name(isa));
      for (int64_t i = 0; i < c.n; ++i) cpu::quantize_kv_heads(q + i * c.q_stride, c.H, D, got.data() + i * c.H * hs);
      REQUIRE(std::memcmp(got.data(), want.data(), want.size()) == 0);
      if (cpu::int8_vnni_attention(cpu::KvElement::kInt8, D)) {
        cpu::AttentionArgs a;
        a.q = q;
        a.q_stride = c.q_stride;
        a.n = c.n;
        a.n_heads = c.H;
        a.head_dim = D;
        cpu::detail::Int8Queries qq;
        cpu::detail::quantize_queries(a, qq);
        REQUIRE(std::memcmp(qq.q8.data(), want.data(), want.size()) == 0);
        for (int64_t h = 0; h < c.n * c.H; ++h) {
          int32_t sum = 0;
          for (int64_t d = 0; d < D; ++d) sum += want[static_cast<size_t>(h * hs + d)];
          CHECK(qq.qsum[static_cast<size_t>(h)] == sum);
        }
      }
    }
    CHECK(want[static_cast<size_t>((2 * c.H + 2) * hs + 1)] == -127);  // the NaN
    CHECK(want[static_cast<size_t>(3 * hs + 1)] == -2);                // -2.5 ties to even
    CHECK(want[static_cast<size_t>(3 * hs + 2)] == -2);                // -1.5 ties to even
    CHECK(want[static_cast<size_t>((c.H + 1) * hs + 1)] == 127);       // tiny: +inf product
    CHECK(want[static_cast<size_t>((c.H + 1) * hs + 2)] == -127);      // tiny: -inf product
  }
}

TEST_CASE("attend_rows rejects inconsistent arguments", "[attention]") {
  const Case c(2, 9, 3, 64, 10, false, 1);
  Case zero = c;
  zero.limits[1] = 0;
  REQUIRE_THROWS_AS(zero.run(0, 2), Error);
  Case bad_groups = c;
  bad_groups.H = 8;  // not a multiple of KVH = 3
  REQUIRE_THROWS_AS(bad_groups.run(0, 2), Error);
}
