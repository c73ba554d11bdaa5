// Tests of pool/block_index (pure): TLSF classes, best fit, splitting, coalescing,
// the address map, and the predicate that skips blocks still fenced by tickets.
#include "pool/block_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace oversub::pool {
namespace {

constexpr std::uintptr_t base = 0x7f0000000000;
constexpr std::size_t MiB = std::size_t{1} << 20;
auto any = [](const block&) { return true; };

TEST(BlockIndex, RoundsTo256AndAligns) {
  block_index idx;
  idx.add_range(base, 64 * MiB, 0);
  for (std::size_t bytes : {1u, 255u, 256u, 257u, 1000u, 4097u}) {
    block* b = idx.take(bytes, any);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->addr % 256, 0u);
    EXPECT_EQ(b->size, block_index::round(bytes));
    EXPECT_GE(b->size, bytes);
  }
  EXPECT_EQ(idx.live_blocks(), 6u);
}

TEST(BlockIndex, CoalescesBackToOneBlock) {
  block_index idx;
  idx.add_range(base, 8 * MiB, 0);
  std::vector<block*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(idx.take(1000 + 37 * i, any));
  std::mt19937 rng(7);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (block* b : blocks) idx.release(b);
  EXPECT_EQ(idx.live_bytes(), 0u);
  EXPECT_EQ(idx.largest_free(), 8 * MiB);
  EXPECT_EQ(idx.free_bytes(), 8 * MiB);
}

TEST(BlockIndex, ReusesTheBestFittingHole) {
  block_index idx;
  idx.add_range(base, 64 * MiB, 0);
  block* a = idx.take(4096, any);
  block* sep1 = idx.take(256, any);
  block* b = idx.take(1 * MiB, any);
  block* sep2 = idx.take(256, any);
  ASSERT_TRUE(a && sep1 && b && sep2);
  const std::uintptr_t a_addr = a->addr;
  const std::uintptr_t b_addr = b->addr;
  idx.release(a);
  idx.release(b);
  EXPECT_EQ(idx.take(4096, any)->addr, a_addr);     // the small hole, not the big one
  EXPECT_EQ(idx.take(MiB - 512, any)->addr, b_addr);  // the 1 MiB hole, not the tail
}

TEST(BlockIndex, SkipsBlocksThePredicateRejects) {
  block_index idx;
  idx.add_range(base, 4 * MiB, 0);
  block* a = idx.take(MiB, any);
  block* guard = idx.take(256, any);
  ASSERT_TRUE(a && guard);
  const std::uintptr_t a_addr = a->addr;
  a->tickets.add(ticket{1, 5});
  idx.release(a);
  auto no_tickets = [](const block& b) { return b.tickets.empty(); };
  block* other = idx.take(MiB, no_tickets);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other->addr, a_addr);
  block* same = idx.take(MiB, any);
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->addr, a_addr);
  EXPECT_EQ(same->tickets.count, 1);  // tickets stay with the bytes (Note [Tickets outlive a reuse] in pool/vmm_arena.cc)
}

TEST(BlockIndex, MergeKeepsTheUnionOfTickets) {
  ticket_set s;
  s.add({0, 3});
  s.add({0, 5});
  s.add({1, 2});
  ticket_set t;
  t.add({1, 7});
  t.add({2, 1});
  s.merge(t);
  ASSERT_EQ(s.count, 3);
  EXPECT_EQ(s.items[0].seq, 5u);
  EXPECT_EQ(s.items[1].seq, 7u);
  s.prune([](const ticket& x) { return x.slot == 1; });
  EXPECT_EQ(s.count, 2);
  for (int i = 0; i < ticket_set::max_tickets + 1; ++i) s.add({static_cast<std::uint16_t>(10 + i), 1});
  EXPECT_TRUE(s.overflow);
  EXPECT_FALSE(s.empty());
}

TEST(BlockIndex, RandomSequenceNeverOverlaps) {
  block_index idx;
  idx.add_range(base, 256 * MiB, 0);
  idx.add_range(base + 512 * MiB, 64 * MiB, 1);
  std::mt19937_64 rng(42);
  std::map<std::uintptr_t, std::size_t> live;  // addr -> size
  std::vector<block*> blocks;
  const std::size_t sizes[] = {256, 512, 4096, 65536, 98304, 1 << 20, 3 << 20, 200, 12345};
  for (int step = 0; step < 20000; ++step) {
    if (blocks.empty() || rng() % 3 != 0) {
      std::size_t bytes = sizes[rng() % std::size(sizes)] + rng() % 3 * 256;
      block* b = idx.take(bytes, any);
      if (b == nullptr) continue;
      auto next = live.lower_bound(b->addr);
      ASSERT_TRUE(next == live.end() || next->first >= b->addr + b->size) << step;
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, b->addr) << step;
      }
      ASSERT_EQ(idx.find_live(b->addr), b);
      live[b->addr] = b->size;
      blocks.push_back(b);
    } else {
      std::size_t i = rng() % blocks.size();
      block* b = blocks[i];
      live.erase(b->addr);
      idx.release(b);
      ASSERT_EQ(idx.find_live(b->addr), nullptr);
      blocks[i] = blocks.back();
      blocks.pop_back();
    }
    std::size_t live_bytes = 0;
    if (step % 1000 == 0) {
      for (auto& [a, s] : live) live_bytes += s;
      ASSERT_EQ(idx.live_bytes(), live_bytes);
      ASSERT_EQ(idx.live_bytes() + idx.free_bytes(), 320 * MiB);
    }
  }
}

}  // namespace
}  // namespace oversub::pool
