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

// See Note [32 KB parameter blocks] (profiler/launch_scan.h): multi_tensor_apply's tensor
// lists, many pointers by value, past CUDA's old 4 KiB limit; and the largest block CUDA
// 12.1+ launches (32764 bytes), every word of it.
TEST(LaunchScan, ParameterBlocksPast4KiBAreScannedWhole) {
  struct tensor_lists {
    std::uint64_t ptrs[1024];  // 8 KiB
  };
  static tensor_lists lists;
  for (std::size_t k = 0; k < 1024; ++k) lists.ptrs[k] = 0x100000 + 0x1000 * k;
  std::uint64_t out = 0xFEED000;
  const std::vector<param_slot> params = {{0, sizeof lists}, {sizeof lists, 8}};
  void* args[] = {&lists, &out};
  static std::uint64_t words[max_scan_words];
  ASSERT_EQ(gather_words(params, args, words), 1025u);
  EXPECT_EQ(words[600], 0x100000u + 0x1000 * 600);  // past 4 KiB
  EXPECT_EQ(words[1024], 0xFEED000u);               // the output, past 8 KiB

  static std::uint64_t block[32764 / 8 + 1];
  for (std::size_t i = 0; i < 32764 / 8; ++i) block[i] = i + 1;
  const std::vector<param_slot> largest = {{0, 32760}, {32760, 4}};
  ASSERT_EQ(gather_packed(largest, block, 32764, words), 32760u / 8);
  EXPECT_EQ(words[32760 / 8 - 1], 32760u / 8);
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

// A function whose layout is unreadable: its launches are recorded with no buffers
// and marked (Note [A launch whose buffers are not known] in profiler/profile_format.h).
TEST(LaunchScan, AnUnreadableLayoutMarksTheLaunch) {
  tracker live{device_limit{}};
  live.record(allocation{0x1000, 0x100});
  recorder rec;
  rec.on_alloc(0x1000, 0x100, nullptr, 0);
  const function_info known{rec.add_function("known"), {{0, 8}}, false};
  const function_info opaque{rec.add_function("opaque"), {}, true};
  const std::uint64_t word = 0x1010;
  void* args[] = {const_cast<std::uint64_t*>(&word)};
  for (int i = 0; i < 5; ++i) {
    record_launch(known, args, nullptr, 0, live, rec, 0);
    record_launch(opaque, args, nullptr, 0, live, rec, 0);
  }
  std::string why;
  const auto p = rec.build({}, false, "prog", {}, &why);
  ASSERT_TRUE(p) << why;
  ASSERT_EQ(p->launches.size(), 2u);
  for (const launch_record& l : p->launches) {
    const bool is_opaque = p->strings[l.name] == "opaque";
    EXPECT_EQ(l.unreadable(), is_opaque);
    EXPECT_EQ(l.buffers.size(), is_opaque ? 0u : 1u);
  }
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
