// um_engine: OVERSUB_MODE=um, the managed-memory backend. Device allocations
// are managed memory (cuMemAllocManaged); before each launch, copy or memset its
// buffers are prefetched to the device on the work's own stream, and the least
// recently used ones are prefetched back to the host to keep what is resident under
// the capacity. The driver pages on demand whatever was not predicted.
//
// Note [Prefetch on the work's stream]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Prefetches are queued on the stream of the
// work that needs them, so stream order makes the work wait for exactly its own
// fetches, and an eviction (a prefetch to the host) comes after every earlier use on
// that stream. A buffer last used on another stream is first ordered after that
// stream's work with an event. This is simpler than swap mode's separate copy
// streams and overlaps less: the copy and the compute of one stream run in turn.
//
// Note [Without concurrent managed access]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// GPUs before Pascal (and some platforms)
// report concurrentManagedAccess = 0: no demand paging, and prefetching to the device
// is refused. Then a launch migrates every managed allocation it uses; the backend
// says so once and only tracks.
#ifndef OVERSUB_RESIDENCY_UM_ENGINE_H
#define OVERSUB_RESIDENCY_UM_ENGINE_H

#include <cuda.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <unordered_map>

#include "pool/memory_resource.h"
#include "pool/ticket.h"
#include "residency/backend.h"

namespace oversub::residency {

// Note [Managed buffers hold whole pages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The driver keeps managed memory on the device a page at a time, and a managed
// allocation's pages are its own (simgpu's hostile reading; the GPU kit's
// managed_footprint measures a GPU's), so a 4 KiB bias holds 64 KiB of the device.
// The backend counted bytes against its capacity: where small buffers are many it
// held far more than it counted (ResNet-152 b32 at 1/8: 1866 long-lived buffers of
// 90.4 MB in 190.1 MB of pages), and the driver made the difference by evicting pages
// of its choosing, which the kernels faulted back. So each buffer counts its bytes
// rounded up to whole managed pages (held), in the backend's room and in the plan of
// um's learner alike (core/schedule.cc): counting pages in the backend alone, its
// plan still counting bytes, made ResNet-152 1.5x 128.9 -> 177.2 ms an iteration. Both
// together, against both counting bytes (discards either way, Note [Discarding freed
// buffers]), in `scripts/bench-swap --traces` at 1/8 of the traces' bytes on the H200's
// measured model, times T_unl: faster at ResNet-50 b32 1.5x 1.35 -> 1.27 and 3x 1.81
// -> 1.76, ResNet-152 3x 1.60 -> 1.52, BERT-large 1.5x and 3x by 0.01; slower at
// ResNet-152 1.5x 1.25 -> 1.30 and 10x 1.64 -> 1.78 (its long-lived buffers' pages
// alone fill the room there), ResNet-50 b128 1.26 -> 1.30 and 1.85 -> 1.87; GPT-2 and
// VGG-16 b64 unchanged (docs/results.md, "um: freed buffers discarded"). Kept for
// what it makes true: the room the backend counts is the room the device has, and
// auto's um prediction, which counts pages, ranks the modes by it (ResNet-50 b32 1.5x
// under the VMM waits: um 47.0 ms an iteration against swap's 48.1, where counting
// bytes um ran 49.9).
inline constexpr std::size_t kManagedPageBytes = 64 * 1024;
// See Note [A fetch's own event] in residency/um_engine.cc: the bytes after which a
// fetch request's next buffer starts a job of its own.
inline constexpr std::size_t kFetchJobBytes = std::size_t{4} << 20;
inline std::size_t managed_held_bytes(std::size_t bytes) {
  return (bytes + kManagedPageBytes - 1) / kManagedPageBytes * kManagedPageBytes;
}

struct um_stats {
  std::uint64_t buffers = 0;
  std::uint64_t resident_bytes = 0;  // what the backend has prefetched to the device
  std::uint64_t peak_resident_bytes = 0;
  std::uint64_t prefetches_in = 0;
  std::uint64_t prefetches_out = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  // Freed buffers given back with cuMemDiscardBatchAsync instead of migrated to the
  // host (Note [Discarding freed buffers] in residency/um_engine.h): buffers, bytes.
  std::uint64_t discards = 0;
  std::uint64_t discarded_bytes = 0;
  bool concurrent_access = true;
  // Allocations that waited on the host for a freed buffer's earlier users (Note
  // [Reused managed buffers]).
  std::uint64_t reuse_waits = 0;
  // The schedule's prefetches that the mover thread enqueued (Note [um's mover] in
  // residency/um_mover.cc).
  std::uint64_t mover_prefetches = 0;
  // Waits for a job that took all of an engine stream's work instead, the job's event
  // having been recorded again since (Note [A fetch's own event] in
  // residency/um_engine.cc).
  std::uint64_t whole_stream_waits = 0;
};

// Where a prefetch sends a managed buffer: the device, or the host.
CUmemLocation um_location(bool to_device, int device);

// The exit report's um section (residency/um_engine.cc).
void write_report(int device, std::uint64_t capacity_bytes, const um_stats& m,
                  stats::section& out);

class um_engine final : public backend_with_stats<um_stats> {
 public:
  // naive: no prefetches and no hints, managed memory as the driver pages it.
  // mover_thread: the schedule's prefetches are enqueued by a thread of the engine's
  // own (Note [um's mover] in residency/um_mover.cc); otherwise by the launching thread.
  um_engine(int device, std::uint64_t capacity_bytes, bool naive = false,
            bool mover_thread = false);
  ~um_engine() override;
  // Stops the mover thread, once its jobs are enqueued; called at exit. A forked
  // child, where the thread does not exist, stops nothing.
  void stop_mover();

