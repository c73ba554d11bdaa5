// The managed-memory backend (see um_engine.h).
#include "residency/um_engine.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "pool/driver_api.h"
#include "pool/stream_fences.h"

namespace oversub::residency {

// Where a prefetch sends a managed buffer: the device, or the host.
CUmemLocation um_location(bool to_device, int device) {
  CUmemLocation l{};
  l.type = to_device ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  l.id = to_device ? device : 0;
  return l;
}

um_engine::um_engine(int device, std::uint64_t capacity_bytes, bool naive, bool mover_thread)
    : backend_with_stats(capacity_bytes), device_(device), naive_(naive),
      mover_wanted_(mover_thread) {}

void um_engine::detect_locked() {
  if (detected_) return;
  detected_ = true;
  int concurrent = 0;
  CUdevice dev = 0;
  const pool::driver_table& d = pool::driver();
  if (d.cuDeviceGet(&dev, device_) == CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev) ==
          CUDA_SUCCESS &&
      concurrent == 0) {
    stats_.concurrent_access = false;
    log::warn("OVERSUB_MODE=um: device {} has no concurrent managed access (a GPU before "
              "Pascal, or the platform does not allow it): no demand paging and no prefetch "
              "to the device; each launch migrates the managed allocations it uses. "
              "OVERSUB_MODE=swap moves memory on such devices.",
              device_);
  }
}

// See Note [Reused managed buffers] in residency/um_engine.h: true once b's tickets
// allow work on stream to use it, waiting for them on the host if need be; false
// where it may not wait (stream captures).
bool um_engine::reusable_locked(buffer& b, CUstream stream) {
  pool::stream_fences& f = pool::fences();
  const int consumer = f.slot_of(stream);
  if (f.reusable(b.tickets, consumer)) return true;
  if (pool::stream_fences::capturing(stream)) return false;
  f.poll();
  if (f.reusable(b.tickets, consumer)) return true;
  ++stats_.reuse_waits;
  if (!f.wait_all() && pool::driver().cuCtxSynchronize() != CUDA_SUCCESS) return false;
  b.tickets.clear();
  return true;
}

pool::allocation_result um_engine::allocate(std::size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const pool::driver_table& d = pool::driver();
  if (!d.complete) return {nullptr, pool::pool_errc::driver_missing};
  detect_locked();
  CUdeviceptr p = 0;
  if (auto c = cached_.find(bytes); c != cached_.end() && !c->second.empty() &&
      reusable_locked(buffers_.at(*c->second.begin()), stream)) {
    // See Note [Reused managed buffers] in residency/um_engine.h: the lowest address of
    // this size.
    p = *c->second.begin();
    c->second.erase(c->second.begin());
    cached_bytes_ -= bytes;
    buffer& b = buffers_.at(p);
    b.live = true;
    b.last_use = ++tick_;
    b.alloc_epoch = pool::fences().epoch();
    b.tickets.clear();
    ++stats_.buffers;
    return {reinterpret_cast<void*>(p), pool::pool_errc::ok};
  }
  if (d.cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) {
    return {nullptr, pool::pool_errc::out_of_memory};
  }
  // The device keeps a mapping of the pages wherever they are, so an access we did
  // not prefetch for needs no new mapping.
  if (!naive_) d.cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, um_location(true, device_));
  buffer b;
  b.bytes = bytes;
  b.last_use = ++tick_;
  b.alloc_epoch = pool::fences().epoch();
  buffers_.emplace(p, b);
  ++stats_.buffers;
  return {reinterpret_cast<void*>(p), pool::pool_errc::ok};
}

