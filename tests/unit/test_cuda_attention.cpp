// The CUDA paged attention kernel (framework/cuda/paged_attention.h) against a float64 CPU
// reference of causal softmax attention, and its batch invariance: a row's output bits in an n-row
// call equal the same row computed alone (n = 1, and a different ctx, so a different grid).
// The argument checks need no device and always run; the kernel cases run where a GPU is present
// (the lent H100/H200 machine) and are skipped with a warning elsewhere.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/cuda/greedy_verify.h"
#include "framework/cuda/paged_attention.h"
#include "tests/support/cuda_test_data.h"
#include "tests/support/required_resources.h"

using namespace speclab;
using cuda::DType;
using namespace speclab::test;

namespace {

struct Geometry {
  int64_t H, KVH, D;
};

// One layer's cache of ctx positions in dtype dt, in n_slots = ctx + 37 slots, addressed either
// through a permuted slot table or as base + p with base = 37.
class Scenario {
 public:
  Scenario(DType dt, Geometry g, int64_t ctx, uint32_t seed)
      : dt_(dt), g_(g), n_slots_(ctx + 37), base_(37), gen_(seed),
        k_(test_values(static_cast<size_t>(n_slots_ * g.KVH * g.D), gen_)),
        v_(test_values(static_cast<size_t>(n_slots_ * g.KVH * g.D), gen_)),
        dk_(k_.size() * elem_size(dt)), dv_(v_.size() * elem_size(dt)), dtable_(sizeof(int64_t) * ctx) {
    std::vector<int64_t> perm(static_cast<size_t>(n_slots_));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen_);
    table_.assign(perm.begin(), perm.begin() + ctx);
    dk_.upload(encode_all(dt, k_).data(), k_.size() * elem_size(dt));
    dv_.upload(encode_all(dt, v_).data(), v_.size() * elem_size(dt));
    dtable_.upload(table_.data(), sizeof(int64_t) * ctx);
  }

  std::mt19937& gen() { return gen_; }
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(g_.D))); }
  int64_t slot(int64_t p, bool table) const { return table ? table_[static_cast<size_t>(p)] : base_ + p; }
  size_t row_bytes() const { return static_cast<size_t>(g_.H * g_.D) * elem_size(dt_); }

  // Runs the kernel for rows q ([n, H, D]) at positions ([n]) with the given ctx (<= the cache's)
  // and returns the raw output [n, H, D] in dt.
  std::vector<uint8_t> run(const std::vector<float>& q, const std::vector<int64_t>& positions, int64_t ctx,
                           bool table) const {
    const auto n = static_cast<int64_t>(positions.size());
    const size_t out_bytes = static_cast<size_t>(n) * row_bytes();
    DeviceBuffer dq(out_bytes), dpos(sizeof(int64_t) * positions.size()), dout(out_bytes),
        dws(sizeof(float) * cuda::paged_attention_workspace_floats(n, g_.H, g_.D, ctx));
    dq.upload(encode_all(dt_, q).data(), out_bytes);
    dpos.upload(positions.data(), sizeof(int64_t) * positions.size());
    const int64_t* slots = table ? static_cast<const int64_t*>(dtable_.get()) : nullptr;
    cuda::paged_attention(dt_, dq.get(), dk_.get(), dv_.get(), slots, base_, static_cast<const int64_t*>(dpos.get()),
                          dout.get(), static_cast<float*>(dws.get()), n, g_.H, g_.KVH, g_.D, ctx, scale(), nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<uint8_t> out(out_bytes);
    dout.download(out.data(), out_bytes);
    return out;
  }

  // float64 causal softmax attention: [n, H, D].
  std::vector<double> reference(const std::vector<float>& q, const std::vector<int64_t>& positions, bool table) const {
    const int64_t H = g_.H, D = g_.D, group = g_.H / g_.KVH;
    std::vector<double> out(q.size());
    for (size_t i = 0; i < positions.size(); ++i) {
      const int64_t pos = positions[i];
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q.data() + (static_cast<int64_t>(i) * H + h) * D;
        const int64_t kvh = h / group;
        std::vector<double> w(static_cast<size_t>(pos + 1));
        double mx = -INFINITY;
        for (int64_t p = 0; p <= pos; ++p) {
          const float* kp = k_.data() + (slot(p, table) * g_.KVH + kvh) * D;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += static_cast<double>(qh[d]) * kp[d];
          w[static_cast<size_t>(p)] = s * scale();
          mx = std::max(mx, w[static_cast<size_t>(p)]);
        }
        double den = 0;
        for (auto& x : w) den += (x = std::exp(x - mx));
        double* o = out.data() + (static_cast<int64_t>(i) * H + h) * D;
        for (int64_t p = 0; p <= pos; ++p) {
          const float* vp = v_.data() + (slot(p, table) * g_.KVH + kvh) * D;
          for (int64_t d = 0; d < D; ++d) o[d] += w[static_cast<size_t>(p)] / den * vp[d];
        }
      }
    }
    return out;
  }

  // Largest |decoded - expected|; NaN counts as infinitely wrong.
  double max_diff(const std::vector<uint8_t>& out, const std::vector<double>& expected) const {
    double worst = 0;
    for (size_t j = 0; j < expected.size(); ++j) {
      const double x = decode(dt_, out.data() + j * elem_size(dt_));
      worst = std::isnan(x) ? INFINITY : std::max(worst, std::abs(x - expected[j]));
      if (std::isinf(worst)) break;
    }
    return worst;
  }

  const float* k_row(int64_t slot, int64_t kvh) const { return k_.data() + (slot * g_.KVH + kvh) * g_.D; }

  // Overwrites K (or V) of one slot and kv head, on the host and the device.
  void set_row(bool is_k, int64_t slot, int64_t kvh, const std::vector<float>& row) {
    std::vector<float>& host = is_k ? k_ : v_;
    const int64_t off = (slot * g_.KVH + kvh) * g_.D;
    std::copy(row.begin(), row.end(), host.begin() + off);
    (is_k ? dk_ : dv_).upload(encode_all(dt_, row).data(), row.size() * elem_size(dt_),
                              static_cast<size_t>(off) * elem_size(dt_));
  }

 private:
  DType dt_;
  Geometry g_;
  int64_t n_slots_, base_;
  std::mt19937 gen_;
  std::vector<float> k_, v_;  // [n_slots, KVH, D] test values
  std::vector<int64_t> table_;  // [ctx] slot of position p
  DeviceBuffer dk_, dv_, dtable_;
};

