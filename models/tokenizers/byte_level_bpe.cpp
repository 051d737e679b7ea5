#include "models/tokenizers/byte_level_bpe.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "framework/core/error.h"
#include "models/tokenizers/nfc.h"
#include "models/tokenizers/unicode.h"

namespace speclab {

// ---- GPT-2 byte <-> character mapping ------------------------------------------------------

namespace {

struct ByteMap {
  std::string to_unicode[256];
  int16_t from_unicode[324];  // code point -> byte, -1 when the code point stands for none
  ByteMap() {
    for (auto& v : from_unicode) v = -1;
    // Printable Latin-1 bytes stand for themselves; the other 68 are shifted to 256 + n.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      unicode::append_utf8(to_unicode[b], cp);
      from_unicode[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_map().to_unicode[b]; }

// ---- pre-tokenizers --------------------------------------------------------------------------

PreTokenizer parse_pre_type(const std::string& pre_type) {
  if (pre_type == "gpt2" || pre_type == "default") return PreTokenizer::kGpt2;
  if (pre_type == "smollm") return PreTokenizer::kSmolLM;
  if (pre_type == "llama-bpe" || pre_type == "llama3") return PreTokenizer::kLlama3;
  if (pre_type == "qwen2") return PreTokenizer::kQwen2;
  throw Error(ErrorKind::kUnsupported,
              "expected one of gpt2, default, smollm, llama-bpe, llama3, qwen2, found \"" +
                  pre_type + "\"",
              "", "tokenizer.ggml.pre");
}

namespace {

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// The text decoded once: code points, their classes and byte offsets (off[n] = text size).
struct Chars {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<size_t> off;
  explicit Chars(std::string_view text) {
    cp.reserve(text.size());
    cls.reserve(text.size());
    off.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
      unicode::Decoded d = unicode::decode_utf8(text, i);
      cp.push_back(d.cp);
      cls.push_back(unicode::is_letter(d.cp)   ? kLetter
                    : unicode::is_number(d.cp) ? kNumber
                    : unicode::is_white_space(d.cp) ? kSpace
                                                    : kOther);
      off.push_back(i);
      i += d.len;
    }
    off.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
  bool newline(size_t i) const { return cp[i] == '\r' || cp[i] == '\n'; }
  size_t run(size_t i, size_t end, CharClass c) const {
    while (i < end && cls[i] == c) ++i;
    return i;
  }
};

// Case folding for the contraction letters, as Oniguruma's (?i) does it: ASCII, plus U+017F
// LATIN SMALL LETTER LONG S, which folds to 's'.
uint32_t fold_case(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  return c == 0x17F ? 's' : c;
}

// 's|'t|'re|'ve|'m|'ll|'d at i (case-insensitive when `fold`): end of the match, or i.
size_t match_contraction(const Chars& c, size_t i, size_t end, bool fold) {
  if (c.cp[i] != '\'' || i + 1 >= end) return i;
  auto at = [&](size_t k) { return fold ? fold_case(c.cp[k]) : c.cp[k]; };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 < end) {
    const uint32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  return i;
}

// \s+(?!\S)|\s+ at i (c.cls[i] == kSpace): the greedy run, less its last character when a
// non-space follows and the run is longer than one.
size_t match_space_run(const Chars& c, size_t i, size_t end) {
  const size_t j = c.run(i, end, kSpace);
  if (j == end) return end;
  return (j - 1 > i) ? j - 1 : j;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Chars& c, size_t i, size_t end) {
  if (size_t j = match_contraction(c, i, end, /*fold=*/false); j != i) return j;
  // " ?X+": a literal space joins a following run of letters, numbers or other characters.
  const size_t k = (c.cp[i] == ' ' && i + 1 < end && c.cls[i + 1] != kSpace) ? i + 1 : i;
  const auto cls = static_cast<CharClass>(c.cls[k]);
  if (cls != kSpace) return c.run(k, end, cls);
  return match_space_run(c, i, end);
}

// Llama 3 / Qwen2: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3(const Chars& c, size_t i, size_t end, size_t max_digits) {
  if (size_t j = match_contraction(c, i, end, /*fold=*/true); j != i) return j;
  const uint8_t cls = c.cls[i];
  if (cls == kLetter) return c.run(i, end, kLetter);
  if (cls != kNumber && !c.newline(i) && i + 1 < end && c.cls[i + 1] == kLetter)
    return c.run(i + 1, end, kLetter);
  if (cls == kNumber) {
    size_t j = i;
    while (j < end && j - i < max_digits && c.cls[j] == kNumber) ++j;
    return j;
  }
  const size_t k = (c.cp[i] == ' ' && i + 1 < end && c.cls[i + 1] == kOther) ? i + 1 : i;
  if (c.cls[k] == kOther) {
    size_t j = c.run(k, end, kOther);
    while (j < end && c.newline(j)) ++j;
    return j;
  }
  // White space: \s*[\r\n]+ ends after the run's last newline, if it has one.
  const size_t j = c.run(i, end, kSpace);
  for (size_t m = j; m > i; --m)
    if (c.newline(m - 1)) return m;
  return match_space_run(c, i, end);
}

}  // namespace

std::vector<std::string_view> byte_level_pretokenize(std::string_view text, PreTokenizer kind) {
  const Chars c(text);
  std::vector<std::string_view> out;
  auto emit = [&](size_t a, size_t b) {
    out.push_back(text.substr(c.off[a], c.off[b] - c.off[a]));
  };
  auto split = [&](size_t a, size_t b) {
    for (size_t i = a; i < b;) {
      size_t j = kind == PreTokenizer::kLlama3  ? match_llama3(c, i, b, 3)
                 : kind == PreTokenizer::kQwen2 ? match_llama3(c, i, b, 1)
                                                : match_gpt2(c, i, b);
      SPECLAB_CHECK(j > i, "pre-tokenizer matched nothing");
      emit(i, j);
      i = j;
    }
  };
  if (kind != PreTokenizer::kSmolLM) {
    split(0, c.size());
    return out;
  }
  // Digits(individual_digits=true) first; the GPT-2 regex then runs inside each stretch.
  for (size_t i = 0; i < c.size();) {
    if (c.cls[i] == kNumber) {
      emit(i, i + 1);
      ++i;
      continue;
    }
    size_t j = i;
    while (j < c.size() && c.cls[j] != kNumber) ++j;
    split(i, j);
    i = j;
  }
  return out;
}

// ---- ByteLevelBpe ----------------------------------------------------------------------------

namespace {

std::vector<std::pair<std::string, std::string>> split_merges(const std::vector<std::string>& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t sp = m.find(' ', 1);  // a token may not be empty, so skip byte 0
    if (sp == std::string::npos || sp + 1 >= m.size())
      throw Error(ErrorKind::kBadInput,
                  "expected a merge of the form \"a b\", found \"" + m + "\"", "",
                  "merges[" + std::to_string(i) + "]");
    out.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return out;
}

}  // namespace

ByteLevelBpe::ByteLevelBpe(std::vector<std::string> tokens, std::vector<std::string> merges,
                           std::vector<int32_t> token_types, std::string pre_type)
    : ByteLevelBpe(std::move(tokens), split_merges(merges), std::move(token_types),
                   parse_pre_type(pre_type), parse_pre_type(pre_type) == PreTokenizer::kLlama3,
                   {}, "", "merges") {}

ByteLevelBpe::ByteLevelBpe(std::vector<std::string> tokens,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           std::vector<int32_t> token_types, PreTokenizer pre, bool ignore_merges,
                           const std::vector<AddedToken>& added, const std::string& source,
                           const std::string& merges_field)
    : tokens_(std::move(tokens)), types_(std::move(token_types)), pre_(pre), ignore_merges_(ignore_merges) {
  const size_t n = tokens_.size();
  if (n == 0) throw Error(ErrorKind::kBadInput, "expected a non-empty vocabulary, found 0 tokens", source, "tokens");
  if (types_.empty()) types_.assign(n, token_type::kNormal);
  if (types_.size() != n)
    throw Error(ErrorKind::kBadInput,
                "expected " + std::to_string(n) + " token types (one per token), found " +
                    std::to_string(types_.size()),
                source, "token_type");

  const ByteMap& bm = byte_map();
  std::vector<SpecialTokenMatcher::Entry> specials;
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Token id = static_cast<Token>(i);
    const std::string& t = tokens_[i];
    const int32_t type = types_[i];
    if (type < token_type::kNormal || type > token_type::kByte)
      throw Error(ErrorKind::kBadInput,
                  "expected token type 1..6 for token " + std::to_string(i) + ", found " +
                      std::to_string(type),
                  source, "token_type");
    if (!t.empty()) token_to_id_.emplace(std::string_view(t), id);  // first id wins
    if (type == token_type::kNormal || type == token_type::kByte) {
      std::string& b = bytes_[i];
      for (size_t k = 0; k < t.size();) {
        unicode::Decoded d = unicode::decode_utf8(t, k);
        if (d.cp < 324 && bm.from_unicode[d.cp] >= 0) b += static_cast<char>(bm.from_unicode[d.cp]);
        else b.append(t, k, d.len);  // not a byte character: keep as written
        k += d.len;
      }
    } else {
      // Unused entries (Qwen's [PAD151665]...) are placeholders with no text: they decode to
      // nothing, as llama.cpp's detokenizer has it.
      if (type != token_type::kUnused) bytes_[i] = t;
      if (type == token_type::kControl || type == token_type::kUserDefined)
        specials.push_back({t, id});
    }
  }
  if (!added.empty()) {  // tokenizer.json: strip flags
    std::unordered_map<Token, const AddedToken*> by_id;
    for (const AddedToken& a : added) by_id[a.id] = &a;
    for (auto& e : specials) {
      auto it = by_id.find(e.id);
      if (it != by_id.end()) e.lstrip = it->second->lstrip, e.rstrip = it->second->rstrip;
    }
  }
  specials_ = SpecialTokenMatcher(std::move(specials));

