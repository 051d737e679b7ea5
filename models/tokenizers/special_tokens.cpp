#include "models/tokenizers/special_tokens.h"

#include <algorithm>

#include "models/tokenizers/unicode.h"

namespace speclab {

SpecialTokenMatcher::SpecialTokenMatcher(std::vector<Entry> entries)
    : entries_(std::move(entries)), by_first_byte_(256) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [](const Entry& e) { return e.text.empty(); }),
                 entries_.end());
  for (uint32_t k = 0; k < entries_.size(); ++k)
    by_first_byte_[static_cast<unsigned char>(entries_[k].text[0])].push_back(k);
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [this](uint32_t a, uint32_t b) {
      return entries_[a].text.size() > entries_[b].text.size();
    });
  }
}

namespace {

// Start of the white-space run that ends at `end` (not before `floor`).
size_t white_space_run_start(std::string_view text, size_t floor, size_t end) {
  size_t i = end;
  while (i > floor) {
    size_t start = i - 1;  // walk back to the lead byte of the previous character
    while (start > floor && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80 &&
           i - start < 4)
      --start;
    unicode::Decoded d = unicode::decode_utf8(text, start);
    if (start + d.len != i || !unicode::is_white_space(d.cp)) break;
    i = start;
  }
  return i;
}

// End of the white-space run that starts at `begin`.
size_t white_space_run_end(std::string_view text, size_t begin) {
  size_t i = begin;
  while (i < text.size()) {
    unicode::Decoded d = unicode::decode_utf8(text, i);
    if (!unicode::is_white_space(d.cp)) break;
    i += d.len;
  }
  return i;
}

}  // namespace

std::vector<SpecialTokenMatcher::Segment> SpecialTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t plain_begin = 0;  // start of the pending plain-text segment
  size_t i = 0;
  while (i < text.size() && !entries_.empty()) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[i])];
    const Entry* hit = nullptr;
    for (uint32_t k : candidates) {
      const Entry& e = entries_[k];
      if (text.compare(i, e.text.size(), e.text) == 0) {
        hit = &e;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t begin = hit->lstrip ? white_space_run_start(text, plain_begin, i) : i;
    size_t end = i + hit->text.size();
    if (hit->rstrip) end = white_space_run_end(text, end);
    if (begin > plain_begin) out.push_back({text.substr(plain_begin, begin - plain_begin), -1});
    out.push_back({text.substr(begin, end - begin), hit->id});
    plain_begin = i = end;
  }
  if (plain_begin < text.size()) out.push_back({text.substr(plain_begin), -1});
  return out;
}

}  // namespace speclab
