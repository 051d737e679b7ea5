// Dequantization of hand-built ggml blocks (expected values derived by hand from the block
// layouts in ggml-common.h), binary16 conversion against the CPU's F16C instructions, and
// quantize -> dequantize error bounds for the encoders.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/core/error.h"
#include "models/loaders/dequant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace speclab;

namespace {

void put_f16(std::vector<uint8_t>& b, size_t off, uint16_t h) { std::memcpy(&b[off], &h, 2); }
void put_f32(std::vector<uint8_t>& b, size_t off, float f) { std::memcpy(&b[off], &f, 4); }

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n);
  dequantize(static_cast<uint32_t>(t), bytes.data(), bytes.size(), out.data(), n, "test");
  return out;
}

// A deterministic pseudo-random sequence in [-scale, scale).
std::vector<float> lcg_values(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
  }
  return v;
}

}  // namespace

TEST_CASE("fp16 and bf16 decode known bit patterns", "[dequant]") {
  CHECK(fp16_to_fp32(0x3C00) == 1.0f);
  CHECK(fp16_to_fp32(0xC000) == -2.0f);
  CHECK(fp16_to_fp32(0x3555) == Approx(0.333251953125).epsilon(0));
  CHECK(fp16_to_fp32(0x7BFF) == 65504.0f);
  CHECK(fp16_to_fp32(0x0400) == std::ldexp(1.0f, -14));     // smallest normal
  CHECK(fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));     // smallest subnormal
  CHECK(fp16_to_fp32(0x03FF) == std::ldexp(1023.0f, -24));  // largest subnormal
  CHECK(fp16_to_fp32(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(fp16_to_fp32(0xFC00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(fp16_to_fp32(0x7E00)));
  CHECK(std::isnan(fp16_to_fp32(0x7C01)));
  const float neg_zero = fp16_to_fp32(0x8000);
  CHECK(neg_zero == 0.0f);
  CHECK(std::signbit(neg_zero));
  CHECK(bf16_to_fp32(0x3F80) == 1.0f);
  CHECK(bf16_to_fp32(0xC040) == -3.0f);
  CHECK(bf16_to_fp32(0x4049) == 3.140625f);
}

TEST_CASE("fp32_to_fp16 rounds to nearest even", "[dequant]") {
  // Every finite half survives a round trip.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaN
    REQUIRE(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))) == h);
  }
  const float ulp1 = std::ldexp(1.0f, -10);                // half ulp at 1.0 is 2^-11
  CHECK(fp32_to_fp16(1.0f + ulp1 / 2) == 0x3C00);          // tie -> even (down)
  CHECK(fp32_to_fp16(1.0f + 3 * ulp1 / 2) == 0x3C02);      // tie -> even (up)
  CHECK(fp32_to_fp16(1.0f + ulp1 / 2 + 1e-6f) == 0x3C01);  // above the tie
  CHECK(fp32_to_fp16(65519.0f) == 0x7BFF);
  CHECK(fp32_to_fp16(65520.0f) == 0x7C00);  // rounds up to inf
  CHECK(fp32_to_fp16(1e10f) == 0x7C00);
  CHECK(fp32_to_fp16(-1e10f) == 0xFC00);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24 -> 0
  CHECK(fp32_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(fp32_to_fp16(std::ldexp(1.5f, -24)) == 0x0002);     // tie between 1 and 2 -> 2
  CHECK(fp32_to_fp16(std::ldexp(1023.5f, -24)) == 0x0400);  // carries into the smallest normal
  CHECK(fp32_to_fp16(1e-30f) == 0x0000);
  CHECK(fp32_to_fp16(-1e-30f) == 0x8000);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x3FF) != 0);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hardware_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) static float hardware_fp32(uint16_t h) { return _cvtsh_ss(h); }

