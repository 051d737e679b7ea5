// What a test may find missing, and when a missing resource skips instead of failing.
//  - Real models: scripts/setup.sh (run by every make target that builds) installs
//    SmolLM2-135M-Instruct and the Qwen2.5-Coder pair; SPECLAB_QWEN=0 leaves the pair out on
//    purpose. A test that needs a missing model fails, except a Qwen test under SPECLAB_QWEN=0,
//    which skips with a WARN.
//  - A CUDA device: absent on the CPU machines, so CUDA cases skip with a WARN there; where
//    SPECLAB_REQUIRE_CUDA=1 (scripts/device/gpu_checks.sh sets it on the GPU machine) a case that
//    finds no device fails instead, so a GPU run cannot pass by skipping.
// A skip therefore happens only where someone asked for it or no GPU exists, and always says so.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace speclab::testing {

// True when the environment sets SPECLAB_QWEN=0 (the Qwen pair left out of setup).
inline bool qwen_opted_out() {
  const char* v = std::getenv("SPECLAB_QWEN");
  return v != nullptr && std::string(v) == "0";
}

// True when the environment sets SPECLAB_REQUIRE_CUDA=1.
inline bool cuda_required() {
  const char* v = std::getenv("SPECLAB_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

// For a CUDA case: false when `available` (run it); else true after a WARN naming `what` (skip
// it), or a FAIL under SPECLAB_REQUIRE_CUDA=1.
inline bool skip_without_cuda(bool available, const std::string& what) {
  if (available) return false;
  if (cuda_required()) FAIL("SPECLAB_REQUIRE_CUDA=1, but " << what);
  WARN(what << ": skipped");
  return true;
}

}  // namespace speclab::testing
