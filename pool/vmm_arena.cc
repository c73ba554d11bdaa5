// The device arena (see vmm_arena.h).
#include "pool/vmm_arena.h"

#include <algorithm>
#include <limits>

#include "common/log.h"
#include "pool/driver_api.h"

namespace oversub::pool {

namespace {

constexpr std::size_t fallback_range_bytes = std::size_t{1} << 30;  // 1 GiB, no device info
constexpr int slow_walk = 1 << 20;  // look at every block once the fast search failed

}  // namespace

// Note [Chunks as pages]
// ~~~~~~~~~~~~~~~~~~~~~~
// With a residency engine (swap mode) the arena keeps
// deciding where blocks go and which chunks are needed, and the engine decides what
// backs each chunk: it creates a chunk as a resident page (evicting others to stay
// under its capacity) and swaps it out and in at the same address. r.chunks[i] then
// holds engine_page instead of a handle. Every request goes through the ranges, so
// every byte is on some page the engine can move.
namespace {
constexpr CUmemGenericAllocationHandle engine_page = ~CUmemGenericAllocationHandle{0};
}  // namespace

vmm_arena::vmm_arena(vmm_arena_config cfg, stream_fences& f) : cfg_(cfg), fences_(f) {
  if (cfg_.pages != nullptr) cfg_.dedicated_threshold_bytes = ~std::size_t{0};
}

vmm_arena::~vmm_arena() {
  if (!driver_ready_) return;
  // Unmapping memory queued work still uses would be a use after free: wait for the
  // work the tickets know about (the owner synchronises for the rest).
  fences_.wait_all();
  const driver_table& d = driver();
  for (range& r : ranges_) {
    for (std::size_t i = 0; i < r.chunks.size(); ++i) {
      if (r.chunks[i] == engine_page) {
        cfg_.pages->destroy_page(r.base + i * granularity_);
      } else if (r.chunks[i] != 0) {
        d.cuMemUnmap(r.base + i * granularity_, granularity_);
        d.cuMemRelease(r.chunks[i]);
      }
    }
    d.cuMemAddressFree(r.base, r.bytes);
  }
  for (std::vector<dedicated>* list : {&dedicated_live_, &dedicated_free_}) {
    for (dedicated& x : *list) release_dedicated(x);
  }
}

bool vmm_arena::ensure_driver() {
  if (driver_ready_) return true;
  const driver_table& d = driver();
  if (!d.complete) return false;
  CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  std::size_t g = 0;
  if (d.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
          CUDA_SUCCESS &&
      g != 0) {
    granularity_ = g;
  }
  if (cfg_.range_bytes == 0) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    cfg_.range_bytes = d.cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS && total_bytes != 0
                           ? total_bytes
                           : fallback_range_bytes;
  }
  cfg_.range_bytes = align_up(cfg_.range_bytes, granularity_);
  device_range_bytes_ = cfg_.range_bytes;
  // See Note [One range in swap mode].
  if (cfg_.pages != nullptr) {
    const std::size_t most = (std::numeric_limits<std::size_t>::max() / 2) - cfg_.range_bytes;
    cfg_.range_bytes =
        align_up(cfg_.range_bytes + std::min(cfg_.swap_range_bytes, most), granularity_);
  }
  cfg_.dedicated_threshold_bytes = std::max(cfg_.dedicated_threshold_bytes, granularity_);
  driver_ready_ = true;
  return true;
}

