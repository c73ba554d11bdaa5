// swap_schedule: swap mode's schedule, learned from the launches themselves and
// carried out ahead of them (OVERSUB_POLICY=cost or vdnn-all; lru has none).
//
// Note [A schedule over pages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What the residency engine moves is pages (2 MiB of
// the arena), and a training loop that repeats touches the same pages in the same
// order every iteration: the arena hands out the same addresses for the same
// allocation sequence, and weights never move. So the core learns the iteration
// where it acts, as the sequence of launches' page sets:
//   1. each launch's pages (from the hooks' argument scan) are interned as a token;
//   2. find_period (profiler/period.h) looks for the stretch that repeats at least
//      twice up to now; its last period is the iteration;
//   3. that period becomes a policy::iteration_model whose buffers are its pages
//      (long-lived, page-sized) and whose launches are its tokens, planned by
//      policy::plan_schedule with the engine's capacity;
//   4. from the next launch on, each launch that matches the expected token first
//      carries out the schedule: the evictions after the previous launch, then the
//      fetches before this one (the engine queues them on its copy streams, so they
//      overlap compute), then the on-demand prepare() as always. A launch that does
//      not match drops the schedule and learning starts over; on-demand residency
//      keeps every launch correct meanwhile.
//
// The schedule only moves pages earlier than on-demand would: correctness never
// depends on it (Note [Swap before any profile] in interpose/swap_hooks.h).
#ifndef OVERSUB_CORE_SCHEDULE_H
#define OVERSUB_CORE_SCHEDULE_H

#include <cstddef>
#include <cstdint>
#include <span>

#include "residency/swap_engine.h"

namespace oversub::core {

struct swap_schedule_stats {
  std::uint64_t learned = 0;      // schedules planned
  std::uint64_t period = 0;       // launches per iteration of the current one
  std::uint64_t pages = 0;        // pages it covers
  std::uint64_t followed = 0;     // launches that matched the schedule
  std::uint64_t deviations = 0;   // launches that did not (schedule dropped)
  // See Note [Launches the iteration did not have] in core/schedule.cc: launches of the
  // schedule passed over (the iteration did without them), and launches run on demand
  // while it was followed (it did not have them).
  std::uint64_t skipped = 0;
  std::uint64_t unplanned = 0;
  // The last deviation: its position in the period, the pages expected there and the
  // launch's, and how many of them both had.
  std::uint64_t deviation_position = 0;
  std::uint64_t deviation_expected_pages = 0;
  std::uint64_t deviation_pages = 0;
  std::uint64_t deviation_common_pages = 0;
  std::uint64_t plan_failures = 0;
  // See Note [CUPTI at rest] in profiler/cupti_source.h: how often the learner put
  // CUPTI at rest, and whether it rests now.
  std::uint64_t cupti_rests = 0;
  bool cupti_resting = false;
  // The current schedule's iteration as policy::simulate predicts it (the learner's
  // cost model, its pages as buffers), and the same iteration with enough memory, ns.
  std::uint64_t predicted_ns = 0;
  std::uint64_t predicted_unlimited_ns = 0;
  // The mover's remaps in that iteration, ns (Note [Predicting the remaps] in
  // core/schedule_costs.cc).
  std::uint64_t predicted_remap_ns = 0;
  // Its remaps (pages) and the runs they form.
  std::uint64_t predicted_remaps = 0;
  std::uint64_t predicted_runs = 0;
  // See Note [The mover's costs as followed] in core/schedule_costs.cc: the current
  // schedule's prediction when it was planned (predicted_ns then holds it again with
  // the costs of the batches timed since, once they are known).
  std::uint64_t planned_ns = 0;
  // See Note [Which part differs] in core/schedule_costs.cc: the last whole iteration the
  // schedule was followed for, as measured (0 before one): its time between the
  // launches that begin it on CUPTI's clock, the host time of the remaps the mover and
  // the launching thread made in it, their pages and runs, and the bytes moved.
  std::uint64_t measured_ns = 0;
  std::uint64_t measured_mover_remap_ns = 0;
  std::uint64_t measured_launch_thread_remap_ns = 0;
  std::uint64_t measured_remaps = 0;
  std::uint64_t measured_runs = 0;
  std::uint64_t measured_h2d_bytes = 0;
  std::uint64_t measured_d2h_bytes = 0;
  // The bytes that iteration moves each way in the prediction.
  std::uint64_t predicted_h2d_bytes = 0;
  std::uint64_t predicted_d2h_bytes = 0;
  // See Note [Choosing among schedules by measured time] (core/tuning.cc): the variant
  // followed (where its loop body starts in the learned period, pages left free),
  // whether the choice is made (1) or still being timed (0), how many variants were
  // timed, and the measured iteration of the first and of the one kept, ns.
  std::uint64_t rotation = 0;
  std::uint64_t free_pages = 0;
  std::uint64_t tuned = 0;
  std::uint64_t tune_trials = 0;
  std::uint64_t first_measured_ns = 0;
  std::uint64_t chosen_measured_ns = 0;
  // See Note [Timing on the device] in core/tuning.cc: loop starts the choice waited for
  // kernel records (the grid's and the lending variant's together).
  std::uint64_t tune_record_waits = 0;
};

// Before a launch on device whose ranges are about to be prepared: learn, and
// carry out the schedule's moves for this launch. May throw std::bad_alloc (it
// allocates and sorts), which the hook's guard turns into CUDA's error (Note [Nothing
// crosses the ABI edge] in interpose/abi_guard.h); does nothing with
// OVERSUB_POLICY=lru or naive.
// kernel: the function launched, or null (Note [A launch's token] in core/schedule.cc).
void schedule_before_launch(int device, std::span<const residency::byte_range> ranges,
                            const void* kernel = nullptr);

swap_schedule_stats schedule_stats() noexcept;

}  // namespace oversub::core

#endif  // OVERSUB_CORE_SCHEDULE_H
