#include "models/loaders/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "framework/core/error.h"
#include "framework/core/replace_file.h"

namespace speclab {

// ---- the bytes of a file ------------------------------------------------------------------------

class GgufBytes {
 public:
  virtual ~GgufBytes() = default;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 protected:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

namespace {

class MappedBytes : public GgufBytes {
 public:
  explicit MappedBytes(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw Error(ErrorKind::kIo, std::string("cannot open: ") + std::strerror(errno), path);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorKind::kIo, std::string("cannot stat: ") + std::strerror(err), path);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(ErrorKind::kIo, "not a regular file", path);
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw Error(ErrorKind::kIo, std::string("cannot mmap: ") + std::strerror(err), path);
      }
      map_ = p;
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~MappedBytes() override {
    if (map_) ::munmap(map_, size_);
  }
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;

 private:
  void* map_ = nullptr;
};

class OwnedBytes : public GgufBytes {
 public:
  explicit OwnedBytes(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {
    data_ = bytes_.data();
    size_ = bytes_.size();
  }

 private:
  std::vector<uint8_t> bytes_;
};

constexpr uint32_t kMaxDims = 4;      // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 16;  // deeper nesting is rejected (no recursion blow-up)
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kNumValueTypes = 13;

// The smallest encoding of one element of a value type: bounds array counts by the bytes left.
uint64_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
      return 8;
    case GgufValueType::STRING:
      return 8;  // u64 length
    case GgufValueType::ARRAY:
      return 12;  // u32 type + u64 count
  }
  return 1;
}

enum class Kind { kUint, kInt, kFloat, kString, kArray };
Kind kind_of(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64:
    case GgufValueType::BOOL:
      return Kind::kUint;
    case GgufValueType::INT8:
    case GgufValueType::INT16:
    case GgufValueType::INT32:
    case GgufValueType::INT64:
      return Kind::kInt;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      return Kind::kFloat;
    case GgufValueType::STRING:
      return Kind::kString;
    case GgufValueType::ARRAY:
      return Kind::kArray;
  }
  return Kind::kUint;
}

// Names a field lazily: error messages are only formatted when something is wrong.
struct Field {
  const std::string* key = nullptr;  // metadata key or tensor name
  const char* prefix = "";           // "tensor " for tensors
  const char* part = nullptr;        // "(length)", "dims", ...
  std::vector<uint64_t> index;       // array indices, outermost first

  std::string str() const {
    std::string s = prefix;
    if (key) s += *key;
    for (uint64_t i : index) s += "[" + std::to_string(i) + "]";
    if (part) s += std::string(key || !index.empty() ? " " : "") + part;
    return s;
  }
};

class Parser {
 public:
  Parser(const GgufBytes& bytes, const std::string& path)
      : data_(bytes.data()), size_(bytes.size()), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(ErrorKind kind, const std::string& message, const Field& field) const {
    throw Error(kind, message, path_, field.str());
  }

  void need(uint64_t n, const Field& field) const {
    if (n > remaining())
      fail(ErrorKind::kBadInput,
           "file is truncated: " + std::to_string(n) + " bytes needed at offset " +
               std::to_string(pos_) + ", but the file has " + std::to_string(size_) + " bytes",
           field);
  }