  for (int b = 0; b < 256; ++b) byte_token_[b] = find_token(bm.to_unicode[b]);

  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const Token ia = find_token(a), ib = find_token(b), im = find_token(a + b);
    if (ia < 0 || ib < 0 || im < 0)
      throw Error(ErrorKind::kBadInput,
                  "expected merge \"" + a + " " + b + "\" to join vocabulary tokens into a "
                  "vocabulary token, found \"" + (ia < 0 ? a : ib < 0 ? b : a + b) +
                  "\" missing from the vocabulary",
                  source, merges_field + "[" + std::to_string(r) + "]");
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia)) << 32) | static_cast<uint32_t>(ib);
    merges_.emplace(key, std::make_pair(static_cast<int32_t>(r), im));  // first rank wins
  }
}

void ByteLevelBpe::pad_vocab(int64_t n) {
  if (n <= vocab_size()) return;
  const size_t size = static_cast<size_t>(n);
  token_to_id_.clear();  // its keys view into tokens_, which may move as it grows
  tokens_.resize(size);
  types_.resize(size, token_type::kUnused);
  bytes_.resize(size);
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].empty()) token_to_id_.emplace(std::string_view(tokens_[i]), static_cast<Token>(i));  // first id wins
}

Token ByteLevelBpe::find_token(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

void ByteLevelBpe::check_id(Token id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size())
    throw Error(ErrorKind::kBadInput,
                "expected a token id in [0, " + std::to_string(tokens_.size()) + "), found " +
                    std::to_string(id),
                "", "token");
}

