// The swap engine's fit of what its remaps cost (residency/page_runs.h): a part per
// run, a part per page, and whether the calls waited for the device.
#include <gtest/gtest.h>

#include "residency/page_runs.h"

namespace oversub::residency {
namespace {

// A part per run and a part per page, told apart once two lengths
// were timed; with one length only, all of it counts per run.
TEST(RunCostFit, SeparatesThePartPerRunFromThePartPerPage) {
  run_cost_fit f;
  EXPECT_EQ(f.per_run_ns(), 0);
  f.add(1, 190'000);
  f.add(1, 190'000);
  EXPECT_NEAR(f.per_run_ns(), 190'000, 1);
  f.add(16, 190'000 + 15 * 2'000);
  EXPECT_NEAR(f.per_run_ns(), 188'000, 1);
  run_cost_fit per_page;  // the H100-PCIe model's figures: all per page
  for (double pages : {1.0, 2.0, 4.0}) per_page.add(pages, pages * 62'000);
  EXPECT_NEAR(per_page.per_run_ns(), 0, 1);
  EXPECT_FALSE(f.calls_wait());  // every call at its cost
  EXPECT_FALSE(per_page.calls_wait());
}

// See Note [Timing calls that may wait] in residency/page_runs.cc: calls that waited
// for the device, more often and longer in longer runs (as when the host is far
// ahead), leave the fit to the calls' own costs: a least-squares fit over every run
// would put the waits per page and nothing per run. Where every run's fit puts more
// per run (waits once a run, whatever its length), that fit is kept.
TEST(RunCostFit, CallsThatWaitedDoNotCount) {
  run_cost_fit f;
  for (int i = 0; i < 32; ++i) {
    const double wait = i % 2 == 0 ? 3'000'000 : 0;  // every other run, its unmap waited
    f.add(1, 190'000 + (i % 8 == 0 ? 50'000 : 0));
    f.add(16, 190'000 + 15 * 2'000 + wait);
    f.add_maps(1, 11'000 + (i % 3 == 0 ? 400'000 : 0));  // its first map waited
    f.add_maps(16, 16 * 11'000 + wait);
  }
  EXPECT_NEAR(f.per_run_ns(), 188'000, 1);
  EXPECT_NEAR(f.per_page_ns(), 2'000 + 11'000, 1);
  // The waits are most of the time (Note [Copies out on the mover] in
  // residency/swap_copies_out.cc).
  EXPECT_TRUE(f.calls_wait());
  // The totals still hold every nanosecond, waits included (the stats' host time).
  EXPECT_EQ(f.n, 64);
  EXPECT_GT(f.sy, 32 * (190'000 + 220'000) + 16 * 3'000'000 - 1);
  EXPECT_EQ(f.maps, 32 * 17);
  // Merged into the engine's fit, the same.
  run_cost_fit engine;
  engine.merge(f);
  EXPECT_NEAR(engine.per_run_ns(), 188'000, 1);
  EXPECT_NEAR(engine.per_page_ns(), 13'000, 1);

  // Short runs that waited long half the time, long ones a little every time: the
  // quartiles give 168 us a run, every run's fit all of its mean wait, and it is kept.
  run_cost_fit per_run;
  for (int i = 0; i < 32; ++i) {
    per_run.add(1, 190'000 + (i % 2 == 0 ? 2'000'000 : 0));
    per_run.add(16, 520'000);
    per_run.add_maps(16, 16 * 11'000);
  }
  EXPECT_GT(per_run.per_run_ns(), 1'000'000);
  EXPECT_NEAR(per_run.per_page_ns(), 11'000, 1);
}

// See Note [Timing calls that may wait] in residency/page_runs.cc: one length whose
// every run waited, and two long lengths timed only a few times, all of it waits (the
// quartiles the engine held at Llama 3.2 1B at 1/8, 1.5x, with the VMM waits). A line
// through the quartiles by least squares put 31 us per page and 3 per run, every run's
// fit 89 us and 8 us: batches of a few pages, and one page once the runs were short.
// The median of the slopes and of what each length leaves per run keeps the calls'
// own costs.
TEST(RunCostFit, AFewLengthsThatAllWaitedDoNotTiltTheFit) {
  run_cost_fit f;
  for (int i = 0; i < 32; ++i) {
    for (int pages = 1; pages <= 8; ++pages) {
      f.add(pages, pages == 4 ? 204'000 : 100'000 + pages * 1'250);
    }
  }
  for (int i = 0; i < 2; ++i) f.add(11, 570'000);
  for (int i = 0; i < 4; ++i) f.add(12, 357'700);
  EXPECT_NEAR(f.per_run_ns(), 100'000, 1'000);
  EXPECT_NEAR(f.per_page_ns(), 1'250, 500);
}

// See Note [What a batch costs] in residency/page_runs.cc: batches timed whole give a
// part per batch (the first calls of each family), per run and per page, the H200's
// measured model's figures here; unknown while every batch is a lone run (the moves
// before the first plan) or the batches cannot tell the parts apart.
TEST(RunCostFit, ABatchsFirstCallsApartFromItsRuns) {
  const auto cost = [](double runs, double pages) {
    return 142'000 + 54'000 * runs + 3'400 * pages;
  };
  run_cost_fit f;
  for (int i = 0; i < 300; ++i) f.add_batch(1, 1, cost(1, 1));
  EXPECT_FALSE(f.batch().known);  // lone one-page runs only
  run_cost_fit in_step;           // the runs and the pages in step: still one line
  for (int i = 0; i < 64; ++i) {
    const double runs = 1 + i % 4;
    in_step.add_batch(runs, 2 * runs, cost(runs, 2 * runs));
  }
  EXPECT_FALSE(in_step.batch().known);
  run_cost_fit grouped;
  for (int i = 0; i < 64; ++i) {
    const double runs = 1 + i % 4, pages = runs + i % 7;
    grouped.add_batch(runs, pages, cost(runs, pages));
  }
  f.merge(grouped);  // the engine merges each remap's timings
  const run_cost_fit::batch_parts b = f.batch();
  ASSERT_TRUE(b.known);
  EXPECT_NEAR(b.batch_ns, 142'000, 1);
  EXPECT_NEAR(b.run_ns, 54'000, 1);
  EXPECT_NEAR(b.page_ns, 3'400, 1);
  // The lone runs' fit stays what it was.
  EXPECT_EQ(f.per_run_ns(), 0);
}

}  // namespace
}  // namespace oversub::residency
