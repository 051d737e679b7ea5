// Tests of the paged KV cache's storage side (framework/kv/kv_cache_manager.h): the K/V tensors
// of each pool, the KvView a model gets (write_slots, read_slots, read_base), the copy-on-write
// block copies that reserve() performs on those tensors after fork(), rollback keeping the K/V
// of the kept positions, release, the byte budget, and preemption with the preempted ids that
// reserve() returns. The metadata rules alone (block tables, refcounts, free list) are tested in
// test_block_manager.cpp.
//
// Every test writes K/V the way a model does (index_copy_ along the slot axis at write_slots)
// with a value that encodes (sequence tag, K or V, layer, position, head, dim), and reads the
// storage back at the slots of each position, so a misplaced or missing copy shows as a wrong
// value.
#include "tests/torch_catch.h"

#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "tests/support/catch_error.h"
#include "framework/kv/kv_cache_manager.h"

using namespace speclab;

namespace {

// The KV geometry of one pool: K and V are [n_layers, slots, n_kv_heads, head_dim].
struct Geometry {
  int64_t n_layers;
  int64_t n_kv_heads;
  int64_t head_dim;
};
constexpr Geometry kSmall{2, 2, 3};  // 384 bytes per block of 4 tokens
constexpr Geometry kOther{1, 1, 4};  // 128 bytes per block of 4 tokens
constexpr int32_t kBs = 4;           // block size of every test

// The one place that creates pools.
PoolId add_pool(KvCacheManager& kv, const Geometry& g) { return kv.add_pool(KvGeometry{g.n_layers, g.n_kv_heads, g.head_dim}); }

int64_t bytes_per_block(const Geometry& g) {
  return kv_bytes_per_block(g.n_layers, g.n_kv_heads, g.head_dim, kBs);
}

KvOptions options(int64_t budget_bytes, Preemption preemption = Preemption::kOff) {
  KvOptions o;
  o.block_size = kBs;
  o.budget_bytes = budget_bytes;
  o.preemption = preemption;
  return o;
}

// K (or V) of positions [p0, p0 + n) as written by the sequence tagged `tag`:
// [n_layers, n, n_kv_heads, head_dim] float32, every element distinct across (tag, K/V, layer,
// position, head, dim) for tags < 10, positions < 1000 and n_kv_heads * head_dim <= 10.
at::Tensor pattern(const Geometry& g, int tag, bool is_v, int64_t p0, int64_t n) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor layer = at::arange(g.n_layers, f64).view({-1, 1, 1, 1}) * 10000;
  at::Tensor pos = at::arange(p0, p0 + n, f64).view({1, -1, 1, 1}) * 10;
  at::Tensor elem = at::arange(g.n_kv_heads * g.head_dim, f64).view({1, 1, g.n_kv_heads, g.head_dim});
  return (layer + pos + elem + (tag * 100000 + (is_v ? 50000 : 0))).to(at::kFloat);
}

// What a model does with a view: K/V of its n_new tokens (positions p0...) to write_slots.
void write(const KvView& v, const Geometry& g, int tag, int64_t p0) {
  const int64_t n = v.write_slots.size(0);
  v.k_cache.index_copy_(1, v.write_slots, pattern(g, tag, false, p0, n));
  v.v_cache.index_copy_(1, v.write_slots, pattern(g, tag, true, p0, n));
}

