// Whether this test executable is instrumented with AddressSanitizer (`make test-sanitize`,
// `make test-sanitize-ci`; GCC defines __SANITIZE_ADDRESS__, Clang answers
// __has_feature(address_sanitizer)), and sweeps that are shorter there. Header-only.
//
// Instrumented code runs about ten times slower, and the sanitizer run looks for memory errors,
// not for numerical differences. A kernel test's sweep therefore takes fewer interior points under
// the sanitizers, or a shorter context of the same structure: every boundary the kernel treats on
// its own (the first and last tile and split, a remainder of each row block, each work plan, each
// ISA) stays in the sanitized sweep, and the release build (`make test`) runs the full one with the
// same assertions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace speclab::testing {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// `full` in a release build, `sanitized` (its points that cover the boundaries) under the
// sanitizers.
inline std::vector<int64_t> sweep(std::initializer_list<int64_t> full, std::initializer_list<int64_t> sanitized) {
  return kSanitized ? std::vector<int64_t>(sanitized) : std::vector<int64_t>(full);
}

}  // namespace speclab::testing