  // ---- Where blocks come from: the backend's own managed memory ----
  pool::page_backing* pages() noexcept override { return nullptr; }
  pool::allocation_result allocate(std::size_t bytes, CUstream stream) override;
  // False when ptr is not one of ours (the caller forwards it). Never waits: the
  // buffer takes tickets (Note [Reused managed buffers]).
  bool deallocate(void* ptr, CUstream stream) override;
  // No arena hands out blocks over this backend: nothing to be told.
  void occupy(std::uintptr_t, std::size_t) override {}
  void vacate(std::uintptr_t) override {}

  // As swap_engine::prepare: the buffers the ranges touch, on the device before
  // the work on stream (never refused: Note [Large managed buffers] in residency/um_engine.cc).
  // writes is not asked: the driver keeps managed memory coherent.
  prepare_result prepare(std::span<const byte_range> ranges, CUstream stream,
                         bool writes = true, const victim_rank& rank = {}) override;
  // Work whose buffers are unknown: the driver pages what it touches on demand; it is
  // ordered after every discard so far (Note [Discarding freed buffers]).
  void touch_all(CUstream stream) override;

  // Note [um follows the schedule]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Once core/schedule.cc has learned the iteration
  // (OVERSUB_POLICY=cost or vdnn-all), its evictions and fetches come here. evict()
  // prefetches the buffers the ranges touch to the host on a stream of its own,
  // ordered after the stream that used each last; prefetch_now() prefetches them to
  // the device on another, as far as the capacity has room now or after sending dead
  // buffers (Note [Reused managed buffers]) to the host, none that rank keeps (the rest
  // is appended to later; no live buffer is evicted to make room), and the work that
  // next uses such a buffer waits for that prefetch (prepare). Both also move the
  // schedule's buffers that are dead now. Neither waits on the host, and the
  // prefetches themselves are enqueued by the mover (Note [um's mover] in
  // residency/um_mover.cc). Large buffers stay with demand paging, as in prepare.
  // False on a driver error.
  bool evict(std::span<const byte_range> ranges) override;
  bool prefetch_now(std::span<const byte_range> ranges, std::vector<byte_range>& later,
                    const victim_rank& rank = {}) override;

