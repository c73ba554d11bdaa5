// Tests of the schedule: every policy's schedules pass the replay checker on random
// layered programs and on VGG/ResNet-like iterations at 1.5x, 3x and 10x
// oversubscription; an impossible launch is a clear error; the copy-out rule for
// clean buffers; the checker rejects broken schedules (or the rest proves
// nothing); the cost policy plans 10,000 launches fast.
#include "policy/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>

#include "policy/schedule_check.h"
#include "policy/simulate.h"
#include "synthetic_iterations.h"

namespace oversub::policy {
namespace {

constexpr policy_kind all_policies[] = {policy_kind::cost, policy_kind::vdnn_all,
                                        policy_kind::lru, policy_kind::um_naive};
constexpr double ratios[] = {1.5, 3.0, 10.0};

// The footprint divided by the ratio, but never below what one launch needs.
std::size_t capacity_for(const iteration_model& m, double ratio) {
  const auto cap = static_cast<std::size_t>(static_cast<double>(peak_live_bytes(m)) / ratio);
  return std::max(cap, largest_launch_footprint(m).bytes);
}

void expect_valid(const iteration_model& m, std::size_t cap, const cost_model& costs,
                  policy_kind kind, const std::string& what) {
  const schedule_result r = plan_schedule(m, cap, costs, kind);
  ASSERT_TRUE(r.ok()) << what << ": " << r.error;
  EXPECT_EQ(check_schedule(m, r.value), "") << what;
  EXPECT_LE(r.value.planned_peak_bytes, cap) << what;
  const simulation s = simulate(m, r.value, costs);
  EXPECT_EQ(s.error, "") << what;
  EXPECT_LE(s.peak_device_bytes, cap) << what;
  EXPECT_LE(s.peak_device_bytes_in_time, cap) << what;
  EXPECT_GE(s.iteration_ns, unlimited_iteration_ns(m, costs)) << what;
}

TEST(Schedule, RandomLayeredProgramsAreValidForEveryPolicyAndRatio) {
  const auto device = synthetic::read_device_model("h100-pcie");
  for (std::uint32_t seed = 1; seed <= 16; ++seed) {
    const iteration_model m = synthetic::random_layered(seed, 20 + static_cast<int>(seed) * 4);
    ASSERT_EQ(validate_model(m), "");
    for (double ratio : ratios) {
      for (policy_kind kind : all_policies) {
        expect_valid(m, capacity_for(m, ratio), device.costs, kind,
                     "seed " + std::to_string(seed) + " ratio " + std::to_string(ratio) + " " +
                         std::string(policy_name(kind)));
      }
    }
  }
}

TEST(Schedule, VggAndResnetLikeAreValidForEveryPolicyAndRatio) {
  const auto device = synthetic::read_device_model("titanx-maxwell");
  const iteration_model models[] = {synthetic::vgg_like(device, 8),
                                    synthetic::resnet_like(device, 8)};
  for (const iteration_model& m : models) {
    for (double ratio : ratios) {
      // These networks are deep enough that 10x is feasible without the floor.
      const auto cap = static_cast<std::size_t>(static_cast<double>(peak_live_bytes(m)) / ratio);
      ASSERT_GE(cap, largest_launch_footprint(m).bytes) << ratio;
      for (policy_kind kind : all_policies) {
        expect_valid(m, cap, device.costs, kind,
                     std::to_string(m.launches.size()) + " launches, ratio " +
                         std::to_string(ratio) + " " + std::string(policy_name(kind)));
      }
    }
  }
}

TEST(Schedule, EnoughMemoryMovesNothing) {
  const auto device = synthetic::read_device_model("h100-pcie");
  const iteration_model m = synthetic::resnet_like(device, 4);
  // vdnn_all offloads every activation whatever the capacity (its rule, tested below).
  for (policy_kind kind : {policy_kind::cost, policy_kind::lru, policy_kind::um_naive}) {
    const schedule_result r = plan_schedule(m, peak_live_bytes(m), device.costs, kind);
    ASSERT_TRUE(r.ok()) << r.error;
    const simulation s = simulate(m, r.value, device.costs);
    EXPECT_EQ(s.d2h_bytes, 0u) << policy_name(kind);
    // The first pass fetched the long-lived buffers; the steady state keeps them.
    EXPECT_EQ(s.h2d_bytes, 0u) << policy_name(kind);
    EXPECT_EQ(s.iteration_ns, unlimited_iteration_ns(m, device.costs)) << policy_name(kind);
  }
}

TEST(Schedule, LaunchAloneOverCapacityIsAClearError) {
  const auto device = synthetic::read_device_model("h100-pcie");
  const iteration_model m = synthetic::vgg_like(device, 4, 2);
  const largest_launch big = largest_launch_footprint(m);
  for (policy_kind kind : all_policies) {
    const schedule_result r = plan_schedule(m, big.bytes - 1, device.costs, kind);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error.find("launch " + std::to_string(big.launch) + " alone needs"),
              std::string::npos) << r.error;
    EXPECT_NE(r.error.find(std::to_string(big.bytes) + " bytes"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find(std::to_string(big.bytes - 1) + " bytes"), std::string::npos)
        << r.error;
    EXPECT_TRUE(plan_schedule(m, big.bytes, device.costs, kind).ok());
  }
}

TEST(Schedule, EdgeCases) {
  const auto device = synthetic::read_device_model("h100-pcie");
  for (policy_kind kind : all_policies) {
    const schedule_result empty = plan_schedule(iteration_model{}, 0, device.costs, kind);
    ASSERT_TRUE(empty.ok()) << empty.error;
    EXPECT_TRUE(empty.value.launches.empty());
    EXPECT_EQ(simulate(iteration_model{}, empty.value, device.costs).iteration_ns, 0u);

    // A long-lived buffer nobody uses, one used by every launch, capacity exactly
    // the largest launch.
    iteration_model m;
    m.buffers = {{1000, true, 0, 0}, {600, true, 0, 0}, {400, false, 1, 2}, {400, false, 2, 3}};
    m.launches = {{100, {1}, {}, false}, {100, {1, 2}, {2}, true},
                  {100, {1, 2, 3}, {3}, true}, {100, {1, 3}, {1}, true}};
    const schedule_result r = plan_schedule(m, 1400, device.costs, kind);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(check_schedule(m, r.value), "") << policy_name(kind);
  }
}

// Without backward_begin the boundary is where per-iteration bytes peak; vdnn-all
// still offloads the activations and stays valid.
TEST(Schedule, BoundaryFromThePeakOfLiveBytes) {
  const auto device = synthetic::read_device_model("titanx-maxwell");
  iteration_model m = synthetic::vgg_like(device, 8, 4);
  const std::uint32_t marked = *m.backward_begin;
  m.backward_begin.reset();
  const std::uint32_t found = backward_begin_of(m);
  // At or a few launches after the loss (gradients appear before the last
  // activations die), well before the middle of the backward pass.
  EXPECT_GE(found, marked);
  EXPECT_LT(found, marked + (m.launches.size() - marked) / 4) << m.launches.size();
  const auto cap = static_cast<std::size_t>(static_cast<double>(peak_live_bytes(m)) / 3.0);
  const schedule_result r = plan_schedule(m, cap, device.costs, policy_kind::vdnn_all);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(check_schedule(m, r.value), "");
  EXPECT_GT(simulate(m, r.value, device.costs).d2h_bytes, 0u);
}

TEST(Schedule, InvalidModelIsAnError) {
  iteration_model m;
  m.buffers.push_back({100, false, 0, 1});
  m.launches.push_back({10, {0}, {}, false});
  m.launches.push_back({10, {0, 7}, {}, false});
  const schedule_result r = plan_schedule(m, 1000, {}, policy_kind::cost);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("buffer 7"), std::string::npos) << r.error;
}

// Capacity for two of A, B, C (100 bytes each). A leaves with a copy at launch 2
// (for C), comes back at launch 3 and is only read there, so when B needs room at
// launch 4 A leaves again without a copy: its host copy is current. Unless launch
// 3's writes are unknown: then A counts as written and is copied out again.
iteration_model clean_eviction_model(bool writes_known) {
  iteration_model m;
  const buffer_id a = 0, b = 1, c = 2;
  m.buffers = {{100, false, 0, 5}, {100, false, 1, 5}, {100, false, 2, 4}};
  m.launches = {{1000, {a}, {a}, true},          {1000, {b}, {b}, true},
                {1000, {c, b}, {c}, true},       {1000, {a, c}, {c}, writes_known},
                {1000, {b, c}, {}, true},        {1000, {a, b}, {}, true}};
  return m;
}

TEST(Schedule, CleanBufferLeavesWithoutCopy) {
  cost_model costs;
  costs.h2d_bytes_per_s = costs.d2h_bytes_per_s = 1e9;
  for (bool known : {true, false}) {
    const iteration_model m = clean_eviction_model(known);
    const schedule_result r = plan_schedule(m, 200, costs, policy_kind::cost);
    ASSERT_TRUE(r.ok()) << r.error;
    ASSERT_EQ(check_schedule(m, r.value), "");
    bool clean_eviction_of_a = false;
    for (std::size_t i = 0; i < 4; ++i) {
      for (const evict_action& e : r.value.launches[i].evict_after) {
        if (e.buffer == 0 && !e.copy_out) clean_eviction_of_a = true;
      }
    }
    const simulation s = simulate(m, r.value, costs);
    EXPECT_EQ(clean_eviction_of_a, known);
    EXPECT_EQ(s.d2h_bytes, known ? 200u : 300u);  // A and B once; A twice if written
    EXPECT_EQ(s.h2d_bytes, 300u);                 // A, B, A back
  }
}

// See Note [Dead gaps] in core/dead_gaps.cc: pages A and B (long-lived, 100 bytes,
// room for one), used in turn; A's content is dead for the moves before launches 1
// and 2 (a block comes to it before launch 2). A leaves for B without a copy; its
// fetch before launch 2, after the new block, copies. B, whose content lives on, is
// copied out. Without the window both are copied both ways.
TEST(Schedule, DeadWindowMovesWithoutCopies) {
  cost_model costs;
  costs.h2d_bytes_per_s = costs.d2h_bytes_per_s = 1e9;
  iteration_model m;
  m.buffers = {{100, true, 0, 0}, {100, true, 0, 0}};
  m.launches = {{1000, {0}, {0}, true}, {1000, {1}, {1}, true}, {1000, {0}, {0}, true},
                {1000, {1}, {1}, true}};
  const auto bytes_moved = [&](const iteration_model& model) {
    const schedule_result r = plan_schedule(model, 100, costs, policy_kind::cost);
    EXPECT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(check_schedule(model, r.value), "");
    const simulation s = simulate(model, r.value, costs);
    return std::pair{s.h2d_bytes, s.d2h_bytes};
  };
  using moved = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(bytes_moved(m), (moved{400, 400}));
  m.dead_windows = {{0, 1, 2}};
  EXPECT_EQ(bytes_moved(m), (moved{400, 300}));
  // A window that wraps past the end: A's eviction after launch 2 copies nothing
  // either.
  m.dead_windows = {{0, 1, 2}, {0, 3, 0}};
  EXPECT_EQ(bytes_moved(m), (moved{400, 200}));
  // Fetches in a window copy nothing before its last launch.
  EXPECT_TRUE(dead_window_holds({0, 1, 3}, 2, 4, true));
  EXPECT_FALSE(dead_window_holds({0, 1, 3}, 3, 4, true));
  EXPECT_TRUE(dead_window_holds({0, 1, 3}, 3, 4, false));
  EXPECT_TRUE(dead_window_holds({0, 3, 1}, 4, 4, true));  // the end: the next launch 0
  EXPECT_FALSE(dead_window_holds({0, 3, 1}, 1, 4, true));
  EXPECT_FALSE(dead_window_holds({0, 3, 1}, 2, 4, false));
  // A copy-less move outside any window loses content: the checker says so.
  schedule_result r = plan_schedule(m, 100, costs, policy_kind::cost);
  ASSERT_TRUE(r.ok());
  m.dead_windows = {{0, 1, 2}};
  EXPECT_NE(check_schedule(m, r.value), "");
  m.dead_windows = {{0, 1, 4}};
  EXPECT_NE(validate_model(m).find("dead window of buffer 0"), std::string::npos);
}

TEST(Schedule, VdnnOffloadsEveryActivationAfterForward) {
  const auto device = synthetic::read_device_model("titanx-maxwell");
  const iteration_model m = synthetic::vgg_like(device, 8, 4);
  const schedule_result r = plan_schedule(m, peak_live_bytes(m), device.costs,
                                          policy_kind::vdnn_all);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(check_schedule(m, r.value), "");
  const std::uint32_t boundary = *m.backward_begin;
  std::vector<bool> offloaded(m.buffers.size(), false);
  for (std::uint32_t i = 0; i < boundary; ++i) {
    for (const evict_action& e : r.value.launches[i].evict_after) {
      if (e.copy_out) offloaded[e.buffer] = true;
    }
  }
  std::size_t activations = 0;
  for (buffer_id b = 0; b < m.buffers.size(); ++b) {
    const model_buffer& buf = m.buffers[b];
    if (buf.long_lived || buf.alloc_launch >= boundary || buf.free_launch < boundary) continue;
    ++activations;
    EXPECT_TRUE(offloaded[b]) << "activation " << b;
  }
  EXPECT_GT(activations, 10u);
  // Even with memory to spare the offloads cost time the cost policy does not pay.
  const simulation vdnn = simulate(m, r.value, device.costs);
  EXPECT_GT(vdnn.d2h_bytes, 0u);
}

// Breaks a valid schedule in one way at a time; the checker must say so.
TEST(Schedule, CheckerRejectsBrokenSchedules) {
  const auto device = synthetic::read_device_model("h100-pcie");
  const iteration_model m = synthetic::random_layered(3, 30);
  const schedule_result r = plan_schedule(m, capacity_for(m, 3.0), device.costs,
                                          policy_kind::cost);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(check_schedule(m, r.value), "");

  schedule tight = r.value;
  tight.capacity_bytes = simulate(m, r.value, device.costs).peak_device_bytes - 1;
  EXPECT_NE(check_schedule(m, tight).find("capacity"), std::string::npos);

  bool dropped_fetch = false, dropped_copy = false;
  for (std::size_t i = 0; i < m.launches.size(); ++i) {
    if (!dropped_fetch && !r.value.launches[i].fetch_before.empty()) {
      schedule s = r.value;
      s.launches[i].fetch_before.erase(s.launches[i].fetch_before.begin());
      EXPECT_NE(check_schedule(m, s), "") << "dropped a fetch before launch " << i;
      dropped_fetch = true;
    }
    for (std::size_t k = 0; k < r.value.launches[i].evict_after.size(); ++k) {
      const evict_action& e = r.value.launches[i].evict_after[k];
      if (dropped_copy || !e.copy_out || !m.buffers[e.buffer].long_lived) continue;
      schedule s = r.value;
      s.launches[i].evict_after[k].copy_out = false;
      EXPECT_NE(check_schedule(m, s).find("lost"), std::string::npos);
      dropped_copy = true;
    }
  }
  EXPECT_TRUE(dropped_fetch);
  EXPECT_TRUE(dropped_copy);

  schedule moved = r.value;
  moved.resident_at_start.clear();
  EXPECT_NE(check_schedule(m, moved), "");
}

// A fixed prefetch distance: no fetch is issued more than k launches before its
// use, and the schedule stays valid; far prefetch (0) hides more than distance 1.
TEST(Schedule, PrefetchDistanceBoundsHowEarlyFetchesStart) {
  const auto device = synthetic::read_device_model("titanx-maxwell");
  const iteration_model m = synthetic::resnet_like(device, 8);
  const auto cap = static_cast<std::size_t>(static_cast<double>(peak_live_bytes(m)) / 3.0);
  for (std::uint32_t k : {1u, 4u}) {
    const schedule_result r = plan_schedule(m, cap, device.costs, policy_kind::cost, k);
    ASSERT_TRUE(r.ok()) << r.error;
    ASSERT_EQ(check_schedule(m, r.value), "");
    for (std::size_t i = 0; i < m.launches.size(); ++i) {
      for (const fetch_action& f : r.value.launches[i].fetch_before) {
        // The fetched buffer is used within k launches (or at the next
        // iteration's start, for the last launches).
        bool used_soon = false;
        for (std::size_t j = i; j <= i + k; ++j) {
          const auto& uses = m.launches[j % m.launches.size()].uses;
          used_soon |= std::find(uses.begin(), uses.end(), f.buffer) != uses.end();
        }
        EXPECT_TRUE(used_soon) << "fetch of " << f.buffer << " before launch " << i;
      }
    }
  }
  const auto near = plan_schedule(m, cap, device.costs, policy_kind::cost, 1);
  const auto far = plan_schedule(m, cap, device.costs, policy_kind::cost);
  EXPECT_LT(simulate(m, far.value, device.costs).iteration_ns,
            simulate(m, near.value, device.costs).iteration_ns);
}

// CPU time of the planning (the process is single-threaded), so that other work on
// a shared machine does not fail the test; the cost policy plans several candidates
// and simulates each (Note [Plan then hoist] in policy/schedule.cc).
TEST(Schedule, CostPlansTenThousandLaunchesWellUnderASecond) {
  const auto device = synthetic::read_device_model("h100-pcie");
  const iteration_model m = synthetic::random_layered(11, 3400);
  ASSERT_GE(m.launches.size(), 10000u);
  const std::clock_t begin = std::clock();
  const schedule_result r = plan_schedule(m, capacity_for(m, 3.0), device.costs,
                                          policy_kind::cost);
  const double seconds = static_cast<double>(std::clock() - begin) / CLOCKS_PER_SEC;
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(check_schedule(m, r.value), "");
  RecordProperty("plan_seconds", std::to_string(seconds));
  EXPECT_LT(seconds, 1.0) << m.launches.size() << " launches";  // about 0.45 s (-O2)
}

// See Note [Headroom] in policy/schedule.h: 1/32 of the capacity in whole pages, or a
// batch of room where the engine gathers one, at most half the pages.
TEST(Schedule, HeadroomIsAThirtySecondOrABatchOfRoom) {
  constexpr std::size_t page = std::size_t{2} << 20;
  EXPECT_EQ(planning_capacity(57 * page, page), 56 * page);
  EXPECT_EQ(planning_capacity(57 * page, page, 1), 56 * page);
  EXPECT_EQ(planning_capacity(57 * page, page, 5), 52 * page);
  EXPECT_EQ(planning_capacity(320 * page, page, 5), 310 * page);  // the 1/32 is more
  EXPECT_EQ(planning_capacity(8 * page, page, 16), 4 * page);     // half the pages
  // Never below the largest launch's footprint (5 pages of 8), nor above the capacity.
  EXPECT_EQ(planning_capacity(8 * page, page, 16, 5 * page), 5 * page);
  EXPECT_EQ(planning_capacity(8 * page, page, 16, 9 * page), 8 * page);
  EXPECT_EQ(planning_capacity(20 * page, page), 20 * page);       // none below 32 pages
  EXPECT_EQ(planning_capacity(12345, 0, 5), 12345u);
}

}  // namespace
}  // namespace oversub::policy
