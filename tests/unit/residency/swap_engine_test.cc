// The residency engine on simgpu (run with SIMGPU_RACE=abort: a copy or remap not
// ordered after the work that used a page aborts the test): pages evicted to host
// handles and fetched back keep their bytes, the device never holds more than the
// capacity, an access we did not prepare reaches the host mapping, clean pages move
// without a copy, and the limits are clean errors.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <chrono>
#include <thread>
#include <vector>

#include "pool/driver_api.h"
#include "pool/vmm_arena.h"
#include "residency/swap_engine.h"
#include "simgpu/kernel.h"

#include "residency_fixture.h"

// Kernels for Note [Moves after all work] in residency/swap_engine.h; a long one, and one
// that reads an int through a pointer it loads from device memory (its footprint names
// only the table).
__global__ void long_kernel(int* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 7;
}
SIMGPU_KERNEL_FOOTPRINT(long_kernel, [](simgpu::footprint& fp, int* out) {
  fp.write(out, 1);
  fp.flops(1e12);  // about 20 ms on the H100-PCIe model
});
__global__ void chase_read_kernel(const int* const* table, int* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = *table[0];
}
SIMGPU_KERNEL_FOOTPRINT(chase_read_kernel, [](simgpu::footprint& fp, const int* const* table,
                                              int* out) {
  fp.read(table, 1);
  fp.write(out, 1);
});

namespace oversub::residency {
namespace {

using namespace oversub::pool;

// Residency and config(): residency_fixture.h.

TEST_F(Residency, PagesSwappedOutAndBackKeepTheirBytes) {
  swap_engine e(config(4, 16));
  for (std::size_t i = 0; i < kPages; ++i) {
    ASSERT_TRUE(e.create_page(va(i))) << i;
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), static_cast<int>(i + 1), kPage, s_), cudaSuccess);
  }
  for (std::size_t round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < kPages; ++i) {
      ASSERT_TRUE(use(e, i, false));
      expect_bytes(i, static_cast<unsigned char>(i + 1));
    }
  }
  const swap_stats st = e.stats();
  EXPECT_LE(st.peak_resident_bytes, 4 * kPage);
  EXPECT_GE(st.evictions, kPages - 4);
  EXPECT_GE(st.fetches, kPages);
  EXPECT_EQ(st.pages, kPages);
  EXPECT_EQ(st.failures, 0u);
}

// See Note [Lending an evicting page's memory] (residency/swap_engine.h): with lending on, a fetch
// that finds no room while evictions are under way takes an evicting page's device
// memory and orders its copy in after that page's copy out on the GPU, instead of
// waiting on the host. Every page keeps its bytes through two rounds of 16 pages in 4
// pages of room (the race detector aborts on a copy in not ordered after the copy out
// it overwrites), the device never holds more than the capacity, and the pages lent
// from are reached through their host copies when used again.
TEST_F(Residency, LendingAnEvictingPagesMemoryKeepsEveryByte) {
  swap_engine e(config(4, 16));
  e.set_lending(true);
  for (std::size_t i = 0; i < kPages; ++i) {
    ASSERT_TRUE(e.create_page(va(i))) << i;
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), static_cast<int>(0x40 + i), kPage, s_), cudaSuccess);
  }
  for (std::size_t round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < kPages; ++i) {
      const byte_range next{va((i + 1) % kPages), kPage};
      ASSERT_TRUE(e.evict({&next, 1}));  // an eviction under way when page i is wanted
      ASSERT_TRUE(use(e, i, false));
      expect_bytes(i, static_cast<unsigned char>(0x40 + i));
    }
  }
  const swap_stats st = e.stats();
  EXPECT_GT(st.lends, 0u);
  EXPECT_LE(st.peak_resident_bytes, 4 * kPage);
  EXPECT_EQ(st.failures, 0u);
  // Off again: no more lending, and the pages still hold their bytes.
  e.set_lending(false);
  for (std::size_t i = 0; i < kPages; ++i) {
    ASSERT_TRUE(use(e, i, false));
    expect_bytes(i, static_cast<unsigned char>(0x40 + i));
  }
  EXPECT_EQ(e.stats().lends, st.lends);
}

TEST_F(Residency, DeviceMemoryHeldStaysUnderTheCapacity) {
  std::size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  swap_engine e(config(3, 16));
  for (std::size_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(e.create_page(va(i)));
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), 9, kPage, s_), cudaSuccess);
    std::size_t free_now = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_now, &total), cudaSuccess);
    EXPECT_LE(free0 - free_now, 3 * kPage) << "after page " << i;
  }
}

