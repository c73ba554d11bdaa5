// What the two residency backends share through residency_backend (residency/backend.h):
// the capacity less the memory of other libraries (Note [Memory that is not ours] in
// residency/backend.h), and the exit report's section, written from each backend's
// figures with the field names and lines the report has always had.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "residency/backend.h"
#include "residency/swap_engine.h"
#include "residency/um_engine.h"

namespace oversub::pool {
namespace {

constexpr std::uint64_t kPage = std::uint64_t{2} << 20;

std::unique_ptr<residency_backend> swap_backend(std::uint64_t capacity) {
  residency_config c;
  c.capacity_bytes = capacity;
  c.host_budget_bytes = 16 * kPage;
  return std::make_unique<residency_engine>(c);
}

std::unique_ptr<residency_backend> um_backend(std::uint64_t capacity) {
  return std::make_unique<managed_residency>(0, capacity);
}

void expect_foreign_memory_shrinks_the_capacity(residency_backend& b) {
  EXPECT_EQ(b.capacity_bytes(), 4 * kPage);
  EXPECT_TRUE(b.reserve_foreign(static_cast<std::int64_t>(kPage)));
  EXPECT_EQ(b.capacity_bytes(), 3 * kPage);
  // What would leave no room at all is refused, and nothing is counted.
  EXPECT_FALSE(b.reserve_foreign(static_cast<std::int64_t>(3 * kPage)));
  EXPECT_EQ(b.capacity_bytes(), 3 * kPage);
  EXPECT_TRUE(b.reserve_foreign(-static_cast<std::int64_t>(kPage)));
  EXPECT_EQ(b.capacity_bytes(), 4 * kPage);
}

TEST(Backend, ForeignMemoryShrinksTheSwapEnginesCapacity) {
  expect_foreign_memory_shrinks_the_capacity(*swap_backend(4 * kPage));
}

TEST(Backend, ForeignMemoryShrinksTheManagedBackendsCapacity) {
  expect_foreign_memory_shrinks_the_capacity(*um_backend(4 * kPage));
}

TEST(Backend, OnlyTheSwapEngineBacksTheArena) {
  EXPECT_NE(swap_backend(4 * kPage)->pages(), nullptr);
  EXPECT_EQ(um_backend(4 * kPage)->pages(), nullptr);
}

TEST(Backend, TheSwapSectionOfTheReport) {
  std::string json;
  std::string text;
  ASSERT_TRUE(swap_backend(4 * kPage)->try_report(0, json, text));
  EXPECT_EQ(json,
            R"(,"swap":{"capacity_bytes":8388608,"pages":0,"resident_bytes":0,)"
            R"("peak_resident_bytes":0,"host_bytes":0,"peak_host_bytes":0,"evictions":0,)"
            R"("clean_evictions":0,"dead_evictions":0,"fetches":0,"dead_fetches":0,)"
            R"("bytes_to_host":0,"bytes_to_device":0,"waits":0,"failures":0,"copies":0,)"
            R"("mapping_calls":0,"spare_reuses":0,"spare_bytes":0,"lends":0,"born_on_host":0})");
  EXPECT_EQ(text.rfind("oversub:   swap device 0: capacity ", 0), 0u) << text;
  EXPECT_NE(text.find("  born on host 0\n"), std::string::npos) << text;
}

TEST(Backend, TheUmSectionOfTheReport) {
  std::string json;
  std::string text;
  ASSERT_TRUE(um_backend(4 * kPage)->try_report(1, json, text));
  EXPECT_EQ(json,
            R"(,"um":{"capacity_bytes":8388608,"buffers":0,"resident_bytes":0,)"
            R"("peak_resident_bytes":0,"prefetches_in":0,"prefetches_out":0,"bytes_in":0,)"
            R"("bytes_out":0,"concurrent_access":true})");
  EXPECT_EQ(text.rfind("oversub:   um device 1: capacity ", 0), 0u) << text;
}

}  // namespace
}  // namespace oversub::pool
