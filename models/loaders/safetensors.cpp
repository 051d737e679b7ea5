#include "models/loaders/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the safetensors reader copies little-endian data as-is");

namespace speclab {

// ---- scalar conversions ----------------------------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float32.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t float_to_half(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x3ffu);  // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (ax <= 0x33000000u) return sign;            // <= 2^-25 rounds to zero (ties to even)
  const uint32_t e = ax >> 23;
  const uint32_t m = ax & 0x7fffffu;
  uint32_t q, rem, halfway;
  if (e < 113) {
    // Subnormal half: count units of 2^-24.
    const uint32_t full = m | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    q = full >> shift;
    rem = full & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  } else {
    q = ((e - 112) << 10) | (m >> 13);
    rem = m & 0x1fffu;
    halfway = 0x1000u;
  }
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // a carry into the exponent is right
  return sign | static_cast<uint16_t>(q);
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t float_to_bf16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// ---- dtypes ----------------------------------------------------------------------------------

const char* to_string(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return "F32";
    case SafetensorsDtype::kF16: return "F16";
    case SafetensorsDtype::kBF16: return "BF16";
  }
  return "?";
}

SafetensorsDtype parse_safetensors_dtype(const std::string& text, const std::string& source,
                                         const std::string& field) {
  if (text == "F32") return SafetensorsDtype::kF32;
  if (text == "F16") return SafetensorsDtype::kF16;
  if (text == "BF16") return SafetensorsDtype::kBF16;
  throw Error(ErrorKind::kUnsupported, "expected dtype F32, F16 or BF16, found '" + text + "'", source,
              field);
}

uint64_t safetensors_tensor_bytes(int64_t numel, SafetensorsDtype dtype) {
  return static_cast<uint64_t>(numel) * (dtype == SafetensorsDtype::kF32 ? 4u : 2u);
}

namespace {

// Element sizes of every dtype the format defines (0: unknown dtype).
size_t dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

std::string errno_text() { return std::strerror(errno); }

// The header of a safetensors file nests 3 levels deep. Rejecting deeper nesting up front keeps
// hostile input ("[[[[...") from exhausting the stack in the JSON library.
void check_nesting(const std::string& text, const std::string& path) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 8)
        throw Error(ErrorKind::kBadInput,
                    "header JSON nests deeper than 8 levels (expected {name: {shape: [...]}})", path,
                    "header");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

uint64_t get_u64(const nlohmann::json& v, const std::string& path, const std::string& field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer())
    throw Error(ErrorKind::kBadInput, "expected a non-negative integer, found " + v.dump(), path, field);
  throw Error(ErrorKind::kBadInput,
              std::string("expected a non-negative integer, found ") + v.type_name(), path, field);
}

SafetensorsTensorInfo parse_entry(const std::string& name, const nlohmann::json& e,
                                  const std::string& path) {
  if (!e.is_object())
    throw Error(ErrorKind::kBadInput, std::string("expected a tensor entry object, found ") + e.type_name(),
                path, name);
  SafetensorsTensorInfo info;
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = e.find(key);
    if (it == e.end()) throw Error(ErrorKind::kBadInput, "missing field", path, name + "." + key);
    return *it;
  };
  const auto& dtype = field("dtype");
  if (!dtype.is_string())
    throw Error(ErrorKind::kBadInput, std::string("expected a string, found ") + dtype.type_name(), path,
                name + ".dtype");
  info.dtype = dtype.get<std::string>();
  info.dtype_bytes = dtype_size(info.dtype);
  if (info.dtype_bytes == 0)
    throw Error(ErrorKind::kUnsupported, "unknown dtype '" + info.dtype + "'", path, name + ".dtype");

  const auto& shape = field("shape");
  if (!shape.is_array())
    throw Error(ErrorKind::kBadInput, std::string("expected an array, found ") + shape.type_name(), path,
                name + ".shape");
  // Every dim is bounded by the byte count check below; here only guard the product.
  constexpr uint64_t kMaxNumel = uint64_t{1} << 62;
  uint64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = get_u64(shape[i], path, name + ".shape[" + std::to_string(i) + "]");
    if (d > kMaxNumel)
      throw Error(ErrorKind::kBadInput, "dimension " + std::to_string(d) + " is too large", path,
                  name + ".shape");
    info.shape.push_back(static_cast<int64_t>(d));
    if (numel != 0 && d != 0 && numel > kMaxNumel / d)
      throw Error(ErrorKind::kBadInput, "element count overflows", path, name + ".shape");
    numel *= d;
  }

  const auto& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    throw Error(ErrorKind::kBadInput,
                "expected [begin, end], found " + (offsets.is_array() ? offsets.dump() : std::string(offsets.type_name())),
                path, name + ".data_offsets");
  info.begin = get_u64(offsets[0], path, name + ".data_offsets[0]");
  info.end = get_u64(offsets[1], path, name + ".data_offsets[1]");
  if (info.end < info.begin)
    throw Error(ErrorKind::kBadInput,
                "expected begin <= end, found [" + std::to_string(info.begin) + ", " +
                    std::to_string(info.end) + ")",
                path, name + ".data_offsets");
  if (numel > std::numeric_limits<uint64_t>::max() / info.dtype_bytes ||
      info.end - info.begin != numel * info.dtype_bytes)
    throw Error(ErrorKind::kBadInput,
                "byte range of " + std::to_string(info.end - info.begin) + " bytes disagrees with shape " +
                    shape_to_string(info.shape) + " of " + info.dtype + " (expected " +
                    (numel > std::numeric_limits<uint64_t>::max() / info.dtype_bytes
                         ? std::string("more than 2^64")
                         : std::to_string(numel * info.dtype_bytes)) +
                    " bytes)",
                path, name + ".data_offsets");
  return info;
}

}  // namespace

