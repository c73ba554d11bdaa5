// policy/mode_choice: swap against um from a profile (Note [Predicting swap against um]
// in policy/mode_choice.h).
#include "policy/mode_choice.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace oversub::policy {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

// Launches over buffers 0..n-1 in order, twice.
std::vector<std::uint32_t> two_passes(std::uint32_t n) {
  std::vector<std::uint32_t> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < n; ++i) order.push_back(i);
  }
  return order;
}

// A launch of 10 us using buffer b alone.
profiler::launch_record launch_on(std::uint32_t b) {
  profiler::launch_record l;
  l.name = 0;
  l.duration_ns = 10'000;
  l.buffers = {b};
  return l;
}

// n long-lived buffers of `bytes` each, one launch of 10 us per entry of order (each
// using the one buffer it names).
profiler::profile profile_of(std::uint32_t n, std::uint64_t bytes,
                             const std::vector<std::uint32_t>& order) {
  profiler::profile p;
  p.program = "mode_choice_test";
  for (std::uint32_t i = 0; i < n; ++i) {
    profiler::allocation_record a;
    a.bytes = bytes;
    a.address = 0x1000000 + i * bytes;
    a.long_lived = true;
    p.allocations.push_back(a);
  }
  p.strings.push_back("k");
  for (std::uint32_t b : order) p.launches.push_back(launch_on(b));
  return p;
}

// Three passes over 64 buffers of 1 MiB in orders no layout of 2 MiB pages serves
// (in order, evens then odds, bits reversed): a page's two buffers are used apart in
// some pass, so swap moves twice the bytes um moves.
std::vector<std::uint32_t> scattered_order() {
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < 64; ++i) order.push_back(i);
  for (std::uint32_t i = 0; i < 64; i += 2) order.push_back(i);
  for (std::uint32_t i = 1; i < 64; i += 2) order.push_back(i);
  for (std::uint32_t i = 0; i < 64; ++i) {
    std::uint32_t r = 0;
    for (int bit = 0; bit < 6; ++bit) r |= ((i >> bit) & 1u) << (5 - bit);
    order.push_back(r);
  }
  return order;
}

TEST(ModeChoice, UmWhereSwapsPagesCarryUnusedBuffers) {
  const mode_prediction r = predict_modes(profile_of(64, MiB, scattered_order()), 16 * MiB, {});
  ASSERT_EQ(r.swap_error, "");
  ASSERT_EQ(r.um_error, "");
  EXPECT_GT(r.swap_ns, r.um_ns * 5 / 4) << "um " << r.um_ns << " ns";
  EXPECT_TRUE(r.um_faster);
  EXPECT_EQ(r.um_paged_bytes, 0u);  // no buffer above a quarter of the capacity
  EXPECT_GT(r.um_ns, r.unlimited_ns);
}

TEST(ModeChoice, SwapWhenLargeBuffersWouldBePagedOnDemand) {
  // 8 buffers of 8 MiB at 24 MiB: each is above a quarter of the capacity, so um pages
  // them on demand (3.5 us per 64 KiB besides the migration) and swap's overlapped
  // copies win.
  const std::vector<std::uint32_t> order = two_passes(8);
  const mode_prediction r = predict_modes(profile_of(8, 8 * MiB, order), 24 * MiB, {});
  ASSERT_EQ(r.swap_error, "");
  ASSERT_EQ(r.um_error, "");
  EXPECT_GT(r.um_paged_bytes, 0u);
  EXPECT_LT(r.swap_ns, r.um_ns) << "um " << r.um_ns << " ns";
  EXPECT_FALSE(r.um_faster);
}