// Note [One range in swap mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A range the size of the device is enough while the
// arena holds no more than the device does. In swap mode it holds the whole
// oversubscribed footprint, and a second range is reserved wherever the driver
// finds address space: the blocks allocated one after another (a layer's weights,
// gradients and optimizer state) are split between two ranges, the small ones fill
// the first range's tail, and the pages that hold the iteration's activations also
// hold long-lived buffers. The pages then carry more bytes that a launch does not
// use: simtrain's activation-heavy shape at 1.5x was learned over 19 pages, the
// plan moved 28 MiB each way per iteration, against 18 pages and 20 MiB with one
// range (docs/design/swap.md, "One range"). So in swap mode the first range also covers
// what the host may hold (the device's memory plus swap_range_bytes: the host
// budget, at most the host's memory). Address space is not memory, but a driver
// may refuse a reservation that large (llama.cpp's VMM pool met that on some
// systems), so a refused reservation is retried at half the size, down to what
// the request and the device's memory need, before the arena reports failure.
bool vmm_arena::add_range_locked(std::size_t min_bytes) {
  const std::size_t floor_bytes =
      align_up(std::max(device_range_bytes_, min_bytes), granularity_);
  std::size_t bytes = align_up(std::max(cfg_.range_bytes, min_bytes), granularity_);
  CUdeviceptr base = 0;
  const driver_table& d = driver();
  CUresult rc = d.cuMemAddressReserve(&base, bytes, granularity_, 0, 0);
  while (rc != CUDA_SUCCESS && bytes > floor_bytes) {
    bytes = std::max(floor_bytes, align_up(bytes / 2, granularity_));
    rc = d.cuMemAddressReserve(&base, bytes, granularity_, 0, 0);
    if (rc == CUDA_SUCCESS) cfg_.range_bytes = bytes;  // later ranges ask for no more
  }
  if (!driver_ok(rc, "cuMemAddressReserve")) return false;
  range r;
  r.base = base;
  r.bytes = bytes;
  r.chunks.assign(bytes / granularity_, 0);
  index_.add_range(base, bytes, static_cast<std::uint32_t>(ranges_.size()));
  r.first = nullptr;
  index_.for_each_free([&](block& b) {
    if (b.addr == base) r.first = &b;
  });
  ranges_.push_back(std::move(r));
  stats_.reserved_bytes += bytes;
  ++stats_.grows;
  return true;
}

bool vmm_arena::map_chunk_locked(range& r, std::size_t i) {
  if (cfg_.pages != nullptr) {
    if (!cfg_.pages->create_page(r.base + i * granularity_)) return false;
    r.chunks[i] = engine_page;
    stats_.mapped_bytes += granularity_;
    stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.mapped_bytes);
    return true;
  }
  const driver_table& d = driver();
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  CUmemGenericAllocationHandle h = 0;
  if (d.cuMemCreate(&h, granularity_, &prop, 0) != CUDA_SUCCESS) return false;
  const CUdeviceptr at = r.base + i * granularity_;
  if (d.cuMemMap(at, granularity_, 0, h, 0) != CUDA_SUCCESS) {
    d.cuMemRelease(h);
    return false;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (d.cuMemSetAccess(at, granularity_, &access, 1) != CUDA_SUCCESS) {
    d.cuMemUnmap(at, granularity_);
    d.cuMemRelease(h);
    return false;
  }
  r.chunks[i] = h;
  stats_.mapped_bytes += granularity_;
  stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.mapped_bytes);
  return true;
}

void vmm_arena::unmap_chunk_locked(range& r, std::size_t i) {
  if (r.chunks[i] == engine_page) {
    cfg_.pages->destroy_page(r.base + i * granularity_);
  } else {
    const driver_table& d = driver();
    d.cuMemUnmap(r.base + i * granularity_, granularity_);
    d.cuMemRelease(r.chunks[i]);
  }
  r.chunks[i] = 0;
  stats_.mapped_bytes -= granularity_;
  ++stats_.trims;
}

bool vmm_arena::map_block_locked(const block& b, CUstream stream) {
  range& r = ranges_[b.range];
  const std::size_t first = (b.addr - r.base) / granularity_;
  const std::size_t last = (b.addr + b.size - 1 - r.base) / granularity_;
  for (std::size_t i = first; i <= last; ++i) {
    if (r.chunks[i] != 0) continue;
    if (!map_chunk_locked(r, i)) {
      // Note [Short of device memory]
      // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
      // Give back what no block uses, then retry once.
      if (trim_locked(stream_fences::capturing(stream)) == 0 || !map_chunk_locked(r, i)) {
        return false;
      }
    }
    ++stats_.grows;
  }
  return true;
}

