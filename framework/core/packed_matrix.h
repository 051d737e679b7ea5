// PackedMatrix — a float32 matrix packed once for a model's own CPU kernels, y = x W^T (+ b).
//
// What lets a small dense head that rides on a target (the EAGLE layer, a Medusa head) run on
// the target's matrix kernels at the target's speed, while framework/ stays ignorant of them:
// models/ implements it and hands it out through Model::pack_matrix (framework/core/model.h).
// The storage (e.g. Q8_0 blocks multiplied with int8 activations) is the model's choice, so a
// product is the float32 one up to that quantization.
#pragma once

#include <cstdint>
#include <string>

namespace speclab {

class PackedMatrix {
 public:
  virtual ~PackedMatrix() = default;
  virtual int64_t rows() const = 0;  // out: the length of a result row
  virtual int64_t cols() const = 0;  // in: the length of an input row
  // x: [n, cols] float32 row-major; bias: [rows] or nullptr; y: [n, rows] (overwritten).
  // Row i of y depends on row i of x only.
  virtual void multiply(const float* x, const float* bias, float* y, int64_t n) const = 0;
  virtual uint64_t bytes() const = 0;      // memory held
  virtual std::string storage() const = 0;  // e.g. "Q8_0", "float32"
};

}  // namespace speclab
