// um mode's mover: the thread that enqueues the schedule's prefetches (Note [um's
// mover]).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "pool/driver_api.h"
#include "residency/um_engine.h"

namespace oversub::residency {

// Note [um's mover]
// ~~~~~~~~~~~~~~~~~
// The learned schedule's moves in um mode are prefetches (cuMemPrefetchAsync), each
// ordered after the stream that used its buffer last, and the launching thread made
// them all: at ResNet-50 at 1/8 on the H200's measured model, 1426 prefetches, 1290
// event records and 1944 stream waits an iteration at 1.5x, 4.1 ms (11.0% of the
// unlimited iteration) added to that thread. Now evict() and prefetch_now() only
// decide: the launching thread takes each buffer's move into its books at once (where
// it is, the stats), records one fresh event on each work stream the move must come
// after (so it stays ordered after all work enqueued by then, and later work never
// holds it back), and queues a job: the engine stream's waits on those events, the
// prefetches, and an event recorded after them (job_events_, by the job's seq). A
// thread of the engine's own, the mover, takes the queued jobs and enqueues them in
// order without the lock. Rules:
//   - Jobs are enqueued in the order they were queued, one thread at a time (the
//     mover, or the launching thread where the mover is not running), so each engine
//     stream runs its jobs in that order.
//   - Nothing is ordered after a job's prefetches before the job is enqueued: work
//     that uses a buffer a job moved (prepare, move_locked) first has the jobs through
//     that one enqueued (issue_through_locked), waiting for the mover if it has taken
//     them, otherwise enqueueing them on its own thread.
//   - The launching thread uses the mover's work only after observing its last job's
//     event (a stream wait on it, or a query: observe_mover_locked), so that simgpu's
//     clock per host thread (Note [A clock per host thread] in
//     tests/simgpu/driver/clock.h) puts that use no earlier than the mover's calls.
//   - A prefetch that fails loses nothing (managed memory stays coherent wherever its
//     pages are, and the driver pages on demand what is not where the books say); the
//     error reaches the application at its next prepare().
//   - The thread is stopped by an exit handler once the jobs queued are enqueued, and
//     a forked child (where it does not exist) enqueues its jobs itself.
//
// Note [A move waits for its buffer's last move only]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A move of a buffer that the other engine stream moved last (a fetch of one sent to
// the host, the next owner of one discarded) must come after that move, and after
// nothing else there: the job waits for the event of the last job there that moved
// one of its buffers (job_events_; where the ring has recorded it again since, for all
// that stream's work so far). One event serves all its buffers only because the other
// stream is one stream, its jobs in order: discards on a stream of their own, with the
// highest seq still taken over both, skipped a discard behind a later migration, and
// simgpu aborted on the race (ResNet-50 b32 at 1/8, 1.5x). Waiting for all of the
// stream's work put a fetch behind every migration to the host queued since its buffer
// left, at the driver's rate to the host: Llama 3.2 1B at 1/8 of its bytes, 1.5x,
// under the VMM waits, on the H200's measured model, 1736.0 ms an iteration; its own
// buffer's, 1673.9 (docs/results.md).
//
// OVERSUB_MOVER=inline keeps every call on the launching thread, each job enqueued as
// soon as it is queued.

namespace {

// Every engine whose mover runs, for the exit handler.
std::mutex g_um_movers_mutex;
std::vector<um_engine*>& um_movers() {
  static auto* v = new std::vector<um_engine*>();
  return *v;
}

void stop_um_movers_at_exit() {
  std::vector<um_engine*> all;
  {
    std::lock_guard<std::mutex> lock(g_um_movers_mutex);
    all.swap(um_movers());
  }
  for (um_engine* e : all) e->stop_mover();
}

}  // namespace

bool um_engine::mover_running() const {
  return mover_on_ && mover_pid_ == static_cast<int>(::getpid());
}

void um_engine::start_mover_locked() {
  if (!mover_wanted_) return;
  mover_wanted_ = false;  // one try
  const pool::driver_table& d = pool::driver();
  CUcontext context = nullptr;
  if (d.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) {
    log::warn("um: no current context to start the mover in; the schedule's prefetches "
              "are enqueued by the launching thread (OVERSUB_MOVER=inline)");
    return;
  }
  try {
    mover_ = std::thread([this, context] {
      if (pool::driver().cuCtxSetCurrent(context) != CUDA_SUCCESS) {
        std::lock_guard<std::mutex> lock(mutex_);
        mover_on_ = false;  // the launching thread enqueues the jobs
        jobs_issued_cv_.notify_all();
        return;
      }
      mover_main();
    });
  } catch (...) {
    log::warn("um: the mover thread could not be started; the schedule's prefetches are "
              "enqueued by the launching thread (OVERSUB_MOVER=inline)");
    return;
  }
  mover_pid_ = static_cast<int>(::getpid());
  mover_on_ = true;
  std::lock_guard<std::mutex> lock(g_um_movers_mutex);
  static const bool registered = std::atexit(stop_um_movers_at_exit) == 0;
  (void)registered;
  um_movers().push_back(this);
}

um_engine::~um_engine() { stop_mover(); }

void um_engine::stop_mover() {
  {
    std::lock_guard<std::mutex> lock(g_um_movers_mutex);
    std::erase(um_movers(), this);
  }
  if (mover_pid_ != static_cast<int>(::getpid())) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!mover_.joinable()) return;
    stop_ = true;
  }
  jobs_queued_.notify_all();
  mover_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  mover_on_ = false;
  jobs_issued_cv_.notify_all();
}