  template <class T>
  T read(const Field& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const Field& field) {
    Field len_field = field;
    len_field.part = "(string length)";
    const uint64_t len = read<uint64_t>(len_field);
    if (len > remaining())
      fail(ErrorKind::kBadInput,
           "string length " + std::to_string(len) + " at offset " + std::to_string(pos_ - 8) +
               " exceeds the " + std::to_string(remaining()) + " bytes left in the file",
           field);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  GgufValueType read_value_type(const Field& field) {
    Field f = field;
    f.part = "(value type)";
    const uint32_t t = read<uint32_t>(f);
    if (t >= kNumValueTypes)
      fail(ErrorKind::kBadInput,
           "unknown metadata value type " + std::to_string(t) + " (expected 0..12)", field);
    return static_cast<GgufValueType>(t);
  }

  GgufValue read_value(GgufValueType type, const Field& field) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufValueType::UINT8:
        v.u = read<uint8_t>(field);
        break;
      case GgufValueType::INT8:
        v.i = read<int8_t>(field);
        break;
      case GgufValueType::UINT16:
        v.u = read<uint16_t>(field);
        break;
      case GgufValueType::INT16:
        v.i = read<int16_t>(field);
        break;
      case GgufValueType::UINT32:
        v.u = read<uint32_t>(field);
        break;
      case GgufValueType::INT32:
        v.i = read<int32_t>(field);
        break;
      case GgufValueType::UINT64:
        v.u = read<uint64_t>(field);
        break;
      case GgufValueType::INT64:
        v.i = read<int64_t>(field);
        break;
      case GgufValueType::FLOAT32:
        v.f = read<float>(field);
        break;
      case GgufValueType::FLOAT64:
        v.f = read<double>(field);
        break;
      case GgufValueType::BOOL:
        v.u = read<uint8_t>(field) != 0 ? 1 : 0;
        break;
      case GgufValueType::STRING:
        v.s = read_string(field);
        break;
      case GgufValueType::ARRAY:
        v.a = read_array(field, 0);
        break;
    }
    return v;
  }

  GgufArray read_array(const Field& field, int depth) {
    if (depth >= kMaxArrayNesting)
      fail(ErrorKind::kBadInput,
           "arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels", field);
    GgufArray a;
    a.type = read_value_type(field);
    Field count_field = field;
    count_field.part = "(array length)";
    const uint64_t n = read<uint64_t>(count_field);
    const uint64_t min_size = min_encoded_size(a.type);
    if (n > remaining() / min_size)
      fail(
          ErrorKind::kBadInput,
          "array length " + std::to_string(n) + " of " +
              gguf_value_type_name(static_cast<uint32_t>(a.type)) + " needs at least " +
              (n > std::numeric_limits<uint64_t>::max() / min_size ? std::string("2^64")
                                                                   : std::to_string(n * min_size)) +
              " bytes, but only " + std::to_string(remaining()) + " are left in the file",
          field);
    Field item = field;
    item.index.push_back(0);
    switch (kind_of(a.type)) {
      case Kind::kUint:
        a.uints.reserve(n);
        for (uint64_t k = 0; k < n; ++k) a.uints.push_back(read_scalar_uint(a.type, item, k));
        break;
      case Kind::kInt:
        a.ints.reserve(n);
        for (uint64_t k = 0; k < n; ++k) a.ints.push_back(read_scalar_int(a.type, item, k));
        break;
      case Kind::kFloat:
        a.floats.reserve(n);
        for (uint64_t k = 0; k < n; ++k) {
          item.index.back() = k;
          a.floats.push_back(a.type == GgufValueType::FLOAT32 ? read<float>(item)
                                                              : read<double>(item));
        }
        break;
      case Kind::kString:
        a.strings.reserve(n);
        for (uint64_t k = 0; k < n; ++k) {
          item.index.back() = k;
          a.strings.push_back(read_string(item));
        }
        break;
      case Kind::kArray:
        a.arrays.reserve(n);
        for (uint64_t k = 0; k < n; ++k) {
          item.index.back() = k;
          a.arrays.push_back(read_array(item, depth + 1));
        }
        break;
    }
    return a;
  }

 private:
  uint64_t read_scalar_uint(GgufValueType t, Field& item, uint64_t k) {
    item.index.back() = k;
    switch (t) {
      case GgufValueType::UINT8:
        return read<uint8_t>(item);
      case GgufValueType::UINT16:
        return read<uint16_t>(item);
      case GgufValueType::UINT32:
        return read<uint32_t>(item);
      case GgufValueType::BOOL:
        return read<uint8_t>(item) != 0 ? 1 : 0;
      default:
        return read<uint64_t>(item);
    }
  }
  int64_t read_scalar_int(GgufValueType t, Field& item, uint64_t k) {
    item.index.back() = k;
    switch (t) {
      case GgufValueType::INT8:
        return read<int8_t>(item);
      case GgufValueType::INT16:
        return read<int16_t>(item);
      case GgufValueType::INT32:
        return read<int32_t>(item);
      default:
        return read<int64_t>(item);
    }
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

}  // namespace

// ---- parsing ------------------------------------------------------------------------------------

