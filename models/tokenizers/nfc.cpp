#include "models/tokenizers/nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "models/tokenizers/unicode.h"

namespace speclab::unicode {

namespace {

struct CombiningRun {
  uint32_t lo, hi;  // inclusive
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp;
  uint32_t offset, length;  // into kDecompositionData
};
struct Composition {
  uint32_t first, second, composite;
};

#include "models/tokenizers/nfc_tables.inc"

// Hangul syllables (Unicode 3.12, Conjoining Jamo Behavior): S = SBase + (L * VCount + V) *
// TCount + T, decomposed and composed arithmetically.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

// A decoded character: its code point, or kInvalid with the byte it was.
struct Char {
  uint32_t cp;
  unsigned char byte;
};

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300 || cp == kInvalid) return 0;
  auto it = std::upper_bound(std::begin(kCombiningClass), std::end(kCombiningClass), cp,
                             [](uint32_t v, const CombiningRun& r) { return v < r.lo; });
  if (it == std::begin(kCombiningClass)) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<Char>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back({kLBase + s / kNCount, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, 0});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  if (cp >= 0xC0) {
    auto it = std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), cp,
                               [](const Decomposition& d, uint32_t v) { return d.cp < v; });
    if (it != std::end(kDecomposition) && it->cp == cp) {
      for (uint32_t k = 0; k < it->length; ++k) out.push_back({kDecompositionData[it->offset + k], 0});
      return;
    }
  }
  out.push_back({cp, 0});
}

// The primary composite of (first, second), or kInvalid when there is none.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const Composition key{first, second, 0};
  auto it = std::lower_bound(std::begin(kComposition), std::end(kComposition), key,
                             [](const Composition& a, const Composition& b) {
                               return a.first != b.first ? a.first < b.first : a.second < b.second;
                             });
  if (it != std::end(kComposition) && it->first == first && it->second == second) return it->composite;
  return kInvalid;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  // 1. Full canonical decomposition.
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Decoded d = decode_utf8(text, i);
    if (d.cp == kInvalid)
      chars.push_back({kInvalid, static_cast<unsigned char>(text[i])});
    else
      decompose(d.cp, chars);
    i += d.len;
  }
  // 2. Canonical ordering: each run of non-starters sorted stably by combining class.
  std::vector<uint8_t> ccc(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) ccc[i] = combining_class(chars[i].cp);
  for (size_t i = 0; i < chars.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && ccc[j] != 0) ++j;
    std::vector<size_t> order(j - i);
    for (size_t k = 0; k < order.size(); ++k) order[k] = i + k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ccc[a] < ccc[b]; });
    std::vector<Char> run_chars;
    std::vector<uint8_t> run_ccc;
    for (size_t k : order) {
      run_chars.push_back(chars[k]);
      run_ccc.push_back(ccc[k]);
    }
    std::copy(run_chars.begin(), run_chars.end(), chars.begin() + static_cast<std::ptrdiff_t>(i));
    std::copy(run_ccc.begin(), run_ccc.end(), ccc.begin() + static_cast<std::ptrdiff_t>(i));
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter when it is not blocked (no
  // character between them of class 0 or of a class >= its own) and the pair has a primary
  // composite.
  std::vector<Char> out;
  std::vector<uint8_t> out_ccc;
  out.reserve(chars.size());
  long starter = -1;  // index in out of the last starter, -1 before the first
  for (size_t i = 0; i < chars.size(); ++i) {
    const Char c = chars[i];
    const uint8_t cc = ccc[i];
    if (starter >= 0 && c.cp != kInvalid && out[static_cast<size_t>(starter)].cp != kInvalid) {
      const uint8_t last = out_ccc.back();
      const bool adjacent = static_cast<size_t>(starter) + 1 == out.size();
      const bool blocked = !adjacent && (last == 0 || last >= cc);
      if (!blocked) {
        const uint32_t composite = compose(out[static_cast<size_t>(starter)].cp, c.cp);
        if (composite != kInvalid) {
          out[static_cast<size_t>(starter)].cp = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out.size());
    out.push_back(c);
    out_ccc.push_back(cc);
  }
  std::string result;
  result.reserve(text.size());
  for (const Char& c : out) {
    if (c.cp == kInvalid)
      result += static_cast<char>(c.byte);
    else
      append_utf8(result, c.cp);
  }
  return result;
}

}  // namespace speclab::unicode