void vmm_arena::prune_locked(bool after_wait) {
  index_.for_each_free([&](block& b) {
    // Overflowed sets lost some tickets; every event recorded so far is done after a
    // wait_all, so those are done too.
    if (after_wait) b.tickets.overflow = false;
    if (b.tickets.count != 0) {
      b.tickets.prune([&](const ticket& t) { return fences_.known_complete(t); });
    }
  });
  for (dedicated& x : dedicated_free_) {
    if (after_wait) x.tickets.overflow = false;
    x.tickets.prune([&](const ticket& t) { return fences_.known_complete(t); });
  }
  index_.merge_settled();
}

block* vmm_arena::take_locked(std::size_t size, int consumer, CUstream stream) {
  auto usable = [&](const block& b) { return fences_.reusable(b.tickets, consumer); };
  auto needs_mapping = [&](const block& b) {
    const range& r = ranges_[b.range];
    for (std::uintptr_t a = b.addr & ~(granularity_ - 1); a < b.addr + b.size; a += granularity_) {
      if (r.chunks[(a - r.base) / granularity_] == 0) return true;
    }
    return false;
  };
  // Note [No event calls during capture]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // cuEventQuery and cuEventSynchronize are
  // illegal while the stream captures, so the slow paths ask first (one driver call,
  // never on the fast path) and then only take, grow, or fail.
  int capture_state = -1;  // unknown
  auto capturing = [&] {
    if (capture_state < 0) capture_state = stream_fences::capturing(stream) ? 1 : 0;
    return capture_state == 1;
  };
  block* b = index_.take(size, usable);
  if (b != nullptr && needs_mapping(*b) && fences_.outstanding() && !capturing() &&
      fences_.poll() != 0) {
    // Work finished since: a block that is already mapped may be usable now.
    index_.release(b);
    prune_locked();
    b = index_.take(size, usable, slow_walk);
  }
  if (b == nullptr && !capturing()) {
    fences_.poll();
    prune_locked();
    b = index_.take(size, usable, slow_walk);
  }
  if (b == nullptr && add_range_locked(size)) b = index_.take(size, usable, slow_walk);
  if (b == nullptr && !capturing()) {
    ++stats_.syncs;
    fences_.wait_all();
    prune_locked(true);
    b = index_.take(size, usable, slow_walk);
  }
  return b;
}

allocation_result vmm_arena::allocate(std::size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ensure_driver()) return {nullptr, pool_errc::driver_missing};
  const std::size_t size = block_index::round(bytes);
  const int consumer = fences_.slot_of(stream);
  if (size >= cfg_.dedicated_threshold_bytes) {
    return allocate_dedicated_locked(size, consumer, stream_fences::capturing(stream));
  }
  block* b = take_locked(size, consumer, stream);
  if (b == nullptr) {
    ++stats_.failed_allocations;
    return {nullptr, pool_errc::out_of_memory};
  }
  if (!map_block_locked(*b, stream)) {
    index_.release(b);
    ++stats_.failed_allocations;
    return {nullptr, pool_errc::out_of_memory};
  }
  b->alloc_epoch = fences_.epoch();
  ++stats_.allocations;
  note_used_locked();
  return {reinterpret_cast<void*>(b->addr), pool_errc::ok};
}

bool vmm_arena::create_mapping(std::uintptr_t at, std::size_t bytes,
                               CUmemGenericAllocationHandle& h) {
  const driver_table& d = driver();
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  if (d.cuMemCreate(&h, bytes, &prop, 0) != CUDA_SUCCESS) return false;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (d.cuMemMap(at, bytes, 0, h, 0) != CUDA_SUCCESS) {
    d.cuMemRelease(h);
    return false;
  }
  if (d.cuMemSetAccess(at, bytes, &access, 1) != CUDA_SUCCESS) {
    d.cuMemUnmap(at, bytes);
    d.cuMemRelease(h);
    return false;
  }
  return true;
}

void vmm_arena::release_dedicated(dedicated& x) {
  const driver_table& d = driver();
  d.cuMemUnmap(x.base, x.bytes);
  d.cuMemRelease(x.handle);
  d.cuMemAddressFree(x.base, x.bytes);
}