// A fresh event recorded on stream now, which job waits on (once per stream).
CUresult um_engine::add_after_locked(um_job& job, CUstream stream) {
  const CUstream key = pool::canonical_stream(stream);
  if (std::find(job.after_streams.begin(), job.after_streams.end(), key) !=
      job.after_streams.end()) {
    return CUDA_SUCCESS;
  }
  // See Note [No moves while a user captures] in residency/swap_engine.h.
  if (pool::stream_is_capturing(stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const pool::driver_table& d = pool::driver();
  CUevent e = nullptr;
  if (!order_events_.empty()) {
    e = order_events_.back();
    order_events_.pop_back();
  } else if (d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (CUresult r = d.cuEventRecord(e, stream); r != CUDA_SUCCESS) {
    order_events_.push_back(e);
    return r;
  }
  job.after_streams.push_back(key);
  job.after.push_back(e);
  return CUDA_SUCCESS;
}

// See Note [Discarding freed buffers] in residency/um_engine.h: after every stream with
// work since b was handed out. False (b is migrated instead) where the driver has no
// discard or a stream cannot be waited for; error only where an event is wanting.
bool um_engine::order_discard_locked(um_job& job, const buffer& b, CUresult& error) {
  if (pool::driver().cuMemDiscardBatchAsync == nullptr ||
      discards_refused_.load(std::memory_order_relaxed)) {
    return false;
  }
  std::vector<CUstream> streams;
  pool::fences().for_each_stream([&](CUstream s, std::uint64_t last_work) {
    if (last_work >= b.alloc_epoch) streams.push_back(s);
  });
  // A stream that captures cannot be waited for; one whose state cannot be read is gone
  // (destroyed, its work maybe still the device's), and no event can be recorded on it.
  for (CUstream s : streams) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (pool::driver().cuStreamIsCapturing(s, &status) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_NONE) {
      return false;
    }
  }
  for (CUstream s : streams) {
    const CUresult r = add_after_locked(job, s);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) error = r;
    if (r != CUDA_SUCCESS) return false;
  }
  return true;
}

// The move of b joins job: its order after the buffer's last user, recorded now, and
// the books as if it were done (Note [um's mover]). A freed buffer leaving the device
// is discarded where it may be (Note [Discarding freed buffers] in
// residency/um_engine.h).
CUresult um_engine::add_move_locked(um_job& job, std::uintptr_t base, buffer& b) {
  const CUstream stream = job.to_device ? to_device_ : to_host_;
  const CUstream other = job.to_device ? to_host_ : to_device_;
  CUresult error = CUDA_SUCCESS;
  const bool discard = !job.to_device && !b.live && order_discard_locked(job, b, error);
  if (error != CUDA_SUCCESS) return error;
  if (b.used && b.last_stream != stream) {
    if (b.last_stream == other && b.job != 0) {
      // See Note [A move waits for its buffer's last move only].
      job.after_job = std::max(job.after_job, b.job);
    } else if (b.last_stream == other) {
      job.after_other = true;
    } else if (CUresult r = add_after_locked(job, b.last_stream); r != CUDA_SUCCESS) {
      return r;
    }
  }
  (discard ? job.discards : job.moves).emplace_back(base, b.bytes);
  account_move_locked(b, job.to_device, stream, discard);
  return CUDA_SUCCESS;
}

CUresult um_engine::begin_job_locked(um_job&& job, bool notify) {
  const pool::driver_table& d = pool::driver();
  const std::uint64_t seq = jobs_begun_ + 1;
  CUevent& e = job_event(seq);
  if (e == nullptr && d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    e = nullptr;
    // Not queued: the books say moved, the driver pages on demand what is not there.
    for (CUevent a : job.after) order_events_.push_back(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (const auto& [base, bytes] : job.moves) buffers_[base].job = seq;
  for (const auto& [base, bytes] : job.discards) {
    buffers_[base].job = seq;
    buffers_[base].discard_job = seq;
  }
  if (!job.discards.empty()) last_discard_job_ = seq;
  jobs_.push_back(std::move(job));
  jobs_begun_ = seq;
  if (mover_running()) {
    if (notify) jobs_queued_.notify_one();
    return CUDA_SUCCESS;
  }
  return run_queued_locked(seq);
}

// The jobs queued through `through`, enqueued on this thread (nobody else is).
CUresult um_engine::run_queued_locked(std::uint64_t through) {
  if (issuing_ && !mover_running()) {
    // A forked child: the jobs the parent's mover had taken are not enqueued here.
    issuing_ = false;
    jobs_issued_ = std::max(jobs_issued_, jobs_taken_);
  }
  CUresult first = CUDA_SUCCESS;
  while (!jobs_.empty() && jobs_issued_ < through) {
    um_job job = std::move(jobs_.front());
    jobs_.pop_front();
    const std::uint64_t seq = ++jobs_issued_;
    if (CUresult r = run_job(job, seq); r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
    for (CUevent e : job.after) order_events_.push_back(e);
  }
  jobs_taken_ = std::max(jobs_taken_, jobs_issued_);
  return first;
}

CUresult um_engine::issue_through_locked(std::unique_lock<std::mutex>& lock,
                                         std::uint64_t seq) {
  CUresult r = CUDA_SUCCESS;
  while (jobs_issued_ < seq && r == CUDA_SUCCESS) {
    if (issuing_ && mover_running()) {
      jobs_issued_cv_.wait(lock);
      continue;
    }
    observe_mover_locked();  // this thread's calls come after the mover's
    r = run_queued_locked(seq);
  }
  return r;
}

void um_engine::observe_mover_locked() {
  if (mover_last_ <= observed_) return;
  (void)pool::driver().cuEventQuery(job_event(mover_last_));
  observed_ = mover_last_;
}

CUresult um_engine::run_job(const um_job& job, std::uint64_t seq) {
  const pool::driver_table& d = pool::driver();
  const CUstream stream = job.to_device ? to_device_ : to_host_;
  CUresult r = CUDA_SUCCESS;
  for (CUevent e : job.after) {
    if (r == CUDA_SUCCESS) r = d.cuStreamWaitEvent(stream, e, 0);
  }
  // See Note [A move waits for its buffer's last move only]: the job's event, unless
  // the ring has recorded it again since (then all of the other stream's work so far).
  const bool after_all =
      job.after_other || (job.after_job != 0 && !job_event_holds(job.after_job, seq - 1));
  if (r == CUDA_SUCCESS && job.after_job != 0 && !after_all) {
    r = d.cuStreamWaitEvent(stream, job_event(job.after_job), 0);
  }
  if (r == CUDA_SUCCESS && after_all) {
    // Every earlier job is enqueued: the other stream's moves so far.
    if (engine_order_event_ == nullptr &&
        d.cuEventCreate(&engine_order_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      engine_order_event_ = nullptr;
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
      r = d.cuEventRecord(engine_order_event_, job.to_device ? to_host_ : to_device_);
    }
    if (r == CUDA_SUCCESS) r = d.cuStreamWaitEvent(stream, engine_order_event_, 0);
  }
  const CUmemLocation where = um_location(job.to_device, device_);
  for (const auto& [base, bytes] : job.moves) {
    if (r != CUDA_SUCCESS) break;
    r = d.cuMemPrefetchAsync(base, bytes, where, 0, stream);
  }
  if (r == CUDA_SUCCESS && !job.discards.empty()) {
    // See Note [Discarding freed buffers] in residency/um_engine.h.
    std::vector<CUdeviceptr> bases;
    std::vector<std::size_t> sizes;
    for (const auto& [base, bytes] : job.discards) {
      bases.push_back(base);
      sizes.push_back(bytes);
    }
    r = d.cuMemDiscardBatchAsync(bases.data(), sizes.data(), bases.size(), 0, stream);
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
      discards_refused_.store(true, std::memory_order_relaxed);
      r = CUDA_SUCCESS;
      for (const auto& [base, bytes] : job.discards) {
        if (r == CUDA_SUCCESS) r = d.cuMemPrefetchAsync(base, bytes, where, 0, stream);
      }
    }
  }
  // Recorded even after an error, so that whoever waits for the job does not wait for
  // a stale record.
  const CUresult recorded = d.cuEventRecord(job_event(seq), stream);
  return r != CUDA_SUCCESS ? r : recorded;
}

void um_engine::mover_main() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<um_job> taken;
  while (true) {
    if (jobs_.empty()) {
      if (stop_) break;
      jobs_queued_.wait(lock);
      continue;
    }
    taken.clear();
    while (!jobs_.empty()) {
      taken.push_back(std::move(jobs_.front()));
      jobs_.pop_front();
    }
    const std::uint64_t first = jobs_issued_ + 1;
    jobs_taken_ = jobs_issued_ + taken.size();
    issuing_ = true;
    lock.unlock();
    CUresult error = CUDA_SUCCESS;
    for (std::size_t i = 0; i < taken.size(); ++i) {
      const CUresult r = run_job(taken[i], first + i);
      if (r != CUDA_SUCCESS && error == CUDA_SUCCESS) error = r;
    }
    lock.lock();
    issuing_ = false;
    jobs_issued_ = jobs_taken_;
    mover_last_ = jobs_taken_;
    for (const um_job& job : taken) {
      for (CUevent e : job.after) order_events_.push_back(e);
      stats_.mover_prefetches += job.moves.size();
    }
    if (error != CUDA_SUCCESS) mover_error_ = error;
    jobs_issued_cv_.notify_all();
  }
  mover_on_ = false;
  jobs_issued_cv_.notify_all();
}

}  // namespace oversub::residency
