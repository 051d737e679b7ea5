// Model building blocks checked against libtorch's own reference ops.
#include "tests/torch_catch.h"

#include "framework/core/blas_core.h"
#include "models/llama/gemv.h"
#include "models/loaders/dequant.h"
#include "tests/support/kernel_isas.h"

using namespace speclab;

TEST_CASE("gemm_small_f32 equals at::linear for decode and verification batch shapes", "[model][kernel]") {
  at::manual_seed(3);
  for (int64_t in : {1, 7, 8, 64, 173, 576}) {
    for (int64_t out : {1, 3, 4, 5, 17, 192}) {
      for (int64_t n : {1, 2, 5, 9, 17, 20, 64}) {
        at::Tensor w = at::randn({out, in});
        at::Tensor x = at::randn({n, in});
        at::Tensor b = at::randn({out});
        at::Tensor y = at::empty({n, out});
        gemm_small_f32(w.data_ptr<float>(), x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n, out, in);
        at::Tensor ref = at::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble)).to(at::kFloat);
        // float32 accumulation over `in` terms of magnitude ~1: error ~ sqrt(in) * eps * |terms|.
        const double tol = 1e-5 * std::sqrt(static_cast<double>(in)) * 4;
        INFO("n " << n << " out " << out << " in " << in);
        CHECK((y - ref).abs().max().item<double>() < tol);
        at::Tensor y2 = at::empty({n, out});
        gemm_small_f32(w.data_ptr<float>(), x.data_ptr<float>(), nullptr, y2.data_ptr<float>(), n, out, in);
        CHECK((y2 + b - ref).abs().max().item<double>() < tol);
      }
    }
  }
}

TEST_CASE("gemm_small_f32 detects a wrong row: the comparison can fail", "[model][kernel]") {
  at::Tensor w = at::randn({8, 16});
  at::Tensor x = at::randn({2, 16});
  at::Tensor y = at::empty({2, 8});
  gemm_small_f32(w.data_ptr<float>(), x.data_ptr<float>(), nullptr, y.data_ptr<float>(), 2, 8, 16);
  at::Tensor shuffled = at::linear(x, w.flip(0));
  CHECK((y - shuffled).abs().max().item<double>() > 1e-3);
}

// The packed kernels decode blocks with their own SIMD code: compare with the loader's scalar
// dequantize() (itself checked against the `gguf` Python package in test_dequant) followed by a
// float64 linear. Inputs are quantized by quantize() (ggml's reference rounding).
namespace {
using testing::IsaCapGuard;
using testing::runnable_isas;
}  // namespace

TEST_CASE("gemm_small_packed equals dequantize() then linear for Q4_0, Q4_1, Q8_0", "[model][kernel]") {
  at::manual_seed(5);
  IsaCapGuard guard;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  REQUIRE(kernel_isa() == isa);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    for (int64_t in : {32, 64, 576, 1536}) {
      for (int64_t out : {1, 7, 8, 9, 64, 200}) {
        at::Tensor w = at::randn({out, in});
        const std::vector<uint8_t> packed = quantize(type, w.data_ptr<float>(), static_cast<size_t>(w.numel()), "w");
        at::Tensor deq = at::empty({out, in});
        dequantize(static_cast<uint32_t>(type), packed.data(), packed.size(), deq.data_ptr<float>(),
                   static_cast<size_t>(deq.numel()), "w");
        for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 40}) {  // fused (<= 16) and tile paths
          at::Tensor x = at::randn({n, in});
          at::Tensor b = at::randn({out});
          at::Tensor y = at::empty({n, out});
          gemm_small_packed(packed.data(), static_cast<uint32_t>(type), x.data_ptr<float>(), b.data_ptr<float>(),
                            y.data_ptr<float>(), n, out, in);
          at::Tensor ref = at::linear(x.to(at::kDouble), deq.to(at::kDouble), b.to(at::kDouble)).to(at::kFloat);
          const double tol = 1e-5 * std::sqrt(static_cast<double>(in)) * 4;
          INFO(ggml_type_name(static_cast<uint32_t>(type)) << " n " << n << " out " << out << " in " << in);
          CHECK((y - ref).abs().max().item<double>() < tol);
        }
        // Embedding rows decode exactly.
        std::vector<int64_t> rows = {out - 1, 0, out / 2};
        at::Tensor e = at::empty({3, in});
        dequantize_packed_rows(packed.data(), static_cast<uint32_t>(type), rows.data(), 3, in, e.data_ptr<float>());
        CHECK(at::equal(e, deq.index_select(0, at::tensor(rows, at::kLong))));
      }
    }
  }
  // A type without a packed kernel is refused by name.
  std::vector<uint8_t> dummy(1024);
  float x[32] = {}, y[1] = {};
  CHECK_THROWS_WITH(gemm_small_packed(dummy.data(), static_cast<uint32_t>(GgmlType::Q8_K), x, nullptr, y, 1, 1, 256),
                    Catch::Contains("Q8_K"));
}