TEST_F(Residency, AnAccessWeDidNotPrepareReachesTheHostCopy) {
  swap_engine e(config(2, 16));
  for (std::size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(e.create_page(va(i)));
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), 0x40 + static_cast<int>(i), kPage, s_), cudaSuccess);
  }
  // Pages 0 and 1 were evicted to make room: their addresses map host memory now.
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  expect_bytes(0, 0x40);
  ASSERT_EQ(cudaMemsetAsync(ptr(1), 0x77, kPage, s_), cudaSuccess);  // unprepared write
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  ASSERT_TRUE(use(e, 1, false));  // fetched: the write made on the host comes along
  expect_bytes(1, 0x77);
}

TEST_F(Residency, ACleanPageIsEvictedWithoutACopy) {
  swap_engine e(config(1, 16));
  ASSERT_TRUE(e.create_page(va(0)));
  ASSERT_TRUE(use(e, 0));
  ASSERT_EQ(cudaMemsetAsync(ptr(0), 3, kPage, s_), cudaSuccess);
  ASSERT_TRUE(e.create_page(va(1)));  // evicts page 0 with a copy
  ASSERT_TRUE(use(e, 0, false));      // fetched back, only read
  const std::uint64_t copied = e.stats().bytes_to_host;
  ASSERT_TRUE(use(e, 1, false));      // evicts page 0 again: nothing wrote since
  swap_stats st = e.stats();
  EXPECT_EQ(st.bytes_to_host, copied);
  EXPECT_EQ(st.clean_evictions, 1u);
  expect_bytes(0, 3);
  // Any work that may write (a launch anywhere) makes every page dirty again.
  ASSERT_TRUE(use(e, 0, false));      // page 1 out, clean too
  const byte_range elsewhere{0x1000, 256};  // not a page of the engine
  ASSERT_TRUE(e.prepare({&elsewhere, 1}, cu(), true));
  ASSERT_TRUE(use(e, 1, false));      // page 0 out: copied
  st = e.stats();
  EXPECT_EQ(st.clean_evictions, 2u);
  EXPECT_EQ(st.bytes_to_host, copied + kPage);
  expect_bytes(0, 3);
}

