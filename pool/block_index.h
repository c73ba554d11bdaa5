// block_index: the sub-allocator of pool/ — free and live blocks over address
// ranges, found by a two-level segregated fit (TLSF) and coalesced on free. Pure
// code: no CUDA, no system call; the arena and the host pool wrap it.
//
// Note [TLSF]
// ~~~~~~~~~~~
// The algorithm:
//   - every size is a multiple of 256 bytes (cudaMalloc's alignment); a size of u
//     units lies in class (fl, sl): fl = floor(log2 u) - 3, sl the next 4 bits, so a
//     class spans 1/16 of a power of two (u < 16 units: one class per size);
//   - one doubly linked free list per class and two bitmaps say which lists are
//     non-empty, so the first list that can hold a request is found with two
//     count-trailing-zeros;
//   - allocation looks first in the request's own class (blocks there may be just
//     big enough: the best fit), then in the next non-empty classes, whose every block
//     fits; the block is split and the rest goes back as a free block;
//   - free merges the block with free neighbours in its range (address order) that
//     carry the same tickets; neighbours still fenced by other tickets stay apart
//     (Note [Fenced neighbours]) until merge_settled() joins them once the tickets
//     are done;
//   - blocks live in a node pool and a flat open-addressing map finds a block by
//     address: neither allocate nor free calls malloc once warm.
// Each free block carries the tickets of its last users (ticket.h): take() skips the
// blocks its predicate rejects (stream-ordered reuse), and a merge keeps the union.
#ifndef OVERSUB_POOL_BLOCK_INDEX_H
#define OVERSUB_POOL_BLOCK_INDEX_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pool/ticket.h"

namespace oversub::pool {

struct block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;  // bytes, a multiple of 256
  block* prev_phys = nullptr;
  block* next_phys = nullptr;
  block* prev_free = nullptr;
  block* next_free = nullptr;
  std::uint32_t range = 0;  // which add_range() it came from
  bool free = false;
  std::uint64_t alloc_epoch = 0;  // stream_fences epoch at allocation (set by callers)
  ticket_set tickets;             // free blocks: what reuse waits for
  std::uint64_t free_epoch = 0;   // free blocks: stream_fences epoch of the latest free
                                  // (what an unmap waits for: Note [Unmap after all work]
                                  // in pool/stream_fences.h)
};

class block_index {
 public:
  static constexpr std::size_t unit_bytes = 256;

  block_index();
  ~block_index();
  block_index(const block_index&) = delete;
  block_index& operator=(const block_index&) = delete;

  // Adds [base, base + bytes) as one free block; bytes a multiple of 256.
  void add_range(std::uintptr_t base, std::size_t bytes, std::uint32_t range_id);

  // A live block of bytes (rounded up to 256) from a free block usable(b) accepts,
  // or null. max_walk bounds the blocks looked at per class and the classes searched.
  template <typename Usable>
  block* take(std::size_t bytes, Usable usable, int max_walk = 16);

  // The live block at addr, or null.
  block* find_live(std::uintptr_t addr) const;

  // Frees b (its tickets set by the caller), merging with free neighbours that have
  // the same tickets; returns the resulting free block.
  block* release(block* b);

  // Note [Fenced neighbours]
  // ~~~~~~~~~~~~~~~~~~~~~~~~
  // Merging a block fenced by stream a's work into a free
  // neighbour would fence the neighbour too (a large tail, often), so blocks merge
  // only when their tickets are the same. After tickets are pruned, this joins
  // every run of adjacent free blocks whose tickets are now all empty.
  void merge_settled();

  // Removes free block b from the index for good (its range is given back).
  void retire(block* b);

  // Calls f(block&) for every free block (any order); f may change its tickets.
  template <typename F>
  void for_each_free(F f);

  std::size_t largest_free() const;
  std::size_t free_bytes() const { return free_bytes_; }
  std::size_t live_bytes() const { return live_bytes_; }
  std::size_t live_blocks() const { return live_count_; }

  static std::size_t round(std::size_t bytes) {
    return bytes == 0 ? unit_bytes : (bytes + unit_bytes - 1) / unit_bytes * unit_bytes;
  }

 private:
  static constexpr int sl_bits = 4;
  static constexpr int sl_count = 1 << sl_bits;
  static constexpr int fl_count = 56;

  static void mapping(std::size_t units, int& fl, int& sl);
  void insert_free(block* b);
  void remove_free(block* b);
  block* new_node();
  void delete_node(block* b);
  block* split(block* b, std::size_t bytes);
  void absorb(block* first, block* second);  // second follows first; both out of the lists
  bool find_class(int& fl, int& sl) const;  // first non-empty class >= (fl, sl)

  // address -> live block
  void map_put(block* b);
  void map_erase(std::uintptr_t addr);
  void map_grow();

  block* heads_[fl_count][sl_count] = {};
  std::uint64_t fl_bitmap_ = 0;
  std::uint32_t sl_bitmap_[fl_count] = {};
  std::vector<std::unique_ptr<block[]>> node_chunks_;
  block* spare_nodes_ = nullptr;
  std::vector<block*> map_;  // open addressing, power-of-two size; tombstone below
  std::size_t map_used_ = 0;  // live + tombstones
  std::size_t free_bytes_ = 0;
  std::size_t live_bytes_ = 0;
  std::size_t live_count_ = 0;
};

// ---- template members ----------------------------------------------------------------

template <typename Usable>
block* block_index::take(std::size_t bytes, Usable usable, int max_walk) {
  const std::size_t size = round(bytes);
  const std::size_t units = size / unit_bytes;
  int fl = 0;
  int sl = 0;
  mapping(units, fl, sl);
  // Best fit first: the request's own class holds blocks just big enough.
  int walked = 0;
  for (block* b = heads_[fl][sl]; b != nullptr && walked < max_walk; b = b->next_free, ++walked) {
    if (b->size >= size && usable(*b)) return split(b, size);
  }
  // Then the classes above, whose every block fits.
  if (++sl == sl_count) {
    sl = 0;
    ++fl;
  }
  int lists = 0;
  while (fl < fl_count && find_class(fl, sl) && lists < max_walk) {
    walked = 0;
    for (block* b = heads_[fl][sl]; b != nullptr && walked < max_walk;
         b = b->next_free, ++walked) {
      if (usable(*b)) return split(b, size);
    }
    ++lists;
    if (++sl == sl_count) {
      sl = 0;
      ++fl;
    }
  }
  return nullptr;
}

template <typename F>
void block_index::for_each_free(F f) {
  for (int fl = 0; fl < fl_count; ++fl) {
    if ((fl_bitmap_ >> fl & 1) == 0) continue;
    for (int sl = 0; sl < sl_count; ++sl) {
      for (block* b = heads_[fl][sl]; b != nullptr;) {
        block* next = b->next_free;
        f(*b);
        b = next;
      }
    }
  }
}

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_BLOCK_INDEX_H