TEST_CASE("gemm_small_packed rows of an n-row call are bit-identical to 1-row calls (n <= 16)", "[model][kernel]") {
  // Decode (n = 1) and verification (n = k + 1) must give the same logits to the last bit, or
  // greedy speculative output could differ from AR output on a near tie.
  at::manual_seed(9);
  IsaCapGuard guard;
  const KernelIsa isa = GENERATE(from_range(runnable_isas()));
  set_kernel_isa_cap(isa);
  INFO("kernel ISA " << kernel_isa_name(isa));
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    const int64_t out = 67, in = 576;
    at::Tensor w = at::randn({out, in});
    const std::vector<uint8_t> packed = quantize(type, w.data_ptr<float>(), static_cast<size_t>(w.numel()), "w");
    at::Tensor x = at::randn({16, in});
    at::Tensor single = at::empty({16, out});
    for (int64_t i = 0; i < 16; ++i)
      gemm_small_packed(packed.data(), static_cast<uint32_t>(type), x[i].data_ptr<float>(), nullptr,
                        single[i].data_ptr<float>(), 1, out, in);
    for (int64_t n = 2; n <= 16; ++n) {
      at::Tensor y = at::empty({n, out});
      gemm_small_packed(packed.data(), static_cast<uint32_t>(type), x.data_ptr<float>(), nullptr, y.data_ptr<float>(),
                        n, out, in);
      INFO(ggml_type_name(static_cast<uint32_t>(type)) << " n " << n);
      CHECK(at::equal(y, single.narrow(0, 0, n)));
    }
  }
}

TEST_CASE("gemm_small_packed with a corrupted block differs: the comparison can fail", "[model][kernel]") {
  at::manual_seed(6);
  at::Tensor w = at::randn({8, 64});
  std::vector<uint8_t> packed = quantize(GgmlType::Q4_1, w.data_ptr<float>(), 8 * 64, "w");
  at::Tensor deq = at::empty({8, 64});
  dequantize(static_cast<uint32_t>(GgmlType::Q4_1), packed.data(), packed.size(), deq.data_ptr<float>(), 8 * 64, "w");
  packed[20 * 3 + 4] ^= 0x0F;  // block 3 (row 1), element 0's nibble
  at::Tensor x = at::randn({1, 64});
  at::Tensor y = at::empty({1, 8});
  gemm_small_packed(packed.data(), static_cast<uint32_t>(GgmlType::Q4_1), x.data_ptr<float>(), nullptr,
                    y.data_ptr<float>(), 1, 8, 64);
  CHECK((y - at::linear(x, deq)).abs().max().item<double>() > 1e-3);
}

// libtorch's float32 matmuls run on OpenBLAS here; main() (tests/catch_main.cpp, as the speclab
// command line) makes it use this CPU's kernels where its own detection fell back to a generic
// core (framework/core/blas_core.h). Fails when OPENBLAS_CORETYPE=Prescott is forced on an
// AVX2 machine.
TEST_CASE("OpenBLAS runs kernels for this CPU after main()", "[blas]") {
  const char* core = speclab::loaded_blas_core();
  if (!core) {
    WARN("this libtorch does not load OpenBLAS (e.g. a wheel with MKL): nothing to check");
    return;
  }
  INFO("OpenBLAS core: " << core);
  REQUIRE(speclab::native_blas_core(core) == nullptr);
}
