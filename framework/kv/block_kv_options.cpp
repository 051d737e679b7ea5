#include "framework/core/error.h"
#include "framework/kv/kv_options.h"

namespace speclab {

void KvOptions::validate() const {
  BlockManagerOptions::validate();
  if (block_size <= 0 || block_size > 4096)
    throw Error(ErrorKind::kConfig, "expected 1..4096 tokens, found " + std::to_string(block_size), {},
                "kv.block_size");
}

}  // namespace speclab
