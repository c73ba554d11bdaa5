// expandable_allocator.h: simtrain's --caching expandable, a caching allocator whose
// segments the program reserves and maps itself with the driver's VMM calls, as
// PyTorch's CUDACachingAllocator does under
// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
//
// Note [Expandable segments in simtrain]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What PyTorch's ExpandableSegment does, and so what this allocator does:
//   - one segment per stream and pool (small: requests up to 1 MiB, in 2 MiB pages;
//     large: 20 MiB pages), each a cuMemAddressReserve of the device's total memory
//     plus an eighth, rounded up to whole pages; nothing is mapped at first; another
//     segment is reserved only when no segment of the stream and pool has room;
//   - a request is served by best fit (smallest, then lowest address) among the free
//     mapped blocks of its stream and pool, split whenever the rest is at least 512
//     bytes (PyTorch splits every block of an expandable segment so);
//   - failing that, the segment grows: the lowest unmapped block, started at the free
//     mapped block before it if any, with enough free room after it, gets pages
//     mapped until the request fits: per page cuMemCreate (device memory, pinned) and
//     cuMemMap, then one cuMemSetAccess (read-write) over the pages just mapped;
//   - a freed block merges with its free mapped neighbours; a block also used on
//     another stream has, when freed, an event recorded on each such stream, which
//     its next user waits on (as device_allocator.h's caching allocator);
//   - empty_cache() (torch.cuda.empty_cache(); also when a page cannot be created,
//     before the request is retried, as PyTorch does on out of memory) unmaps every
//     page lying wholly inside a free block: it first waits for those blocks' events
//     and synchronises each segment's stream (PyTorch's unmapHandles synchronises the
//     stream before cuMemUnmap, which does not wait for the device), then cuMemUnmap
//     and cuMemRelease per page. Pages shared with a used block stay mapped.
// peak_bytes() counts mapped pages. simtrain calls empty_cache() after every second
// iteration, so both reuse of mapped pages and unmapping and remapping happen.
#ifndef SIMTRAIN_EXPANDABLE_ALLOCATOR_H
#define SIMTRAIN_EXPANDABLE_ALLOCATOR_H

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "device_allocator.h"
#include "gpu_compat.h"

class expandable_allocator final : public device_allocator {
 public:
  static constexpr std::size_t kMinBlockBytes = 512;
  static constexpr std::size_t kSmallRequestBytes = 1 << 20;  // 1 MiB
  static constexpr std::size_t kSmallPageBytes = 2 << 20;     // 2 MiB
  static constexpr std::size_t kLargePageBytes = 20 << 20;    // 20 MiB