// See Note [Dead pages] in residency/swap_engine.h: a page no live block overlaps leaves
// without a copy and comes back without one; a block handed out on it is fresh only until
// write-capable work is prepared; a page another live block shares keeps its bytes.
TEST_F(Residency, DeadPagesMoveWithoutCopies) {
  swap_engine e(config(1, 16));
  ASSERT_TRUE(e.create_page(va(0)));
  ASSERT_TRUE(e.create_page(va(1)));  // page 0 out: never vacated, so copied
  swap_stats st = e.stats();
  EXPECT_EQ(st.bytes_to_host, kPage);
  EXPECT_EQ(st.dead_evictions, 0u);
  // Page 1 held a block that was freed: dead from now on (it moves for nothing).
  e.occupy(va(1), kPage);
  e.vacate(va(1));
  // Two blocks on page 0.
  e.occupy(va(0), kPage / 2);
  e.occupy(va(0) + kPage / 2, kPage / 2);
  ASSERT_TRUE(use(e, 0));  // page 1 out: dead, no copy
  ASSERT_EQ(cudaMemsetAsync(ptr(0), 7, kPage, s_), cudaSuccess);
  st = e.stats();
  EXPECT_EQ(st.bytes_to_host, kPage);
  EXPECT_EQ(st.dead_evictions, 1u);
  // See Note [Dead gaps] in core/dead_gaps.cc: the learner hears of page 1's vacancy,
  // once.
  std::vector<swap_engine::vacancy> vacated;
  const auto pages = [&] {
    std::vector<std::pair<std::uintptr_t, bool>> out;
    for (const auto& v : vacated) out.emplace_back(v.page, v.vacated);
    vacated.clear();
    return out;
  };
  e.take_vacancies(vacated);
  EXPECT_EQ(pages(), (std::vector<std::pair<std::uintptr_t, bool>>{{va(1), true}}));
  // One of them freed: the page still holds the other's bytes.
  e.vacate(va(0));
  e.take_vacancies(vacated);
  EXPECT_TRUE(pages().empty());
  ASSERT_TRUE(use(e, 1));  // page 0 out with a copy; page 1 back without one
  st = e.stats();
  EXPECT_EQ(st.bytes_to_host, 2 * kPage);
  EXPECT_EQ(st.dead_evictions, 1u);
  EXPECT_EQ(st.dead_fetches, 1u);
  ASSERT_TRUE(use(e, 0, false));  // back with a copy
  expect_bytes(0, 7);
  const std::uint64_t in = e.stats().bytes_to_device;
  // The last block freed: page 0's content is dead. Out with no copy.
  e.vacate(va(0) + kPage / 2);
  e.vacate(va(0) + kPage / 2);  // a second free of the same block is ignored
  e.take_vacancies(vacated);
  EXPECT_EQ(pages(), (std::vector<std::pair<std::uintptr_t, bool>>{{va(0), true}}));
  ASSERT_TRUE(use(e, 1));
  st = e.stats();
  EXPECT_EQ(st.bytes_to_host, 2 * kPage);
  EXPECT_EQ(st.dead_evictions, 3u);
  // A fresh block on it: undefined until written, so its fetch copies nothing.
  e.occupy(va(0), kPage);
  e.take_vacancies(vacated);
  EXPECT_EQ(pages(), (std::vector<std::pair<std::uintptr_t, bool>>{{va(0), false}}));
  ASSERT_TRUE(use(e, 0));
  st = e.stats();
  EXPECT_EQ(st.bytes_to_device, in);
  EXPECT_EQ(st.dead_fetches, 3u);
  // Written by that work: from here on it is live and moves with its bytes.
  ASSERT_EQ(cudaMemsetAsync(ptr(0), 9, kPage, s_), cudaSuccess);
  ASSERT_TRUE(use(e, 1));
  ASSERT_TRUE(use(e, 0, false));
  expect_bytes(0, 9);
  st = e.stats();
  EXPECT_EQ(st.bytes_to_host, 3 * kPage);
  EXPECT_EQ(st.bytes_to_device, in + kPage);
  // A fresh block after other work that may have written (any write-capable
  // prepare) is live: copied.
  e.vacate(va(0));
  ASSERT_TRUE(use(e, 1));  // page 0 out, dead
  e.occupy(va(0), kPage);
  const byte_range elsewhere{0x1000, 256};
  ASSERT_TRUE(e.prepare({&elsewhere, 1}, cu(), true));
  const std::uint64_t before = e.stats().bytes_to_device;
  ASSERT_TRUE(use(e, 0));
  EXPECT_EQ(e.stats().bytes_to_device, before + kPage);
}

TEST_F(Residency, ALaunchLargerThanTheCapacityIsRefusedAndMovesNothing) {
  swap_engine e(config(2, 16));
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(e.create_page(va(i)));
  const byte_range all{va(0), 3 * kPage};
  const std::uint64_t fetches = e.stats().fetches;
  const prepare_result r = e.prepare({&all, 1}, cu());
  EXPECT_EQ(r.code, residency_errc::too_large);
  EXPECT_EQ(r.needed_bytes, 3 * kPage);
  EXPECT_EQ(e.stats().fetches, fetches);
}

// See Note [Launches over the room] in policy/iteration_model.h: a launch over the
// room asks for its ranges as optional and reachable; with resident_first what is
// already resident is what it keeps, and nothing moves. Without, the first pages in
// address order: page 0 comes in and a resident page goes out.
TEST_F(Residency, ALaunchOverTheRoomKeepsWhatIsResident) {
  swap_engine e(config(2, 16));
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(e.create_page(va(i)));
  ASSERT_TRUE(use(e, 1));
  ASSERT_TRUE(use(e, 2));
  for (const bool first : {true, false}) {
    std::vector<byte_range> over;
    for (std::size_t i = 0; i < 3; ++i) {
      over.push_back(byte_range{va(i), kPage, true, false, first});
      over.push_back(byte_range{va(i), kPage, false, true});
    }
    const std::uint64_t fetches = e.stats().fetches;
    ASSERT_TRUE(e.prepare(over, cu(), true));
    EXPECT_EQ(e.stats().fetches, fetches + (first ? 0 : 1)) << "resident_first " << first;
  }
}

TEST_F(Residency, TheHostBudgetIsACleanRefusal) {
  swap_engine e(config(1, 1));
  ASSERT_TRUE(e.create_page(va(0)));
  ASSERT_TRUE(e.create_page(va(1)));   // page 0 to the host: the whole budget
  EXPECT_FALSE(e.create_page(va(2)));  // page 1 would need a second host page
  EXPECT_EQ(e.stats().host_bytes, kPage);
}

