// Tests of the interval map of live allocations: containment lookups at the edges,
// exact-base erase, stale overlapping entries displaced on insert; and the argument
// scan (Note [Scanning argument words] in common/allocation_map.h): edges, order and
// duplicates, the cache and the flat index never answering for a freed allocation,
// and the scan against find() word by word over random changes.
#include "common/allocation_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

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

// What scan() must answer, from find() word by word.
std::vector<std::uint64_t> reference_scan(const allocation_map& m,
                                          const std::vector<std::uint64_t>& words,
                                          std::vector<std::uint64_t>* sizes) {
  std::vector<std::uint64_t> bases;
  for (std::uint64_t w : words) {
    const allocation* a = m.find(w);
    if (a == nullptr || std::find(bases.begin(), bases.end(), a->base) != bases.end()) continue;
    bases.push_back(a->base);
    sizes->push_back(a->bytes);
  }
  return bases;
}

void expect_scan_matches(const allocation_map& m, const std::vector<std::uint64_t>& words) {
  std::vector<std::uint64_t> want_sizes;
  const std::vector<std::uint64_t> want = reference_scan(m, words, &want_sizes);
  std::vector<std::uint64_t> bases(words.size() + 1, 0xdead);
  std::vector<std::uint64_t> sizes(words.size() + 1, 0xdead);
  const std::size_t n = m.scan(words.data(), words.size(), bases.data(), sizes.data());
  bases.resize(n);
  sizes.resize(n);
  ASSERT_EQ(bases, want);
  ASSERT_EQ(sizes, want_sizes);
  std::vector<std::uint64_t> again(words.size() + 1);
  ASSERT_EQ(m.scan(words.data(), words.size(), again.data()), n) << "without sizes, or cached";
  again.resize(n);
  ASSERT_EQ(again, want);
}

TEST(AllocationMap, ScanEdgesOfEachAllocation) {
  allocation_map m;
  m.insert(make(0x1000, 0x100), nullptr);
  m.insert(make(0x1100, 0x80), nullptr);  // adjacent: starts where the first ends
  m.insert(make(0x3000, 0), nullptr);     // zero bytes: no word is inside
  m.insert(make(0x4000, 1), nullptr);
  const std::uint64_t words[] = {0xfff, 0x1000, 0x10ff, 0x1100, 0x117f, 0x1180,
                                 0x3000, 0x3fff, 0x4000, 0x4001, 0};
  std::uint64_t bases[11] = {};
  std::uint64_t sizes[11] = {};
  for (int pass = 0; pass < 2; ++pass) {  // the tree, then the cache
    ASSERT_EQ(m.scan(words, 11, bases, sizes), 3u);
    EXPECT_EQ(bases[0], 0x1000u);  // at the base, and the last byte: one base
    EXPECT_EQ(sizes[0], 0x100u);
    EXPECT_EQ(bases[1], 0x1100u);  // the first's end is the second's base
    EXPECT_EQ(sizes[1], 0x80u);
    EXPECT_EQ(bases[2], 0x4000u);
    EXPECT_EQ(sizes[2], 1u);
  }
  const std::uint64_t single[] = {0x1180};
  EXPECT_EQ(m.scan(single, 1, bases), 0u) << "one past the last end";
  EXPECT_EQ(m.scan(words, 0, bases), 0u);
  allocation_map none;
  EXPECT_EQ(none.scan(words, 11, bases), 0u);
}

TEST(AllocationMap, ScanKeepsTheOrderOfFirstUseAndWritesEachBaseOnce) {
  allocation_map m;
  for (std::uintptr_t k = 0; k < 3000; ++k) m.insert(make(0x100000 + 0x1000 * k, 0x800), nullptr);
  // Many pointers, each allocation named several times and at different offsets, as
  // multi_tensor_apply's tensor lists do.
  std::vector<std::uint64_t> words;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4000; ++i) {
    const std::uint64_t k = rng() % 2000;
    words.push_back(0x100000 + 0x1000 * k + rng() % 0x1000);  // half of them in gaps
    if (i % 5 == 0) words.push_back(static_cast<std::uint64_t>(i));  // a scalar
  }
  for (int pass = 0; pass < 3; ++pass) expect_scan_matches(m, words);
}