// Positions that cross the 256-position chunk boundaries first, then random ones.
std::vector<int64_t> test_positions(int64_t n, int64_t ctx, std::mt19937& gen) {
  const int64_t special[] = {ctx - 1, 0, 255, 256, 513, 3};
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    pos[static_cast<size_t>(i)] = i < 6 ? special[i] : std::uniform_int_distribution<int64_t>(0, ctx - 1)(gen);
  return pos;
}

}  // namespace

TEST_CASE("CUDA paged attention validates its arguments before touching the device", "[cuda]") {
  alignas(16) float buf[64] = {};
  const int64_t pos = 0;
  const auto rejects = [&](DType dt, const void* q, int64_t n, int64_t H, int64_t KVH, int64_t D, int64_t ctx) {
    return throws_bad_input([&] {
      cuda::paged_attention(dt, q, buf, buf, nullptr, 0, &pos, buf, buf, n, H, KVH, D, ctx, 0.125f, nullptr);
    });
  };
  CHECK(rejects(DType::kF32, buf, 1, 6, 4, 64, 10));   // H % KVH != 0
  CHECK(rejects(DType::kF32, buf, 1, 8, 0, 64, 10));   // KVH = 0
  CHECK(rejects(DType::kF32, buf, 1, 8, 2, 48, 10));   // D not a multiple of 32
  CHECK(rejects(DType::kF32, buf, 1, 8, 2, 24, 10));   // nor 8 or 16
  CHECK(rejects(DType::kF32, buf, 1, 8, 2, 288, 10));  // D > 256
  CHECK(rejects(DType::kF32, buf, 1, 8, 2, 0, 10));    // D = 0
  CHECK(rejects(DType::kF32, buf, 1, 8, 2, 64, 0));    // ctx = 0
  CHECK(rejects(DType::kF32, buf, -1, 8, 2, 64, 10));  // n < 0
  CHECK(rejects(static_cast<DType>(3), buf, 1, 8, 2, 64, 10));
  CHECK(rejects(DType::kF16, nullptr, 1, 8, 2, 64, 10));
  CHECK(rejects(DType::kF16, reinterpret_cast<const char*>(buf) + 4, 1, 8, 2, 64, 10));  // not 16-byte aligned
  // n = 0: nothing to do, so no device is needed.
  CHECK_NOTHROW(cuda::paged_attention(DType::kBF16, buf, buf, buf, nullptr, 0, &pos, buf, buf, 0, 8, 2, 64, 10, 0.125f,
                                      nullptr));

  CHECK(cuda::paged_attention_workspace_floats(5, 8, 64, 700) == 5u * 8u * 3u * 66u);
  CHECK(cuda::paged_attention_workspace_floats(1, 1, 32, 256) == 34u);
  CHECK(cuda::paged_attention_workspace_floats(1, 1, 32, 257) == 68u);
  CHECK(throws_bad_input([] { cuda::paged_attention_workspace_floats(1, 0, 64, 10); }));
}

