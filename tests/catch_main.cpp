// Every test executable's main(): Catch2's, after OpenBLAS is set to this CPU's kernels
// (framework/core/blas_core.h), as the speclab command line does.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "framework/core/blas_core.h"

int main(int argc, char** argv) {
  speclab::select_native_blas_core(argv);
  return Catch::Session().run(argc, argv);
}
