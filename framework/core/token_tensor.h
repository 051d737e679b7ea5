// token_tensor() and position_tensor(): the [n] int64 inputs Model::forward (model.h) takes, on
// the CPU. Apart from model.h so that its users need no ATen operator header.
#pragma once

#include <ATen/ops/empty.h>

#include <cstdint>

#include "framework/core/types.h"

namespace speclab {

// Token ids as the [n] int64 tensor Model::forward takes.
inline at::Tensor token_tensor(const TokenList& ids) {
  at::Tensor t = at::empty({static_cast<int64_t>(ids.size())}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) p[i] = ids[i];
  return t;
}

// Positions start, start + 1, ..., start + n - 1 as the [n] int64 tensor Model::forward takes.
// Filled in place: at::arange goes through a parallel TensorIterator, tens of microseconds per
// call, and a speculative step makes one per forward.
inline at::Tensor position_tensor(int64_t start, int64_t n) {
  at::Tensor t = at::empty({n}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + i;
  return t;
}

}  // namespace speclab