TEST(ModeChoice, SwapIsAtLeastItsRemapping) {
  // The mover remaps each page swap's schedule moves: where that takes longer than the
  // link, swap's prediction is bound by it, and um (no remaps) is taken.
  const std::vector<std::uint32_t> order = two_passes(16);
  mode_costs costs;
  costs.run_ns = 0;    // every page remapped at its full cost
  costs.remap_ns = 0;  // buffers of a page each: the replays are the same, a tie is swap
  const mode_prediction quick = predict_modes(profile_of(16, 2 * MiB, order), 16 * MiB, costs);
  costs.remap_ns = 10'000'000;
  const mode_prediction slow = predict_modes(profile_of(16, 2 * MiB, order), 16 * MiB, costs);
  ASSERT_EQ(slow.swap_error, "");
  EXPECT_GT(slow.swap_remaps, 0u);
  EXPECT_EQ(slow.swap_replay_ns, quick.swap_replay_ns);
  EXPECT_EQ(quick.swap_ns, quick.swap_replay_ns);
  // The mover remaps one page at a time: at least their sum, and the link's work
  // between them at most adds the replay's time.
  EXPECT_GE(slow.swap_ns, slow.swap_remaps * costs.remap_ns);
  EXPECT_LE(slow.swap_ns, slow.swap_remaps * costs.remap_ns + 2 * slow.swap_replay_ns);
  EXPECT_GT(slow.swap_ns, slow.swap_replay_ns);
  EXPECT_TRUE(slow.um_faster);
  EXPECT_FALSE(quick.um_faster) << "swap " << quick.swap_ns << " ns, um " << quick.um_ns;
}

TEST(ModeChoice, SwapWhereBothAreEqual) {
  // Everything fits: both predict the iteration with enough memory; a tie is swap.
  const mode_prediction r = predict_modes(profile_of(64, MiB, scattered_order()), 1024 * MiB, {});
  ASSERT_EQ(r.swap_error, "");
  ASSERT_EQ(r.um_error, "");
  EXPECT_EQ(r.swap_ns, r.um_ns) << "um " << r.um_ns << " ns";
  EXPECT_FALSE(r.um_faster);
}

TEST(ModeChoice, VmmCallsThatWaitAddTheRemapsToSwap) {
  // See Note [Predicting swap against um] in policy/mode_choice.h: the device idles
  // through each remap, so swap takes the remaps' host time more, um nothing more.
  const std::vector<std::uint32_t> order = two_passes(16);
  const profiler::profile p = profile_of(16, 2 * MiB, order);
  mode_costs costs;
  const mode_prediction overlapped = predict_modes(p, 16 * MiB, costs);
  costs.vmm_waits = true;
  const mode_prediction waits = predict_modes(p, 16 * MiB, costs);
  ASSERT_EQ(waits.swap_error, "");
  ASSERT_GT(waits.swap_remaps, 0u);
  EXPECT_EQ(waits.um_ns, overlapped.um_ns);
  EXPECT_GT(waits.swap_ns, overlapped.swap_ns);
  // Between the remaps' cost with every page in a run of its own and with all in runs.
  EXPECT_GE(waits.swap_ns, overlapped.swap_ns + waits.swap_remaps * (costs.remap_ns - costs.run_ns));
  EXPECT_LE(waits.swap_ns, overlapped.swap_ns + waits.swap_remaps * costs.remap_ns);
}

TEST(ModeChoice, UmAtTheManagedRatesMeasured) {
  // um's evictions are migrations to the host: at a sixth of the copy rate (an H200's)
  // its prediction grows, swap's does not.
  const profiler::profile p = profile_of(64, MiB, scattered_order());
  mode_costs costs;
  const mode_prediction copies = predict_modes(p, 16 * MiB, costs);
  costs.managed_to_device_bytes_per_s = costs.link_bytes_per_s;
  costs.managed_to_host_bytes_per_s = costs.link_bytes_per_s / 6;
  const mode_prediction slow = predict_modes(p, 16 * MiB, costs);
  ASSERT_EQ(slow.um_error, "");
  EXPECT_EQ(slow.swap_ns, copies.swap_ns);
  EXPECT_GT(slow.um_ns, copies.um_ns * 3 / 2) << "at the copy rates " << copies.um_ns << " ns";
}

// See Note [um's units] in policy/mode_choice.h: 64 buffers of 4 KiB used in turn,
// twice, hold 256 KiB of bytes, which fit in 2 MiB, but 4 MiB of 64 KiB pages, which do
// not: um must move them.
TEST(ModeChoice, UmUnitsHoldWholeManagedPages) {
  const std::vector<std::uint32_t> order = two_passes(64);
  const profiler::profile p = profile_of(64, 4096, order);
  mode_costs costs;
  costs.managed_page_bytes = 64 * 1024;
  const mode_prediction pages = predict_modes(p, 2 * MiB, costs);
  ASSERT_EQ(pages.um_error, "");
  EXPECT_GT(pages.um_ns, pages.unlimited_ns);
  costs.managed_page_bytes = 4096;
  const mode_prediction bytes = predict_modes(p, 2 * MiB, costs);
  ASSERT_EQ(bytes.um_error, "");
  EXPECT_EQ(bytes.um_ns, bytes.unlimited_ns) << "in pages of their own size they fit";
}