TEST_CASE("fp16 conversions agree with the CPU's F16C instructions", "[dequant]") {
  if (!__builtin_cpu_supports("f16c")) {
    WARN("this CPU has no F16C; the hardware comparison is skipped");
    return;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float sw = fp16_to_fp32(static_cast<uint16_t>(h));
    const float hw = hardware_fp32(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      REQUIRE(std::isnan(sw));
      continue;
    }
    REQUIRE(std::memcmp(&sw, &hw, 4) == 0);
  }
  // A sweep over float bit patterns (every sign, exponent and many mantissas).
  size_t compared = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    INFO("float bits 0x" << std::hex << b);
    REQUIRE(fp32_to_fp16(f) == hardware_fp16(f));
    ++compared;
  }
  CHECK(compared > 1000000);
}
#endif

TEST_CASE("Q4_0 block decodes as d * (nibble - 8)", "[dequant]") {
  std::vector<uint8_t> b(18);
  put_f16(b, 0, 0x3800);  // d = 0.5
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(y[j] == (j - 8) * 0.5f);
    CHECK(y[j + 16] == (7 - j) * 0.5f);
  }
}

TEST_CASE("Q4_1 block decodes as d * nibble + m", "[dequant]") {
  std::vector<uint8_t> b(20);
  put_f16(b, 0, 0x3400);  // d = 0.25
  put_f16(b, 2, 0xBC00);  // m = -1
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((j ^ 5) << 4));
  const auto y = decode(GgmlType::Q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(y[j] == j * 0.25f - 1.0f);
    CHECK(y[j + 16] == (j ^ 5) * 0.25f - 1.0f);
  }
}

TEST_CASE("Q5_0 and Q5_1 blocks take the fifth bit from qh", "[dequant]") {
  std::vector<uint8_t> b0(22);
  put_f16(b0, 0, 0x3C00);            // d = 1
  const uint32_t qh0 = 0xFFFF0000u;  // fifth bit set for elements 16..31 only
  std::memcpy(&b0[2], &qh0, 4);
  for (int j = 0; j < 16; ++j) b0[6 + j] = static_cast<uint8_t>(j | (j << 4));
  const auto y0 = decode(GgmlType::Q5_0, b0, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(y0[j] == j - 16.0f);
    CHECK(y0[j + 16] == static_cast<float>(j));
  }

  std::vector<uint8_t> b1(24);
  put_f16(b1, 0, 0x3800);            // d = 0.5
  put_f16(b1, 2, 0x3C00);            // m = 1
  const uint32_t qh1 = 0x00000005u;  // elements 0 and 2
  std::memcpy(&b1[4], &qh1, 4);
  for (int j = 0; j < 16; ++j) b1[8 + j] = static_cast<uint8_t>(15 - j);  // high nibbles 0
  const auto y1 = decode(GgmlType::Q5_1, b1, 32);
  CHECK(y1[0] == (15 + 16) * 0.5f + 1.0f);
  CHECK(y1[1] == 14 * 0.5f + 1.0f);
  CHECK(y1[2] == (13 + 16) * 0.5f + 1.0f);
  CHECK(y1[15] == 0 * 0.5f + 1.0f);
  for (int j = 16; j < 32; ++j) CHECK(y1[j] == 1.0f);
}

TEST_CASE("Q8_0 and Q8_K blocks decode as d * q", "[dequant]") {
  std::vector<uint8_t> b(34);
  put_f16(b, 0, 0xB800);  // d = -0.5
  const int8_t q[4] = {-128, 127, 0, -1};
  for (int j = 0; j < 32; ++j) {
    const int8_t v = j < 4 ? q[j] : static_cast<int8_t>(j * 3 - 50);
    std::memcpy(&b[2 + j], &v, 1);
  }
  const auto y = decode(GgmlType::Q8_0, b, 32);
  CHECK(y[0] == 64.0f);
  CHECK(y[1] == -63.5f);
  CHECK(y[2] == 0.0f);
  CHECK(y[3] == 0.5f);
  for (int j = 4; j < 32; ++j) CHECK(y[j] == (j * 3 - 50) * -0.5f);

  std::vector<uint8_t> k(292);
  put_f32(k, 0, 0.125f);  // Q8_K keeps d as float32
  for (int j = 0; j < 256; ++j) {
    const int8_t v = static_cast<int8_t>(j - 128);
    std::memcpy(&k[4 + j], &v, 1);
  }
  const auto yk = decode(GgmlType::Q8_K, k, 256);
  for (int j = 0; j < 256; ++j) CHECK(yk[j] == (j - 128) * 0.125f);
}

