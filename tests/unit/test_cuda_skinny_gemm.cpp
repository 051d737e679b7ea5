// The CUDA skinny matmul (framework/cuda/skinny_gemm.h): exact against a float64 reference on
// inputs whose float32 sums are exact, batch-invariant (a row's bits among n rows equal the row
// computed alone; padding rows copy the last real row), with negative controls. The argument
// checks need no device and always run; the kernel cases run where a GPU is present (the lent
// H100/H200 machine) and are skipped with a warning elsewhere.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "framework/cuda/greedy_verify.h"
#include "framework/cuda/skinny_gemm.h"
#include "tests/support/cuda_test_data.h"
#include "tests/support/required_resources.h"

using namespace speclab;
using namespace speclab::test;
using cuda::DType;

namespace {

// Values j/16 with |j| <= 7: exact in f16 and bf16, and any dot product of up to 2^14 of them,
// plus a bias of the same kind, is a multiple of 1/256 below 2^24/256: exact in float32 whatever
// the summation order. So the kernel's output must be the exact sum rounded once to the dtype.
std::vector<float> small_values(size_t count, std::mt19937& gen) {
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(std::uniform_int_distribution<int>(-7, 7)(gen)) / 16.f;
  return v;
}

// x rounded to dt (round to nearest even), as the kernel's store does.
float round_to(DType dt, double x) {
  const auto f = static_cast<float>(x);  // exact: x is a float32-exact sum
  if (dt == DType::kBF16) {
    uint32_t b = f32_bits(f);
    b += 0x7fffu + ((b >> 16) & 1u);
    b &= 0xffff0000u;
    float r;
    std::memcpy(&r, &b, 4);
    return r;
  }
  // f16: round the significand to 11 bits (the sums here are normal or zero in f16).
  if (f == 0.f) return 0.f;
  int e;
  const double m = std::frexp(static_cast<double>(f), &e);  // f = m 2^e, 0.5 <= |m| < 1
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11));
}

struct Problem {
  DType dt;
  int64_t out, in, rows, n;
  bool with_bias;
};

// Runs the kernel; returns y as raw [rows, out] bytes in dt.
std::vector<uint8_t> run(const Problem& p, const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& b) {
  const size_t es = elem_size(p.dt);
  DeviceBuffer dx(x.size() * es), dw(w.size() * es), db(b.size() * es), dy(static_cast<size_t>(p.rows * p.out) * es);
  dx.upload(encode_all(p.dt, x).data(), x.size() * es);
  dw.upload(encode_all(p.dt, w).data(), w.size() * es);
  if (p.with_bias) db.upload(encode_all(p.dt, b).data(), b.size() * es);
  cuda::skinny_gemm(p.dt, dx.get(), dw.get(), p.with_bias ? db.get() : nullptr, dy.get(), p.rows, p.n, p.in, p.out,
                    nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<uint8_t> y(static_cast<size_t>(p.rows * p.out) * es);
  dy.download(y.data(), y.size());
  return y;
}

// The exact product, rounded to dt: [rows, out] floats; rows >= n repeat row n - 1.
std::vector<float> reference(const Problem& p, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b) {
  std::vector<float> y(static_cast<size_t>(p.rows * p.out));
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t src = r < p.n ? r : p.n - 1;
    for (int64_t o = 0; o < p.out; ++o) {
      double s = p.with_bias ? b[static_cast<size_t>(o)] : 0.0;
      for (int64_t k = 0; k < p.in; ++k)
        s += static_cast<double>(x[static_cast<size_t>(src * p.in + k)]) * w[static_cast<size_t>(o * p.in + k)];
      y[static_cast<size_t>(r * p.out + o)] = round_to(p.dt, s);
    }
  }
  return y;
}

// Elements of y that differ from the reference.
int64_t mismatches(const Problem& p, const std::vector<uint8_t>& y, const std::vector<float>& ref) {
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float v = decode(p.dt, y.data() + i * elem_size(p.dt));
    if (!(v == ref[i])) ++bad;
  }
  return bad;
}

}  // namespace

TEST_CASE("CUDA skinny GEMM validates its arguments before touching the device", "[cuda]") {
  alignas(16) uint16_t buf[64] = {};
  const auto rejects = [&](DType dt, const void* x, int64_t rows, int64_t n, int64_t in, int64_t out) {
    return throws_bad_input([&] { cuda::skinny_gemm(dt, x, buf, nullptr, buf, rows, n, in, out, nullptr); });
  };
  CHECK(rejects(DType::kF32, buf, 1, 1, 32, 4));                                     // not a 16-bit dtype
  CHECK(rejects(DType::kBF16, buf, 1, 1, 48, 4));                                    // in % 32 != 0
  CHECK(rejects(DType::kBF16, buf, 1, 1, 0, 4));                                     // in = 0
  CHECK(rejects(DType::kF16, reinterpret_cast<const char*>(buf) + 2, 1, 1, 32, 4));  // misaligned x
  CHECK(rejects(DType::kBF16, buf, 4, 5, 32, 4));                                    // n > rows
  CHECK(rejects(DType::kBF16, buf, 17, 1, 32, 4));                                   // rows > 16
  CHECK(rejects(DType::kBF16, buf, 1, 0, 32, 4));                                    // n = 0
  CHECK(rejects(DType::kBF16, buf, 1, 1, 32, 0));                                    // out = 0
  CHECK(rejects(DType::kBF16, nullptr, 1, 1, 32, 4));
  CHECK(cuda::skinny_gemm_supported(DType::kBF16, buf, buf, 576));
  CHECK_FALSE(cuda::skinny_gemm_supported(DType::kF32, buf, buf, 576));
  CHECK_FALSE(cuda::skinny_gemm_supported(DType::kF16, buf, reinterpret_cast<const char*>(buf) + 8, 576));
  CHECK_FALSE(cuda::skinny_gemm_supported(DType::kBF16, buf, buf, 1544));  // a multiple of 8, not of 32
}