  // The runtime's context must be current (cudaFree(nullptr)).
  expandable_allocator() {
    gpu::use_vmm();
    CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    address_space_bytes_ = prop.totalGlobalMem + prop.totalGlobalMem / 8;
  }
  expandable_allocator(const expandable_allocator&) = delete;
  expandable_allocator& operator=(const expandable_allocator&) = delete;
  ~expandable_allocator() override {
    for (auto& s : segments_) {
      for (block* b = s->first; b != nullptr;) {
        block* next = b->next;
        delete b;
        b = next;
      }
    }
  }

  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    const std::size_t size = (bytes + kMinBlockBytes - 1) / kMinBlockBytes * kMinBlockBytes;
    const bool small = size <= kSmallRequestBytes;
    block* b = take_best_fit(free_blocks_[small], size, stream);
    if (b == nullptr) b = grow(size, stream, small);
    if (b->size - size >= kMinBlockBytes) split(b, size, true);
    b->allocated = true;
    for (const auto& ev : b->reuse_after) CUDA_CHECK(cudaStreamWaitEvent(stream, ev->event, 0));
    b->reuse_after.clear();
    allocated_[b->ptr] = b;
    return b->ptr;
  }

  void record_stream(void* ptr, cudaStream_t stream) override {
    block* b = allocated_.at(ptr);
    add_other_stream(b->other_streams, b->seg->stream, stream);
  }

  void deallocate(void* ptr) override {
    auto it = allocated_.find(ptr);
    block* b = it->second;
    allocated_.erase(it);
    for (cudaStream_t s : b->other_streams) {
      auto ev = std::make_shared<owned_event>();
      CUDA_CHECK(cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(ev->event, s));
      b->reuse_after.push_back(std::move(ev));
    }
    b->other_streams.clear();
    b->allocated = false;
    free_blocks_[b->seg->small].insert(merge_free(b));
  }

  void empty_cache() override {
    for (auto& pool : free_blocks_) {
      for (block* b : pool) {
        for (const auto& ev : b->reuse_after) CUDA_CHECK(cudaEventSynchronize(ev->event));
        b->reuse_after.clear();
      }
    }
    for (auto& s : segments_) CUDA_CHECK(cudaStreamSynchronize(s->stream));
    for (auto& pool : free_blocks_) {
      std::vector<block*> blocks(pool.begin(), pool.end());
      for (block* b : blocks) unmap_inside(pool, b);
    }
  }

  void release_all() override {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& s : segments_) {
      for (std::size_t p = 0; p < s->handles.size(); ++p) {
        if (s->handles[p] != 0) unmap_page(*s, p);
      }
      CUDA_CHECK(gpu::as_runtime(gpu::vmm.address_free(s->base, s->handles.size() * s->page)));
      for (block* b = s->first; b != nullptr;) {
        block* next = b->next;
        delete b;
        b = next;
      }
      s->first = nullptr;
    }
    segments_.clear();
    for (auto& pool : free_blocks_) pool.clear();
    allocated_.clear();
  }

 private:
  struct owned_event {
    cudaEvent_t event = nullptr;
    owned_event() = default;
    owned_event(const owned_event&) = delete;
    owned_event& operator=(const owned_event&) = delete;
    ~owned_event() {
      if (event != nullptr) CUDA_CHECK(cudaEventDestroy(event));
    }
  };

  struct segment;

  struct block {
    char* ptr = nullptr;
    std::size_t size = 0;  // bytes
    segment* seg = nullptr;
    bool allocated = false;
    bool mapped = false;  // an unmapped block spans whole unmapped pages
    block* prev = nullptr;  // neighbours within the segment
    block* next = nullptr;
    std::vector<cudaStream_t> other_streams;
    std::vector<std::shared_ptr<owned_event>> reuse_after;
  };

  struct segment {
    CUdeviceptr base = 0;
    std::size_t page = 0;  // bytes
    std::vector<CUmemGenericAllocationHandle> handles;  // per page; 0: unmapped
    cudaStream_t stream = nullptr;
    bool small = true;
    block* first = nullptr;
  };

  struct by_stream_size_address {
    bool operator()(const block* a, const block* b) const {
      auto key = [](const block* x) {
        return std::make_tuple(reinterpret_cast<std::uintptr_t>(x->seg->stream), x->size,
                               reinterpret_cast<std::uintptr_t>(x->ptr));
      };
      return key(a) < key(b);
    }
  };
  using free_set = std::set<block*, by_stream_size_address>;

  static block* take_best_fit(free_set& pool, std::size_t size, cudaStream_t stream) {
    for (auto it = pool.begin(); it != pool.end(); ++it) {
      block* b = *it;
      if (b->seg->stream == stream && b->size >= size) {
        pool.erase(it);
        return b;
      }
    }
    return nullptr;
  }

  // Splits b at size; the rest, of b's mapped state, goes to its free list when
  // mapped (to_free_list).
  void split(block* b, std::size_t size, bool to_free_list) {
    auto* rest = new block;
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->seg = b->seg;
    rest->mapped = b->mapped;
    rest->reuse_after = b->reuse_after;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    if (to_free_list && rest->mapped) free_blocks_[b->seg->small].insert(rest);
  }

  // Joins next into b (b first); returns b.
  static block* join(block* b, block* next) {
    b->size += next->size;
    b->next = next->next;
    if (next->next != nullptr) next->next->prev = b;
    for (const auto& ev : next->reuse_after) {
      if (std::find(b->reuse_after.begin(), b->reuse_after.end(), ev) == b->reuse_after.end()) {
        b->reuse_after.push_back(ev);
      }
    }
    delete next;
    return b;
  }

  // b (free) merged with its free neighbours of the same mapped state, which leave
  // the free list; returns the merged block (not in the free list).
  block* merge_free(block* b) {
    free_set& pool = free_blocks_[b->seg->small];
    auto same = [&](const block* n) { return n != nullptr && !n->allocated && n->mapped == b->mapped; };
    if (same(b->prev)) {
      block* p = b->prev;
      if (p->mapped) pool.erase(p);
      b = join(p, b);
    }
    if (same(b->next)) {
      if (b->next->mapped) pool.erase(b->next);
      b = join(b, b->next);
    }
    return b;
  }

  segment& new_segment(cudaStream_t stream, bool small) {
    auto s = std::make_unique<segment>();
    s->page = small ? kSmallPageBytes : kLargePageBytes;
    const std::size_t pages = (address_space_bytes_ + s->page - 1) / s->page;
    CUDA_CHECK(gpu::as_runtime(gpu::vmm.address_reserve(&s->base, pages * s->page, 0, 0, 0)));
    s->handles.assign(pages, 0);
    s->stream = stream;
    s->small = small;
    auto* b = new block;
    b->ptr = reinterpret_cast<char*>(s->base);
    b->size = pages * s->page;
    b->seg = s.get();
    s->first = b;
    segments_.push_back(std::move(s));
    return *segments_.back();
  }

  // A free mapped block of at least size bytes made by mapping pages into a segment
  // of (stream, small); a new segment when none has room. Exits with CUDA's
  // out-of-memory error when the pages cannot be created even after empty_cache().
  block* grow(std::size_t size, cudaStream_t stream, bool small) {
    for (int attempt = 0;; ++attempt) {
      block* start = nullptr;
      for (auto& s : segments_) {
        if (s->stream == stream && s->small == small) start = find_room(*s, size);
        if (start != nullptr) break;
      }
      if (start == nullptr) start = find_room(new_segment(stream, small), size);
      if (start == nullptr) {
        gpu::fail(cudaErrorMemoryAllocation, "a request larger than a whole expandable segment",
                  __FILE__, __LINE__);
      }
      CUresult r = map_until(start, size);
      if (r == CUDA_SUCCESS) return start;
      if (r != CUDA_ERROR_OUT_OF_MEMORY || attempt == 1) {
        gpu::fail(gpu::as_runtime(r), "cuMemCreate(&handle, page, &prop, 0)", __FILE__, __LINE__);
      }
      empty_cache();
    }
  }

  // The first block to grow from in s: the lowest unmapped block (or the free mapped
  // block before it) followed by at least size bytes of free blocks; null if none.
  static block* find_room(segment& s, std::size_t size) {
    for (block* u = s.first; u != nullptr; u = u->next) {
      if (u->allocated || u->mapped) continue;
      block* start = (u->prev != nullptr && !u->prev->allocated) ? u->prev : u;
      std::size_t room = 0;
      for (block* b = start; b != nullptr && !b->allocated && room < size; b = b->next) {
        room += b->size;
      }
      if (room >= size) return start;
    }
    return nullptr;
  }

  // Maps pages from start on until start is a free mapped block of at least size
  // bytes (start leaves the free list if it was in it). On an error nothing this
  // call mapped stays mapped... except blocks already joined, which stay mapped and
  // free; the error is returned.
  CUresult map_until(block* start, std::size_t size) {
    free_set& pool = free_blocks_[start->seg->small];
    if (start->mapped) pool.erase(start);
    if (!start->mapped) {
      if (CUresult r = map_prefix(start, size); r != CUDA_SUCCESS) return r;
    }
    while (start->size < size) {
      block* n = start->next;
      if (n->mapped) {
        pool.erase(n);
      } else if (CUresult r = map_prefix(n, size - start->size); r != CUDA_SUCCESS) {
        pool.insert(start);
        return r;
      }
      join(start, n);
    }
    return CUDA_SUCCESS;
  }

  // Maps the whole pages covering the first need bytes of the unmapped block u
  // (splitting off the unmapped rest); u becomes mapped.
  CUresult map_prefix(block* u, std::size_t need) {
    segment& s = *u->seg;
    const std::size_t bytes = std::min(u->size, (need + s.page - 1) / s.page * s.page);
    const std::size_t first = (reinterpret_cast<CUdeviceptr>(u->ptr) - s.base) / s.page;
    const std::size_t count = bytes / s.page;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    for (std::size_t p = first; p < first + count; ++p) {
      CUmemGenericAllocationHandle h = 0;
      CUresult r = gpu::vmm.create(&h, s.page, &prop, 0);
      if (r == CUDA_SUCCESS) {
        r = gpu::vmm.map(s.base + p * s.page, s.page, 0, h, 0);
        if (r != CUDA_SUCCESS) CUDA_CHECK(gpu::as_runtime(gpu::vmm.release(h)));
      }
      if (r != CUDA_SUCCESS) {
        for (std::size_t q = first; q < p; ++q) unmap_page(s, q);
        return r;
      }
      s.handles[p] = h;
      add_held(reinterpret_cast<void*>(s.base + p * s.page), s.page);
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUDA_CHECK(gpu::as_runtime(gpu::vmm.set_access(s.base + first * s.page, bytes, &access, 1)));
    if (bytes < u->size) split(u, bytes, false);
    u->mapped = true;
    return CUDA_SUCCESS;
  }

  void unmap_page(segment& s, std::size_t p) {
    remove_held(reinterpret_cast<void*>(s.base + p * s.page), s.page);
    CUDA_CHECK(gpu::as_runtime(gpu::vmm.unmap(s.base + p * s.page, s.page)));
    CUDA_CHECK(gpu::as_runtime(gpu::vmm.release(s.handles[p])));
    s.handles[p] = 0;
  }

  // Unmaps the pages wholly inside the free mapped block b of pool: b becomes a
  // mapped head, an unmapped middle (merged with unmapped neighbours) and a mapped
  // tail, the head and tail (when not empty) in pool.
  void unmap_inside(free_set& pool, block* b) {
    segment& s = *b->seg;
    const CUdeviceptr lo_addr = reinterpret_cast<CUdeviceptr>(b->ptr);
    const std::size_t lo = (lo_addr - s.base + s.page - 1) / s.page;
    const std::size_t hi = (lo_addr + b->size - s.base) / s.page;
    if (lo >= hi) return;
    pool.erase(b);
    for (std::size_t p = lo; p < hi; ++p) unmap_page(s, p);
    block* middle = b;
    const std::size_t head = s.base + lo * s.page - lo_addr;
    if (head > 0) {
      split(b, head, false);
      pool.insert(b);
      middle = b->next;
    }
    const std::size_t middle_bytes = (hi - lo) * s.page;
    if (middle->size > middle_bytes) {
      split(middle, middle_bytes, false);
      pool.insert(middle->next);
    }
    middle->mapped = false;
    merge_free(middle);
  }

  int device_ = 0;
  std::size_t address_space_bytes_ = 0;  // per segment, before rounding to pages
  std::vector<std::unique_ptr<segment>> segments_;
  free_set free_blocks_[2];  // [small]: free mapped blocks
  std::unordered_map<void*, block*> allocated_;
};

#endif  // SIMTRAIN_EXPANDABLE_ALLOCATOR_H
