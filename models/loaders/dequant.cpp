#include "models/loaders/dequant.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "framework/core/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "GGUF decoding assumes a little-endian host"
#endif

namespace speclab {

namespace {

constexpr uint32_t kQK = 32;     // elements per block of the 32-element types
constexpr uint32_t kQK_K = 256;  // elements per k-quant super-block

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block sizes and bytes per block as defined by ggml (ggml-common.h block structs).
constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4, true}},
    {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", kQK, 2 + 16, true}},
    {3, {"Q4_1", kQK, 2 + 2 + 16, true}},
    {6, {"Q5_0", kQK, 2 + 4 + 16, true}},
    {7, {"Q5_1", kQK, 2 + 2 + 4 + 16, true}},
    {8, {"Q8_0", kQK, 2 + 32, true}},
    {9, {"Q8_1", kQK, 2 + 2 + 32, false}},
    {10, {"Q2_K", kQK_K, 16 + 64 + 2 + 2, true}},
    {11, {"Q3_K", kQK_K, 32 + 64 + 12 + 2, true}},
    {12, {"Q4_K", kQK_K, 2 + 2 + 12 + 128, true}},
    {13, {"Q5_K", kQK_K, 2 + 2 + 12 + 32 + 128, true}},
    {14, {"Q6_K", kQK_K, 128 + 64 + 16 + 2, true}},
    {15, {"Q8_K", kQK_K, 4 + 256 + 32, true}},
    {16, {"IQ2_XXS", kQK_K, 2 + 64, false}},
    {17, {"IQ2_XS", kQK_K, 2 + 64 + 8, false}},
    {18, {"IQ3_XXS", kQK_K, 2 + 64 + 32, false}},
    {19, {"IQ1_S", kQK_K, 2 + 32 + 16, false}},
    {20, {"IQ4_NL", kQK, 2 + 16, true}},
    {21, {"IQ3_S", kQK_K, 2 + 64 + 32 + 8 + 4, false}},
    {22, {"IQ2_S", kQK_K, 2 + 64 + 16, false}},
    {23, {"IQ4_XS", kQK_K, 2 + 2 + 4 + 128, true}},
    {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},
    {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},
    {29, {"IQ1_M", kQK_K, 32 + 16 + 8, false}},
    {30, {"BF16", 1, 2, true}},
    {34, {"TQ1_0", kQK_K, 2 + 4 * 13, false}},
    {35, {"TQ2_0", kQK_K, 2 + 64, false}},
    {39, {"MXFP4", kQK, 1 + 16, false}},
    {40, {"NVFP4", 64, 4 + 32, false}},
    {41, {"Q1_0", 128, 2 + 16, false}},
};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float load_f16(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }
float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ---- 32-element blocks ----------------------------------------------------------------------
// Low nibbles of qs[0..15] hold elements 0..15, high nibbles elements 16..31.

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// qh is a little-endian 32-bit mask: bit i is the fifth bit of element i.
void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// ---- 256-element super-blocks -----------------------------------------------------------------

// Q2_K: u8 scales[16] (low nibble: scale, high nibble: min of each 16-element sub-block);
// u8 qs[64] (2-bit quants); f16 d; f16 dmin. Element e = 128·h + 32·s + l (h < 2, s < 4,
// l < 32) is bits 2s..2s+1 of qs[32h + l]; x = d·scale·q − dmin·min.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e / 32) % 4, l = e % 32;
    const uint8_t sc = scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0x0F);
    const float ml = dmin * static_cast<float>(sc >> 4);
    const int q = (qs[32 * h + l] >> (2 * s)) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 six-bit scales, offset 32); f16 d.
// Scale k: low 4 bits from scales[k] (k < 8) or scales[k-8] >> 4 (k >= 8); high 2 bits are
// bits 2·(k/4).. of scales[8 + k%4]. Element e = 128·h + 32·s + l: low 2 bits from bits 2s of
// qs[32h + l], and 4 is subtracted when bit (e/32) of hmask[l] is *clear*.
void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = load_f16(b + 108);
  int scale[16];
  for (int k = 0; k < 16; ++k) {
    const int lo = k < 8 ? (sc[k] & 0x0F) : (sc[k - 8] >> 4);
    const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    scale[k] = (lo | (hi << 4)) - 32;
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e / 32) % 4, l = e % 32;
    const int low = (qs[32 * h + l] >> (2 * s)) & 3;
    const int high = (hmask[l] >> (e / 32)) & 1;
    const float dl = d * static_cast<float>(scale[e / 16]);
    y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
  }
}

