// Every test executable's main(): Catch2's, after the process is bound to the CPU CTest gave it
// (tests/support/ctest_cpu_slot.h) and OpenBLAS is set to this CPU's kernels
// (framework/core/blas_core.h), as the speclab command line does.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "framework/core/blas_core.h"
#include "tests/support/ctest_cpu_slot.h"

int main(int argc, char** argv) {
  speclab::test::pin_to_ctest_cpu_slot();
  speclab::select_native_blas_core(argv);
  return Catch::Session().run(argc, argv);
}