TEST_CASE("Q6_K block: ql low nibbles, qh 2-bit pairs, int8 scales per 16", "[dequant]") {
  std::vector<uint8_t> b(210, 0);
  for (int i = 0; i < 16; ++i) b[192 + i] = static_cast<uint8_t>(i + 1);  // scales 1..16
  put_f16(b, 208, 0x3C00);                                                // d = 1
  b[0] = 0x21;              // element 0: low 1; element 64: low 2
  b[128] = 0xE4;            // qh[0] = 11 10 01 00: high bits of elements 0, 32, 64, 96
  b[64 + 1] = 0x0F;         // element 129 (second half): low 15
  b[192 + 15] = 0xFE;       // scale 15 = -2 (int8)
  b[64 + 63] = 0xA0;        // element 255 (ql[127] high nibble): low 10
  b[128 + 32 + 31] = 0xC0;  // qh[63] bits 6-7 = 3: element 255 high 3
  const auto y = decode(GgmlType::Q6_K, b, 256);
  CHECK(y[0] == 1 * (1 - 32));
  CHECK(y[32] == 3 * (16 - 32));
  CHECK(y[64] == 5 * (34 - 32));
  CHECK(y[96] == 7 * (48 - 32));
  CHECK(y[129] == 9 * (15 - 32));
  CHECK(y[255] == -2 * ((10 | 3 << 4) - 32));
  CHECK(y[1] == 1 * -32);  // everything else is q = 0
  CHECK(y[200] == 13 * -32);
}

TEST_CASE("Q4_K and Q5_K blocks: 6-bit packed scales and mins", "[dequant]") {
  std::vector<uint8_t> b(144, 0);
  put_f16(b, 0, 0x3C00);  // d = 1
  put_f16(b, 2, 0x3800);  // dmin = 0.5
  uint8_t* s = &b[4];
  s[0] = 0x41;  // scale 0 = 1; top bits 01 -> high bits of scale 4
  s[1] = 2;
  s[2] = 3;
  s[3] = 4;
  s[4] = 5;  // mins 0..3
  s[5] = 6;
  s[6] = 7;
  s[7] = 8;
  for (int i = 8; i < 12; ++i) s[i] = 0x21;  // scales 4..7 low = 1, mins 4..7 low = 2
  b[16 + 0] = 0x3A;    // element 0 (sub-block 0) = 10, element 32 (sub-block 1) = 3
  b[16 + 64] = 0x07;   // element 128 (sub-block 4) = 7
  b[16 + 127] = 0xF0;  // element 255 (sub-block 7) = 15
  const auto y = decode(GgmlType::Q4_K, b, 256);
  CHECK(y[0] == 1 * 10 - 0.5f * 5);
  CHECK(y[32] == 2 * 3 - 0.5f * 6);
  CHECK(y[128] == 17 * 7 - 0.5f * 2);
  CHECK(y[255] == 1 * 15 - 0.5f * 2);
  CHECK(y[1] == -0.5f * 5);
  CHECK(y[100] == -0.5f * 8);  // sub-block 3

  // Q5_K: same header, qh[32] before the nibbles; bit k of qh[l] is the fifth bit of element
  // 32k + l.
  std::vector<uint8_t> b5(176, 0);
  std::copy(b.begin(), b.begin() + 16, b5.begin());
  b5[16 + 0] = 0x01 | 0x80;  // elements 0 and 224 get +16
  b5[16 + 3] = 0x02;         // element 35 gets +16
  b5[48 + 0] = 0x3A;         // element 0 = 10, element 32 = 3
  b5[48 + 3] = 0x50;         // element 35 (sub-block 1) low = 5
  const auto y5 = decode(GgmlType::Q5_K, b5, 256);
  CHECK(y5[0] == 1 * 26 - 0.5f * 5);
  CHECK(y5[32] == 2 * 3 - 0.5f * 6);
  CHECK(y5[35] == 2 * 21 - 0.5f * 6);
  CHECK(y5[224] == 1 * 16 - 0.5f * 2);
  CHECK(y5[1] == -0.5f * 5);
}