// Note [Dedicated mappings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A freed dedicated mapping is kept (with its tickets)
// for a later request of the same size; the cache is emptied of finished entries
// whenever a new one must be created, and by trim.
allocation_result vmm_arena::allocate_dedicated_locked(std::size_t size, int consumer,
                                                       bool capturing) {
  const std::size_t bytes = align_up(size, granularity_);
  auto reuse = [&]() -> allocation_result {
    for (std::size_t i = 0; i < dedicated_free_.size(); ++i) {
      dedicated& x = dedicated_free_[i];
      if (x.bytes == bytes && fences_.reusable(x.tickets, consumer)) {
        x.alloc_epoch = fences_.epoch();
        dedicated_live_.push_back(x);
        dedicated_free_.erase(dedicated_free_.begin() + static_cast<std::ptrdiff_t>(i));
        stats_.used_bytes += bytes;
        ++stats_.allocations;
        note_used_locked();
        return {reinterpret_cast<void*>(dedicated_live_.back().base), pool_errc::ok};
      }
    }
    return {};
  };
  if (allocation_result r = reuse()) return r;
  if (!capturing) {
    fences_.fence_all();  // Note [Unmap after all work] in stream_fences.h
    prune_locked();
    if (allocation_result r = reuse()) return r;
  }
  release_finished_dedicated_locked();
  for (int attempt = 0; attempt < 2; ++attempt) {
    CUdeviceptr base = 0;
    if (!driver_ok(driver().cuMemAddressReserve(&base, bytes, granularity_, 0, 0),
                   "cuMemAddressReserve")) {
      break;
    }
    dedicated x;
    x.base = base;
    x.bytes = bytes;
    x.alloc_epoch = fences_.epoch();
    if (create_mapping(base, bytes, x.handle)) {
      dedicated_live_.push_back(x);
      stats_.reserved_bytes += bytes;
      stats_.mapped_bytes += bytes;
      stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.mapped_bytes);
      stats_.used_bytes += bytes;
      ++stats_.grows;
      ++stats_.allocations;
      note_used_locked();
      return {reinterpret_cast<void*>(base), pool_errc::ok};
    }
    driver().cuMemAddressFree(base, bytes);
    if (attempt == 0) {
      if (!capturing) {
        ++stats_.syncs;
        fences_.wait_all();
        prune_locked(true);
      }
      if (trim_locked(capturing) == 0) break;
    }
  }
  ++stats_.failed_allocations;
  return {nullptr, pool_errc::out_of_memory};
}

void vmm_arena::deallocate(void* ptr, std::size_t, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  ticket_set tickets;
  if (block* b = index_.find_live(addr)) {
    if (stream == no_stream) {
      fences_.tickets_since(b->alloc_epoch, tickets);
    } else {
      fences_.ticket_on(stream, tickets);
    }
    // Note [Tickets outlive a reuse]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // A block reused on the same stream keeps the
    // tickets of its previous users, so a free with no work since cannot drop them.
    b->tickets.merge(tickets);
    b->tickets.prune([&](const ticket& t) { return fences_.known_complete(t); });
    b->free_epoch = fences_.epoch();  // Note [Unmap after all work] in stream_fences.h
    index_.release(b);
    note_used_locked();
    return;
  }
  for (std::size_t i = 0; i < dedicated_live_.size(); ++i) {
    if (dedicated_live_[i].base != addr) continue;
    dedicated x = dedicated_live_[i];
    dedicated_live_.erase(dedicated_live_.begin() + static_cast<std::ptrdiff_t>(i));
    if (stream == no_stream) {
      fences_.tickets_since(x.alloc_epoch, x.tickets);
    } else {
      fences_.ticket_on(stream, x.tickets);
    }
    x.free_epoch = fences_.epoch();
    stats_.used_bytes -= x.bytes;
    dedicated_free_.push_back(x);
    note_used_locked();
    return;
  }
  log::debug("pool: deallocate of {} which the arena does not hold: ignored", ptr);
}

