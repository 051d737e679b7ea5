// Host-side helpers for the CUDA kernel tests (test_cuda_attention, test_cuda_skinny_gemm):
// test values exact in every storage dtype, their encoding and decoding, a device buffer, and a
// check that a call throws speclab::Error(kBadInput). Include after catch2/catch.hpp.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "framework/core/error.h"
#include "framework/cuda/paged_attention.h"

namespace speclab::test {

using cuda::DType;

inline const char* name(DType dt) { return dt == DType::kF32 ? "f32" : dt == DType::kF16 ? "f16" : "bf16"; }
inline size_t elem_size(DType dt) { return dt == DType::kF32 ? 4 : 2; }

// Max |gpu - reference|: the output is rounded once to dt (|out| < 2: half an ulp is 2^-11 in f16,
// 2^-8 in bf16), plus float32 arithmetic (~1e-6 here); about 4x the largest error seen on a CPU model.
inline double tolerance(DType dt) { return dt == DType::kF32 ? 2e-5 : dt == DType::kF16 ? 2e-3 : 1.6e-2; }

// Test values are k/128 with |k| <= 255: exact in f32, f16 (normal) and bf16 (8 significant bits),
// so every dtype sees the same inputs and the reference needs no rounding model.
inline float test_value(std::mt19937& gen) {
  return static_cast<float>(std::uniform_int_distribution<int>(-255, 255)(gen)) / 128.f;
}

inline std::vector<float> test_values(size_t count, std::mt19937& gen) {
  std::vector<float> v(count);
  for (auto& x : v) x = test_value(gen);
  return v;
}

inline uint32_t f32_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Encodes a test value (or NaN) in dt.
inline void encode(DType dt, float x, uint8_t* dst) {
  if (dt == DType::kF32) {
    std::memcpy(dst, &x, 4);
    return;
  }
  uint16_t h = 0;
  if (dt == DType::kBF16) {
    h = static_cast<uint16_t>(f32_bits(x) >> 16);  // exact for test values
  } else if (std::isnan(x)) {
    h = 0x7e00;
  } else if (x != 0.f) {  // normal f16 with the float's top 10 mantissa bits (the rest are zero)
    const uint32_t b = f32_bits(x);
    const uint32_t sign = (b >> 16) & 0x8000u;
    const uint32_t exp = ((b >> 23) & 0xffu) - 127u + 15u;
    h = static_cast<uint16_t>(sign | (exp << 10) | ((b >> 13) & 0x3ffu));
  }
  std::memcpy(dst, &h, 2);
}

inline float decode(DType dt, const uint8_t* src) {
  if (dt == DType::kF32) {
    float x;
    std::memcpy(&x, src, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, src, 2);
  if (dt == DType::kBF16) {
    const uint32_t b = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &b, 4);
    return x;
  }
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v;
  if (e == 0)
    v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

inline std::vector<uint8_t> encode_all(DType dt, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * elem_size(dt));
  for (size_t i = 0; i < v.size(); ++i) encode(dt, v[i], out.data() + i * elem_size(dt));
  return out;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(std::max<size_t>(bytes, 16)) {
    REQUIRE(cudaMalloc(&p_, bytes_) == cudaSuccess);
    REQUIRE(cudaMemset(p_, 0xff, bytes_) == cudaSuccess);  // NaN floats: stale data must not be read
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* src, size_t bytes, size_t offset = 0) {
    REQUIRE(offset + bytes <= bytes_);
    REQUIRE(cudaMemcpy(static_cast<uint8_t*>(p_) + offset, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  void download(void* dst, size_t bytes) const {
    REQUIRE(bytes <= bytes_);
    REQUIRE(cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

template <typename F>
bool throws_bad_input(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kBadInput;
  }
  return false;
}

}  // namespace speclab::test