  // Note [Discarding freed buffers]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A freed buffer's bytes are dead, yet the schedule's moves sent the ones it needed
  // room from to the host as migrations, at the driver's rate to the host (9.4 GB/s on
  // an H200, a sixth of the copy rate): a third to a half of every byte um moved out
  // (Llama 3.2 1B at 1/8 of its bytes, 1.5x, under the VMM waits: 1.9 of 5.0 GB an
  // iteration). Where the driver has cuMemDiscardBatchAsync (CUDA 13.0), a job gives
  // them back with it instead: nothing is copied, and their bytes become
  // indeterminate. Unlike a migration a discard is not coherent with other accesses
  // (one running beside it is undefined: Note [Discards] in
  // tests/simgpu/driver/managed.h), so it is ordered both ways as a free is:
  //   - before it, all work that could touch the buffer: the job waits on a fresh event
  //     of every stream that has had work since the buffer was handed out, whatever
  //     oversub saw of that work (pointers stored in device memory, graph replays), as
  //     an unmap is (See Note [Unmap after all work] in pool/stream_fences.h); a stream
  //     that captures now, or is gone, cannot be waited for, and such a buffer is
  //     migrated instead;
  //   - after it, the buffer's next owner: its work waits for the discard's job on each
  //     stream that uses it (prepare, and a fetch of it comes after the job), and work
  //     whose buffers are unknown (touch_all) waits for the last discard; so does every
  //     graph launch (make_graph_resident in core/launch_residency.cc), which is where
  //     work captured into a graph runs (nothing waits while a stream captures: a wait
  //     there would break the capture's isolation).
  // A driver that refuses the call (CUDA_ERROR_NOT_SUPPORTED) gets the buffers
  // migrated, and no discard is tried again.

  // Note [Moves of freed buffers]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A framework frees a tensor as soon as its last kernel is enqueued, and that kernel
  // may not have run yet. So a freed buffer keeps its last user stream, and a move of
  // it, as of a live one, is ordered after the work that stream had enqueued by then.
  // Taking the free for the end of its work let its prefetch to the host run while the
  // kernel still read or wrote the pages, which on a GPU faults each of them back
  // (Note [Migrations of pages in use] in tests/simgpu/driver/managed.h): simgpu,
  // which did not charge that, gave VGG-16 at 1/8 of its bytes, 1.5x, on the H200's
  // measured model 157.3 ms an iteration for a schedule predicted at 183.2; charged,
  // 190.7 ms, with 482 MB an iteration moved under a kernel and 873 MB evicted by the
  // driver to make room for the faults. Ordered, none moves in use, 1446 MB each
  // way an iteration as planned: 200.2 ms, and 193.0 with copies no longer made
  // resident (Note [Copies in um mode] in core/launch_residency.cc).

  // The swap engine's tuning of its own moves: nothing here.
  void set_lending(bool) override {}
  void set_copy_clock(std::uint64_t (*)() noexcept, double, double, bool) override {}

  // capacity_bytes() and reserve_foreign(): residency_backend (Note [Memory that is
  // not ours] in residency/backend.h); stats() and try_stats(): backend_with_stats.

 private:
  struct buffer {
    std::size_t bytes = 0;
    // What it holds of the device (Note [Managed buffers hold whole pages]).
    std::size_t held() const { return managed_held_bytes(bytes); }
    bool on_device = false;
    std::uint64_t last_use = 0;
    std::uint64_t pinned = 0;
    CUstream last_stream = nullptr;  // meaningful once used (null is the legacy stream)
    bool used = false;
    bool live = true;  // false: freed, kept for reuse (Note [Reused managed buffers])
    // The mover's job that last moved it (Note [um's mover] in residency/um_mover.cc);
    // 0: none, its last move was enqueued by the launching thread.
    std::uint64_t job = 0;
    // The fences' work epoch when it was last handed out, and once freed what its
    // reuse waits for (Note [Reused managed buffers]).
    std::uint64_t alloc_epoch = 0;
    pool::ticket_set tickets;
    // The job that discarded it, until a fetch orders its users after that job (Note
    // [Discarding freed buffers]); 0: none.
    std::uint64_t discard_job = 0;
  };
  // Buffers in buffers_ the least recently used first among dead (cached) ones, then
  // live ones: the next to leave the device to make room, or 0.
  std::uintptr_t victim_locked(std::uint64_t keep_epoch, bool dead_only,
                               const victim_rank& rank = {});
  void detect_locked();
  bool reusable_locked(buffer& b, CUstream stream);
  bool ensure_streams_locked();
  CUresult order_after_locked(CUstream waiter, CUstream producer);
  // The buffers the ranges touch; with dead, cached ones too (the schedule's units).
  std::vector<std::uintptr_t> buffers_of_locked(std::span<const byte_range> ranges,
                                                bool dead = false) const;
  // The job of the schedule's prefetch of b that work on stream must wait for, if one
  // is pending; else 0.
  std::uint64_t pending_fetch(const buffer& b, CUstream stream) const;
  // The work on stream waits for the mover's job `job` on engine stream `on`, unless
  // waited[stream] says it has already.
  CUresult wait_for_job_locked(std::unique_lock<std::mutex>& lock, std::uint64_t job,
                               CUstream stream, CUstream on,
                               std::unordered_map<CUstream, std::uint64_t>& waited);
  // A prefetch of a whole buffer on a work stream, enqueued now.
  CUresult move_locked(std::unique_lock<std::mutex>& lock, std::uintptr_t base, buffer& b,
                       bool to_device, CUstream stream);
  // The engine's view of a move: where the buffer is, the stats (discarded: it left
  // the device by a discard, Note [Discarding freed buffers]).
  void account_move_locked(buffer& b, bool to_device, CUstream stream, bool discarded = false);

