// The residency engine (see residency.h).
#include "pool/residency.h"

#include <algorithm>

#include "common/log.h"
#include "pool/driver_api.h"

namespace oversub::pool {

residency_engine::residency_engine(residency_config cfg) : cfg_(cfg) {}

residency_engine::~residency_engine() {
  if (!ready_) return;
  const driver_table& d = driver();
  // Unmapping memory queued work still uses would be a use after free: wait for
  // the work of every stream that used a page (errors ignored: a stream the
  // application destroyed has nothing queued).
  for (auto& [va, p] : pages_) {
    for (CUstream u : p.users) {
      if (CUevent e = stream_event_locked(u); e != nullptr && d.cuEventRecord(e, u) == CUDA_SUCCESS) {
        d.cuEventSynchronize(e);
      }
    }
    p.users.clear();
  }
  for (auto& [va, p] : pages_) {
    if (p.copy_pending) d.cuEventSynchronize(p.copy_done);
    d.cuMemUnmap(va, cfg_.page_bytes);
    if (p.device != 0) d.cuMemRelease(p.device);
    if (p.host != 0) {
      d.cuMemUnmap(p.shadow, cfg_.page_bytes);
      d.cuMemRelease(p.host);
    }
    if (p.copy_done != nullptr) d.cuEventDestroy(p.copy_done);
  }
  for (auto& [s, e] : stream_events_) d.cuEventDestroy(e);
  if (shadow_base_ != 0) d.cuMemAddressFree(shadow_base_, shadow_bytes_);
  d.cuStreamDestroy(to_host_);
  d.cuStreamDestroy(to_device_);
}

bool residency_engine::ensure_ready_locked() {
  if (ready_) return true;
  if (broken_) return false;
  const driver_table& d = driver();
  if (!d.complete || d.cuStreamCreate(&to_host_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.cuStreamCreate(&to_device_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    log::error("pool: the residency engine could not create its copy streams");
    broken_ = true;
    return false;
  }
  ready_ = true;
  return true;
}

residency_engine::page* residency_engine::find_locked(std::uintptr_t va) {
  auto it = pages_.find(va);
  return it == pages_.end() ? nullptr : &it->second;
}

bool residency_engine::owns_page(std::uintptr_t va) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pages_.count(va) != 0;
}

CUresult residency_engine::map_locked(std::uintptr_t va, CUmemGenericAllocationHandle h) {
  const driver_table& d = driver();
  if (CUresult r = d.cuMemMap(va, cfg_.page_bytes, 0, h, 0); r != CUDA_SUCCESS) return r;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = cfg_.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = d.cuMemSetAccess(va, cfg_.page_bytes, &access, 1); r != CUDA_SUCCESS) {
    d.cuMemUnmap(va, cfg_.page_bytes);
    return r;
  }
  return CUDA_SUCCESS;
}

bool residency_engine::create_page(std::uintptr_t va) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ensure_ready_locked()) return false;
  if (make_room_locked(cfg_.page_bytes) != CUDA_SUCCESS) return false;
  const driver_table& d = driver();
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  page p;
  if (d.cuMemCreate(&p.device, cfg_.page_bytes, &prop, 0) != CUDA_SUCCESS) return false;
  if (map_locked(va, p.device) != CUDA_SUCCESS) {
    d.cuMemRelease(p.device);
    return false;
  }
  p.last_use = ++tick_;
  pages_.emplace(va, std::move(p));
  ++stats_.pages;
  stats_.resident_bytes += cfg_.page_bytes;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  return true;
}

void residency_engine::destroy_page(std::uintptr_t va) {
  std::lock_guard<std::mutex> lock(mutex_);
  page* p = find_locked(va);
  if (p == nullptr) return;
  const driver_table& d = driver();
  if (p->copy_pending) d.cuEventSynchronize(p->copy_done);
  d.cuMemUnmap(va, cfg_.page_bytes);
  if (p->device != 0) {
    d.cuMemRelease(p->device);
    stats_.resident_bytes -= cfg_.page_bytes;
  }
  if (p->host != 0) {
    d.cuMemUnmap(p->shadow, cfg_.page_bytes);
    d.cuMemRelease(p->host);
    free_shadow_.push_back(p->shadow);
    stats_.host_bytes -= cfg_.page_bytes;
  }
  if (p->copy_done != nullptr) d.cuEventDestroy(p->copy_done);
  pages_.erase(va);
  --stats_.pages;
}

