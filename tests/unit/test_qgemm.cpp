// Packed-weight matmul kernels (models/llama/gemv.h with float32 activations, models/llama/qgemm.h
// with int8 activations) on every ISA this CPU runs: against the scalar reference, against
// dequantize() + a double-precision matmul with a tolerance derived from the int8 rounding, row
// bit-identity for n = 1..32 rows, and real GGUF weights.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/thread_pool.h"
#include "models/llama/gemv.h"
#include "models/llama/qgemm.h"
#include "models/llama/qgemm_x8.h"
#include "models/loaders/dequant.h"
#include "models/loaders/gguf.h"
#include "tests/support/required_resources.h"

using namespace speclab;

namespace {

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::IQ4_XS};
constexpr int kNumTypes = static_cast<int>(sizeof kTypes / sizeof kTypes[0]);
// The packed types that only the float32-activation kernels take: kTypes plus these.
const GgmlType kF32OnlyTypes[] = {GgmlType::F16, GgmlType::BF16};
std::vector<GgmlType> f32_kernel_types() {
  std::vector<GgmlType> v(std::begin(kTypes), std::end(kTypes));
  v.insert(v.end(), std::begin(kF32OnlyTypes), std::end(kF32OnlyTypes));
  return v;
}
bool k_quant(GgmlType t) { return ggml_type_traits(static_cast<uint32_t>(t))->block_size == 256; }

uint32_t id(GgmlType t) { return static_cast<uint32_t>(t); }

struct Lcg {
  uint32_t s;
  uint32_t next() { return s = s * 1664525u + 1013904223u; }
  float uniform() { return static_cast<float>(next() >> 8) / 16777216.0f * 2.0f - 1.0f; }  // [-1, 1)
};

// Activations of mixed magnitude: mostly ~1, every 37th element an outlier, a few exact zeros.
std::vector<float> activations(int64_t n, int64_t in, uint32_t seed) {
  Lcg g{seed};
  std::vector<float> x(static_cast<size_t>(n * in));
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 37 == 5 ? 8.f * g.uniform() : i % 53 == 7 ? 0.f : g.uniform();
  return x;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Random blocks: random bytes, then every f16 scale field set to a finite value. F16 and BF16:
// values uniform in [-0.1, 0.1) (bfloat16 by truncation), every 53rd zero or subnormal-small.
std::vector<uint8_t> random_weights(GgmlType t, int64_t out, int64_t in, uint32_t seed) {
  const GgmlTypeTraits* tr = ggml_type_traits(id(t));
  const size_t bytes = ggml_row_bytes(id(t), static_cast<uint64_t>(in), "test") * static_cast<size_t>(out);
  Lcg g{seed};
  std::vector<uint8_t> w(bytes);
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (size_t i = 0; i < bytes / 2; ++i) {
      const float v = i % 53 == 0 ? 1e-6f * g.uniform() : 0.1f * g.uniform();
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(v) : static_cast<uint16_t>(bits >> 16);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(g.next() >> 24);
  for (size_t at = 0; at < bytes; at += tr->type_size) {
    uint8_t* blk = w.data() + at;
    const float d = 0.01f + 0.02f * std::fabs(g.uniform());
    switch (t) {
      case GgmlType::Q4_1:
      case GgmlType::Q5_1: put_f16(blk + 2, 0.1f * g.uniform()); [[fallthrough]];
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::Q8_0: put_f16(blk, d); break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put_f16(blk, d * 0.1f);
        put_f16(blk + 2, d * 0.05f);
        break;
      case GgmlType::Q2_K:
        put_f16(blk + 80, d * 0.2f);
        put_f16(blk + 82, d * 0.1f);
        break;
      case GgmlType::Q3_K: put_f16(blk + 108, d * 0.1f); break;
      case GgmlType::IQ4_XS: put_f16(blk, d * 0.01f); break;  // |w| <= 32 * 127 d
      default: put_f16(blk + 208, d * 0.05f); break;  // Q6_K
    }
  }
  return w;
}

std::vector<float> dequantized(GgmlType t, const std::vector<uint8_t>& w, int64_t out, int64_t in) {
  std::vector<float> f(static_cast<size_t>(out * in));
  const size_t rb = ggml_row_bytes(id(t), static_cast<uint64_t>(in), "test");
  for (int64_t r = 0; r < out; ++r)
    dequantize(id(t), w.data() + r * rb, rb, f.data() + r * in, static_cast<size_t>(in), "test");
  return f;
}

// The activations the int8 kernels actually multiply: d * q per block.
std::vector<float> dequantized_acts(const QuantizedRows& xq) {
  std::vector<float> f(static_cast<size_t>(xq.n * xq.in));
  const int64_t nb = xq.in / xq.block;
  for (int64_t j = 0; j < xq.n; ++j)
    for (int64_t i = 0; i < xq.in; ++i)
      f[j * xq.in + i] = xq.d[j * nb + i / xq.block] * static_cast<float>(xq.q[j * xq.in + i]);
  return f;
}

// Expected outputs in double with a tolerance for each: y = x W^T + b, and tol = abs_scale *
// rel + perturbation, where perturbation = sum |w| |x - x_used| covers the activations the
// kernel used (x_used) differing from x (int8 rounding; zero when x_used == x).
struct Expected {
  std::vector<double> y, tol;
};
Expected expected(const std::vector<float>& w, const std::vector<float>& x, const std::vector<float>& x_used,
                  const std::vector<float>& bias, int64_t n, int64_t out, int64_t in, double rel) {
  Expected e;
  e.y.resize(static_cast<size_t>(n * out));
  e.tol.resize(e.y.size());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < out; ++r) {
      double s = bias.empty() ? 0.0 : bias[r], mag = 0.0, pert = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        const double wi = w[r * in + i], xi = x[j * in + i];
        s += wi * xi;
        mag += std::fabs(wi * x_used[j * in + i]);
        pert += std::fabs(wi) * std::fabs(xi - x_used[j * in + i]);
      }
      e.y[j * out + r] = s;
      e.tol[j * out + r] = mag * rel + pert * 1.0001 + 1e-6;
    }
  return e;
}