  // ---- The mover (Note [um's mover] in residency/um_mover.cc) ----
  struct um_job {
    bool to_device = false;
    // After the other engine stream's work: all of it so far (after_other), or
    // through its job after_job (0: none), the last that moved one of this job's
    // buffers there (Note [A move waits for its buffer's last move only] in
    // residency/um_mover.cc).
    bool after_other = false;
    std::uint64_t after_job = 0;
    std::vector<std::pair<std::uintptr_t, std::size_t>> moves;  // base, bytes
    // To the host only: freed buffers given back (Note [Discarding freed buffers]).
    std::vector<std::pair<std::uintptr_t, std::size_t>> discards;
    std::vector<CUstream> after_streams;  // the work streams recorded in `after`
    std::vector<CUevent> after;           // fresh events recorded on them
  };
  // Adds b's move to job: its order after the buffer's last user, recorded now.
  CUresult add_move_locked(um_job& job, std::uintptr_t base, buffer& b);
  // Whether b, freed, may be discarded now; if so, job waits for every stream that
  // may still touch it (Note [Discarding freed buffers]).
  bool order_discard_locked(um_job& job, const buffer& b, CUresult& error);
  // A fresh event on stream, waited for by job (once per stream).
  CUresult add_after_locked(um_job& job, CUstream stream);
  // Queues the job (the mover enqueues it, or it is enqueued now without one).
  // notify: wake the mover (false: the caller wakes it once for several jobs).
  CUresult begin_job_locked(um_job&& job, bool notify = true);
  // Jobs through seq enqueued (waiting for the mover, or enqueueing them here).
  CUresult issue_through_locked(std::unique_lock<std::mutex>& lock, std::uint64_t seq);
  // Enqueues one job's calls; the events it used are returned to order_events_
  // by the caller. Needs no lock: only one thread enqueues jobs at a time.
  CUresult run_job(const um_job& job, std::uint64_t seq);
  CUresult run_queued_locked(std::uint64_t through);
  void observe_mover_locked();
  void start_mover_locked();
  void mover_main();
  bool mover_running() const;

