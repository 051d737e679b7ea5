#include "framework/core/ab_variant.h"

#include <atomic>

namespace speclab {

namespace {
std::atomic<int> g_variant{0};
}  // namespace

int ab_variant() { return g_variant.load(std::memory_order_relaxed); }
void set_ab_variant(int v) { g_variant.store(v != 0 ? 1 : 0, std::memory_order_relaxed); }

}  // namespace speclab