// "" when every |got - want| <= tol, else the first few mismatches.
std::string compare(const std::vector<float>& got, const Expected& want) {
  std::ostringstream os;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want.y[i]) <= want.tol[i]) && bad++ < 4)
      os << "[" << i << "] got " << got[i] << " want " << want.y[i] << " tol " << want.tol[i] << "; ";
  if (bad) os << bad << " of " << got.size() << " outside";
  return os.str();
}

// Row length for a type: 608 (19 blocks: the 8-block groups and a remainder) for the 32-element
// types, 512 for the K-quants and IQ4_XS.
int64_t row_len(GgmlType t) { return k_quant(t) ? 512 : 608; }
int64_t packed_block_elems(GgmlType t) { return k_quant(t) ? 256 : 32; }

std::vector<KernelIsa> runnable_isas() {
  std::vector<KernelIsa> isas;
  for (int i = 0; i <= static_cast<int>(best_kernel_isa()); ++i) isas.push_back(static_cast<KernelIsa>(i));
  return isas;
}

// The ISAs that run the repacked kernels here: AVX2 (its kernels also serve AVX-512 without VNNI)
// and AVX-512 VNNI, where this CPU has them.
std::vector<KernelIsa> x8_isas() {
  std::vector<KernelIsa> isas;
  for (KernelIsa isa : runnable_isas())
    if (isa == KernelIsa::kAvx2 || isa == KernelIsa::kAvx512Vnni) isas.push_back(isa);
  return isas;
}

// Restores the default cap when a test ends, whatever happens.
struct IsaCap {
  explicit IsaCap(KernelIsa isa) { set_kernel_isa_cap(isa); }
  ~IsaCap() { set_kernel_isa_cap(kKernelIsaMax); }
};

std::vector<float> int8_gemm(GgmlType t, const std::vector<uint8_t>& w, const std::vector<float>& x,
                             const float* bias, int64_t n, int64_t out, int64_t in) {
  std::vector<float> y(static_cast<size_t>(n * out));
  gemm_packed_int8(w.data(), id(t), x.data(), bias, y.data(), n, out, in);
  return y;
}

// The repacked kernel (qgemm_x8.h) of the ISA in effect on w, repacked here.
std::vector<float> x8_gemm(GgmlType t, const std::vector<uint8_t>& w, const std::vector<float>& x, const float* bias,
                           int64_t n, int64_t out, int64_t in) {
  std::vector<uint8_t> wx8(static_cast<size_t>(x8_bytes(id(t), out, in)));
  repack_x8(w.data(), id(t), out, in, wx8.data());
  std::vector<float> y(static_cast<size_t>(n * out));
  gemm_x8_int8(wx8.data(), id(t), x.data(), bias, y.data(), n, out, in);
  return y;
}

std::vector<float> f32_gemm(GgmlType t, const std::vector<uint8_t>& w, const std::vector<float>& x,
                            const float* bias, int64_t n, int64_t out, int64_t in) {
  std::vector<float> y(static_cast<size_t>(n * out));
  gemm_small_packed(w.data(), id(t), x.data(), bias, y.data(), n, out, in);
  return y;
}

// Rows of n-row calls (n = 2..nmax) that differ in any bit from 1-row calls on the same x row.
// run(x, n) -> y [n, out].
template <class Run>
int row_mismatches(const Run& run, const std::vector<float>& x, int64_t in, int64_t out, int64_t nmax) {
  std::vector<std::vector<float>> single;
  for (int64_t i = 0; i < nmax; ++i) single.push_back(run(x.data() + i * in, 1));
  int mismatched = 0;
  for (int64_t n = 2; n <= nmax; ++n) {
    const auto y = run(x.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(y.data() + i * out, single[i].data(), out * sizeof(float)) != 0) ++mismatched;
  }
  return mismatched;
}

}  // namespace

