// TrainingRuntime — the process settings a draft trainer's libtorch loop (draft_trainer.h) runs
// under, for the lifetime of the object: OpenBLAS's pool at the run's threads, libtorch's own
// intra-op pool (libgomp) at one, and freed memory kept for reuse.
//
// Why, measured on a 2-core AMD EPYC Zen 4 (docs/train-draft.md, "Both cores for training"): a
// loaded model keeps both pools at one thread for its kernels (models/llama/llama_model.cpp), so
// train-draft trained on one core, and glibc handed every large tensor (a batch's 1024 x 8192
// logits is 32 MiB) back to the kernel when freed and took it again, zeroed, at the next step
// (a fifth of the step in page faults). An EAGLE step of 1,024 pairs on SmolLM2 took 1.14 s, an
// evaluation's share included; with OpenBLAS at two threads and the memory kept, 0.54 s. libgomp
// at two threads as well was slower: its threads spin at every elementwise op's barrier, on the
// cores OpenBLAS's workers need.
//
// Determinism: a given seed, thread count and OpenBLAS core give the same bytes, run after run
// and across --resume (tests/integration/test_train_draft.cpp). Another thread count or core
// gives other low-order bits (OpenBLAS splits a product's work by thread; its cores' kernels sum
// in other orders): train-draft records both and refuses a --resume that changes either.
#pragma once

namespace speclab {

class TrainingRuntime {
 public:
  // threads >= 1: OpenBLAS's pool. Sets glibc's mmap and trim thresholds to 1 GiB (mallopt) for
  // the rest of the process: they are not restored, since a process that trained has reached its
  // peak footprint already, and restoring fixed values would turn off glibc's adaptive threshold.
  explicit TrainingRuntime(int threads);
  ~TrainingRuntime();  // both pools back to their sizes before (a model's kernels want one thread)
  TrainingRuntime(const TrainingRuntime&) = delete;
  TrainingRuntime& operator=(const TrainingRuntime&) = delete;

 private:
  int intra_op_before_;
  int blas_before_;
};

}  // namespace speclab