// What a model reads through a view: [n_layers, ctx_len, n_kv_heads, head_dim].
at::Tensor gather(const at::Tensor& cache, const KvView& v) {
  return v.read_base >= 0 ? cache.narrow(1, v.read_base, v.ctx_len) : cache.index_select(1, v.read_slots);
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::vector<int64_t> range(int64_t first, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(first + i);
  return out;
}

// Storage rows of positions [p0, p0 + n) of `seq`, found through BlockManager::slot().
at::Tensor at_positions(const at::Tensor& cache, const KvCacheManager& kv, SeqId seq, int64_t p0, int64_t n) {
  std::vector<int64_t> slots;
  for (int64_t p = p0; p < p0 + n; ++p) slots.push_back(kv.blocks().slot(seq, p));
  return cache.index_select(1, at::tensor(slots, at::kLong));
}

// Both K and V of positions [p0, p0 + n) of `seq` hold what sequence `tag` wrote there.
bool holds(const KvView& storage, const KvCacheManager& kv, SeqId seq, const Geometry& g, int tag,
           int64_t p0, int64_t n) {
  return at::equal(at_positions(storage.k_cache, kv, seq, p0, n), pattern(g, tag, false, p0, n)) &&
         at::equal(at_positions(storage.v_cache, kv, seq, p0, n), pattern(g, tag, true, p0, n));
}

using test::catch_error;

}  // namespace

TEST_CASE("add_pool gives each pool its own K and V storage, sized from the budget", "[kv]") {
  c10::InferenceMode guard;
  const int64_t budget = 10 * bytes_per_block(kSmall);
  KvCacheManager kv(options(budget));
  const PoolId pa = add_pool(kv, kSmall);
  const PoolId pb = add_pool(kv, kOther);
  CHECK(kv.blocks().pool(pa).n_blocks() == 10);  // as many blocks as the budget holds
  CHECK(kv.blocks().pool(pa).bytes_per_block() == 384);
  CHECK(kv.blocks().pool(pb).n_blocks() == budget / 128);

  const SeqId a = kv.create(pa), b = kv.create(pb);
  kv.reserve(a, 4);
  kv.reserve(b, 4);
  const KvView va = kv.view(a, 4), vb = kv.view(b, 4);
  CHECK(va.k_cache.sizes().vec() == std::vector<int64_t>{2, 40, 2, 3});
  CHECK(va.v_cache.sizes().vec() == va.k_cache.sizes().vec());
  CHECK(va.k_cache.scalar_type() == at::kFloat);
  CHECK(vb.k_cache.sizes().vec() == std::vector<int64_t>{1, 4 * (budget / 128), 1, 4});
  CHECK(va.k_cache.data_ptr() != va.v_cache.data_ptr());
  CHECK(va.k_cache.data_ptr() != vb.k_cache.data_ptr());

  // Both sequences write slots 0..3, each in its own pool's storage.
  CHECK(to_vector(va.write_slots) == to_vector(vb.write_slots));
  write(va, kSmall, 1, 0);
  write(vb, kOther, 2, 0);
  CHECK(holds(va, kv, a, kSmall, 1, 0, 4));
  CHECK(holds(vb, kv, b, kOther, 2, 0, 4));

  // A budget below one block of this shape is a configuration error.
  KvCacheManager tiny(options(bytes_per_block(kSmall) - 1));
  CHECK(catch_error([&] { add_pool(tiny, kSmall); }).kind() == ErrorKind::kConfig);
}

TEST_CASE("reserve then view: a lone sequence writes contiguous slots and reads them via read_base", "[kv]") {
  c10::InferenceMode guard;
  KvCacheManager kv(options(8 * bytes_per_block(kSmall)));
  const PoolId pool = add_pool(kv, kSmall);
  const SeqId s = kv.create(pool);

  const Reservation r = kv.reserve(s, 5);
  CHECK(r.copies.empty());
  CHECK(r.preempted.empty());
  CHECK(kv.blocks().capacity(s) == 8);
  const KvView v = kv.view(s, 5);
  CHECK(to_vector(v.write_slots) == range(0, 5));
  CHECK(v.ctx_len == 5);
  CHECK(v.read_base == 0);
  CHECK_FALSE(v.read_slots.defined());
  write(v, kSmall, 1, 0);
  REQUIRE(kv.commit(s, 5) == KvStatus::kOk);
  CHECK(kv.length(s) == 5);

  kv.reserve(s, 2);  // fits in the reserved block: no allocation
  CHECK(kv.bytes_used() == 2 * bytes_per_block(kSmall));
  const KvView v2 = kv.view(s, 2);
  CHECK(to_vector(v2.write_slots) == range(5, 2));
  CHECK(v2.ctx_len == 7);
  write(v2, kSmall, 1, 5);
  REQUIRE(kv.commit(s, 2) == KvStatus::kOk);
  CHECK(at::equal(gather(v2.k_cache, v2), pattern(kSmall, 1, false, 0, 7)));
  CHECK(at::equal(gather(v2.v_cache, v2), pattern(kSmall, 1, true, 0, 7)));

  kv.reserve(s, 2);  // crosses into a third block, still consecutive
  const KvView v3 = kv.view(s, 2);
  CHECK(to_vector(v3.write_slots) == range(7, 2));
  CHECK(v3.read_base == 0);
  CHECK(v3.ctx_len == 9);

  // A view needs reserved capacity and at least one new token; unknown sequences are refused.
  const Error beyond = catch_error([&] { kv.view_at(s, 9, 4); });  // [0, 13) > capacity 12
  CHECK(beyond.message().find("reserve first") != std::string::npos);
  catch_error([&] { kv.view(s, 0); });
  CHECK(catch_error([&] { kv.view(s + 100, 1); }).kind() == ErrorKind::kBadInput);
}

