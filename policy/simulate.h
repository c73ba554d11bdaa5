// simulate: a what-if replay of one iteration under a schedule, in virtual time.
// A compute stream runs the launches in order; one host-to-device and one
// device-to-host copy stream run the schedule's copies in schedule order; events
// order a launch after the fetches of its own buffers, a copy out after the launch
// it follows, and a fetch after the device memory it needs has been released.
// This is what the residency benchmark and `oversub simulate` / `tune-batch` use.
//
// Note [Virtual time model]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// - The launching thread runs ahead (it is never the bottleneck): a fetch may start
//   as soon as its copy stream is free, the buffer's own copy out (if any) is done,
//   and the memory is there (and the mover's remap, below); the device memory in use
//   at any real time is at most the schedule's logical usage plus the releases it
//   counted on that are not done yet.
// - A copy takes copy_setup_ns + bytes / bandwidth; one copy at a time per direction
//   (with the mover, a fetched page that joins a run is copied with the run's first
//   page, as the engine copies a run in: no setup of its own).
// - A launch starts when the previous launch ended and its buffers' fetches are
//   done; it runs duration_ns. launch_latency_ns is paid once, at the start.
// - An eviction releases memory when its copy out ends (or, without a copy, when
//   the launch it follows ends and any fetch of the buffer still in flight ends; where
//   the cost model discards, cost_model::discard_page_ns, when its discard ends, which
//   takes its turn on the stream to the host as a copy out does).
// - The mover (Note [The mover] in residency/swap_mover.cc), where the cost model has
//   VMM costs (cost_model::remap_ns; `oversub simulate --granularity page` takes
//   them from the device model, buffer granularity and the models without the keys
//   have none, and then nothing below applies): one host thread, its own timeline,
//   remaps every page the schedule moves (fetches and evictions, with or without a
//   copy; none when everything fits), one page at a time, in schedule order. An
//   eviction's remap (cost_model::mover_evict_ns) starts when its copy out ends (or,
//   without a copy, when the launch it follows and any fetch of the page end) and
//   the mover is free; the memory is released, and the page is on the host, when it
//   ends. A fetch's remap (mover_fetch_ns) starts when the mover is free, the page is
//   on the host and the memory is there; it holds the memory from then, and its copy
//   in starts after the remap and the copy's enqueue. Runs (Note [Remapping runs] in
//   residency/swap_engine.h): the moves each way fall into windows of
//   run_window_moves (the schedule's next fetches the library's mover looks among for
//   a run's pages), each holding at most the plan's capacity in pages (Note [Runs
//   within the room]); the window's buffers that touch (model_buffer::address) are one
//   run, whatever their order, fetches max_run_pages pages at most (the mover's
//   longest; an eviction run takes every page whose copy out its wait covers). The
//   run's first move pays its shared unmap and access grant (cost_model::remap_ns;
//   their repeat figures where the run is grouped with the one before it, Note
//   [Grouped runs in the simulator]), the others their map and per-page parts;
//   simulation::runs counts the runs.
//   (Joining a page only to the moves of its batch of room, in time order, predicted
//   288 runs where the library made 189 at full-size ResNet-50, 3x, on the H200's
//   measured model, and the iteration 15% long; 1.5x 36% long. Windows of 128 moves
//   predicted 229 against 174, the iteration 5.5% long; at 1.5x 100 against 125.)
//   The launching thread still runs ahead. simulation::host_remap_ns is the mover's
//   busy time. The plan is made on the link alone, as the library's learner makes it
//   (tools/simulate/what_if.cc), with a batch of room left out where the mover
//   gathers one (cost_model::mover_batch_pages, Note [Headroom] in
//   policy/schedule.h).
//   Not modelled: the library's mover finishes an eviction only when a fetch wants
//   its room, and its launching thread begins an eviction's copy out after all work
//   enqueued by then, so a page's copy out and remap may come later than here.
// - The first iteration ends when the compute and both copy streams and the mover are
//   idle (simulation::first_iteration_ns); the iteration reported is the next one
//   (Note [The next iteration]).
//
// Note [Runs within the room]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run's pages are remapped in the same calls, so they are on the move together: a
// fetch's run is taken from the fetches the schedule has asked for and the mover has
// not begun, each asked with room for it (the plan holds a fetch's memory from the
// point that asks for it), and an eviction's from the pages still evicting, each still
// holding its device memory. Neither set ever holds more pages than the plan's
// capacity, so a window of moves (Note [Virtual time model]) ends where its pages would
// exceed the capacity, before run_window_moves where the room is smaller. Windows of 128
// moves whatever the room joined pages the library's mover never has together:
// ResNet-152 at 1/8 of its bytes, 10x (35 pages of room), on the H200's measured model
// with mapping calls that wait, the learner predicted 164 runs an iteration where its
// engine made 474, and 0.918 of the iteration; with the room's bound 305 runs for 456,
// and 0.960 (docs/results.md, "The simulator's runs within the room"). Without the
// waits the mover's runs hide behind the device's work and the points moved by 0.1% at
// most. Where the room holds run_window_moves pages or more, nothing changes.
//
// Note [Grouped runs in the simulator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine's mover remaps a batch's runs with the calls grouped by family: the
// evictions that make a fetch's room and that fetch, every unmap, then every map, then
// every access grant (Note [Calls grouped by family] in residency/page_runs.cc), and a
// call that repeats its family costs the device's repeat figure (vmm_unmap_repeat_ns,
// vmm_set_access_repeat_ns; Note [Repeated VMM calls] in
// tests/simgpu/driver/device_model.cc). So the replay charges a run those figures
// (mover_costs::grouped_run_ns) where the engine would have grouped it: an eviction's
// run that the mover begins the moment it ends another eviction's, and a fetch's run
// that begins the moment the mover ends the evictions whose room it waited for (the
// room free without them is less than the fetch). A fetch that had its room is a batch
// of its own in the engine (mover_fetch_locked) and pays the full figures, as does
// the first run after a fetch. The engine's timing of its calls fits a run's part over
// both kinds (Note [Remapping runs] in residency/swap_engine.h), so the batch of room
// counts the mean of the two (mover_costs::batch_run_ns): 7 pages on the H200's
// measured model, as the engine finds, where a lone run's part gave 10. Charging every
// run the full figures, `oversub simulate --granularity page` predicted ResNet-152 at
// 1/8 of its bytes, 10x (70 MiB of room), at 136.10 ms where the library runs 109.88;
// it now predicts 110.10 (docs/results.md, "The simulator groups a batch's runs").
//
// Note [Mapping calls that wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where cuMemMap, cuMemUnmap and cuMemSetAccess wait until the device has finished
// the work queued before them (mover_costs::calls_wait; the device model's
// vmm_waits_for_device, the pessimistic reading simgpu models: Note [VMM calls that
// wait] in tests/simgpu/driver/vmm.cc), a prefetch hides nothing. The launching thread
// runs ahead until a launch needs a page the mover has not handed over yet, so by the
// time the mover's calls for that page are made, every launch before its first user
// is queued, and each call waits for them. So with calls_wait the replay makes each
// fetch before the launch that first uses its buffer (from the schedule's fetch on;
// none in the iteration: where the schedule has it), and every remap, a fetch's or
// an eviction's, starts no earlier than the compute stream and both copy streams are
// idle; the copy in follows the remap, and that launch waits for it. Memory is taken
// later than the schedule asks, never earlier, so the capacity holds. At the five
// 1/8-scale trace points on the H200's measured model with the waits (`oversub
// simulate --granularity page` from each point's profile, against the library's
// iterations 5-8), the prediction went from 0.69-0.85 of the library's time (the
// waits not modelled) to 0.964-0.999 at four points and 1.12 at ResNet-50 3x
// (docs/results.md, "The simulator models mapping calls that wait"). A run of pages
// is still made when its own first page is wanted: moving a run's later pages with
// it, where the library's mover does, broke the capacity the schedule kept. The swap
// learner plans with it where its engine found the calls to wait at start (Note [Do
// VMM calls wait?] in core/device_pool.cc): at the same points its prediction went
// from 0.65-0.85 of the library's iteration to 0.93-1.03.
//
// Note [The next iteration]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A training job times an iteration among others, and the next iteration's launches
// do not wait for the copies the last one left under way (the fetches that restore
// its start state, the copies out after its last launches) unless they need them.
// Timing one iteration from an idle start state to every stream idle counted those
// tails in full: at full-size ResNet-50, 1.5x, on the H200's measured model, the
// learner's plan predicted 72.3 ms where the library ran it in 54.4, the copy streams
// busy up to 28 ms after the last launch. So simulate() replays the schedule twice,
// the second time from where the first left the streams, the mover and the pending
// releases, its first launch paying the launch latency again (the host waited for the
// previous iteration, as a training loop reading its loss does), and reports the
// second: from the first iteration's last launch to its own, and at least the busiest
// copy stream's or the mover's time in one iteration (a schedule that leaves more
// than that behind every time falls further behind each iteration).
//
// Note [Demand paging cost]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// For demand_paged schedules (um_naive) nothing overlaps: a launch first services
// the faults of its fetches (cost_model::fault_in_ns: one managed_fault_ns per
// managed page, or per buffer without demand paging, plus the transfer) and the
// migrations back of the evictions that made room (fault_out_ns), then runs. A
// first touch of a per-iteration buffer costs nothing: a caching allocator hands
// the framework pages already on the device (the most favourable reading for the
// baseline).
#ifndef OVERSUB_POLICY_SIMULATE_H
#define OVERSUB_POLICY_SIMULATE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/iteration_model.h"
#include "policy/schedule.h"

