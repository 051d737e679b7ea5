// Weight types checked inside the model on real weights, each against a type of the same
// values that the kernels already handle.
//
// Q5_1 and Q5_K, against the Q4_1 and Q4_K weights they are re-encoded
// from. Each 4-bit block becomes a 5-bit block of the same values: the scale d halves (exact in
// binary16 for a normal d) and every integer u doubles (2u <= 30, so the fifth bit is used
// wherever u >= 8):
//   Q4_1 d u + m              -> Q5_1 (d / 2)(2u) + m
//   Q4_K (d sc) u - dmin mn   -> Q5_K (d / 2 sc)(2u) - dmin mn  (scales, mins and dmin as they were)
// The kernels then compute the same products: the float32 decode gives the same floats, and the
// int8 kernels' integer sums double while the float scale they meet halves, both exactly. So the
// logits of a prefill, decode steps and a verification batch must be the same bits as the 4-bit
// model's, on the float32-activation and the int8-activation paths. A kernel that dropped or
// misplaced the fifth bit, or read the min or the scales from the wrong bytes, would differ (the
// negative control drops the fifth bit). test_qgemm checks the kernels against dequantize() on
// random blocks; this checks them inside the model on SmolLM2's and Qwen2.5-Coder-0.5B's weights.
//
// Q2_K and Q3_K: no shipped file has them, and no 4-bit block re-encodes into them exactly. So
// SmolLM2's down projections (the matrices whose rows are whole 256-element super-blocks;
// llama.cpp's K-quant files of SmolLM2 have the others in 32-element types too) are quantized
// here to 2 and 3 bits, and the same integers are written in two formats each:
//   2 bits, a scale and a min (0..15) per 32 elements: Q4_K (d sc) u - dmin mn with u <= 3, and
//     Q2_K with each pair of its 16-element sub-blocks sharing the scale and the min;
//   3 bits, a signed scale (-32..31) per 16 elements: Q6_K (d sc)(q - 32) with q = u + 28, and
//     Q3_K (d sc)(u - 4).
// The two models' logits must be the same bits on both activation paths (the float32 decode and
// the integer sums agree exactly, and the kernels share their float steps); the negative control
// drops u's top bit from the Q2_K / Q3_K blocks.
#include "tests/torch_catch.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/core/kv_view.h"
#include "models/llama/gemv.h"
#include "models/llama/llama_model.h"
#include "models/loaders/dequant.h"
#include "models/model_loader.h"
#include "tests/support/required_resources.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(SPECLAB_SOURCE_DIR) + "/.cache/models";

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// d / 2 in binary16 when that is exact (d normal, or zero), else nullopt-like false.
bool half_exact(uint16_t d, uint16_t& half) {
  half = fp32_to_fp16(fp16_to_fp32(d) * 0.5f);
  return fp16_to_fp32(half) * 2.0f == fp16_to_fp32(d);
}

struct Counts {
  int64_t blocks = 0, doubled = 0;  // (sub-)blocks re-encoded, and of them with u doubled
};

// One Q4_1 block (20 bytes) as a Q5_1 block (24 bytes) of the same values. keep_fifth = false
// drops the fifth bits (the negative control).
void q41_to_q51(const uint8_t* src, uint8_t* dst, bool keep_fifth, Counts& c) {
  uint16_t half = 0;
  const bool dbl = half_exact(u16(src), half);
  put_u16(dst, dbl ? half : u16(src));
  put_u16(dst + 2, u16(src + 2));  // m
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) {
    const int u = i < 16 ? (src[4 + i] & 0x0F) : (src[4 + i - 16] >> 4);
    const int v = dbl ? 2 * u : u;
    if (keep_fifth && (v >> 4)) qh |= 1u << i;
    uint8_t& q = dst[8 + (i % 16)];
    if (i < 16)
      q = static_cast<uint8_t>(v & 0x0F);
    else
      q = static_cast<uint8_t>(q | ((v & 0x0F) << 4));
  }
  std::memcpy(dst + 4, &qh, 4);
  ++c.blocks;
  c.doubled += dbl;
}

// The 12-byte packing of eight 6-bit scales and mins (Q4_K, Q5_K; models/loaders/dequant.cpp).
void unpack_scales(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}
void pack_scales(const int* sc, const int* mn, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4));
  }
}

