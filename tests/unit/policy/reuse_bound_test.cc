// Tests of the reuse bound (policy/reuse_bound.h): hand-counted traffic floors on
// small iterations. Every policy's simulated traffic and time at or above it on the
// synthetic networks and random programs: simulate_test.cc, beside the window bound.
#include "policy/reuse_bound.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "policy/schedule.h"
#include "policy/simulate.h"
#include "synthetic_iterations.h"

namespace oversub::policy {
namespace {

using synthetic::byte_per_ns;

// Two long-lived buffers of 100 bytes used by alternate launches in a capacity of
// 100: each launch brings its buffer back, 200 bytes per iteration. Read-only, they
// leave without a copy; written, each leaves with one.
TEST(ReuseBound, AlternatingPairComesBackEveryLaunch) {
  iteration_model m;
  m.buffers = {{100, true, 0, 0}, {100, true, 0, 0}};
  m.launches = {{10, {0}, {}, true}, {10, {1}, {}, true}};
  const cost_model c = byte_per_ns();
  reuse_floor f = reuse_bound(m, 100, c);
  ASSERT_GT(f.iterations, 0u);
  // (K * 200 - 100) / K rounded up: the start state may hold one buffer.
  EXPECT_EQ(f.h2d_bytes, (f.iterations * 200 - 100 + f.iterations - 1) / f.iterations);
  EXPECT_EQ(f.d2h_bytes, 0u);
  EXPECT_EQ(f.ns, f.h2d_bytes);
  m.launches[0].writes = {0};
  m.launches[1].writes = {1};
  f = reuse_bound(m, 100, c);
  // Every interval from a write to the next one has the other launch inside: all of
  // it is copied out (but for the first launch's, which nothing came before: 100
  // bytes over the K iterations).
  EXPECT_GE(f.d2h_bytes, 198u);
  EXPECT_LE(f.d2h_bytes, 200u);
  // Room for both: nothing moves.
  f = reuse_bound(m, 200, c);
  EXPECT_EQ(f.h2d_bytes, 0u);
  EXPECT_EQ(f.d2h_bytes, 0u);
  EXPECT_EQ(f.ns, 20u);
  // A launch that does not fit: no schedule, no floor.
  f = reuse_bound(m, 99, c);
  EXPECT_EQ(f.iterations, 0u);
  EXPECT_EQ(f.ns, 20u);
  // Whole pages of 64 bytes: 199 bytes are at least 4 pages.
  m.launches[0].writes.clear();
  m.launches[1].writes.clear();
  f = reuse_bound(m, 100, c, 64);
  EXPECT_EQ(f.h2d_bytes, 256u);
}

// Where reuse is what costs: W (long-lived, 400 bytes) is read at launches 0 and 2;
// A (per-iteration, 400 bytes) is written at 1 and read at 3. In a capacity of 500
// the peak (800) is over by 300, which the transfer bound counts once. But each
// launch brings back what the one before pushed out: 300 of W at 1, so 300 of W
// back at 2 (pushing 300 of A out), 300 of A back at 3 (pushing W out), 300 of W
// back at 0: 900 bytes in per iteration, and 300 of A's out.
TEST(ReuseBound, SeesContentThatMustComeBack) {
  iteration_model m;
  m.buffers = {{400, true, 0, 0}, {400, false, 1, 3}};
  m.launches = {{10, {0}, {}, true},
                {10, {1}, {1}, true},
                {10, {0}, {}, true},
                {10, {1}, {}, true}};
  const cost_model c = byte_per_ns();
  const std::size_t cap = 500;
  const reuse_floor f = reuse_bound(m, cap, c);
  // Less the start state's share (500 bytes over the K iterations).
  EXPECT_GE(f.h2d_bytes, 890u);
  EXPECT_LE(f.h2d_bytes, 900u);
  // Copies out: W is never written; A's content (written at 1, read at 3) must
  // survive launch 2, where W takes 400 of the 500: 300 bytes go out.
  EXPECT_EQ(f.d2h_bytes, 300u);
  EXPECT_GT(f.ns, transfer_bound_ns(m, cap, c));
  for (policy_kind kind : {policy_kind::cost, policy_kind::vdnn_all, policy_kind::lru}) {
    const schedule_result r = plan_schedule(m, cap, c, kind);
    ASSERT_TRUE(r.ok()) << r.error;
    const simulation s = simulate(m, r.value, c);
    EXPECT_GE(s.h2d_bytes, f.h2d_bytes) << policy_name(kind);
    EXPECT_GE(s.d2h_bytes, f.d2h_bytes) << policy_name(kind);
  }
}

}  // namespace
}  // namespace oversub::policy
