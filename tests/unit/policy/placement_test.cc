// Tests of the lifetime-planned placement: validity and the lower bound on random
// lifetimes, hand cases whose optimum is known, edge cases, determinism, and the
// validity check itself (it must reject what is wrong, or the rest proves nothing);
// with a page size (placement_options), validity in whole pages and hand cases where
// long-lived buffers keep off the temporaries' pages.
#include "policy/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace oversub::policy {
namespace {

using lifetimes = std::vector<buffer_lifetime>;

// n buffers from a random alloc/free sequence of the kind an iteration makes:
// each step allocates (sizes spread over four orders of magnitude) or frees a
// random live buffer; some are never freed.
lifetimes random_iteration(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  lifetimes out;
  std::vector<std::size_t> live;
  std::uint32_t t = 0;
  while (out.size() < n || !live.empty()) {
    const bool alloc = out.size() < n && (live.empty() || rng() % 100 < 55);
    if (alloc) {
      const std::size_t size = std::size_t{1} << (rng() % 20 + 6);
      out.push_back({size + rng() % 1000, t++, 0});
      live.push_back(out.size() - 1);
    } else {
      const std::size_t pick = rng() % live.size();
      const std::size_t k = live[pick];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
      if (rng() % 50 == 0) {
        out[k].free_time = UINT32_MAX;  // never freed: marked, fixed below
      } else {
        out[k].free_time = t++;
      }
    }
  }
  for (auto& b : out) {
    if (b.free_time == UINT32_MAX) b.free_time = t;
  }
  return out;
}

std::size_t brute_lower_bound(const lifetimes& bs, std::size_t align) {
  std::uint32_t end = 0;
  for (const auto& b : bs) end = std::max(end, b.free_time);
  std::size_t best = 0;
  for (std::uint32_t t = 0; t <= end; ++t) {
    std::size_t live = 0;
    for (const auto& b : bs) {
      if (b.alloc_time <= t && t < std::max(b.free_time, b.alloc_time + 1)) {
        live += (b.size_bytes + align - 1) / align * align;
      }
    }
    best = std::max(best, live);
  }
  return best;
}

TEST(Placement, RandomLifetimesAreValidAndAtLeastTheBound) {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    const auto bs = random_iteration(seed * 10, seed);
    const placement p = plan_placement(bs);
    ASSERT_TRUE(placement_is_valid(bs, p)) << "seed " << seed;
    EXPECT_EQ(p.lower_bound_bytes, brute_lower_bound(bs, 256)) << "seed " << seed;
    EXPECT_GE(p.region_bytes, p.lower_bound_bytes);
    EXPECT_FALSE(p.heuristic.empty());
    for (std::size_t off : p.offsets) EXPECT_EQ(off % 256, 0u);
  }
}

TEST(Placement, RandomLifetimesOtherAlignments) {
  for (std::size_t align : {1u, 8u, 512u, 2u << 20}) {
    const auto bs = random_iteration(300, 7);
    const placement p = plan_placement(bs, align);
    ASSERT_TRUE(placement_is_valid(bs, p, align)) << "align " << align;
    EXPECT_EQ(p.lower_bound_bytes, brute_lower_bound(bs, align));
  }
}

TEST(Placement, StackLikeIterationMeetsTheBound) {
  // Forward allocates a0..a9, backward frees them in reverse, with a gradient
  // temporary per layer: a LIFO pattern a planner must solve exactly.
  lifetimes bs;
  std::uint32_t t = 0;
  for (int i = 0; i < 10; ++i) bs.push_back({std::size_t(1000 * (i + 1)), t++, 0});
  for (int i = 9; i >= 0; --i) {
    bs.push_back({std::size_t(300 * (i + 1)), t++, 0});
    bs.back().free_time = t + 1;
    bs[static_cast<std::size_t>(i)].free_time = t++;
    ++t;
  }
  const placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.region_bytes, p.lower_bound_bytes);
}