int32_t ByteLevelBpe::token_type(Token id) const {
  check_id(id);
  return types_[id];
}

std::string ByteLevelBpe::token_bytes(Token id) const {
  check_id(id);
  return bytes_[id];
}

const std::string& ByteLevelBpe::token_text(Token id) const {
  check_id(id);
  return tokens_[id];
}

std::string ByteLevelBpe::decode(const TokenList& tokens) const {
  std::string out;
  for (Token id : tokens) {
    check_id(id);
    out += bytes_[id];
  }
  return out;
}

TokenList ByteLevelBpe::encode(std::string_view text, bool add_bos) const {
  TokenList out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  for (const auto& seg : specials_.split(text)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    if (nfc_) {
      const std::string normalized = unicode::to_nfc(seg.text);
      for (std::string_view word : byte_level_pretokenize(normalized, pre_)) bpe_word(word, out);
    } else {
      for (std::string_view word : byte_level_pretokenize(seg.text, pre_)) bpe_word(word, out);
    }
  }
  return out;
}

void ByteLevelBpe::bpe_word(std::string_view word, TokenList& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  TokenList result;
  Token whole = -1;
  if (ignore_merges_) {
    std::string mapped;
    for (char ch : word) mapped += byte_map().to_unicode[static_cast<unsigned char>(ch)];
    whole = find_token(mapped);
  }
  if (whole >= 0) {
    result.push_back(whole);
  } else {
    // Symbols start as single bytes; a byte whose character is not in the vocabulary is
    // dropped (what HF `tokenizers` does for a BPE model without unk_token).
    struct Symbol {
      Token id;
      int32_t prev, next;
      bool alive;
    };
    std::vector<Symbol> sym;
    sym.reserve(word.size());
    for (char ch : word) {
      Token id = byte_token_[static_cast<unsigned char>(ch)];
      if (id < 0) continue;
      const int32_t k = static_cast<int32_t>(sym.size());
      sym.push_back({id, k - 1, k + 1, true});
    }
    if (!sym.empty()) sym.back().next = -1;

    // Candidate merges: lowest rank first, then leftmost. An entry is stale when either side
    // has changed since it was pushed (merged tokens always get a new id).
    struct Candidate {
      int32_t rank, left, right;
      Token left_id, right_id, merged;
    };
    auto worse = [](const Candidate& a, const Candidate& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
    auto try_pair = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sym[l].id)) << 32) |
                           static_cast<uint32_t>(sym[r].id);
      auto it = merges_.find(key);
      if (it != merges_.end()) queue.push({it->second.first, l, r, sym[l].id, sym[r].id, it->second.second});
    };
    for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) try_pair(k, k + 1);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& l = sym[c.left];
      Symbol& r = sym[c.right];
      if (!l.alive || !r.alive || l.next != c.right || l.id != c.left_id || r.id != c.right_id) continue;
      l.id = c.merged;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      r.alive = false;
      try_pair(l.prev, c.left);
      try_pair(c.left, l.next);
    }
    for (int32_t k = sym.empty() ? -1 : 0; k >= 0; k = sym[k].next) result.push_back(sym[k].id);
  }
  out.insert(out.end(), result.begin(), result.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(result));
}

