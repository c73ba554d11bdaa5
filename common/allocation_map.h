// allocation_map: the live allocations of the process, as an interval map.
//
// Keyed by base address; each entry is one allocation the application made through
// an intercepted call (device, pitched, stream-ordered or managed). find() answers
// "which allocation contains this address"; scan() answers it for every 8-byte word
// of a kernel's parameters at once; erase() takes only an exact base, as cudaFree does.
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
  // For each word that lies inside a live allocation, that allocation's base, each
  // base written once to bases (room for count), in the order of the words that first
  // point into it; returns how many. With sizes (room for count), sizes[k] is the
  // size of the allocation at bases[k]. Interior pointers count, and so does a word
  // at the base; the end is outside.
  //
  // Every launch in swap mode pays this for its whole argument block, so:
  //   - words outside [lowest base, highest end) are dropped by one subtract and one
  //     compare with no branch (scalars: sizes, float bits, flags), in a first pass
  //     that packs the rest into bases;
  //   - the rest are answered from Note [The scan cache], else by Note [The flat
  //     index], else by one tree lookup;
  //   - a base already written is recognised by its entry's mark (the scan's number),
  //     not by searching the bases written so far, so a block of thousands of pointers
  //     (multi_tensor_apply) costs linear time.
  // Not thread-safe (the tracker calls it under its lock, as every other member).
  std::size_t scan(const std::uint64_t* words, std::size_t count, std::uint64_t* bases,
                   std::uint64_t* sizes = nullptr) const;

  std::size_t size() const { return by_base_.size(); }
  bool empty() const { return by_base_.empty(); }

 private:
  // Note [The scan cache]
  // ~~~~~~~~~~~~~~~~~~~~~
  // A launch passes the same pointers as the launch of the same kernel an iteration
  // ago, and under a framework's caching allocator the map rarely changes, so scan()
  // keeps, per word (hashed into a small direct-mapped table), the entry it found.
  // Each live allocation has an entry (base, size) in entries_, which never shrinks;
  // an erase sets the entry's size to 0 before the entry is reused for another
  // allocation. A slot is only a guess: it answers when the word lies inside the
  // range its entry holds now, and a range an entry holds now is a live allocation's,
  // which allocations never overlap. So a free costs the other slots nothing (a
  // program that allocates between launches keeps its hits), and a hit is a hash,
  // two loads and two compares instead of a tree lookup.
  struct entry {
    std::uintptr_t base = 0;
    std::uint64_t bytes = 0;  // 0 while free: no word is inside
    mutable std::uint64_t mark = 0;  // the last scan that wrote this base
  };
  struct node {
    allocation a;
    std::uint32_t entry = 0;  // index in entries_
  };
  static constexpr std::size_t scan_slots = 4096;  // power of two; 16 KiB
  static constexpr int scan_hash_shift = 64 - 12;  // log2(scan_slots) top bits

  // Note [The flat index]
  // ~~~~~~~~~~~~~~~~~~~~~
  // A word the cache does not answer (a pointer not seen lately, the first launches
  // of a run) needs the allocation at or below it. The tree answers in a dozen
  // dependent cache misses (about 100 ns among 10,000 allocations); the flat index
  // answers in two or three loads: the bases sorted in one array, and buckets that
  // cut [lowest base, highest end) into at most twice as many equal spans as there
  // are allocations, each holding where its first base is in the array, so a lookup
  // is a shift, two bucket bounds and a search among the few bases of one bucket.
  // Keeping it sorted on every insert and erase would cost each allocation a copy of
  // the whole array, so it is rebuilt from the tree only once it pays: after a change,
  // when the tree has answered as many lookups as 1/16 of the allocations (at least
  // 64); until then the tree answers. A rebuild (one walk of the tree) thus costs at
  // most a small multiple of the lookups it saves, and a program that allocates
  // between every launch keeps answering from the cache and the tree as before.
  struct flat_index {
    std::vector<std::uintptr_t> bases;  // ascending
    std::vector<std::uint32_t> entries;  // entries_ index of bases[i]
    std::vector<std::uint32_t> buckets;  // bucket k's first i; one past the last bucket
    std::uintptr_t lo = 0;
    int shift = 0;
    bool valid = false;
  };

  std::uint32_t take_entry(const allocation& a);
  void drop_entry(std::uint32_t index);
  void changed();
  // The index in entries_ of the allocation containing w, lo <= w < highest end; -1
  // when none.
  std::int64_t lookup(std::uint64_t w) const;
  bool rebuild_index() const noexcept;

  std::map<std::uintptr_t, node> by_base_;
  std::vector<entry> entries_;  // never shrinks: a slot's index stays in range
  std::vector<std::uint32_t> free_entries_;
  mutable std::uint64_t scans_ = 0;
  mutable flat_index index_;
  mutable std::size_t tree_lookups_ = 0;  // since the last change
  mutable std::vector<std::uint32_t> scan_cache_ = std::vector<std::uint32_t>(scan_slots);
};

}  // namespace oversub

#endif  // OVERSUB_COMMON_ALLOCATION_MAP_H
