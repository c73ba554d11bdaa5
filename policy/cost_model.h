// cost_model: what moving bytes costs on one device, for the schedule and the
// simulator. Built from plain numbers; the device model files of simgpu
// (tests/simgpu/devices/*.model) and a real device's measured figures both fit it.
// policy/ never reads those files itself (a test, the bench or the CLI does).
#ifndef OVERSUB_POLICY_COST_MODEL_H
#define OVERSUB_POLICY_COST_MODEL_H

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace oversub::policy {

// The most pages the engine's mover fetches as one run (its kMaxRunPages), and how
// many of the schedule's next fetches it looks among for a run's pages: See Note
// [The mover] in residency/swap_mover.cc.
inline constexpr std::size_t max_run_pages = 32;
inline constexpr std::size_t run_window_moves = 4 * max_run_pages;

// See Note [Remapping runs] in residency/swap_engine.h: the pages of room worth
// gathering before a remap. At least enough that their copies take as long as the own
// calls of the two runs each batch costs, its evictions' and its fetch's (run_ns
// against page_copy_ns each); where the room is known (room_pages, 0: not), as many as
// keep the mover's calls within the link's time, their parts per page (page_ns, each
// way) included, but no more than a sixth of the room (Note [Batches that keep up] in
// residency/swap_engine.h); where no batch keeps up (a page's calls take as long as
// its copy), the two runs' rule alone. At least 1, at most max_run_pages. The
// swap engine takes run_ns and page_ns from its timing of its calls, the simulator
// from the device model.
inline std::size_t run_batch_pages(double run_ns, double page_copy_ns, double page_ns = 0,
                                   std::size_t room_pages = 0) {
  constexpr auto most = static_cast<double>(max_run_pages);
  if (page_copy_ns <= 0) return 1;
  double pages = std::ceil(2 * run_ns / page_copy_ns);
  if (room_pages != 0 && page_copy_ns > 2 * page_ns) {
    const double keep_up = std::ceil(2 * run_ns / (page_copy_ns - 2 * page_ns));
    pages = std::max(pages, std::min(keep_up, std::floor(static_cast<double>(room_pages) / 6)));
  }
  return pages <= 1 ? 1 : static_cast<std::size_t>(std::min(pages, most));
}

// The mover's host calls (Note [The mover] in residency/swap_mover.cc), ns: a per-call
// part and a part per 2 MiB page, from the device model's keys (vmm_unmap_ns,
// vmm_unmap_per_2mib_ns, ...). Each page swap mode moves is remapped by one host
// thread: an eviction unmaps the device memory, maps the host copy and grants access;
// a fetch does the reverse. Pages adjacent at their addresses and moved together are
// one run: one unmap and one access grant over the run, one map per page (Note
// [Remapping runs] in residency/swap_engine.h), made one after another, so each map
// after the run's first costs vmm_map_repeat_ns (Note [Repeated VMM calls] in
// tests/simgpu/driver/device_model.cc; negative: vmm_map_ns, every map in full). The mover also waits for an eviction's
// copy out (event_sync_ns) and records a hand-off event per batch (event_record_ns);
// a fetch enqueues its copy (copy_enqueue_ns) and records the copy's event. All 0 (the
// default): no mover (Note [Virtual time model] in policy/simulate.h).
struct mover_costs {
  std::uint64_t vmm_map_ns = 0, vmm_map_per_page_ns = 0;
  std::int64_t vmm_map_repeat_ns = -1;
  std::uint64_t vmm_unmap_ns = 0, vmm_unmap_per_page_ns = 0;
  std::uint64_t vmm_set_access_ns = 0, vmm_set_access_per_page_ns = 0;
  // The unmap's and the access grant's per-call parts where the call repeats the
  // mover's last call's family: a run grouped with the one before it (Note [Grouped
  // runs in the simulator] in policy/simulate.h); negative: the full figure.
  std::int64_t vmm_unmap_repeat_ns = -1, vmm_set_access_repeat_ns = -1;
  std::uint64_t event_sync_ns = 0, event_record_ns = 0, copy_enqueue_ns = 0;
  std::size_t page_bytes = std::size_t{2} << 20;  // the arena's page
  // The pages of room the engine gathers before a fetch where it is known (the
  // library's learner asks its engine); 0: from these costs and the room
  // (run_batch_pages).
  std::size_t batch_pages = 0;
  // True where cuMemMap, cuMemUnmap and cuMemSetAccess wait for the device's queued
  // work (Note [Mapping calls that wait] in policy/simulate.h).
  bool calls_wait = false;

  std::uint64_t map_repeat_ns() const {
    return vmm_map_repeat_ns < 0 ? vmm_map_ns : static_cast<std::uint64_t>(vmm_map_repeat_ns);
  }
  // The part of a remap a run's pages share: its unmap's and its access grant's
  // per-call parts, and what its first map costs over a repeated one.
  std::uint64_t run_ns() const {
    return vmm_unmap_ns + vmm_set_access_ns +
           (vmm_map_ns - std::min(vmm_map_ns, map_repeat_ns()));
  }
  // The same for a run grouped with the run before it: each call repeats its family.
  std::uint64_t grouped_run_ns() const {
    const auto repeat = [](std::uint64_t full, std::int64_t r) {
      return r < 0 ? full : std::min(full, static_cast<std::uint64_t>(r));
    };
    return repeat(vmm_unmap_ns, vmm_unmap_repeat_ns) +
           repeat(vmm_set_access_ns, vmm_set_access_repeat_ns);
  }
  // What a run's shared part costs on the mean where the engine groups each batch's
  // two runs (its evictions' and its fetch's): what its timing of its calls finds.
  std::uint64_t batch_run_ns() const { return (run_ns() + grouped_run_ns()) / 2; }
  // The time to remap `bytes` (whole pages) as a run of their own (grouped with the
  // run before it, or not), or, joining a run already remapped, without the run's
  // shared part.
  std::uint64_t remap_ns(std::size_t bytes, bool joins_run = false,
                         bool grouped = false) const {
    const std::uint64_t pages =
        page_bytes == 0 ? 1 : std::max<std::uint64_t>(1, (bytes + page_bytes - 1) / page_bytes);
    return (joins_run ? 0 : grouped ? grouped_run_ns() : run_ns()) +
           pages * (vmm_unmap_per_page_ns + std::min(vmm_map_ns, map_repeat_ns()) +
                    vmm_map_per_page_ns + vmm_set_access_per_page_ns);
  }
  bool any() const { return remap_ns(page_bytes) != 0; }
  // A remap known only as a part per run and a part per page (a measurement, or the
  // mode choice's figures): the run's part as the unmap's per-call cost, the page's as
  // its per-page cost, of `bytes_per_page` pages.
  void set_run_and_page(std::uint64_t run_part_ns, std::uint64_t page_part_ns,
                        std::size_t bytes_per_page) {
    vmm_unmap_ns = run_part_ns;
    vmm_unmap_per_page_ns = page_part_ns;
    page_bytes = bytes_per_page;
  }
  // See Note [What a batch costs] in residency/page_runs.cc: a batch's calls known as a
  // part per batch, per run and per page. A lone run pays the batch's part and its own;
  // a run grouped with the one before it, its own.
  void set_batch_parts(std::uint64_t batch_part_ns, std::uint64_t run_part_ns,
                       std::uint64_t page_part_ns, std::size_t bytes_per_page) {
    set_run_and_page(batch_part_ns + run_part_ns, page_part_ns, bytes_per_page);
    vmm_unmap_repeat_ns = static_cast<std::int64_t>(run_part_ns);
  }
  // Finishing an eviction of `bytes`: the wait on its copy's event (its host part),
  // the remap, the hand-off event. 0 without VMM costs.
  std::uint64_t evict_ns(std::size_t bytes, bool joins_run = false, bool grouped = false) const {
    return any() ? event_sync_ns + remap_ns(bytes, joins_run, grouped) + event_record_ns : 0;
  }
  // A fetch of `bytes`: the remap, then (with a copy) the copy's enqueue and its
  // event, and the hand-off event. 0 without VMM costs.
  std::uint64_t fetch_ns(std::size_t bytes, bool copy, bool joins_run = false,
                         bool grouped = false) const {
    if (!any()) return 0;
    return remap_ns(bytes, joins_run, grouped) + (copy ? copy_enqueue_ns + event_record_ns : 0) +
           event_record_ns;
  }
};

struct cost_model {
  // Pinned-memory link bandwidth per direction (bytes/s).
  double h2d_bytes_per_s = 0;
  double d2h_bytes_per_s = 0;
  // Fixed cost of each copy (setup, DMA start), ns; added to bytes / bandwidth.
  std::uint64_t copy_setup_ns = 0;
  // From issue to a kernel starting on an idle device, ns (once per iteration in the
  // simulator: afterwards the host runs ahead and launches queue).
  std::uint64_t launch_latency_ns = 0;
  // Managed memory: cost of one serviced fault (ns) and the migration unit (bytes).
  std::uint64_t managed_fault_ns = 0;
  std::size_t managed_page_bytes = 64 * 1024;
  // The rates at which the driver migrates managed memory (faults' pages, migrations
  // back), bytes/s; 0: the link's (Note [Managed migration rates] in
  // tests/simgpu/driver/device_model.cc).
  double managed_h2d_bytes_per_s = 0;
  double managed_d2h_bytes_per_s = 0;
  // Where not 0, an eviction with nothing to copy out discards its pages instead of
  // dropping them for free: um mode gives a freed buffer's pages back with
  // cuMemDiscardBatchAsync on its stream to the host (Note [um's moves] in
  // policy/mode_choice.h), which holds that stream discard_page_ns per managed page;
  // its room is free when the discard ends.
  std::uint64_t discard_page_ns = 0;
  // True when the device pages managed memory on demand (Pascal and later). False
  // (Maxwell, Kepler): a launch migrates all of a managed buffer at once, for one
  // fault cost plus the transfer.
  bool demand_paging = true;
  // A kernel's reads and writes of host memory over the link (zero-copy), bytes/s: what
  // a launch over the room pays for its host_bytes (Note [Launches over the room] in
  // policy/iteration_model.h) on top of its duration; 0: not counted (the library's
  // learner, whose measured durations already hold them).
  double host_access_bytes_per_s = 0;
  std::uint64_t host_access_ns(std::size_t bytes) const {
    if (bytes == 0 || host_access_bytes_per_s <= 0) return 0;
    return static_cast<std::uint64_t>(static_cast<double>(bytes) / host_access_bytes_per_s * 1e9);
  }

  // The mover's host costs; none (the default): no mover is modelled.
  mover_costs mover;

  std::uint64_t remap_ns(std::size_t bytes, bool joins_run = false, bool grouped = false) const {
    return mover.remap_ns(bytes, joins_run, grouped);
  }
  bool has_mover() const { return mover.any(); }
  std::uint64_t mover_evict_ns(std::size_t bytes, bool joins_run = false,
                               bool grouped = false) const {
    return mover.evict_ns(bytes, joins_run, grouped);
  }
  std::uint64_t mover_fetch_ns(std::size_t bytes, bool copy, bool joins_run = false,
                               bool grouped = false) const {
    return mover.fetch_ns(bytes, copy, joins_run, grouped);
  }
  // The pages of room the engine gathers before a fetch (run_batch_pages, as its
  // batch_pages_locked) with room_pages of room (0: unknown); 1 without a mover or a
  // link.
  std::size_t mover_batch_pages(std::size_t room_pages = 0) const {
    if (!has_mover() || h2d_bytes_per_s <= 0 || mover.page_bytes == 0) return 1;
    if (mover.batch_pages != 0) return mover.batch_pages;
    return run_batch_pages(static_cast<double>(mover.batch_run_ns()),
                           static_cast<double>(mover.page_bytes) / h2d_bytes_per_s * 1e9,
                           static_cast<double>(remap_ns(mover.page_bytes, true)), room_pages);
  }

  // The time of one copy of `bytes` host to device / device to host, ns.
  std::uint64_t h2d_ns(std::size_t bytes) const { return copy_ns(bytes, h2d_bytes_per_s); }
  std::uint64_t d2h_ns(std::size_t bytes) const { return copy_ns(bytes, d2h_bytes_per_s); }
  // The time a kernel spends faulting `bytes` of managed memory onto the device, ns
  // (page faults and migration; Note [Demand paging cost] in simulate.h).
  std::uint64_t fault_in_ns(std::size_t bytes) const {
    const std::uint64_t faults =
        demand_paging ? (bytes + managed_page_bytes - 1) / managed_page_bytes : 1;
    return faults * managed_fault_ns +
           transfer_ns(bytes, managed_h2d_bytes_per_s > 0 ? managed_h2d_bytes_per_s
                                                          : h2d_bytes_per_s);
  }
  // A discard of `bytes` of managed memory (whole managed pages), ns; 0 where
  // evictions drop their content for free.
  std::uint64_t discard_ns(std::size_t bytes) const {
    if (managed_page_bytes == 0) return 0;
    return (bytes + managed_page_bytes - 1) / managed_page_bytes * discard_page_ns;
  }
  // Migration of `bytes` of managed memory back to the host to make room, ns.
  std::uint64_t fault_out_ns(std::size_t bytes) const {
    return transfer_ns(bytes, managed_d2h_bytes_per_s > 0 ? managed_d2h_bytes_per_s
                                                          : d2h_bytes_per_s);
  }

 private:
  static std::uint64_t transfer_ns(std::size_t bytes, double bytes_per_s) {
    if (bytes_per_s <= 0) return 0;
    return static_cast<std::uint64_t>(static_cast<double>(bytes) * 1e9 / bytes_per_s + 0.5);
  }
  std::uint64_t copy_ns(std::size_t bytes, double bytes_per_s) const {
    return copy_setup_ns + transfer_ns(bytes, bytes_per_s);
  }
};

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_COST_MODEL_H