TEST_CASE("int8 activation quantization: error at most half a step, block sums exact", "[qgemm]") {
  const int64_t in = 512, n = 3;
  const auto x = activations(n, in, 7);
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q6_K}) {
    QuantizedRows xq;
    quantize_activations(id(t), x.data(), n, in, xq);
    const auto xr = dequantized_acts(xq);
    const int64_t nb = in / xq.block;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < in; ++i) {
        const float d = xq.d[j * nb + i / xq.block];
        REQUIRE(std::fabs(xr[j * in + i] - x[j * in + i]) <= d * 0.5f * 1.0001f);
        REQUIRE(std::abs(static_cast<int>(xq.q[j * in + i])) <= 127);
      }
    if (xq.block == 256)
      for (int64_t k = 0; k < n * in / 16; ++k) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += xq.q[16 * k + i];
        REQUIRE(xq.bsum16[k] == s);
      }
    if (xq.block == 256)
      for (int64_t k = 0; k < n * in / 32; ++k) REQUIRE(xq.bsum32[k] == xq.bsum16[2 * k] + xq.bsum16[2 * k + 1]);
  }
  // The SIMD quantizer is bit-identical to the scalar one (values, scales and block sums).
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q6_K})
    for (KernelIsa isa : runnable_isas()) {
      INFO(ggml_type_name(id(t)) << " " << kernel_isa_name(isa));
      QuantizedRows scalar, simd;
      {
        IsaCap cap(KernelIsa::kScalar);
        quantize_activations(id(t), x.data(), n, in, scalar);
      }
      {
        IsaCap cap(isa);
        quantize_activations(id(t), x.data(), n, in, simd);
      }
      CHECK(scalar.q == simd.q);
      CHECK(std::memcmp(scalar.d.data(), simd.d.data(), scalar.d.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(scalar.s.data(), simd.s.data(), scalar.s.size() * sizeof(float)) == 0);
      CHECK(scalar.bsum16 == simd.bsum16);
      CHECK(scalar.bsum32 == simd.bsum32);
    }
  QuantizedRows xq;
  CHECK_THROWS_AS(quantize_activations(id(GgmlType::Q4_K), x.data(), 1, 96, xq), Error);
  // F16 and BF16 matrices are packed for the float32 kernels only; the refusal lists the int8 types.
  for (GgmlType t : kF32OnlyTypes) {
    CHECK(gemm_packed_supports(id(t)));
    CHECK_FALSE(int8_gemm_supports(id(t)));
    CHECK_THROWS_WITH(quantize_activations(id(t), x.data(), 1, 256, xq),
                      Catch::Contains("int8-activation matmul supports Q4_0, Q4_1, Q5_0") &&
                          Catch::EndsWith("IQ4_XS, not " + ggml_type_name(id(t))));
    const auto w16 = random_weights(t, 2, 48, 1);  // rows of 48: not a multiple of the kernels' 32
    float y16[2];
    CHECK_THROWS_WITH(gemm_small_packed(w16.data(), id(t), x.data(), nullptr, y16, 1, 2, 48),
                      Catch::Contains("not a multiple of 32"));
  }
  CHECK(packable_row(id(GgmlType::F16), 576));
  CHECK_FALSE(packable_row(id(GgmlType::F16), 48));
  CHECK(packable_row(id(GgmlType::Q4_1), 64));
  CHECK_THROWS_WITH(quantize_activations(id(GgmlType::Q8_K), x.data(), 1, 256, xq), Catch::Contains("Q8_K"));
  // Activations quantized for 32-blocks do not fit K-quant weights.
  quantize_activations(id(GgmlType::Q8_0), x.data(), 1, 256, xq);
  const auto w = random_weights(GgmlType::Q6_K, 2, 256, 1);
  float y[2];
  CHECK_THROWS_WITH(gemm_packed_int8_q(w.data(), id(GgmlType::Q6_K), xq, nullptr, y, 2), Catch::Contains("blocks of 32"));
}

