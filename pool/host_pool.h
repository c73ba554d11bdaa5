// host_pool: pinned host memory for the swap engine, in large chunks
// (cuMemHostAlloc, portable), sub-allocated by block_index, with a budget.
//
// Note [Host budget]
// ~~~~~~~~~~~~~~~~~~
// Pinned memory cannot be paged out, so pinning too much starves
// the host (and the OOM killer then ends the training job). Every chunk counts
// against budget_bytes (OVERSUB_HOST_LIMIT: a size, or a fraction of physical RAM,
// 0.5 by default); a request that would pass it returns over_budget — a clean error
// the caller turns into "keep it on the device" or cudaErrorMemoryAllocation — never
// a kill. Fully free chunks are given back by trim().
//
// No stream ordering here: the swap engine frees a host block only after the copy
// events that use it completed.
#ifndef OVERSUB_POOL_HOST_POOL_H
#define OVERSUB_POOL_HOST_POOL_H

#include <cstdint>
#include <mutex>
#include <vector>

#include "pool/block_index.h"
#include "pool/memory_resource.h"

namespace oversub::pool {

struct host_pool_config {
  std::uint64_t budget_bytes = 0;                // 0: no pinned memory at all
  std::size_t chunk_bytes = std::size_t{64} << 20;  // 64 MiB per cuMemHostAlloc
};

class host_pool final : public memory_resource {
 public:
  explicit host_pool(host_pool_config cfg) : cfg_(cfg) {}
  ~host_pool() override;
  host_pool(const host_pool&) = delete;
  host_pool& operator=(const host_pool&) = delete;

  allocation_result allocate(std::size_t bytes, CUstream stream) override;
  void deallocate(void* ptr, std::size_t bytes, CUstream stream) override;
  resource_stats stats() const override;
  std::uint64_t trim() override;

  std::uint64_t budget_bytes() const { return cfg_.budget_bytes; }

 private:
  struct chunk {
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    block* first = nullptr;
    bool released = false;
  };
  bool grow_locked(std::size_t min_bytes);

  host_pool_config cfg_;
  mutable std::mutex mutex_;
  block_index index_;
  std::vector<chunk> chunks_;
  resource_stats stats_;
};

// OVERSUB_HOST_LIMIT resolved: bytes, or fraction * physical RAM.
std::uint64_t physical_memory_bytes();

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_HOST_POOL_H