TEST(Placement, HandCasesWithAKnownOptimum) {
  const std::size_t u = 256;
  // a [0,2) and c [2,4) of 2 units share addresses; b [1,3) of 1 unit sits beside
  // them. The bound (3 units at times 1 and 2) is the optimum.
  lifetimes bs = {{2 * u, 0, 2}, {u, 1, 3}, {2 * u, 2, 4}};
  placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.lower_bound_bytes, 3 * u);
  EXPECT_EQ(p.region_bytes, 3 * u);

  // x [0,3) must sit at an edge so that w [1,2) of 2 units fits beside it; y and z
  // reuse w's addresses before and after. Optimum 3 units; a placement that puts
  // x in the middle needs 4.
  bs = {{u, 0, 3}, {u, 0, 1}, {u, 2, 3}, {2 * u, 1, 2}};
  p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.lower_bound_bytes, 3 * u);
  EXPECT_EQ(p.region_bytes, 3 * u);

  // A big buffer live throughout and three waves of two buffers that each fill
  // the rest exactly: optimum = bound = 10 units.
  bs = {{4 * u, 0, 6}, {3 * u, 0, 2}, {3 * u, 0, 2}, {6 * u, 2, 4},
        {u, 4, 6},     {5 * u, 4, 6}};
  p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.lower_bound_bytes, 10 * u);
  EXPECT_EQ(p.region_bytes, 10 * u);
}

TEST(Placement, EmptyInputGivesAnEmptyPlacement) {
  const lifetimes bs;
  const placement p = plan_placement(bs);
  EXPECT_TRUE(p.offsets.empty());
  EXPECT_EQ(p.region_bytes, 0u);
  EXPECT_EQ(p.lower_bound_bytes, 0u);
  EXPECT_TRUE(placement_is_valid(bs, p));
}

TEST(Placement, OneBufferSitsAtZeroAligned) {
  const lifetimes bs = {{1000, 0, 1}};
  const placement p = plan_placement(bs);
  ASSERT_EQ(p.offsets.size(), 1u);
  EXPECT_EQ(p.offsets[0], 0u);
  EXPECT_EQ(p.region_bytes, 1024u);
  EXPECT_EQ(p.lower_bound_bytes, 1024u);
}

TEST(Placement, ZeroSizeBuffersTakeNoRoom) {
  const lifetimes bs = {{0, 0, 4}, {512, 1, 3}, {0, 1, 2}, {256, 2, 5}};
  const placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.region_bytes, 768u);
  EXPECT_EQ(p.lower_bound_bytes, 768u);
}

TEST(Placement, NeverFreedBuffersStayDisjointFromEverything) {
  // Never freed: free_time == the iteration's event count (here 6).
  const lifetimes bs = {{256, 0, 6}, {512, 1, 3}, {256, 2, 6}, {512, 3, 5}, {1024, 4, 6}};
  const placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.lower_bound_bytes, 256u + 256 + 512 + 1024);
  EXPECT_EQ(p.region_bytes, p.lower_bound_bytes);
}

TEST(Placement, IdenticalTimesStackUp) {
  lifetimes bs;
  for (int i = 0; i < 50; ++i) bs.push_back({std::size_t(100 + i * 37), 3, 9});
  const placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.region_bytes, p.lower_bound_bytes);
  // Equal alloc and free times: the buffer is still live for its own step.
  const lifetimes same = {{256, 4, 4}, {256, 4, 4}};
  const placement q = plan_placement(same);
  ASSERT_TRUE(placement_is_valid(same, q));
  EXPECT_EQ(q.region_bytes, 512u);
}

TEST(Placement, DisjointLifetimesShareAddresses) {
  lifetimes bs;
  for (std::uint32_t i = 0; i < 100; ++i) bs.push_back({4096, 2 * i, 2 * i + 1});
  const placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_EQ(p.region_bytes, 4096u);
}

TEST(Placement, OutputIsDeterministic) {
  const auto bs = random_iteration(2000, 99);
  const placement a = plan_placement(bs);
  const placement b = plan_placement(bs);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.region_bytes, b.region_bytes);
  EXPECT_EQ(a.heuristic, b.heuristic);
}

TEST(Placement, RandomIterationsStayCloseToTheBound) {
  // Not a promise of the interface, a regression guard on quality: the greedy
  // heuristics with compaction land within a few percent on these inputs.
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    const auto bs = random_iteration(1000, seed);
    const placement p = plan_placement(bs);
    ASSERT_TRUE(placement_is_valid(bs, p));
    EXPECT_LE(static_cast<double>(p.region_bytes), 1.10 * p.lower_bound_bytes)
        << "seed " << seed << " " << p.heuristic;
  }
}