TEST_CASE("Q2_K and Q3_K blocks", "[dequant]") {
  // Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
  std::vector<uint8_t> b(84, 0);
  for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>((i % 16) | (1 << 4));  // scale i, min 1
  b[16 + 0] = 0b11100100;       // qs[0]: elements 0, 32, 64, 96 get 0, 1, 2, 3
  b[16 + 32 + 5] = 0b00000011;  // element 128 + 5 gets 3
  put_f16(b, 80, 0x4000);       // d = 2
  put_f16(b, 82, 0x3400);       // dmin = 0.25
  const auto y = decode(GgmlType::Q2_K, b, 256);
  CHECK(y[0] == 2 * 0 * 0 - 0.25f);
  CHECK(y[32] == 2 * 2 * 1 - 0.25f);
  CHECK(y[64] == 2 * 4 * 2 - 0.25f);
  CHECK(y[96] == 2 * 6 * 3 - 0.25f);
  CHECK(y[133] == 2 * 8 * 3 - 0.25f);
  CHECK(y[255] == -0.25f);

  // Q3_K: hmask[32], qs[64], scales[12], d. A clear hmask bit subtracts 4.
  std::vector<uint8_t> c(110, 0);
  for (int i = 0; i < 32; ++i) c[i] = 0xFF;  // all high bits set: no offset
  c[0] = 0xFE;                               // element 0 has its high bit clear
  c[32 + 0] = 0b00000010;                    // element 0 low bits = 2
  c[32 + 1] = 0b00001100;                    // element 33 low bits = 3
  uint8_t* sc = &c[96];
  for (int i = 0; i < 8; ++i) sc[i] = 0x00;
  for (int i = 8; i < 12; ++i) sc[i] = 0xAA;  // every scale's high 2 bits = 2 -> 32 - 32 = 0
  sc[0] = 0x05;                               // scale 0 low 5 -> 37 - 32 = 5
  sc[2] = 0x30;                               // scale 10 low 3 -> 35 - 32 = 3 (elements 160..175)
  put_f16(c, 108, 0x3800);                    // d = 0.5
  c[32 + 32 + 1] = 0b00110000;                // element 128 + 64 + 1 = 193 (scale 12) low bits = 3
  c[32 + 32 + 0] = 0b00000001;                // element 128 (scale 8) low bits = 1
  const auto z = decode(GgmlType::Q3_K, c, 256);
  CHECK(z[0] == 0.5f * 5 * (2 - 4));
  CHECK(z[1] == 0.0f);    // scale 0, q = 0
  CHECK(z[33] == 0.0f);   // scale 2 is 0
  CHECK(z[128] == 0.0f);  // scale 8 is 0
  // scale 10: element 160 = 128 + 32 (s = 1) reads bits 2-3 of qs[32]; set them.
  c[32 + 32 + 0] = 0b00001100;
  const auto z2 = decode(GgmlType::Q3_K, c, 256);
  CHECK(z2[160] == 0.5f * 3 * 3);
  CHECK(z2[161] == 0.0f);
}

