// vmm_arena: the device arena. Large reserved address ranges, physical memory mapped
// in 2 MiB chunks as blocks need it, sub-allocated by block_index (TLSF, coalescing,
// 256-byte alignment), with stream-ordered reuse (stream_fences).
//
// Note [Why VMM]
// ~~~~~~~~~~~~~~
// The arena reserves address space (cuMemAddressReserve) and maps
// physical chunks into it (cuMemCreate on the device, cuMemMap, cuMemSetAccess) only
// where live blocks are, so pool/ can unmap a chunk and later map other memory (host
// memory while swapped out, device memory again) at the same address: the framework
// keeps its pointers. It also lets a fully free chunk be given back (trim) without
// moving anything.
//
// Note [Allocation order]
// ~~~~~~~~~~~~~~~~~~~~~~~
// allocate(bytes, stream)
//   1. takes the best-fitting free block whose tickets allow reuse on stream
//      (Note [Stream-ordered reuse] in stream_fences.h);
//   2. if that block needs chunks not mapped yet while events are still outstanding,
//      asks the driver which completed first (cuEventQuery), so a finished block is
//      reused before the arena grows;
//   3. maps the block's missing chunks; if the device is out of memory, gives back
//      every fully free chunk (trim) and tries once more;
//   4. if no block can be used at all, reserves one more range; as a last resort
//      (and never when stream is capturing) waits for the outstanding events.
// Requests of at least dedicated_threshold_bytes get a reservation and a mapping of
// their own (Note [Dedicated mappings] in pool/vmm_arena.cc): no large hole is cut in a
// range, and giving them back is one unmap.
#ifndef OVERSUB_POOL_VMM_ARENA_H
#define OVERSUB_POOL_VMM_ARENA_H

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "pool/block_index.h"
#include "pool/memory_resource.h"
#include "pool/stream_fences.h"

namespace oversub::pool {

// What backs the arena's chunks in swap mode (Note [Chunks as pages] in
// vmm_arena.cc): the residency engine (residency/swap_engine.h) implements it, so the
// arena needs nothing above pool/.
class page_backing {
 public:
  // Maps a new page at va (page-aligned, inside a reservation); false when no room
  // can be made (the allocation fails as out of memory).
  virtual bool create_page(std::uintptr_t va) = 0;
  // The page holds no live data any more (the arena's trim): release what backs it.
  // The caller knows no queued work uses it.
  virtual void destroy_page(std::uintptr_t va) = 0;

 protected:
  ~page_backing() = default;
};

struct vmm_arena_config {
  int device = 0;
  std::size_t range_bytes = 0;                        // 0: the device's total memory
  std::size_t dedicated_threshold_bytes = 32u << 20;  // 32 MiB (OVERSUB_POOL_LARGE)
  // OVERSUB_MODE=swap: every chunk is a page of this engine (device memory while
  // resident, host memory while swapped out) and there are no dedicated mappings
  // (Note [Chunks as pages] in pool/vmm_arena.cc). Not owned.
  page_backing* pages = nullptr;
  // With pages: address space reserved beyond range_bytes, so that an arena larger
  // than the device stays one range (Note [One range in swap mode] in pool/vmm_arena.cc).
  std::size_t swap_range_bytes = 0;
};

class vmm_arena final : public memory_resource {
 public:
  explicit vmm_arena(vmm_arena_config cfg, stream_fences& f = fences());
  ~vmm_arena() override;
  vmm_arena(const vmm_arena&) = delete;
  vmm_arena& operator=(const vmm_arena&) = delete;

  allocation_result allocate(std::size_t bytes, CUstream stream) override;
  void deallocate(void* ptr, std::size_t bytes, CUstream stream) override;
  resource_stats stats() const override;
  // stats() unless the arena is locked (the exit report never blocks).
  std::optional<resource_stats> try_stats() const;
  // Unmaps every chunk no live block and no unfinished work uses.
  std::uint64_t trim() override;

  // True when ptr is a live block of this arena (its base address).
  bool owns(const void* ptr) const;
  // Mapped bytes not handed out: what cudaMemGetInfo adds back to the real free.
  std::uint64_t cached_bytes() const;
  std::size_t granularity() const { return granularity_; }

 private:
  struct range {
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    block* first = nullptr;                             // the block at base, never merged away
    std::vector<CUmemGenericAllocationHandle> chunks;   // 0: not mapped
  };
  struct dedicated {
    std::uintptr_t base = 0;
    std::size_t bytes = 0;  // reserved and mapped
    CUmemGenericAllocationHandle handle = 0;
    std::uint64_t alloc_epoch = 0;
    ticket_set tickets;     // when cached (freed); kept across a reuse
    std::uint64_t free_epoch = 0;  // Note [Unmap after all work] in stream_fences.h
  };

  bool ensure_driver();
  bool add_range_locked(std::size_t min_bytes);
  bool map_block_locked(const block& b, CUstream stream);
  bool map_chunk_locked(range& r, std::size_t index);
  void unmap_chunk_locked(range& r, std::size_t index);
  std::uint64_t trim_locked(bool capturing);
  std::uint64_t release_finished_dedicated_locked();
  void prune_locked(bool after_wait = false);
  block* take_locked(std::size_t size, int consumer, CUstream stream);
  allocation_result allocate_dedicated_locked(std::size_t size, int consumer, bool capturing);
  bool create_mapping(std::uintptr_t at, std::size_t bytes, CUmemGenericAllocationHandle& h);
  void release_dedicated(dedicated& d);
  void note_used_locked();
  resource_stats stats_locked() const;

  vmm_arena_config cfg_;
  stream_fences& fences_;
  std::size_t granularity_ = 2u << 20;
  std::size_t device_range_bytes_ = 0;  // range_bytes before swap_range_bytes
  bool driver_ready_ = false;
  mutable std::mutex mutex_;
  block_index index_;
  std::vector<range> ranges_;
  std::vector<dedicated> dedicated_live_;
  std::vector<dedicated> dedicated_free_;
  resource_stats stats_;
};

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_VMM_ARENA_H
