#include "framework/kv/block_manager.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "framework/core/error.h"

namespace speclab {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Largest n accepted by reserve()/blocks_needed(): keeps length + n + block_size in int64.
constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max() / 4;

void require_positive(int64_t value, const char* field) {
  if (value <= 0)
    throw Error(ErrorKind::kConfig, "expected > 0, found " + str(value), {}, field);
}

}  // namespace

const char* to_string(KvStatus status) {
  switch (status) {
    case KvStatus::kOk: return "ok";
    case KvStatus::kOutOfRange: return "out of range";
    case KvStatus::kUnknownSequence: return "unknown sequence";
    case KvStatus::kSharedBlock: return "shared block";
  }
  return "unknown status";
}

int64_t kv_bytes_per_block(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim,
                           int64_t block_size, int64_t elem_bytes) {
  require_positive(n_layers, "n_layers");
  require_positive(n_kv_heads, "n_kv_heads");
  require_positive(head_dim, "head_dim");
  require_positive(block_size, "kv.block_size");
  require_positive(elem_bytes, "elem_bytes");
  int64_t bytes = 2;
  for (int64_t f : {n_layers, n_kv_heads, head_dim, block_size, elem_bytes}) {
    if (bytes > std::numeric_limits<int64_t>::max() / f)
      throw Error(ErrorKind::kConfig,
                  "expected a block size in bytes that fits int64, found an overflow for 2 * " +
                      str(n_layers) + " * " + str(n_kv_heads) + " * " + str(head_dim) + " * " +
                      str(block_size) + " * " + str(elem_bytes),
                  {}, "kv.bytes_per_block");
    bytes *= f;
  }
  return bytes;
}

