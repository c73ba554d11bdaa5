// residency_backend: what the pool asks of the backend that keeps a device's bytes
// where they fit, one per device in the modes that oversubscribe (core/device_pool.cc
// holds it; no backend in pool mode). Two implement it:
//
//   swap_engine   residency/swap_engine.h, OVERSUB_MODE=swap: the pool's arena
//                      maps 2 MiB pages of the engine, and the engine moves them
//                      between device and host memory at the same addresses;
//   um_engine  residency/um_engine.h, OVERSUB_MODE=um: every allocation is
//                      managed memory of the backend's own, prefetched to the device
//                      before the work that uses it; the driver pages the rest.
//
// What the pool asks of either:
//   - where blocks come from: a backend with pages() backs the arena, which serves the
//     allocations and tells the backend of every block it hands out and takes back
//     (occupy/vacate: Note [Dead pages] in residency/swap_engine.h); one without serves
//     them itself (allocate/deallocate);
//   - a launch's preparation: prepare() before work on a stream that uses known
//     ranges, touch_all() before work whose ranges are unknown;
//   - a schedule's moves (core/schedule.cc): evict() and prefetch_now(), neither of
//     which makes a stream or the host wait; set_lending() and set_copy_clock() tune
//     the swap engine's moves and are nothing to a backend without them;
//   - capture: no backend enqueues work for a stream that captures a graph, nor work
//     ordered after one (Note [No moves while a user captures] in
//     residency/swap_engine.h): prepare() then moves nothing and reports no failure;
//   - capacity and foreign memory: the device bytes the backend may hold, less what
//     other libraries hold (Note [Memory that is not ours]), shared by both here;
//   - stats: the backend's section of the exit report (try_report), from figures
//     kept under the backend's lock (backend_with_stats, shared by both).
#ifndef OVERSUB_RESIDENCY_BACKEND_H
#define OVERSUB_RESIDENCY_BACKEND_H

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/stats.h"
#include "pool/memory_resource.h"
#include "pool/vmm_arena.h"

namespace oversub::residency {

struct byte_range {
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
  // Best effort (Note [Windows into large allocations] in residency/swap_engine.h):
  // made resident only while the capacity allows once the required ranges are; the
  // rest stays reachable through the host mapping.
  bool optional = false;
  // Reachable only (the same Note): the work may touch any of these bytes, so no page
  // is fetched for them, but the work's stream is recorded as a user of every page
  // they cover, and a later eviction or fetch of such a page waits for it. Without
  // this a page outside the windows, or an optional one past the room, could be moved
  // under a kernel that reaches it.
  bool reach = false;
  // With optional: its optional pages resident or on their way come before every other
  // optional page, so that what fits is what costs no move (a launch over the room;
  // see Note [Launches over the room] in policy/iteration_model.h).
  bool resident_first = false;
};

enum class residency_errc {
  ok,
  too_large,     // the ranges alone need more pages than the capacity holds
  no_room,       // nothing could be evicted (all pinned) or the device refused
  host_budget,   // evicting needed a host handle past the host budget
  driver_error,  // a copy, mapping or event call failed (its CUresult is kept)
};

struct prepare_result {
  residency_errc code = residency_errc::ok;
  std::uint64_t needed_bytes = 0;  // too_large: the pages the ranges span
  CUresult driver = CUDA_SUCCESS;
  // The stream was capturing a graph: nothing was enqueued, the ranges are the graph's
  // (Note [A graph's footprint] in core/graph_footprint.h).
  bool capturing = false;
  explicit operator bool() const { return code == residency_errc::ok; }
};

// Which pages a prefetch's own evictions may take, and in what order
// (swap_engine::prefetch_now): for a page by address, 0 when it must stay
// resident, otherwise its rank: pages of higher rank leave first (Note [Prefetch
// keeps what is needed sooner] in core/schedule.cc gives the distance to the
// page's next use).
using victim_rank = std::function<std::uint64_t(std::uintptr_t)>;

class residency_backend {
 public:
  explicit residency_backend(std::uint64_t capacity_bytes) : configured_bytes_(capacity_bytes) {}
  virtual ~residency_backend() = default;
  residency_backend(const residency_backend&) = delete;
  residency_backend& operator=(const residency_backend&) = delete;

  // ---- Where blocks come from ----
  // The pages the device's arena maps (swap), or null when the backend serves the
  // allocations itself (um).
  virtual pool::page_backing* pages() noexcept = 0;
  // Without pages(): a block of the backend's own for work on stream, and taking it
  // back (false when ptr is not one of its blocks: the caller forwards it to CUDA);
  // stream is cudaFreeAsync's, or pool::no_stream for a synchronous free.
  virtual pool::allocation_result allocate(std::size_t bytes, CUstream stream) = 0;
  virtual bool deallocate(void* ptr, CUstream stream) = 0;
  // With pages(): the arena handed out [addr, addr + bytes) / took back the block at
  // addr (Note [Dead pages] in residency/swap_engine.h).
  virtual void occupy(std::uintptr_t addr, std::size_t bytes) = 0;
  virtual void vacate(std::uintptr_t addr) = 0;
  // See Note [Dead gaps] in core/dead_gaps.cc: appends to out, in order, what happened
  // to the pages' blocks since the last call (a page's last live block vacated; a
  // block on it again after that), and forgets it (nothing in a backend that does not
  // track blocks).
  struct vacancy {
    std::uintptr_t page = 0;
    bool vacated = true;  // false: a block came to it again
  };
  virtual void take_vacancies(std::vector<vacancy>& out) { (void)out; }