TEST_CASE("int8 kernels equal the scalar reference and dequantize() within the int8 rounding bound", "[qgemm]") {
  const int64_t n = 5, out = 37;
  std::vector<float> bias(out);
  for (int64_t r = 0; r < out; ++r) bias[r] = 0.01f * static_cast<float>(r);
  for (KernelIsa isa : runnable_isas()) {
    IsaCap cap(isa);
    for (GgmlType t : kTypes) {
      INFO(kernel_isa_name(isa) << " " << ggml_type_name(id(t)));
      const int64_t in = row_len(t);
      const auto x = activations(n, in, 11);
      const auto w = random_weights(t, out, in, 100 + id(t));
      const auto y = int8_gemm(t, w, x, bias.data(), n, out, in);
      QuantizedRows xq;
      quantize_activations(id(t), x.data(), n, in, xq);
      std::vector<float> ref(y.size());
      gemm_packed_int8_reference(w.data(), id(t), xq, bias.data(), ref.data(), out);
      const auto wf = dequantized(t, w, out, in);
      const auto xr = dequantized_acts(xq);
      // (a) same integers, float summation order only.
      CHECK(compare(y, expected(wf, xr, xr, bias, n, out, in, 1e-5)) == "");
      CHECK(compare(ref, expected(wf, xr, xr, bias, n, out, in, 1e-5)) == "");
      // (b) against the float32 activations: the int8 rounding bound.
      CHECK(compare(y, expected(wf, x, xr, bias, n, out, in, 1e-5)) == "");
    }
  }
}

TEST_CASE("the int8 comparison rejects a wrong weight scale and a wrong activation scale", "[qgemm]") {
  const int64_t n = 2, out = 8, in = 256;
  const auto x = activations(n, in, 3);
  for (GgmlType t : kTypes) {
    INFO(ggml_type_name(id(t)));
    auto w = random_weights(t, out, in, 5);
    const auto wf = dequantized(t, w, out, in);
    QuantizedRows xq;
    quantize_activations(id(t), x.data(), n, in, xq);
    const auto xr = dequantized_acts(xq);
    const Expected want = expected(wf, x, xr, {}, n, out, in, 1e-5);
    // Every block's scale times 1.25 (the f16 scale field: one block alone hid under the int8
    // rounding bound for Q5_1, whose |w| = |d u + m| makes it wide, and row 3's one super-block
    // for Q3_K, whose 3-bit products of random sign nearly cancel in that row).
    const size_t bb = ggml_type_traits(id(t))->type_size;
    for (size_t at = 0; at < w.size(); at += bb) {
      uint8_t* scale = w.data() + at + (t == GgmlType::Q6_K ? 208 : t == GgmlType::Q3_K ? 108 : t == GgmlType::Q2_K ? 80 : 0);
      uint16_t h;
      std::memcpy(&h, scale, 2);
      put_f16(scale, fp16_to_fp32(h) * 1.25f);
    }
    CHECK_FALSE(compare(int8_gemm(t, w, x, nullptr, n, out, in), want) == "");
    // The true weights with activation row 0's block scales 25% off.
    w = random_weights(t, out, in, 5);
    const int64_t nb = in / xq.block;
    for (int64_t b = 0; b < nb; ++b) xq.d[b] *= 1.25f;
    std::vector<float> y(static_cast<size_t>(n * out));
    gemm_packed_int8_q(w.data(), id(t), xq, nullptr, y.data(), out);
    CHECK_FALSE(compare(y, want) == "");
    for (int64_t b = 0; b < nb; ++b) xq.d[b] /= 1.25f;
    gemm_packed_int8_q(w.data(), id(t), xq, nullptr, y.data(), out);
    CHECK(compare(y, want) == "");
  }
}

TEST_CASE("float32-activation packed kernels equal dequantize() then a double matmul", "[qgemm]") {
  const auto x = activations(40, 608, 13);
  const int64_t out = 37;
  for (KernelIsa isa : runnable_isas()) {
    IsaCap cap(isa);
    for (GgmlType t : f32_kernel_types())
      for (int64_t n : {1, 5, 17, 40}) {
        const int64_t in = row_len(t);
        INFO(kernel_isa_name(isa) << " " << ggml_type_name(id(t)) << " n=" << n);
        const auto w = random_weights(t, out, in, 200 + id(t));
        const auto wf = dequantized(t, w, out, in);
        const std::vector<float> xn(x.begin(), x.begin() + n * in);
        CHECK(compare(f32_gemm(t, w, xn, nullptr, n, out, in), expected(wf, xn, xn, {}, n, out, in, 2e-5)) == "");
        // Embedding lookups decode exactly dequantize()'s values.
        const int64_t rows[3] = {0, 36, 5};
        std::vector<float> e(3 * in);
        dequantize_packed_rows(w.data(), id(t), rows, 3, in, e.data());
        for (int k = 0; k < 3; ++k)
          REQUIRE(std::memcmp(e.data() + k * in, wf.data() + rows[k] * in, in * sizeof(float)) == 0);
      }
  }
}

