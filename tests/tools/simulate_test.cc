// Tests of the what-if simulator's parts (tools/simulate/): the device model reader,
// the profile to iteration model conversion and its duration model, and the
// figures of a toy iteration computed by hand from the cost model.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "policy/schedule.h"
#include "tools/simulate/device_model.h"
#include "policy/page_model.h"
#include "policy/profile_model.h"
#include "tools/simulate/what_if.h"

namespace oversub::tools {
namespace {

using policy::policy_kind;
using namespace policy;

// Round figures so that times are easy to compute by hand: 1 byte/ns each way over
// the link, 10 us per copy, 2 us launch latency, 10 bytes/ns device memory.
device_model toy_device() {
  device_model d;
  d.name = "toy";
  d.memory_bytes = 1u << 30;
  d.fp32_flops = 1e12;
  d.memory_bandwidth = 1e10;
  d.costs.h2d_bytes_per_s = d.costs.d2h_bytes_per_s = 1e9;
  d.costs.copy_setup_ns = 10'000;
  d.costs.launch_latency_ns = 2'000;
  d.costs.managed_fault_ns = 20'000;
  d.costs.managed_page_bytes = 64 * 1024;
  return d;
}

constexpr std::uint64_t X = 1'000'000;  // bytes of each weight

// The toy iteration: weights A and B (long-lived, X bytes each) and an activation
// Y (X/2, allocated before launch 0, freed after launch 1). Launch 0 uses A and Y
// (d0 ns), launch 1 uses B and Y (d1 ns).
profiler::profile toy_profile(std::uint64_t d0, std::uint64_t d1) {
  profiler::profile p;
  profiler::allocation_record y;
  y.ordinal = 0;
  y.bytes = X / 2;
  y.alloc_at = 0;
  y.free_at = 2;
  profiler::allocation_record a;
  a.bytes = X;
  a.long_lived = true;
  a.address = 0x1000;
  profiler::allocation_record b = a;
  b.address = 0x2000000;
  p.allocations = {y, a, b};  // Y = 0, A = 1, B = 2
  p.launches = {{p.intern("k0"), d0, 0, {0, 1}}, {p.intern("k1"), d1, 0, {0, 2}}};
  return p;
}

TEST(DeviceModel, ReadsTheSimgpuModels) {
  const device_model_result r = read_device_model("h100-pcie", OVERSUB_DEVICE_MODELS_DIR);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.value.name, "NVIDIA H100 PCIe");
  EXPECT_EQ(r.value.memory_bytes, 80ull << 30);
  EXPECT_DOUBLE_EQ(r.value.costs.h2d_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(r.value.memory_bandwidth, 2.0e12);
  EXPECT_EQ(r.value.costs.copy_setup_ns, 5000u);
  EXPECT_EQ(r.value.costs.managed_page_bytes, 64u * 1024);
  EXPECT_TRUE(r.value.costs.demand_paging);
  // The mover's costs: read, but not in the costs a buffer-granular plan takes.
  EXPECT_EQ(r.value.mover.remap_ns(std::size_t{2} << 20), 26000u + 1500u + 36000u);
  EXPECT_EQ(r.value.mover.evict_ns(std::size_t{2} << 20), 63500u + 2000u + 2000u);
  EXPECT_EQ(r.value.mover.fetch_ns(std::size_t{2} << 20, true), 63500u + 3u * 2000u);
  EXPECT_FALSE(r.value.costs.has_mover());
  const device_model_result titan =
      read_device_model("titanx-maxwell", OVERSUB_DEVICE_MODELS_DIR);
  ASSERT_EQ(titan.error, "");
  EXPECT_EQ(titan.value.memory_bytes, 12ull << 30);
  EXPECT_FALSE(titan.value.costs.demand_paging);
  // The H200's repeated calls (Note [Grouped runs in the simulator] in
  // policy/simulate.h): a run grouped with the one before it pays the unmap's and the
  // access grant's repeat figures; the H100-PCIe model has none, every run in full.
  const device_model_result h200 = read_device_model("h200-measured", OVERSUB_DEVICE_MODELS_DIR);
  ASSERT_EQ(h200.error, "");
  EXPECT_EQ(h200.value.mover.vmm_map_repeat_ns, 1504);
  EXPECT_EQ(h200.value.mover.vmm_unmap_repeat_ns, 20067);
  EXPECT_EQ(h200.value.mover.vmm_set_access_repeat_ns, 33793);
  EXPECT_EQ(h200.value.mover.grouped_run_ns(), 20067u + 33793u);
  EXPECT_EQ(h200.value.mover.run_ns(), 63943u + 122060u + (11160u - 1504u));
  EXPECT_EQ(r.value.mover.grouped_run_ns(), r.value.mover.vmm_unmap_ns +
                                                r.value.mover.vmm_set_access_ns);
}

TEST(DeviceModel, UnknownNameListsTheKnownOnes) {
  const device_model_result r = read_device_model("h200", OVERSUB_DEVICE_MODELS_DIR);
  EXPECT_NE(r.error.find("unknown device 'h200'"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("h100-pcie"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("k40"), std::string::npos) << r.error;
}

TEST(DeviceModel, MissingOrBadKeyIsNamed) {
  const std::string path = ::testing::TempDir() + "/bad.model";
  {
    std::ofstream out(path);
    out << "name = bad\nmemory = 1GiB\nfp32_flops = 1e12\nmemory_bandwidth = fast\n";
  }
  const device_model_result r = read_device_model(path, "/nonexistent");
  EXPECT_NE(r.error.find("memory_bandwidth = 'fast'"), std::string::npos) << r.error;
  {
    std::ofstream out(path);
    out << "memory = 1GiB\nfp32_flops = 1e12\nmemory_bandwidth = 1e9\n";
  }
  const device_model_result r2 = read_device_model(path, "/nonexistent");
  EXPECT_NE(r2.error.find("no 'h2d_pinned_bandwidth'"), std::string::npos) << r2.error;
  std::remove(path.c_str());
}

TEST(ProfileModel, LifetimesDurationsAndUnfreedBuffers) {
  profiler::profile p = toy_profile(300, 0);
  profiler::allocation_record unfreed;
  unfreed.ordinal = 1;
  unfreed.bytes = 64;
  unfreed.alloc_at = 1;  // free_at none: freed in the next iteration
  p.allocations.push_back(unfreed);
  p.launches[1].buffers.push_back(3);
  const profile_model r = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(r.error, "");
  // Y: allocated before launch 0, freed after 2 launches were issued: live [0, 1].
  EXPECT_FALSE(r.model.buffers[0].long_lived);
  EXPECT_EQ(r.model.buffers[0].alloc_launch, 0u);
  EXPECT_EQ(r.model.buffers[0].free_launch, 1u);
  EXPECT_TRUE(r.model.buffers[1].long_lived);
  EXPECT_TRUE(r.model.buffers[3].long_lived);  // not freed in the iteration
  EXPECT_EQ(r.long_lived, 3u);
  EXPECT_EQ(r.unfreed, 1u);
  // Launch 0 measured; launch 1 modeled: B + Y + 64 bytes at 10 bytes/ns, rounded up.
  EXPECT_EQ(r.durations_measured, 1u);
  EXPECT_EQ(r.durations_modeled, 1u);
  EXPECT_EQ(r.model.launches[0].duration_ns, 300u);
  EXPECT_EQ(r.model.launches[1].duration_ns, (X + X / 2 + 64 + 9) / 10);
  // --durations model: launch 0 too (A + Y = 1.5 MB at 10 bytes/ns = 150 us).
  const profile_model all = model_from_profile(p, toy_device(), duration_source::model);
  EXPECT_EQ(all.durations_modeled, 2u);
  EXPECT_EQ(all.model.launches[0].duration_ns, 150'000u);
}

TEST(ProfileModel, ModeledDurationIsAtLeastTheLaunchLatency) {
  EXPECT_EQ(modeled_duration_ns(0, toy_device()), 2'000u);
  EXPECT_EQ(modeled_duration_ns(100, toy_device()), 2'000u);         // 10 ns of streaming
  EXPECT_EQ(modeled_duration_ns(1'000'000, toy_device()), 100'000u);  // 1 MB at 10 B/ns
}

TEST(ProfileModel, UsesOutsideTheRecordedLifetimeWidenIt) {
  profiler::profile p = toy_profile(300, 500);
  p.allocations[0].free_at = 1;  // says freed after launch 0, but launch 1 uses it
  const profile_model r = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.model.buffers[0].free_launch, 1u);
}

// The previous iteration's buffer whose free the rotation put at position 0, and a
// temporary freed before the next launch: neither holds memory while a launch runs.
TEST(ProfileModel, AllocationsLiveAtNoLaunchTakeNoMemory) {
  profiler::profile p = toy_profile(300, 500);
  profiler::allocation_record old_one;
  old_one.bytes = 4;
  old_one.long_lived = true;
  old_one.address = 0x3000000;
  old_one.free_at = 0;
  profiler::allocation_record temporary;
  temporary.ordinal = 1;
  temporary.bytes = 8;
  temporary.alloc_at = 1;
  temporary.free_at = 1;
  p.allocations.push_back(old_one);    // 3
  p.allocations.push_back(temporary);  // 4
  const profile_model r = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.live_at_no_launch, 2u);
  EXPECT_EQ(r.model.buffers[3].bytes, 0u);
  EXPECT_EQ(r.model.buffers[4].bytes, 0u);
  EXPECT_EQ(policy::peak_live_bytes(r.model), 2 * X + X / 2);
  // A launch that uses one after all gets its bytes back.
  p.launches[1].buffers.push_back(4);
  const profile_model used = model_from_profile(p, toy_device(), duration_source::automatic);
  EXPECT_EQ(used.live_at_no_launch, 1u);
  EXPECT_EQ(used.model.buffers[4].bytes, 8u);
}

// See Note [A launch whose buffers are not known] in profiler/profile_format.h: a
// launch marked unreadable uses every buffer holding memory at it, never none.
TEST(ProfileModel, AnUnreadableLaunchUsesEveryLiveBuffer) {
  profiler::profile p = toy_profile(0, 0);
  profiler::allocation_record later;  // allocated after launch 0
  later.ordinal = 1;
  later.bytes = 16;
  later.alloc_at = 1;
  later.free_at = 2;
  profiler::allocation_record gone = p.allocations[1];  // long-lived, freed after launch 0
  gone.address = 0x4000000;
  gone.free_at = 1;
  p.allocations.push_back(later);  // 3
  p.allocations.push_back(gone);   // 4
  p.launches.push_back({p.intern("opaque"), 0, 0, {}, profiler::launch_unreadable});
  p.launches[0].flags = profiler::launch_unreadable;
  p.launches[0].buffers.clear();
  const profile_model r = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.unreadable_launches, 2u);
  // Launch 0: Y, A, B and the long-lived one freed after it; not the later one.
  EXPECT_EQ(r.model.launches[0].uses, (std::vector<buffer_id>{0, 1, 2, 4}));
  // Launch 1 as recorded (Y and B).
  EXPECT_EQ(r.model.launches[1].uses, (std::vector<buffer_id>{0, 2}));
  // Launch 2: Y and the later one are freed after 2 launches; A and B remain.
  EXPECT_EQ(r.model.launches[2].uses, (std::vector<buffer_id>{1, 2}));
  // Its modeled duration streams every byte it is taken to use.
  EXPECT_EQ(r.model.launches[2].duration_ns, modeled_duration_ns(2 * X, toy_device()));
  // Unmarked, the same empty launch uses nothing.
  p.launches[2].flags = 0;
  const profile_model plain = model_from_profile(p, toy_device(), duration_source::automatic);
  EXPECT_TRUE(plain.model.launches[2].uses.empty());
  EXPECT_EQ(plain.unreadable_launches, 1u);
}

TEST(ProfileModel, NoLaunchesIsAnError) {
  profiler::profile p;
  EXPECT_EQ(model_from_profile(p, toy_device(), duration_source::automatic).error,
            "the profile has no launches");
}

// By hand, for capacity 1.5 X (A + Y or B + Y, never both weights):
// - every launch writes every buffer it uses (the profile does not say which it
//   writes), so a weight that leaves is copied out, and it must come back;
// - launch 1 needs B while A and Y fill the device; Y is launch 1's own, so A leaves
//   (copy out, c = 10 us + X / (1 B/ns) = 1010 us) and B comes in (c) before launch
//   1 can start: the copies cannot overlap anything, memory is full;
// - the next iteration needs A again: B out (c), A in (c), before launch 0.
//   Whether the schedule starts with A resident (the swap back at the end of the
//   iteration) or with B resident (at its start), the iteration holds four copies,
//   both launches, and the launch latency (2 us) hidden under the first copy:
//   T = d0 + d1 + 4 c; 2 X bytes each way, in 2 copies each way.
TEST(WhatIf, ToyIterationMatchesTheHandComputation) {
  const std::uint64_t d0 = 300'000, d1 = 500'000;
  const device_model d = toy_device();
  const profile_model pm = model_from_profile(toy_profile(d0, d1), d, duration_source::automatic);
  ASSERT_EQ(pm.error, "");
  const std::uint64_t c = d.costs.copy_setup_ns + X * 1'000'000'000ull /
                                                     static_cast<std::uint64_t>(d.costs.h2d_bytes_per_s);
  ASSERT_EQ(c, 1'010'000u);
  const what_if_point p = run_point(pm.model, X + X / 2, d.costs, policy_kind::cost);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.sim.iteration_ns, d0 + d1 + 4 * c);
  EXPECT_EQ(p.unlimited_ns, d.costs.launch_latency_ns + d0 + d1);
  EXPECT_EQ(p.sim.h2d_bytes, 2 * X);
  EXPECT_EQ(p.sim.d2h_bytes, 2 * X);
  EXPECT_EQ(p.sim.h2d_copies, 2u);
  EXPECT_EQ(p.sim.d2h_copies, 2u);
  EXPECT_EQ(p.sim.peak_device_bytes, X + X / 2);
  // Transfer bound: peak live 2.5 X minus 1.5 X at 1 B/ns = 1 ms, above T_unlimited.
  EXPECT_EQ(p.transfer_bound_ns, X);
  // Window bound: launches 0 and 1 together use A and B (2 X of content; Y gets its
  // content inside them) in 1.5 X, so 0.5 X comes in (and, every use a write, 0.5 X
  // goes out) within them: 0.5 ms, under their 0.8 ms of compute. It does not see
  // that a full device serializes the four copies (the replay does): T_unlimited.
  EXPECT_EQ(p.window_bound_ns, p.unlimited_ns);
  // In 1.2 X the window copies 0.8 X each way, 0.8 ms: the same. In X (no room for a
  // launch, but the bound does not ask), 1 ms.
  EXPECT_EQ(policy::window_bound_ns(pm.model, X, d.costs), d.costs.launch_latency_ns + X);
  EXPECT_DOUBLE_EQ(p.overhead, static_cast<double>(d0 + d1 + 4 * c) /
                                   static_cast<double>(2'000 + d0 + d1) - 1.0);
  EXPECT_FALSE(p.fits);
}

// With room for all three buffers (2.5 X) nothing moves: T = latency + d0 + d1.
// See Note [Page model] in policy/page_model.h, on the toy: A at 0 and B after it (each X
// rounded up to 256 bytes: 1000192), the long-lived zone ending at 2000384; Y's region
// after it.
TEST(PageModel, ToyBuffersOnPages) {
  const profiler::profile p = toy_profile(300'000, 500'000);
  const profile_model pm = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(pm.error, "");
  // 2 MiB pages: A and B on page 0, Y over [2000384, 2500384), pages 0 and 1.
  const page_model two = pages_of_profile(p, pm.model, std::size_t{2} << 20);
  ASSERT_EQ(two.error, "");
  EXPECT_EQ(two.long_lived_bytes, 2'000'384u);
  EXPECT_EQ(two.region_bytes, 500'224u);
  EXPECT_EQ(two.pages, 2u);
  ASSERT_EQ(two.model.launches.size(), 2u);
  EXPECT_EQ(two.model.launches[0].uses, (std::vector<policy::buffer_id>{0, 1}));
  EXPECT_EQ(two.model.launches[1].uses, (std::vector<policy::buffer_id>{0, 1}));
  EXPECT_EQ(two.model.launches[0].duration_ns, 300'000u);
  EXPECT_EQ(two.model.launches[1].duration_ns, 500'000u);
  for (const policy::model_buffer& b : two.model.buffers) {
    EXPECT_EQ(b.bytes, std::size_t{2} << 20);
    EXPECT_TRUE(b.long_lived);
  }
  // 1 MiB pages, the region on a 2 MiB boundary: A on page 0, B on pages 0-1, Y on
  // page 2. Pages are numbered in order of first use: 0, 2 (launch 0), then 1.
  const page_model one = pages_of_profile(p, pm.model, std::size_t{1} << 20, std::size_t{2} << 20);
  ASSERT_EQ(one.error, "");
  EXPECT_EQ(one.pages, 3u);
  EXPECT_EQ(one.model.launches[0].uses, (std::vector<policy::buffer_id>{0, 1}));
  EXPECT_EQ(one.model.launches[1].uses, (std::vector<policy::buffer_id>{0, 2, 1}));
  // In 2 MiB the buffers' plan swaps A and B around Y (1.5 MB a launch), but launch 1
  // touches three 1 MiB pages: over pages, it cannot run.
  const policy::cost_model costs = toy_device().costs;
  EXPECT_EQ(run_point(pm.model, 2u << 20, costs, policy_kind::cost).error, "");
  EXPECT_NE(run_point(one.model, 2u << 20, costs, policy_kind::cost).error.find("launch 1 alone"),
            std::string::npos);
  EXPECT_EQ(run_point(one.model, 3u << 20, costs, policy_kind::cost).sim.h2d_bytes, 0u);
  // As swap mode runs it (Note [Launches over the room] in policy/iteration_model.h):
  // launch 1 keeps the two pages used most (0 and 1, twice each) and reads page 2 in
  // host memory, on top of its duration.
  policy::cost_model reads = costs;
  reads.host_access_bytes_per_s = 0.5e9;  // 2.1 ms for the page
  const what_if_point over = run_point(one.model, 2u << 20, reads, policy_kind::cost, true);
  ASSERT_EQ(over.error, "");
  EXPECT_EQ(over.over_room.launches, 1u);
  EXPECT_EQ(over.over_room.host_bytes, std::size_t{1} << 20);
  EXPECT_GE(over.sim.iteration_ns, over.unlimited_ns + reads.host_access_ns(1u << 20));
  EXPECT_NE(run_point(one.model, 2u << 20, costs, policy_kind::um_naive, true).error, "");
}

// Two per-iteration buffers whose lifetimes do not overlap share the region's bytes,
// and so their pages.
TEST(PageModel, DisjointLifetimesShareAPage) {
  profiler::profile p;
  profiler::allocation_record y0;
  y0.ordinal = 0;
  y0.bytes = 4096;
  y0.alloc_at = 0;
  y0.free_at = 1;
  profiler::allocation_record y1 = y0;
  y1.ordinal = 1;
  y1.alloc_at = 1;
  y1.free_at = 2;
  p.allocations = {y0, y1};
  p.launches = {{p.intern("k0"), 1000, 0, {0}}, {p.intern("k1"), 1000, 0, {1}}};
  const profile_model pm = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(pm.error, "");
  const page_model m = pages_of_profile(p, pm.model, 4096, 4096);
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.region_bytes, 4096u);
  EXPECT_EQ(m.pages, 1u);
  EXPECT_EQ(m.model.launches[1].uses, (std::vector<policy::buffer_id>{0}));
  // See Note [Dead gaps] in core/dead_gaps.cc: the page loses y0 before launch 1 and gets
  // y1 there, and loses y1 at the end and gets y0 before launch 0: dead for the moves
  // before launch 1, and before launch 0 (the end's), each window one launch long.
  std::vector<std::tuple<policy::buffer_id, std::uint32_t, std::uint32_t>> windows;
  for (const policy::dead_window& w : m.model.dead_windows) {
    windows.emplace_back(w.buffer, w.from, w.until);
  }
  EXPECT_EQ(windows, (decltype(windows){{0, 1, 1}, {0, 0, 0}}));
}

// See Note [Long-lived layout from a profile] in policy/placement.h: four long-lived
// buffers of half a page, used A, C, B, D. In allocation order A and B share a page, C
// and D the other, so every launch uses another page than the one before; by first use A
// and C share one, B and D the other.
profiler::profile alternating_profile(std::uint64_t bytes) {
  profiler::profile p;
  for (int k = 0; k < 4; ++k) {
    profiler::allocation_record a;
    a.bytes = bytes;
    a.long_lived = true;
    a.address = 0x100000 * static_cast<std::uint64_t>(k + 1);
    p.allocations.push_back(a);
  }
  p.launches = {{p.intern("k0"), 1000, 0, {0}}, {p.intern("k1"), 1000, 0, {2}},
                {p.intern("k2"), 1000, 0, {1}}, {p.intern("k3"), 1000, 0, {3}}};
  return p;
}

TEST(PageModel, LongLivedOrderPutsBuffersUsedTogetherOnAPage) {
  const profiler::profile p = alternating_profile(2048);
  const profile_model pm = model_from_profile(p, toy_device(), duration_source::automatic);
  ASSERT_EQ(pm.error, "");
  const page_model given = pages_of_profile(p, pm.model, 4096, 4096);
  ASSERT_EQ(given.error, "");
  std::vector<policy::buffer_id> pages;
  for (const policy::model_launch& l : given.model.launches) pages.push_back(l.uses.at(0));
  EXPECT_EQ(pages, (std::vector<policy::buffer_id>{0, 1, 0, 1}));
  const std::vector<std::uint32_t> order = {0, 2, 1, 3};
  const page_model first = pages_of_profile(p, pm.model, 4096, 4096, order);
  ASSERT_EQ(first.error, "");
  pages.clear();
  for (const policy::model_launch& l : first.model.launches) pages.push_back(l.uses.at(0));
  EXPECT_EQ(pages, (std::vector<policy::buffer_id>{0, 0, 1, 1}));
  const std::vector<std::uint32_t> short_order = {0, 1};
  EXPECT_NE(pages_of_profile(p, pm.model, 4096, 4096, short_order).error, "");
}

TEST(PageModel, ChoosesTheLayoutPredictedFastest) {
  // 1 MiB buffers on the swap engine's 2 MiB pages, in one page of room: in allocation
  // order every launch swaps a page, by first use every second one.
  const profiler::profile p = alternating_profile(std::uint64_t{1} << 20);
  const layout_choice c = choose_long_lived_layout(p, std::size_t{2} << 20, 25e9, 10'000, 1e12);
  ASSERT_EQ(c.error, "");
  // By first use and by last use give the same pages here; the first of equals is kept.
  EXPECT_EQ(c.kind, layout_kind::first_use);
  EXPECT_EQ(c.order, (std::vector<std::uint32_t>{0, 2, 1, 3}));
  EXPECT_LT(c.predicted_ns[1], c.predicted_ns[0]);
  EXPECT_EQ(c.predicted_ns[2], c.predicted_ns[1]);
  // With room for both pages nothing moves either way: the allocation order is kept.
  const layout_choice roomy = choose_long_lived_layout(p, std::size_t{8} << 20, 25e9, 10'000, 1e12);
  ASSERT_EQ(roomy.error, "");
  EXPECT_EQ(roomy.predicted_ns[1], roomy.predicted_ns[0]);
  EXPECT_EQ(roomy.kind, layout_kind::allocation);
  EXPECT_TRUE(roomy.order.empty());
}

TEST(WhatIf, ToyIterationThatFitsMovesNothing) {
  const device_model d = toy_device();
  const profile_model pm =
      model_from_profile(toy_profile(300'000, 500'000), d, duration_source::automatic);
  const what_if_point p = run_point(pm.model, 2 * X + X / 2, d.costs, policy_kind::cost);
  ASSERT_EQ(p.error, "");
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.sim.iteration_ns, 802'000u);
  EXPECT_EQ(p.sim.h2d_bytes + p.sim.d2h_bytes, 0u);
  EXPECT_EQ(p.overhead, 0.0);
}

// Below the largest launch (A + Y = 1.5 X) no policy has a schedule.
TEST(WhatIf, CapacityBelowTheLargestLaunchIsAnError) {
  const device_model d = toy_device();
  const profile_model pm =
      model_from_profile(toy_profile(300'000, 500'000), d, duration_source::automatic);
  for (policy_kind k : all_policies()) {
    const what_if_point p = run_point(pm.model, X + X / 2 - 1, d.costs, k);
    EXPECT_NE(p.error.find("launch 0 alone needs"), std::string::npos) << p.error;
  }
}

TEST(WhatIf, SweepRunsFromPeakLiveToTheLargestLaunch) {
  model_summary s;
  s.peak_live_bytes = 1000;
  s.largest.bytes = 400;
  EXPECT_EQ(sweep_capacities(s, 4), (std::vector<std::size_t>{1000, 800, 600, 400}));
  EXPECT_EQ(sweep_capacities(s, 1), (std::vector<std::size_t>{1000}));
  s.largest.bytes = 1000;
  EXPECT_EQ(sweep_capacities(s, 5), (std::vector<std::size_t>{1000}));
}

TEST(WhatIf, PolicyNames) {
  policy_kind k{};
  ASSERT_TRUE(parse_policy("vdnn-all", k));
  EXPECT_EQ(k, policy_kind::vdnn_all);
  EXPECT_FALSE(parse_policy("vdnn_all", k));
  EXPECT_EQ(all_policies().size(), 4u);
}

}  // namespace
}  // namespace oversub::tools
