#include "framework/kv/contiguous_kv.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include "framework/core/error.h"
#include "framework/kv/kv_storage.h"

namespace speclab {

ContiguousKv::ContiguousKv(const KvGeometry& g, int64_t capacity) : capacity_(capacity) {
  SPECLAB_CHECK(capacity > 0, "capacity must be positive");
  k_ = at::zeros(kv_storage_shape(g, capacity), kv_storage_options(g));
  v_ = at::zeros_like(k_);
}

KvView ContiguousKv::append_view(int64_t n_new) const {
  if (length_ + n_new > capacity_)
    throw Error(ErrorKind::kResource, "KV capacity of " + std::to_string(capacity_) + " tokens exceeded (need " +
                                          std::to_string(length_ + n_new) + ")");
  KvView v;
  v.k_cache = k_;
  v.v_cache = v_;
  v.write_slots = at::arange(length_, length_ + n_new, at::kLong);
  v.ctx_len = length_ + n_new;
  v.read_base = 0;
  return v;
}

void ContiguousKv::commit(int64_t n) {
  SPECLAB_CHECK(n >= 0 && length_ + n <= capacity_, "commit beyond capacity");
  length_ += n;
}

void ContiguousKv::truncate(int64_t new_len) {
  SPECLAB_CHECK(new_len >= 0 && new_len <= length_, "truncate out of range");
  length_ = new_len;
}

}  // namespace speclab
