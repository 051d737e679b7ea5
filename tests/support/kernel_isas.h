// The kernel ISAs (models/llama/gemv.h) a test can run on this CPU, and a guard that restores
// the default ISA cap when a test ends, whatever happens. Header-only; for the kernel tests.
#pragma once

#include <vector>

#include "models/llama/gemv.h"

namespace speclab::testing {

// Every kernel ISA this CPU can run, best first.
inline std::vector<KernelIsa> runnable_isas() {
  std::vector<KernelIsa> v;
  for (int i = static_cast<int>(best_kernel_isa()); i >= 0; --i) v.push_back(static_cast<KernelIsa>(i));
  return v;
}

struct IsaCapGuard {
  IsaCapGuard() = default;
  IsaCapGuard(const IsaCapGuard&) = delete;
  IsaCapGuard& operator=(const IsaCapGuard&) = delete;
  ~IsaCapGuard() { set_kernel_isa_cap(kKernelIsaMax); }
};

}  // namespace speclab::testing