// ---- BlockPool ---------------------------------------------------------------------------------

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size, int64_t bytes_per_block)
    : block_size_(block_size), bytes_per_block_(bytes_per_block) {
  require_positive(n_blocks, "kv.n_blocks");
  require_positive(block_size, "kv.block_size");
  require_positive(bytes_per_block, "kv.bytes_per_block");
  refcount_.assign(static_cast<size_t>(n_blocks), 0);
  // Stack with the highest id at the bottom: a fresh pool hands out 0, 1, 2, ...
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockPool::refcount(BlockId block) const {
  if (block < 0 || block >= n_blocks())
    throw Error(ErrorKind::kBadInput,
                "expected a block id in [0, " + str(n_blocks()) + "), found " + str(block), {},
                "block");
  return refcount_[static_cast<size_t>(block)];
}

BlockId BlockPool::allocate() {
  if (free_.empty())
    throw Error(ErrorKind::kResource,
                "expected a free block, found all " + str(n_blocks()) + " blocks in use", {},
                "kv.n_blocks");
  BlockId b = free_.back();
  free_.pop_back();
  SPECLAB_CHECK(refcount_[static_cast<size_t>(b)] == 0, "free block " + str(b) + " is referenced");
  refcount_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::incref(BlockId block) {
  SPECLAB_CHECK(refcount(block) > 0, "incref of free block " + str(block));
  ++refcount_[static_cast<size_t>(block)];
}

bool BlockPool::decref(BlockId block) {
  SPECLAB_CHECK(refcount(block) > 0, "decref of free block " + str(block));
  if (--refcount_[static_cast<size_t>(block)] > 0) return false;
  free_.push_back(block);
  return true;
}

void BlockPool::check_invariants() const {
  std::vector<char> on_free_list(refcount_.size(), 0);
  for (BlockId b : free_) {
    SPECLAB_CHECK(b >= 0 && b < n_blocks(), "free list holds out-of-range block " + str(b));
    SPECLAB_CHECK(!on_free_list[static_cast<size_t>(b)], "block " + str(b) + " twice on the free list");
    on_free_list[static_cast<size_t>(b)] = 1;
  }
  for (size_t b = 0; b < refcount_.size(); ++b) {
    SPECLAB_CHECK(refcount_[b] >= 0, "block " + str(static_cast<int64_t>(b)) + " has refcount " +
                                         str(refcount_[b]));
    SPECLAB_CHECK((refcount_[b] == 0) == (on_free_list[b] != 0),
                  "block " + str(static_cast<int64_t>(b)) + " has refcount " + str(refcount_[b]) +
                      (on_free_list[b] ? " but is" : " but is not") + " on the free list");
  }
}

// ---- options -----------------------------------------------------------------------------------

void BlockPoolOptions::validate() const {
  require_positive(block_size, "kv.block_size");
  if (n_blocks < 0)
    throw Error(ErrorKind::kConfig, "expected >= 0 (0 = derive from the budget), found " + str(n_blocks),
                {}, "kv.n_blocks");
  require_positive(bytes_per_block, "kv.bytes_per_block");
}

void BlockManagerOptions::validate() const {
  require_positive(budget_bytes, "kv.budget_bytes");
  if (preemption != Preemption::kOff && preemption != Preemption::kLowestPriority)
    throw Error(ErrorKind::kConfig,
                "expected off or lowest_priority, found value " + str(static_cast<int>(preemption)),
                {}, "kv.preemption");
}

// ---- BlockManager ------------------------------------------------------------------------------

BlockManager::BlockManager(const BlockManagerOptions& options) : options_(options) {
  options_.validate();
}

PoolId BlockManager::add_pool(const BlockPoolOptions& options) {
  options.validate();
  int64_t n_blocks = options.n_blocks;
  if (n_blocks == 0) {
    n_blocks = options_.budget_bytes / options.bytes_per_block;
    if (n_blocks == 0)
      throw Error(ErrorKind::kConfig,
                  "expected a budget of at least one block (" + str(options.bytes_per_block) +
                      " bytes), found " + str(options_.budget_bytes) + " bytes",
                  {}, "kv.budget_bytes");
    if (n_blocks > std::numeric_limits<int32_t>::max())
      throw Error(ErrorKind::kConfig,
                  "expected at most 2^31-1 blocks derived from the budget, found " + str(n_blocks) +
                      "; set n_blocks explicitly",
                  {}, "kv.n_blocks");
  }
  pools_.emplace_back(static_cast<int32_t>(n_blocks), options.block_size, options.bytes_per_block);
  return static_cast<PoolId>(pools_.size() - 1);
}

const BlockPool& BlockManager::pool(PoolId pool) const {
  if (pool < 0 || pool >= n_pools())
    throw Error(ErrorKind::kBadInput,
                "expected a pool id in [0, " + str(n_pools()) + "), found " + str(pool), {}, "pool");
  return pools_[static_cast<size_t>(pool)];
}

const BlockManager::Seq& BlockManager::get(SeqId seq, const char* op) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    throw Error(ErrorKind::kBadInput,
                std::string(op) + ": expected a live sequence, found unknown id " + str(seq), {},
                "seq");
  return it->second;
}

BlockManager::Seq& BlockManager::get(SeqId seq, const char* op) {
  return const_cast<Seq&>(static_cast<const BlockManager*>(this)->get(seq, op));
}

SeqId BlockManager::create(PoolId pool_id, int priority) {
  pool(pool_id);  // validates the id
  SeqId id = next_seq_++;
  Seq s;
  s.pool = pool_id;
  s.priority = priority;
  seqs_.emplace(id, std::move(s));
  return id;
}

template <typename Refcount>
int64_t BlockManager::needed_with(const Seq& s, int64_t n, Refcount rc) const {
  const int64_t bs = pools_[static_cast<size_t>(s.pool)].block_size();
  const int64_t have = static_cast<int64_t>(s.blocks.size());
  const int64_t append = std::max<int64_t>(0, ceil_div(s.length + n, bs) - have);
  int64_t copies = 0;
  for (int64_t i = s.length / bs; i < have; ++i)
    if (rc(s.blocks[static_cast<size_t>(i)]) > 1) ++copies;
  return append + copies;
}

bool BlockManager::fits(PoolId pool_id, int64_t need, int64_t freed_blocks_in_pool,
                        int64_t freed_bytes) const {
  const BlockPool& p = pools_[static_cast<size_t>(pool_id)];
  if (need > p.n_free() + freed_blocks_in_pool) return false;
  // need * bytes_per_block <= available, written to avoid overflowing int64.
  const int64_t available = options_.budget_bytes - (bytes_used_ - freed_bytes);
  return need <= available / p.bytes_per_block();
}

int64_t BlockManager::blocks_needed(SeqId seq, int64_t n) const {
  const Seq& s = get(seq, "blocks_needed");
  if (n < 0 || n > kMaxCount)
    throw Error(ErrorKind::kBadInput, "expected 0 <= n <= " + str(kMaxCount) + ", found " + str(n),
                {}, "n");
  const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
  return needed_with(s, n, [&](BlockId b) { return p.refcount(b); });
}

// Chooses sequences whose release lets `requester` reserve n more tokens: candidates in
// preemption order are added until the reservation fits, then those not needed for the fit
// (e.g. sequences of another pool when the requester's pool is out of blocks) are dropped again,
// newest-added first. Simulates releases on refcount deltas; nothing is changed. Empty when even
// releasing every candidate would not make room.
std::vector<SeqId> BlockManager::plan_preemption(SeqId requester, int64_t n) const {
  const Seq& req = seqs_.at(requester);
  std::vector<SeqId> candidates;
  for (const auto& kv : seqs_)
    if (kv.first != requester && kv.second.priority <= req.priority) candidates.push_back(kv.first);
  std::sort(candidates.begin(), candidates.end(), [&](SeqId a, SeqId b) {
    int pa = seqs_.at(a).priority, pb = seqs_.at(b).priority;
    return pa != pb ? pa < pb : a > b;
  });

  auto fits_without = [&](const std::vector<SeqId>& released) {
    std::vector<std::unordered_map<BlockId, int32_t>> dropped(pools_.size());
    std::vector<int64_t> freed_blocks(pools_.size(), 0);
    int64_t freed_bytes = 0;
    for (SeqId id : released) {
      const Seq& s = seqs_.at(id);
      const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
      for (BlockId b : s.blocks) {
        if (++dropped[static_cast<size_t>(s.pool)][b] == p.refcount(b)) {
          ++freed_blocks[static_cast<size_t>(s.pool)];
          freed_bytes += p.bytes_per_block();
        }
      }
    }
    const BlockPool& rp = pools_[static_cast<size_t>(req.pool)];
    auto& rdropped = dropped[static_cast<size_t>(req.pool)];
    int64_t need = needed_with(req, n, [&](BlockId b) {
      auto it = rdropped.find(b);
      return rp.refcount(b) - (it == rdropped.end() ? 0 : it->second);
    });
    return fits(req.pool, need, freed_blocks[static_cast<size_t>(req.pool)], freed_bytes);
  };

  std::vector<SeqId> chosen;
  for (SeqId c : candidates) {
    chosen.push_back(c);
    if (fits_without(chosen)) break;
  }
  if (chosen.empty() || !fits_without(chosen)) return {};
  for (size_t i = chosen.size(); i-- > 0;) {
    std::vector<SeqId> trial = chosen;
    trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(i));
    if (fits_without(trial)) chosen = std::move(trial);
  }
  return chosen;
}

