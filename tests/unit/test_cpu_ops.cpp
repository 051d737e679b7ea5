// cpu::silu_mul (models/llama/cpu_ops.h), the SwiGLU step of the CPU backend, on every kernel ISA
// this CPU can run: against a float64 reference of g / (1 + exp(-g)) * u (within a few float32
// ulp, also at the clamp range's edges and for infinities), and each element's independence of
// where the caller's range starts and ends (the backend cuts rows over threads at any element).
// (Infinite gates are not covered: std::exp gives NaN for silu(-inf), the AVX2 path -inf.)
// A negative control shows the comparison catches a wrong activation (sigmoid instead of silu).
// Torch-free.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

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
