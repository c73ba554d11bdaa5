// stream_fences: the stream-ordered reuse rule of the pool, kept apart from any
// allocator.
//
// It knows every stream that has had work enqueued (the launch, copy, memset and
// graph hooks call note_work), hands out tickets (an event recorded on a stream, see
// ticket.h) when a block is freed, and answers whether a ticket is complete.
//
// Note [Stream-ordered reuse]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Real cudaFree waits for the device, so a block it
// frees is unused by any queued work. The pool's free returns at once, so the block
// carries tickets instead:
//   - cudaFree (synchronous): one ticket on every stream that had work enqueued since
//     the block was allocated (it may have been used there);
//   - cudaFreeAsync(s): one ticket on s; CUDA's contract is that every other use is
//     ordered before the free on s.
// A later allocation for stream t may take the block when each ticket is on t itself
// (stream order makes the new work run after the old) or complete (cuEventQuery said
// so, which also orders it for simgpu's race detector). Otherwise the allocator takes
// another block, grows, and only as a last resort waits for the events — never while
// the stream it serves is capturing. One event serves every free between two pieces
// of work on a stream (it is recorded only when the stream has had work since the
// last one), so a burst of frees costs one cuEventRecord.
//
// Note [One stream needs no events]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// While the process has put work on one stream
// only, every block is reused on that stream, where stream order alone orders the new
// work after the old, so a free takes no ticket and records no event. The first other
// stream makes the fences record one event on the first stream, the floor (it covers
// all the work of the frees before it, and whatever came after); until the floor is
// known complete, no block goes to work on another stream, whatever its tickets. From
// then on every free takes its tickets as above. If the first stream captures at that
// moment, the floor is recorded at the first chance after (a later ticket, poll or
// wait_all); if the first stream was destroyed (an event cannot be recorded on it),
// the device is synchronized once instead (cuCtxSynchronize), and no floor is needed.
// simtrain on the H100-PCIe model records 27 events per iteration for its 34 frees
// without this, none with it.
//
// Note [Unmap after all work]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Reuse and unmap follow different rules. A block may
// be reused by work that stream order puts after its old users (the tickets above,
// none at all on one stream). Unmapping or remapping its memory has no stream to
// order it: cuMemUnmap does not wait for queued work, and the work that may still
// read the bytes includes work oversub cannot attribute to the block (a kernel that
// follows a pointer stored in device memory, a graph replay, a launch whose
// parameters could not be read). So a free remembers the work epoch at which it
// happened, and the memory is unmapped only once every stream's work enqueued up to
// that epoch is known complete (settled()): on every stream, an event recorded after
// that work (fence_all() records the missing ones, off the allocation fast path) has
// completed. A block freed on the only stream, which takes no ticket, is therefore
// still never unmapped under its last kernel.
//
// Note [Streams that capture]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An event cannot be recorded on a capturing stream
// (it would become a graph node), so a block freed while one of its streams captures
// gets a ticket that never completes: only that same stream reuses it. cudaMalloc is
// taken to serve the legacy default stream (its tickets on the legacy stream count as
// "same stream"); a program that also uses non-blocking streams still gets the
// legacy work ordered before the reuse only if it orders its streams itself, as with
// any stream-ordered allocator.
#ifndef OVERSUB_POOL_STREAM_FENCES_H
#define OVERSUB_POOL_STREAM_FENCES_H

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "pool/ticket.h"

namespace oversub::pool {

class stream_fences {
 public:
  static constexpr int max_slots = 256;
  static constexpr int no_slot = -1;

  // The slot of stream (null is the legacy stream); creates it on first sight.
  // no_slot when the table is full.
  int slot_of(CUstream stream) noexcept;

  // Work was enqueued on stream (lock-free; called from every launch/copy hook).
  void note_work(CUstream stream) noexcept;

