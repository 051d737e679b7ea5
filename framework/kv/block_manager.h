// BlockPool and BlockManager — the torch-free metadata of SpecLab's paged KV cache.
//
// Tensors are storage only (STYLE.md §3). This header owns everything else: which blocks of a
// pool's storage belong to which sequence, how many tokens each sequence has committed, how many
// it has reserved ahead, reference counts for blocks shared by forked sequences, and one byte
// budget over all pools. The torch side (kv_cache_manager.*) owns one pair of K/V tensors per pool
//   k_cache, v_cache: [n_layers, n_blocks * block_size, n_kv_heads, stored_head_dim]
// and performs the block copies this manager asks for. Nothing here touches tensor memory.
//
// Vocabulary
//   block      block_size consecutive slots of one pool's storage; BlockId in [0, n_blocks).
//   slot       block * block_size + offset: the storage row of one token's K/V.
//   pool       one storage shape (one model: the target and a draft model with other shapes get
//              separate pools). Block ids are per pool; a sequence lives in exactly one pool.
//   sequence   a block table (logical block i holds positions [i*bs, (i+1)*bs)), a `length`
//              (committed tokens, positions [0, length)) and a capacity (block table size * bs).
//              Positions [length, capacity) are reserved ahead: they have slots but no content.
//
// Range rules (all ranges half-open)
//   slot(seq, p)          0 <= p < capacity(seq)
//   commit(seq, n)        0 <= n <= capacity - length, and every block holding a position in
//                         [length, length + n) must be exclusively owned (reserve() ensures it)
//   truncate(seq, new_len) 0 <= new_len <= length; positions [new_len, length) are discarded and
//                         blocks with index >= ceil(new_len / bs) (committed or only reserved) are
//                         dropped; the partially filled last block stays.
//
// Copy-on-write
//   fork(seq) shares the parent's blocks that hold committed tokens (refcount++). Before a
//   sequence writes, reserve() makes every block holding a position >= length exclusively owned:
//   a shared block is replaced by a fresh one and reserve() returns the (src, dst) pair; the
//   caller must copy slots [src*bs, src*bs + bs) to [dst*bs, dst*bs + bs) in every layer of K and
//   V before the next write. Blocks that hold only committed tokens stay shared for good.
//
// Budget
//   bytes_used() = sum over pools of (blocks with refcount > 0) * bytes_per_block, a shared block
//   counted once. Every allocation keeps bytes_used() <= bytes_budget(); an allocation that
//   cannot fit throws Error(kResource) and changes nothing, unless preemption is enabled, in
//   which case lower-or-equal-priority sequences are released first (see reserve()).
//
// Free list: LIFO. A fresh pool hands out ids 0, 1, 2, ... so one sequence gets contiguous
//   blocks, and blocks are returned in reverse table order so that truncate() followed by
//   reserve() gets the same blocks back (the verification loop keeps its contiguity).
//
// Errors: operations that report a non-exceptional outcome return a KvStatus (below). Misuse
//   (unknown sequence passed to a value-returning call, negative counts, unknown pool) throws
//   Error(kBadInput); running out of budget or blocks throws Error(kResource); a broken
//   invariant throws Error(kInternal). Every throwing mutation leaves the manager unchanged.
//   SeqIds are never reused, so a stale id is always detected. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/types.h"

namespace speclab {

using PoolId = int32_t;   // index of a pool inside one BlockManager, issued by add_pool()
using BlockId = int32_t;  // index of a block inside one pool, in [0, n_blocks)

// Outcome of the operations that may legitimately not happen.
enum class KvStatus {
  kOk,               // done
  kOutOfRange,       // a count or length outside the range rules above; nothing changed
  kUnknownSequence,  // the SeqId is not live (never issued, released, or preempted)
  kSharedBlock,      // commit() would cover a block shared with another sequence: reserve() first
};

const char* to_string(KvStatus status);

// Bytes of K and V for one block: 2 * n_layers * n_kv_heads * head_dim * block_size * elem_bytes
// (pass KvGeometry::stored_head_dim() as head_dim, so an int8 head's scale bytes count).
// Throws Error(kConfig) when an argument is <= 0 or the product overflows int64.
int64_t kv_bytes_per_block(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim,
                           int64_t block_size, int64_t elem_bytes = 4);

// One pool of fixed-size blocks with reference counts and a LIFO free list.
class BlockPool {
 public:
  // n_blocks >= 1, block_size >= 1, bytes_per_block >= 1 (else Error(kConfig)).
  BlockPool(int32_t n_blocks, int32_t block_size, int64_t bytes_per_block);