// One Q4_K block (144 bytes: d, dmin, scales[12], qs[128]) as a Q5_K block (176 bytes: d, dmin,
// scales[12], qh[32], qs[128]). Element 32 sb + l: nibble sb % 2 of qs[32 (sb / 2) + l]; its
// fifth bit is bit sb of qh[l]. Where d / 2 is not exact (Qwen's super-block scales are often
// subnormal binary16), a sub-block with an even scale halves that scale instead: (d sc / 2)(2u)
// is d sc u just as exactly, and the int8 kernels' integer sum sc u x is unchanged. Counts
// sub-blocks.
void q4k_to_q5k(const uint8_t* src, uint8_t* dst, bool keep_fifth, Counts& c) {
  uint16_t half = 0;
  const bool dbl = half_exact(u16(src), half);
  put_u16(dst, dbl ? half : u16(src));
  put_u16(dst + 2, u16(src + 2));  // dmin
  int sc[8], mn[8];
  unpack_scales(src + 4, sc, mn);
  bool twice[8];
  for (int sb = 0; sb < 8; ++sb) {
    twice[sb] = dbl || (sc[sb] % 2 == 0 && sc[sb] > 0);
    if (!dbl && twice[sb]) sc[sb] /= 2;
  }
  pack_scales(sc, mn, dst + 4);
  std::memset(dst + 16, 0, 160);
  for (int sb = 0; sb < 8; ++sb) {
    for (int l = 0; l < 32; ++l) {
      const int u = (src[16 + 32 * (sb / 2) + l] >> (4 * (sb % 2))) & 0x0F;
      const int v = twice[sb] ? 2 * u : u;
      dst[48 + 32 * (sb / 2) + l] |= static_cast<uint8_t>((v & 0x0F) << (4 * (sb % 2)));
      if (keep_fifth && (v >> 4)) dst[16 + l] |= static_cast<uint8_t>(1u << sb);
    }
    ++c.blocks;
    c.doubled += twice[sb];
  }
}

// ---- 2 and 3 bits, two formats each --------------------------------------------------------

// One super-block's integers: u[256], sc[16] and mn[16] per 16 elements, d and dmin in binary16.
struct LowBits {
  uint16_t d = 0, dmin = 0;
  int sc[16] = {}, mn[16] = {};
  int u[256] = {};
};

int clampi(long v, int lo, int hi) { return static_cast<int>(std::min<long>(hi, std::max<long>(lo, v))); }

// The element of x[0..n) of largest magnitude (the first of them), with its sign.
float largest(const float* x, int n) {
  float big = 0.f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(big)) big = x[i];
  return big;
}

// 2 bits: per 32 elements x ~ (d sc) u - dmin mn, u in 0..3, sc and mn in 0..15 (sub-blocks 2t
// and 2t + 1 alike).
LowBits two_bits(const float* x) {
  LowBits q;
  float scale[8], mins[8], smax = 0.f, mmax = 0.f;
  for (int t = 0; t < 8; ++t) {
    float lo = 0.f, hi = 0.f;
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * t + l]), hi = std::max(hi, x[32 * t + l]);
    scale[t] = (hi - lo) / 3.f;
    mins[t] = -lo;
    smax = std::max(smax, scale[t]);
    mmax = std::max(mmax, mins[t]);
  }
  q.d = fp32_to_fp16(smax / 15.f);
  q.dmin = fp32_to_fp16(mmax / 15.f);
  const float d = fp16_to_fp32(q.d), dmin = fp16_to_fp32(q.dmin);
  for (int t = 0; t < 8; ++t) {
    const int sc = d > 0.f ? clampi(std::lround(scale[t] / d), 0, 15) : 0;
    const int mn = dmin > 0.f ? clampi(std::lround(mins[t] / dmin), 0, 15) : 0;
    q.sc[2 * t] = q.sc[2 * t + 1] = sc;
    q.mn[2 * t] = q.mn[2 * t + 1] = mn;
    for (int l = 0; l < 32; ++l)
      q.u[32 * t + l] = sc ? clampi(std::lround((x[32 * t + l] + dmin * mn) / (d * sc)), 0, 3) : 0;
  }
  return q;
}

// 3 bits: per 16 elements x ~ (d sc)(u - 4), u in 0..7, sc in -32..31 (signed so that the
// element of largest magnitude lands on -4, as llama.cpp's Q3_K does).
LowBits three_bits(const float* x) {
  LowBits q;
  float scale[16], smax = 0.f;
  for (int k = 0; k < 16; ++k) {
    scale[k] = -largest(x + 16 * k, 16) / 4.f;
    smax = std::max(smax, std::fabs(scale[k]));
  }
  q.d = fp32_to_fp16(smax / 31.f);
  const float d = fp16_to_fp32(q.d);
  for (int k = 0; k < 16; ++k) {
    q.sc[k] = d > 0.f ? clampi(std::lround(scale[k] / d), -32, 31) : 0;
    for (int l = 0; l < 16; ++l)
      q.u[16 * k + l] = q.sc[k] ? clampi(std::lround(x[16 * k + l] / (d * q.sc[k])), -4, 3) + 4 : 4;
  }
  return q;
}

