// Tests that pin how close the cost policy comes to issue 7's goals on iterations
// small enough to reason about by hand (docs/design/policy.md, "How close to the bound"):
// - a ring of long-lived buffers, each used once per iteration: the link is the
//   bottleneck and both directions can overlap, so the transfer bound is reachable
//   up to a few buffers' trips; cost must come within 1.15x of it (before Note
//   [Pipeline room] in policy/schedule.cc: 2.01x, the directions in series);
// - a compute-bound chain: cost must stay within 1.10x of T_unlimited;
// - an MLP training step shaped like simtrain (weights, gradients and two optimizer
//   states per layer, every use a write as in a profile) at 78% of its peak (the
//   30.40 MiB of 39.20 MiB point of docs/simulate.md): cost must move no more bytes
//   than lru and be faster than lru and vdnn-all (before Note [Plan then hoist] in
// policy/schedule.cc it   moved 2.1x lru's bytes and was slower than both), and at 55% of
// the peak   within 1.75x of the bound (Note [Gap key] in policy/schedule.cc);
// - no copy out that is not needed: on every shape, cost copies a buffer out only
//   when its host copy is stale and its content is needed later.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "policy/schedule.h"
#include "policy/schedule_check.h"
#include "policy/simulate.h"
#include "synthetic_iterations.h"

