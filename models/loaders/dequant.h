// GGML tensor storage types: their block layouts, decoding to float32 and (for a few)
// encoding from float32.
//
// A ggml type stores a row of elements as consecutive blocks: `block_size` elements packed
// into `type_size` bytes (F32: 1 element in 4 bytes; Q4_1: 32 elements in 20 bytes; Q6_K: 256
// elements in 210 bytes). All multi-byte fields are little-endian; "f16" is IEEE binary16.
//
// Decoded (dequantize) types and their block layouts (element index i within a block):
//   F32, F16, BF16        plain scalars
//   Q4_0   f16 d; u8 qs[16]                x[i] = d·(nibble_i − 8)
//   Q4_1   f16 d, m; u8 qs[16]             x[i] = d·nibble_i + m
//   Q5_0   f16 d; u8 qh[4]; u8 qs[16]      x[i] = d·(nibble_i | bit_i(qh)<<4 − 16)
//   Q5_1   f16 d, m; u8 qh[4]; u8 qs[16]   x[i] = d·(nibble_i | bit_i(qh)<<4) + m
//   Q8_0   f16 d; i8 qs[32]                x[i] = d·qs[i]
//          (nibble_i: low nibbles of qs[0..15] are elements 0..15, high nibbles 16..31)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K           256-element super-blocks with 6/8-bit sub-block
//                                          scales (layouts in dequant.cpp)
//   Q8_K   f32 d; i8 qs[256]; i16 bsums[16]  x[i] = d·qs[i]
//   IQ4_NL f16 d; u8 qs[16]                x[i] = d·table[nibble_i] (a fixed table of 16 int8)
//   IQ4_XS 256-element super-blocks of eight IQ4_NL-like sub-blocks with 6-bit scales
// Every other ggml type (IQ2/IQ3/IQ1, TQ*, MXFP4, I8.., F64, ...) is recognised by name and size so
// that a file holding it parses, but dequantize() throws Error(kUnsupported) naming it.
//
// Encoders (quantize) follow ggml's reference round-to-nearest quantize_row_*_ref, so their
// bytes match ggml and the `gguf` Python package: F32, F16 (round to nearest even), Q8_0,
// Q4_0, Q4_1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/weights.h"

namespace speclab {

// Values are the ggml/GGUF type ids (ggml.h `enum ggml_type`). Ids 4, 5, 31-33 and 36-38
// were removed from ggml and are not members.
// clang-format off
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};
// clang-format on

struct GgmlTypeTraits {
  const char* name;     // "Q4_1"
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
  bool can_dequantize;  // dequantize() supports it
};

// Traits of a known type id, or nullptr for an id ggml does not (or no longer) define.
const GgmlTypeTraits* ggml_type_traits(uint32_t type_id);
// "Q4_1" for known ids, "type <id>" otherwise.
std::string ggml_type_name(uint32_t type_id);
// Parses a name such as "Q8_0" or "q8_0" (case-insensitive). Throws Error(kConfig) naming `what` if
// unknown.
GgmlType ggml_type_from_name(const std::string& name, const std::string& what);

// Bytes needed to store `n` elements of `type`. Throws Error(kBadInput) naming `what` when n is
// not a multiple of the block size, Error(kUnsupported) for an unknown id.
uint64_t ggml_row_bytes(uint32_t type_id, uint64_t n, const std::string& what);

// Decodes `n` elements (a multiple of the block size) from `src` (exactly
// ggml_row_bytes(type, n) bytes, `src_bytes`) into `dst[0..n)`. `what` names the tensor in
// errors. Throws Error(kUnsupported) "<what>: tensor type IQ2_XXS is not supported" for types
// it cannot decode, Error(kBadInput) on a size mismatch.
void dequantize(uint32_t type_id, const uint8_t* src, size_t src_bytes, float* dst, size_t n,
                const std::string& what);

// Encodes `n` floats (a multiple of the block size) as `type`, which must be F32, F16, Q8_0,
// Q4_0 or Q4_1 (else Error(kUnsupported)).
std::vector<uint8_t> quantize(GgmlType type, const float* src, size_t n, const std::string& what);

// IQ4_NL's and IQ4_XS's 16 values (ggml's kvalues_iq4nl): a 4-bit index i stands for
// scale * kIq4nlValues[i], a grid denser near zero, where weights are.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Types the model keeps packed (HostTensor::is_packed) and multiplies with fused decoding
// kernels on float32 activations (models/llama/gemv.h: gemm_packed_supports takes exactly these):
// F16, BF16 (where a row is a multiple of 32 elements: packable_row), Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool is_packable(uint32_t type_id);
// The quantized ones among them, which int8 activations multiply (models/llama/qgemm.h,
// qgemm_x8.h: int8_gemm_supports takes exactly these): all but F16 and BF16, whose matrices
// always meet float32 activations.
bool is_int8_packable(uint32_t type_id);
// Whether a matrix of `type_id` with rows of `row_length` elements is kept packed: is_packable,
// and for F16 and BF16 a row length that is a multiple of 32 (the kernels' block).
bool packable_row(uint32_t type_id, int64_t row_length);
// Their names, "F16, Q4_0, ..., BF16", and the int8 ones', for error messages.
std::string packable_type_names();
std::string int8_packable_type_names();
// The names of every type dequantize() decodes, in type-id order, for error messages.
std::string decodable_type_names();
// Decodes a packed HostTensor to float32 in place (no-op for a float32 one); `what` names it in
// errors.
void unpack_to_f32(HostTensor& t, const std::string& what);

// IEEE binary16 / bfloat16 <-> binary32. fp32_to_fp16 rounds to nearest even (overflow -> inf,
// NaN stays NaN); fp16_to_fp32 and bf16_to_fp32 are exact.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);

}  // namespace speclab
