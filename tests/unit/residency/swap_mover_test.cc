// The swap engine's mover on simgpu (SIMGPU_RACE=abort): runs fetched as one, a
// launch's missing pages and the copies out handed to the mover's threads, and where
// the start probe's answer outweighs the remaps' timings.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "residency/swap_engine.h"

#include "residency_fixture.h"

namespace oversub::residency {
namespace {

// The Residency fixture, for this file's tests.
class Mover : public Residency {};

// See Note [Remapping runs] (residency/swap_engine.h): the schedule asks for a run's
// pages over several launches and not in address order. The mover fetches the pages
// among the queue's next ones that extend its first page's run either way, as one run:
// four pages asked for as 1, 0, 3, 2 come in with one unmap, four maps and one access
// grant (6 mapping calls; taking only the queue's consecutive pages, four runs and 12).
// Every byte is kept.
TEST_F(Mover, TheMoverFetchesARunAskedForOutOfOrderAsOneRun) {
  swap_config c = config(4, 16);
  c.mover_thread = true;
  swap_engine e(c);
  eight_filled_pages(e, 0x60);
  for (std::size_t i = 4; i < 8; ++i) e.destroy_page(va(i));  // four pages of room
  const swap_stats before = e.stats();
  const byte_range asked[] = {{va(1), kPage}, {va(0), kPage}, {va(3), kPage}, {va(2), kPage}};
  std::vector<byte_range> later;
  ASSERT_TRUE(e.prefetch_now(asked, later));
  // The mover's, before any use could fetch a page on the launching thread.
  for (int k = 0; k < 2000 && e.stats().mover_fetches < before.mover_fetches + 4; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const swap_stats after = e.stats();
  ASSERT_EQ(after.mover_fetches, before.mover_fetches + 4);
  // Four cuMemCreate (the destroyed pages' memory went back), then the run's six.
  EXPECT_EQ(after.mapping_calls - before.mapping_calls, 4u + 6u);
  for (std::size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(use(e, i, false));
    expect_bytes(i, static_cast<unsigned char>(0x60 + i));
  }
}

// See Note [A launch hands its fetch to the mover] (residency/swap_mover.cc): with the
// mover on, a launch's missing pages are fetched by the mover, not by the launching
// thread (every fetch is the mover's, none taken back), and every byte is kept, pages
// used one by one and two at a time on a device of four.
TEST_F(Mover, ALaunchHandsItsMissingPagesToTheMover) {
  swap_config c = config(4, 16);
  c.mover_thread = true;
  swap_engine e(c);
  eight_filled_pages(e, 0x70);
  const swap_stats before = e.stats();
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < 8; ++i) {
      ASSERT_TRUE(use(e, i, false));
      expect_bytes(i, static_cast<unsigned char>(0x70 + i));
    }
    for (std::size_t i = 0; i < 8; i += 2) {
      const byte_range two{va(i), 2 * kPage};
      ASSERT_TRUE(e.prepare({&two, 1}, cu(), false));
      expect_bytes(i, static_cast<unsigned char>(0x70 + i));
      expect_bytes(i + 1, static_cast<unsigned char>(0x71 + i));
    }
  }
  const swap_stats after = e.stats();
  EXPECT_GE(after.fetches - before.fetches, 16u);
  EXPECT_EQ(after.fetches - before.fetches, after.mover_fetches - before.mover_fetches);
  EXPECT_EQ(after.mover_handbacks, 0u);
  EXPECT_GE(after.mover_waits - before.mover_waits, 16u);
}

// See Note [The mover fetches pages reached on the host] (residency/swap_mover.cc): a
// launch over the room (as prepare_oversized asks: every page optional, resident ones
// first, and reachable) reaches pages 0-3 in host memory, and its stream's work reads
// them there. With room made (pages 4-7 gone), the launches that need pages 0-3 get
// them from the mover, none taken back, after that work (SIMGPU_RACE=abort judges),
// every byte kept. (The mover took no page with users: each was taken back.)
TEST_F(Mover, PagesALaunchReachedOnTheHostAreTheMoversToFetch) {
  swap_config c = config(4, 16);
  c.mover_thread = true;
  swap_engine e(c);
  eight_filled_pages(e, 0x30);
  std::vector<byte_range> over;
  for (std::size_t i = 0; i < 8; ++i) {
    over.push_back(byte_range{va(i), kPage, true, false, true});
    over.push_back(byte_range{va(i), kPage, false, true});
  }
  ASSERT_TRUE(e.prepare(over, cu(), false));
  std::vector<unsigned char> read(4 * kPage);
  for (std::size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(cudaMemcpyAsync(read.data() + i * kPage, ptr(i), kPage, cudaMemcpyDeviceToHost, s_),
              cudaSuccess);
  }
  for (std::size_t i = 4; i < 8; ++i) e.destroy_page(va(i));  // four pages of room
  const swap_stats before = e.stats();
  for (std::size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(use(e, i, false));
    expect_bytes(i, static_cast<unsigned char>(0x30 + i));
  }
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(read[i * kPage + 7], 0x30 + i) << "page " << i;
  const swap_stats after = e.stats();
  EXPECT_EQ(after.fetches - before.fetches, 4u);
  EXPECT_EQ(after.mover_fetches - before.mover_fetches, 4u);
  EXPECT_EQ(after.mover_handbacks, before.mover_handbacks);
}

// See Note [Copies out on the mover] (residency/swap_copies_out.cc): with the mover on, the
// launching thread begins each eviction and the mover enqueues its copy; every byte is
// kept (and, under SIMGPU_RACE=abort, every copy is ordered after the page's users).
TEST_F(Mover, TheMoverEnqueuesTheCopiesOut) {
  swap_config c = config(4, 16);
  c.mover_thread = true;
  swap_engine e(c);
  eight_filled_pages(e, 0x50);
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < 8; ++i) {
      ASSERT_TRUE(use(e, i, false));
      expect_bytes(i, static_cast<unsigned char>(0x50 + i));
    }
  }
  const swap_stats s = e.stats();
  EXPECT_GE(s.evictions, 12u);
  EXPECT_GT(s.bytes_to_host, 0u);
  // Pages read only and evicted again are clean (no copy); each copy out is one page.
  EXPECT_EQ(s.mover_copies_out * kPage, s.bytes_to_host);
}

