#!/usr/bin/env bash
# Builds the test suite with ASan + UBSan (gcc, -DSPECLAB_SANITIZE=ON, RelWithDebInfo) in
# $SANITIZE_BUILD (default build-asan) and runs it under CTest.
#   scripts/test_sanitize.sh          the whole suite (make test-sanitize)
#   scripts/test_sanitize.sh ci       the torch-free subset that CI runs (make test-sanitize-ci)
# Any ASan report, leak or UBSan report fails the test it occurs in (halt_on_error).
# What is suppressed, and why, is in docs/hardening.md ("Sanitizers") and
# tests/sanitize/lsan.supp.
set -euo pipefail
EXTRA_CMAKE=()
cd "$(dirname "$0")/.."
SUBSET=${1:-${SANITIZE_SUBSET:-full}}
case "$SUBSET" in
  full) BUILD=${SANITIZE_BUILD:-build-asan} ;;
  # Without Boost.Program_options the speclab CLI is not built, and the tests stop depending on
  # it (tests/CMakeLists.txt), so the subset compiles only the torch-free libraries.
  # SPECLAB_SANITIZE_QUICK: the libraries at -O0 but for the sources these tests run hot
  # (CMakeLists.txt): a cold build of the subset in about half the time.
  ci) BUILD=${SANITIZE_BUILD:-build-asan-ci}; EXTRA_CMAKE=(-DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON -DSPECLAB_SANITIZE_QUICK=ON) ;;
  *) echo "test_sanitize: expected 'full' or 'ci', found '$SUBSET'" >&2; exit 2 ;;
esac
JOBS=${JOBS:-$(nproc)}

# The CI subset: the torch-free libraries' tests (speclab_core/tokenizers/loaders/math), the CPU
# attention kernel's (speclab_kernels: paged slot reads and next-tile prefetch over every cache
# type and ISA; about 3 minutes instrumented on 2 cores) and the fuzz regressions, a few minutes
# against ~1 h for the whole suite under ASan. The list is SPECLAB_SANITIZE_CI_TESTS in
# tests/CMakeLists.txt: the target sanitize_ci_tests builds them, the CTest label sanitize_ci
# runs them.

bash scripts/setup.sh
# Configured on every run (a few seconds when nothing changed): the generated Makefile must
# know targets added since the build directory was made (sanitize_ci_tests) before make is asked
# for them. CUDA off: nvcc objects are not instrumented, and the CUDA test needs a GPU anyway.
# -O1 -g1 (line tables only): what the ASan docs recommend, and quicker to compile than -O2 -g.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DSPECLAB_SANITIZE=ON -DSPECLAB_CUDA=OFF \
  "${EXTRA_CMAKE[@]}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0}

if [ "$SUBSET" = ci ]; then
  cmake --build "$BUILD" -j"$JOBS" --target sanitize_ci_tests
  bash scripts/ctest_resources.sh "$BUILD/ctest_cpus.json" "$JOBS"
  (cd "$BUILD" && ctest --output-on-failure -j"$JOBS" --resource-spec-file ctest_cpus.json -L '^sanitize_ci$')
else
  cmake --build "$BUILD" -j"$JOBS"
  (cd "$BUILD" && ctest --output-on-failure -j"$JOBS")
fi
