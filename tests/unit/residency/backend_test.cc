// What the two residency backends share through residency_backend (residency/backend.h):
// the capacity less the memory of other libraries (Note [Memory that is not ours] in
// residency/backend.h), and the exit report's line, written from each backend's
// figures with the JSON members the report has always had and their text twins.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../common/report_twins.h"
#include "common/stats.h"
#include "residency/backend.h"
#include "residency/swap_engine.h"
#include "residency/um_engine.h"

namespace oversub::residency {
namespace {

using namespace oversub::pool;

constexpr std::uint64_t kPage = std::uint64_t{2} << 20;

std::unique_ptr<residency_backend> swap_backend(std::uint64_t capacity) {
  swap_config c;
  c.capacity_bytes = capacity;
  c.host_budget_bytes = 16 * kPage;
  return std::make_unique<swap_engine>(c);
}

std::unique_ptr<residency_backend> um_backend(std::uint64_t capacity) {
  return std::make_unique<um_engine>(0, capacity);
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

// The backend's line of the pool's section, rendered as the exit report renders it.
struct rendered {
  std::string json;
  std::string text;
};

rendered report_of(const residency_backend& b, int device) {
  std::vector<stats::line> lines;
  stats::section out(lines, "pool");
  EXPECT_TRUE(b.try_report(device, out));
  return {stats::render_json(lines), stats::render_text(lines)};
}

TEST(Backend, TheSwapSectionOfTheReport) {
  const rendered r = report_of(*swap_backend(4 * kPage), 0);
  EXPECT_EQ(r.json,
            R"({"oversub_stats":1,"pool":{"device0":{)"
            R"("swap":{"capacity_bytes":8388608,"pages":0,"resident_bytes":0,)"
            R"("peak_resident_bytes":0,"host_bytes":0,"peak_host_bytes":0,"evictions":0,)"
            R"("clean_evictions":0,"dead_evictions":0,"fetches":0,"dead_fetches":0,)"
            R"("bytes_to_host":0,"bytes_to_device":0,"waits":0,"failures":0,"copies":0,)"
            R"("mapping_calls":0,"spare_reuses":0,"spare_bytes":0,"lends":0,"born_on_host":0,)"
            R"("mover_batches":0,"mover_pages":0,"mover_waits":0,"mover_fetches":0,)"
            R"("mover_copies_out":0,)"
            R"("launch_run_pages":0,"mover_handbacks":0,"mover_remap_ns":0,"launch_remap_ns":0,"remap_runs":0,"remap_pages":0}}}})"
            "\n");
  EXPECT_EQ(r.text,
            "oversub:   swap device 0: capacity 8.00 MiB  pages 0  resident 0 B  peak resident 0 B  "
            "host 0 B  peak host 0 B  evictions 0  clean evictions 0  dead evictions 0  "
            "fetches 0  dead fetches 0  bytes to host 0 B  bytes to device 0 B  waits 0  "
            "failures 0  copies 0  mapping calls 0  spare reuses 0  spare 0 B  lends 0  "
            "born on host 0  mover batches 0  mover pages 0  mover waits 0  mover fetches 0  "
            "mover copies out 0  "
            "launch run pages 0  mover handbacks 0  mover remap 0 ns  launch remap 0 ns  remap runs 0  remap pages 0\n");
  EXPECT_EQ(stats::testing::twin_problems(r.text, r.json), std::vector<std::string>{});
}

TEST(Backend, TheUmSectionOfTheReport) {
  const rendered r = report_of(*um_backend(4 * kPage), 1);
  EXPECT_EQ(r.json,
            R"({"oversub_stats":1,"pool":{"device1":{)"
            R"("um":{"capacity_bytes":8388608,"buffers":0,"resident_bytes":0,)"
            R"("peak_resident_bytes":0,"prefetches_in":0,"prefetches_out":0,"bytes_in":0,)"
            R"("bytes_out":0,"discards":0,"discarded_bytes":0,"concurrent_access":true,)"
            R"("reuse_waits":0,"mover_prefetches":0,"whole_stream_waits":0}}}})"
            "\n");
  EXPECT_EQ(r.text,
            "oversub:   um device 1: capacity 8.00 MiB  buffers 0  resident 0 B  "
            "peak resident 0 B  prefetches in 0  prefetches out 0  bytes in 0 B  bytes out 0 B  "
            "discards 0  discarded 0 B  "
            "concurrent access yes  reuse waits 0  mover prefetches 0  whole stream waits 0\n");
  EXPECT_EQ(stats::testing::twin_problems(r.text, r.json), std::vector<std::string>{});
}

}  // namespace
}  // namespace oversub::residency
