#include "framework/core/blas_core.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>

namespace speclab {

const char* native_blas_core(const char* reported, bool avx2_fma, bool avx512_skx) {
  if (!reported || !avx2_fma) return nullptr;
  static const char* const kWithoutAvx2[] = {"Katmai",    "Coppermine", "Northwood", "Prescott",  "Banias",
                                             "Core2",     "Penryn",     "Dunnington", "Nehalem",   "Atom",
                                             "Sandybridge", "Opteron",  "Opteron_SSE3", "Barcelona", "Bobcat",
                                             "Bulldozer", "Piledriver", "Steamroller", "Excavator", "Nano"};
  for (const char* core : kWithoutAvx2)
    if (strcasecmp(reported, core) == 0) return avx512_skx ? "SkylakeX" : "Haswell";
  return nullptr;
}

const char* loaded_blas_core() {
  using CoreName = char* (*)();
  const auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn ? fn() : nullptr;
}

void set_blas_threads(int n) {
  using SetThreads = void (*)(int);
  // goto_set_num_threads: OpenBLAS's older name, which some builds export alone.
  for (const char* name : {"openblas_set_num_threads", "goto_set_num_threads"})
    if (const auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, name))) {
      fn(n < 1 ? 1 : n);
      return;
    }
}

int blas_threads() {
  using GetThreads = int (*)();
  const auto fn = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn ? fn() : 0;
}

const char* native_blas_core(const char* reported) {
  __builtin_cpu_init();
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool skx = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vl");
  return native_blas_core(reported, avx2_fma, skx);
}

void select_native_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !argv || !argv[0]) return;
  const char* core = native_blas_core(loaded_blas_core());
  if (!core) return;
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // the exec failed: run on as before
}

}  // namespace speclab