TEST(PlacementIsValid, RejectsWhatIsWrong) {
  const lifetimes bs = {{512, 0, 2}, {512, 1, 3}, {512, 3, 4}};
  placement p = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, p));

  placement overlap = p;
  overlap.offsets[1] = overlap.offsets[0];  // live together at time 1
  EXPECT_FALSE(placement_is_valid(bs, overlap));

  placement partial = p;
  partial.offsets = {0, 256, 0};  // partial overlap of buffers 0 and 1
  partial.region_bytes = 768;
  EXPECT_FALSE(placement_is_valid(bs, partial));

  placement misaligned = p;
  misaligned.offsets[2] += 8;
  misaligned.region_bytes += 256;
  EXPECT_FALSE(placement_is_valid(bs, misaligned));

  placement outside = p;
  outside.region_bytes -= 256;
  EXPECT_FALSE(placement_is_valid(bs, outside));

  placement short_list = p;
  short_list.offsets.pop_back();
  EXPECT_FALSE(placement_is_valid(bs, short_list));

  // Buffer 2 starts when buffer 1 ends: sharing addresses is fine.
  placement touching = p;
  touching.offsets = {0, 512, 512};
  touching.region_bytes = 1024;
  EXPECT_TRUE(placement_is_valid(bs, touching));
}


// Placement with a page size (Note [Grouping by lifetime into pages] in
// policy/placement.cc).

// The pages [first, last] that bytes [offset, offset + size) touch.
std::pair<std::size_t, std::size_t> pages_of(std::size_t offset, std::size_t size,
                                             std::size_t page) {
  return {offset / page, (offset + size - 1) / page};
}

bool share_a_page(std::size_t off_a, std::size_t size_a, std::size_t off_b, std::size_t size_b,
                  std::size_t page) {
  const auto a = pages_of(off_a, size_a, page);
  const auto b = pages_of(off_b, size_b, page);
  return a.first <= b.second && b.first <= a.second;
}

TEST(PlacementPages, RandomLifetimesAreValidInWholePages) {
  int grouped = 0, ungrouped = 0;
  for (std::size_t page : {std::size_t{64} << 10, std::size_t{2} << 20}) {
    for (std::uint32_t seed = 1; seed <= 20; ++seed) {
      const auto bs = random_iteration(seed * 15, seed);
      placement_options o;
      o.page_bytes = page;
      const placement p = plan_placement(bs, o);
      ASSERT_TRUE(placement_is_valid(bs, p)) << "page " << page << " seed " << seed;
      EXPECT_EQ(p.lower_bound_bytes, brute_lower_bound(bs, 256));
      // Never more pages than the ungrouped plan.
      const std::size_t plain = (p.ungrouped_region_bytes + page - 1) / page * page;
      EXPECT_EQ(p.region_bytes, plain) << "page " << page << " seed " << seed;
      EXPECT_EQ(p.ungrouped_region_bytes, plan_placement(bs).region_bytes);
      if (!p.page_grouped) {
        EXPECT_EQ(p.offsets, plan_placement(bs).offsets);
      }
      (p.page_grouped ? grouped : ungrouped) += 1;
    }
  }
  // Both outcomes occur, so both paths were checked.
  EXPECT_GT(grouped, 0);
  EXPECT_GT(ungrouped, 0);
}

TEST(PlacementPages, WithoutAPageSizeTheOffsetsAreUnchanged) {
  const auto bs = random_iteration(200, 3);
  const placement a = plan_placement(bs);
  const placement b = plan_placement(bs, placement_options{});
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.region_bytes, b.region_bytes);
  EXPECT_FALSE(b.page_grouped);
}

TEST(PlacementPages, ALongLivedBufferSharesNoPageWithTemporaries) {
  // Forward: four activations of 512 KiB, saved for the backward pass; between
  // them and in the backward pass, temporaries of 256 KiB that live one step. The
  // ungrouped plan fits all of it in 2.5 MiB and puts temporaries on the
  // activations' pages; with 2 MiB pages the activations get pages of their own.
  const std::size_t KiB = 1024, page = 2048 * KiB;
  lifetimes bs;
  std::uint32_t t = 0;
  std::vector<std::size_t> acts, temps;
  for (int i = 0; i < 4; ++i) {
    acts.push_back(bs.size());
    bs.push_back({512 * KiB, t++, 0});
    temps.push_back(bs.size());
    bs.push_back({256 * KiB, t, t + 1});
    t += 2;
  }
  for (int i = 3; i >= 0; --i) {
    temps.push_back(bs.size());
    bs.push_back({256 * KiB, t, t + 1});
    t += 2;
    bs[acts[static_cast<std::size_t>(i)]].free_time = t++;
  }
  const placement plain = plan_placement(bs);
  ASSERT_TRUE(placement_is_valid(bs, plain));
  bool plain_shares = false;
  for (std::size_t a : acts) {
    for (std::size_t x : temps) {
      plain_shares = plain_shares || share_a_page(plain.offsets[a], bs[a].size_bytes,
                                                  plain.offsets[x], bs[x].size_bytes, page);
    }
  }
  EXPECT_TRUE(plain_shares) << "the case no longer shows the problem";

  placement_options o;
  o.page_bytes = page;
  const placement p = plan_placement(bs, o);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_TRUE(p.page_grouped) << p.heuristic;
  EXPECT_EQ(p.region_bytes, 2 * page);  // activations in one page, temporaries in the other
  for (std::size_t a : acts) {
    for (std::size_t x : temps) {
      EXPECT_FALSE(share_a_page(p.offsets[a], bs[a].size_bytes, p.offsets[x],
                                bs[x].size_bytes, page))
          << "activation " << a << " at " << p.offsets[a] << ", temporary " << x << " at "
          << p.offsets[x];
    }
  }
}

