// Tests of the interval map of live allocations: containment lookups at the edges,
// exact-base erase, stale overlapping entries displaced on insert.
#include "common/allocation_map.h"

#include <gtest/gtest.h>

namespace oversub {
namespace {

allocation make(std::uintptr_t base, std::size_t bytes) {
  return allocation{base, bytes, alloc_kind::device, nullptr, 0};
}

TEST(AllocationMap, FindContaining) {
  allocation_map m;
  m.insert(make(0x1000, 0x100), nullptr);
  m.insert(make(0x2000, 0x10), nullptr);
  EXPECT_EQ(m.find(0xfff), nullptr);
  ASSERT_NE(m.find(0x1000), nullptr);
  EXPECT_EQ(m.find(0x10ff)->base, 0x1000u);
  EXPECT_EQ(m.find(0x1100), nullptr);
  EXPECT_EQ(m.find(0x200f)->base, 0x2000u);
  EXPECT_EQ(m.find(0x2010), nullptr);
  EXPECT_EQ(m.size(), 2u);
}

TEST(AllocationMap, EraseNeedsExactBase) {
  allocation_map m;
  m.insert(make(0x1000, 0x100), nullptr);
  EXPECT_FALSE(m.erase(0x1008).has_value());
  std::optional<allocation> a = m.erase(0x1000);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 0x100u);
  EXPECT_FALSE(m.erase(0x1000).has_value());  // already freed
  EXPECT_TRUE(m.empty());
}

TEST(AllocationMap, InsertDisplacesOverlapping) {
  allocation_map m;
  m.insert(make(0x1000, 0x100), nullptr);
  m.insert(make(0x1200, 0x100), nullptr);
  m.insert(make(0x1400, 0x100), nullptr);
  std::vector<allocation> displaced;
  m.insert(make(0x1080, 0x200), &displaced);  // overlaps the first two
  ASSERT_EQ(displaced.size(), 2u);
  EXPECT_EQ(displaced[0].base, 0x1000u);
  EXPECT_EQ(displaced[1].base, 0x1200u);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.find(0x1000), nullptr);
  EXPECT_EQ(m.find(0x1100)->base, 0x1080u);
}

TEST(AllocationMap, SameBaseReplaces) {
  allocation_map m;
  m.insert(make(0x1000, 0x100), nullptr);
  std::vector<allocation> displaced;
  m.insert(make(0x1000, 0x40), &displaced);
  ASSERT_EQ(displaced.size(), 1u);
  EXPECT_EQ(m.find(0x1000)->bytes, 0x40u);
}

TEST(AllocationMap, ZeroSizeIsFindableOnlyByErase) {
  allocation_map m;
  m.insert(make(0x1000, 0), nullptr);
  EXPECT_EQ(m.find(0x1000), nullptr);
  EXPECT_TRUE(m.erase(0x1000).has_value());
}

TEST(AllocationMap, ScanNeverAnswersFromAStaleCache) {
  allocation_map m;
  m.insert(allocation{0x100000, 0x1000}, nullptr);
  m.insert(allocation{0x200000, 0x8000}, nullptr);
  const std::uint64_t words[] = {0x100010, 7, 0x200100, 0x100020, 0x2000ff0, 0x204000};
  std::uint64_t bases[6] = {};
  ASSERT_EQ(m.scan(words, 6, bases), 2u);
  EXPECT_EQ(bases[0], 0x100000u);
  EXPECT_EQ(bases[1], 0x200000u);
  ASSERT_EQ(m.scan(words, 6, bases), 2u) << "the same answer from the cache";
  // Freed and replaced by a smaller allocation at another base: the cached range
  // [0x200000, 0x208000) must not answer for 0x204000 any more.
  ASSERT_TRUE(m.erase(0x200000).has_value());
  m.insert(allocation{0x202000, 0x1000}, nullptr);
  ASSERT_EQ(m.scan(words, 6, bases), 1u);
  EXPECT_EQ(bases[0], 0x100000u);
  const std::uint64_t inside[] = {0x202800, 0x204000};
  ASSERT_EQ(m.scan(inside, 2, bases), 1u);
  EXPECT_EQ(bases[0], 0x202000u);
  ASSERT_TRUE(m.erase(0x100000).has_value());
  ASSERT_TRUE(m.erase(0x202000).has_value());
  EXPECT_EQ(m.scan(words, 6, bases), 0u);
}

}  // namespace
}  // namespace oversub
