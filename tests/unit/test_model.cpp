// Model building blocks checked against libtorch's own reference ops.
#include "tests/torch_catch.h"

#include "models/llama/gemv.h"

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
