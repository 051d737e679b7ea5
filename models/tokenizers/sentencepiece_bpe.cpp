#include "models/tokenizers/sentencepiece_bpe.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <queue>

#include "framework/core/error.h"
#include "framework/core/regular_file.h"

namespace speclab {

namespace {

constexpr const char* kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// Parses "<0xXX>" (upper- or lower-case hex); returns -1 when `piece` is not a byte piece.
int parse_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    char c = piece[k];
    int d = (c >= '0' && c <= '9') ? c - '0'
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                     : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (true) {
    size_t k = s.find(from, i);
    if (k == std::string_view::npos) break;
    out.append(s.substr(i, k - i));
    out.append(to);
    i = k + from.size();
  }
  out.append(s.substr(i));
  return out;
}

// run.c starts every merge search at this score; merges scoring lower never happen.
constexpr float kNoMergeScore = -1e10f;

}  // namespace

SentencePieceBpe::SentencePieceBpe(std::vector<std::string> pieces, std::vector<float> scores,
                                   std::vector<int32_t> token_types, bool add_space_prefix)
    : pieces_(std::move(pieces)),
      scores_(std::move(scores)),
      types_(std::move(token_types)),
      add_space_prefix_(add_space_prefix) {
  const size_t n = pieces_.size();
  if (n == 0) throw Error(ErrorKind::kBadInput, "expected a non-empty vocabulary, found 0 pieces", "", "tokens");
  if (scores_.size() != n)
    throw Error(ErrorKind::kBadInput,
                "expected " + std::to_string(n) + " scores (one per piece), found " +
                    std::to_string(scores_.size()),
                "", "scores");
  if (!types_.empty() && types_.size() != n)
    throw Error(ErrorKind::kBadInput,
                "expected " + std::to_string(n) + " token types (one per piece), found " +
                    std::to_string(types_.size()),
                "", "token_type");
  if (types_.empty()) {
    types_.resize(n, token_type::kNormal);
    for (size_t i = 0; i < n; ++i) {
      if (parse_byte_piece(pieces_[i]) >= 0) types_[i] = token_type::kByte;
      else if (pieces_[i] == "<unk>") types_[i] = token_type::kUnknown;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (types_[i] < token_type::kNormal || types_[i] > token_type::kByte)
      throw Error(ErrorKind::kBadInput,
                  "expected token type 1..6 for token " + std::to_string(i) + ", found " +
                      std::to_string(types_[i]),
                  "", "token_type");
  }

  for (const auto& p : pieces_) {
    if (p.find(kSpaceMarker) != std::string::npos) {
      space_marker_ = true;
      break;
    }
  }

  Token unk = -1;
  for (auto& b : byte_fallback_) b = -1;
  std::vector<SpecialTokenMatcher::Entry> specials;
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Token id = static_cast<Token>(i);
    const std::string& p = pieces_[i];
    if (!p.empty()) piece_to_id_.emplace(std::string_view(p), id);  // first id wins
    switch (types_[i]) {
      case token_type::kByte: {
        int b = parse_byte_piece(p);
        if (b < 0)
          throw Error(ErrorKind::kBadInput,
                      "expected a byte token of the form <0xXX> at id " + std::to_string(i) +
                          ", found \"" + p + "\"",
                      "", "token_type");
        if (byte_fallback_[b] < 0) byte_fallback_[b] = id;
        bytes_[i] = std::string(1, static_cast<char>(b));
        break;
      }
      case token_type::kControl:
        specials.push_back({p, id});
        break;  // decodes to nothing
      case token_type::kUserDefined:
        specials.push_back({p, id});
        bytes_[i] = space_marker_ ? replace_all(p, kSpaceMarker, " ") : p;
        break;
      case token_type::kUnknown:
        if (unk < 0) unk = id;
        [[fallthrough]];
      default:
        bytes_[i] = space_marker_ ? replace_all(p, kSpaceMarker, " ") : p;
    }
  }
  for (auto& b : byte_fallback_)
    if (b < 0) b = unk;
  specials_ = SpecialTokenMatcher(std::move(specials));
}

std::unique_ptr<SentencePieceBpe> SentencePieceBpe::from_llama2c(const std::string& path,
                                                                 int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot open tokenizer file", path);
  require_regular_file(path);
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<int64_t>(in.tellg());
  in.seekg(0, std::ios::beg);
  std::string data(static_cast<size_t>(std::max<int64_t>(file_size, 0)), '\0');
  if (file_size < 0 || !in.read(data.data(), file_size))
    throw Error(ErrorKind::kIo, "cannot read tokenizer file", path);

  // Every token takes at least 8 bytes (score + length), after the 4-byte header.
  const int64_t max_vocab = (file_size - 4) / 8;
  if (vocab_size <= 0 || vocab_size > max_vocab)
    throw Error(ErrorKind::kBadInput,
                "expected vocab_size in [1, " + std::to_string(std::max<int64_t>(max_vocab, 0)) +
                    "] for a " + std::to_string(file_size) + "-byte file, found " +
                    std::to_string(vocab_size),
                path, "vocab_size");

  size_t off = 0;
  auto read_i32 = [&](const char* field) {
    if (data.size() - off < 4)
      throw Error(ErrorKind::kBadInput, "unexpected end of file at byte " + std::to_string(off), path, field);
    int32_t v;
    std::memcpy(&v, data.data() + off, 4);
    off += 4;
    return v;
  };
  const int32_t max_token_length = read_i32("max_token_length");
  if (max_token_length < 0)
    throw Error(ErrorKind::kBadInput,
                "expected max_token_length >= 0, found " + std::to_string(max_token_length), path,
                "max_token_length");

  std::vector<std::string> pieces;
  std::vector<float> scores;
  pieces.reserve(static_cast<size_t>(vocab_size));
  scores.reserve(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) {
    const std::string field = "token[" + std::to_string(i) + "]";
    int32_t score_bits = read_i32(field.c_str());
    float score;
    std::memcpy(&score, &score_bits, 4);
    const int32_t len = read_i32(field.c_str());
    if (len < 0 || static_cast<size_t>(len) > data.size() - off)
      throw Error(ErrorKind::kBadInput,
                  "expected a piece length in [0, " + std::to_string(data.size() - off) +
                      "], found " + std::to_string(len),
                  path, field + ".len");
    pieces.emplace_back(data.data() + off, static_cast<size_t>(len));
    off += static_cast<size_t>(len);
    scores.push_back(score);
  }

  // llama2.c's export keeps SentencePiece's ids: 0 <unk>, 1 BOS, 2 EOS, then <0x00>..<0xFF>.
  std::vector<int32_t> types(pieces.size(), token_type::kNormal);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (parse_byte_piece(pieces[i]) >= 0) types[i] = token_type::kByte;
    else if (pieces[i] == "<unk>") types[i] = token_type::kUnknown;
  }
  for (size_t i = 1; i <= 2 && i < pieces.size(); ++i) types[i] = token_type::kControl;

  auto tok = std::make_unique<SentencePieceBpe>(std::move(pieces), std::move(scores),
                                                std::move(types), /*add_space_prefix=*/true);
  tok->set_bos_id(vocab_size > 1 ? 1 : -1);
  tok->set_eos_ids(vocab_size > 2 ? TokenList{2} : TokenList{});
  return tok;
}

