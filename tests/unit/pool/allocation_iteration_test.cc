// Tests of policy/allocation_iteration (the learner of planned mode) together with
// policy/placement (part B's planner): the period is found from the allocation
// stream alone, lifetimes are positions within it, and the plan made from them
// never overlaps two buffers that are live together.
#include "policy/allocation_iteration.h"

#include <gtest/gtest.h>

#include <random>

#include "policy/placement.h"

namespace oversub::policy {
namespace {

// One iteration: allocate a, b, c; free a; allocate d; free b, c, d.
void iteration(allocation_iteration_learner& l, std::uint64_t& next_id) {
  const std::uint64_t a = next_id++, b = next_id++, c = next_id++, d = next_id++;
  l.on_alloc(a, 1000);
  l.on_alloc(b, 4096);
  l.on_alloc(c, 256);
  l.on_free(a);
  l.on_alloc(d, 1 << 20);
  l.on_free(b);
  l.on_free(c);
  l.on_free(d);
}

TEST(AllocationIteration, FindsThePeriodAfterAPrologue) {
  allocation_iteration_learner l;
  std::uint64_t id = 1;
  // Long-lived allocations first (weights): never freed, repeated sizes.
  for (int i = 0; i < 10; ++i) l.on_alloc(id++, 65536);
  iteration(l, id);
  EXPECT_FALSE(l.learned().has_value());
  iteration(l, id);
  ASSERT_TRUE(l.learned().has_value());
  const learned_iteration& it = *l.learned();
  ASSERT_EQ(it.events.size(), 8u);
  ASSERT_EQ(it.buffers.size(), 4u);
  EXPECT_EQ(it.buffers[0].size_bytes, 1000u);
  EXPECT_EQ(it.buffers[0].alloc_time, 0u);
  EXPECT_EQ(it.buffers[0].free_time, 3u);
  EXPECT_EQ(it.buffers[3].size_bytes, std::size_t{1} << 20);
  EXPECT_EQ(it.buffers[3].alloc_time, 4u);
  EXPECT_EQ(it.buffers[3].free_time, 7u);
}

// The replay of a ResNet trace: inside the iteration, with activations live, a
// temporary is allocated and freed twice in a row. That pair repeats and is closed,
// but explains a few events of hundreds: not the iteration.
void iteration_with_temporaries(allocation_iteration_learner& l, std::uint64_t& next_id) {
  std::vector<std::uint64_t> acts;
  for (int layer = 0; layer < 20; ++layer) {
    acts.push_back(next_id);
    l.on_alloc(next_id++, std::size_t{1} << 20);
    for (int t = 0; t < 2; ++t) {
      const std::uint64_t tmp = next_id++;
      l.on_alloc(tmp, 512);
      l.on_free(tmp);
    }
  }
  for (auto it = acts.rbegin(); it != acts.rend(); ++it) l.on_free(*it);
}

TEST(AllocationIteration, ATemporaryPairIsNotTheIteration) {
  allocation_iteration_learner l;
  std::uint64_t id = 1;
  for (int i = 0; i < 10; ++i) l.on_alloc(id++, 65536);
  iteration_with_temporaries(l, id);
  EXPECT_FALSE(l.learned().has_value());
  iteration_with_temporaries(l, id);
  ASSERT_TRUE(l.learned().has_value());
  EXPECT_EQ(l.learned()->buffers.size(), 60u);  // 20 activations, 40 temporaries
}

// After a plan failed, the pool learns again past the failed period.
TEST(AllocationIteration, AMinimumPeriodSkipsShorterOnes) {
  allocation_iteration_learner l(8192, 9);
  std::uint64_t id = 1;
  for (int k = 0; k < 3; ++k) iteration(l, id);  // 8 events each: too short
  EXPECT_FALSE(l.learned().has_value());
  iteration(l, id);  // two copies of two iterations: 16 events
  ASSERT_TRUE(l.learned().has_value());
  EXPECT_EQ(l.learned()->events.size(), 16u);
}

TEST(AllocationIteration, RandomStreamTeachesNothing) {
  allocation_iteration_learner l(256);
  std::mt19937 rng(3);
  std::vector<std::uint64_t> live;
  for (int i = 0; i < 5000; ++i) {
    if (live.empty() || rng() % 2) {
      live.push_back(i + 1);
      l.on_alloc(i + 1, (rng() % 1000 + 1) * 256);
    } else {
      std::size_t k = rng() % live.size();
      l.on_free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  EXPECT_FALSE(l.learned().has_value());
}

TEST(AllocationIteration, PlanOfALearnedIterationIsValid) {
  // A training-like iteration: forward activations live until backward.
  allocation_iteration_learner l;
  std::uint64_t id = 1;
  std::mt19937 rng(11);
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back((rng() % 4096 + 1) * 256);
  for (int iter = 0; iter < 3 && !l.learned(); ++iter) {
    std::vector<std::uint64_t> acts;
    for (std::size_t s : sizes) {
      acts.push_back(id);
      l.on_alloc(id++, s);
      const std::uint64_t tmp = id++;
      l.on_alloc(tmp, s / 2 + 256);
      l.on_free(tmp);
    }
    while (!acts.empty()) {
      l.on_free(acts.back());
      acts.pop_back();
    }
  }
  ASSERT_TRUE(l.learned().has_value());
  const learned_iteration& it = *l.learned();
  EXPECT_EQ(it.buffers.size(), 80u);
  placement p = plan_placement(it.buffers, 256);
  ASSERT_EQ(p.offsets.size(), it.buffers.size()) << "plan_placement (part B) returned no plan";
  EXPECT_TRUE(placement_is_valid(it.buffers, p, 256));
  // Check it ourselves too: lifetime-overlapping buffers never share bytes.
  for (std::size_t i = 0; i < it.buffers.size(); ++i) {
    for (std::size_t j = i + 1; j < it.buffers.size(); ++j) {
      const buffer_lifetime& a = it.buffers[i];
      const buffer_lifetime& b = it.buffers[j];
      const bool live_together = a.alloc_time < b.free_time && b.alloc_time < a.free_time;
      const bool share = p.offsets[i] < p.offsets[j] + b.size_bytes &&
                         p.offsets[j] < p.offsets[i] + a.size_bytes;
      ASSERT_FALSE(live_together && share) << i << " and " << j;
    }
  }
  EXPECT_GE(p.region_bytes, p.lower_bound_bytes);
  EXPECT_GT(p.lower_bound_bytes, 0u);
}

}  // namespace
}  // namespace oversub::policy