TEST(AllocationMap, ScanNeverAnswersForAFreedAllocation) {
  allocation_map m;
  m.insert(make(0x100000, 0x1000), nullptr);
  m.insert(make(0x200000, 0x8000), nullptr);
  m.insert(make(0x400000, 0x1000), nullptr);  // keeps the words below in range
  const std::vector<std::uint64_t> words = {0x200100, 0x204000, 0x100010};
  expect_scan_matches(m, words);
  // Freed: its cached words find nothing.
  ASSERT_TRUE(m.erase(0x200000).has_value());
  expect_scan_matches(m, words);
  // Its base taken by a smaller allocation: 0x204000 is no longer inside.
  m.insert(make(0x200000, 0x1000), nullptr);
  expect_scan_matches(m, words);
  // Freed, and the freed entry reused by an allocation elsewhere.
  ASSERT_TRUE(m.erase(0x200000).has_value());
  m.insert(make(0x300000, 0x1000), nullptr);
  expect_scan_matches(m, words);
  ASSERT_EQ(m.size(), 3u);
  // Displaced by an overlapping insert (freed behind our back).
  m.insert(make(0x0ff000, 0x1800), nullptr);
  expect_scan_matches(m, words);
  std::uint64_t bases[3];
  ASSERT_EQ(m.scan(words.data(), 3, bases), 1u);
  EXPECT_EQ(bases[0], 0x0ff000u);
}

TEST(AllocationMap, ScanAtTheTopOfTheAddressSpace) {
  allocation_map m;
  constexpr std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  m.insert(make(0x1000, 0x1000), nullptr);
  m.insert(make(top - 0xfff, 0x1000), nullptr);  // ends at 2^64
  std::vector<std::uint64_t> words = {top, top - 0xfff, top - 0x1000, 0x1800, 0x2000};
  for (int pass = 0; pass < 200; ++pass) {  // past the flat index's rebuild
    words.push_back(0x1000 + static_cast<std::uint64_t>(pass) * 0x10000);
    expect_scan_matches(m, words);
  }
}

// Random allocations, frees and overlapping inserts, with scans between them: every
// scan answers as find() does, through the tree, the cache and the flat index (rebuilt
// once enough words miss the cache, dropped at the next change), with allocations
// small and large, dense and far apart.
TEST(AllocationMap, ScanMatchesFindOverRandomChanges) {
  std::mt19937_64 rng(11);
  allocation_map m;
  std::vector<std::uintptr_t> live;
  auto random_base = [&] {
    switch (rng() % 4) {
      case 0: return std::uintptr_t{0x7f0000000000} + (rng() % 4096) * 0x200;  // dense
      case 1: return std::uintptr_t{0x7f0000000000} + (rng() % (1u << 20)) * 0x10000;
      case 2: return std::uintptr_t{0x10000} + (rng() % 64) * 0x100000;  // far below
      default: return std::uintptr_t{0x7f0000000000} + (rng() % 64) * 0x40000000;  // huge
    }
  };
  auto random_word = [&]() -> std::uint64_t {
    if (!live.empty() && rng() % 3 != 0) {
      const std::uintptr_t base = live[rng() % live.size()];
      const allocation* a = m.find(base);
      const std::uint64_t reach = a == nullptr ? 1 : a->bytes + 2;
      return base + rng() % reach - (rng() % 2);  // the edges too
    }
    if (rng() % 2 == 0) return random_base() + rng() % 0x20000;  // gaps
    return rng() % 5000;  // scalars
  };
  for (int step = 0; step < 3000; ++step) {
    const unsigned op = rng() % 10;
    if (op < 3) {
      std::size_t bytes = 0;
      switch (rng() % 4) {
        case 0: bytes = 1 + rng() % 0x400; break;
        case 1: bytes = 0x200 * (1 + rng() % 64); break;
        case 2: bytes = (rng() % 8) << 20; break;  // 0 .. 7 MiB, zero included
        default: bytes = (1 + rng() % 4) * 0x40000000ull; break;
      }
      std::vector<allocation> displaced;
      const std::uintptr_t base = random_base();
      m.insert(make(base, bytes), &displaced);
      for (const allocation& d : displaced) std::erase(live, d.base);
      live.push_back(base);
    } else if (op < 5 && !live.empty()) {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(m.erase(live[i]).has_value());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const int scans = 1 + static_cast<int>(rng() % 3);
      for (int s = 0; s < scans; ++s) {
        std::vector<std::uint64_t> words(rng() % 300);
        for (std::uint64_t& w : words) w = random_word();
        expect_scan_matches(m, words);
      }
    }
    ASSERT_EQ(m.size(), live.size());
  }
}

}  // namespace
}  // namespace oversub
