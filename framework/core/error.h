// speclab::Error — the one exception type that library code throws.
//
// Library code never prints and never exits (STYLE.md §9). It throws an Error that carries
// a kind, the file (or other source) at fault, the field/key at fault, and a message that
// says what was expected and what was found. Front ends in experiments/ catch it, print
// `error: <what()>` on one line and exit with code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace speclab {

enum class ErrorKind {
  kBadInput,     // malformed or inconsistent input data (files, prompts, parameters)
  kUnsupported,  // well-formed but not supported (e.g. an unknown GGUF tensor type)
  kConfig,       // invalid option or configuration value
  kIo,           // a file could not be opened, read or written
  kResource,     // a budget (memory, KV blocks, context length) ran out
  kInternal,     // a broken invariant inside SpecLab (a bug)
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  // `file` and `field` may be empty. what() reads "file: field: message".
  Error(ErrorKind kind, const std::string& message, std::string file = {}, std::string field = {});

  ErrorKind kind() const { return kind_; }
  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }
  const std::string& message() const { return message_; }

 private:
  ErrorKind kind_;
  std::string file_;
  std::string field_;
  std::string message_;
};

// Throws Error(kInternal) when `cond` is false. For invariants, not for input validation.
#define SPECLAB_CHECK(cond, msg)                                                          \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::speclab::Error(::speclab::ErrorKind::kInternal,                             \
                             std::string("internal check failed: ") + #cond + ": " + (msg)); \
  } while (0)

}  // namespace speclab