bool um_engine::deallocate(void* ptr, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buffers_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == buffers_.end() || !it->second.live) return false;
  const pool::driver_table& d = pool::driver();
  --stats_.buffers;
  if (naive_) {
    // cuMemFree waits for the device itself.
    if (it->second.on_device) stats_.resident_bytes -= it->second.held();
    d.cuMemFree(it->first);
    buffers_.erase(it);
    return true;
  }
  // Kept for the next allocation of its size, where its pages are, with the tickets
  // its reuse waits for (Note [Reused managed buffers] in residency/um_engine.h). Its
  // bytes are dead.
  buffer& b = it->second;
  b.tickets.clear();
  if (stream == pool::no_stream) pool::fences().tickets_since(b.alloc_epoch, b.tickets);
  else pool::fences().ticket_on(stream, b.tickets);
  if (!schedule_driven_ && b.on_device) {
    // On demand only (lru): a freed buffer is forgotten where it is, and prefetched
    // again when reused (Note [Reused managed buffers] in residency/um_engine.h).
    b.on_device = false;
    stats_.resident_bytes -= b.held();
  }
  b.live = false;
  // b.used and b.last_stream stay: the work enqueued before this free may still be
  // using the pages, and a move of them is ordered after it (Note [Moves of freed
  // buffers] in residency/um_engine.h).
  b.last_use = ++tick_;
  cached_[b.bytes].insert(it->first);
  cached_bytes_ += b.bytes;
  return true;
}