TEST_CASE("row i of an n-row call is bit-identical to a 1-row call, n = 1..32, every kernel and ISA", "[qgemm]") {
  const int64_t out = 37, nmax = 32;
  const auto x = activations(nmax, 608, 17);
  std::vector<float> bias(out, 0.25f);
  Lcg g{9};
  std::vector<float> wf32(static_cast<size_t>(out * 608));
  for (auto& v : wf32) v = 0.05f * g.uniform();
  for (KernelIsa isa : runnable_isas()) {
    IsaCap cap(isa);
    const std::vector<GgmlType> f32_types = f32_kernel_types();
    const int n_f32 = static_cast<int>(f32_types.size());
    for (int kind = 0; kind < kNumTypes + n_f32 + 1; ++kind) {
      const bool int8 = kind < kNumTypes, f32w = kind == kNumTypes + n_f32;
      const GgmlType t = int8 ? kTypes[kind] : f32_types[(kind - kNumTypes) % n_f32];
      const int64_t in = f32w ? 608 : row_len(t);
      const auto w = random_weights(t, out, in, 300 + id(t));
      const auto run = [&](const float* xs, int64_t n) {
        std::vector<float> y(static_cast<size_t>(n * out));
        if (f32w)
          gemm_small_f32(wf32.data(), xs, bias.data(), y.data(), n, out, in);
        else if (int8)
          gemm_packed_int8(w.data(), id(t), xs, bias.data(), y.data(), n, out, in);
        else
          gemm_small_packed(w.data(), id(t), xs, bias.data(), y.data(), n, out, in);
        return y;
      };
      const int mismatched = row_mismatches(run, x, in, out, nmax);
      INFO(kernel_isa_name(isa) << (f32w ? " F32 weights" : int8 ? " int8 " : " f32 ") << ggml_type_name(id(t)));
      CHECK(mismatched == 0);
    }
  }
}