TEST_CASE("view_at: interleaved sequences read through read_slots and write only their own slots", "[kv]") {
  c10::InferenceMode guard;
  KvCacheManager kv(options(8 * bytes_per_block(kSmall)));
  const PoolId pool = add_pool(kv, kSmall);
  const SeqId a = kv.create(pool), b = kv.create(pool);
  kv.reserve(a, 4);  // block 0
  kv.reserve(b, 4);  // block 1
  kv.reserve(a, 6);  // block 2: a's table is {0, 2}
  REQUIRE(kv.blocks().block_table(a) == std::vector<BlockId>{0, 2});

  const KvView va = kv.view(a, 6), vb = kv.view(b, 4);
  const std::vector<int64_t> a_slots = {0, 1, 2, 3, 8, 9};
  CHECK(to_vector(va.write_slots) == a_slots);
  CHECK(va.read_base == -1);
  REQUIRE(va.read_slots.defined());
  CHECK(to_vector(va.read_slots) == a_slots);
  CHECK(va.ctx_len == 6);
  CHECK(to_vector(vb.write_slots) == range(4, 4));
  CHECK(vb.read_base == 4);  // b's one block starts at slot 4

  write(va, kSmall, 1, 0);
  write(vb, kSmall, 2, 0);
  REQUIRE(kv.commit(a, 6) == KvStatus::kOk);
  REQUIRE(kv.commit(b, 4) == KvStatus::kOk);
  CHECK(at::equal(gather(va.k_cache, va), pattern(kSmall, 1, false, 0, 6)));
  CHECK(at::equal(gather(va.v_cache, va), pattern(kSmall, 1, true, 0, 6)));
  CHECK(at::equal(gather(vb.k_cache, vb), pattern(kSmall, 2, false, 0, 4)));
  CHECK(at::equal(gather(vb.v_cache, vb), pattern(kSmall, 2, true, 0, 4)));

  // A drafter writing ahead of the committed prefix: position 7 while length is 6.
  const KvView ahead = kv.view_at(a, 7, 1);
  CHECK(to_vector(ahead.write_slots) == std::vector<int64_t>{11});
  CHECK(ahead.ctx_len == 8);
  CHECK(to_vector(ahead.read_slots) == std::vector<int64_t>{0, 1, 2, 3, 8, 9, 10, 11});
  catch_error([&] { kv.view_at(a, 7, 2); });  // [0, 9) > capacity 8
  catch_error([&] { kv.view_at(a, -1, 1); });
}