// ---- tokenizer.json ------------------------------------------------------------------------

namespace {

using nlohmann::json;

const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string type_name(const json& j) { return j.type_name(); }

// Field access with errors that name the file and the JSON path.
struct JsonReader {
  const std::string& path;
  [[noreturn]] void fail(ErrorKind kind, const std::string& field, const std::string& msg) const {
    throw Error(kind, msg, path, field);
  }
  const json& object(const json& parent, const char* key, const std::string& field) const {
    auto it = parent.find(key);
    if (it == parent.end() || !it->is_object())
      fail(ErrorKind::kBadInput, field,
           "expected an object, found " + (it == parent.end() ? std::string("nothing") : type_name(*it)));
    return *it;
  }
  std::string string(const json& parent, const char* key, const std::string& field) const {
    auto it = parent.find(key);
    if (it == parent.end() || !it->is_string())
      fail(ErrorKind::kBadInput, field,
           "expected a string, found " + (it == parent.end() ? std::string("nothing") : type_name(*it)));
    return it->get<std::string>();
  }
  // Optional boolean: `def` when absent or null.
  bool boolean(const json& parent, const char* key, bool def, const std::string& field) const {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return def;
    if (!it->is_boolean()) fail(ErrorKind::kBadInput, field, "expected a boolean, found " + type_name(*it));
    return it->get<bool>();
  }
  std::string type_of(const json& j, const std::string& field) const {
    if (!j.is_object()) fail(ErrorKind::kBadInput, field, "expected an object, found " + type_name(j));
    return string(j, "type", field + ".type");
  }
};

PreTokenizer detect_pre_tokenizer(const JsonReader& r, const json& root) {
  const std::string field = "pre_tokenizer";
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null())
    r.fail(ErrorKind::kUnsupported, field, "expected a byte-level pre-tokenizer, found none");
  const json& pre = *it;
  auto byte_level = [&](const json& j, const std::string& f, bool use_regex) {
    if (r.type_of(j, f) != "ByteLevel") return false;
    if (r.boolean(j, "add_prefix_space", false, f + ".add_prefix_space"))
      r.fail(ErrorKind::kUnsupported, f + ".add_prefix_space", "expected false, found true");
    return r.boolean(j, "use_regex", true, f + ".use_regex") == use_regex;
  };
  if (byte_level(pre, field, true)) return PreTokenizer::kGpt2;
  const std::string expected =
      "expected ByteLevel, Sequence[Digits(individual_digits), ByteLevel] or "
      "Sequence[Split(Llama-3 or Qwen2 regex), ByteLevel(use_regex=false)]";
  if (r.type_of(pre, field) != "Sequence")
    r.fail(ErrorKind::kUnsupported, field, expected + ", found " + r.type_of(pre, field));
  auto seq_it = pre.find("pretokenizers");
  if (seq_it == pre.end() || !seq_it->is_array() || seq_it->size() != 2)
    r.fail(ErrorKind::kUnsupported, field + ".pretokenizers", expected + ", found another sequence");
  const json& first = (*seq_it)[0];
  const json& second = (*seq_it)[1];
  const std::string f0 = field + ".pretokenizers[0]", f1 = field + ".pretokenizers[1]";
  const std::string t0 = r.type_of(first, f0);
  if (t0 == "Digits") {
    if (!r.boolean(first, "individual_digits", false, f0 + ".individual_digits"))
      r.fail(ErrorKind::kUnsupported, f0 + ".individual_digits", "expected true, found false");
    if (!byte_level(second, f1, true))
      r.fail(ErrorKind::kUnsupported, f1, "expected ByteLevel(use_regex=true), found another pre-tokenizer");
    return PreTokenizer::kSmolLM;
  }
  if (t0 == "Split") {
    const json& pattern = r.object(first, "pattern", f0 + ".pattern");
    const std::string regex = r.string(pattern, "Regex", f0 + ".pattern.Regex");
    if (r.string(first, "behavior", f0 + ".behavior") != "Isolated")
      r.fail(ErrorKind::kUnsupported, f0 + ".behavior", "expected Isolated, found " + r.string(first, "behavior", ""));
    if (r.boolean(first, "invert", false, f0 + ".invert"))
      r.fail(ErrorKind::kUnsupported, f0 + ".invert", "expected false, found true");
    if (!byte_level(second, f1, false))
      r.fail(ErrorKind::kUnsupported, f1, "expected ByteLevel(use_regex=false), found another pre-tokenizer");
    if (regex == kLlama3Regex) return PreTokenizer::kLlama3;
    if (regex == kQwen2Regex) return PreTokenizer::kQwen2;
    r.fail(ErrorKind::kUnsupported, f0 + ".pattern.Regex",
           "expected the Llama-3 or Qwen2 regex, found \"" + regex + "\"");
  }
  r.fail(ErrorKind::kUnsupported, f0, expected + ", found " + t0 + " first");
}

}  // namespace