void BlockManager::throw_exhausted(SeqId seq, int64_t need) const {
  const Seq& s = seqs_.at(seq);
  const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
  std::string tail;
  if (options_.preemption == Preemption::kLowestPriority)
    tail = "; preemption found no lower-or-equal-priority sequences whose release makes room";
  // A pool as large as the budget pays for (KvCacheManager's; not one given fewer blocks, or
  // capped at 2^20): only a larger budget makes room.
  const bool budget_sized = p.n_blocks() == options_.budget_bytes / p.bytes_per_block();
  if (need > p.n_free())
    throw Error(ErrorKind::kResource,
                "KV pool " + str(s.pool) + " exhausted: sequence " + str(seq) + " needs " +
                    str(need) + " more blocks, " + str(p.n_free()) + " of " + str(p.n_blocks()) +
                    " free (budget " + str(options_.budget_bytes) + " bytes, in use " +
                    str(bytes_used_) + ")" + tail + (budget_sized ? "; raise kv.budget_bytes" : ""),
                {}, budget_sized ? "kv.budget_bytes" : "kv.n_blocks");
  const std::string bytes = need > std::numeric_limits<int64_t>::max() / p.bytes_per_block()
                                ? std::string("more than 2^63")
                                : str(need * p.bytes_per_block());
  throw Error(ErrorKind::kResource,
              "KV budget of " + str(options_.budget_bytes) + " bytes exhausted: sequence " +
                  str(seq) + " needs " + str(need) + " more blocks (" + bytes + " bytes), in use " +
                  str(bytes_used_) + tail,
              {}, "kv.budget_bytes");
}