TEST_CASE("CUDA skinny GEMM equals the exact product rounded once, and is batch-invariant", "[cuda]") {
  if (testing::skip_without_cuda(cuda::device_available() && cuda::skinny_gemm_device_ok(),
                                 "no CUDA device of compute capability 8.0 or later: skinny GEMM kernel cases"))
    return;
  std::mt19937 gen(5);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    // (out, in): a tail tile (77), SmolLM2's 576, a 7B-like 4096 input, the smallest in (32), one
    // output.
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{77, 576}, {260, 4096}, {33, 32}, {1, 1568}};
    for (const auto& [out, in] : shapes) {
      for (bool with_bias : {false, true}) {
        const std::vector<float> w = small_values(static_cast<size_t>(out * in), gen);
        const std::vector<float> b = small_values(static_cast<size_t>(out), gen);
        const std::vector<float> x = small_values(static_cast<size_t>(16 * in), gen);
        for (int64_t n : {1, 2, 3, 5, 8, 9, 16}) {
          for (int64_t rows : {n, int64_t{16}}) {
            const Problem p{dt, out, in, rows, n, with_bias};
            INFO(name(dt) << " out=" << out << " in=" << in << " n=" << n << " rows=" << rows
                          << (with_bias ? " bias" : ""));
            CHECK(mismatches(p, run(p, x, w, b), reference(p, x, w, b)) == 0);
          }
        }
      }
    }
  }

  // Batch invariance on general values (k/128, |k| <= 255), whose float32 sums do round: every
  // row of an n-row call has the bits of the same row computed alone (n = 1), and padding rows
  // have the last real row's bits.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const int64_t out = 300, in = 2048;
    const std::vector<float> w = test_values(static_cast<size_t>(out * in), gen);
    const std::vector<float> b = test_values(static_cast<size_t>(out), gen);
    const std::vector<float> x = test_values(static_cast<size_t>(16 * in), gen);
    const size_t es = elem_size(dt), row_bytes = static_cast<size_t>(out) * es;
    for (int64_t n : {3, 5, 9, 16}) {
      INFO(name(dt) << " n=" << n);
      const Problem p{dt, out, in, 16, n, true};
      const std::vector<uint8_t> y = run(p, x, w, b);
      int64_t differing = 0;
      for (int64_t r = 0; r < n; ++r) {
        const std::vector<float> xr(x.begin() + r * in, x.begin() + (r + 1) * in);
        const std::vector<uint8_t> alone = run(Problem{dt, out, in, 1, 1, true}, xr, w, b);
        if (std::memcmp(alone.data(), y.data() + static_cast<size_t>(r) * row_bytes, row_bytes) != 0) ++differing;
      }
      CHECK(differing == 0);
      for (int64_t r = n; r < 16; ++r)
        CHECK(std::memcmp(y.data() + static_cast<size_t>(n - 1) * row_bytes, y.data() + static_cast<size_t>(r) * row_bytes,
                          row_bytes) == 0);
    }
  }
}

TEST_CASE("CUDA skinny GEMM negative controls: the comparisons can fail", "[cuda]") {
  if (testing::skip_without_cuda(cuda::device_available() && cuda::skinny_gemm_device_ok(),
                                 "no CUDA device of compute capability 8.0 or later: skinny GEMM kernel cases"))
    return;
  std::mt19937 gen(17);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    INFO(name(dt));
    const Problem p{dt, 77, 576, 16, 5, true};
    std::vector<float> w = small_values(static_cast<size_t>(p.out * p.in), gen);
    const std::vector<float> b = small_values(static_cast<size_t>(p.out), gen);
    std::vector<float> x = small_values(static_cast<size_t>(16 * p.in), gen);
    for (int64_t r = 0; r < 16; ++r) x[static_cast<size_t>(r * p.in + 300)] = 0.5f;
    const std::vector<float> before = reference(p, x, w, b);
    REQUIRE(mismatches(p, run(p, x, w, b), before) == 0);
    // One weight of output 40 changes by 2 and x[r][300] = 0.5 in every row, so output 40 moves by
    // 1 (more than an ulp here) in every row: the old reference mismatches in that column alone.
    w[static_cast<size_t>(40 * p.in + 300)] += 2.f;
    const std::vector<uint8_t> changed = run(p, x, w, b);
    CHECK(mismatches(p, changed, before) == 16);
    CHECK(mismatches(p, changed, reference(p, x, w, b)) == 0);
    // A reference that drops the bias is rejected.
    Problem no_bias = p;
    no_bias.with_bias = false;
    CHECK(mismatches(p, changed, reference(no_bias, x, w, b)) > 0);
  }
}
