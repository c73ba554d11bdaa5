// The swap engine's driver calls: the counted mapping calls, device memory taken from
// and given back to the spares (Note [Spare device memory] in residency/swap_engine.h),
// the copy events that pages hold while their copies are under way, and the batched
// copies themselves (Note [Batched moves] in residency/swap_engine.h).
#include "residency/swap_engine.h"

#include <algorithm>

#include "policy/cost_model.h"
#include "pool/driver_api.h"

namespace oversub::residency {

// ---- Mapping calls (counted: mapping_calls) and spare device memory ----

CUresult swap_engine::unmap_locked(std::uintptr_t va) {
  ++stats_.mapping_calls;
  return pool::driver().cuMemUnmap(va, cfg_.page_bytes);
}

CUresult swap_engine::set_access_locked(std::uintptr_t va, std::size_t pages) {
  ++stats_.mapping_calls;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = cfg_.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return pool::driver().cuMemSetAccess(va, pages * cfg_.page_bytes, &access, 1);
}

// The pages of room a fetch waits for before it remaps (policy::run_batch_pages from
// the calls' timed costs and the room), at most kMaxRunPages and half the room; one
// until both the calls and the link are measured. See Note [Remapping runs] in
// residency/swap_engine.h, and Note [Batches that keep up] in residency/swap_engine.h.
std::size_t swap_engine::batch_pages_locked() const {
  if (clock_ == nullptr || h2d_rate_ <= 0 || run_fit_.n < 8) return 1;
  static_assert(kMaxRunPages == policy::max_run_pages, "the simulator's runs are the mover's");
  const std::size_t pages = policy::run_batch_pages(
      run_fit_.per_run_ns(), static_cast<double>(cfg_.page_bytes) / h2d_rate_ * 1e9,
      run_fit_.per_page_ns(), capacity_bytes() / cfg_.page_bytes);
  // Never more than half the room: the room a batch waits for must come.
  return std::max<std::size_t>(1, std::min(pages, capacity_bytes() / cfg_.page_bytes / 2));
}

CUresult swap_engine::map_locked(std::uintptr_t va, CUmemGenericAllocationHandle h) {
  ++stats_.mapping_calls;
  if (CUresult r = pool::driver().cuMemMap(va, cfg_.page_bytes, 0, h, 0); r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = set_access_locked(va, 1); r != CUDA_SUCCESS) {
    unmap_locked(va);
    return r;
  }
  return CUDA_SUCCESS;
}

// A spare if there is one, else new device memory (Note [Spare device memory] in
// residency/swap_engine.h). The caller has made room (resident + one page <= capacity).
CUresult swap_engine::take_device_locked(CUmemGenericAllocationHandle& h) {
  if (!spare_.empty()) {
    // After the hand-off of the batch that gave it (Note [The mover] in
    // residency/swap_mover.cc).
    std::uint64_t batch = 0;
    h = take_spare_locked(batch);
    observe_locked(batch);
    return CUDA_SUCCESS;
  }
  // New memory may take room a mover batch made (Note [The mover] in
  // residency/swap_mover.cc).
  observe_locked(batches_);
  ++stats_.mapping_calls;
  const CUmemAllocationProp prop = pool::vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  return pool::driver().cuMemCreate(&h, cfg_.page_bytes, &prop, 0);
}

// The spare of the oldest mover batch (spare_ not empty); `batch` is that batch.
CUmemGenericAllocationHandle swap_engine::take_spare_locked(std::uint64_t& batch) {
  const std::size_t i = static_cast<std::size_t>(
      std::min_element(spare_batch_.begin(), spare_batch_.end()) - spare_batch_.begin());
  const CUmemGenericAllocationHandle h = spare_[i];
  batch = spare_batch_[i];
  spare_[i] = spare_.back();
  spare_batch_[i] = spare_batch_.back();
  spare_.pop_back();
  spare_batch_.pop_back();
  stats_.spare_bytes -= cfg_.page_bytes;
  ++stats_.spare_reuses;
  return h;
}

void swap_engine::give_device_locked(CUmemGenericAllocationHandle h, std::uint64_t batch) {
  spare_.push_back(h);
  spare_batch_.push_back(batch);
  stats_.spare_bytes += cfg_.page_bytes;
  trim_spares_locked();
}

// Spares never take the device past the capacity (which shrinks when other
// libraries take device memory: Note [Memory that is not ours] in residency/backend.h).
void swap_engine::trim_spares_locked() {
  while (!spare_.empty() && stats_.resident_bytes + stats_.spare_bytes > capacity_bytes()) {
    ++stats_.mapping_calls;
    pool::driver().cuMemRelease(spare_.back());
    spare_.pop_back();
    spare_batch_.pop_back();
    stats_.spare_bytes -= cfg_.page_bytes;
  }
}

// A page whose device mapping failed part way goes back to its host handle, its device
// memory to the spares. Best effort: the failure is reported by the caller.
void swap_engine::back_to_host_locked(std::uintptr_t va, page& p) {
  unmap_locked(va);
  map_locked(va, p.host);
  // Borrowed memory becomes a spare only once its lender's copy out is done and no
  // other address maps it (Note [Lending an evicting page's memory] in
  // residency/swap_engine.h).
  if (p.lender != 0) finish_lender_locked(p.lender);
  if (p.device != 0) give_device_locked(p.device);
  p.device = 0;
}

// ---- Copy events ----


int swap_engine::new_copy_locked() {
  int c = -1;
  if (!free_copies_.empty()) {
    c = free_copies_.back();
    free_copies_.pop_back();
  } else {
    CUevent e = nullptr;
    if (pool::driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return -1;
    copies_.push_back(copy_event{.event = e, .waiters = {}});
    c = static_cast<int>(copies_.size()) - 1;
  }
  copies_[c].refs = 0;
  copies_[c].done = false;
  copies_[c].seq = ++copy_seq_;
  copies_[c].stream = nullptr;
  copies_[c].not_before_ns = 0;
  copies_[c].pending = false;
  copies_[c].waiters.clear();
  return c;
}

void swap_engine::recycle_copy_locked(int c) {
  if (copies_[c].refs == 0) free_copies_.push_back(c);
}

// A new copy event recorded on s (its refs are 0 until pages hold it).
CUresult swap_engine::record_copy_locked(CUstream s, int& c) {
  c = new_copy_locked();
  if (c < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = pool::driver().cuEventRecord(copies_[c].event, s); r != CUDA_SUCCESS) {
    recycle_copy_locked(c);
    c = -1;
    return r;
  }
  copies_[c].stream = s;
  return CUDA_SUCCESS;
}

void swap_engine::hold_copy_locked(page& p, int c) {
  release_copy_locked(p);
  p.copy = c;
  ++copies_[c].refs;
}

void swap_engine::release_copy_locked(page& p) {
  if (p.copy < 0) return;
  if (--copies_[p.copy].refs == 0) free_copies_.push_back(p.copy);
  p.copy = -1;
}

// See Note [Asking the driver once] in residency/swap_engine.h: stream s ordered after
// copy c, with no call when c is known done, is on s already (stream order), or s waited
// for it before.
CUresult swap_engine::order_after_copy_locked(int c, CUstream s) {
  copy_event& e = copies_[c];
  if (e.done || e.stream == s ||
      std::find(e.waiters.begin(), e.waiters.end(), s) != e.waiters.end()) {
    return CUDA_SUCCESS;
  }
  if (CUresult r = issued_locked(c); r != CUDA_SUCCESS) return r;
  if (CUresult r = pool::driver().cuStreamWaitEvent(s, copies_[c].event, 0); r != CUDA_SUCCESS) {
    return r;
  }
  copies_[c].waiters.push_back(s);
  return CUDA_SUCCESS;
}

// Work on s uses p: s waits for p's copy if one may be under way (Note [Asking the
// driver once] in residency/swap_engine.h); a copy known done is let go.
CUresult swap_engine::use_after_copy_locked(page& p, CUstream s) {
  if (p.copy < 0) return CUDA_SUCCESS;
  if (copies_[p.copy].done) {
    release_copy_locked(p);
    return CUDA_SUCCESS;
  }
  return order_after_copy_locked(p.copy, s);
}

// c is complete, and so is every copy recorded before it on its stream.
void swap_engine::copy_done_locked(int c) {
  const copy_event& done = copies_[c];
  for (copy_event& e : copies_) {
    if (!e.done && e.stream == done.stream && e.seq <= done.seq) e.done = true;
  }
  copies_[c].done = true;
}

// Of copies (repeats allowed), the nth to complete (by seq: each copy stream runs in
// order), or the last with fewer; -1 with none.
int swap_engine::nth_copy_locked(std::vector<int> copies, std::size_t nth) const {
  if (copies.empty()) return -1;
  std::sort(copies.begin(), copies.end(),
            [&](int a, int b) { return copies_[a].seq < copies_[b].seq; });
  copies.erase(std::unique(copies.begin(), copies.end()), copies.end());
  return copies[std::min(std::max<std::size_t>(nth, 1), copies.size()) - 1];
}

CUresult swap_engine::wait_copy_locked(page& p) {
  if (p.copy < 0) return CUDA_SUCCESS;
  if (!copies_[p.copy].done) {
    if (CUresult r = issued_locked(p.copy); r != CUDA_SUCCESS) return r;
    if (p.copy < 0) return CUDA_SUCCESS;  // its job failed: still resident, no copy
    if (CUresult r = pool::driver().cuEventSynchronize(copies_[p.copy].event);
        r != CUDA_SUCCESS) {
      return r;
    }
    copy_done_locked(p.copy);
  }
  release_copy_locked(p);
  return CUDA_SUCCESS;
}

// ---- Copies ----

// See Note [Batched moves] in residency/swap_engine.h: one copy on s (to_host_ or
// to_device_) per run of the pages ps[i] with copy[i] set that are adjacent both at their
// addresses (vas[i]) and at their shadow addresses (to the host, one copy per page: Note
// [Evictions copy page by page] in residency/swap_engine.h), each with its own event,
// written to ev. Returns the index of the first page whose copy did not start (ps.size()
// when all did), with the driver's error in `error`.
std::size_t swap_engine::copy_runs_locked(std::span<const std::uintptr_t> vas,
                                               std::span<page* const> ps,
                                               std::span<const char> copy, CUstream s,
                                               std::span<int> ev, CUresult& error) {
  const bool out = s == to_host_;
  const std::size_t n = ps.size();
  for (std::size_t i = 0; i < n;) {
    if (!copy[i]) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    // See Note [Evictions copy page by page] in residency/swap_engine.h.
    while (!out && j < n && copy[j] && vas[j] == vas[j - 1] + cfg_.page_bytes &&
           ps[j]->shadow == ps[j - 1]->shadow + cfg_.page_bytes) {
      ++j;
    }
    const std::size_t bytes = (j - i) * cfg_.page_bytes;
    const int c = new_copy_locked();
    CUresult r = c < 0 ? CUDA_ERROR_OUT_OF_MEMORY
                       : enqueue_copy_locked(c, s, vas[i], ps[i]->shadow, bytes);
    if (r != CUDA_SUCCESS) {
      if (c >= 0) recycle_copy_locked(c);
      error = r;
      return i;
    }
    for (std::size_t k = i; k < j; ++k) ev[k] = c;
    i = j;
  }
  return n;
}

// Copies bytes between the page at va and its host handle's shadow (to the host on
// to_host_), then records copy c (new, or begun by an out_job) on s.
CUresult swap_engine::enqueue_copy_locked(int c, CUstream s, std::uintptr_t va,
                                          std::uintptr_t shadow, std::size_t bytes) {
  const bool out = s == to_host_;
  ++stats_.copies;
  CUresult r = out ? pool::driver().cuMemcpyAsync(shadow, va, bytes, s)
                   : pool::driver().cuMemcpyAsync(va, shadow, bytes, s);
  if (r == CUDA_SUCCESS) r = pool::driver().cuEventRecord(copies_[c].event, s);
  if (r != CUDA_SUCCESS) return r;
  copies_[c].stream = s;
  copies_[c].pending = false;
  if (out) stats_.bytes_to_host += bytes;
  // See Note [Not asking too early] in residency/swap_engine.h: the earliest this copy
  // can be done.
  const double rate = out ? d2h_rate_ : h2d_rate_;
  if (const std::uint64_t now = clock_ != nullptr && rates_measured_ && rate > 0 ? clock_() : 0;
      now != 0) {
    std::uint64_t& tail = out ? to_host_not_before_ : to_device_not_before_;
    tail = std::max(tail, now) +
           static_cast<std::uint64_t>(0.9e9 * static_cast<double>(bytes) / rate);
    copies_[c].not_before_ns = tail;
  }
  return CUDA_SUCCESS;
}

}  // namespace oversub::residency