// The 2-bit integers as Q4_K (144 bytes) and as Q2_K (84 bytes): scales[16], qs[64] (element
// 128 h + 32 s + l in bits 2s of qs[32h + l]), d, dmin.
void put_q4k(const LowBits& q, uint8_t* dst) {
  put_u16(dst, q.d);
  put_u16(dst + 2, q.dmin);
  int sc[8], mn[8];
  for (int t = 0; t < 8; ++t) sc[t] = q.sc[2 * t], mn[t] = q.mn[2 * t];
  pack_scales(sc, mn, dst + 4);
  std::memset(dst + 16, 0, 128);
  for (int e = 0; e < 256; ++e) dst[16 + 32 * (e / 64) + e % 32] |= static_cast<uint8_t>(q.u[e] << (4 * ((e / 32) % 2)));
}
void put_q2k(const LowBits& q, uint8_t* dst, bool keep_top_bit) {
  for (int k = 0; k < 16; ++k) dst[k] = static_cast<uint8_t>(q.sc[k] | (q.mn[k] << 4));
  std::memset(dst + 16, 0, 64);
  for (int e = 0; e < 256; ++e) {
    const int u = keep_top_bit ? q.u[e] : q.u[e] & 1;
    dst[16 + 32 * (e / 128) + e % 32] |= static_cast<uint8_t>(u << (2 * ((e / 32) % 4)));
  }
  put_u16(dst + 80, q.d);
  put_u16(dst + 82, q.dmin);
}

// The 3-bit integers as Q6_K (210 bytes: ql[128], qh[64], scales[16], d; element 128 h + 32 s + l
// has nibble s / 2 of ql[64h + 32 (s % 2) + l] and bits 2s of qh[32h + l]) with q = u + 28, and
// as Q3_K (110 bytes: hmask[32] (bit e / 32 of hmask[e % 32] = bit 2 of u), qs[64] (the low two
// bits, as Q2_K's), scales[12] (models/loaders/dequant.cpp's packing of sc + 32), d).
void put_q6k(const LowBits& q, uint8_t* dst) {
  std::memset(dst, 0, 192);
  for (int e = 0; e < 256; ++e) {
    const int v = q.u[e] + 28, h = e / 128, s = (e / 32) % 4, l = e % 32;
    dst[64 * h + 32 * (s % 2) + l] |= static_cast<uint8_t>((v & 0x0F) << (4 * (s / 2)));
    dst[128 + 32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * s));
  }
  for (int k = 0; k < 16; ++k) dst[192 + k] = static_cast<uint8_t>(static_cast<int8_t>(q.sc[k]));
  put_u16(dst + 208, q.d);
}
void put_q3k(const LowBits& q, uint8_t* dst, bool keep_top_bit) {
  std::memset(dst, 0, 108);
  for (int e = 0; e < 256; ++e) {
    const int l = e % 32;
    if (keep_top_bit) dst[l] |= static_cast<uint8_t>(((q.u[e] >> 2) & 1) << (e / 32));
    dst[32 + 32 * (e / 128) + l] |= static_cast<uint8_t>((q.u[e] & 3) << (2 * ((e / 32) % 4)));
  }
  for (int k = 0; k < 16; ++k) {
    const int v = q.sc[k] + 32;
    dst[96 + k % 8] |= static_cast<uint8_t>((v & 0x0F) << (k < 8 ? 0 : 4));
    dst[96 + 8 + k % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (k / 4)));
  }
  put_u16(dst + 108, q.d);
}

// Every down projection of m (float32 after dequantize) quantized to `bits` and written as
// `type`; returns the super-blocks written. keep_top_bit = false drops u's top bit (Q2_K, Q3_K).
int64_t low_bit_downs(LoadedModel& m, int bits, GgmlType type, bool keep_top_bit) {
  const uint32_t id = static_cast<uint32_t>(type), bytes = ggml_type_traits(id)->type_size;
  int64_t blocks = 0;
  for (auto& [name, t] : m.weights) {
    if (name.find("down_proj") == std::string::npos || !t.is_packed()) continue;
    std::vector<float> x(static_cast<size_t>(t.numel()));
    dequantize(t.storage_type, t.packed.data(), t.packed.size(), x.data(), x.size(), name);
    std::vector<uint8_t> out(x.size() / 256 * bytes);
    for (size_t b = 0; b < x.size() / 256; ++b, ++blocks) {
      const LowBits q = bits == 2 ? two_bits(x.data() + 256 * b) : three_bits(x.data() + 256 * b);
      uint8_t* dst = out.data() + b * bytes;
      if (type == GgmlType::Q4_K) put_q4k(q, dst);
      else if (type == GgmlType::Q2_K) put_q2k(q, dst, keep_top_bit);
      else if (type == GgmlType::Q6_K) put_q6k(q, dst);
      else put_q3k(q, dst, keep_top_bit);
    }
    t.packed.swap(out);
    t.storage_type = id;
  }
  return blocks;
}

