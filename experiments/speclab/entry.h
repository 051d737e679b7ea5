// entry(): the `speclab` program, everything its main() does. main.cpp calls it; so does the
// test harness's fork server (tests/support/cli_fork_server.cpp), which forks once libtorch is
// loaded and runs a command line in the child, so that a test of hundreds of command lines pays
// the program's start (about 0.7 s of dynamic loading and libtorch's operator registration) once.
#pragma once

namespace speclab::cli {

// Runs the command line argv[0..argc) (argv[0] the program's path) and returns its exit code: 0
// ok, 1 internal error, 2 bad input. May execute argv again (select_native_blas_core,
// framework/core/blas_core.h) before anything else, when OPENBLAS_CORETYPE is unset.
int entry(int argc, char** argv);

}  // namespace speclab::cli