Reservation BlockManager::reserve(SeqId seq, int64_t n) {
  const int64_t need = blocks_needed(seq, n);  // validates seq and n
  Reservation out;
  if (!fits(seqs_.at(seq).pool, need, 0, 0)) {
    if (options_.preemption == Preemption::kOff) throw_exhausted(seq, need);
    std::vector<SeqId> victims = plan_preemption(seq, n);
    if (victims.empty()) throw_exhausted(seq, need);
    for (SeqId v : victims) {
      KvStatus st = release(v);
      SPECLAB_CHECK(st == KvStatus::kOk, "preempted sequence " + str(v) + " was not live");
      out.preempted.push_back(v);
    }
  }
  Seq& s = get(seq, "reserve");
  BlockPool& p = pool_mut(s.pool);
  SPECLAB_CHECK(fits(s.pool, blocks_needed(seq, n), 0, 0), "planned reservation does not fit");

  const int64_t bs = p.block_size();
  // Copy-on-write: every block holding a position >= length becomes exclusive. Only blocks
  // holding committed tokens of this sequence need their contents copied.
  for (size_t i = static_cast<size_t>(s.length / bs); i < s.blocks.size(); ++i) {
    BlockId old = s.blocks[i];
    if (p.refcount(old) <= 1) continue;
    BlockId fresh = p.allocate();
    bytes_used_ += p.bytes_per_block();
    if (static_cast<int64_t>(i) * bs < s.length) out.copies.push_back({old, fresh});
    p.decref(old);  // still referenced by another sequence: never frees here
    s.blocks[i] = fresh;
  }
  const int64_t target = ceil_div(s.length + n, bs);
  while (static_cast<int64_t>(s.blocks.size()) < target) {
    s.blocks.push_back(p.allocate());
    bytes_used_ += p.bytes_per_block();
  }
  return out;
}

KvStatus BlockManager::commit(SeqId seq, int64_t n) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return KvStatus::kUnknownSequence;
  Seq& s = it->second;
  const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
  const int64_t bs = p.block_size();
  const int64_t cap = static_cast<int64_t>(s.blocks.size()) * bs;
  if (n < 0 || n > cap - s.length) return KvStatus::kOutOfRange;
  if (n == 0) return KvStatus::kOk;
  for (int64_t i = s.length / bs; i <= (s.length + n - 1) / bs; ++i)
    if (p.refcount(s.blocks[static_cast<size_t>(i)]) > 1) return KvStatus::kSharedBlock;
  s.length += n;
  return KvStatus::kOk;
}

void BlockManager::drop_blocks_from(Seq& s, size_t first_block) {
  BlockPool& p = pool_mut(s.pool);
  // Last block first, so that the LIFO free list hands them out again in table order.
  for (size_t i = s.blocks.size(); i-- > first_block;)
    if (p.decref(s.blocks[i])) bytes_used_ -= p.bytes_per_block();
  s.blocks.resize(std::min(first_block, s.blocks.size()));
}