TEST_CASE("F32, F16 and BF16 rows decode element by element", "[dequant]") {
  std::vector<uint8_t> f(8);
  put_f32(f, 0, 1.5f);
  put_f32(f, 4, -0.0625f);
  CHECK(decode(GgmlType::F32, f, 2) == std::vector<float>{1.5f, -0.0625f});
  std::vector<uint8_t> h(4);
  put_f16(h, 0, 0x3E00);  // 1.5
  put_f16(h, 2, 0xC500);  // -5
  CHECK(decode(GgmlType::F16, h, 2) == std::vector<float>{1.5f, -5.0f});
  std::vector<uint8_t> bf(4);
  put_f16(bf, 0, 0x3FC0);  // 1.5
  put_f16(bf, 2, 0xC0A0);  // -5
  CHECK(decode(GgmlType::BF16, bf, 2) == std::vector<float>{1.5f, -5.0f});
}

TEST_CASE("dequantize rejects unsupported types and wrong sizes", "[dequant]") {
  std::vector<uint8_t> b(66, 0);
  std::vector<float> y(256);
  try {
    dequantize(static_cast<uint32_t>(GgmlType::IQ2_XXS), b.data(), b.size(), y.data(), 256,
               "tensor blk.0.attn_q.weight");
    FAIL("IQ2_XXS decoded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kUnsupported);
    CHECK_THAT(e.what(), Catch::Contains("IQ2_XXS") && Catch::Contains("blk.0.attn_q.weight"));
  }
  try {
    dequantize(99, b.data(), b.size(), y.data(), 32, "tensor x");
    FAIL("type 99 decoded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kUnsupported);
    CHECK_THAT(e.what(), Catch::Contains("type 99"));
  }
  try {
    dequantize(static_cast<uint32_t>(GgmlType::Q8_0), b.data(), 33, y.data(), 32, "tensor x");
    FAIL("short Q8_0 data decoded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK_THAT(e.what(), Catch::Contains("expected 34 bytes, found 33"));
  }
  try {
    dequantize(static_cast<uint32_t>(GgmlType::Q4_0), b.data(), 18, y.data(), 31, "tensor x");
    FAIL("31 elements decoded as Q4_0");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadInput);
    CHECK_THAT(e.what(), Catch::Contains("not a multiple of the Q4_0 block size 32"));
  }
}

TEST_CASE("type table and names", "[dequant]") {
  CHECK(ggml_type_name(3) == "Q4_1");
  CHECK(ggml_type_name(16) == "IQ2_XXS");
  CHECK(ggml_type_name(4) == "type 4");  // Q4_2, removed from ggml
  CHECK(ggml_type_traits(4) == nullptr);
  CHECK(ggml_type_traits(14)->type_size == 210);
  CHECK(ggml_type_from_name("q8_0", "export.type") == GgmlType::Q8_0);
  CHECK(ggml_type_from_name("BF16", "export.type") == GgmlType::BF16);
  CHECK_THROWS_WITH(ggml_type_from_name("Q9_9", "export.type"),
                    Catch::Contains("export.type") && Catch::Contains("unknown ggml type 'Q9_9'"));
  CHECK(ggml_row_bytes(3, 64, "x") == 40);
  CHECK(ggml_row_bytes(14, 512, "x") == 420);
  CHECK_THROWS_AS(ggml_row_bytes(14, 100, "x"), Error);
}

TEST_CASE("exactly representable blocks survive quantize -> dequantize", "[dequant]") {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = ((j % 16) - 8) * 0.5f;  // max |x| = 4 at -4: d = 0.5
  CHECK(decode(GgmlType::Q4_0, quantize(GgmlType::Q4_0, x.data(), 32, "x"), 32) == x);
  for (int j = 0; j < 32; ++j) x[j] = (j % 16) * 0.25f - 1.0f;  // min -1, max 2.75: d = 0.25
  CHECK(decode(GgmlType::Q4_1, quantize(GgmlType::Q4_1, x.data(), 32, "x"), 32) == x);
  for (int j = 0; j < 32; ++j) x[j] = (j * 8 - 127) * 0.5f;  // amax 63.5 at j = 0: d = 0.5
  CHECK(decode(GgmlType::Q8_0, quantize(GgmlType::Q8_0, x.data(), 32, "x"), 32) == x);
  std::vector<float> zeros(64, 0.0f);  // d = 0: the encoders must not divide by zero
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1})
    CHECK(decode(t, quantize(t, zeros.data(), 64, "x"), 64) == zeros);
  std::vector<float> constant(32, -3.0f);  // Q4_1 of a constant block is exact (d = 0, m = -3)
  CHECK(decode(GgmlType::Q4_1, quantize(GgmlType::Q4_1, constant.data(), 32, "x"), 32) == constant);
}

