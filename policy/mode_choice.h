// mode_choice: which of swap and um mode a saved profile's iteration is predicted to
// run faster in at a device's capacity, for OVERSUB_MODE=auto (Note [Choosing the mode]
// in core/mode_choice.h).
//
// Note [Predicting swap against um]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each mode is predicted as the library runs it once it has learned the iteration:
// - swap: the learner's cost schedule over the arena's 2 MiB pages (Note [Page model]
//   in policy/page_model.h), in the long-lived layout swap mode takes from the same
//   profile (choose_long_lived_layout), that layout's schedule replayed with the
//   mover (Note [The mover] in residency/swap_mover.cc): each page the schedule
//   fetches or evicts is remapped by one host thread (cuMemUnmap, cuMemMap,
//   cuMemSetAccess), remap_ns each, less the run's shared part (run_ns) for a page
//   that joins a run and less run_ns - run_repeat_ns for a run remapped in the same
//   calls as the one before it (Note [Grouped runs in the simulator] in
//   policy/simulate.h), one after another, an eviction's after its copy
//   out and before its room is free, a fetch's before its copy in (Note [Virtual
//   time model] in policy/simulate.h); never below the replay without it. Where the
//   device's VMM calls wait until the device has finished the work already enqueued
//   (mode_costs::vmm_waits, measured at start: Note [Do VMM calls wait?] in
//   core/device_pool.cc), a remap first drains the device's queue, and the device
//   has nothing to run while the remap lasts: swap is that replay plus the host time
//   of every remap. At 1/8 of ResNet-50, GPT-2 and VGG-16 under SIMGPU_VMM_WAIT=1
//   on the H200's measured model this is 0.997 and 1.038 of the library's iteration
//   at ResNet-50 1.5x and 3x, 0.972 and 0.910 at GPT-2, 0.987 at VGG-16 (1.092,
//   1.117, 0.989, 0.931 and 1.003 with every run at its full cost; docs/results.md,
//   "The simulator groups a batch's runs"); counting nothing overlapped
//   (the unlimited iteration plus every copy plus every remap) was 12-56% high at four
//   of the five and took um at all five where swap was faster at four.
// - um: the learner's cost schedule over whole buffers (Note [What the learner moves]
//   in core/schedule_internal.h; Note [um's units] below), planned at the same planning capacity (Note
//   [Headroom] in policy/schedule.h) and replayed, its copies at the rates the driver
//   migrates managed memory where they were measured (mode_costs), which to the host
//   can be a sixth of the copy rate. The um backend leaves a buffer
//   larger than a quarter of the capacity to demand paging (Note [Large managed
//   buffers] in residency/um_engine.cc): each of the schedule's copies in of such a
//   buffer is charged as page faults (cost_model::fault_in_ns) and each copy out as a
//   migration back (fault_out_ns), on top of the replay, where the copies overlapped
//   the compute and faults do not.
// Both use the same costs otherwise: the profile's measured link rates where usable
// (as choose_long_lived_layout takes them), else the stand-in, and the profile's
// kernel durations (Note [Duration model] in policy/profile_model.h where 0).
//
// Note [um's units]
// ~~~~~~~~~~~~~~~~~
// um's learner moves the managed buffers the backend holds, and the backend gives a
// freed one to the next allocation of its size, lowest address first (Note [Reused
// managed buffers] in residency/um_engine.h): a tensor of the forward pass and one of
// the backward pass of the same size are one buffer. So the prediction replays the
// profile's allocations and frees in launch order over such units, each per-iteration
// buffer taking the lowest free unit of its size, and plans the units, each living
// across iterations. Taking every tensor as a unit of its own instead counted four
// times the bytes the backend moves (GPT-2 at 1/8 and 1.5x: 8784 MiB each way per
// iteration in the plan, about 2000 out in the library). A unit's bytes are rounded up
// to whole managed pages, so each of its moves costs them: the driver migrates a page
// at a time, so a 4 KiB bias costs a 64 KiB page each way (at
// ResNet-50 1/8, 1.5x, on the H200's measured model, um's prefetches asked for 405 MB
// each way an iteration, and the driver moved 443). A unit also holds whole pages of
// the capacity: each managed allocation has pages of its own on the device, and the
// backend, which counts bytes, leaves the driver to evict what then does not fit,
// under the kernels (ResNet-152 b32 at 1/8: 1866 long-lived buffers of 90.4 MB in
// 190.1 MB of 64 KiB pages; docs/results.md, "um on a stricter simgpu"). Counting
// bytes, the prediction took um at ResNet-152 1.5x under the VMM waits for 107.5 ms
// where it ran 128.9 and swap 115.3; counting pages it predicts 120.0 and takes swap.
// Pages over bytes, predicted over run, on that model: ResNet-152 1.5x 0.834 -> 0.931,
// BERT-large 1.5x 0.980 -> 0.981, ResNet-50 b32 1.5x 0.992 -> 1.087 (59.1 ms where um
// ran 54.4: its headroom holds part of the pages), Llama 3.2 1B 1.5x and VGG-16 b256
// 1.5x unchanged (0.917, 1.048).
//
// Note [um's moves]
// ~~~~~~~~~~~~~~~~~
// The plan's moves are swap's: an eviction copies nothing where the host copy is
// current (the unit was not written since it came in) or the content is dead, a fetch
// nothing where the unit holds no content yet. um keeps one copy of each page: every
// move of a unit whose content is live migrates, however clean, and every fetch
// migrates (the driver brings a page in with its bytes, dead or not; simgpu's hostile
// reading of a discarded page, Note [Discards] in tests/simgpu/driver/managed.h). Only
// a unit between two buffers' lives leaves with nothing copied: the backend discards
// freed buffers (Note [Discarding freed buffers] in residency/um_engine.h), which holds
// its stream to the host a time per page (mode_costs::managed_discard_page_ns), as a
// migration would but for less. So um_moves rewrites the plan's copies before the
// replay: an eviction copies out exactly where the unit's content is live after its
// launch (everywhere, where the driver discards nothing), and every fetch copies in;
// and the replay holds the stream to the host for each eviction that copies nothing
// (cost_model::discard_page_ns).
//
// Note [The room um's driver has]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine's capacity is a count the um backend keeps, not the device's: it books a
// fetch's room as soon as the prefetches to the host that free it are enqueued
// (Note [um follows the schedule] in residency/um_engine.h), and the driver starts the
// prefetch to the device once that much device memory is truly free, the headroom the
// capacity leaves (Note [Swap capacity] in core/device_pool.cc) counting like any other
// (simgpu's hostile reading, Note [Room from migrations to the host] in
// tests/simgpu/driver/managed.h). So um's replay, which frees an eviction's room only
// when its migration ends, has the device's room (mode_costs::managed_room_bytes) for
// the plan made at the planning capacity: the headroom holds the fetches that run ahead
// of the migrations to the host, at 9.4 GB/s on an H200 the slowest of um's moves. At
// the planning capacity the replay stalled where the device had room: ResNet-152 b32 at
// 1/8 and 1.5x under the VMM waits, 16.2 ms of stall predicted (117.3 ms) where um ran
// 106.7, 11.9 of it in the forward pass while the migrations of its activations filled
// the stream to the host, as they did in the run (docs/results.md, "auto's um
// prediction: the room the driver has"). swap's capacity is the device memory its
// arena maps, so its replay keeps it.
//
// swap is taken unless um is predicted faster by more than um_margin (2.5%), or swap
// cannot be planned and um can. Left out: the host time of um's prefetch calls (the
// schedule's are the mover's, Note [um's mover] in residency/um_mover.cc), and the
// engines' distance from their plans. The two are not equally far: on the H200's
// measured model under the VMM waits, at 1/8 of the traces' bytes and 1.5x, swap's
// prediction ran 0.95-1.01 of swap's iteration. um's ran 0.92-1.00 of um's, and
// taking um wherever predicted faster at all took it at ResNet-152 b32, predicted 116.9
// ms against swap's 117.2, where um ran 124.1 and swap 117.4 (docs/results.md, "um:
// freed buffers discarded"); hence the margin. With um's work waiting for its own
// fetches only (Note [A fetch's own event] in residency/um_engine.cc) and its replay
// given the device's room (Note [The room um's driver has]), um's prediction runs
// 0.96-1.03 of um's iteration at eight points under the waits (1.19 at VGG-16 b256,
// from a profile recorded under um), on a simgpu whose copy engines serve a ready copy
// beside one that waits (Note [Copy engines serve ready copies] in
// tests/simgpu/driver/clock.h; before it VGG-16 b64's input copy waited behind
// prefetches held for room, 0.914). The margin is where the choices part: um predicted
// 2.1% faster at VGG-16 b64 and running 0.6% slower, 2.7% faster at GPT-2 b8 1.5x and
// running 6.5% faster; at 5% auto kept swap there. With 2.5% auto takes the faster mode
// at the nine points (docs/results.md, "simgpu: copy engines serve ready copies").
#ifndef OVERSUB_POLICY_MODE_CHOICE_H
#define OVERSUB_POLICY_MODE_CHOICE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "policy/iteration_model.h"
#include "policy/schedule.h"
#include "profiler/profile_format.h"