TEST_CASE("commit and truncate return their statuses, and rollback keeps the K/V of kept positions", "[kv]") {
  c10::InferenceMode guard;
  const int64_t bpb = bytes_per_block(kSmall);
  KvCacheManager kv(options(8 * bpb));
  const PoolId pool = add_pool(kv, kSmall);
  const SeqId s = kv.create(pool);
  kv.reserve(s, 10);  // capacity 12
  write(kv.view(s, 10), kSmall, 1, 0);

  CHECK(kv.commit(s, 13) == KvStatus::kOutOfRange);  // only 12 reserved
  CHECK(kv.commit(s, -1) == KvStatus::kOutOfRange);
  CHECK(kv.length(s) == 0);
  REQUIRE(kv.commit(s, 10) == KvStatus::kOk);
  CHECK(kv.truncate(s, 11) == KvStatus::kOutOfRange);  // new_len <= length
  CHECK(kv.truncate(s, -1) == KvStatus::kOutOfRange);
  CHECK(kv.truncate(s, 10) == KvStatus::kOk);  // a no-op
  CHECK(kv.length(s) == 10);
  CHECK(kv.blocks().capacity(s) == 12);
  CHECK(kv.commit(s + 100, 1) == KvStatus::kUnknownSequence);
  CHECK(kv.truncate(s + 100, 0) == KvStatus::kUnknownSequence);

  // Rollback of positions [5, 10): the block holding position 4 stays, the others go.
  REQUIRE(kv.truncate(s, 5) == KvStatus::kOk);
  CHECK(kv.length(s) == 5);
  CHECK(kv.blocks().capacity(s) == 8);
  CHECK(kv.bytes_used() == 2 * bpb);
  kv.reserve(s, 3);
  const KvView v = kv.view(s, 3);
  CHECK(to_vector(v.write_slots) == range(5, 3));
  write(v, kSmall, 2, 5);
  REQUIRE(kv.commit(s, 3) == KvStatus::kOk);
  CHECK(holds(v, kv, s, kSmall, 1, 0, 5));  // kept positions untouched by the rollback
  CHECK(holds(v, kv, s, kSmall, 2, 5, 3));  // rewritten positions hold the new tokens

  // Half-open: truncate(4) keeps positions [0, 4), exactly one block.
  REQUIRE(kv.truncate(s, 4) == KvStatus::kOk);
  CHECK(kv.blocks().capacity(s) == 4);
  CHECK(kv.bytes_used() == bpb);
  CHECK(holds(v, kv, s, kSmall, 1, 0, 4));
  REQUIRE(kv.truncate(s, 0) == KvStatus::kOk);
  CHECK(kv.blocks().capacity(s) == 0);
  CHECK(kv.bytes_used() == 0);
}