// The 12-byte packing of eight 6-bit scales and eight 6-bit mins used by Q4_K and Q5_K.
// j < 4: scale = s[j] & 63, min = s[j+4] & 63;
// j >= 4: scale = (s[j+4] & 15) | (s[j-4] >> 6) << 4, min = (s[j+4] >> 4) | (s[j] >> 6) << 4.
void unpack_scale_min_k4(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. Eight 32-element sub-blocks; element
// e = 64·c + 32·h + l is nibble h of qs[32c + l]; x = (d·scale)·q − dmin·min.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int sb = 0; sb < 8; ++sb) {
    int sc, m;
    unpack_scale_min_k4(scales, sb, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const int c = sb / 2, shift = 4 * (sb % 2);
    for (int l = 0; l < 32; ++l)
      y[32 * sb + l] = d1 * static_cast<float>((qs[32 * c + l] >> shift) & 0x0F) - m1;
  }
}

// Q5_K: as Q4_K plus u8 qh[32] before qs: bit (e/32) of qh[e%32] is the fifth bit of element e.
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int sb = 0; sb < 8; ++sb) {
    int sc, m;
    unpack_scale_min_k4(scales, sb, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const int c = sb / 2, shift = 4 * (sb % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[32 * c + l] >> shift) & 0x0F) | (((qh[l] >> sb) & 1) << 4);
      y[32 * sb + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// Q6_K: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Element e = 128·h + 64·k + j (j < 64)
// takes nibble k of ql[64h + j] as its low 4 bits; with e = 128·h + 32·s + l, bits 2s..2s+1 of
// qh[32h + l] are its high 2 bits. x = (d·scales[e/16])·(q − 32).
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e / 64) % 2, j = e % 64, s = (e / 32) % 4, l = e % 32;
    const int low = (ql[64 * h + j] >> (4 * k)) & 0x0F;
    const int high = (qh[32 * h + l] >> (2 * s)) & 3;
    const float dl = d * static_cast<float>(scales[e / 16]);
    y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

// IQ4_NL and IQ4_XS map each 4-bit index through one fixed table (kIq4nlValues, dequant.h):
// x = scale * table[index].

// IQ4_NL: f16 d; u8 qs[16] (element j < 16: low nibble of qs[j]; 16 + j: its high nibble).
void dequant_iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4nlValues[qs[j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
  }
}

// IQ4_XS: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]. Eight 32-element sub-blocks; sub-block
// s has the 6-bit scale ls = nibble s % 2 of scales_l[s / 2] | bits 2s..2s+1 of scales_h << 4,
// and its elements as IQ4_NL's in qs[16s..16s+15]; x = (d·(ls − 32))·table[index].
void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const int scales_h = b[2] | (b[3] << 8);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int s = 0; s < 8; ++s) {
    const int ls = ((scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[32 * s + j] = dl * static_cast<float>(kIq4nlValues[qs[16 * s + j] & 0x0F]);
      y[32 * s + j + 16] = dl * static_cast<float>(kIq4nlValues[qs[16 * s + j] >> 4]);
    }
  }
}

// Q8_K: f32 d; i8 qs[256]; i16 bsums[16] (block sums, only used by dot products).
void dequant_q8_k(const uint8_t* b, float* y) {
  const float d = load_f32(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4);
  for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(qs[j]);
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_decoder(uint32_t id) {
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::Q4_0:
      return dequant_q4_0;
    case GgmlType::Q4_1:
      return dequant_q4_1;
    case GgmlType::Q5_0:
      return dequant_q5_0;
    case GgmlType::Q5_1:
      return dequant_q5_1;
    case GgmlType::Q8_0:
      return dequant_q8_0;
    case GgmlType::Q2_K:
      return dequant_q2_k;
    case GgmlType::Q3_K:
      return dequant_q3_k;
    case GgmlType::Q4_K:
      return dequant_q4_k;
    case GgmlType::Q5_K:
      return dequant_q5_k;
    case GgmlType::Q6_K:
      return dequant_q6_k;
    case GgmlType::Q8_K:
      return dequant_q8_k;
    case GgmlType::IQ4_NL:
      return dequant_iq4_nl;
    case GgmlType::IQ4_XS:
      return dequant_iq4_xs;
    default:
      return nullptr;
  }
}

