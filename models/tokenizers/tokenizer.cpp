#include "models/tokenizers/tokenizer.h"

#include <algorithm>

namespace speclab {

bool Tokenizer::is_eos(Token id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

namespace {
// Length of the longest prefix of `s` that ends on a UTF-8 character boundary.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t i = n;
  int cont = 0;
  while (i > 0 && cont < 4) {
    unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) {
      size_t need = (c < 0x80) ? 1 : ((c >> 5) == 0x6) ? 2 : ((c >> 4) == 0xE) ? 3 : ((c >> 3) == 0x1E) ? 4 : 1;
      return (n - (i - 1) >= need) ? n : i - 1;
    }
    --i;
    ++cont;
  }
  return n;  // only continuation bytes: invalid anyway, emit as-is
}
}  // namespace

std::string StreamDecoder::push(Token id) {
  pending_ += tok_.token_bytes(id);
  size_t k = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, k);
  pending_.erase(0, k);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace speclab
