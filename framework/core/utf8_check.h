// first_invalid_utf8() — where a byte string stops being well-formed UTF-8.
//
// Well-formed means the Unicode standard's definition (table 3-7): no overlong forms, no
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence at the end. Text that
// SpecLab stores as an HDF5 UTF-8 string (a config's YAML, prompts) must pass, or readers such as
// h5py fail on it long after the run.
#pragma once

#include <cstddef>
#include <string>

namespace speclab {

// The offset of the first byte at or after `from` (the start of a sequence) that does not begin
// a well-formed sequence (or begins one cut short), or std::string::npos when all of `s` from
// there on is well-formed UTF-8.
inline size_t first_invalid_utf8(const std::string& s, size_t from = 0) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = from;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string::npos;
}

// `s` with each byte that does not begin a well-formed sequence replaced by U+FFFD (as Python's
// errors="replace" marks it, up to how many marks a run of bad bytes gets): for generated text,
// where a length stop can cut a character, or a model can emit a lone byte token, and the tokens
// themselves are kept elsewhere.
inline std::string utf8_replacing_invalid(const std::string& s) {
  size_t bad = first_invalid_utf8(s);
  if (bad == std::string::npos) return s;
  std::string out;
  size_t from = 0;
  while (bad != std::string::npos) {
    out.append(s, from, bad - from);
    out += "\xEF\xBF\xBD";
    from = bad + 1;
    bad = first_invalid_utf8(s, from);
  }
  out.append(s, from, std::string::npos);
  return out;
}

// The byte at `at` of `s` as errors name it: "0xFF".
inline std::string byte_name(const std::string& s, size_t at) {
  static const char* const kHex = "0123456789ABCDEF";
  const auto b = static_cast<unsigned char>(s[at]);
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

}  // namespace speclab
