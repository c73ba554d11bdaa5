// Copies out on the mover's threads: the launching thread begins an eviction, a
// thread of the mover's enqueues its copy (Note [Copies out on the mover]).
#include "residency/swap_engine.h"

#include <thread>

#include "pool/driver_api.h"

namespace oversub::residency {

// Note [Copies out on the mover]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An eviction's copy out is two calls (the copy, its event) per page, and the
// launching thread made them: at full-size ResNet-50 on the H200's measured model,
// 3x, 1240 an iteration, 2.4 us each, most of the 3.3 ms (8.9% of the unlimited
// iteration) that swap mode added to that thread. With the mover on, the launching
// thread still begins the eviction, so that it is ordered after all work enqueued by
// then (Note [Moves after all work] in residency/swap_engine.h): it records an event
// on each stream the copy must come after, takes the pages' copy events (pending: not
// recorded yet) and marks the pages evicting; the rest is an out_job: the copy stream's waits on those
// events, then each page's copy and its event. A thread of the mover's own, the
// copier, enqueues the jobs as they come (without it, the mover at the top of each
// of its rounds). Rules:
//   - The events are fresh ones (order_events_), not the stream's own: a stream
//     waiting on an event waits for its latest record, and the stream's work
//     recorded later must not hold the copy back (a copy that waited for a kernel
//     that waits for its room would never run).
//   - Jobs are enqueued in the order they began, so the copy stream runs in that
//     order, as copy_done_locked and nth_copy_locked assume (each copy's seq is
//     taken when it begins).
//   - A pending copy's event is never waited on or asked about: whoever needs it
//     enqueues the jobs up to it first (issued_locked), on its own thread; asking
//     whether it is done (finish_completed_locked) takes it as not done.
//   - A copy the job waits for is held (refs) until the job is enqueued, so that its
//     event is not taken by another copy meanwhile.
//   - A job that fails leaves its pages not yet copied resident, as if their
//     eviction never began, and the error goes to the application at its next call;
//     when the mover stops, it enqueues the jobs left.
// Why a thread of its own: with the mover enqueuing them, full-size ResNet-50 at 3x
// went from 111.60 to 113.67 ms an iteration, the mover (which bounds that point)
// busier by the copies' calls; with the copier, 111.61 (docs/results.md, "Swap:
// copies out on the mover"). Where the VMM calls wait for the device's queued work
// (run_cost_fit::calls_wait, as the mover times them), the launching thread enqueues
// the copies itself, as with no mover: with SIMGPU_VMM_WAIT=1 deferred copies made
// GPT-2 at 1/8, 3x, 453.72 ms an iteration with the copier, 432.66 with the mover,
// 407.97 without either.

// Enqueues the jobs (Note [Copies out on the mover]).
CUresult swap_engine::issue_out_jobs_locked(int through) {
  const pool::driver_table& d = pool::driver();
  while (!out_jobs_.empty()) {
    out_job job = std::move(out_jobs_.front());
    out_jobs_.pop_front();
    CUresult r = CUDA_SUCCESS;
    for (CUevent e : job.after_streams) {
      if (r == CUDA_SUCCESS) r = d.cuStreamWaitEvent(to_host_, e, 0);
      order_events_.push_back(e);
    }
    for (int c : job.after_copies) {
      if (r == CUDA_SUCCESS) r = order_after_copy_locked(c, to_host_);
      if (--copies_[c].refs == 0) free_copies_.push_back(c);
    }
    if (r == CUDA_SUCCESS && job.clean >= 0) {
      r = d.cuEventRecord(copies_[job.clean].event, to_host_);
      if (r == CUDA_SUCCESS) copies_[job.clean].pending = false;
    }
    const std::thread::id me = std::this_thread::get_id();
    const bool by_mover = me == mover_.get_id() || me == copier_.get_id();
    for (const out_job::run& run : job.runs) {
      if (r != CUDA_SUCCESS) break;
      r = enqueue_copy_locked(run.c, to_host_, run.va, run.shadow, run.bytes);
      if (r == CUDA_SUCCESS && by_mover) ++stats_.mover_copies_out;
    }
    if (r != CUDA_SUCCESS) {
      // The pages whose copies were not enqueued still map their device memory, which
      // holds their bytes: resident, as if their eviction never began.
      const auto keep = [&](std::uintptr_t va, int c) {
        auto it = pages_.find(va);
        if (it == pages_.end()) return;
        page& p = it->second;
        if (p.copy != c || !copies_[c].pending) return;
        if (p.where != state::evicting || p.lent_to != 0) return;
        p.where = state::resident;
        release_copy_locked(p);
      };
      for (std::uintptr_t va : job.clean_pages) keep(va, job.clean);
      for (const out_job::run& run : job.runs) keep(run.va, run.c);
      if (job.clean >= 0) copies_[job.clean].pending = false;
      for (const out_job::run& run : job.runs) copies_[run.c].pending = false;
      return r;
    }
    if (through >= 0 && !copies_[through].pending) break;
  }
  return CUDA_SUCCESS;
}


// The host handle a page is copied out to, made at its first eviction.
CUresult swap_engine::ensure_host_handle_locked(page& p) {
  if (p.host != 0) return CUDA_SUCCESS;
  if (stats_.host_bytes + cfg_.page_bytes > cfg_.host_budget_bytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;  // reported as host_budget by the caller
  }
  const pool::driver_table& d = pool::driver();
  if (shadow_base_ == 0) {
    shadow_bytes_ = (cfg_.host_budget_bytes / cfg_.page_bytes) * cfg_.page_bytes;
    CUdeviceptr base = 0;
    if (CUresult r = d.cuMemAddressReserve(&base, shadow_bytes_, cfg_.page_bytes, 0, 0);
        r != CUDA_SUCCESS) {
      return r;
    }
    shadow_base_ = base;
  }
  // Fresh slots first, in order: pages first evicted together get adjacent shadows
  // and their copies merge (Note [Batched moves] in residency/swap_engine.h).
  std::uintptr_t slot = 0;
  if (shadow_next_ < shadow_bytes_ / cfg_.page_bytes) {
    slot = shadow_base_ + shadow_next_++ * cfg_.page_bytes;
  } else if (!free_shadow_.empty()) {
    slot = free_shadow_.back();
    free_shadow_.pop_back();
  } else {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUmemAllocationProp prop = pool::vmm_prop(CU_MEM_LOCATION_TYPE_HOST, 0);
  CUmemGenericAllocationHandle h = 0;
  if (CUresult r = d.cuMemCreate(&h, cfg_.page_bytes, &prop, 0); r != CUDA_SUCCESS) {
    free_shadow_.push_back(slot);
    return r;
  }
  if (CUresult r = map_locked(slot, h); r != CUDA_SUCCESS) {
    d.cuMemRelease(h);
    free_shadow_.push_back(slot);
    return r;
  }
  p.host = h;
  p.shadow = slot;
  p.host_current = false;
  stats_.host_bytes += cfg_.page_bytes;
  stats_.peak_host_bytes = std::max(stats_.peak_host_bytes, stats_.host_bytes);
  return CUDA_SUCCESS;
}

}  // namespace oversub::residency
