// KvOptions — the YAML `kv` section: paged KV-cache geometry and budget. Torch-free.
#pragma once

#include <cstdint>

#include "framework/kv/block_manager.h"

namespace speclab {

struct KvOptions {
  int32_t block_size = 16;                 // tokens per block
  int64_t budget_bytes = int64_t(2) << 30;  // cap on K/V bytes in use over all pools
  Preemption preemption = Preemption::kOff;

  void validate() const;  // Error(kConfig, ..., "kv", <field>)
};

}  // namespace speclab