// ---- encoders (ggml reference round-to-nearest) ----------------------------------------------

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (uint32_t j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, fp32_to_fp16(d));
  for (uint32_t j = 0; j < kQK; ++j) {
    const int8_t q = static_cast<int8_t>(std::round(x[j] * id));  // half away from zero
    std::memcpy(b + 2 + j, &q, 1);
  }
}

void quant_q4_0(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;  // `max` keeps the sign of the largest-magnitude element
  for (uint32_t j = 0; j < kQK; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, fp32_to_fp16(d));
  for (uint32_t j = 0; j < 16; ++j) {
    // Truncation of (v + 8.5) rounds v to nearest; v + 8.5 lies in [0, 16.5].
    const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quant_q4_1(const float* x, uint8_t* b) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (uint32_t j = 0; j < kQK; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, fp32_to_fp16(d));
  store_u16(b + 2, fp32_to_fp16(min));
  for (uint32_t j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
    const int q1 = std::min(15, static_cast<int>((x[j + 16] - min) * id + 0.5f));
    b[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type_id) {
  for (const auto& e : kTypes)
    if (e.id == type_id) return &e.traits;
  return nullptr;
}

std::string ggml_type_name(uint32_t type_id) {
  const GgmlTypeTraits* t = ggml_type_traits(type_id);
  return t ? std::string(t->name) : "type " + std::to_string(type_id);
}

GgmlType ggml_type_from_name(const std::string& name, const std::string& what) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string known;
  for (const auto& e : kTypes) {
    if (upper == e.traits.name) return static_cast<GgmlType>(e.id);
    known += known.empty() ? "" : ", ";
    known += e.traits.name;
  }
  throw Error(ErrorKind::kConfig,
              "unknown ggml type '" + name + "' (expected one of " + known + ")", {}, what);
}

uint64_t ggml_row_bytes(uint32_t type_id, uint64_t n, const std::string& what) {
  const GgmlTypeTraits* t = ggml_type_traits(type_id);
  if (!t)
    throw Error(ErrorKind::kUnsupported, "unknown ggml tensor type id " + std::to_string(type_id),
                {}, what);
  if (n % t->block_size != 0)
    throw Error(ErrorKind::kBadInput,
                std::to_string(n) + " elements are not a multiple of the " + t->name +
                    " block size " + std::to_string(t->block_size),
                {}, what);
  // n / block_size * type_size cannot overflow for n < 2^63 and type_size <= 292 unless the
  // element count is absurd; check anyway.
  const uint64_t blocks = n / t->block_size;
  if (blocks > UINT64_MAX / t->type_size)
    throw Error(ErrorKind::kBadInput, "byte size of " + std::to_string(n) + " elements overflows",
                {}, what);
  return blocks * t->type_size;
}

void dequantize(uint32_t type_id, const uint8_t* src, size_t src_bytes, float* dst, size_t n,
                const std::string& what) {
  const GgmlTypeTraits* t = ggml_type_traits(type_id);
  if (!t || !t->can_dequantize)
    throw Error(ErrorKind::kUnsupported,
                "tensor type " + ggml_type_name(type_id) +
                    " is not supported (supported: " + decodable_type_names() + ")",
                {}, what);
  const uint64_t need = ggml_row_bytes(type_id, n, what);
  if (need != src_bytes)
    throw Error(ErrorKind::kBadInput,
                std::string(t->name) + " data of " + std::to_string(n) + " elements: expected " +
                    std::to_string(need) + " bytes, found " + std::to_string(src_bytes),
                {}, what);
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(src + 2 * i));
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(src + 2 * i));
      return;
    default:
      break;
  }
  const BlockFn fn = block_decoder(type_id);
  SPECLAB_CHECK(fn != nullptr, "no block decoder for " + ggml_type_name(type_id));
  const size_t blocks = n / t->block_size;
  for (size_t i = 0; i < blocks; ++i) fn(src + i * t->type_size, dst + i * t->block_size);
}