std::uint64_t vmm_arena::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!driver_ready_) return 0;
  return trim_locked(false);
}

// Note [Trim]
// ~~~~~~~~~~~
// A chunk is given back when no live block and no free block with
// unfinished tickets, or freed after work not yet known complete, overlaps it
// (cuMemUnmap of memory queued work still uses would be a use-after-free on a GPU,
// and simgpu reports it as a race; Note [Unmap after all work] in stream_fences.h).
// Events are recorded where missing and polled first; nothing waits.
std::uint64_t vmm_arena::trim_locked(bool capturing) {
  if (!capturing) {
    fences_.fence_all();
    prune_locked();
  }
  std::uint64_t given = 0;
  std::vector<bool> busy;
  for (range& r : ranges_) {
    busy.assign(r.chunks.size(), false);
    for (block* b = r.first; b != nullptr; b = b->next_phys) {
      if (b->free && b->tickets.empty() && fences_.settled(b->free_epoch)) continue;
      const std::size_t first = (b->addr - r.base) / granularity_;
      const std::size_t last = (b->addr + b->size - 1 - r.base) / granularity_;
      for (std::size_t i = first; i <= last; ++i) busy[i] = true;
    }
    for (std::size_t i = 0; i < r.chunks.size(); ++i) {
      if (r.chunks[i] != 0 && !busy[i]) {
        unmap_chunk_locked(r, i);
        given += granularity_;
      }
    }
  }
  return given + release_finished_dedicated_locked();
}

// Cached dedicated mappings no queued work uses any more (empty tickets) are
// unmapped and released. Returns the bytes given back.
std::uint64_t vmm_arena::release_finished_dedicated_locked() {
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < dedicated_free_.size();) {
    dedicated& x = dedicated_free_[i];
    if (!x.tickets.empty() || !fences_.settled(x.free_epoch)) {
      ++i;
      continue;
    }
    release_dedicated(x);
    stats_.reserved_bytes -= x.bytes;
    stats_.mapped_bytes -= x.bytes;
    stats_.trims += x.bytes / granularity_;
    given += x.bytes;
    dedicated_free_.erase(dedicated_free_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return given;
}

void vmm_arena::note_used_locked() {
  std::uint64_t dedicated_used = 0;
  for (const dedicated& x : dedicated_live_) dedicated_used += x.bytes;
  stats_.used_bytes = index_.live_bytes() + dedicated_used;
  stats_.live_blocks = index_.live_blocks() + dedicated_live_.size();
  stats_.peak_used_bytes = std::max(stats_.peak_used_bytes, stats_.used_bytes);
}

bool vmm_arena::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (index_.find_live(addr) != nullptr) return true;
  for (const dedicated& x : dedicated_live_) {
    if (x.base == addr) return true;
  }
  return false;
}

std::uint64_t vmm_arena::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.mapped_bytes - std::min(stats_.mapped_bytes, stats_.used_bytes);
}

resource_stats vmm_arena::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_locked();
}

std::optional<resource_stats> vmm_arena::try_stats() const {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return stats_locked();
}

resource_stats vmm_arena::stats_locked() const {
  resource_stats s = stats_;
  // Largest free block that is mapped all through (served without growing).
  std::uint64_t largest = 0;
  for (const range& r : ranges_) {
    for (const block* b = r.first; b != nullptr; b = b->next_phys) {
      if (!b->free) continue;
      std::uint64_t run = 0;
      for (std::uintptr_t a = b->addr; a < b->addr + b->size;) {
        const std::size_t i = (a - r.base) / granularity_;
        const std::uintptr_t chunk_end = r.base + (i + 1) * granularity_;
        const std::uintptr_t end = std::min<std::uintptr_t>(chunk_end, b->addr + b->size);
        run = r.chunks[i] != 0 ? run + (end - a) : 0;
        largest = std::max(largest, run);
        a = end;
      }
    }
  }
  for (const dedicated& x : dedicated_free_) largest = std::max<std::uint64_t>(largest, x.bytes);
  s.largest_free_bytes = largest;
  return s;
}

}  // namespace oversub::pool