uint64_t SafetensorsTensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// ---- SafetensorsFile -------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      file_size_(o.file_size_),
      data_start_(o.data_start_),
      metadata_(std::move(o.metadata_)),
      tensors_(std::move(o.tensors_)) {
  o.fd_ = -1;
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    file_size_ = o.file_size_;
    data_start_ = o.data_start_;
    metadata_ = std::move(o.metadata_);
    tensors_ = std::move(o.tensors_);
    o.fd_ = -1;
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::read_bytes(uint64_t offset, void* dst, uint64_t n, const std::string& what) const {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
    const ssize_t got = ::pread(fd_, out, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::kIo, "read failed: " + errno_text(), path_, what);
    }
    if (got == 0)
      throw Error(ErrorKind::kIo, "unexpected end of file at byte " + std::to_string(offset), path_, what);
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) throw Error(ErrorKind::kIo, "cannot open: " + errno_text(), path);
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) throw Error(ErrorKind::kIo, "cannot stat: " + errno_text(), path);
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::kIo, "not a regular file", path);
  f.file_size_ = static_cast<uint64_t>(st.st_size);

  if (f.file_size_ < 8)
    throw Error(ErrorKind::kBadInput,
                "file too short for the 8-byte header length: found " + std::to_string(f.file_size_) +
                    " bytes",
                path, "header length");
  unsigned char len_bytes[8];
  f.read_bytes(0, len_bytes, 8, "header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes)
    throw Error(ErrorKind::kBadInput,
                "header length " + std::to_string(n) + " exceeds the limit of " +
                    std::to_string(kMaxHeaderBytes) + " bytes",
                path, "header length");
  if (n > f.file_size_ - 8)
    throw Error(ErrorKind::kBadInput,
                "header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(f.file_size_) + " bytes)",
                path, "header length");
  if (n < 2)
    throw Error(ErrorKind::kBadInput, "expected a JSON object header, found " + std::to_string(n) + " bytes",
                path, "header length");
  f.data_start_ = 8 + n;

  std::string text(static_cast<size_t>(n), '\0');
  f.read_bytes(8, &text[0], n, "header");
  if (text[0] != '{')
    throw Error(ErrorKind::kBadInput, "expected the header to start with '{'", path, "header");
  check_nesting(text, path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kBadInput, std::string("header is not valid JSON: ") + e.what(), path, "header");
  }
  if (!header.is_object())
    throw Error(ErrorKind::kBadInput, std::string("expected a JSON object, found ") + header.type_name(), path,
                "header");

  const uint64_t buffer_bytes = f.file_size_ - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        throw Error(ErrorKind::kBadInput, std::string("expected an object, found ") + it->type_name(), path,
                    "__metadata__");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw Error(ErrorKind::kBadInput, std::string("expected a string, found ") + m->type_name(), path,
                      "__metadata__." + m.key());
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsTensorInfo info = parse_entry(it.key(), *it, path);
    if (info.end > buffer_bytes)
      throw Error(ErrorKind::kBadInput,
                  "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                      ") run past the byte buffer of " + std::to_string(buffer_bytes) + " bytes",
                  path, it.key() + ".data_offsets");
    f.tensors_.emplace(it.key(), std::move(info));
  }

  // No two non-empty byte ranges may overlap.
  std::vector<std::pair<uint64_t, const std::string*>> by_begin;
  for (const auto& [name, info] : f.tensors_)
    if (info.end > info.begin) by_begin.emplace_back(info.begin, &name);
  std::sort(by_begin.begin(), by_begin.end());
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const auto& prev = f.tensors_.at(*by_begin[i - 1].second);
    const auto& cur = f.tensors_.at(*by_begin[i].second);
    if (cur.begin < prev.end)
      throw Error(ErrorKind::kBadInput,
                  "data_offsets [" + std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                      ") overlap those of '" + *by_begin[i - 1].second + "' [" +
                      std::to_string(prev.begin) + ", " + std::to_string(prev.end) + ")",
                  path, *by_begin[i].second + ".data_offsets");
  }
  return f;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(ErrorKind::kBadInput, "tensor not found in the file", path_, name);
  return it->second;
}

HostTensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsTensorInfo& ti = info(name);
  if (ti.dtype != "F32" && ti.dtype != "F16" && ti.dtype != "BF16")
    throw Error(ErrorKind::kUnsupported, "unsupported dtype " + ti.dtype + " (expected F32, F16 or BF16)",
                path_, name + ".dtype");
  HostTensor t;
  t.shape = ti.shape;
  // numel * dtype_bytes equals a byte range that lies inside the file, so this is bounded.
  const size_t numel = static_cast<size_t>(ti.numel());
  t.data.resize(numel);
  const uint64_t offset = data_start_ + ti.begin;
  if (ti.dtype == "F32") {
    read_bytes(offset, t.data.data(), ti.end - ti.begin, name);
  } else {
    std::vector<uint16_t> raw(numel);
    read_bytes(offset, raw.data(), ti.end - ti.begin, name);
    if (ti.dtype == "F16")
      for (size_t i = 0; i < numel; ++i) t.data[i] = half_to_float(raw[i]);
    else
      for (size_t i = 0; i < numel; ++i) t.data[i] = bf16_to_float(raw[i]);
  }
  return t;
}

WeightMap read_safetensors(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  WeightMap out;
  for (const auto& entry : f.tensors()) out.emplace(entry.first, f.read(entry.first));
  return out;
}

// ---- writer ----------------------------------------------------------------------------------

void write_safetensors(const std::string& path, const WeightMap& tensors, SafetensorsDtype file_dtype,
                       const std::map<std::string, std::string>& metadata, const std::vector<std::string>& exact) {
  const auto dtype_of = [&](const std::string& name) {
    return std::find(exact.begin(), exact.end(), name) != exact.end() ? SafetensorsDtype::kF32 : file_dtype;
  };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error(ErrorKind::kBadInput, "expected a tensor name other than '" + name + "'", path, name);
    for (int64_t d : t.shape)
      if (d < 0)
        throw Error(ErrorKind::kBadInput, "negative dimension in shape " + shape_to_string(t.shape), path, name);
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      throw Error(ErrorKind::kBadInput,
                  "tensor holds " + std::to_string(t.data.size()) + " values, expected " +
                      std::to_string(t.numel()) + " for shape " + shape_to_string(t.shape),
                  path, name);
    const SafetensorsDtype dtype = dtype_of(name);
    const uint64_t bytes = safetensors_tensor_bytes(t.numel(), dtype);
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = to_string(dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + bytes};
    header[name] = std::move(e);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorKind::kIo, "cannot open for writing: " + errno_text(), path);
  unsigned char len_bytes[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xffu);
  out.write(reinterpret_cast<const char*>(len_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& entry : tensors) {
    const std::vector<float>& v = entry.second.data;
    const SafetensorsDtype dtype = dtype_of(entry.first);
    if (dtype == SafetensorsDtype::kF32) {
      out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    } else {
      std::vector<uint16_t> raw(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        raw[i] = dtype == SafetensorsDtype::kF16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
      out.write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size() * 2));
    }
  }
  out.flush();
  if (!out) throw Error(ErrorKind::kIo, "write failed: " + errno_text(), path);
}

}  // namespace speclab
