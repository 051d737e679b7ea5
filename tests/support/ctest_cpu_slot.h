// pin_to_ctest_cpu_slot() — one CPU per test process when CTest hands out CPUs.
//
// `make test` runs CTest with a resource spec of one slot per job (-j; scripts/ctest_resources.sh
// writes it) and every test asks for one slot (RESOURCE_GROUPS "cpus:1", tests/CMakeLists.txt).
// CTest then tells each test process which slot it holds, in the environment:
//   CTEST_RESOURCE_GROUP_COUNT=1, CTEST_RESOURCE_GROUP_0=cpus, CTEST_RESOURCE_GROUP_0_CPUS=id:<k>,slots:1
// Called first thing in main(), this binds the process to the k-th CPU of its affinity mask (k
// modulo the mask's size), and sizes the thread pools that were already sized when the process
// loaded (OpenBLAS's, libgomp's) to one thread. SpecLab's own pool reads the mask when first used
// (framework/core/thread_pool.h: available_cpus()), and the processes a test starts (the speclab
// command line) inherit the mask.
//
// Why: two tests at a time, each with a thread per CPU, ran four compute threads on two cores, and
// the idle workers of each pool spun for a while after every job. Bound, the release suite's CTest
// took 583 s instead of 648 (2-core AMD EPYC, 2026-12-08; docs/hardening.md, "Cold CI time").
// The kernels' results do not depend on the thread count (tests/unit/test_attention_cpu.cpp and test_qgemm.cpp check that at 1
// to 3 threads); tests that need several threads set them.
//
// Without those variables (ctest run without the spec, a test executable run by hand) it does
// nothing, and so with SPECLAB_TEST_ALL_CPUS=1, which tests/CMakeLists.txt sets for the executables
// that test concurrency and results across thread counts (test_thread_pool, test_attention_cpu,
// test_qgemm): they need threads on separate cores. They still hold a slot, so CTest runs no more
// tests at once.
#pragma once

#include <dlfcn.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>

#include "framework/core/blas_core.h"

namespace speclab::test {

inline void pin_to_ctest_cpu_slot() {
  if (const char* all = std::getenv("SPECLAB_TEST_ALL_CPUS"); all && std::strcmp(all, "1") == 0) return;
  const char* count = std::getenv("CTEST_RESOURCE_GROUP_COUNT");
  const char* group = std::getenv("CTEST_RESOURCE_GROUP_0");
  const char* cpus = std::getenv("CTEST_RESOURCE_GROUP_0_CPUS");
  if (!count || std::strcmp(count, "1") != 0 || !group || std::strcmp(group, "cpus") != 0 || !cpus) return;
  if (std::strncmp(cpus, "id:", 3) != 0) return;
  char* end = nullptr;
  const long k = std::strtol(cpus + 3, &end, 10);
  if (end == cpus + 3 || *end != ',' || k < 0) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  const int n = CPU_COUNT(&mask);
  if (n > 1) {
    int want = static_cast<int>(k % n), cpu = -1;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask) && want-- == 0) {
        cpu = c;
        break;
      }
    if (cpu < 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (::sched_setaffinity(0, sizeof(one), &one) != 0) return;
  }
  // Pools sized when their libraries loaded, before main(): one thread each now (also where the
  // mask held one CPU already, as in a process that executed itself again: blas_core.h).
  speclab::set_blas_threads(1);
  using SetThreads = void (*)(int);  // libgomp's, where libtorch loaded it
  if (auto* set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
}

}  // namespace speclab::test