  int32_t n_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t block_size() const { return block_size_; }
  int64_t bytes_per_block() const { return bytes_per_block_; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_blocks() - n_free(); }
  int32_t refcount(BlockId block) const;  // 0 for a free block; Error(kBadInput) if out of range

  // Pops the free list; the block gets refcount 1. Error(kResource) when no block is free.
  BlockId allocate();
  // refcount++ of a block in use (Error(kInternal) on a free block).
  void incref(BlockId block);
  // refcount--; a block reaching 0 is pushed on the free list. Returns true when it was freed.
  bool decref(BlockId block);

  // Free list top first (the next allocate() returns front()). For tests and diagnostics.
  std::vector<BlockId> free_list() const { return {free_.rbegin(), free_.rend()}; }

  // Free list == blocks with refcount 0, without duplicates; refcounts >= 0. Error(kInternal).
  void check_invariants() const;

 private:
  int32_t block_size_;
  int64_t bytes_per_block_;
  std::vector<int32_t> refcount_;  // [n_blocks]
  std::vector<BlockId> free_;      // stack: back() is allocated next
};

struct BlockPoolOptions {
  int32_t block_size = 16;      // tokens per block
  int32_t n_blocks = 0;         // storage blocks; 0 = as many as the whole budget can hold
  int64_t bytes_per_block = 0;  // kv_bytes_per_block(...) of the model using this pool
  void validate() const;        // Error(kConfig) naming the field
};

enum class Preemption {
  kOff,             // out of budget -> Error(kResource)
  kLowestPriority,  // release other sequences (lowest priority first, newest first on ties,
                    // never one with a higher priority than the requester) until it fits
};

struct BlockManagerOptions {
  int64_t budget_bytes = 0;  // cap on bytes_used() over all pools; > 0
  Preemption preemption = Preemption::kOff;
  void validate() const;  // Error(kConfig) naming the field
};

// A block copy the caller must perform on the storage of the sequence's pool (all layers, K and V).
struct BlockCopy {
  BlockId src;
  BlockId dst;
};

struct Reservation {
  std::vector<BlockCopy> copies;  // in block-table order; perform before writing
  std::vector<SeqId> preempted;   // sequences released to make room; their ids are now unknown
};

struct SeqUsage {
  int64_t blocks_exclusive = 0;  // blocks only this sequence references (freed by release())
  int64_t blocks_shared = 0;     // blocks also referenced by other sequences
  int64_t bytes_exclusive = 0;   // blocks_exclusive * bytes_per_block
  int64_t bytes_referenced = 0;  // (blocks_exclusive + blocks_shared) * bytes_per_block
};

class BlockManager {
 public:
  explicit BlockManager(const BlockManagerOptions& options);

  // Adds a pool; its blocks are only counted against the budget once allocated.
  PoolId add_pool(const BlockPoolOptions& options);
  int32_t n_pools() const { return static_cast<int32_t>(pools_.size()); }
  const BlockPool& pool(PoolId pool) const;  // Error(kBadInput) for an unknown pool

  // ---- sequence lifecycle ----
  // A new empty sequence (length 0, no blocks) in `pool`. Error(kBadInput) for an unknown pool.
  SeqId create(PoolId pool, int priority = 0);

  // Ensures capacity(seq) >= length(seq) + n and that every block holding a position >= length
  // is exclusively owned, allocating now so that the forward pass that writes these positions
  // never allocates. Returns the copies to perform (only for blocks holding committed tokens)
  // and the sequences preempted. n >= 0 (else Error(kBadInput)); unknown seq: Error(kBadInput).
  // Out of budget or pool blocks: Error(kResource) "KV budget of X bytes exhausted: ..." with
  // nothing changed (no copies, no preemption).
  Reservation reserve(SeqId seq, int64_t n);