GgufFile parse_gguf(std::shared_ptr<const GgufBytes> bytes, const std::string& path) {
  GgufFile file;
  file.path = path;
  file.file_size = bytes->size();
  Parser in(*bytes, path);

  Field header;
  header.part = "header";
  if (bytes->size() < 4)
    throw Error(ErrorKind::kBadInput,
                "not a GGUF file: " + std::to_string(bytes->size()) +
                    " bytes is too short for the magic 'GGUF'",
                path);
  if (std::memcmp(bytes->data(), "GGUF", 4) != 0)
    throw Error(ErrorKind::kBadInput,
                "not a GGUF file: expected magic 'GGUF' (47 47 55 46), found " +
                    hex_bytes(bytes->data(), 4),
                path);
  in.read<uint32_t>(header);
  Field version_field;
  version_field.part = "version";
  file.version = in.read<uint32_t>(version_field);
  if (file.version == 1)
    throw Error(ErrorKind::kUnsupported,
                "GGUF version 1 is not supported (expected 2 or 3; re-convert the model with a "
                "current llama.cpp)",
                path, "version");
  if (file.version != 0 && (file.version & 0xFFFF) == 0)
    throw Error(ErrorKind::kUnsupported,
                "big-endian GGUF files are not supported (version field reads " +
                    std::to_string(file.version) + ")",
                path, "version");
  if (file.version != 2 && file.version != 3)
    throw Error(
        ErrorKind::kUnsupported,
        "GGUF version " + std::to_string(file.version) + " is not supported (expected 2 or 3)",
        path, "version");

  Field count_field;
  count_field.part = "tensor_count";
  const uint64_t n_tensors = in.read<uint64_t>(count_field);
  count_field.part = "metadata_kv_count";
  const uint64_t n_kv = in.read<uint64_t>(count_field);
  // Each key/value takes at least 13 bytes (key length, type, a 1-byte value) and each tensor
  // info at least 24 (name length, n_dims, type, offset).
  if (n_kv > in.remaining() / 13)
    throw Error(ErrorKind::kBadInput,
                std::to_string(n_kv) + " metadata entries cannot fit in the " +
                    std::to_string(in.remaining()) + " bytes left in the file",
                path, "metadata_kv_count");
  if (n_tensors > in.remaining() / 24)
    throw Error(ErrorKind::kBadInput,
                std::to_string(n_tensors) + " tensor infos cannot fit in the " +
                    std::to_string(in.remaining()) + " bytes left in the file",
                path, "tensor_count");

  file.metadata.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string index_name = "metadata entry #" + std::to_string(k);
    Field key_field;
    key_field.key = &index_name;
    key_field.part = "key";
    std::string key = in.read_string(key_field);
    Field value_field;
    value_field.key = &key;
    const GgufValueType type = in.read_value_type(value_field);
    GgufValue value = in.read_value(type, value_field);
    if (!file.key_index_.emplace(key, file.metadata.size()).second)
      throw Error(ErrorKind::kBadInput, "duplicate metadata key", path, key);
    file.metadata.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = file.find("general.alignment")) {
    if (a->type != GgufValueType::UINT32)
      throw Error(ErrorKind::kBadInput, "expected uint32, found " + a->type_description(), path,
                  "general.alignment");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      throw Error(ErrorKind::kBadInput,
                  "expected a non-zero power of two, found " + std::to_string(a->u), path,
                  "general.alignment");
    file.alignment = static_cast<uint32_t>(a->u);
  } else {
    file.alignment = kDefaultAlignment;
  }

  file.tensors.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo info;
    const std::string index_name = "tensor #" + std::to_string(k);
    Field f;
    f.key = &index_name;
    f.part = "name";
    info.name = in.read_string(f);
    f.key = &info.name;
    f.prefix = "tensor ";
    f.part = "n_dims";
    const uint32_t n_dims = in.read<uint32_t>(f);
    if (n_dims > kMaxDims)
      in.fail(ErrorKind::kBadInput,
              "expected at most " + std::to_string(kMaxDims) + " dimensions, found " +
                  std::to_string(n_dims),
              f);
    f.part = "dims";
    info.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = in.read<uint64_t>(f);
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        in.fail(ErrorKind::kBadInput,
                "dimension " + std::to_string(d) + " is " + std::to_string(dim) +
                    ", more than 2^63 - 1",
                f);
      if (dim != 0 &&
          info.n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)
        in.fail(ErrorKind::kBadInput, "the element count (product of the dimensions) overflows", f);
      info.n_elements *= dim;
      info.dims.push_back(dim);
    }
    f.part = nullptr;
    Field type_field = f;
    type_field.part = "type";
    info.type = in.read<uint32_t>(type_field);
    const GgmlTypeTraits* traits = ggml_type_traits(info.type);
    if (!traits)
      in.fail(ErrorKind::kUnsupported,
              "unknown ggml tensor type id " + std::to_string(info.type) +
                  " (removed from ggml or newer than SpecLab)",
              f);
    const uint64_t row = info.dims.empty() ? 1 : info.dims[0];
    if (row % traits->block_size != 0)
      in.fail(ErrorKind::kBadInput,
              "innermost dimension " + std::to_string(row) + " is not a multiple of the " +
                  traits->name + " block size " + std::to_string(traits->block_size),
              f);
    // n_elements < 2^63, but a 1-element block of 2 to 8 bytes (F16, F32, F64, I64, ...) can
    // still carry the byte count past 2^64: a wrapped count passed the data-range check below.
    if (__builtin_mul_overflow(info.n_elements / traits->block_size, static_cast<uint64_t>(traits->type_size),
                               &info.n_bytes) ||
        info.n_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      in.fail(ErrorKind::kBadInput,
              "the byte count (" + std::to_string(info.n_elements) + " " + traits->name +
                  " elements) overflows",
              f);
    Field offset_field = f;
    offset_field.part = "offset";
    info.offset = in.read<uint64_t>(offset_field);
    if (!file.tensor_index_.emplace(info.name, file.tensors.size()).second)
      in.fail(ErrorKind::kBadInput, "duplicate tensor name", f);
    file.tensors.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment (pos <= size, no overflow).
  const uint64_t a = file.alignment;
  file.data_offset = (in.pos() + a - 1) / a * a;
  const uint64_t size = file.file_size;
  for (const GgufTensorInfo& t : file.tensors) {
    const std::string field = "tensor " + t.name;
    if (t.offset % a != 0)
      throw Error(ErrorKind::kBadInput,
                  "data offset " + std::to_string(t.offset) +
                      " is not a multiple of the alignment " + std::to_string(a),
                  path, field);
    uint64_t begin = 0, end = 0;
    const bool overflow = __builtin_add_overflow(file.data_offset, t.offset, &begin) ||
                          __builtin_add_overflow(begin, t.n_bytes, &end);
    if (overflow || end > size) {
      const std::string range =
          overflow ? "[" + std::to_string(file.data_offset) + " + " + std::to_string(t.offset) +
                         ", +" + std::to_string(t.n_bytes) + " bytes)"
                   : "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
      throw Error(ErrorKind::kBadInput,
                  "data range " + range + " exceeds file size " + std::to_string(size), path,
                  field);
    }
  }
  file.bytes_ = std::move(bytes);
  return file;
}

