// KvOptions — the YAML `kv` section: paged KV-cache geometry and budget. Torch-free.
#pragma once

#include <cstdint>

#include "framework/kv/block_manager.h"

namespace speclab {

// The block manager's options (budget_bytes, preemption: declared once, in BlockManagerOptions)
// plus the pools' block size. A KvOptions is passed to BlockManager as its BlockManagerOptions.
struct KvOptions : BlockManagerOptions {
  int32_t block_size = 16;  // tokens per block

  KvOptions() { budget_bytes = int64_t(2) << 30; }  // cap on K/V bytes in use over all pools

  // BlockManagerOptions::validate() (Error(kConfig) field "kv.budget_bytes" / "kv.preemption"),
  // then block_size in 1..4096 (field "kv.block_size").
  void validate() const;
};

}  // namespace speclab
