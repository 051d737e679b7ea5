#include "framework/core/error.h"
#include "framework/kv/kv_options.h"

namespace speclab {

void KvOptions::validate() const {
  if (block_size <= 0 || block_size > 4096)
    throw Error(ErrorKind::kConfig, "expected 1..4096 tokens, found " + std::to_string(block_size), "kv", "block_size");
  if (budget_bytes <= 0)
    throw Error(ErrorKind::kConfig, "expected a positive byte count, found " + std::to_string(budget_bytes), "kv",
                "budget_bytes");
}

}  // namespace speclab
