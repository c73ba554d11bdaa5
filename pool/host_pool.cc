// The pinned host pool (see host_pool.h).
#include "pool/host_pool.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "pool/driver_api.h"

namespace oversub::pool {

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

host_pool::~host_pool() {
  const driver_table& d = driver();
  if (!d.complete) return;
  for (chunk& c : chunks_) {
    if (!c.released) d.cuMemFreeHost(reinterpret_cast<void*>(c.base));
  }
}

bool host_pool::grow_locked(std::size_t size) {
  const driver_table& d = driver();
  std::size_t want = std::max(cfg_.chunk_bytes, size);
  if (stats_.mapped_bytes + want > cfg_.budget_bytes) want = size;
  void* p = nullptr;
  if (d.cuMemHostAlloc(&p, want, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS || p == nullptr) {
    return false;
  }
  chunk c;
  c.base = reinterpret_cast<std::uintptr_t>(p);
  c.bytes = block_index::round(want) == want ? want : want / block_index::unit_bytes *
                                                          block_index::unit_bytes;
  index_.add_range(c.base, c.bytes, static_cast<std::uint32_t>(chunks_.size()));
  index_.for_each_free([&](block& b) {
    if (b.addr == c.base) c.first = &b;
  });
  chunks_.push_back(c);
  stats_.reserved_bytes += want;
  stats_.mapped_bytes += want;
  stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.mapped_bytes);
  ++stats_.grows;
  return true;
}

allocation_result host_pool::allocate(std::size_t bytes, CUstream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!driver().complete) return {nullptr, pool_errc::driver_missing};
  const std::size_t size = block_index::round(bytes);
  auto any = [](const block&) { return true; };
  block* b = index_.take(size, any);
  if (b == nullptr) {
    if (stats_.mapped_bytes + size > cfg_.budget_bytes) {
      ++stats_.failed_allocations;
      return {nullptr, pool_errc::over_budget};
    }
    if (!grow_locked(size) || (b = index_.take(size, any, 1 << 20)) == nullptr) {
      ++stats_.failed_allocations;
      return {nullptr, pool_errc::out_of_memory};
    }
  }
  ++stats_.allocations;
  stats_.used_bytes = index_.live_bytes();
  stats_.live_blocks = index_.live_blocks();
  stats_.peak_used_bytes = std::max(stats_.peak_used_bytes, stats_.used_bytes);
  return {reinterpret_cast<void*>(b->addr), pool_errc::ok};
}

void host_pool::deallocate(void* ptr, std::size_t, CUstream) {
  std::lock_guard<std::mutex> lock(mutex_);
  block* b = index_.find_live(reinterpret_cast<std::uintptr_t>(ptr));
  if (b == nullptr) {
    log::debug("pool: host block {} is not the host pool's: ignored", ptr);
    return;
  }
  index_.release(b);
  stats_.used_bytes = index_.live_bytes();
  stats_.live_blocks = index_.live_blocks();
}

std::uint64_t host_pool::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t given = 0;
  for (chunk& c : chunks_) {
    if (c.released || !c.first->free || c.first->size != c.bytes) continue;
    index_.retire(c.first);
    driver().cuMemFreeHost(reinterpret_cast<void*>(c.base));
    c.released = true;
    stats_.mapped_bytes -= c.bytes;
    stats_.reserved_bytes -= c.bytes;
    ++stats_.trims;
    given += c.bytes;
  }
  return given;
}

resource_stats host_pool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  resource_stats s = stats_;
  s.largest_free_bytes = index_.largest_free();
  return s;
}

}  // namespace oversub::pool