TEST_F(Residency, ScheduledEvictAndPrefetchMoveAhead) {
  swap_engine e(config(4, 16));
  for (std::size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(e.create_page(va(i)));
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), 0x10 + static_cast<int>(i), kPage, s_), cudaSuccess);
  }
  const byte_range two{va(0), 2 * kPage};
  ASSERT_TRUE(e.evict({&two, 1}));
  ASSERT_TRUE(e.create_page(va(4)));   // room from the eviction under way
  ASSERT_TRUE(e.prefetch({&two, 1}));  // makes room by evicting pages 2-4 as needed
  ASSERT_TRUE(use(e, 0, false));
  ASSERT_TRUE(use(e, 1, false));
  expect_bytes(0, 0x10);
  expect_bytes(1, 0x11);
  EXPECT_LE(e.stats().peak_resident_bytes, 4 * kPage);
}

void Residency::two_groups_of_four(swap_engine& e, int fill) {
  for (std::size_t first : {0, 4}) {
    for (std::size_t i = first; i < first + 4; ++i) ASSERT_TRUE(e.create_page(va(i)));
    const byte_range r{va(first), 4 * kPage};
    ASSERT_TRUE(e.prepare({&r, 1}, cu(), true));
    ASSERT_EQ(cudaMemsetAsync(ptr(first), fill + static_cast<int>(first), r.bytes, s_),
              cudaSuccess);
  }
}

// A clock on which every reading is 100 us after the last: each run's own calls (an
// unmap and an access grant) take 200 us by it, whatever the run's length.
std::uint64_t g_tick_ns = 0;
std::uint64_t ticking_clock() noexcept { return g_tick_ns += 100'000; }

// See Note [Remapping runs] (residency/swap_engine.h). Two groups of four adjacent pages
// take turns in four pages of room, on a clock by which each run's own calls (an unmap
// and an access grant) take 200 us against 2 us of link per page. A use of one group
// remaps both groups as runs: one unmap, four maps and one access grant each way (12
// mapping calls, where page by page it was 18), with the mover finishing the
// evictions or without it. Every byte is kept.
void Residency::remapped_as_runs(swap_engine& e) {
  e.set_copy_clock(&ticking_clock, 1e12, 1e12, true);
  const auto range = [&](std::size_t first) { return byte_range{va(first), 4 * kPage}; };
  ASSERT_NO_FATAL_FAILURE(two_groups_of_four(e, 0x40));
  for (std::size_t round = 0; round < 8; ++round) {
    const std::size_t first = round % 2 == 0 ? 0 : 4;
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    const std::uint64_t calls = e.stats().mapping_calls;
    const std::uint64_t fetches = e.stats().fetches;
    const byte_range r = range(first);
    ASSERT_TRUE(e.prepare({&r, 1}, cu(), false));
    ASSERT_EQ(e.stats().fetches, fetches + 4);
    // Once the engine has timed its runs (eight).
    if (round >= 4) {
      EXPECT_EQ(e.stats().mapping_calls - calls, 12u) << "round " << round;
    }
  }
  for (std::size_t i = 0; i < 8; ++i) expect_bytes(i, static_cast<unsigned char>(i < 4 ? 0x40 : 0x44));
}

TEST_F(Residency, ARunOfPagesIsRemappedWithOneUnmapAndOneAccessGrant) {
  swap_engine e(config(4, 16));
  remapped_as_runs(e);
}

TEST_F(Residency, TheMoverRemapsARunOfPagesWithOneUnmapAndOneAccessGrant) {
  swap_config c = config(4, 16);
  c.mover_thread = true;
  swap_engine e(c);
  remapped_as_runs(e);
}

// The prefetch tests' device: four pages of room, five pages filled with fill + i;
// page 0 left to make room for page 4, page 1 the least recently used.
void Residency::five_pages(swap_engine& e, int fill) {
  for (std::size_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(e.create_page(va(i)));
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), fill + static_cast<int>(i), kPage, s_), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
}