// The engine's pages under the required (or, with optional, the optional) ranges,
// sorted, each once.
std::vector<std::uintptr_t> residency_engine::pages_of(std::span<const byte_range> ranges,
                                                       bool optional) const {
  std::vector<std::uintptr_t> out;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.reach || r.optional != optional) continue;
    for (std::uintptr_t a = r.addr & mask; a < r.addr + r.bytes; a += cfg_.page_bytes) {
      if (pages_.count(a) != 0) out.push_back(a);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CUevent residency_engine::stream_event_locked(CUstream s) {
  auto it = stream_events_.find(s);
  if (it != stream_events_.end()) return it->second;
  CUevent e = nullptr;
  if (driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  stream_events_.emplace(s, e);
  return e;
}

// The copy stream waits for everything the page's users enqueued so far.
CUresult residency_engine::order_after_users_locked(page& p, CUstream copy_stream) {
  const driver_table& d = driver();
  for (CUstream u : p.users) {
    CUevent e = stream_event_locked(u);
    if (e == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = d.cuEventRecord(e, u); r != CUDA_SUCCESS) return r;
    if (CUresult r = d.cuStreamWaitEvent(copy_stream, e, 0); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult residency_engine::ensure_host_handle_locked(page& p) {
  if (p.host != 0) return CUDA_SUCCESS;
  if (stats_.host_bytes + cfg_.page_bytes > cfg_.host_budget_bytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;  // reported as host_budget by the caller
  }
  const driver_table& d = driver();
  if (shadow_base_ == 0) {
    shadow_bytes_ = (cfg_.host_budget_bytes / cfg_.page_bytes) * cfg_.page_bytes;
    CUdeviceptr base = 0;
    if (CUresult r = d.cuMemAddressReserve(&base, shadow_bytes_, cfg_.page_bytes, 0, 0);
        r != CUDA_SUCCESS) {
      return r;
    }
    shadow_base_ = base;
  }
  std::uintptr_t slot = 0;
  if (!free_shadow_.empty()) {
    slot = free_shadow_.back();
    free_shadow_.pop_back();
  } else {
    slot = shadow_base_ + shadow_next_++ * cfg_.page_bytes;
  }
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_HOST, 0);
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

CUresult residency_engine::evict_begin_locked(std::uintptr_t va, page& p) {
  const driver_table& d = driver();
  if (CUresult r = ensure_host_handle_locked(p); r != CUDA_SUCCESS) return r;
  if (p.copy_done == nullptr) {
    if (CUresult r = d.cuEventCreate(&p.copy_done, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
      return r;
    }
  }
  if (p.copy_pending) {
    // A fetch still under way: the eviction comes after it.
    if (CUresult r = d.cuStreamWaitEvent(to_host_, p.copy_done, 0); r != CUDA_SUCCESS) return r;
  }
  if (CUresult r = order_after_users_locked(p, to_host_); r != CUDA_SUCCESS) return r;
  const bool dead = content_dead(p, write_epoch_);
  const bool copy =
      !dead && (!cfg_.clean_evictions || !p.host_current || p.clean_epoch != write_epoch_);
  if (copy) {
    // The page's own address still maps its device memory: copy it to the host handle.
    if (CUresult r = d.cuMemcpyAsync(p.shadow, va, cfg_.page_bytes, to_host_); r != CUDA_SUCCESS) {
      return r;
    }
    stats_.bytes_to_host += cfg_.page_bytes;
  } else {
    ++stats_.clean_evictions;
    if (dead) ++stats_.dead_evictions;
  }
  if (CUresult r = d.cuEventRecord(p.copy_done, to_host_); r != CUDA_SUCCESS) return r;
  p.copy_pending = true;
  p.where = state::evicting;
  ++stats_.evictions;
  return CUDA_SUCCESS;
}

// Waits for the eviction's event, then maps the host handle where the device memory
// was and releases the device memory.
CUresult residency_engine::evict_finish_locked(std::uintptr_t va, page& p) {
  const driver_table& d = driver();
  if (p.copy_pending) {
    if (CUresult r = d.cuEventSynchronize(p.copy_done); r != CUDA_SUCCESS) return r;
    p.copy_pending = false;
  }
  if (CUresult r = d.cuMemUnmap(va, cfg_.page_bytes); r != CUDA_SUCCESS) return r;
  if (CUresult r = map_locked(va, p.host); r != CUDA_SUCCESS) {
    // Put the device memory back: the bytes must stay reachable.
    map_locked(va, p.device);
    return r;
  }
  d.cuMemRelease(p.device);
  p.device = 0;
  p.where = state::on_host;
  p.host_current = true;
  p.clean_epoch = write_epoch_;
  p.users.clear();  // the wait above ordered the host after all of them
  stats_.resident_bytes -= cfg_.page_bytes;
  return CUDA_SUCCESS;
}

// Without wait: evictions whose copies are known complete are finished, then new
// ones begun; CUDA_ERROR_NOT_READY when the room is not there yet.
CUresult residency_engine::make_room_locked(std::uint64_t bytes, bool wait) {
  if (!wait) {
    const driver_table& d = driver();
    std::uint64_t leaving = 0;
    for (auto& [va, p] : pages_) {
      if (p.where != state::evicting) continue;
      if (d.cuEventQuery(p.copy_done) == CUDA_SUCCESS) {
        p.copy_pending = false;
        if (CUresult r = evict_finish_locked(va, p); r != CUDA_SUCCESS) return r;
      } else {
        leaving += cfg_.page_bytes;
      }
    }
    while (stats_.resident_bytes - leaving + bytes > capacity_bytes()) {
      // Dead pages first (Note [Dead pages]: they leave without a copy), then the
      // least recently used.
      std::uintptr_t victim = 0;
      page* vp = nullptr;
      bool vdead = false;
      for (auto& [va, p] : pages_) {
        if (p.where != state::resident || p.pinned == epoch_) continue;
        const bool dead = content_dead(p, write_epoch_);
        if (vp == nullptr || (dead && !vdead) || (dead == vdead && p.last_use < vp->last_use)) {
          victim = va;
          vp = &p;
          vdead = dead;
        }
      }
      if (vp == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
      if (CUresult r = evict_begin_locked(victim, *vp); r != CUDA_SUCCESS) return r;
      leaving += cfg_.page_bytes;
    }
    return stats_.resident_bytes + bytes > capacity_bytes() ? CUDA_ERROR_NOT_READY
                                                               : CUDA_SUCCESS;
  }
  while (stats_.resident_bytes + bytes > capacity_bytes()) {
    // Note [Making room]: finish an eviction under way first, then evict the least
    // recently used page that is not pinned.
    // Then dead pages before live ones (Note [Dead pages]).
    std::uintptr_t victim = 0;
    page* vp = nullptr;
    bool finishing = false;
    bool vdead = false;
    for (auto& [va, p] : pages_) {
      if (p.where == state::on_host || p.pinned == epoch_) continue;
      const bool evicting = p.where == state::evicting;
      const bool dead = !evicting && content_dead(p, write_epoch_);
      if (vp == nullptr || (evicting && !finishing) ||
          (evicting == finishing &&
           ((dead && !vdead) || (dead == vdead && p.last_use < vp->last_use)))) {
        victim = va;
        vp = &p;
        finishing = evicting;
        vdead = dead;
      }
    }
    if (vp == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!finishing) {
      if (CUresult r = evict_begin_locked(victim, *vp); r != CUDA_SUCCESS) return r;
    }
    ++stats_.waits;
    if (CUresult r = evict_finish_locked(victim, *vp); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult residency_engine::fetch_locked(std::uintptr_t va, page& p, bool wait) {
  const driver_table& d = driver();
  if (p.where == state::evicting) {
    // Not released yet: the device memory still holds the bytes. Keep it.
    if (p.copy_pending) {
      if (CUresult r = d.cuEventSynchronize(p.copy_done); r != CUDA_SUCCESS) return r;
      p.copy_pending = false;
    }
    p.where = state::resident;
    return CUDA_SUCCESS;  // the host copy is as current as the eviction made it
  }
  if (CUresult r = make_room_locked(cfg_.page_bytes, wait); r != CUDA_SUCCESS) return r;
  // Unpredicted users of the host mapping (work we did not see use it) must be done
  // before the address changes backing.
  if (!p.users.empty()) {
    if (CUresult r = order_after_users_locked(p, to_device_); r != CUDA_SUCCESS) return r;
    if (CUresult r = d.cuStreamSynchronize(to_device_); r != CUDA_SUCCESS) return r;
    p.users.clear();
  }
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  if (CUresult r = d.cuMemCreate(&p.device, cfg_.page_bytes, &prop, 0); r != CUDA_SUCCESS) {
    p.device = 0;
    return r;
  }
  if (CUresult r = d.cuMemUnmap(va, cfg_.page_bytes); r != CUDA_SUCCESS) {
    d.cuMemRelease(p.device);
    p.device = 0;
    return r;
  }
  if (CUresult r = map_locked(va, p.device); r != CUDA_SUCCESS) {
    d.cuMemRelease(p.device);
    p.device = 0;
    map_locked(va, p.host);
    return r;
  }
  const bool dead = content_dead(p, fetch_epoch_);
  CUresult r = dead ? CUDA_SUCCESS : d.cuMemcpyAsync(va, p.shadow, cfg_.page_bytes, to_device_);
  if (r == CUDA_SUCCESS) r = d.cuEventRecord(p.copy_done, to_device_);
  if (r != CUDA_SUCCESS) {
    // The copy never started (or cannot be waited for): put the host memory back at
    // the address, so the page's bytes stay where its state says they are.
    d.cuStreamSynchronize(to_device_);
    d.cuMemUnmap(va, cfg_.page_bytes);
    d.cuMemRelease(p.device);
    p.device = 0;
    map_locked(va, p.host);
    return r;
  }
  stats_.resident_bytes += cfg_.page_bytes;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  p.copy_pending = true;
  p.where = state::resident;
  p.host_current = true;
  p.clean_epoch = write_epoch_;
  ++stats_.fetches;
  if (dead) {
    ++stats_.dead_fetches;
  } else {
    stats_.bytes_to_device += cfg_.page_bytes;
  }
  return CUDA_SUCCESS;
}

namespace {

// Pages marked with the current epoch are pinned; a new epoch starts on entry and
// another on exit, so nothing stays pinned once prepare() or prefetch() returns.
struct unpin_at_exit {
  std::uint64_t& epoch;
  explicit unpin_at_exit(std::uint64_t& e) : epoch(++e) {}
  ~unpin_at_exit() { ++epoch; }
};

bool capturing(CUstream s) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return driver().cuStreamIsCapturing(s, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

prepare_result residency_engine::prepare(std::span<const byte_range> ranges, CUstream stream,
                                         bool writes) {
  std::lock_guard<std::mutex> lock(mutex_);
  prepare_result result;
  fetch_epoch_ = write_epoch_;  // this work's own writes come after its fetches
  if (writes) ++write_epoch_;
  if (!ready_ || pages_.empty()) return result;
  std::vector<std::uintptr_t> wanted = pages_of(ranges);
  result.needed_bytes = wanted.size() * cfg_.page_bytes;
  if (result.needed_bytes > capacity_bytes()) {
    result.code = residency_errc::too_large;
    return result;
  }
  // Note [Windows into large allocations]: optional pages while they fit.
  const std::size_t room = capacity_bytes() / cfg_.page_bytes;
  for (std::uintptr_t va : pages_of(ranges, true)) {
    if (wanted.size() >= room) break;
    if (!std::binary_search(wanted.begin(), wanted.begin() + static_cast<std::ptrdiff_t>(
                                                                  result.needed_bytes / cfg_.page_bytes),
                            va)) {
      wanted.push_back(va);
    }
  }
  const bool reaches = std::any_of(ranges.begin(), ranges.end(),
                                   [](const byte_range& r) { return r.reach && r.bytes != 0; });
  if (wanted.empty() && !reaches) return result;
  if (capturing(stream)) return result;  // nothing may be enqueued for us now
  const driver_table& d = driver();
  const unpin_at_exit unpin{epoch_};
  for (std::uintptr_t va : wanted) pages_[va].pinned = epoch_;
  for (std::uintptr_t va : wanted) {
    page& p = pages_[va];
    p.last_use = ++tick_;
    if (p.where != state::resident) {
      if (CUresult r = fetch_locked(va, p); r != CUDA_SUCCESS) {
        ++stats_.failures;
        result.driver = r;
        result.code = r == CUDA_ERROR_OUT_OF_MEMORY ? residency_errc::no_room
                                                    : residency_errc::driver_error;
        return result;
      }
    }
    if (p.copy_pending) {
      // Its fetch may still be under way: the work waits for it.
      if (d.cuEventQuery(p.copy_done) == CUDA_SUCCESS) {
        p.copy_pending = false;
      } else if (CUresult r = d.cuStreamWaitEvent(stream, p.copy_done, 0); r != CUDA_SUCCESS) {
        result.driver = r;
        result.code = residency_errc::driver_error;
        return result;
      }
    }
    if (std::find(p.users.begin(), p.users.end(), stream) == p.users.end()) {
      p.users.push_back(stream);
    }
  }
  // Reachable pages: users only. One whose eviction copy is in flight is finished
  // first (its users were ordered before the copy; the new one comes after the remap).
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (!r.reach || r.bytes == 0) continue;
    for (std::uintptr_t a = r.addr & mask; a < r.addr + r.bytes; a += cfg_.page_bytes) {
      auto it = pages_.find(a);
      if (it == pages_.end()) continue;
      page& p = it->second;
      if (p.where == state::evicting) {
        if (CUresult rc = evict_finish_locked(a, p); rc != CUDA_SUCCESS) {
          ++stats_.failures;
          result.driver = rc;
          result.code = residency_errc::driver_error;
          return result;
        }
      }
      if (std::find(p.users.begin(), p.users.end(), stream) == p.users.end()) {
        p.users.push_back(stream);
      }
    }
  }
  return result;
}

bool residency_engine::evict(std::span<const byte_range> ranges) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ready_) return false;
  for (std::uintptr_t va : pages_of(ranges)) {
    page& p = pages_[va];
    if (p.where != state::resident) continue;
    if (evict_begin_locked(va, p) != CUDA_SUCCESS) return false;
  }
  return true;
}

bool residency_engine::prefetch(std::span<const byte_range> ranges) {
  return prefetch_pages(ranges, nullptr);
}

bool residency_engine::prefetch_now(std::span<const byte_range> ranges,
                                    std::vector<byte_range>& later) {
  return prefetch_pages(ranges, &later);
}

// later null: fetch, waiting for room as needed; otherwise Note [Prefetch without
// waiting]: pages that find no room (or are still on their way out) go to later.
bool residency_engine::prefetch_pages(std::span<const byte_range> ranges,
                                      std::vector<byte_range>* later) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ready_) return false;
  fetch_epoch_ = write_epoch_;
  const unpin_at_exit unpin{epoch_};
  const std::vector<std::uintptr_t> wanted = pages_of(ranges);
  for (std::uintptr_t va : wanted) pages_[va].pinned = epoch_;
  for (std::uintptr_t va : wanted) {
    page& p = pages_[va];
    p.last_use = ++tick_;
    if (p.where == state::resident) continue;
    if (later != nullptr && p.where == state::evicting) {
      later->push_back(byte_range{va, cfg_.page_bytes});  // its copy out is under way
      continue;
    }
    const CUresult r = fetch_locked(va, p, later == nullptr);
    if (r == CUDA_ERROR_NOT_READY && later != nullptr) {
      later->push_back(byte_range{va, cfg_.page_bytes});
    } else if (r != CUDA_SUCCESS) {
      return false;
    }
  }
  return true;
}

bool residency_engine::reserve_foreign(std::int64_t bytes) {
  if (bytes < 0) {
    foreign_bytes_.fetch_sub(static_cast<std::uint64_t>(-bytes), std::memory_order_relaxed);
    return true;
  }
  std::uint64_t have = foreign_bytes_.load(std::memory_order_relaxed);
  do {
    if (have + static_cast<std::uint64_t>(bytes) >= cfg_.capacity_bytes) return false;
  } while (!foreign_bytes_.compare_exchange_weak(have, have + static_cast<std::uint64_t>(bytes),
                                                  std::memory_order_relaxed));
  return true;
}

template <typename F>
void residency_engine::for_pages_locked(std::uintptr_t addr, std::size_t bytes, F&& f) {
  if (bytes == 0) return;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (std::uintptr_t a = addr & mask; a < addr + bytes; a += cfg_.page_bytes) {
    if (page* p = find_locked(a)) f(*p);
  }
}

void residency_engine::occupy(std::uintptr_t addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes == 0 || !occupied_.emplace(addr, bytes).second) return;
  for_pages_locked(addr, bytes, [&](page& p) {
    if (p.occupants++ == 0) p.fresh_epoch = write_epoch_;
  });
}

void residency_engine::vacate(std::uintptr_t addr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = occupied_.find(addr);
  if (it == occupied_.end()) return;
  const std::size_t bytes = it->second;
  occupied_.erase(it);
  for_pages_locked(addr, bytes, [&](page& p) {
    if (p.occupants > 0 && --p.occupants == 0) p.dead = true;
  });
}

residency_stats residency_engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::optional<residency_stats> residency_engine::try_stats() const {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return stats_;
}

}  // namespace oversub::pool