GgufFile read_gguf(const std::string& path) {
  return parse_gguf(std::make_shared<MappedBytes>(path), path);
}

GgufFile read_gguf_buffer(std::vector<uint8_t> bytes, const std::string& name) {
  return parse_gguf(std::make_shared<OwnedBytes>(std::move(bytes)), name);
}

// ---- values
// ---------------------------------------------------------------------------------------

std::string gguf_value_type_name(uint32_t type) {
  static const char* names[kNumValueTypes] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                              "int32",  "float32", "bool",   "string", "array",
                                              "uint64", "int64",   "float64"};
  return type < kNumValueTypes ? names[type] : "value type " + std::to_string(type);
}

size_t GgufArray::size() const {
  switch (kind_of(type)) {
    case Kind::kUint:
      return uints.size();
    case Kind::kInt:
      return ints.size();
    case Kind::kFloat:
      return floats.size();
    case Kind::kString:
      return strings.size();
    case Kind::kArray:
      return arrays.size();
  }
  return 0;
}

GgufArray GgufArray::of_strings(std::vector<std::string> v) {
  GgufArray a;
  a.type = GgufValueType::STRING;
  a.strings = std::move(v);
  return a;
}
GgufArray GgufArray::of_float32(const std::vector<float>& v) {
  GgufArray a;
  a.type = GgufValueType::FLOAT32;
  a.floats.assign(v.begin(), v.end());
  return a;
}
GgufArray GgufArray::of_int32(const std::vector<int32_t>& v) {
  GgufArray a;
  a.type = GgufValueType::INT32;
  a.ints.assign(v.begin(), v.end());
  return a;
}
GgufArray GgufArray::of_uints(GgufValueType type, std::vector<uint64_t> v) {
  GgufArray a;
  a.type = type;
  a.uints = std::move(v);
  return a;
}
GgufArray GgufArray::of_ints(GgufValueType type, std::vector<int64_t> v) {
  GgufArray a;
  a.type = type;
  a.ints = std::move(v);
  return a;
}
GgufArray GgufArray::of_floats(GgufValueType type, std::vector<double> v) {
  GgufArray a;
  a.type = type;
  a.floats = std::move(v);
  return a;
}
GgufArray GgufArray::of_arrays(std::vector<GgufArray> v) {
  GgufArray a;
  a.type = GgufValueType::ARRAY;
  a.arrays = std::move(v);
  return a;
}