TEST_CASE("fork then reserve copies the shared block's K and V in every layer, leaving the other side untouched",
          "[kv][cow]") {
  c10::InferenceMode guard;
  const int64_t bpb = bytes_per_block(kSmall);
  KvCacheManager kv(options(8 * bpb));
  const PoolId pool = add_pool(kv, kSmall);
  const SeqId parent = kv.create(pool);
  kv.reserve(parent, 6);  // blocks {0, 1}; block 1 holds positions 4, 5 and reserved 6, 7
  const KvView store = kv.view(parent, 6);
  store.k_cache.fill_(-1);
  store.v_cache.fill_(-1);
  write(store, kSmall, 1, 0);
  REQUIRE(kv.commit(parent, 6) == KvStatus::kOk);

  const SeqId child = kv.fork(parent);
  REQUIRE(kv.blocks().block_table(child) == std::vector<BlockId>{0, 1});
  CHECK(kv.bytes_used() == 2 * bpb);  // fork allocates nothing
  CHECK(holds(store, kv, child, kSmall, 1, 0, 6));

  SECTION("the fork writes first: its copy of block 1 gets the parent's K/V") {
    const Reservation r = kv.reserve(child, 1);
    REQUIRE(r.copies.size() == 1);
    CHECK(r.copies[0].src == 1);
    CHECK(r.copies[0].dst == 2);
    CHECK(r.preempted.empty());
    CHECK(kv.blocks().block_table(child) == std::vector<BlockId>{0, 2});  // block 0 stays shared
    CHECK(kv.blocks().block_table(parent) == std::vector<BlockId>{0, 1});
    CHECK(kv.bytes_used() == 3 * bpb);
    // The whole block (slots 4..7 -> 8..11) was copied, K and V, both layers.
    CHECK(at::equal(store.k_cache.narrow(1, 8, kBs), store.k_cache.narrow(1, 4, kBs)));
    CHECK(at::equal(store.v_cache.narrow(1, 8, kBs), store.v_cache.narrow(1, 4, kBs)));
    CHECK(holds(store, kv, child, kSmall, 1, 0, 6));

    const KvView vc = kv.view(child, 1);
    CHECK(to_vector(vc.write_slots) == std::vector<int64_t>{10});
    write(vc, kSmall, 2, 6);
    REQUIRE(kv.commit(child, 1) == KvStatus::kOk);
    CHECK(at::equal(gather(vc.k_cache, vc).narrow(1, 0, 6), pattern(kSmall, 1, false, 0, 6)));
    CHECK(holds(vc, kv, child, kSmall, 2, 6, 1));
    // The parent's K/V are untouched, including its reserved slot 6 that the child did not use.
    CHECK(holds(store, kv, parent, kSmall, 1, 0, 6));
    CHECK(at::equal(store.k_cache.narrow(1, 6, 1), at::full({2, 1, 2, 3}, -1.0f)));
    CHECK(at::equal(store.v_cache.narrow(1, 6, 1), at::full({2, 1, 2, 3}, -1.0f)));
  }

  SECTION("the parent writes first: it moves to the copy and the fork keeps block 1") {
    const Reservation r = kv.reserve(parent, 1);
    REQUIRE(r.copies.size() == 1);
    CHECK(r.copies[0].src == 1);
    CHECK(r.copies[0].dst == 2);
    CHECK(kv.blocks().block_table(parent) == std::vector<BlockId>{0, 2});
    CHECK(holds(store, kv, parent, kSmall, 1, 0, 6));
    write(kv.view(parent, 1), kSmall, 3, 6);
    REQUIRE(kv.commit(parent, 1) == KvStatus::kOk);

    // Block 1 is now the fork's alone: no copy, it writes in place.
    CHECK(kv.reserve(child, 1).copies.empty());
    const KvView vc = kv.view(child, 1);
    CHECK(to_vector(vc.write_slots) == std::vector<int64_t>{6});
    write(vc, kSmall, 2, 6);
    REQUIRE(kv.commit(child, 1) == KvStatus::kOk);
    CHECK(holds(store, kv, child, kSmall, 1, 0, 6));
    CHECK(holds(store, kv, child, kSmall, 2, 6, 1));
    CHECK(holds(store, kv, parent, kSmall, 1, 0, 6));
    CHECK(holds(store, kv, parent, kSmall, 3, 6, 1));
  }
}

TEST_CASE("release frees blocks and retires the id, a fork keeps the released parent's K/V, KvSequence "
          "releases on scope exit",
          "[kv]") {
  c10::InferenceMode guard;
  const int64_t bpb = bytes_per_block(kSmall);
  KvCacheManager kv(options(8 * bpb));
  const PoolId pool = add_pool(kv, kSmall);
  const SeqId parent = kv.create(pool);
  kv.reserve(parent, 10);  // 3 blocks
  const KvView store = kv.view(parent, 6);
  write(store, kSmall, 1, 0);
  REQUIRE(kv.commit(parent, 6) == KvStatus::kOk);
  const SeqId child = kv.fork(parent);  // shares blocks 0 and 1

  CHECK(kv.release(parent) == KvStatus::kOk);
  CHECK(kv.release(parent) == KvStatus::kUnknownSequence);
  CHECK_FALSE(kv.blocks().contains(parent));
  CHECK(catch_error([&] { kv.view(parent, 1); }).kind() == ErrorKind::kBadInput);
  CHECK(kv.bytes_used() == 2 * bpb);  // the parent's reserved-only block 2 was freed
  CHECK(holds(store, kv, child, kSmall, 1, 0, 6));
  CHECK(kv.release(child) == KvStatus::kOk);
  CHECK(kv.bytes_used() == 0);

  {
    KvSequence seq(kv, pool);
    kv.reserve(seq.id(), 5);
    CHECK(kv.bytes_used() == 2 * bpb);
  }
  CHECK(kv.bytes_used() == 0);
  try {
    KvSequence seq(kv, pool);
    kv.reserve(seq.id(), 4);
    throw std::runtime_error("forward failed");
  } catch (const std::runtime_error&) {
  }
  CHECK(kv.bytes_used() == 0);
  CHECK(kv.blocks().sequences().empty());
}

