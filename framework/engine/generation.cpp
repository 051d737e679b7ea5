#include "framework/engine/generation.h"

#include <algorithm>

#include "framework/core/error.h"

namespace speclab {

void GenerationOptions::validate() const {
  if (max_new_tokens <= 0)
    throw Error(ErrorKind::kConfig, "expected a positive integer, found " + std::to_string(max_new_tokens),
                "generation", "max_new_tokens");
  for (const auto& s : stop)
    if (s.empty()) throw Error(ErrorKind::kConfig, "expected non-empty stop strings, found \"\"", "generation", "stop");
}

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::kNone: return "none";
    case StopReason::kEos: return "eos";
    case StopReason::kLength: return "length";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kContext: return "context";
  }
  return "unknown";
}

StopCriteria::StopCriteria(const TokenDecoder& tok, const GenerationOptions& opts, int64_t prompt_len,
                           int64_t context_len, Token last_prompt)
    : tok_(tok), opts_(opts), prompt_len_(prompt_len), context_len_(context_len), prev_(last_prompt) {
  for (const auto& s : opts.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
}

bool StopCriteria::push(Token t) {
  ++n_;
  if (!opts_.ignore_eos && tok_.is_eos(t)) {
    reason_ = StopReason::kEos;
    return true;
  }
  const size_t before = text_.size();
  text_ += tok_.token_bytes_after(prev_, t);
  prev_ = t;
  if (max_stop_len_ > 0) {
    // Only the window that the new bytes can complete needs searching.
    const size_t from = before >= max_stop_len_ ? before - max_stop_len_ + 1 : 0;
    size_t cut = std::string::npos;
    for (const auto& s : opts_.stop) {
      size_t at = text_.find(s, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      text_.resize(cut);
      reason_ = StopReason::kStopString;
      return true;
    }
  }
  if (n_ >= opts_.max_new_tokens) {
    reason_ = StopReason::kLength;
    return true;
  }
  if (prompt_len_ + n_ >= context_len_) {
    reason_ = StopReason::kContext;
    return true;
  }
  return false;
}

}  // namespace speclab