// After a prefetch of page 0 that evicted page 3 alone: page 0 comes back (waiting for
// page 3's copy), pages 1, 2 and 4 are still resident, page 3 is fetched at its next
// use, and every byte is intact.
void Residency::expect_only_page_3_left(swap_engine& e, int fill) {
  const byte_range zero{va(0), kPage};
  ASSERT_TRUE(e.prefetch({&zero, 1}));
  const std::uint64_t fetches = e.stats().fetches;
  for (std::size_t i : {1, 2, 4}) ASSERT_TRUE(use(e, i, false));
  EXPECT_EQ(e.stats().fetches, fetches);
  ASSERT_TRUE(use(e, 3, false));
  EXPECT_EQ(e.stats().fetches, fetches + 1);
  for (std::size_t i = 0; i < 5; ++i) expect_bytes(i, static_cast<unsigned char>(fill + i));
  EXPECT_LE(e.stats().peak_resident_bytes, 4 * kPage);
}

// See Note [Prefetch keeps what is needed sooner] (core/schedule.cc): a
// scheduled prefetch that finds no room evicts only pages its rank lets go (rank 0
// keeps a page), whatever their last use; with every resident page kept it evicts
// nothing and defers.
TEST_F(Residency, PrefetchNowEvictsNoPageItMustKeep) {
  swap_engine e(config(4, 16));
  ASSERT_NO_FATAL_FAILURE(five_pages(e, 0x20));
  const std::uint64_t evictions = e.stats().evictions;
  const byte_range zero{va(0), kPage};
  std::vector<byte_range> later;
  const std::vector<std::uintptr_t> all{va(1), va(2), va(3), va(4)};
  const auto in = [](const std::vector<std::uintptr_t>& pages) {
    return victim_rank([&pages](std::uintptr_t a) -> std::uint64_t {
      return std::find(pages.begin(), pages.end(), a) != pages.end() ? 0 : 1;
    });
  };
  ASSERT_TRUE(e.prefetch_now({&zero, 1}, later, in(all)));
  EXPECT_EQ(e.stats().evictions, evictions);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].addr, va(0));
  // Page 1 is the least recently used, but kept: page 3 leaves.
  later.clear();
  const std::vector<std::uintptr_t> keep{va(1), va(2), va(4)};
  ASSERT_TRUE(e.prefetch_now({&zero, 1}, later, in(keep)));
  EXPECT_EQ(e.stats().evictions, evictions + 1);
  ASSERT_NO_FATAL_FAILURE(expect_only_page_3_left(e, 0x20));
}

// See Note [Evictions copy page by page] (residency/swap_engine.h): two adjacent pages evicted
// together go out in a copy each, and a prefetch that finds room for only some of its
// pages fetches them in the order asked for (the schedule's: soonest use first), not
// in address order.
TEST_F(Residency, EvictionsCopyPageByPageAndPrefetchesKeepTheOrderAsked) {
  swap_engine e(config(4, 16));
  ASSERT_NO_FATAL_FAILURE(five_pages(e, 0x50));  // page 0 on the host
  const std::uint64_t copies = e.stats().copies;
  const byte_range two{va(1), 2 * kPage};
  ASSERT_TRUE(e.evict({&two, 1}));
  EXPECT_EQ(e.stats().copies, copies + 2);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(use(e, 0, false));  // finishes both evictions: pages 1 and 2 on the host
  // Room for one of them; pages 0, 3 and 4 are kept. Page 2 is asked for first.
  const byte_range asked[] = {{va(2), kPage}, {va(1), kPage}};
  const std::vector<std::uintptr_t> keep{va(0), va(3), va(4)};
  std::vector<byte_range> later;
  ASSERT_TRUE(e.prefetch_now(asked, later, victim_rank([&keep](std::uintptr_t a) -> std::uint64_t {
                                return std::find(keep.begin(), keep.end(), a) != keep.end() ? 0 : 1;
                              })));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].addr, va(1));
  const std::uint64_t fetches = e.stats().fetches;
  ASSERT_TRUE(use(e, 2, false));
  EXPECT_EQ(e.stats().fetches, fetches);
  for (std::size_t i = 0; i < 5; ++i) expect_bytes(i, static_cast<unsigned char>(0x50 + i));
  EXPECT_LE(e.stats().peak_resident_bytes, 4 * kPage);
}

// simgpu's host clock (simgpuVirtualTimeNs in libcuda.so.1, which the driver table
// has loaded).
std::uint64_t host_ns() {
  using fn = std::uint64_t (*)();
  static const fn f = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return lib == nullptr ? nullptr : reinterpret_cast<fn>(dlsym(lib, "simgpuVirtualTimeNs"));
  }();
  return f == nullptr ? 0 : f();
}