std::vector<std::uintptr_t> um_engine::buffers_of_locked(std::span<const byte_range> ranges,
                                                         bool dead) const {
  std::vector<std::uintptr_t> out;
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.optional || buffers_.empty()) continue;
    auto it = buffers_.upper_bound(r.addr);
    if (it != buffers_.begin()) --it;
    for (; it != buffers_.end() && it->first < r.addr + r.bytes; ++it) {
      if (it->first + it->second.bytes > r.addr && (dead || it->second.live)) {
        out.push_back(it->first);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// waiter's later work after everything producer has queued so far.
CUresult um_engine::order_after_locked(CUstream waiter, CUstream producer) {
  const pool::driver_table& d = pool::driver();
  // See Note [No moves while a user captures] in residency/swap_engine.h: waiting on an
  // event recorded in a capture would make the waiter join it.
  if (pool::stream_is_capturing(producer)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUevent& e = stream_events_[producer];
  if (e == nullptr && d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (CUresult r = d.cuEventRecord(e, producer); r != CUDA_SUCCESS) return r;
  return d.cuStreamWaitEvent(waiter, e, 0);
}

// One prefetch of a whole buffer on stream, after the stream that used it last.
CUresult um_engine::move_locked(std::unique_lock<std::mutex>& lock, std::uintptr_t base,
                                buffer& b, bool to_device, CUstream stream) {
  const pool::driver_table& d = pool::driver();
  if (b.used && b.last_stream != stream) {
    // See Note [um's mover] in residency/um_mover.cc: the mover's move of it is
    // enqueued, and its time observed, before anything is ordered after it.
    if (b.job > jobs_issued_) {
      if (CUresult r = issue_through_locked(lock, b.job); r != CUDA_SUCCESS) return r;
    }
    if (b.job != 0) observe_mover_locked();
    if (CUresult r = order_after_locked(stream, b.last_stream); r != CUDA_SUCCESS) return r;
  }
  const CUmemLocation where = um_location(to_device, device_);
  if (CUresult r = d.cuMemPrefetchAsync(base, b.bytes, where, 0, stream); r != CUDA_SUCCESS) {
    return r;
  }
  account_move_locked(b, to_device, stream);
  b.job = 0;
  return CUDA_SUCCESS;
}

void um_engine::account_move_locked(buffer& b, bool to_device, CUstream stream,
                                    bool discarded) {
  b.on_device = to_device;
  b.last_stream = stream;
  b.used = true;
  if (to_device) {
    // Its users wait for this move, which comes after any discard of it (Note
    // [Discarding freed buffers] in residency/um_engine.h).
    b.discard_job = 0;
    stats_.resident_bytes += b.held();
    stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
    ++stats_.prefetches_in;
    stats_.bytes_in += b.bytes;
  } else {
    stats_.resident_bytes -= b.held();
    ++(discarded ? stats_.discards : stats_.prefetches_out);
    (discarded ? stats_.discarded_bytes : stats_.bytes_out) += b.bytes;
  }
}

prepare_result um_engine::prepare(std::span<const byte_range> ranges, CUstream stream,
                                          bool, const victim_rank&) {
  std::unique_lock<std::mutex> lock(mutex_);
  prepare_result result;
  if (naive_ || buffers_.empty() || !stats_.concurrent_access) return result;
  // See Note [um's mover] in residency/um_mover.cc: its error reaches the application
  // here.
  if (mover_error_ != CUDA_SUCCESS) {
    result.code = residency_errc::driver_error;
    result.driver = mover_error_;
    mover_error_ = CUDA_SUCCESS;
    return result;
  }
  // A capturing stream's work runs at replay: nothing is enqueued for it now (a wait
  // on another stream's work would break the capture's isolation); the driver pages
  // its memory on demand when the graph runs.
  if (pool::stream_is_capturing(stream)) {
    result.capturing = true;
    // Nor a wait for a discard: the graph's launch waits for them (touch_all; Note
    // [Discarding freed buffers] in residency/um_engine.h).
    return result;
  }
  // Note [Large managed buffers]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The driver pages managed memory on demand, so
  // nothing has to be refused here. A buffer larger than a quarter of the capacity (a
  // caching allocator's segment) is left to demand paging rather than prefetched
  // whole, and so are the best-effort windows; what remains is prefetched while it
  // fits.
  // Reachable ranges (Note [Copies in um mode] in core/launch_residency.cc): the work
  // counts as a user of their buffers, nothing is moved for them.
  std::vector<byte_range> moved;
  std::vector<std::uintptr_t> reached;
  const bool some_reach =
      std::any_of(ranges.begin(), ranges.end(), [](const byte_range& r) { return r.reach; });
  if (some_reach) {
    std::vector<byte_range> reach;
    for (const byte_range& r : ranges) (r.reach ? reach : moved).push_back(r);
    reached = buffers_of_locked(reach);
    ranges = moved;
  }
  const std::vector<std::uintptr_t> touched = buffers_of_locked(ranges);
  // See Note [Discarding freed buffers] in residency/um_engine.h: every buffer the work
  // uses, moved or not.
  for (const std::vector<std::uintptr_t>* set : {&touched, &std::as_const(reached)}) {
    for (std::uintptr_t base : *set) {
      if (buffers_[base].discard_job == 0) continue;
      if (CUresult r = wait_for_job_locked(lock, buffers_[base].discard_job, stream, to_host_,
                                           waited_discard_);
          r != CUDA_SUCCESS) {
        result.code = residency_errc::driver_error;
        result.driver = r;
        return result;
      }
    }
  }
  std::vector<std::uintptr_t> wanted;
  for (std::uintptr_t base : touched) {
    if (buffers_[base].bytes > capacity_bytes() / 4) continue;
    if (result.needed_bytes + buffers_[base].held() > capacity_bytes()) break;
    result.needed_bytes += buffers_[base].held();
    wanted.push_back(base);
  }
  const std::uint64_t epoch = ++epoch_;
  for (std::uintptr_t base : wanted) buffers_[base].pinned = epoch;
  // See Note [A fetch's own event]: one wait, for the latest of the fetches the work
  // needs (they run in order on one stream).
  std::uint64_t fetched = 0;
  for (std::uintptr_t base : wanted) {
    buffer& b = buffers_[base];
    b.last_use = ++tick_;
    fetched = std::max(fetched, pending_fetch(b, stream));
    if (!b.on_device) {
      // Room first: dead buffers, then the least recently used unpinned ones go to the
      // host.
      while (stats_.resident_bytes + b.held() > capacity_bytes()) {
        const std::uintptr_t victim = victim_locked(epoch, false);
        if (victim == 0) break;  // the driver pages the rest on demand
        if (CUresult r = move_locked(lock, victim, buffers_[victim], false, stream);
            r != CUDA_SUCCESS) {
          result.code = residency_errc::driver_error;
          result.driver = r;
          return result;
        }
      }
      if (CUresult r = move_locked(lock, base, b, true, stream); r != CUDA_SUCCESS) {
        result.code = residency_errc::driver_error;
        result.driver = r;
        return result;
      }
    }
    b.last_stream = stream;
    b.used = true;
  }
  for (std::uintptr_t base : reached) {
    buffer& b = buffers_[base];
    if (b.pinned == epoch) continue;  // also moved for this work
    fetched = std::max(fetched, pending_fetch(b, stream));
    b.last_use = ++tick_;
    b.last_stream = stream;
    b.used = true;
  }
  ++epoch_;  // nothing stays pinned
  if (fetched != 0) {
    if (CUresult r = wait_for_job_locked(lock, fetched, stream, to_device_, waited_fetch_);
        r != CUDA_SUCCESS) {
      result.code = residency_errc::driver_error;
      result.driver = r;
    }
  }
  return result;
}

// Fetched ahead by the schedule (Note [um follows the schedule] in
// residency/um_engine.h): the work on stream waits for that prefetch, not for the
// driver to page it in under the kernel. The job that fetched it (Note [A fetch's own
// event]), which prepare() waits for with the latest of the work's others
// (wait_for_job_locked); 0 where there is none to wait for.
std::uint64_t um_engine::pending_fetch(const buffer& b, CUstream stream) const {
  if (!b.on_device || !b.used || b.last_stream != to_device_ || to_device_ == nullptr ||
      stream == to_device_) {
    return 0;
  }
  return b.job;
}

// The work on stream waits for `job`, queued on the engine's stream `on`, by its event
// (or, where the ring has recorded it again since, for all of `on`). Jobs on one engine
// stream run in order, so a stream that waited for one waited for every earlier one:
// waited[stream] remembers the last (Note [A fetch's own event]; a discard's, See Note
// [Discarding freed buffers] in residency/um_engine.h).
CUresult um_engine::wait_for_job_locked(std::unique_lock<std::mutex>& lock, std::uint64_t job,
                                        CUstream stream, CUstream on,
                                        std::unordered_map<CUstream, std::uint64_t>& waited) {
  std::uint64_t& last = waited[stream];
  if (job <= last) return CUDA_SUCCESS;
  CUresult r = issue_through_locked(lock, job);
  if (r == CUDA_SUCCESS && job_event_holds(job, jobs_begun_)) {
    r = pool::driver().cuStreamWaitEvent(stream, job_event(job), 0);
  } else if (r == CUDA_SUCCESS) {
    ++stats_.whole_stream_waits;
    observe_mover_locked();
    r = order_after_locked(stream, on);
  }
  if (r == CUDA_SUCCESS) last = job;
  return r;
}

void um_engine::touch_all(CUstream stream) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Work being captured runs when its graph is launched, and the launch comes here
  // first (make_graph_resident in core/launch_residency.cc); a wait now would break
  // the capture's isolation.
  if (last_discard_job_ == 0 || pool::stream_is_capturing(stream)) return;
  const CUresult r =
      wait_for_job_locked(lock, last_discard_job_, stream, to_host_, waited_discard_);
  // Heard at the next prepare(), as the mover's errors are.
  if (r != CUDA_SUCCESS && mover_error_ == CUDA_SUCCESS) mover_error_ = r;
}

// Note [Dead buffers in um mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The learned schedule ran slower than lru's per-launch
// prefetch on every trace (traces at 1/8 of their bytes, H100-PCIe model, ResNet-50
// at 1.5x: 82.6 ms per iteration against 73.3; GPT-2 at 3x: 504.1 against 408.3),
// for two reasons:
//   - Freed buffers were forgotten while their pages still held device memory: the
//     backend counted room that the driver did not have, and the driver made it by
//     evicting pages of its choosing, live ones among them, which kernels faulted
//     back (ResNet-50 at 1.5x: 781 faults and 737 MiB in per iteration). Now a freed
//     buffer is kept where it is once the schedule drives the moves, and dead buffers
//     leave first (Note [Reused managed buffers] in residency/um_engine.h): no faults
//     and 528 MiB each way per iteration.
//   - The work that used a fetched buffer waited for everything on the fetch stream,
//     the fetches for later launches too (Note [A fetch's own event]).
// After both, at 1.5x and 3x: ResNet-50 60.4 and 66.7 ms, GPT-2 327.6 and 365.3,
// VGG-16 172.9 and 166.4, BERT-large 1298.5 and 1432.3, against lru's 73.3 and 81.8,
// 345.2 and 408.3, 185.8 and 188.8, 1331.2 and 1496.0 (lru unchanged: with it alone
// the first change made GPT-2 at 3x 458.3 and VGG-16 at 1.5x 206.1, since lru sends
// dead bytes out on the work's own stream; so lru forgets freed buffers as before).

std::uintptr_t um_engine::victim_locked(std::uint64_t keep_epoch, bool dead_only,
                                        const victim_rank& rank) {
  std::uintptr_t victim = 0;
  const buffer* vb = nullptr;
  std::uint64_t vrank = 0;
  for (const auto& [base, x] : buffers_) {
    if (!x.on_device || x.pinned == keep_epoch || (dead_only && x.live)) continue;
    const std::uint64_t r = rank ? rank(base) : 0;
    if (rank && r == 0) continue;  // needed no later than what is fetched
    const bool better = vb == nullptr || (!x.live && vb->live) ||
                        (x.live == vb->live &&
                         (rank ? r > vrank : x.last_use < vb->last_use));
    if (better) {
      victim = base;
      vb = &x;
      vrank = r;
    }
  }
  return victim;
}

bool um_engine::ensure_streams_locked() {
  if (to_host_ != nullptr) return true;
  if (streams_broken_) return false;
  const pool::driver_table& d = pool::driver();
  if (!d.complete || d.cuStreamCreate(&to_host_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.cuStreamCreate(&to_device_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    streams_broken_ = true;
    to_host_ = to_device_ = nullptr;
    return false;
  }
  return true;
}

bool um_engine::evict(std::span<const byte_range> ranges) {
  std::lock_guard<std::mutex> lock(mutex_);
  schedule_driven_ = true;
  if (naive_ || buffers_.empty() || !stats_.concurrent_access) return true;
  if (!ensure_streams_locked()) return false;
  start_mover_locked();
  um_job job;
  CUresult r = CUDA_SUCCESS;
  for (std::uintptr_t base : buffers_of_locked(ranges, true)) {
    buffer& b = buffers_[base];
    if (!b.on_device || b.bytes > capacity_bytes() / 4) continue;
    if (r = add_move_locked(job, base, b); r != CUDA_SUCCESS) break;
  }
  if (!job.moves.empty() || !job.discards.empty()) {
    if (begin_job_locked(std::move(job)) != CUDA_SUCCESS) return false;
  }
  return r == CUDA_SUCCESS;
}

bool um_engine::prefetch_now(std::span<const byte_range> ranges,
                                     std::vector<byte_range>& later, const victim_rank& rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  schedule_driven_ = true;
  if (naive_ || buffers_.empty() || !stats_.concurrent_access) return true;
  if (!ensure_streams_locked()) return false;
  start_mover_locked();
  // In the order asked (the schedule's: the sooner used first), each once, pinned.
  const std::uint64_t epoch = ++epoch_;
  std::vector<std::uintptr_t> wanted;
  for (const byte_range& range : ranges) {
    for (std::uintptr_t base : buffers_of_locked({&range, 1}, true)) {
      if (std::exchange(buffers_[base].pinned, epoch) != epoch) wanted.push_back(base);
    }
  }
  // Dead buffers out to make room, one job, then the fetches, in jobs of about
  // kFetchJobBytes (Note [A fetch's own event]; Note [um's mover] in
  // residency/um_mover.cc).
  um_job out;
  std::vector<um_job> in;
  std::size_t in_bytes = 0;  // in the last of `in`
  CUresult r = CUDA_SUCCESS;
  for (std::uintptr_t base : wanted) {
    buffer& b = buffers_[base];
    if (b.on_device || b.bytes > capacity_bytes() / 4) continue;
    // Room from dead buffers only (Note [Reused managed buffers] in
    // residency/um_engine.h), none the schedule needs no later than these.
    while (r == CUDA_SUCCESS && stats_.resident_bytes + b.held() > capacity_bytes()) {
      const std::uintptr_t victim = victim_locked(epoch, true, rank);
      if (victim == 0) break;
      r = add_move_locked(out, victim, buffers_[victim]);
    }
    if (r != CUDA_SUCCESS) break;
    if (stats_.resident_bytes + b.held() > capacity_bytes()) {
      later.push_back(byte_range{base, b.bytes});
      continue;
    }
    // See Note [A fetch's own event]: a new job once the last holds kFetchJobBytes. A
    // user stream an earlier job of this request waits for is behind it too: the jobs
    // run in order on one stream, and nothing was enqueued since.
    if (in.empty() || in_bytes >= kFetchJobBytes) {
      um_job next;
      next.to_device = true;
      if (!in.empty()) next.after_streams = in.back().after_streams;
      in.push_back(std::move(next));
      in_bytes = 0;
    }
    if (r = add_move_locked(in.back(), base, b); r != CUDA_SUCCESS) break;
    in_bytes += b.bytes;
  }
  ++epoch_;  // nothing stays pinned
  // Note [A fetch's own event]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The work that uses a buffer the schedule fetched
  // waits for the job that fetched it (its event, recorded after the job's prefetches),
  // not for everything queued on the fetch stream by then: the schedule fetches ahead,
  // so that also held the work behind fetches for later launches. A request's fetches
  // are taken in the order asked (the schedule's, the sooner used first), and a new job
  // begins once the last holds kFetchJobBytes (4 MiB, 86 us at an H200's 49 GB/s), so
  // that the work waits for at most that much asked after its buffer: a request carries
  // the fetches deferred for want of room besides its own, and with one job for all,
  // the work that used the first waited for the last (a user stream that an earlier job
  // of the request waits for is not waited for again, and the work waits once, for the
  // latest job it needs). Llama 3.2 1B at 1/8 of its bytes, 1.5x, under the VMM waits,
  // held its iteration's 147th kernel behind a request of 24 buffers and 429.7 MB:
  // 1673.9 ms an iteration with one job a request, 1633.6 now; a job for every buffer
  // made 1632.6 but doubled the launching thread's time at ResNet-50 b32 1.5x (0.239 ->
  // 0.478 ms an iteration: more jobs to enqueue where the mover lags, more waits; 0.246
  // now; docs/results.md, "um: a fetch waits for at most 4 MiB asked after it"). The events are a
  // ring; a buffer whose job's event may have been recorded again since waits for the
  // whole stream instead. Fetch jobs run in order on one stream, so a stream that waited
  // for one has waited for every earlier one, and waits no more for them
  // (waited_fetch_). With that and the mover (Note [um's mover] in
  // residency/um_mover.cc), ResNet-50 at 1/8, 1.5x, on the H200's measured model made
  // 457 stream waits an iteration, on all threads, where it made 1944. The ring must
  // hold the jobs begun between a fetch and the first use of what it fetched: a
  // training loop enqueues its iteration well ahead of the device (PyTorch's, until
  // the loss is read), and the schedule fetches ahead of that. With 128 events,
  // Llama 3.2 1B at 1/8 of its bytes, 1.5x, under the VMM waits, began hundreds of jobs
  // between a fetch and its use and made 60 waits an iteration for the whole fetch
  // stream, its next iteration's weights among what they waited for: 1743.1 ms an
  // iteration; with 4096, none, and 1736.0, then 1673.9 once a fetch waits only for its
  // own buffer's last move (Note [A move waits for its buffer's last move only] in
  // residency/um_mover.cc; docs/results.md). The stats count such waits
  // (whole_stream_waits).
  if (!out.moves.empty() || !out.discards.empty()) {
    if (begin_job_locked(std::move(out)) != CUDA_SUCCESS) return false;
  }
  bool begun = false, queued = true;
  for (um_job& job : in) {
    if (job.moves.empty() || !queued) {
      for (CUevent e : job.after) order_events_.push_back(e);  // a move that failed
      continue;
    }
    queued = begin_job_locked(std::move(job), false) == CUDA_SUCCESS;
    begun = begun || queued;
  }
  if (begun && mover_running()) jobs_queued_.notify_one();  // one wake for them all
  return queued && r == CUDA_SUCCESS;
}

void write_report(int device, std::uint64_t capacity_bytes, const um_stats& m,
                  stats::section& out) {
  // concurrent_access no: the device has no concurrent managed access, so nothing is
  // prefetched.
  out.begin(fmt::format("um device {}", device), {fmt::format("device{}", device), "um"})
      .bytes("capacity_bytes", capacity_bytes)
      .count("buffers", m.buffers)
      .bytes("resident_bytes", m.resident_bytes)
      .bytes("peak_resident_bytes", m.peak_resident_bytes)
      .count("prefetches_in", m.prefetches_in)
      .count("prefetches_out", m.prefetches_out)
      .bytes("bytes_in", m.bytes_in)
      .bytes("bytes_out", m.bytes_out)
      .count("discards", m.discards)
      .bytes("discarded_bytes", m.discarded_bytes)
      .flag("concurrent_access", m.concurrent_access)
      .count("reuse_waits", m.reuse_waits)
      .count("mover_prefetches", m.mover_prefetches)
      .count("whole_stream_waits", m.whole_stream_waits);
}

}  // namespace oversub::residency