TEST_CASE("reserve beyond the byte budget throws kResource and changes nothing", "[kv][budget]") {
  c10::InferenceMode guard;
  // One budget over two pools: 6 blocks of kSmall (2304 bytes), or 18 blocks of kOther.
  const int64_t budget = 6 * bytes_per_block(kSmall);
  KvCacheManager kv(options(budget));
  const PoolId pa = add_pool(kv, kSmall);
  const PoolId pb = add_pool(kv, kOther);
  const SeqId a = kv.create(pa), b = kv.create(pb);
  kv.reserve(a, 20);  // 5 blocks, 1920 bytes
  const KvView store = kv.view(a, 18);
  write(store, kSmall, 1, 0);
  REQUIRE(kv.commit(a, 18) == KvStatus::kOk);
  kv.reserve(b, 12);  // 3 blocks of 128 bytes: the budget is full
  REQUIRE(kv.bytes_used() == budget);

  // Pool b has free blocks, but the budget is spent.
  const Error e = catch_error([&] { kv.reserve(b, 13); });
  CHECK(e.kind() == ErrorKind::kResource);
  CHECK(e.field() == "kv.budget_bytes");
  CHECK(e.message().find("KV budget of 2304 bytes exhausted") == 0);
  CHECK(kv.blocks().capacity(b) == 12);
  CHECK(kv.bytes_used() == budget);

  // A copy-on-write needs a block too: the fork of a cannot write into the shared last block.
  const SeqId c = kv.fork(a);
  CHECK(catch_error([&] { kv.reserve(c, 1); }).kind() == ErrorKind::kResource);
  CHECK(kv.blocks().block_table(c) == std::vector<BlockId>{0, 1, 2, 3, 4});
  CHECK(kv.bytes_used() == budget);
  CHECK(holds(store, kv, a, kSmall, 1, 0, 18));
  CHECK(holds(store, kv, c, kSmall, 1, 0, 18));

  // Releasing makes room again.
  REQUIRE(kv.release(c) == KvStatus::kOk);
  REQUIRE(kv.release(a) == KvStatus::kOk);
  const Reservation r = kv.reserve(b, 13);
  CHECK(r.preempted.empty());
  CHECK(kv.blocks().capacity(b) == 16);
}