TEST_CASE("quantize -> dequantize error stays within the block's step", "[dequant]") {
  const size_t n = 32 * 512;
  const std::vector<float> x = lcg_values(n, 7, 3.0f);
  const float half_ulp = std::ldexp(1.0f, -11);  // relative rounding of the f16 scales
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
    const auto y = decode(t, quantize(t, x.data(), n, "x"), n);
    double sq_err = 0, sq_step = 0;
    size_t nonzero = 0;
    for (size_t b = 0; b < n / 32; ++b) {
      float amax = 0, max = 0, lo = x[b * 32], hi = x[b * 32];
      for (size_t j = b * 32; j < b * 32 + 32; ++j) {
        if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
      }
      // step: the quantization step d; bound: the worst error ggml's rounding allows.
      float step = 0, bound = 0;
      if (t == GgmlType::Q8_0) {
        step = amax / 127;
        bound = step / 2 + 128 * step * half_ulp;
      } else if (t == GgmlType::Q4_0) {
        step = std::fabs(max) / 8;
        bound = step + 16 * step * half_ulp;  // the element opposite max is clamped to q = 15
      } else {
        step = (hi - lo) / 15;
        bound = step / 2 + 16 * step * half_ulp + std::fabs(lo) * half_ulp;
      }
      for (size_t j = b * 32; j < b * 32 + 32; ++j) {
        const float err = std::fabs(x[j] - y[j]);
        INFO(ggml_type_name(static_cast<uint32_t>(t))
             << " element " << j << ": " << x[j] << " -> " << y[j]);
        REQUIRE(err <= bound * 1.0001f);
        sq_err += static_cast<double>(err) * err;
        sq_step += static_cast<double>(step) * step;
        nonzero += err > 0;
      }
    }
    // Rounding to a uniform grid: RMS error ≈ step / sqrt(12) ≈ 0.29 step.
    const double rms_ratio = std::sqrt(sq_err / sq_step);
    INFO(ggml_type_name(static_cast<uint32_t>(t)) << " rms error / step = " << rms_ratio);
    CHECK(rms_ratio > 0.2);
    CHECK(rms_ratio < 0.4);
    CHECK(nonzero > n / 2);
  }
}

TEST_CASE("quantize rejects what it cannot encode", "[dequant]") {
  std::vector<float> x(256, 1.0f);
  CHECK_THROWS_MATCHES(quantize(GgmlType::Q6_K, x.data(), 256, "tensor w"), Error,
                       Catch::Predicate<Error>([](const Error& e) {
                         return e.kind() == ErrorKind::kUnsupported &&
                                std::string(e.what()).find("Q6_K") != std::string::npos;
                       }));
  CHECK_THROWS_MATCHES(
      quantize(GgmlType::Q8_0, x.data(), 48, "tensor w"), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.kind() == ErrorKind::kBadInput; }));
  x[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(quantize(GgmlType::Q4_1, x.data(), 64, "tensor w"),
                    Catch::Contains("non-finite value (element 5)"));
  const auto f16 = quantize(GgmlType::F16, x.data(), 64, "tensor w");  // F16 keeps NaN
  CHECK(std::isnan(fp16_to_fp32(static_cast<uint16_t>(f16[10] | f16[11] << 8))));
}