KvStatus BlockManager::truncate(SeqId seq, int64_t new_len) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return KvStatus::kUnknownSequence;
  Seq& s = it->second;
  if (new_len < 0 || new_len > s.length) return KvStatus::kOutOfRange;
  const int64_t bs = pools_[static_cast<size_t>(s.pool)].block_size();
  drop_blocks_from(s, static_cast<size_t>(ceil_div(new_len, bs)));
  s.length = new_len;
  return KvStatus::kOk;
}

SeqId BlockManager::fork(SeqId seq) {
  const Seq& parent = get(seq, "fork");
  BlockPool& p = pool_mut(parent.pool);
  Seq child;
  child.pool = parent.pool;
  child.priority = parent.priority;
  child.length = parent.length;
  const size_t shared = static_cast<size_t>(ceil_div(parent.length, p.block_size()));
  child.blocks.assign(parent.blocks.begin(),
                      parent.blocks.begin() + static_cast<std::ptrdiff_t>(shared));
  for (BlockId b : child.blocks) p.incref(b);
  SeqId id = next_seq_++;
  seqs_.emplace(id, std::move(child));
  return id;
}

KvStatus BlockManager::release(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return KvStatus::kUnknownSequence;
  drop_blocks_from(it->second, 0);
  seqs_.erase(it);
  return KvStatus::kOk;
}

void BlockManager::set_priority(SeqId seq, int priority) { get(seq, "set_priority").priority = priority; }

std::vector<SeqId> BlockManager::sequences() const {
  std::vector<SeqId> out;
  out.reserve(seqs_.size());
  for (const auto& kv : seqs_) out.push_back(kv.first);
  return out;
}

PoolId BlockManager::pool_of(SeqId seq) const { return get(seq, "pool_of").pool; }
int BlockManager::priority(SeqId seq) const { return get(seq, "priority").priority; }
int64_t BlockManager::length(SeqId seq) const { return get(seq, "length").length; }

int64_t BlockManager::capacity(SeqId seq) const {
  const Seq& s = get(seq, "capacity");
  return static_cast<int64_t>(s.blocks.size()) * pools_[static_cast<size_t>(s.pool)].block_size();
}

const std::vector<BlockId>& BlockManager::block_table(SeqId seq) const {
  return get(seq, "block_table").blocks;
}

int64_t BlockManager::slot(SeqId seq, int64_t pos) const {
  const Seq& s = get(seq, "slot");
  const int64_t bs = pools_[static_cast<size_t>(s.pool)].block_size();
  const int64_t cap = static_cast<int64_t>(s.blocks.size()) * bs;
  if (pos < 0 || pos >= cap)
    throw Error(ErrorKind::kBadInput,
                "slot of sequence " + str(seq) + ": expected a position in [0, " + str(cap) +
                    "), found " + str(pos),
                {}, "pos");
  return static_cast<int64_t>(s.blocks[static_cast<size_t>(pos / bs)]) * bs + pos % bs;
}

int64_t BlockManager::contiguous_base(SeqId seq, int64_t n_pos) const {
  const Seq& s = get(seq, "contiguous_base");
  const int64_t bs = pools_[static_cast<size_t>(s.pool)].block_size();
  const int64_t cap = static_cast<int64_t>(s.blocks.size()) * bs;
  if (n_pos < 0 || n_pos > cap)
    throw Error(ErrorKind::kBadInput,
                "contiguous_base of sequence " + str(seq) + ": expected n_pos in [0, " + str(cap) +
                    "], found " + str(n_pos),
                {}, "n_pos");
  if (n_pos == 0) return -1;
  const size_t nb = static_cast<size_t>(ceil_div(n_pos, bs));
  for (size_t i = 1; i < nb; ++i)
    if (s.blocks[i] != s.blocks[0] + static_cast<BlockId>(i)) return -1;
  return static_cast<int64_t>(s.blocks[0]) * bs;
}