  int device_;
  bool naive_;
  bool detected_ = false;
  std::map<std::uintptr_t, buffer> buffers_;
  std::unordered_map<CUstream, CUevent> stream_events_;
  CUstream to_host_ = nullptr;    // schedule-driven prefetches to the host
  CUstream to_device_ = nullptr;  // and to the device
  bool streams_broken_ = false;
  // The schedule has moved buffers: freed ones are kept where they are (Note [Reused
  // managed buffers]); before it, and with lru, they are forgotten.
  bool schedule_driven_ = false;
  // The mover's queue and its progress (Note [um's mover] in residency/um_mover.cc).
  bool mover_wanted_ = false;
  bool mover_on_ = false;
  bool stop_ = false;
  bool issuing_ = false;  // the mover is enqueueing jobs, without the lock
  int mover_pid_ = 0;
  std::thread mover_;
  std::condition_variable jobs_queued_;
  std::condition_variable jobs_issued_cv_;
  std::deque<um_job> jobs_;
  std::uint64_t jobs_begun_ = 0;   // jobs ever queued; the last one's seq
  std::uint64_t jobs_issued_ = 0;  // every job through this seq is enqueued
  std::uint64_t jobs_taken_ = 0;   // the mover has taken the jobs through this seq
  std::uint64_t mover_last_ = 0;   // the last job the mover enqueued
  std::uint64_t observed_ = 0;     // the last of those the launching thread observed
  CUresult mover_error_ = CUDA_SUCCESS;
  // Each job's last record, by seq; See Note [A fetch's own event] in
  // residency/um_engine.cc for the size.
  std::array<CUevent, 4096> job_events_{};
  CUevent& job_event(std::uint64_t job) { return job_events_[job % job_events_.size()]; }
  // Whether job's event is still its record once the jobs through `through` have
  // recorded theirs (none has taken its place in the ring).
  bool job_event_holds(std::uint64_t job, std::uint64_t through) const {
    return job + job_events_.size() > through;
  }
  std::vector<CUevent> order_events_;      // fresh events not in use
  CUevent engine_order_event_ = nullptr;   // the enqueuer's own, for after_other
  // The last fetch job each work stream waited for (Note [A fetch's own event] in
  // residency/um_engine.cc).
  std::unordered_map<CUstream, std::uint64_t> waited_fetch_;
  // The last job that discarded buffers, and the last of those each stream waited for
  // (Note [Discarding freed buffers]).
  std::uint64_t last_discard_job_ = 0;
  std::unordered_map<CUstream, std::uint64_t> waited_discard_;
  // Cleared by the mover when the driver refuses a discard (read under the lock).
  std::atomic<bool> discards_refused_{false};
  // Note [Reused managed buffers]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Freed buffers kept by size for the next
  // allocation of that size, which takes the lowest address of that size: whatever
  // order the frees came in, the same set of free buffers gives the same addresses,
  // so an iteration's buffers get the same addresses every iteration (the schedule
  // learns pages by address) and no cuMemAllocManaged runs in the steady state. A
  // freed buffer stays in buffers_ (live false). Once the schedule drives the moves it
  // stays where its pages are: they still hold device memory, so resident_bytes counts
  // them, and dead buffers are the first to leave when room is needed (a live one sent
  // out comes back). On demand (lru) a freed buffer counts as on the host, as before:
  // there, sending dead bytes out on the work's stream cost more than the driver's own
  // evictions. When the schedule forgot them, the driver evicted pages of its own choosing, live ones among them,
  // and the kernels faulted them back (20 us a fault on the H100 model). Taking the
  // lowest address already on the device instead made the addresses alternate
  // between two iterations, and the schedule learned a period of two. See Note [Dead
  // buffers in um mode] in residency/um_engine.cc for the figures.
  // A free never waits: as the pool's blocks do (Note [Stream-ordered reuse] in
  // pool/stream_fences.h), the buffer takes tickets, and the allocation that takes it
  // again for work on a stream first waits on the host for those neither on that
  // stream nor known complete (none while the process uses one stream). Waiting for
  // the device at every free, as cuMemFree does, made um 1.3-1.6 times slower where a
  // framework frees through cudaFree (the trace replays at 1/8 on the H200's measured
  // model: ResNet-50 at 3x 117.6 ms an iteration against 81.9, GPT-2 at 3x 675.3
  // against 468.3, VGG-16 at 1.5x 285.4 against 224.0).
  // Moving a freed buffer's pages needs no order at all: migrations are coherent
  // with every access (Note [Prefetches are migrations] in
  // tests/simgpu/driver/managed.h).
  std::map<std::size_t, std::set<std::uintptr_t>> cached_;
  std::uint64_t cached_bytes_ = 0;
  std::uint64_t tick_ = 0;
  std::uint64_t epoch_ = 1;
};

}  // namespace oversub::residency

#endif  // OVERSUB_RESIDENCY_UM_ENGINE_H