  // length += n after the caller wrote positions [length, length + n) to their slots.
  // kOutOfRange if n < 0 or length + n > capacity; kSharedBlock if one of those positions lies
  // in a shared block; kUnknownSequence. Nothing changes unless kOk.
  [[nodiscard]] KvStatus commit(SeqId seq, int64_t n);

  // Rollback to new_len (see the range rules): kOk, kOutOfRange (new_len < 0 or > length,
  // nothing changed) or kUnknownSequence. Frees in O(blocks dropped).
  [[nodiscard]] KvStatus truncate(SeqId seq, int64_t new_len);

  // A new sequence with the same pool, priority, length and contents, sharing the blocks that
  // hold committed tokens (ceil(length / bs) blocks; reserved-only blocks are not shared).
  // Never allocates. Unknown seq: Error(kBadInput).
  SeqId fork(SeqId seq);

  // Drops the sequence; blocks no longer referenced return to the free list. kOk or
  // kUnknownSequence (e.g. already preempted).
  KvStatus release(SeqId seq);

  void set_priority(SeqId seq, int priority);

  // ---- queries (unknown seq: Error(kBadInput)) ----
  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  std::vector<SeqId> sequences() const;  // live sequences, ascending
  PoolId pool_of(SeqId seq) const;
  int priority(SeqId seq) const;
  int64_t length(SeqId seq) const;
  int64_t capacity(SeqId seq) const;  // block_table(seq).size() * block_size
  // Logical block i -> BlockId. The reference is invalidated by any mutation of the manager.
  const std::vector<BlockId>& block_table(SeqId seq) const;
  // block_table[pos / bs] * bs + pos % bs for 0 <= pos < capacity (else Error(kBadInput)).
  int64_t slot(SeqId seq, int64_t pos) const;
  // When the blocks holding positions [0, n_pos) are consecutive ids b, b+1, ..., returns b * bs
  // (slots of those positions are then the range [b*bs, b*bs + n_pos)); otherwise -1. -1 also
  // for n_pos == 0. 0 <= n_pos <= capacity (else Error(kBadInput)).
  int64_t contiguous_base(SeqId seq, int64_t n_pos) const;
  // New blocks reserve(seq, n) would allocate now (appends + copy-on-write), without preemption.
  int64_t blocks_needed(SeqId seq, int64_t n) const;

  // ---- accounting ----
  int64_t bytes_used() const { return bytes_used_; }
  int64_t bytes_budget() const { return options_.budget_bytes; }
  int32_t free_blocks(PoolId pool) const;
  SeqUsage usage(SeqId seq) const;

  // Recomputes every refcount from the block tables and compares: refcount == number of
  // block-table references, free list == refcount-0 blocks without duplicates, no block twice in
  // one table, length <= capacity, ceil(length / bs) <= table size, bytes_used() == unique
  // blocks * bytes_per_block <= budget. Throws Error(kInternal) describing the first violation.
  void check_invariants() const;

 private:
  struct Seq {
    PoolId pool = 0;
    int priority = 0;
    int64_t length = 0;
    std::vector<BlockId> blocks;
  };

  const Seq& get(SeqId seq, const char* op) const;
  Seq& get(SeqId seq, const char* op);
  BlockPool& pool_mut(PoolId pool) { return pools_[static_cast<size_t>(pool)]; }
  // Blocks reserve would allocate when block b has refcount rc(b).
  template <typename Refcount>
  int64_t needed_with(const Seq& s, int64_t n, Refcount rc) const;
  bool fits(PoolId pool, int64_t need, int64_t freed_blocks_in_pool, int64_t freed_bytes) const;
  std::vector<SeqId> plan_preemption(SeqId requester, int64_t n) const;
  void drop_blocks_from(Seq& s, size_t first_block);
  [[noreturn]] void throw_exhausted(SeqId seq, int64_t need) const;

  BlockManagerOptions options_;
  std::vector<BlockPool> pools_;
  std::map<SeqId, Seq> seqs_;
  SeqId next_seq_ = 0;
  int64_t bytes_used_ = 0;
};

}  // namespace speclab