namespace oversub::policy {

struct simulation {
  // An iteration among others (Note [The next iteration]): the compute stream's time
  // from the previous iteration's last launch to its own, at least each copy stream's
  // and the mover's busy time in one iteration.
  std::uint64_t iteration_ns = 0;
  std::uint64_t stall_ns = 0;  // iteration_ns minus unlimited_iteration_ns
  // The first iteration alone, from the schedule's start state with every stream
  // idle to every stream idle again.
  std::uint64_t first_iteration_ns = 0;
  // The counts below, the peaks and launch_end_ns are the first iteration's (every
  // iteration moves the same).
  std::uint64_t h2d_bytes = 0;        // copied (or migrated) host to device
  std::uint64_t d2h_bytes = 0;        // copied (or migrated) device to host
  std::uint64_t h2d_copies = 0;
  std::uint64_t d2h_copies = 0;
  std::uint64_t discarded_bytes = 0;  // dropped by discards (cost_model::discard_page_ns)
  // The mover's busy time and the page moves it remapped (Note [Virtual time model]);
  // 0 without the cost model's VMM costs.
  std::uint64_t host_remap_ns = 0;
  std::uint64_t remaps = 0;
  std::uint64_t runs = 0;  // of those remaps, the ones that began a run
  std::size_t peak_device_bytes = 0;  // the most device bytes in the schedule's order
  // The most device bytes held at one instant of virtual time (a fetch holds memory
  // from its copy's start, an eviction until its copy out ends); never above the
  // capacity for a valid schedule (Note [Virtual time model]).
  std::size_t peak_device_bytes_in_time = 0;
  std::vector<std::uint64_t> launch_end_ns;  // when each launch ends
  std::string error;                  // non-empty: the schedule broke the capacity
};

// The iteration time with enough memory: launch latency plus every duration, ns.
std::uint64_t unlimited_iteration_ns(const iteration_model& model, const cost_model& costs);

// The lower bound for any schedule: max(T_unlimited, (peak_live - capacity) / the
// slower direction's bandwidth), ns. What does not fit must leave and come back,
// one direction at a time per byte.
std::uint64_t transfer_bound_ns(const iteration_model& model, std::size_t capacity_bytes,
                                const cost_model& costs);

// A lower bound for any valid schedule (check_schedule) that is tighter where the
// link is busy in both halves of the step: the iteration cut into consecutive
// windows of launches, each at least its compute, the bytes it must fetch over the
// host-to-device bandwidth and the bytes it must copy out over the device-to-host
// one; the cut that gives the most, ns. Never below T_unlimited. Note [Window bound].
std::uint64_t window_bound_ns(const iteration_model& model, std::size_t capacity_bytes,
                              const cost_model& costs);

// Note [Window bound]
// ~~~~~~~~~~~~~~~~~~~
// Take a window of launches [a, b] (from launch a's start to launch b's end).
// - Fetches: every buffer a launch of the window uses must be resident then; if it
//   already has content at a (long-lived, or per-iteration and first used before a)
//   and is not resident at a, its content is copied in inside the window (a use with
//   unknown writes may read, so a valid schedule copies it in). At a at most
//   capacity bytes are resident or being fetched, so the window copies in at least
//   (content bytes it uses - capacity).
// - Copies out: a buffer the window writes whose content is needed after b (long-
//   lived, or per-iteration and used after b) is either resident at b's end or was
//   copied out after its write, inside the window (memory is released only when the
//   copy out ends). So the window copies out at least (those bytes - capacity).
// - Compute: the window's launches run one after another. A launch whose own buffers
//   exceed the capacity (its footprint F) cannot have them all resident: swap runs it
//   with at least F - capacity of them read in host memory (Note [Launches over the
//   room] in policy/iteration_model.h), which lengthens the launch itself by those
//   bytes at costs.host_access_bytes_per_s (where it is known; its fetch term still
//   counts them, as a read crosses the link too).
// The window lasts at least the largest of the three, consecutive windows do not
// overlap, and the iteration lasts at least the launch latency plus their sum;
// window_bound_ns maximizes that sum over the cuts (dynamic programming over window
// ends). The transfer bound lets all (peak_live - capacity) bytes go out and come back
// concurrently; in a training step what does not fit at the peak is written in the
// forward half and read in the backward half, so both halves are link-bound, and the
// window bound sees it. Per-copy setup is left out (the bound stays a bound).
// Windows start and end on every launch up to window_grid launches; longer
// iterations use window_grid evenly spaced cut points (fewer cuts only lower it).
inline constexpr std::size_t window_grid = 1024;

// Replays `plan` (for `model`) in virtual time. The schedule should pass
// check_schedule; one that exceeds its capacity is reported in `error`.
simulation simulate(const iteration_model& model, const schedule& plan,
                    const cost_model& costs);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_SIMULATE_H