// Every layer matrix of m (float32 after dequantize) at IQ4_NL's 16 levels, each 32-element
// block's scale d = its largest magnitude / -127 (that element on the table's first value, as
// llama.cpp's IQ4_NL does), each element on the nearest table value. Written as IQ4_NL (f16 d, 16
// bytes of indices) or as Q8_0 (f16 d, the table's values as int8): the same values d * v.
// scrambled = true writes IQ4_NL indices xor 1 (a neighbouring level). Returns the blocks written.
// The levels of a matrix are found once per process (the test encodes the same file's matrices
// six times: two types and a broken copy, on two activation paths) and kept by tensor name.
int64_t iq4nl_layers(LoadedModel& m, GgmlType type, bool scrambled) {
  const uint32_t id = static_cast<uint32_t>(type), bytes = ggml_type_traits(id)->type_size;
  struct Levels {
    std::vector<uint16_t> d16;  // per 32-element block
    std::vector<uint8_t> idx;   // per element
  };
  static std::map<std::string, Levels> found;
  int64_t blocks = 0;
  for (auto& [name, t] : m.weights) {
    if (name.find("layers.") == std::string::npos || !t.is_packed()) continue;
    Levels& lv = found[name];
    if (lv.idx.empty()) {
      std::vector<float> x(static_cast<size_t>(t.numel()));
      dequantize(t.storage_type, t.packed.data(), t.packed.size(), x.data(), x.size(), name);
      lv.d16.resize(x.size() / 32);
      lv.idx.resize(x.size());
      for (size_t b = 0; b < x.size() / 32; ++b) {
        const float* xb = x.data() + 32 * b;
        lv.d16[b] = fp32_to_fp16(largest(xb, 32) / -127.f);
        const float d = fp16_to_fp32(lv.d16[b]);
        for (int i = 0; i < 32; ++i) {
          int idx = 0;
          for (int k = 1; k < 16; ++k)
            if (std::fabs(d * kIq4nlValues[k] - xb[i]) < std::fabs(d * kIq4nlValues[idx] - xb[i])) idx = k;
          lv.idx[32 * b + static_cast<size_t>(i)] = static_cast<uint8_t>(idx);
        }
      }
    }
    REQUIRE(lv.idx.size() == static_cast<size_t>(t.numel()));
    std::vector<uint8_t> out(lv.d16.size() * bytes, 0);
    for (size_t b = 0; b < lv.d16.size(); ++b, ++blocks) {
      uint8_t* dst = out.data() + b * bytes;
      put_u16(dst, lv.d16[b]);
      for (int i = 0; i < 32; ++i) {
        const int idx = lv.idx[32 * b + static_cast<size_t>(i)];
        if (type == GgmlType::Q8_0)
          dst[2 + i] = static_cast<uint8_t>(kIq4nlValues[idx]);
        else
          dst[2 + i % 16] |= static_cast<uint8_t>((scrambled ? idx ^ 1 : idx) << (i < 16 ? 0 : 4));
      }
    }
    t.packed.swap(out);
    t.storage_type = id;
  }
  return blocks;
}

// A 256-element super-block at IQ4_XS's levels: a power-of-two d, per 32-element sub-block a
// signed scale sc in -32..31, and per element a table index in [lo, hi] (kIq4nlValues); x =
// (d sc) table[index]. d sc is exact in binary16.
struct Iq4Levels {
  float d = 0.f;
  int sc[8] = {};
  int idx[256] = {};
};

// x's super-block on the levels table[lo..hi]: each sub-block's element of largest magnitude on
// the level of largest magnitude (of its sign), the others on the nearest level.
Iq4Levels iq4_levels(const float* x, int lo, int hi) {
  Iq4Levels q;
  float s[8], smax = 0.f;
  for (int k = 0; k < 8; ++k) {
    s[k] = largest(x + 32 * k, 32) / static_cast<float>(std::abs(kIq4nlValues[lo]) > std::abs(kIq4nlValues[hi]) ? kIq4nlValues[lo]
                                                                                             : kIq4nlValues[hi]);
    smax = std::max(smax, std::fabs(s[k]));
  }
  q.d = smax > 0.f ? std::ldexp(1.f, static_cast<int>(std::ceil(std::log2(smax / 31.f)))) : 0.f;
  for (int k = 0; k < 8; ++k) {
    q.sc[k] = q.d > 0.f ? clampi(std::lround(s[k] / q.d), -32, 31) : 0;
    const float dl = q.d * static_cast<float>(q.sc[k]);
    for (int i = 0; i < 32; ++i) {
      int best = lo;
      for (int v = lo + 1; v <= hi; ++v)
        if (std::fabs(dl * kIq4nlValues[v] - x[32 * k + i]) < std::fabs(dl * kIq4nlValues[best] - x[32 * k + i]))
          best = v;
      q.idx[32 * k + i] = best;
    }
  }
  return q;
}