namespace {
GgufValue make_uint(GgufValueType t, uint64_t v) {
  GgufValue out;
  out.type = t;
  out.u = v;
  return out;
}
GgufValue make_int(GgufValueType t, int64_t v) {
  GgufValue out;
  out.type = t;
  out.i = v;
  return out;
}
GgufValue make_float(GgufValueType t, double v) {
  GgufValue out;
  out.type = t;
  out.f = v;
  return out;
}
}  // namespace

GgufValue GgufValue::u8(uint8_t v) { return make_uint(GgufValueType::UINT8, v); }
GgufValue GgufValue::i8(int8_t v) { return make_int(GgufValueType::INT8, v); }
GgufValue GgufValue::u16(uint16_t v) { return make_uint(GgufValueType::UINT16, v); }
GgufValue GgufValue::i16(int16_t v) { return make_int(GgufValueType::INT16, v); }
GgufValue GgufValue::u32(uint32_t v) { return make_uint(GgufValueType::UINT32, v); }
GgufValue GgufValue::i32(int32_t v) { return make_int(GgufValueType::INT32, v); }
GgufValue GgufValue::u64(uint64_t v) { return make_uint(GgufValueType::UINT64, v); }
GgufValue GgufValue::i64(int64_t v) { return make_int(GgufValueType::INT64, v); }
GgufValue GgufValue::f32(float v) { return make_float(GgufValueType::FLOAT32, v); }
GgufValue GgufValue::f64(double v) { return make_float(GgufValueType::FLOAT64, v); }
GgufValue GgufValue::boolean(bool v) { return make_uint(GgufValueType::BOOL, v ? 1 : 0); }
GgufValue GgufValue::str(std::string v) {
  GgufValue out;
  out.type = GgufValueType::STRING;
  out.s = std::move(v);
  return out;
}
GgufValue GgufValue::array(GgufArray v) {
  GgufValue out;
  out.type = GgufValueType::ARRAY;
  out.a = std::move(v);
  return out;
}

std::string GgufValue::type_description() const {
  std::string s = gguf_value_type_name(static_cast<uint32_t>(type));
  if (type == GgufValueType::ARRAY)
    s += " of " + gguf_value_type_name(static_cast<uint32_t>(a.type));
  return s;
}

// ---- GgufFile accessors ---------------------------------------------------------------------

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata[it->second].second;
}

