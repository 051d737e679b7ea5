#include "framework/train/training_runtime.h"

#include <ATen/Parallel.h>
#include <malloc.h>

#include "framework/core/blas_core.h"

namespace speclab {

TrainingRuntime::TrainingRuntime(int threads)
    : intra_op_before_(at::get_num_threads()), blas_before_(blas_threads()) {
  at::set_num_threads(1);
  set_blas_threads(threads < 1 ? 1 : threads);
#ifdef M_MMAP_THRESHOLD  // glibc
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

TrainingRuntime::~TrainingRuntime() {
  at::set_num_threads(intra_op_before_);
  if (blas_before_ > 0) set_blas_threads(blas_before_);
}

}  // namespace speclab