TEST_CASE("preemption: a higher-priority reserve releases the newest lowest-priority sequence and returns its id",
          "[kv][preemption]") {
  c10::InferenceMode guard;
  const int64_t bpb = bytes_per_block(kSmall);

  SECTION("lowest_priority") {
    KvCacheManager kv(options(4 * bpb, Preemption::kLowestPriority));
    const PoolId pool = add_pool(kv, kSmall);
    KvSequence old_low(kv, pool, 0), new_low(kv, pool, 0);
    kv.reserve(old_low.id(), 8);
    kv.reserve(new_low.id(), 8);  // 4 of 4 blocks in use
    const SeqId high = kv.create(pool, 5);

    const Reservation r = kv.reserve(high, 4);
    CHECK(r.preempted == std::vector<SeqId>{new_low.id()});
    CHECK(r.copies.empty());
    CHECK_FALSE(kv.blocks().contains(new_low.id()));
    CHECK(kv.release(new_low.id()) == KvStatus::kUnknownSequence);
    CHECK(kv.blocks().contains(old_low.id()));
    CHECK(kv.blocks().capacity(old_low.id()) == 8);
    CHECK(kv.blocks().capacity(high) == 4);
    CHECK(kv.bytes_used() == 3 * bpb);
    const KvView vh = kv.view(high, 4);  // the preempted sequence's block is usable storage
    write(vh, kSmall, 2, 0);
    REQUIRE(kv.commit(high, 4) == KvStatus::kOk);
    CHECK(holds(vh, kv, high, kSmall, 2, 0, 4));
  }

  SECTION("a lower-priority requester never preempts a higher one") {
    KvCacheManager kv(options(4 * bpb, Preemption::kLowestPriority));
    const PoolId pool = add_pool(kv, kSmall);
    const SeqId a = kv.create(pool, 3), b = kv.create(pool, 3);
    kv.reserve(a, 8);
    kv.reserve(b, 8);
    const SeqId low = kv.create(pool, 1);
    const Error e = catch_error([&] { kv.reserve(low, 1); });
    CHECK(e.kind() == ErrorKind::kResource);
    CHECK(e.message().find("preemption found no") != std::string::npos);
    CHECK(kv.blocks().sequences() == std::vector<SeqId>{a, b, low});
    CHECK(kv.bytes_used() == 4 * bpb);
  }

  SECTION("negative control: preemption off throws instead") {
    KvCacheManager kv(options(4 * bpb));
    const PoolId pool = add_pool(kv, kSmall);
    const SeqId a = kv.create(pool, 0), b = kv.create(pool, 0);
    kv.reserve(a, 8);
    kv.reserve(b, 8);
    const SeqId high = kv.create(pool, 5);
    CHECK(catch_error([&] { kv.reserve(high, 4); }).kind() == ErrorKind::kResource);
    CHECK(kv.blocks().sequences() == std::vector<SeqId>{a, b, high});
    CHECK(kv.blocks().capacity(high) == 0);
  }
}

TEST_CASE("an int8 pool holds head_dim + 4 bytes per head, is budgeted for them, and a fork copies the scales",
          "[kv][int8]") {
  c10::InferenceMode guard;
  const KvGeometry g{2, 2, 8, "cpu", "int8"};
  const int64_t bpb = 2 * 2 * 2 * (8 + KvGeometry::kInt8ScaleBytes) * kBs;  // K and V, bytes
  KvCacheManager kv(options(3 * bpb));
  const PoolId pool = kv.add_pool(g);
  const SeqId parent = kv.create(pool);
  kv.reserve(parent, 6);  // blocks {0, 1}
  CHECK(kv.bytes_used() == 2 * bpb);  // the scale bytes count against the budget
  const KvView store = kv.view(parent, 6);
  REQUIRE(store.k_cache.scalar_type() == at::kChar);
  REQUIRE(store.k_cache.sizes() == at::IntArrayRef({2, 3 * kBs, 2, 8 + KvGeometry::kInt8ScaleBytes}));
  // Every byte distinct per (K/V, layer, slot, head, byte), scale bytes included.
  const at::Tensor bytes = at::arange(store.k_cache.numel(), at::kLong).remainder(251).sub(125).to(at::kChar);
  store.k_cache.copy_(bytes.view(store.k_cache.sizes()));
  store.v_cache.copy_(bytes.view(store.v_cache.sizes()).neg());
  REQUIRE(kv.commit(parent, 6) == KvStatus::kOk);
  const SeqId child = kv.fork(parent);
  const Reservation r = kv.reserve(child, 1);  // copy-on-write of block 1 into block 2
  REQUIRE(r.copies.size() == 1);
  CHECK(at::equal(store.k_cache.narrow(1, 2 * kBs, kBs), store.k_cache.narrow(1, kBs, kBs)));
  CHECK(at::equal(store.v_cache.narrow(1, 2 * kBs, kBs), store.v_cache.narrow(1, kBs, kBs)));
  // One more block is over the budget: the pool was sized for three blocks with their scales.
  CHECK(catch_error([&] { kv.reserve(child, 2 * kBs); }).kind() == ErrorKind::kResource);
}
