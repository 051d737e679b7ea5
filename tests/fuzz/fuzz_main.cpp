// The libFuzzer entry point of one harness; CMake compiles this file once per harness with
// SPECLAB_FUZZ_TARGET set to its function (see harnesses.h).
#include "tests/fuzz/harnesses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return speclab_fuzz::SPECLAB_FUZZ_TARGET(data, size);
}