TEST_CASE("CUDA paged attention matches a float64 reference and is batch-invariant", "[cuda]") {
  if (testing::skip_without_cuda(cuda::device_available(), "no CUDA device: paged attention kernel cases")) return;
  const int64_t ctx = 700;  // 3 chunks
  uint32_t seed = 11;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Geometry g : {Geometry{8, 2, 64}, Geometry{4, 4, 128}, Geometry{8, 4, 8}, Geometry{4, 2, 16}}) {
      Scenario s(dt, g, ctx, seed++);
      for (bool table : {true, false}) {
        for (int64_t n : {1, 5, 17, 33}) {
          INFO(name(dt) << " H=" << g.H << " KVH=" << g.KVH << " D=" << g.D << (table ? " slot table" : " base+p")
                        << " n=" << n);
          const std::vector<int64_t> positions = test_positions(n, ctx, s.gen());
          const std::vector<float> q = test_values(static_cast<size_t>(n * g.H * g.D), s.gen());
          const std::vector<uint8_t> out = s.run(q, positions, ctx, table);
          CHECK(s.max_diff(out, s.reference(q, positions, table)) <= tolerance(dt));

          // Each row alone (n = 1; every other row also with the smallest ctx, i.e. a smaller grid).
          const size_t row_elems = static_cast<size_t>(g.H * g.D);
          int mismatched = 0;
          for (int64_t i = 0; i < n; ++i) {
            const std::vector<float> qi(q.begin() + static_cast<std::ptrdiff_t>(i * row_elems),
                                        q.begin() + static_cast<std::ptrdiff_t>((i + 1) * row_elems));
            const int64_t pos = positions[static_cast<size_t>(i)];
            const std::vector<uint8_t> alone = s.run(qi, {pos}, i % 2 ? pos + 1 : ctx, table);
            if (std::memcmp(alone.data(), out.data() + static_cast<size_t>(i) * s.row_bytes(), s.row_bytes()) != 0)
              ++mismatched;
          }
          CHECK(mismatched == 0);
        }
      }
    }
  }
}

TEST_CASE("CUDA paged attention negative controls: the comparisons can fail", "[cuda]") {
  if (testing::skip_without_cuda(cuda::device_available(), "no CUDA device: paged attention kernel cases")) return;
  const Geometry g{8, 2, 64};
  const int64_t ctx = 700, pos = 300, h = 5, kvh = h / (g.H / g.KVH);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    INFO(name(dt));
    Scenario s(dt, g, ctx, 99);
    const std::vector<float> q = test_values(static_cast<size_t>(g.H * g.D), s.gen());
    const std::vector<double> expected = s.reference(q, {pos}, true);
    const std::vector<uint8_t> base = s.run(q, {pos}, ctx, true);
    REQUIRE(s.max_diff(base, expected) <= tolerance(dt));

    // A visible key (position 280, chunk 1) set to head h's query dominates that head's softmax:
    // the bits change, the old reference rejects the output, the new one accepts it.
    const int64_t visible = s.slot(280, true);
    const std::vector<float> saved(s.k_row(visible, kvh), s.k_row(visible, kvh) + g.D);
    s.set_row(true, visible, kvh, std::vector<float>(q.begin() + h * g.D, q.begin() + (h + 1) * g.D));
    const std::vector<uint8_t> changed = s.run(q, {pos}, ctx, true);
    CHECK(std::memcmp(changed.data(), base.data(), s.row_bytes()) != 0);
    CHECK(s.max_diff(changed, expected) > tolerance(dt));
    CHECK(s.max_diff(changed, s.reference(q, {pos}, true)) <= tolerance(dt));
    s.set_row(true, visible, kvh, saved);

    // NaN in K and V at position pos + 1, invisible to the row: its bits stay the same alone and
    // next to a row at pos + 5, whose block loads that key (and whose head h does turn NaN).
    const int64_t hidden = s.slot(pos + 1, true);
    const std::vector<float> nan_row(static_cast<size_t>(g.D), NAN);
    s.set_row(true, hidden, kvh, nan_row);
    s.set_row(false, hidden, kvh, nan_row);
    const std::vector<uint8_t> alone = s.run(q, {pos}, ctx, true);
    CHECK(std::memcmp(alone.data(), base.data(), s.row_bytes()) == 0);
    std::vector<float> q2 = q;
    q2.insert(q2.end(), q.begin(), q.end());
    const std::vector<uint8_t> pair = s.run(q2, {pos, pos + 5}, ctx, true);
    CHECK(std::memcmp(pair.data(), base.data(), s.row_bytes()) == 0);
    CHECK(std::isnan(decode(dt, pair.data() + s.row_bytes() + static_cast<size_t>(h * g.D) * elem_size(dt))));
  }
}