TEST(PlacementPages, ALargeLongLivedBufferIsAlignedAndAlone) {
  // A 3.5 MiB buffer live throughout, and small long-lived (1.9 MiB) and short-lived
  // (1.5 MiB) buffers around it: 4 pages with or without grouping. The large one
  // starts on a page and no other buffer touches its 2 pages.
  const std::size_t KiB = 1024, page = 2048 * KiB;
  lifetimes bs = {{100 * KiB, 0, 40}, {3584 * KiB, 1, 39}};
  for (std::uint32_t t = 2; t < 38; t += 2) bs.push_back({1500 * KiB, t, t + 1});
  bs.push_back({1800 * KiB, 2, 30});
  const placement_options o{256, page};
  const placement p = plan_placement(bs, o);
  ASSERT_TRUE(placement_is_valid(bs, p));
  ASSERT_TRUE(p.page_grouped) << p.heuristic;
  EXPECT_EQ(p.offsets[1] % page, 0u);
  for (std::size_t k = 0; k < bs.size(); ++k) {
    if (k == 1) continue;
    EXPECT_FALSE(share_a_page(p.offsets[1], bs[1].size_bytes, p.offsets[k], bs[k].size_bytes,
                              page))
        << "buffer " << k << " at " << p.offsets[k];
  }
}

TEST(PlacementPages, TemporariesReuseTheBytesOfDeadLongLivedBuffers) {
  // Long-lived buffers in the first half and temporaries of the same total size in
  // the second: stacking the classes in zones would need 2 MiB; the temporaries
  // are placed from the top of the ungrouped plan's 1 MiB instead, into bytes the
  // long-lived buffers no longer use.
  const std::size_t KiB = 1024, page = 64 * KiB;
  lifetimes bs;
  for (std::uint32_t i = 0; i < 16; ++i) bs.push_back({64 * KiB, i, 100 + i});
  for (std::uint32_t i = 0; i < 16; ++i) bs.push_back({1024 * KiB, 120 + 2 * i, 121 + 2 * i});
  placement_options o;
  o.page_bytes = page;
  const placement p = plan_placement(bs, o);
  ASSERT_TRUE(placement_is_valid(bs, p));
  EXPECT_TRUE(p.page_grouped) << p.heuristic;
  EXPECT_EQ(p.region_bytes, 1024 * KiB);
}

// See Note [Long-lived layout from a profile] in policy/placement.h: a layer's weight,
// gradient and two Adam moments are allocated together; the weights are first used in the
// forward pass, the gradients and moments in the backward pass, layer by layer from the
// last.
TEST(LongLivedLayout, OrdersByFirstUseKeepingAllocationOrderAmongEquals) {
  // Layers 0..2, each [weight, gradient, m, v]; forward uses weight l at launch l,
  // backward layer l's gradient at 10 + 2 * (2 - l) and its update m, v (and gradient
  // again) at 11 + 2 * (2 - l). Buffer 12 is never used.
  std::vector<std::uint32_t> first(13, no_first_use);
  for (std::uint32_t l = 0; l < 3; ++l) {
    first[4 * l] = l;
    first[4 * l + 1] = 10 + 2 * (2 - l);
    first[4 * l + 2] = 11 + 2 * (2 - l);
    first[4 * l + 3] = 11 + 2 * (2 - l);
  }
  const std::vector<std::uint32_t> order = long_lived_order(first);
  const std::vector<std::uint32_t> want = {0, 4, 8, 9, 10, 11, 5, 6, 7, 1, 2, 3, 12};
  EXPECT_EQ(order, want);
  EXPECT_TRUE(long_lived_order({}).empty());
}

}  // namespace
}  // namespace oversub::policy
