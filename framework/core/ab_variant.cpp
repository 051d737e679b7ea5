#include "framework/core/ab_variant.h"

namespace speclab::detail {

std::atomic<int> g_ab_variant{0};

}  // namespace speclab::detail