// A clock whose every fifth read jumps 2 ms (the others 10 us): remaps timed on it
// spread as calls that wait for the device do. Read by the mover's thread too.
std::atomic<std::uint64_t> g_lumpy_reads{0};
std::atomic<std::uint64_t> g_lumpy_now{1000};
std::uint64_t lumpy_clock() noexcept {
  const std::uint64_t k = g_lumpy_reads.fetch_add(1, std::memory_order_relaxed);
  return g_lumpy_now.fetch_add(k % 5 == 4 ? 2'000'000 : 10'000, std::memory_order_relaxed);
}

// See Note [The probe's answer before the timings] (residency/swap_engine.h): remap
// timings that look like waits put the copies out back on the launching thread only
// where the start probe gave no answer; where it found the calls do not wait, the
// mover enqueues every copy out. Every byte is kept either way.
TEST_F(Mover, TimingsThatLookLikeWaitsDoNotOverruleTheProbe) {
  for (const bool probed : {false, true}) {
    swap_config c = config(4, 16);
    c.mover_thread = true;
    c.calls_wait = false;
    c.calls_wait_known = probed;
    swap_engine e(c);
    e.set_copy_clock(&lumpy_clock, 1e9, 1e9, /*rates_measured=*/false);
    eight_filled_pages(e, 0x20);
    for (int round = 0; round < 6; ++round) {
      for (std::size_t i = 0; i < 8; ++i) {
        ASSERT_TRUE(use(e, i, true));
        expect_bytes(i, static_cast<unsigned char>(0x20 + i));
      }
    }
    const swap_stats s = e.stats();
    ASSERT_GE(s.remap_runs, 8u);
    ASSERT_GT(s.bytes_to_host, 0u);
    if (probed) {
      EXPECT_EQ(s.mover_copies_out * kPage, s.bytes_to_host);
    } else {
      EXPECT_LT(s.mover_copies_out * kPage, s.bytes_to_host);
    }
  }
}

}  // namespace
}  // namespace oversub::residency