std::unique_ptr<ByteLevelBpe> ByteLevelBpe::from_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot open tokenizer.json", path);
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kBadInput, std::string("expected valid JSON, found a parse error: ") + e.what(), path);
  }
  const JsonReader r{path};
  if (!root.is_object()) r.fail(ErrorKind::kBadInput, "", "expected a JSON object, found " + type_name(root));

  // normalizer: none, or NFC (applied by encode(); until 2026-12-07 accepted and not applied, so
  // decomposed input such as "e" + U+0301 tokenized unlike HF `tokenizers`).
  bool nfc = false;
  if (auto it = root.find("normalizer"); it != root.end() && !it->is_null()) {
    const std::string t = r.type_of(*it, "normalizer");
    if (t != "NFC") r.fail(ErrorKind::kUnsupported, "normalizer.type", "expected null or NFC, found " + t);
    nfc = true;
  }
  if (auto it = root.find("decoder"); it != root.end() && !it->is_null()) {
    const std::string t = r.type_of(*it, "decoder");
    if (t != "ByteLevel") r.fail(ErrorKind::kUnsupported, "decoder.type", "expected ByteLevel, found " + t);
  }
  const PreTokenizer pre = detect_pre_tokenizer(r, root);

  const json& model = r.object(root, "model", "model");
  if (auto it = model.find("type"); it != model.end()) {
    const std::string t = r.string(model, "type", "model.type");
    if (t != "BPE") r.fail(ErrorKind::kUnsupported, "model.type", "expected BPE, found " + t);
  }
  if (r.boolean(model, "byte_fallback", false, "model.byte_fallback"))
    r.fail(ErrorKind::kUnsupported, "model.byte_fallback", "expected false, found true");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      r.fail(ErrorKind::kUnsupported, std::string("model.") + key, "expected null, found " + it->dump());
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() &&
                                       !(it->is_number() && it->get<double>() == 0.0))
    r.fail(ErrorKind::kUnsupported, "model.dropout", "expected null, found " + it->dump());
  const bool ignore_merges = r.boolean(model, "ignore_merges", false, "model.ignore_merges");

  const json& vocab = r.object(model, "vocab", "model.vocab");
  std::vector<AddedToken> added;
  if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) r.fail(ErrorKind::kBadInput, "added_tokens", "expected an array, found " + type_name(*it));
    for (size_t i = 0; i < it->size(); ++i) {
      const json& a = (*it)[i];
      const std::string f = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) r.fail(ErrorKind::kBadInput, f, "expected an object, found " + type_name(a));
      auto id = a.find("id");
      if (id == a.end() || !id->is_number_integer())
        r.fail(ErrorKind::kBadInput, f + ".id", "expected an integer id");
      if (r.boolean(a, "single_word", false, f + ".single_word"))
        r.fail(ErrorKind::kUnsupported, f + ".single_word", "expected false, found true");
      // An id past int32 was stored as -1 and then reported as "found -1", not the file's value.
      if (const int64_t v = id->get<int64_t>(); v < 0 || v > INT32_MAX)
        r.fail(ErrorKind::kBadInput, f + ".id", "expected an id in [0, 2^31), found " + std::to_string(v));
      added.push_back({static_cast<Token>(id->get<int64_t>()),
                       r.string(a, "content", f + ".content"), r.boolean(a, "special", false, f + ".special"),
                       r.boolean(a, "lstrip", false, f + ".lstrip"), r.boolean(a, "rstrip", false, f + ".rstrip")});
    }
  }

  // Ids must be dense: bound them by the number of entries before allocating.
  const int64_t max_entries = static_cast<int64_t>(vocab.size() + added.size());
  std::vector<std::string> tokens;
  std::vector<char> present;
  auto place = [&](int64_t id, const std::string& text, const std::string& field) {
    if (id < 0 || id >= max_entries)
      r.fail(ErrorKind::kBadInput, field,
             "expected an id in [0, " + std::to_string(max_entries) + "), found " + std::to_string(id));
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(static_cast<size_t>(id) + 1);
      present.resize(static_cast<size_t>(id) + 1, 0);
    }
    if (present[id] && tokens[id] != text)
      r.fail(ErrorKind::kBadInput, field,
             "expected one token per id, found \"" + tokens[id] + "\" and \"" + text + "\" for id " +
                 std::to_string(id));
    tokens[id] = text;
    present[id] = 1;
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string field = "model.vocab[\"" + it.key() + "\"]";
    if (!it.value().is_number_integer())
      r.fail(ErrorKind::kBadInput, field, "expected an integer id, found " + type_name(it.value()));
    place(it.value().get<int64_t>(), it.key(), field);
  }
  for (size_t i = 0; i < added.size(); ++i)
    place(added[i].id, added[i].content, "added_tokens[" + std::to_string(i) + "].id");
  for (size_t i = 0; i < present.size(); ++i)
    if (!present[i])
      r.fail(ErrorKind::kBadInput, "model.vocab",
             "expected dense ids 0.." + std::to_string(present.size() - 1) + ", found id " +
                 std::to_string(i) + " missing");
  std::vector<int32_t> types(tokens.size(), token_type::kNormal);
  for (const auto& a : added) types[a.id] = a.special ? token_type::kControl : token_type::kUserDefined;

  auto mit = model.find("merges");
  if (mit == model.end() || !mit->is_array())
    r.fail(ErrorKind::kBadInput, "model.merges", "expected an array of merges");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(mit->size());
  for (size_t i = 0; i < mit->size(); ++i) {
    const json& m = (*mit)[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= s.size())
        r.fail(ErrorKind::kBadInput, field, "expected \"a b\", found \"" + s + "\"");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.fail(ErrorKind::kBadInput, field, "expected \"a b\" or [a, b], found " + m.dump());
    }
  }

  std::unique_ptr<ByteLevelBpe> tok(
      new ByteLevelBpe(std::move(tokens), merges, std::move(types), pre, ignore_merges, added, path,
                       "model.merges"));
  tok->nfc_ = nfc;

  // BOS: the leading special token of a TemplateProcessing post-processor (on its own or
  // inside a Sequence, as Llama 3 has it).
  auto is_type = [](const json& j, const char* t) {
    auto it = j.find("type");
    return j.is_object() && it != j.end() && it->is_string() && *it == t;
  };
  const json* template_processing = nullptr;
  std::string pp_field = "post_processor";
  if (auto it = root.find("post_processor"); it != root.end()) {
    if (is_type(*it, "TemplateProcessing")) {
      template_processing = &*it;
    } else if (is_type(*it, "Sequence") && it->contains("processors") && (*it)["processors"].is_array()) {
      const json& procs = (*it)["processors"];
      for (size_t i = 0; i < procs.size() && !template_processing; ++i) {
        if (is_type(procs[i], "TemplateProcessing")) {
          template_processing = &procs[i];
          pp_field += ".processors[" + std::to_string(i) + "]";
        }
      }
    }
  }
  if (template_processing) {
    auto single = template_processing->find("single");
    if (single != template_processing->end() && single->is_array() && !single->empty() &&
        (*single)[0].is_object()) {
      auto st = (*single)[0].find("SpecialToken");
      if (st != (*single)[0].end()) {
        const std::string field = pp_field + ".single[0].SpecialToken.id";
        if (!st->is_object()) r.fail(ErrorKind::kBadInput, field, "expected an object, found " + type_name(*st));
        const std::string name = r.string(*st, "id", field);
        const Token bos = tok->find_token(name);
        if (bos < 0) r.fail(ErrorKind::kBadInput, field, "expected a token of the vocabulary, found \"" + name + "\"");
        tok->set_bos_id(bos);
      }
    }
  }
  return tok;
}

}  // namespace speclab
