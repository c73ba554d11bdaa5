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

}  // namespace
}  // namespace oversub