// See Note [um's units] in policy/mode_choice.h.
TEST(ModeChoice, UmUnitsAreTheBuffersTheBackendReuses) {
  iteration_model m;
  auto buffer = [&](std::size_t bytes, std::uint32_t from, std::uint32_t to) {
    m.buffers.push_back(model_buffer{bytes, false, from, to, 0});
    return static_cast<buffer_id>(m.buffers.size() - 1);
  };
  const buffer_id a = buffer(4 * MiB, 0, 1);  // freed after launch 1
  const buffer_id c = buffer(4 * MiB, 1, 2);  // overlaps a: a unit of its own
  const buffer_id b = buffer(4 * MiB, 2, 3);  // a's size, allocated after a's free
  const buffer_id d = buffer(2 * MiB, 2, 3);  // another size
  m.buffers.push_back(model_buffer{8 * MiB, true, 0, 0, 0});
  const buffer_id w = static_cast<buffer_id>(m.buffers.size() - 1);
  const std::vector<std::vector<buffer_id>> uses = {{a, w}, {a, c}, {b, c, d}, {b, d, w}};
  for (const auto& u : uses) m.launches.push_back(model_launch{10'000, u, {u[0]}, true});
  const iteration_model units = managed_units(m);
  ASSERT_EQ(units.buffers.size(), 4u);  // w, a and b, c, d
  for (const model_buffer& x : units.buffers) EXPECT_TRUE(x.long_lived);
  ASSERT_EQ(units.launches.size(), 4u);
  // a and b are one unit; c, d and w units of their own.
  const buffer_id ua = units.launches[0].writes[0];
  EXPECT_EQ(units.launches[2].writes[0], ua);
  EXPECT_EQ(units.launches[3].writes[0], ua);
  EXPECT_EQ(units.buffers[ua].bytes, 4 * MiB);
  EXPECT_EQ(units.launches[1].uses.size(), 2u);
  EXPECT_EQ(units.launches[2].uses.size(), 3u);
  EXPECT_EQ(units.launches[3].uses.size(), 3u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(units.launches[i].duration_ns, 10'000u);
}

// See Note [um's units] in policy/mode_choice.h: 160 KiB buffers hold three 64 KiB
// managed pages each (a fifth more than their bytes), five 32 KiB ones exactly.
TEST(ModeChoice, UmMovesWholeManagedPages) {
  const profiler::profile p = profile_of(64, 160 * 1024, scattered_order());
  mode_costs costs;
  costs.link_bytes_per_s = 1e9;  // the link, not the launches, bounds the iteration
  costs.managed_page_bytes = 32 * 1024;
  const mode_prediction exact = predict_modes(p, 6 * MiB, costs);
  costs.managed_page_bytes = 64 * 1024;
  const mode_prediction rounded = predict_modes(p, 6 * MiB, costs);
  ASSERT_EQ(exact.um_error, "");
  ASSERT_EQ(rounded.um_error, "");
  EXPECT_GT(rounded.um_ns, exact.um_ns * 11 / 10) << "whole pages " << rounded.um_ns << " ns";
  EXPECT_EQ(rounded.swap_ns, exact.swap_ns);
}

// See Note [um's moves] in policy/mode_choice.h: a clean live unit's eviction and a
// fetch of a unit with no content yet migrate under um; a unit between two buffers'
// lives leaves with nothing copied, unless demand paging holds it (the driver migrates
// what it evicts).
TEST(ModeChoice, UmMigratesLiveUnitsAndDiscardsFreedOnes) {
  iteration_model m;
  m.buffers.push_back(model_buffer{8 * MiB, true, 0, 0, 0});   // w: long-lived
  m.buffers.push_back(model_buffer{4 * MiB, false, 0, 1, 0});  // a: freed after launch 1
  m.buffers.push_back(model_buffer{4 * MiB, false, 2, 3, 0});  // b: a's unit again
  m.buffers.push_back(model_buffer{32 * MiB, false, 0, 1, 0});  // big: paged on demand
  for (const std::vector<buffer_id>& u :
       std::vector<std::vector<buffer_id>>{{0, 1, 3}, {1, 3}, {2}, {0, 2}}) {
    m.launches.push_back(model_launch{10'000, u, {}, true});
  }
  unit_lives lives;
  const iteration_model units = managed_units(m, &lives);
  ASSERT_EQ(units.buffers.size(), 3u);
  const buffer_id w = units.launches[0].uses[0];
  const buffer_id a = units.launches[2].uses[0];
  const buffer_id big = units.launches[1].uses[1];
  EXPECT_EQ(a, units.launches[0].uses[1]) << "a and b share a unit";
  schedule plan;
  plan.launches.resize(4);
  plan.evict_at_start = {evict_action{a, true}};
  plan.launches[0].evict_after = {evict_action{w, false}};  // clean
  plan.launches[1].evict_after = {evict_action{a, true}, evict_action{big, true}};  // freed
  plan.launches[2].fetch_before = {fetch_action{a, false}};  // no content yet
  plan.launches[2].evict_after = {evict_action{a, false}};   // b live, clean
  plan.end_fetches = {fetch_action{w, false}};
  schedule migrated = plan;
  um_moves(units, lives, 16 * MiB, false, migrated);
  EXPECT_TRUE(migrated.launches[1].evict_after[0].copy_out) << "no discards: a migrates";
  EXPECT_TRUE(migrated.evict_at_start[0].copy_out);
  um_moves(units, lives, 16 * MiB, true, plan);
  EXPECT_FALSE(plan.evict_at_start[0].copy_out) << "no buffer in a's unit yet";
  EXPECT_TRUE(plan.launches[0].evict_after[0].copy_out) << "w's content is live";
  EXPECT_FALSE(plan.launches[1].evict_after[0].copy_out) << "a was freed after launch 1";
  EXPECT_TRUE(plan.launches[1].evict_after[1].copy_out) << "paged on demand: migrated";
  EXPECT_TRUE(plan.launches[2].fetch_before[0].copy_in);
  EXPECT_TRUE(plan.launches[2].evict_after[0].copy_out) << "b lives until launch 3";
  EXPECT_TRUE(plan.end_fetches[0].copy_in);
}

// See Note [um's moves] in policy/mode_choice.h: sixteen activations of distinct sizes
// (one unit each, none large enough to be paged on demand), each used by two launches
// and freed, in room for a third of them: units leave dead, by a discard that holds the
// stream to the host for its pages, and later ones come into their room; where the
// driver discards nothing, they migrate.
TEST(ModeChoice, UmDiscardsFreedUnitsAtTheirCostPerPage) {
  profiler::profile p;
  p.program = "mode_choice_test";
  p.strings.push_back("k");
  for (std::uint32_t k = 0; k < 16; ++k) {
    profiler::allocation_record a;
    a.ordinal = k;
    a.bytes = MiB + k * 64 * 1024;
    a.address = 0x1000000 + k * 2 * MiB;
    a.alloc_at = 2 * k;
    a.free_at = 2 * k + 2;
    p.allocations.push_back(a);
    for (int use = 0; use < 2; ++use) p.launches.push_back(launch_on(k));
  }
  mode_costs costs;
  costs.managed_to_host_bytes_per_s = 1e9;  // a migration out: about 1 ms a unit
  costs.managed_discard_page_ns = 1;
  const mode_prediction cheap = predict_modes(p, 8 * MiB, costs);
  ASSERT_EQ(cheap.um_error, "");
  costs.managed_discard_page_ns = 100'000;  // 1.6 ms for a unit of 16 pages or more
  const mode_prediction dear = predict_modes(p, 8 * MiB, costs);
  ASSERT_EQ(dear.um_error, "");
  EXPECT_GT(dear.um_ns, cheap.um_ns + 8 * 1'600'000) << "cheap discards: " << cheap.um_ns;
  costs.managed_discards = false;
  const mode_prediction none = predict_modes(p, 8 * MiB, costs);
  ASSERT_EQ(none.um_error, "");
  EXPECT_GT(none.um_ns, cheap.um_ns);
  EXPECT_LT(none.um_ns, dear.um_ns);
  EXPECT_EQ(none.swap_ns, cheap.swap_ns);
}

// See Note [Predicting swap against um] in policy/mode_choice.h: um is taken only where
// predicted faster than swap by more than um_margin. swap's prediction grows with the
// cost of a remap.
// See Note [The room um's driver has] in policy/mode_choice.h: with migrations to the
// host at a sixth of the copy rate, um's fetches wait for their room; the device's room
// beyond the engine's capacity holds the ones that run ahead of them.
TEST(ModeChoice, UmFetchesRunAheadOfTheMigrationsInTheDevicesRoom) {
  // A forward pass over 32 buffers of 1 MiB, 10 us a launch, then a backward pass of 1
  // ms launches in reverse: the forward waits for room from the migrations to the host,
  // which the backward leaves idle.
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < 32; ++i) order.push_back(i);
  for (std::uint32_t i = 32; i-- > 0;) order.push_back(i);
  profiler::profile p = profile_of(32, MiB, order);
  for (std::size_t k = 32; k < p.launches.size(); ++k) p.launches[k].duration_ns = 1'000'000;
  mode_costs costs;
  costs.managed_to_device_bytes_per_s = costs.link_bytes_per_s;
  costs.managed_to_host_bytes_per_s = costs.link_bytes_per_s / 6;
  const mode_prediction booked = predict_modes(p, 16 * MiB, costs);
  costs.managed_room_bytes = 8 * MiB;  // less than the capacity: the capacity
  const mode_prediction less = predict_modes(p, 16 * MiB, costs);
  costs.managed_room_bytes = 20 * MiB;
  const mode_prediction room = predict_modes(p, 16 * MiB, costs);
  ASSERT_EQ(room.um_error, "");
  EXPECT_EQ(less.um_ns, booked.um_ns);
  EXPECT_LT(room.um_ns, booked.um_ns);
  EXPECT_GT(room.um_ns, room.unlimited_ns);  // the plan's moves are still made
  EXPECT_EQ(room.swap_ns, booked.swap_ns);   // swap's arena holds the capacity only
}

TEST(ModeChoice, UmOnlyWhereFasterByTheMargin) {
  const std::vector<std::uint32_t> order = two_passes(16);
  const profiler::profile p = profile_of(16, 2 * MiB, order);
  mode_costs costs;
  costs.run_ns = 0;
  bool within = false, beyond = false;
  for (std::uint64_t remap = 1'000; remap < 2'000'000 && !(within && beyond); remap += 1'000) {
    costs.remap_ns = remap;
    const mode_prediction r = predict_modes(p, 16 * MiB, costs);
    ASSERT_EQ(r.um_error, "");
    const double um_over_swap = static_cast<double>(r.um_ns) / static_cast<double>(r.swap_ns);
    if (um_over_swap < 1.0 && um_over_swap > 1.0 - um_margin + 0.01) {
      within = true;
      EXPECT_FALSE(r.um_faster) << "um at " << um_over_swap << " of swap";
    } else if (um_over_swap < 1.0 - um_margin - 0.01) {
      beyond = true;
      EXPECT_TRUE(r.um_faster) << "um at " << um_over_swap << " of swap";
    }
  }
  EXPECT_TRUE(within);
  EXPECT_TRUE(beyond);
}

// See Note [Launches over the room] in policy/iteration_model.h: swap plans a launch of
// 32 pages in a room of 8 with 24 of them read in host memory, no faster than the link
// copies them; um has no plan.
TEST(ModeChoice, SwapPredictedWhereALaunchExceedsTheCapacity) {
  const mode_costs costs;
  const mode_prediction r = predict_modes(profile_of(2, 64 * MiB, {0, 1}), 16 * MiB, costs);
  EXPECT_EQ(r.swap_error, "");
  EXPECT_NE(r.um_error, "");
  EXPECT_FALSE(r.um_faster);
  const double host_reads_ns = 2 * 48.0 * MiB / costs.link_bytes_per_s * 1e9;
  EXPECT_GE(static_cast<double>(r.swap_ns), host_reads_ns);
  EXPECT_LT(static_cast<double>(r.swap_ns), 2 * host_reads_ns);
  // A room of 48 pages, where the plan leaves headroom out (Note [Headroom] in
  // policy/schedule.h) but not from a launch that fills the room.
  const mode_prediction big = predict_modes(profile_of(2, 160 * MiB, {0, 1}), 96 * MiB, costs);
  EXPECT_EQ(big.swap_error, "");
  EXPECT_GE(static_cast<double>(big.swap_ns), 2 * 64.0 * MiB / costs.link_bytes_per_s * 1e9);
}

TEST(ModeChoice, NoPredictionWithoutLaunches) {
  const mode_prediction r = predict_modes(profile_of(2, MiB, {}), 16 * MiB, {});
  EXPECT_NE(r.swap_error, "");
  EXPECT_NE(r.um_error, "");
  EXPECT_FALSE(r.um_faster);
}

}  // namespace
}  // namespace oversub::policy