TEST_CASE("int8 and float32 kernels on real GGUF weights stay within the int8 rounding bound", "[qgemm][gguf]") {
  const std::string dir = std::string(SPECLAB_SOURCE_DIR) + "/.cache/models/";
  int files = 0;
  for (const char* name : {"SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}) {
    if (!std::filesystem::exists(dir + name)) {
      // Only the Qwen file may be absent, and only where the pair was left out on purpose.
      if (std::string(name).rfind("qwen", 0) == 0 && testing::qwen_opted_out()) {
        WARN(std::string(name) + ": SPECLAB_QWEN=0, the Qwen pair is not installed; its real-weight cases are skipped");
        continue;
      }
      FAIL(dir + name + " is missing (scripts/setup.sh installs it; SPECLAB_QWEN=0 leaves the Qwen pair out)");
    }
    ++files;
    const GgufFile f = read_gguf(dir + name);
    int per_type[64] = {};
    for (const GgufTensorInfo& info : f.tensors) {
      if (info.dims.size() != 2 || !int8_gemm_supports(info.type) || per_type[info.type] >= 2) continue;
      ++per_type[info.type];
      const GgmlType t = static_cast<GgmlType>(info.type);
      const int64_t in = static_cast<int64_t>(info.dims[0]);
      const int64_t out = std::min<int64_t>(static_cast<int64_t>(info.dims[1]), 192), n = 3;
      const size_t rb = ggml_row_bytes(info.type, in, info.name);
      const uint8_t* src = f.tensor_data(info);
      const std::vector<uint8_t> w(src, src + rb * out);
      const auto wf = dequantized(t, w, out, in);
      const auto x = activations(n, in, 23);
      QuantizedRows xq;
      quantize_activations(info.type, x.data(), n, in, xq);
      const auto xr = dequantized_acts(xq);
      for (KernelIsa isa : runnable_isas()) {
        IsaCap cap(isa);
        INFO(name << " " << info.name << " " << ggml_type_name(info.type) << " " << kernel_isa_name(isa));
        CHECK(compare(int8_gemm(t, w, x, nullptr, n, out, in), expected(wf, x, xr, {}, n, out, in, 1e-5)) == "");
        CHECK(compare(f32_gemm(t, w, x, nullptr, n, out, in), expected(wf, x, x, {}, n, out, in, 2e-5)) == "");
      }
      if (x8_cpu_supported()) {
        INFO(name << " " << info.name << " " << ggml_type_name(info.type) << " repacked");
        CHECK(compare(x8_gemm(t, w, x, nullptr, n, out, in), expected(wf, x, xr, {}, n, out, in, 1e-5)) == "");
      }
    }
  }
  CHECK(files > 0);
}

// ---- the repacked 8-row kernels (qgemm_x8.h: AVX2 and AVX-512 VNNI) -----------------------------

TEST_CASE("repacked kernels equal the scalar reference up to float summation order, on each ISA", "[qgemm][x8]") {
  if (!x8_cpu_supported()) {
    WARN("this CPU has no AVX2: the repacked-kernel cases are skipped");
    return;
  }
  std::vector<float> bias(45);
  for (size_t r = 0; r < bias.size(); ++r) bias[r] = 0.01f * static_cast<float>(r);
  for (KernelIsa isa : x8_isas())
  for (GgmlType t : kTypes)
    for (int64_t out : {8, 45}) {  // 45: a last group of 5 rows (padding)
      for (int64_t n : {1, 5, 11}) {
        IsaCap cap(isa);
        INFO(kernel_isa_name(isa) << " " << ggml_type_name(id(t)) << " out=" << out << " n=" << n);
        const int64_t in = row_len(t);
        const auto x = activations(n, in, 11 + n);
        const auto w = random_weights(t, out, in, 400 + id(t));
        const auto y = x8_gemm(t, w, x, bias.data(), n, out, in);
        QuantizedRows xq;
        quantize_activations(id(t), x.data(), n, in, xq);
        const auto wf = dequantized(t, w, out, in);
        const auto xr = dequantized_acts(xq);
        const std::vector<float> b(bias.begin(), bias.begin() + out);
        CHECK(compare(y, expected(wf, xr, xr, b, n, out, in, 1e-5)) == "");
        CHECK(compare(y, expected(wf, x, xr, b, n, out, in, 1e-5)) == "");
      }
    }
  // Another type, or the ISA capped to scalar, is refused rather than computed wrong.
  std::vector<uint8_t> wx8(static_cast<size_t>(x8_bytes(id(GgmlType::Q4_1), 8, 64)));
  CHECK_THROWS_WITH(x8_bytes(id(GgmlType::Q8_K), 8, 256), Catch::Contains("Q8_K"));
  QuantizedRows xq;
  const auto x = activations(1, 64, 1);
  quantize_activations(id(GgmlType::Q4_1), x.data(), 1, 64, xq);
  float y[8];
  IsaCap cap(KernelIsa::kScalar);
  CHECK_THROWS_WITH(gemm_x8_int8_q(wx8.data(), id(GgmlType::Q4_1), xq, nullptr, y, 8), Catch::Contains("AVX2"));
}

// The largest integers each type can hold, against activations of +-127 in every element: the
// int16 partial sums of the AVX2 kernels are at their bounds (30,480 for 4-bit weights, 31,496 for
// Q5_0, Q5_1 and Q5_K, 32,004 for Q6_K; Q8_0's 255 and IQ4_NL's and IQ4_XS's 241 split into nibbles). A saturated or overflowed sum would be
// off by thousands of weight steps.
TEST_CASE("repacked kernels at the integer extremes equal the scalar reference, on each ISA", "[qgemm][x8]") {
  if (!x8_cpu_supported()) {
    WARN("this CPU has no AVX2: the repacked-kernel extremes are skipped");
    return;
  }
  const int64_t out = 16, n = 2;
  for (KernelIsa isa : x8_isas())
    for (GgmlType t : kTypes) {
      IsaCap cap(isa);
      INFO(kernel_isa_name(isa) << " " << ggml_type_name(id(t)));
      const int64_t in = row_len(t);
      auto w = random_weights(t, out, in, 77);
      const size_t bb = ggml_type_traits(id(t))->type_size;
      for (size_t at = 0; at < w.size(); at += bb) {
        uint8_t* blk = w.data() + at;
        switch (t) {
          case GgmlType::Q4_0: std::fill(blk + 2, blk + 18, 0xFF); break;
          case GgmlType::Q4_1: std::fill(blk + 4, blk + 20, 0xFF); break;
          case GgmlType::Q5_0: std::fill(blk + 2, blk + 22, 0xFF); break;
          case GgmlType::Q5_1: std::fill(blk + 4, blk + 24, 0xFF); break;
          case GgmlType::Q8_0: std::fill(blk + 2, blk + 34, 0x7F); break;  // w = 127: u = 255
          case GgmlType::IQ4_NL: std::fill(blk + 2, blk + 18, 0xFF); break;  // w = 113: u = 241
          case GgmlType::Q4_K: std::fill(blk + 4, blk + 144, 0xFF); break;  // scales and mins 63 too
          case GgmlType::Q5_K: std::fill(blk + 4, blk + 176, 0xFF); break;  // u = 31, scales and mins 63
          case GgmlType::Q2_K: std::fill(blk, blk + 80, 0xFF); break;       // u = 3, scales and mins 15
          case GgmlType::Q3_K:  // u = 7 everywhere, scales -32 (the low bits 0, the top two 0)
            std::fill(blk, blk + 96, 0xFF);
            std::fill(blk + 96, blk + 108, 0x00);
            break;
          case GgmlType::IQ4_XS:
            // Sub-blocks 0-3: index 15 (w = 113: u = 241) under scale -32 (ls = 0); sub-blocks
            // 4-7: index 0 (w = -127, the row-major kernels' |w| bound) under scale 31 (ls = 63).
            std::fill(blk + 2, blk + 8, 0x00);
            blk[3] = blk[6] = blk[7] = 0xFF;  // scales_h bits 8-15, scales_l[2..3]
            std::fill(blk + 8, blk + 72, 0xFF);
            std::fill(blk + 72, blk + 136, 0x00);
            break;
          default:  // Q6_K: u = 63 everywhere, scales -128
            std::fill(blk, blk + 192, 0xFF);
            std::fill(blk + 192, blk + 208, 0x80);
            break;
        }
      }
      std::vector<float> x(static_cast<size_t>(n * in), 1.0f);  // row 0: all q = 127
      std::fill(x.begin() + in, x.end(), -1.0f);                 // row 1: all q = -127
      QuantizedRows xq;
      quantize_activations(id(t), x.data(), n, in, xq);
      const auto wf = dequantized(t, w, out, in);
      const auto xr = dequantized_acts(xq);
      const auto y = x8_gemm(t, w, x, nullptr, n, out, in);
      CHECK(compare(y, expected(wf, xr, xr, {}, n, out, in, 1e-5)) == "");
    }
}

// The ISAs' kernels compute the same integers (AVX2 sums vpmaddubsw pairs where vpdpbusd sums
// quads; no sum can overflow or saturate) and share every float step, so their outputs are equal
// bit for bit. Runs where this CPU has AVX-512 VNNI; an AVX2-only CPU has one ISA to compare.
TEST_CASE("repacked kernels: AVX2 and AVX-512 VNNI outputs are bit-identical", "[qgemm][x8]") {
  if (best_kernel_isa() != KernelIsa::kAvx512Vnni) {
    WARN("this CPU has no AVX-512 VNNI: only the AVX2 repacked kernels run here, nothing to compare");
    return;
  }
  const int64_t out = 45;
  std::vector<float> bias(out, 0.5f);
  // n = 2..6 covers the K-quants' 256-bit VNNI kernels on a CPU that splits 512-bit instructions
  // (x8_zmm_for; AMD Zen 4), the 512-bit ones elsewhere.
  for (GgmlType t : kTypes)
    for (int64_t n : {1, 2, 3, 5, 7, 17}) {
      INFO(ggml_type_name(id(t)) << " n=" << n);
      const int64_t in = row_len(t);
      // Extreme activations (every block holds +-127) and random ones.
      auto x = activations(n, in, 29 + n);
      for (int64_t i = 0; i < n * in; i += 7) x[static_cast<size_t>(i)] *= 40.f;
      const auto w = random_weights(t, out, in, 700 + id(t));
      std::vector<float> y2, y3;
      {
        IsaCap cap(KernelIsa::kAvx2);
        y2 = x8_gemm(t, w, x, bias.data(), n, out, in);
      }
      y3 = x8_gemm(t, w, x, bias.data(), n, out, in);
      CHECK(std::memcmp(y2.data(), y3.data(), y2.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("the repacked-kernel comparison rejects a wrong weight scale, a wrong min and a swapped group", "[qgemm][x8]") {
  if (!x8_cpu_supported()) {
    WARN("this CPU has no AVX2: the repacked-kernel negative controls are skipped");
    return;
  }
  const int64_t n = 2, out = 16;
  int mins_corrupted = 0;
  for (KernelIsa isa : x8_isas())
  for (GgmlType t : kTypes) {
    IsaCap cap(isa);
    INFO(kernel_isa_name(isa) << " " << ggml_type_name(id(t)));
    const int64_t in = row_len(t);
    const auto x = activations(n, in, 3);
    const auto w = random_weights(t, out, in, 5);
    const auto wf = dequantized(t, w, out, in);
    QuantizedRows xq;
    quantize_activations(id(t), x.data(), n, in, xq);
    const auto xr = dequantized_acts(xq);
    // The tight check (same integers, float order only): x_used == x, so tol = 1e-5 |terms|.
    const Expected want = expected(wf, xr, xr, {}, n, out, in, 1e-5);
    std::vector<uint8_t> wx8(static_cast<size_t>(x8_bytes(id(t), out, in)));
    repack_x8(w.data(), id(t), out, in, wx8.data());
    std::vector<float> y(static_cast<size_t>(n * out));
    gemm_x8_int8_q(wx8.data(), id(t), xq, nullptr, y.data(), out);
    REQUIRE(compare(y, want) == "");
    // Row 3's d (in every block of group 0), times 1.25.
    auto bad = wx8;
    const int64_t nb = in / packed_block_elems(t), block_bytes = x8_bytes(id(t), 8, in) / nb;
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t h;
      std::memcpy(&h, bad.data() + b * block_bytes + 6, 2);
      put_f16(bad.data() + b * block_bytes + 6, fp16_to_fp32(h) * 1.25f);
    }
    gemm_x8_int8_q(bad.data(), id(t), xq, nullptr, y.data(), out);
    CHECK_FALSE(compare(y, want) == "");
    // Row 3's min (Q4_1's and Q5_1's m, Q2_K's, Q4_K's and Q5_K's dmin: float16 at byte 16 + 2 r
    // of each block, qgemm_x8.cpp's layout table), times 1.25 and shifted, in every block of group 0.
    if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K ||
        t == GgmlType::Q5_K) {
      bad = wx8;
      for (int64_t b = 0; b < nb; ++b) {
        uint16_t h;
        std::memcpy(&h, bad.data() + b * block_bytes + 22, 2);
        put_f16(bad.data() + b * block_bytes + 22, fp16_to_fp32(h) * 1.25f - 0.25f);
      }
      gemm_x8_int8_q(bad.data(), id(t), xq, nullptr, y.data(), out);
      CHECK_FALSE(compare(y, want) == "");
      ++mins_corrupted;
    }
    // The two groups of 8 rows swapped.
    bad = wx8;
    std::rotate(bad.begin(), bad.begin() + static_cast<long>(bad.size() / 2), bad.end());
    gemm_x8_int8_q(bad.data(), id(t), xq, nullptr, y.data(), out);
    CHECK_FALSE(compare(y, want) == "");
  }
  CHECK(mins_corrupted > 0);  // kTypes holds Q4_1, Q5_1, Q2_K, Q4_K and Q5_K
}

TEST_CASE("repacked kernels: row i of an n-row call equals a 1-row call, n = 1..32, and 1 vs 2 threads, each ISA", "[qgemm][x8]") {
  if (!x8_cpu_supported()) {
    WARN("this CPU has no AVX2: the repacked-kernel row identity is skipped");
    return;
  }
  const int64_t out = 45, nmax = 32;
  std::vector<float> bias(out, 0.25f);
  for (KernelIsa isa : x8_isas())
  for (GgmlType t : kTypes) {
    IsaCap cap(isa);
    const int64_t in = row_len(t);
    const auto x = activations(nmax, in, 17);
    const auto w = random_weights(t, out, in, 300 + id(t));
    std::vector<uint8_t> wx8(static_cast<size_t>(x8_bytes(id(t), out, in)));
    repack_x8(w.data(), id(t), out, in, wx8.data());
    const auto run = [&](const float* xs, int64_t n) {
      std::vector<float> y(static_cast<size_t>(n * out));
      gemm_x8_int8(wx8.data(), id(t), xs, bias.data(), y.data(), n, out, in);
      return y;
    };
    const int mismatched = row_mismatches(run, x, in, out, nmax);
    const int threads = compute_threads();
    set_compute_threads(1);
    const auto one = run(x.data(), nmax);
    set_compute_threads(2);
    const auto two = run(x.data(), nmax);
    set_compute_threads(threads);
    INFO(kernel_isa_name(isa) << " " << ggml_type_name(id(t)));
    CHECK(mismatched == 0);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}

// Zen 4 detection (cpuid) against what the kernel reports in /proc/cpuinfo, and the kernel
// choice it drives: the K-quants on 256 bits at 2 to 6 rows there, 512 bits elsewhere.
TEST_CASE("x8_zmm_for: a CPU that splits 512-bit instructions is read as /proc/cpuinfo describes it", "[qgemm][x8]") {
  std::ifstream in("/proc/cpuinfo");
  REQUIRE(in.good());
  std::string line, vendor, family;
  bool avx512f = false;
  while (std::getline(in, line)) {
    const auto value = [&] { return line.substr(line.find(':') + 2); };
    if (vendor.empty() && line.rfind("vendor_id", 0) == 0) vendor = value();
    if (family.empty() && line.rfind("cpu family", 0) == 0) family = value();
    if (line.rfind("flags", 0) == 0) avx512f = avx512f || (" " + value() + " ").find(" avx512f ") != std::string::npos;
  }
  const bool zen4 = vendor == "AuthenticAMD" && family == "25" && avx512f;
  INFO("vendor " << vendor << ", family " << family << ", avx512f " << avx512f);
  CHECK(cpu_splits_512_bit_ops() == zen4);
  for (int64_t n : {1, 2, 6, 7, 17}) {
    INFO("n=" << n);
    CHECK(x8_zmm_for(id(GgmlType::Q4_1), n) == x8_zmm_enabled());
    CHECK(x8_zmm_for(id(GgmlType::Q8_0), n) == x8_zmm_enabled());
    const char* env = std::getenv("SPECLAB_X8_ZMM");
    const bool narrow = zen4 && n >= 2 && n <= 6 && !(env != nullptr && std::string(env) == "1");
    CHECK(x8_zmm_for(id(GgmlType::Q4_K), n) == (x8_zmm_enabled() && !narrow));
    CHECK(x8_zmm_for(id(GgmlType::Q5_K), n) == (x8_zmm_enabled() && !narrow));
    CHECK(x8_zmm_for(id(GgmlType::Q6_K), n) == (x8_zmm_enabled() && !narrow));
    CHECK_FALSE(x8_zmm_for(id(GgmlType::Q2_K), n));  // no 512-bit kernels
    CHECK_FALSE(x8_zmm_for(id(GgmlType::Q3_K), n));
    CHECK_FALSE(x8_zmm_for(id(GgmlType::IQ4_XS), n));
  }
}
