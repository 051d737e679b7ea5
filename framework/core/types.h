// Basic scalar types shared by every SpecLab component.
#pragma once

#include <cstdint>
#include <vector>

namespace speclab {

using Token = int32_t;   // a vocabulary id
using Pos = int64_t;     // a position in a sequence (0-based)
using SeqId = int64_t;   // a sequence handle issued by the KV-cache manager

using TokenList = std::vector<Token>;

}  // namespace speclab