// See Note [Asking the driver once] (residency/swap_engine.h): work that uses a page whose fetch
// is still under way waits for the copy without asking the driver first, and later
// work on the same stream neither asks nor waits again (stream order holds it). On
// simgpu every driver question costs host time, so ten prepares of that page cost the
// host no more than one question; before, each asked (cuEventQuery) and waited.
TEST_F(Residency, WorkWaitsForAFetchOnceWithoutAsking) {
  swap_engine e(config(2, 16));
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(e.create_page(va(i)));
    ASSERT_TRUE(use(e, i));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), 0x30 + static_cast<int>(i), kPage, s_), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  // What one question costs the host (the clock moves only with driver calls here).
  CUevent probe = nullptr;
  ASSERT_EQ(driver().cuEventCreate(&probe, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  const std::uint64_t q0 = host_ns();
  driver().cuEventQuery(probe);
  const std::uint64_t question = host_ns() - q0;
  driver().cuEventDestroy(probe);
  ASSERT_GT(question, 0u);
  ASSERT_TRUE(use(e, 0, false));  // page 0 comes back; its copy in is under way
  const std::uint64_t t0 = host_ns();
  for (int k = 0; k < 10; ++k) ASSERT_TRUE(use(e, 0, false));
  EXPECT_LE(host_ns() - t0, question);
  expect_bytes(0, 0x30);
}

// See Note [Batches before the plan] (residency/swap_engine.h): the rates timed at start
// (given with no clock, as the engine is made) size the batches once the engine has
// timed its runs, though its clock came without rates, as the learner hands it over
// at the first launch before any plan; without them each fetch is remapped as the
// room comes, a page at a time.
// Two groups of four adjacent pages take turns in four pages of room.
TEST_F(Residency, RatesTimedAtStartSizeTheBatchesBeforeAnyPlan) {
  for (const bool timed : {false, true}) {
    swap_engine e(config(4, 16));
    if (timed) e.set_copy_clock(nullptr, 1e12, 1e12, /*rates_measured=*/true);
    e.set_copy_clock(&ticking_clock, 0, 0, /*rates_measured=*/false);
    ASSERT_NO_FATAL_FAILURE(two_groups_of_four(e, 0x60));
    for (std::size_t round = 0; round < 8; ++round) {
      const std::size_t first = round % 2 == 0 ? 0 : 4;
      ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
      const byte_range r{va(first), 4 * kPage};
      ASSERT_TRUE(e.prepare({&r, 1}, cu(), false));
    }
    EXPECT_EQ(e.batch_pages(), timed ? 2u : 1u) << (timed ? "timed" : "not timed");
    for (std::size_t i = 0; i < 8; ++i) {
      expect_bytes(i, static_cast<unsigned char>(i < 4 ? 0x60 : 0x64));
    }
  }
}

std::uint64_t g_fake_now = 1000;
std::uint64_t fake_clock() noexcept { return g_fake_now; }

// Page 0 on the host, page 1's copy out enqueued with the engine's clock at 1 GB/s
// (rates_measured or assumed) and done on the device: 0x51 and 0x52 written.
void Residency::evict_page_1_at_1gbps(swap_engine& e, bool rates_measured) {
  ASSERT_TRUE(e.create_page(va(0)));
  ASSERT_TRUE(use(e, 0));
  ASSERT_EQ(cudaMemsetAsync(ptr(0), 0x51, kPage, s_), cudaSuccess);
  ASSERT_TRUE(e.create_page(va(1)));  // page 0 out (the host waits for it)
  ASSERT_TRUE(use(e, 1));
  ASSERT_EQ(cudaMemsetAsync(ptr(1), 0x52, kPage, s_), cudaSuccess);
  e.set_copy_clock(&fake_clock, 1e9, 1e9, rates_measured);
  const byte_range one{va(1), kPage};
  ASSERT_TRUE(e.evict({&one, 1}));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // done on the device
}

void Residency::expect_both_pages_back(swap_engine& e) {
  ASSERT_TRUE(use(e, 0, false));
  expect_bytes(0, 0x51);
  ASSERT_TRUE(use(e, 1, false));
  expect_bytes(1, 0x52);
}

// See Note [Not asking too early] (residency/swap_engine.h): with a clock and the link's rates,
// the engine does not ask about a copy out before the clock says it could be done,
// even when it is (here the device has finished it): a fetch waiting for its room is
// deferred until the clock has passed the copy's earliest end, then goes ahead.
TEST_F(Residency, NoQuestionBeforeACopyCouldBeDone) {
  swap_engine e(config(1, 16));
  // 1 GB/s: page 1's copy out cannot be done before 0.9 x 2.1 ms on the clock.
  ASSERT_NO_FATAL_FAILURE(evict_page_1_at_1gbps(e, true));
  const byte_range zero{va(0), kPage};
  std::vector<byte_range> later;
  g_fake_now += 1'000'000;  // 1 ms on: too early to ask
  ASSERT_TRUE(e.prefetch_now({&zero, 1}, later));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(e.stats().evictions, 2u);  // no other page was sent out for the room
  later.clear();
  g_fake_now += 1'000'000;  // 2 ms: past 0.9 x 2.1 ms
  ASSERT_TRUE(e.prefetch_now({&zero, 1}, later));
  EXPECT_TRUE(later.empty());
  ASSERT_NO_FATAL_FAILURE(expect_both_pages_back(e));
}

// See Note [A clock without CUPTI] in core/schedule_costs.cc: an assumed rate (the plan's
// constant, no link measured) sizes batches only. The same copy out, asked about 1 ms
// after it was issued, at an assumed 1 GB/s: the engine asks, finds it done and fetches.
TEST_F(Residency, AnAssumedRateDoesNotDelayTheQuestion) {
  swap_engine e(config(1, 16));
  ASSERT_NO_FATAL_FAILURE(evict_page_1_at_1gbps(e, false));
  const byte_range zero{va(0), kPage};
  std::vector<byte_range> later;
  g_fake_now += 1'000'000;
  ASSERT_TRUE(e.prefetch_now({&zero, 1}, later));
  EXPECT_TRUE(later.empty());
  ASSERT_NO_FATAL_FAILURE(expect_both_pages_back(e));
}

// Of the pages a prefetch may take, those of highest rank (used furthest off) leave
// first, not the least recently used; dead pages before any.
TEST_F(Residency, PrefetchNowEvictsTheHighestRankFirst) {
  swap_engine e(config(4, 16));
  ASSERT_NO_FATAL_FAILURE(five_pages(e, 0x30));
  const std::uint64_t evictions = e.stats().evictions;
  const byte_range zero{va(0), kPage};
  std::vector<byte_range> later;
  // Page 1 is the least recently used; page 3 is used furthest off.
  const auto rank = victim_rank([this](std::uintptr_t a) -> std::uint64_t {
    return a == va(3) ? 9 : a == va(2) ? 5 : 1;
  });
  ASSERT_TRUE(e.prefetch_now({&zero, 1}, later, rank));
  EXPECT_EQ(e.stats().evictions, evictions + 1);
  ASSERT_NO_FATAL_FAILURE(expect_only_page_3_left(e, 0x30));
}

// See Note [One range in swap mode] (pool/vmm_arena.cc): an arena over the engine reserves
// the device's range plus swap_range_bytes at once, so blocks allocated one after
// another past the device's size stay adjacent (one range, no block split off to
// another). Run a second time with SIMGPU_FAIL=reserve:2 (tests/unit/pool/meson.build):
// the driver refuses the first reservation and the arena takes half of it.
TEST_F(Residency, TheArenaOverTheEngineIsOneRange) {
  swap_engine e(config(4, 32));
  vmm_arena_config ac;
  ac.range_bytes = 8 << 20;
  ac.swap_range_bytes = 64 << 20;
  ac.pages = &e;
  vmm_arena arena(ac);
  constexpr std::size_t kBlock = 1536 * 1024;
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) {  // 24 MiB: three times the device's range
    allocation_result r = arena.allocate(kBlock, cu());
    ASSERT_TRUE(r) << i;
    blocks.push_back(r.ptr);
    EXPECT_EQ(static_cast<char*>(r.ptr), static_cast<char*>(blocks.front()) + i * kBlock) << i;
  }
  const char* fail = std::getenv("SIMGPU_FAIL");
  const bool refused = fail != nullptr && std::string_view(fail) == "reserve:2";
  EXPECT_EQ(arena.stats().reserved_bytes, std::uint64_t{refused ? 36u : 72u} << 20);
  for (void* b : blocks) arena.deallocate(b, kBlock, cu());
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  arena.trim();
}

