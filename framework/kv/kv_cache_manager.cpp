#include "framework/kv/kv_cache_manager.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include "framework/core/error.h"
#include "framework/kv/kv_storage.h"

namespace speclab {

KvCacheManager::KvCacheManager(const KvOptions& options)
    : options_(options), blocks_([&]() -> const BlockManagerOptions& {
        options.validate();
        return options;
      }()) {}

PoolId KvCacheManager::add_pool(const KvGeometry& g) {
  BlockPoolOptions po;
  po.block_size = options_.block_size;
  po.bytes_per_block = kv_bytes_per_block(g.n_layers, g.n_kv_heads, g.stored_head_dim(), po.block_size,
                                         static_cast<int64_t>(g.element_bytes()));
  const int64_t max_blocks = options_.budget_bytes / po.bytes_per_block;
  if (max_blocks < 1)
    throw Error(ErrorKind::kConfig,
                "KV budget of " + std::to_string(options_.budget_bytes) + " bytes is smaller than one block (" +
                    std::to_string(po.bytes_per_block) + " bytes)",
                "kv", "budget_bytes");
  // Never more slots than a budget-filling pool could use; contexts are bounded by the model too.
  po.n_blocks = static_cast<int32_t>(std::min<int64_t>(max_blocks, int64_t(1) << 20));
  // The storage first: a failed allocation leaves no pool without storage behind (pool ids index
  // storage_), and says which key sizes it.
  c10::InferenceMode guard(false);
  Storage s;
  const int64_t slots = static_cast<int64_t>(po.n_blocks) * po.block_size;
  try {
    s.k = at::empty(kv_storage_shape(g, slots), kv_storage_options(g));
    s.v = at::empty_like(s.k);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::kResource,
                "cannot allocate a KV pool of " + std::to_string(po.n_blocks) + " blocks x " +
                    std::to_string(po.bytes_per_block) + " bytes on " + g.device +
                    " (each pool is sized to the whole budget): " + e.what_without_backtrace(),
                "kv", "budget_bytes");
  }
  const PoolId id = blocks_.add_pool(po);
  storage_.push_back(std::move(s));
  return id;
}

SeqId KvCacheManager::create(PoolId pool, int priority) { return blocks_.create(pool, priority); }

Reservation KvCacheManager::reserve(SeqId seq, int64_t n) {
  Reservation r = blocks_.reserve(seq, n);
  if (r.copies.empty()) return r;
  Storage& s = storage_[static_cast<size_t>(blocks_.pool_of(seq))];
  const int64_t bs = options_.block_size;
  for (const BlockCopy& c : r.copies) {
    s.k.narrow(1, c.dst * bs, bs).copy_(s.k.narrow(1, c.src * bs, bs));
    s.v.narrow(1, c.dst * bs, bs).copy_(s.v.narrow(1, c.src * bs, bs));
  }
  return r;
}

KvView KvCacheManager::view_at(SeqId seq, int64_t start, int64_t n_new) const {
  const int64_t len = start;
  const int64_t ctx = len + n_new;
  if (n_new <= 0 || start < 0 || ctx > blocks_.capacity(seq))
    throw Error(ErrorKind::kInternal, "view of " + std::to_string(n_new) + " new tokens needs capacity " +
                                          std::to_string(ctx) + ", reserved " +
                                          std::to_string(blocks_.capacity(seq)) + " (reserve first)",
                "kv", "view");
  const Storage& s = storage_[static_cast<size_t>(blocks_.pool_of(seq))];
  KvView v;
  v.k_cache = s.k;
  v.v_cache = s.v;
  v.ctx_len = ctx;
  // Slot tensors are filled in place (a step makes several views; at::tensor costs more).
  v.write_slots = at::empty({n_new}, at::kLong);
  int64_t* write = v.write_slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < n_new; ++i) write[i] = blocks_.slot(seq, len + i);
  v.read_base = blocks_.contiguous_base(seq, ctx);
  if (v.read_base < 0) {
    const auto& table = blocks_.block_table(seq);
    const int64_t bs = options_.block_size;
    v.read_slots = at::empty({ctx}, at::kLong);
    int64_t* read = v.read_slots.data_ptr<int64_t>();
    for (int64_t p = 0; p < ctx; ++p) read[p] = table[p / bs] * bs + p % bs;
  }
  return v;
}

KvStatus KvCacheManager::commit(SeqId seq, int64_t n) { return blocks_.commit(seq, n); }
KvStatus KvCacheManager::truncate(SeqId seq, int64_t new_len) { return blocks_.truncate(seq, new_len); }
SeqId KvCacheManager::fork(SeqId seq) { return blocks_.fork(seq); }
KvStatus KvCacheManager::release(SeqId seq) { return blocks_.release(seq); }

}  // namespace speclab
