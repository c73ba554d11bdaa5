// schedule: from a learned iteration, a device capacity and a cost model, which
// buffers to evict after which launch and which to fetch before which launch, so
// that every launch finds its buffers resident, device bytes never exceed the
// capacity, and fetches finish before their use whenever the link allows.
//
// Four policies, built on one planner state (policy/schedule.cc):
// - cost:     Belady with prefetch. Evicts the resident buffer whose next use is
//             farthest, measured as the time left before it must be back minus its
//             round trip (Note [Cost victim] in policy/schedule.cc); prefetches
//             upcoming buffers in order of next use as early as capacity allows (Note
//             [Prefetch cursor] in policy/schedule.cc). Also plans on demand only and
//             hoists each fetch as early as memory allows (Notes [Plan then hoist],
//             [Gap key], [Pipeline room] in policy/schedule.cc); the simulator keeps
//             the fastest plan.
// - vdnn_all: vDNN: offload every activation after its last forward use, fetch the
//             activations back in reverse order one step ahead in backward;
//             anything else on demand, evicting the least recently used.
// - lru:      on demand only: fetch at use, evict the least recently used.
// - um_naive: managed memory without hints: page faults at use charged to the
//             launch, least recently used eviction migrated back by the launch that
//             needed room, no prefetch.
//
// Pure computation, no CUDA. Never throws for a valid model; an impossible
// capacity is an error result.
#ifndef OVERSUB_POLICY_SCHEDULE_H
#define OVERSUB_POLICY_SCHEDULE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "policy/cost_model.h"
#include "policy/iteration_model.h"

namespace oversub::policy {

enum class policy_kind { cost, vdnn_all, lru, um_naive };

// "cost", "vdnn-all", "lru", "um-naive" (the OVERSUB_POLICY spelling).
std::string_view policy_name(policy_kind kind);

// Make a buffer resident before a launch.
struct fetch_action {
  buffer_id buffer = 0;
  // True: copy the host copy in. False: the buffer has no content yet (first use of
  // a per-iteration buffer): map memory only.
  bool copy_in = true;
};

// Release a buffer's device memory after a launch completes.
struct evict_action {
  buffer_id buffer = 0;
  // True: copy the content out first (the host copy is stale and the content is
  // needed later). False: the host copy is current, or the content is dead.
  bool copy_out = true;
};

// What to do around one launch. Order of execution at launch i: evict_after of
// launch i-1, then fetch_before of i (issued in this order), then launch i (waits
// only for the fetches of its own buffers), then evict_after of i.
struct launch_actions {
  std::vector<fetch_action> fetch_before;
  std::vector<evict_action> evict_after;
};

// Note [Steady state]
// ~~~~~~~~~~~~~~~~~~~
// The schedule is a loop body. It begins with resident_at_start resident (every
// other long-lived buffer on the host with a current copy, no per-iteration buffer
// present) and ends in that same state: after the last launch it evicts what is
// not in the set and fetches what is (end_fetches). The set is the state in which a
// first planning pass over the iteration ended, so the end is usually already there.
// For cost, when a second pass from that state evicts buffers before its first
// launch, a third pass plans from the set without them, and the simulator keeps the
// faster of the two.
// The device copies of resident_at_start are taken as newer than the host's (an
// eviction copies them out), which is safe whatever the last iteration wrote.
struct schedule {
  policy_kind policy = policy_kind::cost;
  std::size_t capacity_bytes = 0;
  std::vector<buffer_id> resident_at_start;  // long-lived, sorted
  std::vector<evict_action> evict_at_start;   // before launch 0's fetches
  std::vector<launch_actions> launches;       // one per launch of the model
  std::vector<fetch_action> end_fetches;      // after the last launch's evictions
  // um_naive: fetches are page faults serviced inside the launch and evictions are
  // migrations charged to the next launch (the simulator's demand paging model).
  bool demand_paged = false;
  // The most device bytes at any point of the schedule's own accounting.
  std::size_t planned_peak_bytes = 0;
};

// A schedule or why there is none.
struct schedule_result {
  std::string error;  // empty: `value` is valid
  schedule value;
  bool ok() const { return error.empty(); }
};

// Note [Headroom]
// ~~~~~~~~~~~~~~~
// The capacity a swap schedule is planned for, given the device
// bytes the engine may hold and its page size. The plan assumes that the room an
// eviction frees can be filled the moment its copy completes on the device; the
// engine can only remap it once the host has seen the copy complete (cuMemUnmap and
// cuMemMap are host calls), and the host, queueing work ahead of the device, sees
// it late or waits for it. So 1/32 of the capacity, in whole pages, is left out of
// the plan: the engine's fetches find room while the evictions that pay for it are
// still on their way out. None below 32 pages.
// Where the engine gathers room in batches (batch_pages > 1: two runs' own calls cost
// the copies of that many pages, Note [Remapping runs] in residency/swap_engine.h), a
// fetch waits until a batch of room is free, so at least a batch is left out, at most
// half the pages: otherwise the plan fills every page an eviction frees at once, and
// each fetch waits for the evictions of a whole batch. ResNet-50 at 1/8, 3x, on the
// H200's measured model (a batch of 5): 60.4 -> 55.0 ms per iteration over three runs
// each (T_unl 37.05; one page left out before, 4, 8 or 12 more: 55.0, 56.7, 57.7).
// The room left out never takes room the largest launch needs (launch_bytes, the
// footprint of policy::largest_launch_footprint): on a device of a few pages, half of
// them left out for a batch would leave no plan at all.
std::size_t planning_capacity(std::size_t capacity_bytes, std::size_t page_bytes,
                              std::size_t batch_pages = 1, std::size_t launch_bytes = 0);

// Note [Planned with the mover's costs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The cost policy keeps, of its candidate plans, the fastest in virtual time under the
// costs it is given. The library's learner gives it the mover's remap costs once its
// engine has timed them (Note [Predicting the remaps] in core/schedule_costs.cc), and
// every planner that predicts the library must too: `oversub simulate --granularity
// page` (and `oversub plan` through it) and auto's swap prediction planned on the link
// alone and charged the remaps only in the replay, so where the remaps, not the link,
// bound the iteration they kept a plan the library would not. Llama 3 8B bf16 on the
// H100-PCIe model at 114,216 MiB: that plan moved 110 GiB in and 120 out an iteration
// (3.56x T_unl), the plan with the remaps' costs 51 and 51 (1.99x); at 102,000 MiB
// both 2.14x, so more memory was predicted slower. At the device's 79 GiB 3.00x ->
// 2.76x; full-size ResNet-50 b32 on the H200's model 1.444x -> 1.420x (1.5x) and
// 2.399x -> 2.368x (3x); every 1/8 trace point of the benchmark as before.

// Plans one iteration. capacity_bytes: device bytes the schedule may use. An
// invalid model, or a launch whose own buffers exceed the capacity, gives an error
// naming the launch and the figures. prefetch_distance_launches (cost only; the
// OVERSUB_PREFETCH setting): 0 prefetches as far ahead as capacity allows (up to
// one iteration), k > 0 no further than k launches ahead. Runs in
// O(uses log buffers) per plan; cost makes four plans of two or three passes and
// simulates each (10,000 launches in about half a second).
schedule_result plan_schedule(const iteration_model& model, std::size_t capacity_bytes,
                              const cost_model& costs, policy_kind kind,
                              std::uint32_t prefetch_distance_launches = 0);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_SCHEDULE_H