// The levels as one IQ4_XS block (136 bytes: d, scales_h, scales_l[4], qs[128]; sub-block k's
// element i in nibble i / 16 of qs[16k + i % 16]); scrambled = true writes each ls = sc + 32 xor 1.
void put_iq4xs(const Iq4Levels& q, uint8_t* dst, bool scrambled) {
  std::memset(dst, 0, 136);
  put_u16(dst, fp32_to_fp16(q.d));
  for (int k = 0; k < 8; ++k) {
    const int ls = (q.sc[k] + 32) ^ (scrambled ? 1 : 0);
    dst[4 + k / 2] |= static_cast<uint8_t>((ls & 0x0F) << (4 * (k % 2)));
    const int h = (ls >> 4) << (2 * k);
    dst[2] |= static_cast<uint8_t>(h & 0xFF);
    dst[3] |= static_cast<uint8_t>(h >> 8);
    for (int i = 0; i < 32; ++i) dst[8 + 16 * k + i % 16] |= static_cast<uint8_t>(q.idx[32 * k + i] << (i < 16 ? 0 : 4));
  }
}
// As eight IQ4_NL blocks (18 bytes each: d = d sc, 16 bytes of indices).
void put_iq4nl8(const Iq4Levels& q, uint8_t* dst) {
  std::memset(dst, 0, 8 * 18);
  for (int k = 0; k < 8; ++k) {
    const float dl = q.d * static_cast<float>(q.sc[k]);
    if (fp16_to_fp32(fp32_to_fp16(dl)) != dl) throw std::runtime_error("d sc is not exact in binary16");
    put_u16(dst + 18 * k, fp32_to_fp16(dl));
    for (int i = 0; i < 32; ++i) dst[18 * k + 2 + i % 16] |= static_cast<uint8_t>(q.idx[32 * k + i] << (i < 16 ? 0 : 4));
  }
}
// As one Q6_K block (put_q6k's layout) with q = table value + 32, which must lie in 0..63, and
// 16-element scale 2k and 2k + 1 both sc[k].
void put_q6k_levels(const Iq4Levels& q, uint8_t* dst) {
  std::memset(dst, 0, 192);
  for (int e = 0; e < 256; ++e) {
    const int v = kIq4nlValues[q.idx[e]] + 32, h = e / 128, s = (e / 32) % 4, l = e % 32;
    if (v < 0 || v >= 64) throw std::runtime_error("a level outside Q6_K's range");
    dst[64 * h + 32 * (s % 2) + l] |= static_cast<uint8_t>((v & 0x0F) << (4 * (s / 2)));
    dst[128 + 32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * s));
  }
  for (int k = 0; k < 16; ++k) dst[192 + k] = static_cast<uint8_t>(static_cast<int8_t>(q.sc[k / 2]));
  put_u16(dst + 208, fp32_to_fp16(q.d));
}

// Every down projection of m (float32 after dequantize; the matrices whose rows are whole
// 256-element super-blocks) on IQ4_XS's levels table[lo..hi] (iq4_levels), written as IQ4_XS,
// IQ4_NL (eight blocks per super-block) or Q6_K: the same values. scrambled: put_iq4xs's. Returns
// the super-blocks written. The levels of a matrix are found once per process (by name and table
// range) and kept: each check encodes the same file's matrices several times.
int64_t iq4_level_downs(LoadedModel& m, GgmlType type, bool scrambled, int lo, int hi) {
  const uint32_t id = static_cast<uint32_t>(type);
  const int64_t bytes = type == GgmlType::IQ4_NL ? 8 * 18 : ggml_type_traits(id)->type_size;
  static std::map<std::string, std::vector<Iq4Levels>> found;
  int64_t blocks = 0;
  for (auto& [name, t] : m.weights) {
    if (name.find("down_proj") == std::string::npos || !t.is_packed()) continue;
    std::vector<Iq4Levels>& levels = found[name + " " + std::to_string(lo) + ".." + std::to_string(hi)];
    if (levels.empty()) {
      std::vector<float> x(static_cast<size_t>(t.numel()));
      dequantize(t.storage_type, t.packed.data(), t.packed.size(), x.data(), x.size(), name);
      for (size_t b = 0; b < x.size() / 256; ++b) levels.push_back(iq4_levels(x.data() + 256 * b, lo, hi));
    }
    REQUIRE(levels.size() * 256 == static_cast<size_t>(t.numel()));
    std::vector<uint8_t> out(levels.size() * static_cast<size_t>(bytes));
    for (size_t b = 0; b < levels.size(); ++b, ++blocks) {
      const Iq4Levels& q = levels[b];
      uint8_t* dst = out.data() + b * bytes;
      if (type == GgmlType::IQ4_XS) put_iq4xs(q, dst, scrambled);
      else if (type == GgmlType::IQ4_NL) put_iq4nl8(q, dst);
      else put_q6k_levels(q, dst);
    }
    t.packed.swap(out);
    t.storage_type = id;
  }
  return blocks;
}