std::vector<uint8_t> quantize(GgmlType type, const float* src, size_t n, const std::string& what) {
  const uint32_t id = static_cast<uint32_t>(type);
  if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::Q8_0 &&
      type != GgmlType::Q4_0 && type != GgmlType::Q4_1)
    throw Error(
        ErrorKind::kUnsupported,
        "cannot encode as " + ggml_type_name(id) + " (expected one of F32, F16, Q8_0, Q4_0, Q4_1)",
        {}, what);
  const uint64_t bytes = ggml_row_bytes(id, n, what);
  if (type != GgmlType::F32 && type != GgmlType::F16)
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(src[i]))
        throw Error(ErrorKind::kBadInput,
                    "cannot encode a non-finite value (element " + std::to_string(i) + ") as " +
                        ggml_type_name(id),
                    {}, what);
  std::vector<uint8_t> out(bytes);
  uint8_t* dst = out.data();
  const size_t blocks = n / kQK;
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      break;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) store_u16(dst + 2 * i, fp32_to_fp16(src[i]));
      break;
    case GgmlType::Q8_0:
      for (size_t i = 0; i < blocks; ++i) quant_q8_0(src + i * kQK, dst + i * 34);
      break;
    case GgmlType::Q4_0:
      for (size_t i = 0; i < blocks; ++i) quant_q4_0(src + i * kQK, dst + i * 18);
      break;
    default:  // Q4_1
      for (size_t i = 0; i < blocks; ++i) quant_q4_1(src + i * kQK, dst + i * 20);
      break;
  }
  return out;
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant · 2^-24, exactly representable in binary32.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf or NaN (payload kept)
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
  if (abs == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00);
  const int e = static_cast<int>(abs >> 23) - 127;  // unbiased binary32 exponent
  if (e >= 16) return static_cast<uint16_t>(sign | 0x7C00);
  if (e >= -14) {
    // Normal half: keep 10 mantissa bits, round the 13 dropped bits to nearest even. A carry
    // out of the mantissa correctly bumps the exponent (up to inf).
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | ((abs >> 13) & 0x3FF);
    const uint32_t rest = abs & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half: value / 2^-24 = m · 2^(e+1) with m the 24-bit significand.
  const int shift = -(e + 1);  // >= 14
  if (shift > 24) return sign;
  const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool is_packable(uint32_t type_id) {
  const auto t = static_cast<GgmlType>(type_id);
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0 || t == GgmlType::IQ4_NL || t == GgmlType::Q2_K || t == GgmlType::Q3_K ||
         t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS ||
         t == GgmlType::F16 || t == GgmlType::BF16;
}

bool is_int8_packable(uint32_t type_id) {
  const auto t = static_cast<GgmlType>(type_id);
  return is_packable(type_id) && t != GgmlType::F16 && t != GgmlType::BF16;
}

bool packable_row(uint32_t type_id, int64_t row_length) {
  const auto t = static_cast<GgmlType>(type_id);
  if (!is_packable(type_id) || row_length <= 0) return false;
  return (t != GgmlType::F16 && t != GgmlType::BF16) || row_length % 32 == 0;
}

std::string decodable_type_names() {
  std::string s;
  for (const auto& e : kTypes)
    if (e.traits.can_dequantize) s += (s.empty() ? "" : ", ") + std::string(e.traits.name);
  return s;
}

std::string packable_type_names() {
  std::string s;
  for (uint32_t id = 0; id < 64; ++id)
    if (is_packable(id)) s += (s.empty() ? "" : ", ") + ggml_type_name(id);
  return s;
}

std::string int8_packable_type_names() {
  std::string s;
  for (uint32_t id = 0; id < 64; ++id)
    if (is_int8_packable(id)) s += (s.empty() ? "" : ", ") + ggml_type_name(id);
  return s;
}

void unpack_to_f32(HostTensor& t, const std::string& what) {
  if (!t.is_packed()) return;
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dequantize(t.storage_type, t.packed.data(), t.packed.size(), out.data(), out.size(), what);
  t.data.swap(out);
  t.packed.clear();
  t.packed.shrink_to_fit();
  t.storage_type = 0;
}

}  // namespace speclab
