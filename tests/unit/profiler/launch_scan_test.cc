// Argument words: every 8-byte-aligned word inside a parameter, pointers in
// structs passed by value included, scalars too small for a word skipped; and the
// live-allocation scan that turns words into a buffer set.
#include "profiler/launch_scan.h"

#include <gtest/gtest.h>

#include "common/allocation_map.h"

namespace oversub::profiler {
namespace {

struct by_value {
  int n;
  float* p;  // offset 8 inside the struct
};

TEST(LaunchScan, AlignedWordsOfEachParameter) {
  // kernel(int a, by_value s, double d, char c): offsets 0, 8, 24, 32
  const std::vector<param_slot> params = {{0, 4}, {8, 16}, {24, 8}, {32, 1}};
  int a = 7;
  by_value s{3, reinterpret_cast<float*>(0xABC000)};
  double d = 1.5;
  char c = 'x';
  void* args[] = {&a, &s, &d, &c};
  std::uint64_t words[max_scan_words];
  const std::size_t n = gather_words(params, args, words);
  ASSERT_EQ(n, 3u);  // s.n/padding, s.p, d: a and c are shorter than a word
  EXPECT_EQ(words[1], 0xABC000u);
  std::uint64_t dbits = 0;
  std::memcpy(&dbits, &d, 8);
  EXPECT_EQ(words[2], dbits);
}

TEST(LaunchScan, PackedBufferGivesTheSameWords) {
  const std::vector<param_slot> params = {{0, 8}, {8, 8}, {16, 4}};
  std::uint64_t block[3] = {0x1000, 0x2000, 5};
  std::uint64_t words[max_scan_words];
  ASSERT_EQ(gather_packed(params, block, sizeof block, words), 2u);
  EXPECT_EQ(words[0], 0x1000u);
  EXPECT_EQ(words[1], 0x2000u);
  EXPECT_EQ(gather_packed(params, block, 12, words), 1u);  // cut at the buffer's size
}

TEST(LaunchScan, WordsToBufferSet) {
  allocation_map live;
  live.insert(allocation{0x1000, 0x100}, nullptr);
  live.insert(allocation{0x2000, 0x100}, nullptr);
  live.insert(allocation{0x9000, 0x10}, nullptr);
  const std::uint64_t words[] = {0x10ff, 0x1000, 5, 0x2080, 0x3000, 0x9010, ~0ull, 0x1040};
  std::uint64_t bases[8];
  const std::size_t n = live.scan(words, 8, bases);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(bases[0], 0x1000u);  // interior pointers count, each base once
  EXPECT_EQ(bases[1], 0x2000u);  // 0x9010 is one past the end
  allocation_map empty;
  EXPECT_EQ(empty.scan(words, 8, bases), 0u);
}

TEST(LaunchScan, CacheKeepsOneEntryPerHandle) {
  function_cache cache;
  int k1 = 0, k2 = 0;
  EXPECT_EQ(cache.lookup(&k1), nullptr);
  const function_info* a = cache.insert(&k1, function_info{3, {{0, 8}}});
  EXPECT_EQ(cache.lookup(&k1), a);
  EXPECT_EQ(cache.insert(&k1, function_info{9, {}}), a);  // first insert wins
  EXPECT_EQ(a->id, 3u);
  EXPECT_EQ(cache.lookup(&k2), nullptr);
}

}  // namespace
}  // namespace oversub::profiler