int32_t BlockManager::free_blocks(PoolId pool_id) const { return pool(pool_id).n_free(); }

SeqUsage BlockManager::usage(SeqId seq) const {
  const Seq& s = get(seq, "usage");
  const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
  SeqUsage u;
  for (BlockId b : s.blocks) (p.refcount(b) == 1 ? u.blocks_exclusive : u.blocks_shared)++;
  u.bytes_exclusive = u.blocks_exclusive * p.bytes_per_block();
  u.bytes_referenced = (u.blocks_exclusive + u.blocks_shared) * p.bytes_per_block();
  return u;
}

void BlockManager::check_invariants() const {
  std::vector<std::vector<int32_t>> refs(pools_.size());
  for (size_t i = 0; i < pools_.size(); ++i) refs[i].assign(static_cast<size_t>(pools_[i].n_blocks()), 0);
  std::vector<int64_t> stamp;
  for (const auto& kv : seqs_) {
    const SeqId id = kv.first;
    const Seq& s = kv.second;
    SPECLAB_CHECK(s.pool >= 0 && s.pool < n_pools(), "sequence " + str(id) + " has pool " + str(s.pool));
    const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
    const int64_t bs = p.block_size();
    SPECLAB_CHECK(s.length >= 0 && s.length <= static_cast<int64_t>(s.blocks.size()) * bs,
                  "sequence " + str(id) + " has length " + str(s.length) + " beyond capacity " +
                      str(static_cast<int64_t>(s.blocks.size()) * bs));
    stamp.assign(static_cast<size_t>(p.n_blocks()), -1);
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      const BlockId b = s.blocks[i];
      SPECLAB_CHECK(b >= 0 && b < p.n_blocks(), "sequence " + str(id) + " holds block " + str(b) +
                                                    " outside pool " + str(s.pool));
      SPECLAB_CHECK(stamp[static_cast<size_t>(b)] < 0,
                    "sequence " + str(id) + " holds block " + str(b) + " twice");
      stamp[static_cast<size_t>(b)] = static_cast<int64_t>(i);
      ++refs[static_cast<size_t>(s.pool)][static_cast<size_t>(b)];
    }
  }
  int64_t bytes = 0;
  for (size_t pi = 0; pi < pools_.size(); ++pi) {
    const BlockPool& p = pools_[pi];
    p.check_invariants();
    for (BlockId b = 0; b < p.n_blocks(); ++b)
      SPECLAB_CHECK(p.refcount(b) == refs[pi][static_cast<size_t>(b)],
                    "pool " + str(static_cast<int64_t>(pi)) + " block " + str(b) + " has refcount " +
                        str(p.refcount(b)) + " but " + str(refs[pi][static_cast<size_t>(b)]) +
                        " block-table references");
    bytes += static_cast<int64_t>(p.n_used()) * p.bytes_per_block();
  }
  // Reserved-only blocks (no committed token) are always exclusive: fork shares only blocks
  // with committed tokens, and reserve allocates fresh ones.
  for (const auto& kv : seqs_) {
    const Seq& s = kv.second;
    const BlockPool& p = pools_[static_cast<size_t>(s.pool)];
    for (size_t i = static_cast<size_t>(ceil_div(s.length, p.block_size())); i < s.blocks.size(); ++i)
      SPECLAB_CHECK(p.refcount(s.blocks[i]) == 1,
                    "reserved-only block " + str(s.blocks[i]) + " of sequence " + str(kv.first) +
                        " is shared");
  }
  SPECLAB_CHECK(bytes == bytes_used_, "bytes_used is " + str(bytes_used_) + " but blocks in use hold " +
                                          str(bytes));
  SPECLAB_CHECK(bytes_used_ <= options_.budget_bytes,
                "bytes_used " + str(bytes_used_) + " exceeds the budget " + str(options_.budget_bytes));
}

}  // namespace speclab