TEST_F(Residency, TheArenaOverTheEngineHoldsMoreThanTheCapacity) {
  swap_engine e(config(4, 32));
  vmm_arena_config ac;
  ac.range_bytes = 64 << 20;
  ac.pages = &e;
  vmm_arena arena(ac);
  constexpr std::size_t kBlock = 1536 * 1024;  // 1.5 MiB: blocks straddle pages
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) {
    allocation_result r = arena.allocate(kBlock, cu());
    ASSERT_TRUE(r) << i;
    const byte_range br{reinterpret_cast<std::uintptr_t>(r.ptr), kBlock};
    ASSERT_TRUE(e.prepare({&br, 1}, cu()));
    ASSERT_EQ(cudaMemsetAsync(r.ptr, 0x20 + i, kBlock, s_), cudaSuccess);
    blocks.push_back(r.ptr);
  }
  EXPECT_GT(arena.stats().used_bytes, 2 * e.capacity_bytes());
  for (int i = 0; i < 16; ++i) {
    const byte_range br{reinterpret_cast<std::uintptr_t>(blocks[i]), kBlock};
    ASSERT_TRUE(e.prepare({&br, 1}, cu(), false));
    std::vector<unsigned char> host(kBlock);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), blocks[i], kBlock, cudaMemcpyDeviceToHost, s_),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    EXPECT_EQ(host.front(), 0x20 + i);
    EXPECT_EQ(host.back(), 0x20 + i);
  }
  EXPECT_LE(e.stats().peak_resident_bytes, e.capacity_bytes());
  for (void* b : blocks) arena.deallocate(b, kBlock, cu());
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  arena.trim();
  EXPECT_EQ(e.stats().pages, 0u);
  EXPECT_EQ(e.stats().host_bytes, 0u);
}

}  // namespace
}  // namespace oversub::residency

