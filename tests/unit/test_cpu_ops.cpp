// cpu::silu_mul (models/llama/cpu_ops.h), the SwiGLU step of the CPU backend, on every kernel ISA
// this CPU can run: against a float64 reference of g / (1 + exp(-g)) * u (within a few float32
// ulp, also at the clamp range's edges and for infinities), and each element's independence of
// where the caller's range starts and ends (the backend cuts rows over threads at any element).
// (Infinite gates are not covered: std::exp gives NaN for silu(-inf), the AVX2 path -inf.)
// A negative control shows the comparison catches a wrong activation (sigmoid instead of silu).
// cpu::rms_norm_rows against a float64 reference, each row alone and in place as among n rows.
// cpu::measure_arith_peak (arith_peak.h) and PassRoof (experiments/app/pass_roof.h), the
// arithmetic roof `speclab bench` prints, by hand-derived figures.
// Torch-free.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "experiments/app/pass_roof.h"
#include "models/llama/arith_peak.h"
#include "models/llama/cpu_ops.h"
#include "models/llama/gemv.h"
#include "tests/support/kernel_isas.h"

using namespace speclab;

namespace {

using testing::IsaCapGuard;
using testing::runnable_isas;

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

// Largest |got - want| in units of float32 spacing at the reference value (ulp), over elements
// whose reference is at least 1e-30 in magnitude; below that (silu(g) for g < -65 and tiny g) the
// result must be within 1e-36 absolutely (the AVX2 exponential clamps its argument at 88.38, so
// silu(-100) comes out as -4e-37 instead of -4e-42).
struct Worst {
  double ulp = 0.0;        // over references >= 1e-30 in magnitude
  double abs_small = 0.0;  // |got - want| over the others
};
Worst worst_error(const std::vector<float>& gate, const std::vector<float>& up, const std::vector<float>& got,
                  double (*f)(double)) {
  Worst w;
  for (size_t i = 0; i < gate.size(); ++i) {
    const double want = f(gate[i]) * up[i];
    if (std::isinf(want) || std::isnan(want)) continue;
    const float wf = static_cast<float>(want);
    if (std::fabs(want) < 1e-30) {
      w.abs_small = std::max(w.abs_small, std::fabs(got[i] - want));
      continue;
    }
    const double ulp = std::nextafter(std::fabs(wf), std::numeric_limits<float>::infinity()) - std::fabs(wf);
    w.ulp = std::max(w.ulp, std::fabs(got[i] - want) / ulp);
  }
  return w;
}

}  // namespace

TEST_CASE("silu_mul equals a float64 reference within a few ulp, on every ISA", "[cpu_ops][silu]") {
  IsaCapGuard guard;
  std::mt19937 rng(11);
  std::vector<float> gate, up;
  for (float g : {0.f, -0.f, 1e-30f, -1e-30f, 0.5f, -0.5f, 20.f, -20.f, 87.f, -87.f, 88.f, -88.f, 100.f, -100.f})
    for (float u : {1.f, -3.f}) {
      gate.push_back(g);
      up.push_back(u);
    }
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int i = 0; i < 5003; ++i) {  // not a multiple of 8: the tail runs too
    gate.push_back(normal(rng) * (i % 3 == 0 ? 8.f : 2.f));
    up.push_back(normal(rng));
  }
  const int64_t n = static_cast<int64_t>(gate.size());
  for (KernelIsa isa : runnable_isas()) {
    set_kernel_isa_cap(isa);
    INFO("kernel ISA " << kernel_isa_name(isa));
    std::vector<float> out(gate.size());
    cpu::silu_mul(gate.data(), up.data(), out.data(), n);
    const Worst w = worst_error(gate, up, out, silu_ref);
    CHECK(w.ulp < 8.0);
    CHECK(w.abs_small < 1e-35);
    // Negative control: the same comparison against sigmoid(g) * u fails.
    CHECK(worst_error(gate, up, out, [](double g) { return 1.0 / (1.0 + std::exp(-g)); }).ulp > 1e3);
  }
}

TEST_CASE("silu_mul: an element's result does not depend on where the range starts or ends", "[cpu_ops][silu][bitwise]") {
  IsaCapGuard guard;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 3.f);
  const int64_t n = 100;
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = normal(rng);
    up[i] = normal(rng);
  }
  for (KernelIsa isa : runnable_isas()) {
    set_kernel_isa_cap(isa);
    INFO("kernel ISA " << kernel_isa_name(isa));
    std::vector<float> whole(n);
    cpu::silu_mul(gate.data(), up.data(), whole.data(), n);
    for (int64_t a = 0; a < 20; ++a)
      for (int64_t b = a + 1; b <= n; b += 7) {  // every tail length 1..7 among the cuts
        std::vector<float> part(static_cast<size_t>(b - a));
        cpu::silu_mul(gate.data() + a, up.data() + a, part.data(), b - a);
        REQUIRE(std::memcmp(part.data(), whole.data() + a, part.size() * sizeof(float)) == 0);
      }
  }
}

