// The launch-period search: the iteration of a sequence with warm-up and tail,
// layer repetition inside an iteration not mistaken for it, and the phase at the
// fewest live bytes.
#include "profiler/period.h"

#include <gtest/gtest.h>

namespace oversub::profiler {
namespace {

std::vector<std::uint32_t> repeat(const std::vector<std::uint32_t>& body, int times) {
  std::vector<std::uint32_t> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), body.begin(), body.end());
  return out;
}

TEST(Period, WholeSequence) {
  const auto s = find_period(repeat({1, 2, 3, 4, 5}, 4));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->period, 5u);
  EXPECT_EQ(s->begin, 0u);
  EXPECT_EQ(s->end, 20u);
  EXPECT_EQ(s->repetitions(), 4u);
}

TEST(Period, IterationWithRepeatedLayersIsTheWholeStep) {
  // forward: layer block (7, 8) x3, loss 9, backward (10, 11) x3, optimizer 12
  const std::vector<std::uint32_t> step = {7, 8, 7, 8, 7, 8, 9, 10, 11, 10, 11, 10, 11, 12};
  const auto s = find_period(repeat(step, 3));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->period, step.size());
}

TEST(Period, WarmupBeforeIsSkipped) {
  std::vector<std::uint32_t> seq = {90, 91, 92};
  const auto body = repeat({1, 2, 3, 4}, 5);
  seq.insert(seq.end(), body.begin(), body.end());
  const auto s = find_period(seq);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->period, 4u);
  EXPECT_EQ(s->end, seq.size());
  EXPECT_EQ(s->begin, 3u);
}

TEST(Period, TailAfterIsSkipped) {
  auto seq = repeat({1, 2, 3, 4}, 5);
  seq.push_back(77);
  seq.push_back(78);
  const auto s = find_period(seq);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->period, 4u);
  EXPECT_EQ(s->begin, 0u);
  EXPECT_EQ(s->end, 20u);
}

TEST(Period, NothingRepeats) {
  EXPECT_FALSE(find_period({1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(find_period({}));
  // One and a half copies is not a repetition.
  EXPECT_FALSE(find_period({1, 2, 3, 4, 1, 2}));
}

TEST(Period, PhaseAtFewestLiveBytes) {
  const periodic_stretch s{4, 0, 12};
  // Live bytes peak mid-iteration and are lowest before token 2 of each period.
  const std::vector<std::uint64_t> cost = {50, 60, 10, 40, 50, 60, 10, 40, 50, 60, 10, 40, 50};
  EXPECT_EQ(choose_phase(s, cost), 2u);
  // A run of equally low starts (1, 2): the last of it, just before allocation.
  const std::vector<std::uint64_t> flat = {50, 10, 10, 40, 50, 10, 10, 40, 50, 10, 10, 40, 50};
  EXPECT_EQ(choose_phase(s, flat), 2u);
}

}  // namespace
}  // namespace oversub::profiler