namespace oversub::residency {
namespace {

// See Note [Moves after all work] in residency/swap_engine.h: page 0 is used on stream A
// only, as far as the engine knows. On stream B, behind a long kernel, a kernel reads
// page 0 through a pointer stored in page 1 (announced: page 1 only). Evicting page 0 to
// make room must still wait for B's work before its device memory is unmapped: simgpu
// records the page the kernel really reached, and with SIMGPU_RACE=abort an unmap ordered
// after A alone aborts the test.
TEST_F(Residency, AnEvictionWaitsForWorkThatReachesThePageUnannounced) {
  swap_engine e(config(2, 16));
  cudaStream_t b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  const CUstream cb = reinterpret_cast<CUstream>(b);
  ASSERT_TRUE(e.create_page(va(0)));
  ASSERT_TRUE(use(e, 0));
  ASSERT_EQ(cudaMemsetAsync(ptr(0), 0x21, kPage, s_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  ASSERT_TRUE(e.create_page(va(1)));
  const byte_range table{va(1), kPage};
  ASSERT_TRUE(e.prepare({&table, 1}, cb));
  const int* target = reinterpret_cast<const int*>(va(0));
  ASSERT_EQ(cudaMemcpyAsync(ptr(1), &target, sizeof target, cudaMemcpyHostToDevice, b),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  int* out = reinterpret_cast<int*>(va(1) + 4096);
  int* scratch = reinterpret_cast<int*>(va(1) + 8192);
  ASSERT_TRUE(e.prepare({&table, 1}, cb));
  void* long_args[] = {&scratch};
  ASSERT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&long_kernel), dim3(1), dim3(1),
                             long_args, 0, b),
            cudaSuccess);
  ASSERT_TRUE(e.prepare({&table, 1}, cb));
  const int* const* tp = reinterpret_cast<const int* const*>(va(1));
  void* chase_args[] = {&tp, &out};
  ASSERT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&chase_read_kernel), dim3(1), dim3(1),
                             chase_args, 0, b),
            cudaSuccess);
  // A third page needs room: page 0 (least recently used) leaves.
  ASSERT_TRUE(e.create_page(va(2)));
  ASSERT_TRUE(use(e, 2));
  ASSERT_TRUE(e.create_page(va(3)));
  ASSERT_TRUE(use(e, 3));
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  ASSERT_TRUE(e.prepare({&table, 1}, cb));
  int got = 0;
  ASSERT_EQ(cudaMemcpyAsync(&got, out, sizeof got, cudaMemcpyDeviceToHost, b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(got, 0x21212121);
  expect_bytes(0, 0x21);
  ASSERT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

}  // namespace
}  // namespace oversub::residency