namespace {
[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const std::string& expected,
                             const GgufValue& v) {
  throw Error(ErrorKind::kBadInput, "expected " + expected + ", found " + v.type_description(),
              f.path, key);
}
[[noreturn]] void missing_key(const GgufFile& f, const std::string& key) {
  throw Error(ErrorKind::kBadInput, "required key is missing", f.path, key);
}
int64_t as_int(const GgufFile& f, const std::string& key, const GgufValue& v) {
  const Kind k = kind_of(v.type);
  if (k == Kind::kInt) return v.i;
  if (k == Kind::kUint && v.type != GgufValueType::BOOL) {
    if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(ErrorKind::kBadInput,
                  "value " + std::to_string(v.u) + " does not fit in a signed 64-bit integer",
                  f.path, key);
    return static_cast<int64_t>(v.u);
  }
  wrong_type(f, key, "an integer", v);
}
}  // namespace

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing_key(*this, key);
  return as_int(*this, key, *v);
}
int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? as_int(*this, key, *v) : fallback;
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing_key(*this, key);
  if (kind_of(v->type) != Kind::kFloat) wrong_type(*this, key, "float32 or float64", *v);
  return v->f;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type != GgufValueType::BOOL) wrong_type(*this, key, "bool", *v);
  return v->u != 0;
}
std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing_key(*this, key);
  if (v->type != GgufValueType::STRING) wrong_type(*this, key, "string", *v);
  return v->s;
}
std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}
std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing_key(*this, key);
  if (v->type != GgufValueType::ARRAY || v->a.type != GgufValueType::STRING)
    wrong_type(*this, key, "array of string", *v);
  return v->a.strings;
}
std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing_key(*this, key);
  if (v->type != GgufValueType::ARRAY || kind_of(v->a.type) != Kind::kFloat)
    wrong_type(*this, key, "array of float32", *v);
  return std::vector<float>(v->a.floats.begin(), v->a.floats.end());
}
std::vector<int32_t> GgufFile::get_int32_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing_key(*this, key);
  if (v->type != GgufValueType::ARRAY) wrong_type(*this, key, "array of int32", *v);
  const GgufArray& a = v->a;
  std::vector<int32_t> out;
  out.reserve(a.size());
  auto bad = [&](size_t i, const std::string& value) {
    throw Error(ErrorKind::kBadInput,
                "element " + std::to_string(i) + " = " + value + " does not fit in int32", path,
                key);
  };
  const Kind k = kind_of(a.type);
  if (k == Kind::kInt) {
    for (size_t i = 0; i < a.ints.size(); ++i) {
      if (a.ints[i] < std::numeric_limits<int32_t>::min() ||
          a.ints[i] > std::numeric_limits<int32_t>::max())
        bad(i, std::to_string(a.ints[i]));
      out.push_back(static_cast<int32_t>(a.ints[i]));
    }
  } else if (k == Kind::kUint && a.type != GgufValueType::BOOL) {
    for (size_t i = 0; i < a.uints.size(); ++i) {
      if (a.uints[i] > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        bad(i, std::to_string(a.uints[i]));
      out.push_back(static_cast<int32_t>(a.uints[i]));
    }
  } else {
    wrong_type(*this, key, "array of int32", *v);
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& info) const {
  SPECLAB_CHECK(bytes_ != nullptr, "GgufFile has no data (not produced by read_gguf)");
  SPECLAB_CHECK(data_offset + info.offset + info.n_bytes <= bytes_->size(),
                "tensor " + info.name + " lies outside the file");
  return bytes_->data() + data_offset + info.offset;
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

HostTensor GgufFile::load_tensor(const GgufTensorInfo& info) const {
  HostTensor t;
  t.shape = info.shape();
  const uint8_t* src = tensor_data(info);
  // Refuse undecodable types before allocating (their elements per byte can be large).
  const GgmlTypeTraits* traits = ggml_type_traits(info.type);
  if (!traits || !traits->can_dequantize)
    throw Error(ErrorKind::kUnsupported,
                "tensor type " + info.type_name() +
                    " is not supported by SpecLab's dequantizer (supported: " + decodable_type_names() + ")",
                path, "tensor " + info.name);
  if (info.n_elements == 0) return t;  // a zero-sized dimension: nothing to decode
  try {
    t.data.resize(static_cast<size_t>(info.n_elements));
    dequantize(info.type, src, static_cast<size_t>(info.n_bytes), t.data.data(),
               static_cast<size_t>(info.n_elements), "tensor " + info.name);
  } catch (const Error& e) {
    throw Error(e.kind(), e.message(), path, e.field());
  }
  return t;
}

// ---- writing
// ---------------------------------------------------------------------------------------

namespace {

class Out {
 public:
  std::vector<uint8_t> bytes;
  template <class T>
  void put(T v) {
    const size_t n = bytes.size();
    bytes.resize(n + sizeof(T));
    std::memcpy(bytes.data() + n, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
};

void check_uint_range(GgufValueType t, uint64_t v, const std::string& key) {
  uint64_t max = std::numeric_limits<uint64_t>::max();
  if (t == GgufValueType::UINT8) max = 0xFF;
  if (t == GgufValueType::UINT16) max = 0xFFFF;
  if (t == GgufValueType::UINT32) max = 0xFFFFFFFFu;
  if (t == GgufValueType::BOOL) max = 1;
  if (v > max)
    throw Error(ErrorKind::kBadInput,
                "value " + std::to_string(v) + " is out of range for " +
                    gguf_value_type_name(static_cast<uint32_t>(t)),
                {}, key);
}
void check_int_range(GgufValueType t, int64_t v, const std::string& key) {
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (t == GgufValueType::INT8) lo = -128, hi = 127;
  if (t == GgufValueType::INT16) lo = -32768, hi = 32767;
  if (t == GgufValueType::INT32)
    lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  if (v < lo || v > hi)
    throw Error(ErrorKind::kBadInput,
                "value " + std::to_string(v) + " is out of range for " +
                    gguf_value_type_name(static_cast<uint32_t>(t)),
                {}, key);
}

void put_uint(Out& out, GgufValueType t, uint64_t v) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::BOOL:
      out.put<uint8_t>(static_cast<uint8_t>(v));
      break;
    case GgufValueType::UINT16:
      out.put<uint16_t>(static_cast<uint16_t>(v));
      break;
    case GgufValueType::UINT32:
      out.put<uint32_t>(static_cast<uint32_t>(v));
      break;
    default:
      out.put<uint64_t>(v);
      break;
  }
}
void put_int(Out& out, GgufValueType t, int64_t v) {
  switch (t) {
    case GgufValueType::INT8:
      out.put<int8_t>(static_cast<int8_t>(v));
      break;
    case GgufValueType::INT16:
      out.put<int16_t>(static_cast<int16_t>(v));
      break;
    case GgufValueType::INT32:
      out.put<int32_t>(static_cast<int32_t>(v));
      break;
    default:
      out.put<int64_t>(v);
      break;
  }
}
void put_float(Out& out, GgufValueType t, double v) {
  if (t == GgufValueType::FLOAT32)
    out.put<float>(static_cast<float>(v));
  else
    out.put<double>(v);
}

void check_value_type(GgufValueType t, const std::string& key) {
  if (static_cast<uint32_t>(t) >= kNumValueTypes)
    throw Error(ErrorKind::kBadInput,
                "unknown value type " + std::to_string(static_cast<uint32_t>(t)), {}, key);
}

// Writes an array body (element type, count, elements) after checking that only the vector
// selected by its type is used and that every element fits the type.
void put_array(Out& out, const GgufArray& a, const std::string& key, int depth) {
  check_value_type(a.type, key);
  if (depth >= kMaxArrayNesting)
    throw Error(ErrorKind::kBadInput,
                "arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels", {},
                key);
  const Kind k = kind_of(a.type);
  const size_t used =
      (k == Kind::kUint ? 0 : a.uints.size()) + (k == Kind::kInt ? 0 : a.ints.size()) +
      (k == Kind::kFloat ? 0 : a.floats.size()) + (k == Kind::kString ? 0 : a.strings.size()) +
      (k == Kind::kArray ? 0 : a.arrays.size());
  if (used != 0)
    throw Error(ErrorKind::kBadInput,
                "array of " + gguf_value_type_name(static_cast<uint32_t>(a.type)) +
                    " holds elements of another kind",
                {}, key);
  out.put<uint32_t>(static_cast<uint32_t>(a.type));
  out.put<uint64_t>(a.size());
  switch (k) {
    case Kind::kUint:
      for (uint64_t v : a.uints) {
        check_uint_range(a.type, v, key);
        put_uint(out, a.type, v);
      }
      break;
    case Kind::kInt:
      for (int64_t v : a.ints) {
        check_int_range(a.type, v, key);
        put_int(out, a.type, v);
      }
      break;
    case Kind::kFloat:
      for (double v : a.floats) put_float(out, a.type, v);
      break;
    case Kind::kString:
      for (const std::string& s : a.strings) out.put_string(s);
      break;
    case Kind::kArray:
      for (const GgufArray& inner : a.arrays) put_array(out, inner, key, depth + 1);
      break;
  }
}

void put_value(Out& out, const GgufValue& v, const std::string& key) {
  check_value_type(v.type, key);
  out.put<uint32_t>(static_cast<uint32_t>(v.type));
  switch (kind_of(v.type)) {
    case Kind::kUint:
      check_uint_range(v.type, v.u, key);
      put_uint(out, v.type, v.u);
      break;
    case Kind::kInt:
      check_int_range(v.type, v.i, key);
      put_int(out, v.type, v.i);
      break;
    case Kind::kFloat:
      put_float(out, v.type, v.f);
      break;
    case Kind::kString:
      out.put_string(v.s);
      break;
    case Kind::kArray:
      put_array(out, v.a, key, 0);
      break;
  }
}

class FileWriter {
 public:
  explicit FileWriter(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_)
      throw Error(ErrorKind::kIo, std::string("cannot create: ") + std::strerror(errno), path);
  }
  ~FileWriter() {
    if (f_) std::fclose(f_);
  }
  void write(const uint8_t* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      throw Error(ErrorKind::kIo, std::string("write failed: ") + std::strerror(errno), path_);
    written_ += n;
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    uint64_t pad = (alignment - written_ % alignment) % alignment;
    while (pad > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(zeros)));
      write(zeros, n);
      pad -= n;
    }
  }
  void close() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0)
      throw Error(ErrorKind::kIo, std::string("close failed: ") + std::strerror(errno), path_);
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
};

}  // namespace