namespace oversub::policy {

// The device's figures the two predictions use.
struct mode_costs {
  double link_bytes_per_s = 25e9;         // where the profile measured no usable rate
  // Where the profile measured no usable rate, the rates of pinned copies timed at
  // start (Note [Pinned rates at start] in core/device_pool.cc), bytes/s, before the
  // stand-in above; 0: not timed.
  double timed_h2d_bytes_per_s = 0;
  double timed_d2h_bytes_per_s = 0;
  std::uint64_t copy_setup_ns = 10'000;
  double memory_bandwidth = 2e12;         // kernels the profile did not time
  // A managed fault of 64 KiB besides its migration: 3.5 us, what an H200 (driver 580)
  // gave for faults at 13.5 GB/s (docs/gpu-results.md, as scripts/gpu/calibrate.py
  // derives it for h200-measured.model).
  std::uint64_t managed_fault_ns = 3'512;
  std::size_t managed_page_bytes = 64 * 1024;
  // Host time to remap one 2 MiB page of swap mode's arena: cuMemUnmap 64 us, cuMemMap
  // 11 us and cuMemSetAccess 124 us, the p50s an H200 (driver 580) gave while a kernel
  // ran on another stream (docs/gpu-results.md; tests/simgpu/devices/h200-measured.model).
  // Training keeps the GPU busy, and the calls cost three to eight times their idle
  // figures then; the A100's published idle figures (63.5 us) made swap look cheaper
  // than a GPU runs it.
  std::uint64_t remap_ns = 199'000;
  // Of remap_ns, the part the pages of a run share (Note [Remapping runs] in
  // residency/swap_engine.h): the unmap's and the access grant's per-call parts, 64 and
  // 122 us on that H200.
  std::uint64_t run_ns = 186'000;
  // Of run_ns, what a run costs where the engine remaps it in the same calls as the run
  // before it (its evictions' runs and the fetch their room is for, Note [Grouped runs
  // in the simulator] in policy/simulate.h): the unmap's and the access grant's repeat
  // figures, 20 and 34 us on that H200.
  std::uint64_t run_repeat_ns = 54'000;
  // The device's VMM calls wait for the work already enqueued (Note [Predicting swap
  // against um]).
  bool vmm_waits = false;
  // The rates at which the driver migrates managed memory to the device and to the
  // host, bytes/s, as measured at start (Note [Managed migration rates, measured] in
  // core/device_pool.cc); 0: the copy rates.
  double managed_to_device_bytes_per_s = 0;
  double managed_to_host_bytes_per_s = 0;
  // Whether the driver discards managed memory (cuMemDiscardBatchAsync; where it does
  // not, um migrates a freed buffer as any other), and a discard's cost per 64 KiB page
  // on the stream to the host as measured at start (Note [Managed migration rates,
  // measured] in core/device_pool.cc); 0: a fault's own part (managed_fault_ns),
  // simgpu's reading of a discard where none was measured (Note [Discards] in
  // tests/simgpu/driver/managed.h).
  bool managed_discards = true;
  std::uint64_t managed_discard_page_ns = 0;
  // The device memory the driver may fill with managed pages (the device's free memory
  // at start, or OVERSUB_DEVICE_LIMIT), where um's replay finds room for its fetches
  // (Note [The room um's driver has]); 0 or less than the capacity: the capacity.
  std::size_t managed_room_bytes = 0;
};

struct mode_prediction {
  std::string swap_error;  // empty: swap_ns is a prediction
  std::string um_error;    // empty: um_ns is a prediction
  std::uint64_t swap_ns = 0;
  std::uint64_t um_ns = 0;
  std::uint64_t unlimited_ns = 0;         // every launch with enough memory
  std::uint64_t swap_replay_ns = 0;       // swap's replay, without the mover
  std::uint64_t swap_remaps = 0;          // page moves the mover remaps in swap's replay
  std::uint64_t um_paged_bytes = 0;       // moved by demand paging in um's prediction
  bool um_faster = false;                 // the choice (Note [Predicting swap against um])
};

// See Note [Predicting swap against um]. capacity_bytes: the device bytes the engine
// may hold (OVERSUB_DEVICE_LIMIT or the device's memory).
// The iteration as um's learner sees it (Note [um's units]): one long-lived unit per
// managed buffer the um backend would hold, each per-iteration buffer given the
// lowest free one of its size when allocated and that one back when freed, the
// launches' uses and writes mapped to the units.
// lives, where given: per unit, the launches [alloc, free] of each buffer it held, a
// long-lived buffer's unit one life of every launch ({0, kLongLived}).
using unit_lives = std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>>;
inline constexpr std::uint32_t kLongLived = ~std::uint32_t{0};
iteration_model managed_units(const iteration_model& m, unit_lives* lives = nullptr);
// See Note [Predicting swap against um]: how much faster um's prediction must be.
inline constexpr double um_margin = 0.025;
// The plan's copies as um makes them (See Note [um's moves]).
// discards: whether the driver discards freed units (else they migrate).
void um_moves(const iteration_model& units, const unit_lives& lives, std::size_t paged_above,
              bool discards, schedule& plan);

mode_prediction predict_modes(const profiler::profile& p, std::size_t capacity_bytes,
                              const mode_costs& costs);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_MODE_CHOICE_H
