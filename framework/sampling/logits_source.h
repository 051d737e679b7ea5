// naming_logits_source() — says which model produced logits that sampling refused.
//
// Sampling's checks (sampling.h: logits_to_probs, argmax, pick_token) throw
// Error(kBadInput, file "sampling", field "logits") on a NaN or +inf logit, or a row of all
// -inf. They read a bare row and cannot know whose it is. The engine runs each model's picks
// through naming_logits_source(source, f), which rethrows such an error with `source` ("target
// model", "drafter draft_model", ...) as its file, so a NaN in a draft model's weights is not
// blamed on the target. Until 2026-12-06 both read "sampling: logits: expected finite logits or
// -inf, found nan at index 30338", with neither model named.
//
// Every other error passes through unchanged.
#pragma once

#include <string>
#include <utility>

#include "framework/core/error.h"

namespace speclab {

// The source the engine names for the target's logits.
constexpr const char* kTargetModelSource = "target model";

// True for the errors sampling raises about the values of the logits row it was handed (not
// about a bad vocabulary size or a null row, which are SpecLab's own bugs).
inline bool is_logits_error(const Error& e) {
  return e.file() == "sampling" && e.field() == "logits" &&
         (e.message().rfind("expected finite logits", 0) == 0 || e.message().rfind("expected at least one finite logit", 0) == 0);
}

// Runs f() and returns its result; an is_logits_error() is rethrown as "<source>: logits:
// <message>; the <source> produced them (a NaN or infinity in its weights, or an overflow in its
// forward pass)".
template <class F>
decltype(auto) naming_logits_source(const std::string& source, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    if (!is_logits_error(e)) throw;
    throw Error(e.kind(),
                e.message() + "; the " + source +
                    " produced them (a NaN or infinity in its weights, or an overflow in its forward pass)",
                source, "logits");
  }
}

}  // namespace speclab
