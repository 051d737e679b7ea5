// KvCacheManager — the paged KV cache shared by the target and the drafters.
//
// Metadata (block tables, refcounts, budget) lives in BlockManager (block_manager.h, torch-free);
// this class adds the storage: one pair of K/V tensors per pool
//   k, v: [n_layers, n_blocks * block_size, n_kv_heads, stored_head_dim] (kv_storage.h)
// and builds the KvView a model reads through. Storage is allocated with at::empty, so pages
// are only touched (and counted by the OS) as blocks get used; the byte budget is enforced on
// blocks in use, over all pools together.
//
// Protocol for one forward pass that appends n tokens to `seq`:
//   reserve(seq, n)        allocate slots now (verification never allocates) + copy-on-write
//   view(seq, n)           KvView: write [length, length + n), read [0, length + n)
//   model.forward(...)
//   commit(seq, m)         m <= n tokens become part of the sequence
//   truncate(seq, len)     rollback of rejected positions (O(blocks freed))
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "framework/kv/block_manager.h"
#include "framework/kv/kv_options.h"
#include "framework/core/kv_view.h"
#include "framework/core/kv_geometry.h"

namespace speclab {

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvOptions& options);

  // A pool for a model of this shape (separate pools for different shapes; one budget).
  PoolId add_pool(const KvGeometry& geometry);

  SeqId create(PoolId pool, int priority = 0);
  // Capacity for n more tokens; performs copy-on-write block copies on the storage. Returns
  // BlockManager::reserve's Reservation: `copies` have already been performed when this returns;
  // `preempted` lists the sequences released to make room (with Preemption::kLowestPriority),
  // whose ids are now unknown. Errors as BlockManager::reserve (kResource with nothing changed).
  Reservation reserve(SeqId seq, int64_t n);
  // View for writing n_new tokens at [length, length + n_new); requires reserved capacity.
  KvView view(SeqId seq, int64_t n_new) const { return view_at(seq, length(seq), n_new); }
  // View for writing n_new tokens at [start, start + n_new) and reading [0, start + n_new);
  // start may exceed length (a drafter writing ahead of the committed prefix into reserved
  // slots); start + n_new <= capacity. Used by speculative steps.
  KvView view_at(SeqId seq, int64_t start, int64_t n_new) const;
  [[nodiscard]] KvStatus commit(SeqId seq, int64_t n);
  [[nodiscard]] KvStatus truncate(SeqId seq, int64_t new_len);
  SeqId fork(SeqId seq);
  KvStatus release(SeqId seq);

  int64_t length(SeqId seq) const { return blocks_.length(seq); }
  int64_t bytes_used() const { return blocks_.bytes_used(); }
  int64_t bytes_budget() const { return blocks_.bytes_budget(); }
  SeqUsage usage(SeqId seq) const { return blocks_.usage(seq); }
  const BlockManager& blocks() const { return blocks_; }
  const KvOptions& options() const { return options_; }

 private:
  struct Storage {
    at::Tensor k, v;  // [n_layers, n_blocks * block_size, n_kv_heads, head_dim]
  };
  KvOptions options_;
  BlockManager blocks_;
  std::vector<Storage> storage_;  // indexed by PoolId
};

// RAII handle for one sequence: released on destruction (exceptions included).
class KvSequence {
 public:
  KvSequence(KvCacheManager& kv, PoolId pool, int priority = 0) : kv_(&kv), seq_(kv.create(pool, priority)) {}
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;
  ~KvSequence() {
    if (kv_) (void)kv_->release(seq_);
  }
  SeqId id() const { return seq_; }

 private:
  KvCacheManager* kv_;
  SeqId seq_;
};

}  // namespace speclab
