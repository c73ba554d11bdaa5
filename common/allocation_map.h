// allocation_map: the live allocations of the process, as an interval map.
//
// Keyed by base address; each entry is one allocation the application made through
// an intercepted call (device, pitched, stream-ordered or managed). find() answers
// "which allocation contains this address", which the argument scanning of later
// issues needs for every 8-byte word of a kernel's parameters; erase() takes only
// an exact base, as cudaFree does.
//
// Not thread-safe: the tracker holds it under its lock.
#ifndef OVERSUB_COMMON_ALLOCATION_MAP_H
#define OVERSUB_COMMON_ALLOCATION_MAP_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace oversub {

enum class alloc_kind : std::uint8_t {
  device,      // cudaMalloc
  pitched,     // cudaMallocPitch (bytes = pitch * height)
  async,       // cudaMallocAsync / cudaMallocFromPoolAsync
  managed,     // cudaMallocManaged: not counted against the device limit
};

const char* to_string(alloc_kind k);

struct allocation {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  alloc_kind kind = alloc_kind::device;
  void* stream = nullptr;  // the stream it was ordered on (async), else null
  int device = 0;          // ordinal current at allocation

  bool contains(std::uintptr_t address) const {
    return address >= base && address - base < bytes;
  }
};

class allocation_map {
 public:
  // Adds a; any entry overlapping [a.base, a.base + a.bytes) (or with the same base)
  // is stale (freed behind our back) and is removed and appended to *displaced.
  void insert(const allocation& a, std::vector<allocation>* displaced);

  // Removes and returns the allocation whose base is exactly base.
  std::optional<allocation> erase(std::uintptr_t base);

  // The allocation containing address, or null. Valid until the next change.
  const allocation* find(std::uintptr_t address) const;

  // Note [Scanning argument words]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // For each word that lies inside a live
  // allocation, that allocation's base, each base written once to bases (room for
  // count); returns how many. Words outside [lowest base, highest end) are
  // rejected with two compares, so scalars (sizes, floats, flags) cost almost
  // nothing; the rest is one tree lookup each, or less: Note [The scan cache].
  // Not thread-safe (the tracker calls it under its lock, as every other member).
  std::size_t scan(const std::uint64_t* words, std::size_t count, std::uint64_t* bases) const;

  std::size_t size() const { return by_base_.size(); }
  bool empty() const { return by_base_.empty(); }

 private:
  // Note [The scan cache]
  // ~~~~~~~~~~~~~~~~~~~~~
  // A launch passes the same pointers as the launch of the
  // same kernel an iteration ago, and under a framework's caching allocator the map
  // rarely changes, so scan() keeps, per word (hashed into a small direct-mapped
  // table), the allocation range it found. An entry is valid only while generation_
  // is the one it was filled under; every insert and erase advances it. A hit is a
  // hash and three compares instead of a tree lookup.
  struct scan_slot {
    std::uint64_t generation = 0;
    std::uintptr_t base = 0;
    std::uintptr_t end = 0;
  };
  static constexpr std::size_t scan_slots = 1024;  // power of two; 24 KiB
  std::map<std::uintptr_t, allocation> by_base_;
  std::uint64_t generation_ = 1;
  mutable std::vector<scan_slot> scan_cache_ = std::vector<scan_slot>(scan_slots);
};

}  // namespace oversub

#endif  // OVERSUB_COMMON_ALLOCATION_MAP_H
