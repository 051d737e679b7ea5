// safetensors — reader and writer for the HF safetensors file format. Torch-free.
//
// File layout (https://huggingface.co/docs/safetensors):
//   u64 little-endian N | N bytes of JSON header | byte buffer
// The header is a JSON object. The optional key "__metadata__" maps to an object of string
// values; every other key names a tensor: {"dtype": "BF16", "shape": [d0, d1, ...],
// "data_offsets": [begin, end]} with [begin, end) relative to the start of the byte buffer,
// row-major, little-endian. HF pads the header with spaces so that 8 + N is a multiple of 8 and
// lays the tensors out by dtype alignment, then name.
//
// SafetensorsFile::open() validates the whole header against the file size before any tensor
// is read: N <= kMaxHeaderBytes and N <= file size - 8, the header is a JSON object of the shape
// above, dims are non-negative and their product does not overflow, end - begin equals
// numel * dtype size, every range lies inside the byte buffer and no two ranges overlap.
// Any violation throws Error(kBadInput) naming the file and the tensor/field.
// Only F32, F16 and BF16 tensors can be read (as float32); other dtypes parse, but read()
// throws Error(kUnsupported) naming the tensor and its dtype.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/weights.h"

namespace speclab {

// The dtypes SpecLab can read and write.
enum class SafetensorsDtype { kF32, kF16, kBF16 };

const char* to_string(SafetensorsDtype dtype);  // "F32", "F16", "BF16" (the header spelling)
// Parses "F32"/"F16"/"BF16"; throws Error(kUnsupported) naming `source` and `field` otherwise.
SafetensorsDtype parse_safetensors_dtype(const std::string& text, const std::string& source,
                                         const std::string& field);

// One header entry. `dtype` is kept as written so that unsupported dtypes can be reported.
struct SafetensorsTensorInfo {
  std::string dtype;           // e.g. "BF16", "F32", "I64"
  size_t dtype_bytes = 0;      // bytes per element of `dtype`
  std::vector<int64_t> shape;  // outermost first; [] is a scalar
  uint64_t begin = 0;          // data_offsets[0], relative to the byte buffer
  uint64_t end = 0;            // data_offsets[1] (exclusive)

  uint64_t numel() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, as the HF reader

  // Opens `path` and validates its header (see the file comment). Throws Error(kIo) when the
  // file cannot be opened, Error(kBadInput) when the header is malformed.
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_start() const { return data_start_; }  // 8 + N
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsTensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error(kBadInput) naming the file and tensor when absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;

  // Reads one tensor as float32 (F16/BF16 are widened exactly). Throws Error(kBadInput) when
  // absent, Error(kUnsupported) for other dtypes, Error(kIo) when the read comes up short.
  HostTensor read(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  void read_bytes(uint64_t offset, void* dst, uint64_t n, const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensorInfo> tensors_;
};

// Reads every tensor of a file (all must be F32/F16/BF16).
WeightMap read_safetensors(const std::string& path);

// Writes `tensors` converted to `dtype` (round to nearest even for F16/BF16), with the header
// laid out as HF's writer does for a single dtype: "__metadata__" first (omitted when empty),
// tensors in name order with contiguous data_offsets, compact JSON padded with spaces so that
// 8 + N is a multiple of 8. Throws Error(kBadInput) for a tensor whose data size disagrees with
// its shape or a reserved/empty name, Error(kIo) when the file cannot be written.
// `exact` names tensors written as F32 whatever `dtype` (e.g. integer ids a float16 file must keep).
void write_safetensors(const std::string& path, const WeightMap& tensors, SafetensorsDtype dtype,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::vector<std::string>& exact = {});

// Bytes write_safetensors() gives a tensor of `numel` elements.
uint64_t safetensors_tensor_bytes(int64_t numel, SafetensorsDtype dtype);

// IEEE binary16 and bfloat16 <-> float32. Widening is exact (subnormals, inf, NaN kept);
// narrowing rounds to nearest, ties to even, overflows to inf and keeps NaN a quiet NaN.
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);

}  // namespace speclab