// Every layer matrix of m (float32 after dequantize) rounded to `half` (F16: to nearest even; BF16:
// to nearest even in the top 16 bits) and written as `type`: `half` itself, or F32 holding the
// same values. broken = true flips the lowest bit of every 61st element written as `half`.
// Returns the elements written / 32.
int64_t half_layers(LoadedModel& m, GgmlType type, GgmlType half, bool broken) {
  int64_t elements = 0;
  for (auto& [name, t] : m.weights) {
    if (name.find("layers.") == std::string::npos || !t.is_packed()) continue;
    std::vector<float> x(static_cast<size_t>(t.numel()));
    dequantize(t.storage_type, t.packed.data(), t.packed.size(), x.data(), x.size(), name);
    std::vector<uint8_t> out(type == GgmlType::F32 ? 0 : 2 * x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t h;
      if (half == GgmlType::F16) {
        h = fp32_to_fp16(x[i]);
      } else {
        uint32_t b;
        std::memcpy(&b, &x[i], 4);
        h = static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
      }
      if (type == GgmlType::F32) {
        x[i] = half == GgmlType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
      } else {
        if (broken && i % 61 == 0) h ^= 1;
        put_u16(out.data() + 2 * i, h);
      }
    }
    elements += static_cast<int64_t>(x.size());
    if (type == GgmlType::F32) {
      t.data.swap(x);
      t.packed.clear();
      t.storage_type = 0;
    } else {
      t.packed.swap(out);
      t.storage_type = static_cast<uint32_t>(type);
    }
  }
  return elements / 32;
}

// Every packed `from` tensor of m re-encoded as `to`.
Counts reencode(LoadedModel& m, GgmlType from, GgmlType to, bool keep_fifth) {
  const uint32_t from_bytes = ggml_type_traits(static_cast<uint32_t>(from))->type_size;
  const uint32_t to_bytes = ggml_type_traits(static_cast<uint32_t>(to))->type_size;
  Counts c;
  for (auto& [name, t] : m.weights) {
    if (t.storage_type != static_cast<uint32_t>(from)) continue;
    const size_t blocks = t.packed.size() / from_bytes;
    std::vector<uint8_t> out(blocks * to_bytes);
    for (size_t b = 0; b < blocks; ++b) {
      if (to == GgmlType::Q5_1)
        q41_to_q51(t.packed.data() + b * from_bytes, out.data() + b * to_bytes, keep_fifth, c);
      else
        q4k_to_q5k(t.packed.data() + b * from_bytes, out.data() + b * to_bytes, keep_fifth, c);
    }
    t.packed.swap(out);
    t.storage_type = static_cast<uint32_t>(to);
  }
  return c;
}

// Logits [rows, vocab] of a prefill of `prompt`, two decode steps and a 5-token verification
// batch, concatenated in that order, over a fresh float32 cache.
std::vector<at::Tensor> run(const LlamaModel& model, const std::vector<int64_t>& prompt) {
  const ModelConfig& c = model.config();
  const std::vector<std::vector<int64_t>> calls = {prompt, {504}, {3458}, {314, 3575, 282, 4649, 314}};
  int64_t total = 0;
  for (const auto& v : calls) total += static_cast<int64_t>(v.size());
  const at::Tensor k = at::zeros({c.num_hidden_layers, total, c.num_key_value_heads, c.head_dim});
  const at::Tensor v = at::zeros_like(k);
  std::vector<at::Tensor> out;
  int64_t pos = 0;
  for (const auto& toks : calls) {
    const int64_t n = static_cast<int64_t>(toks.size());
    KvView kv;
    kv.k_cache = k;
    kv.v_cache = v;
    kv.write_slots = at::arange(pos, pos + n, at::kLong);
    kv.ctx_len = pos + n;
    kv.read_base = 0;
    out.push_back(model.forward(at::tensor(toks, at::kLong), at::arange(pos, pos + n, at::kLong), kv));
    pos += n;
  }
  return out;
}

