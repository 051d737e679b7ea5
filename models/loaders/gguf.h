// GGUF reader and writer (little-endian GGUF v2 and v3, the llama.cpp model file format).
//
// File layout (all integers little-endian):
//   u32 magic "GGUF" · u32 version · u64 tensor_count · u64 metadata_kv_count
//   metadata_kv_count × { string key · u32 value_type · value }
//   tensor_count × { string name · u32 n_dims · u64 dims[n_dims] · u32 ggml_type · u64 offset }
//   zero padding to `general.alignment` (default 32) · tensor data section
// where string = u64 length + UTF-8 bytes, and an array value = u32 element type · u64 count ·
// elements (elements may themselves be arrays). `dims` are innermost (contiguous) first, the
// reverse of PyTorch order; `offset` is relative to the data section and a multiple of the
// alignment.
//
// read_gguf() maps the file (mmap) and validates everything before use: every count, length
// and offset is bounded by the file size before anything is allocated or read, the element
// count of a tensor may not overflow, its data range must lie inside the file, keys and tensor
// names must be unique. Any violation throws speclab::Error naming the file and the field or
// tensor, e.g. "model.gguf: tensor blk.3.attn_q.weight: data range [a, b) exceeds file size N".
// GGUF v1 and big-endian files throw Error(kUnsupported). Tensor types unknown to ggml throw
// Error(kUnsupported) at parse time; known types that SpecLab cannot decode (IQ2_XXS, ...) parse
// fine and throw only when dequantized.
//
// write_gguf() writes the same layout, byte for byte as the `gguf` Python package's GGUFWriter
// does for the same keys and tensors (tensor data padded to the alignment after each tensor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/loaders/dequant.h"
#include "models/weights.h"

namespace speclab {

// GGUF metadata value types (gguf_type in ggml/gguf.h).
// clang-format off
enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
// clang-format on
// "uint32", "string", "array", ...; "value type <n>" for an unknown id.
std::string gguf_value_type_name(uint32_t type);

// An array value. Elements are stored widened by kind; exactly one vector is used, selected by
// `type`: UINT8/16/32/64 and BOOL -> uints, INT8/16/32/64 -> ints, FLOAT32/64 -> floats,
// STRING -> strings, ARRAY -> arrays.
struct GgufArray {
  GgufValueType type = GgufValueType::UINT8;  // element type
  std::vector<uint64_t> uints;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufArray> arrays;

  size_t size() const;
  static GgufArray of_strings(std::vector<std::string> v);
  static GgufArray of_float32(const std::vector<float>& v);
  static GgufArray of_int32(const std::vector<int32_t>& v);
  // Generic: `type` must match the vector's kind (checked by write_gguf).
  static GgufArray of_uints(GgufValueType type, std::vector<uint64_t> v);
  static GgufArray of_ints(GgufValueType type, std::vector<int64_t> v);
  static GgufArray of_floats(GgufValueType type, std::vector<double> v);
  static GgufArray of_arrays(std::vector<GgufArray> v);
};

// One metadata value. Scalars are stored widened (u for unsigned and bool, i for signed, f for
// float32/float64: float32 -> double -> float32 is exact); `type` keeps the on-disk type.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  GgufArray a;

  static GgufValue u8(uint8_t v);
  static GgufValue i8(int8_t v);
  static GgufValue u16(uint16_t v);
  static GgufValue i16(int16_t v);
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue i64(int64_t v);
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v);
  static GgufValue str(std::string v);
  static GgufValue array(GgufArray v);

  // "uint32", "string", "array of string", ...
  std::string type_description() const;
};

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;  // in file order

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order: innermost (contiguous) first
  uint32_t type = 0;           // ggml type id (GgmlType)
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_elements = 0;     // product of dims
  uint64_t n_bytes = 0;        // ggml_row_bytes(type, n_elements)

  std::vector<int64_t> shape() const;  // PyTorch order: dims reversed
  std::string type_name() const { return ggml_type_name(type); }
};

class GgufBytes;  // the mapped file (or an owned buffer); defined in gguf.cpp

class GgufFile {
 public:
  std::string path;          // as given; used in every error message
  uint32_t version = 0;      // 2 or 3
  uint32_t alignment = 32;   // general.alignment
  uint64_t data_offset = 0;  // absolute file offset of the tensor data section
  uint64_t file_size = 0;
  GgufMetadata metadata;                // in file order
  std::vector<GgufTensorInfo> tensors;  // in file order

  // Metadata lookup: nullptr when absent.
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed accessors. Without a fallback a missing key throws Error(kBadInput) "<path>: <key>:
  // required key is missing"; a wrong type always throws "<path>: <key>: expected an integer,
  // found string". get_int accepts any integer type (range-checked into int64), get_float
  // float32/float64.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;    // float32/float64 elements
  std::vector<int32_t> get_int32_array(const std::string& key) const;  // any integer elements

  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  // The tensor's raw bytes inside the mapping (info.n_bytes of them); valid while this
  // GgufFile (or a copy of it) lives.
  const uint8_t* tensor_data(const GgufTensorInfo& info) const;
  // Decodes the tensor to float32 in PyTorch shape order. Throws Error(kUnsupported) naming
  // the file, tensor and type for types dequantize() cannot decode.
  HostTensor load_tensor(const GgufTensorInfo& info) const;

 private:
  friend GgufFile parse_gguf(std::shared_ptr<const GgufBytes> bytes, const std::string& path);
  std::shared_ptr<const GgufBytes> bytes_;
  std::unordered_map<std::string, size_t> key_index_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Maps and parses `path`. Throws Error(kIo) if it cannot be opened, Error(kBadInput) /
// Error(kUnsupported) as described above.
GgufFile read_gguf(const std::string& path);
// Parses an in-memory copy (tests, fuzzing); `name` stands in for the path in errors.
GgufFile read_gguf_buffer(std::vector<uint8_t> bytes, const std::string& name);

// A tensor to write. `data` is not owned and must hold product(shape) floats until
// write_gguf returns. The innermost dimension must be a multiple of the type's block size.
struct GgufTensorToWrite {
  std::string name;
  std::vector<int64_t> shape;     // PyTorch order (outermost first), 1 to 4 dims
  GgmlType type = GgmlType::F32;  // F32, F16, Q8_0, Q4_0 or Q4_1
  const float* data = nullptr;
};

// Writes a GGUF v3 file. The alignment is `general.alignment` from `metadata` when present
// (a uint32 power of two), else 32. Throws Error(kBadInput) naming the key or tensor for
// duplicate names, a value out of its type's range, an array whose elements disagree with its
// type, or a bad shape; Error(kIo) if the file cannot be written. The file is written to
// "<path>.tmp.<pid>" and renamed, so a failed write never leaves a partial file at `path`, and two
// processes writing the same path each rename a whole file of their own.
void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorToWrite>& tensors);

}  // namespace speclab
