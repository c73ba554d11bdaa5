// Note [Pages that die] (interpose/page_lifetimes.h): a page's uses become one buffer
// per stretch between deaths; a stretch running across the iteration's boundary is
// long-lived.
#include "interpose/page_lifetimes.h"

#include <gtest/gtest.h>

#include <vector>

namespace oversub::interpose {
namespace {

constexpr std::size_t kPage = std::size_t{2} << 20;
constexpr std::uintptr_t A = 0x200000, B = 0x400000, C = 0x600000;

TEST(PageLifetimes, PagesThatNeverDieStayLongLived) {
  const std::vector<std::vector<page_use>> period = {{{A, 0}}, {{A, 0}, {B, 3}}, {{A, 0}}};
  const page_model m = model_page_lifetimes(period, period, kPage);
  ASSERT_EQ(m.model.buffers.size(), 2u);
  EXPECT_TRUE(m.model.buffers[0].long_lived);
  EXPECT_TRUE(m.model.buffers[1].long_lived);
  EXPECT_EQ(m.page_of_id, (std::vector<std::uintptr_t>{A, B}));
  EXPECT_EQ(policy::validate_model(m.model), "");
}

TEST(PageLifetimes, EachStretchBetweenDeathsIsABuffer) {
  // B dies between launches 3 and 5 and across the boundary (4 in the period
  // before, 5 at its first use here): two per-iteration buffers.
  // C dies between 0 and 4 but not across the boundary: its last stretch runs into
  // the next iteration's first, one long-lived lifetime.
  const std::vector<std::vector<page_use>> previous = {
      {{C, 1}}, {{B, 3}}, {}, {{B, 3}}, {{C, 2}}, {{B, 4}}, {{C, 2}}, {{B, 4}}};
  const std::vector<std::vector<page_use>> current = {
      {{C, 2}}, {{B, 5}}, {}, {{B, 5}}, {{C, 3}}, {{B, 6}}, {{C, 3}}, {{B, 6}}};
  const page_model m = model_page_lifetimes(previous, current, kPage);
  EXPECT_EQ(policy::validate_model(m.model), "");
  ASSERT_EQ(m.model.buffers.size(), 3u);
  // C first (used first): long-lived, both its stretches.
  EXPECT_EQ(m.page_of_id[0], C);
  EXPECT_TRUE(m.model.buffers[0].long_lived);
  EXPECT_EQ(m.model.launches[0].uses, (std::vector<policy::buffer_id>{0}));
  EXPECT_EQ(m.model.launches[4].uses, (std::vector<policy::buffer_id>{0}));
  // B: [1, 3] and [5, 7].
  EXPECT_EQ(m.page_of_id[1], B);
  EXPECT_EQ(m.page_of_id[2], B);
  EXPECT_FALSE(m.model.buffers[1].long_lived);
  EXPECT_EQ(m.model.buffers[1].alloc_launch, 1u);
  EXPECT_EQ(m.model.buffers[1].free_launch, 3u);
  EXPECT_EQ(m.model.buffers[2].alloc_launch, 5u);
  EXPECT_EQ(m.model.buffers[2].free_launch, 7u);
  EXPECT_EQ(m.model.launches[3].uses, (std::vector<policy::buffer_id>{1}));
  EXPECT_EQ(m.model.launches[7].uses, (std::vector<policy::buffer_id>{2}));
  EXPECT_TRUE(m.model.launches[2].uses.empty());
}

TEST(PageLifetimes, WithoutThePeriodBeforeNothingDiesAcrossTheBoundary) {
  const std::vector<std::vector<page_use>> current = {{{B, 1}}, {{B, 2}}, {{B, 3}}};
  const page_model m = model_page_lifetimes({}, current, kPage);
  EXPECT_EQ(policy::validate_model(m.model), "");
  // First and last stretch one long-lived lifetime; the middle one its own.
  ASSERT_EQ(m.model.buffers.size(), 2u);
  EXPECT_TRUE(m.model.buffers[0].long_lived);
  EXPECT_FALSE(m.model.buffers[1].long_lived);
  EXPECT_EQ(m.model.launches[0].uses, m.model.launches[2].uses);
  EXPECT_EQ(m.model.launches[1].uses, (std::vector<policy::buffer_id>{1}));
}

}  // namespace
}  // namespace oversub::interpose
