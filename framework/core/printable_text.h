// Text for one terminal line: what SpecLab prints of text it did not write (prompt ids,
// categories, labels, error messages quoting a file).
//
//   one_line(text):      `text` as one printable line of valid UTF-8.
//   display_width(text): the columns a terminal gives that line, for padding tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace speclab {

// `text` as one printable line of valid UTF-8: newlines, tabs and other control characters,
// and bytes that are not part of a valid UTF-8 sequence (a non-UTF-8 prompt file echoed by a
// parser), are written as \n, \t or \xHH. Every error is then exactly one line a terminal and a
// log can show.
inline std::string one_line(const std::string& text) {
  std::string out;
  const auto hex = [&](unsigned char c) {
    const char* digits = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7f) hex(c);
      else out += static_cast<char>(c);
      ++i;
    } else {
      // A UTF-8 lead byte and its continuation bytes (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
      const int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
      bool ok = n > 0 && i + static_cast<size_t>(n) <= text.size();
      for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (ok && n >= 3) {
        const unsigned char c1 = static_cast<unsigned char>(text[i + 1]);
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
          ok = false;
      }
      if (ok) {
        out.append(text, i, static_cast<size_t>(n));
        i += static_cast<size_t>(n);
      } else {
        hex(c);
        ++i;
      }
    }
  }
  return out;
}

// The terminal columns of `text` (valid UTF-8, as one_line() returns): 2 for East Asian wide and
// fullwidth characters and emoji, 0 for combining marks, zero-width joiners and spaces, variation
// selectors and emoji skin-tone modifiers, 1 for the rest (wcwidth()'s classes, without depending
// on the process's locale). Padding by bytes misaligned a table row with "cat\U0001F600".
inline size_t display_width(const std::string& text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const int n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (int k = 1; k < n && i + static_cast<size_t>(k) < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + static_cast<size_t>(k)]) & 0x3f);
    i += static_cast<size_t>(n);
    const bool zero = (cp >= 0x0300 && cp <= 0x036f) || (cp >= 0x200b && cp <= 0x200f) ||
                      (cp >= 0xfe00 && cp <= 0xfe0f) || (cp >= 0x1f3fb && cp <= 0x1f3ff) ||
                      (cp >= 0xe0100 && cp <= 0xe01ef);
    const bool wide = (cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0x303e) ||
                      (cp >= 0x3041 && cp <= 0x33ff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
                      (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0xa000 && cp <= 0xa4cf) ||
                      (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
                      (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
                      (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
                      (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd);
    width += zero ? 0 : wide ? 2 : 1;
  }
  return width;
}

}  // namespace speclab