void SentencePieceBpe::check_id(Token id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
    throw Error(ErrorKind::kBadInput,
                "expected a token id in [0, " + std::to_string(pieces_.size()) + "), found " +
                    std::to_string(id),
                "", "token");
}

float SentencePieceBpe::score(Token id) const {
  check_id(id);
  return scores_[id];
}

int32_t SentencePieceBpe::token_type(Token id) const {
  check_id(id);
  return types_[id];
}

std::string SentencePieceBpe::token_bytes(Token id) const {
  check_id(id);
  return bytes_[id];
}

const std::string& SentencePieceBpe::token_text(Token id) const {
  check_id(id);
  return pieces_[id];
}

TokenList SentencePieceBpe::encode(std::string_view text, bool add_bos) const {
  TokenList out;
  out.reserve(text.size() / 2 + 2);
  if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  bool chunk_start = true;  // at the text start or right after a special token
  for (const auto& seg : specials_.split(text)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      chunk_start = true;
    } else {
      encode_chunk(seg.text, chunk_start && add_space_prefix_, out);
      chunk_start = false;
    }
  }
  return out;
}

void SentencePieceBpe::encode_chunk(std::string_view chunk, bool dummy_prefix,
                                    TokenList& out) const {
  if (chunk.empty()) return;
  std::string text;
  text.reserve(chunk.size() + 4);
  if (dummy_prefix) text += ' ';
  text.append(chunk);
  if (space_marker_) text = replace_all(text, " ", kSpaceMarker);

  // Symbols: a byte range of `text` and its piece id (-1: not a piece, falls back to bytes).
  struct Symbol {
    uint32_t begin, len;
    Token id;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;  // run.c: a byte plus the continuation bytes after it, at most 4 in all
    while (len < 4 && i + len < text.size() &&
           (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80)
      ++len;
    auto it = piece_to_id_.find(std::string_view(text).substr(i, len));
    const int32_t k = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len),
                   it == piece_to_id_.end() ? -1 : it->second, k - 1, k + 1});
    i += len;
  }
  sym.back().next = -1;

  // Candidate merges, best score first, then leftmost (run.c's scan order). An entry is stale
  // when either side has merged since: then the lengths no longer add up.
  struct Candidate {
    float score;
    int32_t left, right;
    uint32_t len;
    Token id;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
    const uint32_t len = sym[left].len + sym[right].len;
    auto it = piece_to_id_.find(std::string_view(text).substr(sym[left].begin, len));
    if (it == piece_to_id_.end()) return;
    const int32_t t = types_[it->second];
    if (t == token_type::kControl || t == token_type::kByte || t == token_type::kUnknown) return;
    const float s = scores_[it->second];
    if (!(s > kNoMergeScore)) return;
    queue.push({s, left, right, len, it->second});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) try_pair(k, k + 1);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len) continue;
    l.len = c.len;
    l.id = c.id;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.len = 0;
    try_pair(l.prev, c.left);
    try_pair(c.left, l.next);
  }

  for (int32_t k = 0; k >= 0; k = sym[k].next) {
    const Symbol& s = sym[k];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (uint32_t b = 0; b < s.len; ++b) {
      Token id = byte_fallback_[static_cast<unsigned char>(text[s.begin + b])];
      if (id < 0)
        throw Error(ErrorKind::kUnsupported,
                    "a character is not in the vocabulary, which has neither <0xXX> byte "
                    "pieces nor an unknown token",
                    "", "tokens");
      out.push_back(id);
    }
  }
}

std::string SentencePieceBpe::token_bytes_after(Token prev, Token id) const {
  check_id(id);
  const std::string& b = bytes_[id];
  // run.c: "following BOS token, sentencepiece decoder strips any leading whitespace".
  if (prev == bos_id_ && add_space_prefix_ && types_[id] != token_type::kByte && !b.empty() && b[0] == ' ')
    return b.substr(1);
  return b;
}

std::string SentencePieceBpe::decode(const TokenList& tokens) const {
  std::string out;
  Token prev = -1;
  for (Token id : tokens) {
    out += token_bytes_after(prev, id);
    prev = id;
  }
  return out;
}

}  // namespace speclab