bool same_bits(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

// The 4-bit model and its 5-bit re-encoding on both activation paths: same bits; and the
// re-encoding without its fifth bits: different logits (the comparison can fail). The int8 path
// runs at the CPU's best ISA (the VNNI kernels on this project's machines); the float32 path
// under the AVX2 cap, since on AVX-512 CPUs Q4_1's float32-activation kernels are 16-lane and
// Q5_1's 8-lane (gemv.h), another summation order, while at AVX2 both run the same 8-lane sums.
void check_reencoded(const std::string& path, GgmlType from, GgmlType to) {
  struct Restore {
    ~Restore() { set_kernel_isa_cap(kKernelIsaMax); }
  } restore;
  ModelSource src;
  src.path = path;
  src.weights = "native";
  const std::vector<int64_t> prompt = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 2, 198, 1, 4093, 198};
  for (Activations act : {Activations::kF32, Activations::kInt8}) {
    set_kernel_isa_cap(act == Activations::kF32 ? KernelIsa::kAvx2 : kKernelIsaMax);
    INFO(ggml_type_name(static_cast<uint32_t>(to)) << ", activations " << activations_name(act) << ", kernels "
                                                    << kernel_isa_name(kernel_isa()));
    LoadedModel four = load_model(src), five = load_model(src), broken = load_model(src);
    const Counts c = reencode(five, from, to, true);
    reencode(broken, from, to, false);
    INFO(c.blocks << " (sub-)blocks re-encoded, " << c.doubled << " of them with their integers doubled");
    REQUIRE(c.blocks > 0);
    CHECK(c.doubled * 3 >= c.blocks * 2);  // the fifth bit is exercised in most blocks
    const LlamaModel m4(four, act), m5(five, act), mb(broken, act);
    CHECK(m5.weight_storage().find(ggml_type_name(static_cast<uint32_t>(to))) != std::string::npos);
    CHECK(m5.weight_storage().find(ggml_type_name(static_cast<uint32_t>(from))) == std::string::npos);
    const auto y4 = run(m4, prompt), y5 = run(m5, prompt);
    CHECK(same_bits(y4, y5));
    CHECK_FALSE(same_bits(y4, run(mb, prompt)));
  }
}


// SmolLM2 with matrices re-quantized by encode(model, type, broken) -> blocks, as `ref` (a type
// whose kernels the tests above and test_qgemm cover) and as `type`: the same logits bit for bit,
// on both activation paths (or those of `paths`); with broken = true, different ones. The int8 path runs at the CPU's
// best ISA (the two types share the repacked kernels' float steps), the float32 one at `f32_cap`
// (both types' fused kernels 8 lanes wide).
template <class Encode>
void check_same_values(const std::string& what, Encode encode, GgmlType ref, GgmlType type, int64_t blocks,
                       KernelIsa f32_cap,
                       const std::vector<Activations>& paths = {Activations::kF32, Activations::kInt8}) {
  struct Restore {
    ~Restore() { set_kernel_isa_cap(kKernelIsaMax); }
  } restore;
  const std::string path = kModels + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) FAIL("the default model is missing: expected " + path + " (scripts/setup.sh installs it)");
  ModelSource src;
  src.path = path;
  src.weights = "native";
  const std::vector<int64_t> prompt = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 2, 198, 1, 4093, 198};
  for (Activations act : paths) {
    set_kernel_isa_cap(act == Activations::kF32 ? f32_cap : kKernelIsaMax);
    INFO(what << " as " << ggml_type_name(static_cast<uint32_t>(type)) << " vs "
              << ggml_type_name(static_cast<uint32_t>(ref)) << ", activations " << activations_name(act) << ", kernels "
              << kernel_isa_name(kernel_isa()));
    LoadedModel a = load_model(src), b = load_model(src), broken = load_model(src);
    REQUIRE(encode(a, ref, false) == blocks);
    REQUIRE(encode(b, type, false) == blocks);
    encode(broken, type, true);
    const LlamaModel ma(a, act), mb(b, act), mx(broken, act);
    CHECK(mb.weight_storage().find(ggml_type_name(static_cast<uint32_t>(type))) != std::string::npos);
    const auto ya = run(ma, prompt);
    CHECK(same_bits(ya, run(mb, prompt)));
    CHECK_FALSE(same_bits(ya, run(mx, prompt)));
  }
}
}  // namespace

TEST_CASE("Q5_1 weights: SmolLM2's Q4_1 matrices re-encoded as Q5_1 give the same logits bit for bit",
          "[model][q5][smollm2]") {
  const std::string path = kModels + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) FAIL("the default model is missing: expected " + path + " (scripts/setup.sh installs it)");
  check_reencoded(path, GgmlType::Q4_1, GgmlType::Q5_1);
}