TEST_CASE("rms_norm_rows equals a float64 reference, alone and among rows, on every ISA", "[cpu_ops][rms_norm]") {
  IsaCapGuard guard;
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float eps = 1e-5f;
  for (int64_t d : {3, 17, 64, 576, 1536, 1539}) {  // tails of every kind, and the models' widths
    const int64_t n = 5;
    std::vector<float> x(static_cast<size_t>(n * d)), w(static_cast<size_t>(d));
    for (int64_t i = 0; i < n * d; ++i) x[static_cast<size_t>(i)] = normal(rng) * (i % 7 == 0 ? 30.f : 1.f);
    for (float& v : w) v = 1.f + 0.1f * normal(rng);
    for (KernelIsa isa : runnable_isas()) {
      set_kernel_isa_cap(isa);
      INFO("kernel ISA " << kernel_isa_name(isa) << ", d " << d);
      std::vector<float> y(x.size());
      cpu::rms_norm_rows(x.data(), w.data(), y.data(), n, d, eps);
      double worst = 0.0, worst_wrong = 0.0;
      for (int64_t r = 0; r < n; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[static_cast<size_t>(r * d + i)]) * x[static_cast<size_t>(r * d + i)];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
        const double inv_wrong = 1.0 / std::sqrt(ss / static_cast<double>(d - 1) + eps);  // a wrong mean (d - 1)
        for (int64_t i = 0; i < d; ++i) {
          const size_t k = static_cast<size_t>(r * d + i);
          const double want = x[k] * inv * w[static_cast<size_t>(i)];
          const double scale = std::max(1e-30, std::abs(want));
          worst = std::max(worst, std::abs(y[k] - want) / scale);
          worst_wrong = std::max(worst_wrong, std::abs(y[k] - x[k] * inv_wrong * w[static_cast<size_t>(i)]) / scale);
        }
        // A row alone gives the bits it gives among n rows; in place (y aliasing x) too.
        std::vector<float> alone(static_cast<size_t>(d));
        cpu::rms_norm_rows(x.data() + r * d, w.data(), alone.data(), 1, d, eps);
        REQUIRE(std::memcmp(alone.data(), y.data() + r * d, alone.size() * sizeof(float)) == 0);
        std::vector<float> in_place(x.begin() + r * d, x.begin() + (r + 1) * d);
        cpu::rms_norm_rows(in_place.data(), w.data(), in_place.data(), 1, d, eps);
        REQUIRE(std::memcmp(in_place.data(), alone.data(), alone.size() * sizeof(float)) == 0);
      }
      CHECK(worst < 4e-7);  // a few float32 rounding steps
      // Negative control: the same comparison against a mean over d - 1 fails (its error is about
      // 1 / (2 d), 3e-4 at d = 1539, a thousand times the bound).
      CHECK(worst_wrong > 1e-4);
    }
  }
}

TEST_CASE("PassRoof: max of the reads and n rows of MACs at the peak rates, by hand", "[cpu_ops][roof]") {
  PassRoof r;
  r.bytes = 100e6;  // 2 ms at 50 GB/s
  r.bandwidth = 50e9;
  r.int8_macs_per_row = 100e6;  // 0.5 ms at 200 G MAC/s
  r.int8_macs_per_s = 200e9;
  r.f32_macs_per_row = 20e6;  // 0.5 ms at 40 G MAC/s
  r.f32_macs_per_s = 40e9;
  REQUIRE(r.valid());
  CHECK(r.memory_seconds() == Approx(2e-3));
  CHECK(r.row_seconds() == Approx(1e-3));
  CHECK(r.seconds(1) == Approx(2e-3));  // reads bound a pass of 1 or 2 rows
  CHECK(r.seconds(2) == Approx(2e-3));
  CHECK(r.seconds(3) == Approx(3e-3));  // arithmetic from 3 rows on
  CHECK(r.seconds(17) == Approx(17e-3));
  // A rate that the row's MACs need is unknown: no bound. One they do not need may be.
  PassRoof no_int8 = r;
  no_int8.int8_macs_per_s = 0;
  CHECK_FALSE(no_int8.valid());
  no_int8.int8_macs_per_row = 0;
  CHECK(no_int8.valid());
  CHECK(no_int8.row_seconds() == Approx(0.5e-3));
  PassRoof no_bandwidth = r;
  no_bandwidth.bandwidth = 0;
  CHECK_FALSE(no_bandwidth.valid());
  // SmolLM2 at context 512: 30 layers x 9 heads x 64 x 512 keys x 2 (q.k and p.v).
  CHECK(attention_macs_per_row(30, 9, 64, 512) == 17694720.0);
}

TEST_CASE("measure_arith_peak: the instructions of each ISA, at rates a core can reach", "[cpu_ops][roof]") {
  IsaCapGuard guard;
  for (KernelIsa isa : runnable_isas()) {
    set_kernel_isa_cap(isa);
    INFO("ISA " << kernel_isa_name(isa));
    const cpu::ArithPeak p = cpu::measure_arith_peak(isa);
    CHECK(p.threads >= 1);
    if (isa == KernelIsa::kScalar) {
      CHECK(p.f32_macs_per_s == 0.0);
      CHECK(p.int8_macs_per_s == 0.0);
      continue;
    }
    CHECK(p.f32_macs_per_s > 0.0);
    CHECK(p.int8_macs_per_s > 0.0);
    CHECK(p.f32_instruction.rfind("vfmadd231ps ", 0) == 0);
    CHECK((isa == KernelIsa::kAvx2 ? p.f32_instruction == "vfmadd231ps ymm" : true));
    CHECK((isa == KernelIsa::kAvx512Vnni ? p.int8_instruction.rfind("vpdpbusd ", 0) == 0
                                         : p.int8_instruction == "vpmaddubsw ymm"));
    // A loop the compiler dropped would time at about nothing: rates past two 512-bit units at
    // 6 GHz per thread (float32: 2 x 16 MACs a cycle; int8: 2 x 64) are not a measurement.
    CHECK(p.f32_macs_per_s < p.threads * 2 * 16 * 6e9);
    CHECK(p.int8_macs_per_s < p.threads * 2 * 64 * 6e9);
  }
}
