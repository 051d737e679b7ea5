#include "framework/core/error.h"

namespace speclab {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput: return "bad input";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kConfig: return "config";
    case ErrorKind::kIo: return "io";
    case ErrorKind::kResource: return "resource";
    case ErrorKind::kInternal: return "internal";
  }
  return "unknown";
}

namespace {
std::string compose(const std::string& file, const std::string& field, const std::string& message) {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!field.empty()) out += field + ": ";
  out += message;
  return out;
}
}  // namespace

Error::Error(ErrorKind kind, const std::string& message, std::string file, std::string field)
    : std::runtime_error(compose(file, field, message)),
      kind_(kind),
      file_(std::move(file)),
      field_(std::move(field)),
      message_(message) {}

}  // namespace speclab