TEST_CASE("Q5_K weights: Qwen2.5-Coder-0.5B's Q4_K matrices re-encoded as Q5_K give the same logits bit for bit",
          "[model][q5][qwen]") {
  const std::string path = kModels + "/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
  if (!fs::exists(path)) {
    if (testing::qwen_opted_out()) {
      WARN("SPECLAB_QWEN=0 and the Qwen pair is not installed: skipped");
      return;
    }
    FAIL("the Qwen pair is missing: expected " + path + " (scripts/setup.sh installs it)");
  }
  check_reencoded(path, GgmlType::Q4_K, GgmlType::Q5_K);
}

TEST_CASE("Q2_K weights: SmolLM2's down projections at 2 bits give the same logits as Q4_K of the same integers",
          "[model][k23][smollm2]") {
  check_same_values(
      "down projections at 2 bits",
      [](LoadedModel& m, GgmlType t, bool broken) { return low_bit_downs(m, 2, t, !broken); }, GgmlType::Q4_K,
      GgmlType::Q2_K, 30 * 576 * 1536 / 256, kKernelIsaMax);
}

TEST_CASE("Q3_K weights: SmolLM2's down projections at 3 bits give the same logits as Q6_K of the same integers",
          "[model][k23][smollm2]") {
  check_same_values(
      "down projections at 3 bits",
      [](LoadedModel& m, GgmlType t, bool broken) { return low_bit_downs(m, 3, t, !broken); }, GgmlType::Q6_K,
      GgmlType::Q3_K, 30 * 576 * 1536 / 256, kKernelIsaMax);
}

// Under the AVX2 cap for the float32 path: on AVX-512 CPUs Q8_0's fused kernels are 16 lanes
// wide and IQ4_NL's 8 (gemv.h), another summation order.
TEST_CASE("IQ4_NL weights: SmolLM2's layer matrices at IQ4_NL's levels give the same logits as Q8_0 of the same values",
          "[model][iq4nl][smollm2]") {
  // q/k/v/o, gate/up/down: 30 layers x (576 x (576 + 192 + 192 + 576) + 2 x 1536 x 576 + 576 x 1536) / 32
  check_same_values("layer matrices at IQ4_NL's levels", iq4nl_layers, GgmlType::Q8_0, GgmlType::IQ4_NL,
                    int64_t(30) * (576 * 1536 + 3 * 1536 * 576) / 32, KernelIsa::kAvx2);
}

// IQ4_XS on its five table values -22..25 (indices 6..10) against Q6_K of the same values (q =
// value + 32, each 16-element scale its sub-block's): the integer sums and every float step agree,
// on both activation paths (both types take 256-element activation blocks). And on all 16 of its
// values against IQ4_NL blocks with d sc as their d: the same floats in the same order with float32
// activations (with int8 ones IQ4_NL quantizes the activations per 32 elements, IQ4_XS per 256).
// The negative controls write IQ4_XS's scales one step off.
TEST_CASE("IQ4_XS weights: SmolLM2's down projections at IQ4_XS's levels give the same logits as Q6_K and IQ4_NL of the same values",
          "[model][iq4xs][smollm2]") {
  const int64_t blocks = int64_t(30) * 576 * 1536 / 256;
  check_same_values(
      "down projections on IQ4_XS's levels -22..25",
      [](LoadedModel& m, GgmlType t, bool broken) { return iq4_level_downs(m, t, broken, 6, 10); }, GgmlType::Q6_K,
      GgmlType::IQ4_XS, blocks, kKernelIsaMax);
  check_same_values(
      "down projections on IQ4_XS's 16 levels",
      [](LoadedModel& m, GgmlType t, bool broken) { return iq4_level_downs(m, t, broken, 0, 15); }, GgmlType::IQ4_NL,
      GgmlType::IQ4_XS, blocks, kKernelIsaMax, {Activations::kF32});
}

// F16 and BF16 matrices stay packed (since 2026-12-07) and meet float32 activations whatever
// `activations` says, as float32 matrices do; for n <= 32 rows their fused kernels sum each output
// in the order gemm_small_f32 does (8-lane FMAs along the row, one horizontal sum), so SmolLM2 with
// its layer matrices in either half type gives the logits of the same values held as float32, bit
// for bit, on both settings of `activations`. The negative control flips a low bit in every 61st
// weight.
TEST_CASE("F16 and BF16 weights: SmolLM2's layer matrices as F16 and BF16 give the logits of the same values in float32",
          "[model][f16][smollm2]") {
  const int64_t blocks = int64_t(30) * (576 * 1536 + 3 * 1536 * 576) / 32;
  for (GgmlType half : {GgmlType::F16, GgmlType::BF16})
    check_same_values(
        std::string("layer matrices rounded to ") + ggml_type_name(static_cast<uint32_t>(half)),
        [half](LoadedModel& m, GgmlType t, bool broken) { return half_layers(m, t, half, broken); }, GgmlType::F32,
        half, blocks, kKernelIsaMax);
}
