// Token types and the literal matching of special tokens, shared by both tokenizers.
//
// TokenType uses the numbering of GGUF `tokenizer.ggml.token_type`. Control and user-defined
// tokens (e.g. "<|im_start|>", "<s>") written literally in the input text are emitted as their
// ids; the text between them goes through the regular tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/types.h"

namespace speclab {

namespace token_type {
inline constexpr int32_t kNormal = 1;
inline constexpr int32_t kUnknown = 2;
inline constexpr int32_t kControl = 3;
inline constexpr int32_t kUserDefined = 4;
inline constexpr int32_t kUnused = 5;
inline constexpr int32_t kByte = 6;
}  // namespace token_type

// Splits text at literal occurrences of special tokens, leftmost first and, among tokens
// starting at the same byte, longest first (HF `tokenizers` added-vocabulary semantics).
class SpecialTokenMatcher {
 public:
  struct Entry {
    std::string text;     // non-empty
    Token id;
    bool lstrip = false;  // also swallow the white space right before the token
    bool rstrip = false;  // also swallow the white space right after the token
  };
  // One piece of the input: plain text (id == -1) or one special token (text = what matched,
  // including any stripped white space).
  struct Segment {
    std::string_view text;
    Token id;
  };

  SpecialTokenMatcher() = default;
  explicit SpecialTokenMatcher(std::vector<Entry> entries);

  bool empty() const { return entries_.empty(); }
  // Segments cover `text` exactly, in order; plain-text segments are never empty.
  std::vector<Segment> split(std::string_view text) const;

 private:
  std::vector<Entry> entries_;
  std::vector<std::vector<uint32_t>> by_first_byte_;  // [256] -> entries_ indices, longest first
};

}  // namespace speclab