  // The current work epoch: a block remembers it when allocated.
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_relaxed); }

  // Tickets for a synchronous free of a block allocated at alloc_epoch: one per
  // stream with work since then. Records events as needed (driver calls).
  void tickets_since(std::uint64_t alloc_epoch, ticket_set& out) noexcept;
  // The ticket of a free ordered on stream (cudaFreeAsync).
  void ticket_on(CUstream stream, ticket_set& out) noexcept;

  // Complete as far as already known (no driver call).
  bool known_complete(const ticket& t) const noexcept {
    return t.seq <= slots_[t.slot].completed.load(std::memory_order_acquire);
  }
  // The reuse rule: every ticket on consumer_slot or known complete.
  bool reusable(const ticket_set& s, int consumer_slot) const noexcept {
    if (s.overflow) return false;
    // See Note [One stream needs no events]: the floor holds for every block.
    if (const std::uint64_t f = floor_seq_.load(std::memory_order_acquire);
        f != 0 && consumer_slot != 0 && !known_complete(ticket{0, f})) {
      return false;
    }
    for (int i = 0; i < s.count; ++i) {
      if (s.items[i].slot != consumer_slot && !known_complete(s.items[i])) return false;
    }
    return true;
  }
  // Asks the driver (cuEventQuery) about every outstanding event; returns how many
  // completed.
  std::size_t poll() noexcept;
  // Waits for every outstanding event (cuEventSynchronize). Never call it while a
  // stream the caller serves is capturing. False if a wait failed.
  bool wait_all() noexcept;
  // True when stream is capturing (or its capture state cannot be read).
  static bool capturing(CUstream stream) noexcept;

  // See Note [Unmap after all work]: true when every stream's work enqueued up to epoch
  // is known complete (no driver call).
  bool settled(std::uint64_t epoch) const noexcept;
  // Records an event on every stream with work no event covers yet (not on one that
  // captures), then polls. A stream that is gone costs one cuCtxSynchronize.
  void fence_all() noexcept;

  // Calls f(stream, epoch of its latest work) for every stream that has had work
  // (streams as canonical_stream gives them). No driver call.
  template <typename F>
  void for_each_stream(F&& f) const noexcept {
    const int n = used_slots_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      f(slots_[i].stream.load(std::memory_order_relaxed),
        slots_[i].last_work.load(std::memory_order_relaxed));
    }
  }

  std::uint64_t events_recorded() const noexcept { return events_recorded_; }
  // True while some recorded event is not known complete (no driver call).
  bool outstanding() const noexcept {
    return outstanding_.load(std::memory_order_relaxed) != 0;
  }

 private:
  struct slot {
    std::atomic<CUstream> stream{nullptr};
    std::atomic<std::uint64_t> last_work{0};        // epoch of the latest work
    std::atomic<std::uint64_t> completed{0};        // tickets up to this seq are done
    std::atomic<std::uint64_t> completed_work{0};   // work up to this epoch is done
    std::uint64_t recorded_work = 0;                // epoch covered by the last event
    std::uint64_t seq = 0;                          // seq of the last event
    struct pending {
      std::uint64_t seq;
      CUevent event;
      std::uint64_t work;  // the epoch it covers
    };
    std::deque<pending> outstanding;  // oldest first
  };
  // Records the event that covers slot s's work so far, if none does (mutex_ held).
  // False when it cannot (the stream captures, or is gone).
  bool cover_locked(int s) noexcept;
  // The stream of a slot is gone: wait for the device once (mutex_ held).
  void synchronize_device_locked() noexcept;

  // The ticket covering everything enqueued on slot s so far (mutex_ held).
  ticket ticket_locked(int s) noexcept;
  CUevent take_event() noexcept;
  bool advance_locked(slot& sl, bool wait) noexcept;
  // See Note [One stream needs no events]: records the floor if it is still owed.
  void record_floor_locked() noexcept;

  std::atomic<std::uint64_t> epoch_{1};
  std::atomic<int> used_slots_{0};
  // See Note [One stream needs no events]: one_stream_ until a second slot exists (under
  // mutex_); then floor_owed_ until the floor is recorded, as slot 0's ticket
  // floor_seq_ (never_completes while owed; 0: no floor).
  bool one_stream_ = true;
  bool floor_owed_ = false;
  std::atomic<std::uint64_t> floor_seq_{0};
  slot slots_[max_slots];
  std::mutex insert_mutex_;
  std::mutex mutex_;  // event bookkeeping
  std::vector<CUevent> spare_events_;
  std::uint64_t events_recorded_ = 0;
  std::atomic<std::uint64_t> outstanding_{0};
};

// The process's fences (never destroyed).
stream_fences& fences() noexcept;

// Legacy-stream normalisation: null and CU_STREAM_LEGACY are one stream.
inline CUstream canonical_stream(CUstream s) noexcept {
  return s == nullptr ? CU_STREAM_LEGACY : s;
}

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_STREAM_FENCES_H
