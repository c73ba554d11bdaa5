// reuse_bound: the fewest bytes any valid schedule (check_schedule) must copy in and
// copy out per steady-state iteration at a capacity, counting reuse: a buffer read in
// the forward half and again in the backward half comes back twice if it cannot
// stay. The transfer bound counts (peak_live - capacity) once; the window bound
// counts what one window cannot hold; neither sees content that must come back
// because it was pushed out between two uses. Note [Reuse bound].
#ifndef OVERSUB_POLICY_REUSE_BOUND_H
#define OVERSUB_POLICY_REUSE_BOUND_H

#include <cstddef>
#include <cstdint>

#include "policy/cost_model.h"
#include "policy/iteration_model.h"

namespace oversub::policy {

struct reuse_floor {
  // Per steady-state iteration, at least (rounded up to whole pages with page_bytes).
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_bytes = 0;
  // max(T_unlimited, h2d_bytes over the host-to-device bandwidth, d2h_bytes over the
  // device-to-host one), ns.
  std::uint64_t ns = 0;
  // Iterations unrolled (the fetch side loses capacity / iterations to the unknown
  // start state). 0: a launch's own buffers exceed the capacity (no schedule; the
  // figures are zero and ns is T_unlimited).
  std::uint32_t iterations = 0;
};

// page_bytes > 0: the engine moves whole pages of that size, so each direction's
// bytes per iteration is a whole number of pages (and at least the byte figure).
reuse_floor reuse_bound(const iteration_model& model, std::size_t capacity_bytes,
                        const cost_model& costs, std::size_t page_bytes = 0);

// Note [Reuse bound]
// ~~~~~~~~~~~~~~~~~~
// Unroll K iterations of the loop (per-iteration buffers are new content each time,
// long-lived ones carry over) and relax "a buffer is resident or not" to "any part of
// its bytes may be" (every real schedule is a relaxed one, so the relaxed minimum is
// below every real schedule's traffic).
// - Copies in. Each launch needs all its buffers' bytes resident; bytes of content
//   (long-lived, or per-iteration after its first use) that are not resident are
//   copied in. With bytes as unit pages this is paging with known future, and
//   Belady's rule is optimal: make room by dropping the bytes whose next use is
//   farthest (never for dead content, which is dropped at its last use), never the
//   launch's own (exchange argument: swapping which bytes go, until the nearer of
//   the two is used, saves its copy in and costs at most the farther one's). From an
//   empty device the K iterations copy in B bytes. A periodic schedule copying in F
//   per iteration from a start state of at most capacity bytes, run K times after
//   first copying in that state, is one of the schedules Belady beats: B <= K F + C,
//   so F >= (B - C) / K.
// - Copies out. Content written by launch w is needed up to r: the buffer's next
//   write (which may read it first), or, without one, a per-iteration buffer's last
//   use or, long-lived, beyond the horizon. Over the launches strictly between w and
//   r it is either resident throughout or copied out at least once after w (one
//   copy serves every use in between, so reads inside count no more). At launch t the
//   device holds t's own buffers plus the kept bytes of every such interval with t
//   inside it; counting a buffer of t through its interval (kept <= bytes) only
//   weakens that, so each launch t gives: sum of kept bytes of the intervals t is
//   inside + bytes of t's other buffers <= C. Every interval is then counted at
//   every launch inside it, and keeping as much as possible is interval packing: at
//   the first launch over capacity, drop the bytes of the intervals that end last
//   (optimal by the same exchange). The dropped bytes over K is the copy-out floor
//   (no start-state term: a start state's content counts as already on the host,
//   which only helps).
// K is up to 64, fewer when the iteration has many uses (K x uses at most 4M).
// It ignores time entirely: ns is only the link time of those bytes. The window
// bound (policy/simulate.h) sees time but not reuse; each is a bound, so the larger.

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_REUSE_BOUND_H