namespace oversub::policy {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

cost_model link_of(double bytes_per_s) {
  cost_model c;
  c.h2d_bytes_per_s = c.d2h_bytes_per_s = bytes_per_s;
  c.copy_setup_ns = 1000;
  c.launch_latency_ns = 5000;
  return c;
}

simulation planned(const iteration_model& m, std::size_t cap, const cost_model& c,
                   policy_kind kind) {
  const schedule_result r = plan_schedule(m, cap, c, kind);
  EXPECT_TRUE(r.ok()) << policy_name(kind) << ": " << r.error;
  EXPECT_EQ(check_schedule(m, r.value), "") << policy_name(kind);
  simulation s = simulate(m, r.value, c);
  EXPECT_EQ(s.error, "") << policy_name(kind);
  return s;
}

// `count` long-lived buffers of `bytes`, launch k reads and writes buffer k.
iteration_model ring(int count, std::size_t bytes, std::uint64_t duration_ns) {
  iteration_model m;
  for (int k = 0; k < count; ++k) {
    m.buffers.push_back({bytes, true, 0, 0});
    const auto b = static_cast<buffer_id>(k);
    m.launches.push_back({duration_ns, {b}, {b}, true});
  }
  return m;
}

// A fully connected network of `depth` layers, shaped like simtrain's profile
// (tests/workloads): forward (matmul, activation), a loss, backward (data and weight
// gradients) with an Adam-like step per layer as soon as its gradient is ready.
// Weights, gradients and the two optimizer states are long-lived (`weight` bytes
// each), activations and their gradients per-iteration (`activation` bytes).
// Writes are unknown, as in a profile: every use counts as a write.
iteration_model mlp_step(int depth, std::size_t weight, std::size_t activation) {
  iteration_model m;
  auto buffer = [&](std::size_t bytes, bool long_lived) {
    m.buffers.push_back({bytes, long_lived, 0, 0});
    return static_cast<buffer_id>(m.buffers.size() - 1);
  };
  auto launch = [&](std::uint64_t ns, std::vector<buffer_id> uses) {
    m.launches.push_back({ns, std::move(uses), {}, false});
  };
  struct layer { buffer_id w, dw, m1, m2; };
  std::vector<layer> layers;
  for (int k = 0; k < depth; ++k) {
    layers.push_back({buffer(weight, true), buffer(weight, true), buffer(weight, true),
                      buffer(weight, true)});
  }
  std::vector<buffer_id> x{buffer(activation, false)};  // x[k]: input of layer k
  launch(500, {x[0]});                                   // load the batch
  for (int k = 0; k < depth; ++k) {
    const buffer_id y = buffer(activation, false);
    launch(2600, {x.back(), layers[k].w, y});  // y = x W
    const buffer_id z = buffer(activation, false);
    launch(500, {y, z});                       // z = relu(y)
    x.push_back(z);
  }
  const buffer_id g_last = buffer(activation, false);
  launch(300, {x.back(), g_last});  // loss and its gradient
  m.backward_begin = static_cast<std::uint32_t>(m.launches.size() - 1);
  buffer_id g = g_last;
  for (int k = depth - 1; k >= 0; --k) {
    launch(2600, {g, x[static_cast<std::size_t>(k)], layers[k].dw});  // dW = x^T g
    const buffer_id g_in = buffer(activation, false);
    launch(2600, {g, layers[k].w, g_in});                             // g_in = g W^T
    launch(3700, {layers[k].w, layers[k].dw, layers[k].m1, layers[k].m2});  // Adam
    g = g_in;
  }
  // Per-iteration lifetimes: first to last use.
  std::vector<bool> seen(m.buffers.size(), false);
  for (std::uint32_t i = 0; i < m.launches.size(); ++i) {
    for (buffer_id b : m.launches[i].uses) {
      if (!seen[b]) m.buffers[b].alloc_launch = i;
      seen[b] = true;
      m.buffers[b].free_launch = i;
    }
  }
  return m;
}

// Copies out that were not needed: the host copy was current (fetched and not
// written since) or the content was dead (a per-iteration buffer after its last use).
int needless_copy_outs(const iteration_model& m, const schedule& plan) {
  std::vector<std::int64_t> last_use(m.buffers.size(), -1);
  for (std::size_t i = 0; i < m.launches.size(); ++i) {
    for (buffer_id b : m.launches[i].uses) last_use[b] = static_cast<std::int64_t>(i);
  }
  std::vector<bool> host_current(m.buffers.size());
  for (buffer_id b = 0; b < m.buffers.size(); ++b) host_current[b] = m.buffers[b].long_lived;
  for (buffer_id b : plan.resident_at_start) host_current[b] = false;  // Note [Steady state] in policy/schedule.h
  int needless = 0;
  auto evict = [&](const evict_action& e, std::int64_t after) {
    const bool dead = !m.buffers[e.buffer].long_lived && last_use[e.buffer] <= after;
    if (e.copy_out && (host_current[e.buffer] || dead)) ++needless;
    if (e.copy_out) host_current[e.buffer] = true;
  };
  for (const evict_action& e : plan.evict_at_start) evict(e, -1);
  for (std::size_t i = 0; i < m.launches.size(); ++i) {
    for (buffer_id b : m.launches[i].uses) {
      if (launch_writes(m.launches[i], b)) host_current[b] = false;
    }
    for (const evict_action& e : plan.launches[i].evict_after) {
      evict(e, static_cast<std::int64_t>(i));
    }
  }
  return needless;
}

// 64 buffers of 256 KiB in 8 MiB at 1 GB/s: 8 MiB must leave and come back each
// iteration; copies out of one buffer overlap the copy in of the next, so the
// iteration can come within a trip or two of the bound (8.4 ms).
TEST(CostGoals, RingReachesTheTransferBound) {
  const cost_model c = link_of(1e9);
  const iteration_model m = ring(64, 256 * 1024, 10000);
  const std::size_t cap = 8 * mib;
  const std::uint64_t bound = transfer_bound_ns(m, cap, c);
  ASSERT_GT(bound, 5 * unlimited_iteration_ns(m, c));  // the link is the limit
  const simulation s = planned(m, cap, c, policy_kind::cost);
  EXPECT_LE(static_cast<double>(s.iteration_ns), 1.15 * static_cast<double>(bound))
      << "cost " << s.iteration_ns << " ns, bound " << bound << " ns";
}

// Pages (Note [Pipeline room] in policy/schedule.cc): the swap engine's view of simtrain
// --depth 8 --width 512 --batch 128 (the page model of its profile on the H100-PCIe
// model, `oversub simulate --granularity page`): 18 pages of 2 MiB, 71 launches,
// in 23.80 MiB (the bench's 1.5x). Backward brings a gradient/optimizer page in
// and sends one out per layer; with the capacity full, each copy in waits for the
// copy out before it. 1/16 of the capacity (1.49 MiB) leaves the hoist one page
// of room; a reserve of a whole page leaves it two: 0.441 ms against the window
// bound's 0.283 (0.608 ms with 1/16 only).
TEST(CostGoals, PagesLeaveAPageOfRoomForTheHoist) {
  const cost_model c = link_of(50e9);
  iteration_model m;
  const std::size_t page = 2 * mib;
  for (int b = 0; b < 18; ++b) m.buffers.push_back({page, true, 0, 0});
  m.launches = {
      {1311, {0, 1}}, {263, {0, 1}}, {1311, {2, 1}}, {264, {2, 1}},
      {394, {1}}, {1311, {3, 1}}, {264, {3, 1}}, {1311, {4, 1}},
      {264, {4, 1}}, {394, {1}}, {1311, {5, 1, 6}}, {264, {5, 1, 6}},
      {1311, {7, 1, 6}}, {264, {7, 6}}, {394, {1, 6}}, {1311, {8, 6}},
      {264, {8, 6}}, {1311, {9, 6}}, {264, {9, 6}}, {394, {6}},
      {152, {1, 6}}, {9, {1, 6}}, {9, {6}}, {1, {6}},
      {13, {6}}, {152, {1, 6}}, {5, {1, 6}}, {152, {1, 6}},
      {115, {1}}, {394, {6}}, {1311, {9, 10, 6}}, {133, {9, 10, 6}},
      {1311, {9, 6}}, {3677, {9, 10, 1}}, {393, {6}}, {1311, {8, 11, 6}},
      {132, {8, 11, 6}}, {1311, {8, 6}}, {393, {6}}, {3677, {8, 11, 9}},
      {393, {6}}, {1311, {7, 12, 1, 6}}, {132, {7, 12, 6}}, {1311, {7, 6}},
      {3677, {7, 12, 8}}, {393, {1, 6}}, {1310, {5, 13, 1, 6}}, {132, {5, 13, 6}},
      {1310, {5, 1, 6}}, {394, {1, 6}}, {3677, {5, 13, 7}}, {394, {1, 6}},
      {1311, {4, 14, 1, 6}}, {132, {4, 14, 1, 6}}, {1311, {4, 1, 6}}, {3677, {4, 14, 5}},
      {393, {1, 6}}, {1311, {3, 15, 1, 6}}, {132, {3, 15, 1, 6}}, {1311, {3, 1, 6}},
      {393, {1}}, {3677, {3, 15, 4}}, {393, {1}}, {1310, {2, 16, 1}},
      {132, {2, 16, 1}}, {1310, {2, 1}}, {3678, {2, 16, 3}}, {394, {1}},
      {1311, {0, 17, 1}}, {133, {0, 17, 1}}, {3678, {0, 17, 2}},
  };
  const std::size_t cap = 24953005;
  ASSERT_LT(cap / 16, page);
  const simulation s = planned(m, cap, c, policy_kind::cost);
  const std::uint64_t window = window_bound_ns(m, cap, c);
  EXPECT_LE(static_cast<double>(s.iteration_ns), 1.75 * static_cast<double>(window))
      << "cost " << s.iteration_ns << " ns, window bound " << window << " ns";
}

// The same ring with 1 ms launches: every copy can hide under compute.
TEST(CostGoals, ComputeBoundRingStaysNearUnlimited) {
  const cost_model c = link_of(1e9);
  const iteration_model m = ring(64, 256 * 1024, 1000000);
  const std::size_t cap = 8 * mib;
  ASSERT_EQ(transfer_bound_ns(m, cap, c), unlimited_iteration_ns(m, c));
  const simulation s = planned(m, cap, c, policy_kind::cost);
  EXPECT_LE(static_cast<double>(s.iteration_ns),
            1.10 * static_cast<double>(unlimited_iteration_ns(m, c)));
}

// The docs/simulate.md case: simtrain at 30.40 MiB of 39.20 MiB, where cost moved
// 29.18 MiB each way against lru's 12.15 MiB and was slower than lru and vdnn-all.
TEST(CostGoals, MlpStepMovesNoMoreThanLruAndIsFaster) {
  const auto device = synthetic::read_device_model("h100-pcie");
  const iteration_model m = mlp_step(8, mib, mib / 2);
  for (double fraction : {0.78, 0.55}) {
    const auto cap = static_cast<std::size_t>(fraction * static_cast<double>(peak_live_bytes(m)));
    const std::string what = "capacity " + std::to_string(fraction) + " of the peak";
    const simulation cost = planned(m, cap, device.costs, policy_kind::cost);
    const simulation lru = planned(m, cap, device.costs, policy_kind::lru);
    const simulation vdnn = planned(m, cap, device.costs, policy_kind::vdnn_all);
    EXPECT_LE(cost.h2d_bytes, lru.h2d_bytes) << what;
    EXPECT_LE(cost.d2h_bytes, lru.d2h_bytes) << what;
    EXPECT_LT(cost.iteration_ns, lru.iteration_ns) << what;
    EXPECT_LT(cost.iteration_ns, vdnn.iteration_ns) << what;
  }
  // See Note [Gap key] in policy/schedule.cc: optimizer state idle since the last step
  // leaves instead of fresh activations, so its copies out overlap the backward pass's
  // copies in: 1.65x the bound at 55% of the peak (1.87x with Belady's key alone).
  const auto cap = static_cast<std::size_t>(0.55 * static_cast<double>(peak_live_bytes(m)));
  const simulation cost = planned(m, cap, device.costs, policy_kind::cost);
  EXPECT_LE(static_cast<double>(cost.iteration_ns),
            1.75 * static_cast<double>(transfer_bound_ns(m, cap, device.costs)));
}

TEST(CostGoals, NoNeedlessCopyOut) {
  const auto device = synthetic::read_device_model("h100-pcie");
  {
    // The count sees what it should: um-naive migrates every eviction back, clean
    // weights included.
    const iteration_model vgg = synthetic::vgg_like(device, 8, 4);
    const schedule_result um = plan_schedule(
        vgg, static_cast<std::size_t>(static_cast<double>(peak_live_bytes(vgg)) / 3.0),
        device.costs, policy_kind::um_naive);
    ASSERT_TRUE(um.ok()) << um.error;
    EXPECT_GT(needless_copy_outs(vgg, um.value), 0);
  }
  std::vector<std::pair<std::string, iteration_model>> models;
  models.emplace_back("mlp", mlp_step(8, mib, mib / 2));
  models.emplace_back("vgg", synthetic::vgg_like(device, 8, 4));
  models.emplace_back("resnet", synthetic::resnet_like(device, 8));
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    models.emplace_back("random " + std::to_string(seed), synthetic::random_layered(seed, 40));
  }
  for (const auto& [name, m] : models) {
    for (double ratio : {1.5, 3.0, 10.0}) {
      const std::size_t cap = std::max<std::size_t>(
          static_cast<std::size_t>(static_cast<double>(peak_live_bytes(m)) / ratio),
          largest_launch_footprint(m).bytes);
      const schedule_result r = plan_schedule(m, cap, device.costs, policy_kind::cost);
      ASSERT_TRUE(r.ok()) << name << ": " << r.error;
      ASSERT_EQ(check_schedule(m, r.value), "") << name;
      EXPECT_EQ(needless_copy_outs(m, r.value), 0) << name << " at " << ratio << "x";
    }
  }
}

// A buffer read only (writes known) comes and goes without a copy out: in a ring
// of read-only buffers, the copies out are at most those of the buffers resident
// at the start (taken as newer than the host, Note [Steady state] in policy/schedule.h).
TEST(CostGoals, ReadOnlyBuffersLeaveWithoutCopy) {
  const cost_model c = link_of(1e9);
  iteration_model m = ring(32, 256 * 1024, 10000);
  for (model_launch& l : m.launches) l.writes.clear();  // read only
  const schedule_result r = plan_schedule(m, 4 * mib, c, policy_kind::cost);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(check_schedule(m, r.value), "");
  const simulation s = simulate(m, r.value, c);
  EXPECT_GT(s.h2d_bytes, 0u);
  EXPECT_LE(s.d2h_bytes, r.value.resident_at_start.size() * 256 * 1024);
  EXPECT_EQ(needless_copy_outs(m, r.value), 0);
}

}  // namespace
}  // namespace oversub::policy
