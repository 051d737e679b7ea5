// OpenBLAS at run time: select_native_blas_core() makes it run kernels for this CPU where its own
// detection fell back to a generic core; set_blas_threads() sizes its thread pool.
//
// libtorch's float32 matmuls on the CPU (train-draft's autograd, the libtorch-op backend) run on
// the system BLAS, Debian's OpenBLAS 0.3.21 built for every core (DYNAMIC_ARCH). It picks its
// kernels once, as the library loads, from the CPU's family and model; a CPU newer than the build
// falls back to a generic core. On an Intel Xeon of family 6 model 207 (AVX-512) it chose
// "Prescott", SSE3 kernels: sgemm ran at about 32 GFLOP/s against about 200 with "SkylakeX", and
// a train-draft step took 2.3-3.2x as long (docs/performance.md). The only switch is the environment
// variable OPENBLAS_CORETYPE, read at load time, so a program that finds such a fallback sets it
// and executes itself again.
#pragma once

namespace speclab {

// The OpenBLAS core to ask for, given the one OpenBLAS reported (`reported`, null when OpenBLAS is
// not loaded) and what the CPU supports: "SkylakeX" with AVX-512 F/CD/BW/DQ/VL, else "Haswell" with
// AVX2 and FMA, when `reported` is a core without AVX2 (Prescott, Core2, Nehalem, Sandybridge, the
// pre-Zen AMD cores, ...; compared case-insensitively). Null when nothing is to change.
const char* native_blas_core(const char* reported, bool avx2_fma, bool avx512_skx);
// The same for this CPU's features.
const char* native_blas_core(const char* reported);

// Call first thing in main(). If OPENBLAS_CORETYPE is unset and native_blas_core() names a core for
// the loaded OpenBLAS and this CPU, sets OPENBLAS_CORETYPE and executes /proc/self/exe again with
// argv (stdio, exit status and everything else as before); on success it does not return. Returns
// normally when nothing is to change, when OPENBLAS_CORETYPE is already set (the user's choice,
// or the second run), and when the exec fails (the program then runs as it would have).
void select_native_blas_core(char** argv);

// The core OpenBLAS reported (openblas_get_corename), or null when OpenBLAS is not loaded.
const char* loaded_blas_core();

// OpenBLAS's own pthread pool, apart from libtorch's intra-op pool (libgomp, at::set_num_threads):
// the threads one float32 matmul of libtorch's runs on. set_blas_threads(n) sets it (n >= 1), for
// the whole process; a no-op where OpenBLAS is not loaded (another BLAS has its own switches).
// blas_threads() is its current size, 0 where OpenBLAS is not loaded.
void set_blas_threads(int n);
int blas_threads();

}  // namespace speclab