void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorToWrite>& tensors) {
  uint32_t alignment = kDefaultAlignment;
  Out head;
  head.put<uint32_t>(0x46554747u);  // "GGUF" as little-endian bytes
  head.put<uint32_t>(3);
  head.put<uint64_t>(tensors.size());
  head.put<uint64_t>(metadata.size());
  std::unordered_map<std::string, int> seen;
  for (const auto& [key, value] : metadata) {
    if (!seen.emplace(key, 0).second)
      throw Error(ErrorKind::kBadInput, "duplicate metadata key", path, key);
    if (key == "general.alignment") {
      if (value.type != GgufValueType::UINT32 || value.u == 0 || (value.u & (value.u - 1)) != 0 ||
          value.u > 0xFFFFFFFFu)
        throw Error(ErrorKind::kBadInput, "expected a uint32 power of two", path, key);
      alignment = static_cast<uint32_t>(value.u);
    }
    head.put_string(key);
    try {
      put_value(head, value, key);
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), path, e.field());
    }
  }

  std::vector<uint64_t> sizes;
  seen.clear();
  uint64_t offset = 0;
  for (const GgufTensorToWrite& t : tensors) {
    const std::string field = "tensor " + t.name;
    if (t.name.empty()) throw Error(ErrorKind::kBadInput, "tensor name is empty", path, field);
    if (!seen.emplace(t.name, 0).second)
      throw Error(ErrorKind::kBadInput, "duplicate tensor name", path, field);
    if (t.shape.empty() || t.shape.size() > kMaxDims)
      throw Error(ErrorKind::kBadInput,
                  "expected 1 to 4 dimensions, found " + std::to_string(t.shape.size()), path,
                  field);
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      if (d <= 0)
        throw Error(ErrorKind::kBadInput,
                    "expected positive dimensions, found " + shape_to_string(t.shape), path, field);
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(d))
        throw Error(ErrorKind::kBadInput, "element count overflows", path, field);
      n *= static_cast<uint64_t>(d);
    }
    if (!t.data) throw Error(ErrorKind::kBadInput, "no data", path, field);
    const uint32_t type = static_cast<uint32_t>(t.type);
    if (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::Q8_0 &&
        t.type != GgmlType::Q4_0 && t.type != GgmlType::Q4_1)
      throw Error(ErrorKind::kUnsupported,
                  "cannot write type " + ggml_type_name(type) +
                      " (expected one of F32, F16, Q8_0, Q4_0, Q4_1)",
                  path, field);
    const GgmlTypeTraits* traits = ggml_type_traits(type);
    if (static_cast<uint64_t>(t.shape.back()) % traits->block_size != 0)
      throw Error(ErrorKind::kBadInput,
                  "innermost dimension " + std::to_string(t.shape.back()) +
                      " is not a multiple of the " + traits->name + " block size " +
                      std::to_string(traits->block_size),
                  path, field);
    const uint64_t bytes = n / traits->block_size * traits->type_size;
    head.put_string(t.name);
    head.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) head.put<uint64_t>(*it);
    head.put<uint32_t>(type);
    head.put<uint64_t>(offset);
    offset += (bytes + alignment - 1) / alignment * alignment;
    sizes.push_back(n);
  }

  try {
    replace_file(path, [&](const std::string& tmp) {
      FileWriter out(tmp);
      out.write(head.bytes.data(), head.bytes.size());
      out.pad_to(alignment);
      for (size_t k = 0; k < tensors.size(); ++k) {
        const std::vector<uint8_t> data =
            quantize(tensors[k].type, tensors[k].data, sizes[k], "tensor " + tensors[k].name);
        out.write(data.data(), data.size());
        out.pad_to(alignment);
      }
      out.close();
    });
  } catch (const Error& e) {
    // Named by the file the caller asked for, not the temporary it was writing (a full disk said
    // "d.gguf.tmp.<host>.<pid>: write failed" until 2026-12-07).
    if (e.file().empty() || e.file().rfind(path + ".tmp.", 0) == 0) throw Error(e.kind(), e.message(), path, e.field());
    throw;
  }
}

}  // namespace speclab