  // ---- A launch's preparation ----
  // Before work on stream that uses ranges: what they touch is on the device before
  // the work runs, and the work is ordered after the moves (writes: the work may
  // write; Note [What counts as a write] in residency/swap_engine.h). Memory that is
  // not the backend's is ignored.
  // rank: which pages the fetches' own evictions take first (as for prefetch_now;
  // empty: the least recently used).
  virtual prepare_result prepare(std::span<const byte_range> ranges, CUstream stream,
                                 bool writes = true, const victim_rank& rank = {}) = 0;
  // Work on stream whose ranges are unknown (Note [A launch that may touch anything]
  // in residency/swap_engine.h).
  virtual void touch_all(CUstream stream) = 0;

  // ---- A schedule's moves ----
  // Begin evicting what ranges touch, and begin fetching it as far as there is room
  // now (the rest is appended to later), without making a stream or the host wait.
  // rank: which pages the fetches' own evictions may take (the swap engine's
  // prefetch_now). False on a driver error.
  virtual bool evict(std::span<const byte_range> ranges) = 0;
  virtual bool prefetch_now(std::span<const byte_range> ranges, std::vector<byte_range>& later,
                            const victim_rank& rank = {}) = 0;
  // See Notes [Lending an evicting page's memory], [Not asking too early] in
  // residency/swap_engine.h (nothing to a backend without them). A clock given with
  // no rates (0) keeps the ones the engine has (Note [Batches before the plan] in
  // residency/swap_engine.h).
  virtual void set_lending(bool on) = 0;
  virtual void set_copy_clock(std::uint64_t (*now_ns)() noexcept, double h2d_bytes_per_s,
                              double d2h_bytes_per_s, bool rates_measured) = 0;
  // See Note [Remapping runs] in residency/swap_engine.h: the pages of room a fetch
  // waits to gather (1: room is used as it comes).
  virtual std::size_t batch_pages() { return 1; }
  // What the backend's remaps have cost the host as it timed them (run_cost_fit in
  // residency/page_runs.h): a part per run (the unmap's and the access grant's calls)
  // and a part per page (their per-page parts and a map). All 0 until it has timed
  // enough runs, and in a backend that does not remap.
  struct remap_costs {
    std::uint64_t run_ns = 0, page_ns = 0;
    std::size_t page_bytes = 0;
    bool calls_wait = false;  // the mapping calls wait for the device's queued work
    // See Note [What a batch costs] in residency/page_runs.cc: a part per batch, per
    // run and per page of the batches timed whole, where batch_known.
    std::uint64_t batch_ns = 0, batch_run_ns = 0, batch_page_ns = 0;
    bool batch_known = false;
  };
  virtual remap_costs measured_remap_costs() { return {}; }
  // See Note [Which part differs] in core/schedule_costs.cc: the totals so far of what the
  // backend moved and the host time its remaps took, by the thread that made them
  // (0 in a backend that does not remap, or before it has a clock).
  struct remap_totals {
    std::uint64_t mover_remap_ns = 0, launch_remap_ns = 0, runs = 0, pages = 0;
    std::uint64_t bytes_to_device = 0, bytes_to_host = 0;
  };
  virtual remap_totals moved_totals() { return {}; }

  // ---- Capacity and foreign memory ----
  // The bytes the backend may hold on the device: the configured capacity less what
  // other libraries hold there themselves (reserve_foreign).
  std::uint64_t capacity_bytes() const {
    const std::uint64_t foreign = foreign_bytes_.load(std::memory_order_relaxed);
    return foreign >= configured_bytes_ ? 0 : configured_bytes_ - foreign;
  }
  // Note [Memory that is not ours]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Device memory another library creates itself through the VMM API (cuMemCreate:
  // NCCL's buffers, PyTorch's expandable segments) is never moved, but it takes room
  // from the backend: the interposer counts it here (interpose/driver_hooks.cc).
  // bytes > 0 counts it (false, nothing counted, when it would leave no room at all),
  // bytes < 0 gives it back. The swap engine evicts the pages above a capacity that
  // shrank at its next prepare().
  bool reserve_foreign(std::int64_t bytes);

  // ---- Stats ----
  // The backend's line of the exit report for device, added to out (the pool's
  // section: "swap device N" / "um device N", JSON pool.deviceN.swap / .um). False,
  // nothing added, while the backend is locked (Note [Report without blocking] in
  // core/device_pool.cc).
  virtual bool try_report(int device, stats::section& out) const = 0;

 private:
  const std::uint64_t configured_bytes_;
  std::atomic<std::uint64_t> foreign_bytes_{0};
};

// A backend's figures (Stats), kept under its one lock: stats() waits for the lock,
// try_stats() does not, and the report is written from try_stats() by
// write_report(device, capacity, stats, out), one for each Stats.
template <typename Stats>
class backend_with_stats : public residency_backend {
 public:
  using residency_backend::residency_backend;

  Stats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  std::optional<Stats> try_stats() const {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    return stats_;
  }
  bool try_report(int device, stats::section& out) const final {
    const std::optional<Stats> s = try_stats();
    if (!s) return false;
    write_report(device, capacity_bytes(), *s, out);
    return true;
  }

 protected:
  mutable std::mutex mutex_;  // the backend's one lock
  Stats stats_;
};

}  // namespace oversub::residency

#endif  // OVERSUB_RESIDENCY_BACKEND_H
