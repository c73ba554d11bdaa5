// A baseline caching allocator of PyTorch's design (CUDACachingAllocator), written
// for the comparison; only its placement decisions are modelled, not streams,
// events or the release of cached segments under memory pressure.
//
// Note [Baseline caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
//   - sizes round up to a multiple of 512 bytes;
//   - requests up to 1 MiB come from the small pool, carved out of 2 MiB segments;
//     larger ones from the large pool: a 20 MiB segment for requests below 10 MiB,
//     else a segment of their own rounded up to 2 MiB;
//   - a free block is chosen by best fit over a list ordered by (size, address),
//     within the request's pool; a block larger than needed is split when the rest
//     is at least 512 bytes (small pool) or more than 1 MiB (large pool);
//   - a freed block merges only with free neighbours in its own segment; nothing
//     coalesces across segments;
//   - segments are never returned to CUDA, so the peak reserved is the sum of all
//     segments at the end;
//   - caching_allocator_capacity also models what PyTorch does when cudaMalloc
//     fails: return every wholly free segment (release_cached_blocks, what
//     torch.cuda.empty_cache() does) and try once more. The smallest capacity that
//     replays the trace is found by bisection (a capacity that works is assumed to
//     make every larger one work; true of the traces here, not in general).
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "allocator_models.h"

namespace oversub::bench {
namespace {

constexpr std::size_t kRoundBytes = 512;
constexpr std::size_t kSmallRequestBytes = 1u << 20;   // 1 MiB
constexpr std::size_t kSmallSegmentBytes = 2u << 20;   // 2 MiB
constexpr std::size_t kMinLargeAllocBytes = 10u << 20; // 10 MiB
constexpr std::size_t kLargeSegmentBytes = 20u << 20;  // 20 MiB
constexpr std::size_t kRoundLargeBytes = 2u << 20;     // 2 MiB

struct block {
  std::uint64_t addr;  // a made-up address: segments never touch each other
  std::size_t size;
  bool small;
  bool free;
  block* prev;  // neighbours inside the segment
  block* next;
};

struct by_size_address {
  bool operator()(const block* a, const block* b) const {
    return a->size != b->size ? a->size < b->size : a->addr < b->addr;
  }
};

class caching_model {
 public:
  explicit caching_model(std::size_t capacity_bytes = SIZE_MAX) : capacity_(capacity_bytes) {}
  ~caching_model() {
    for (block* b : blocks_) delete b;
  }

  block* allocate(std::size_t bytes) {
    const std::size_t size = (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
    const bool small = size <= kSmallRequestBytes;
    auto& pool = small ? small_free_ : large_free_;
    block key{0, size, small, true, nullptr, nullptr};
    auto it = pool.lower_bound(&key);
    block* b = nullptr;
    if (it != pool.end()) {
      b = *it;
      pool.erase(it);
    } else {
      b = new_segment(size, small);
      if (b == nullptr) return nullptr;  // out of memory
    }
    const std::size_t rest = b->size - size;
    if (small ? rest >= kRoundBytes : rest > kSmallRequestBytes) {
      block* r = make(b->addr + size, rest, small);
      r->prev = b;
      r->next = b->next;
      if (b->next != nullptr) b->next->prev = r;
      b->next = r;
      b->size = size;
      pool.insert(r);
    }
    b->free = false;
    return b;
  }

  void release(block* b) {
    auto& pool = b->small ? small_free_ : large_free_;
    b->free = true;
    if (b->prev != nullptr && b->prev->free) {
      block* p = b->prev;
      pool.erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next != nullptr) b->next->prev = p;
      b->size = 0;  // retired node (kept for deletion)
      b = p;
    }
    if (b->next != nullptr && b->next->free) {
      block* n = b->next;
      pool.erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      n->size = 0;
    }
    pool.insert(b);
  }

  std::size_t reserved_bytes() const { return reserved_; }

 private:
  block* make(std::uint64_t addr, std::size_t size, bool small) {
    blocks_.push_back(new block{addr, size, small, true, nullptr, nullptr});
    return blocks_.back();
  }

  block* new_segment(std::size_t size, bool small) {
    std::size_t bytes = kSmallSegmentBytes;
    if (!small) {
      bytes = size < kMinLargeAllocBytes
                  ? kLargeSegmentBytes
                  : (size + kRoundLargeBytes - 1) / kRoundLargeBytes * kRoundLargeBytes;
    }
    if (reserved_ + bytes > capacity_) {
      release_free_segments();
      if (reserved_ + bytes > capacity_) return nullptr;
    }
    reserved_ += bytes;
    block* b = make(next_addr_, bytes, small);
    next_addr_ += bytes + kRoundLargeBytes;  // a gap: segments are never adjacent
    return b;
  }

  void release_free_segments() {
    for (auto* pool : {&small_free_, &large_free_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        block* b = *it;
        if (b->prev == nullptr && b->next == nullptr) {  // a whole segment, free
          reserved_ -= b->size;
          b->size = 0;
          it = pool->erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  std::size_t capacity_;
  std::set<block*, by_size_address> small_free_, large_free_;
  std::vector<block*> blocks_;
  std::uint64_t next_addr_ = 1u << 20;
  std::size_t reserved_ = 0;
};

// Replays t within capacity_bytes; false when an allocation fails. *peak: the most
// bytes reserved at once.
bool replay(const trace& t, std::size_t capacity_bytes, std::size_t* peak) {
  caching_model model(capacity_bytes);
  std::vector<block*> live;
  *peak = 0;
  for (const trace_event& e : t.events) {
    if (e.alloc) {
      // PyTorch hands out no memory for an empty tensor.
      block* b = e.bytes == 0 ? nullptr : model.allocate(e.bytes);
      if (e.bytes != 0 && b == nullptr) return false;
      live.push_back(b);
      *peak = std::max(*peak, model.reserved_bytes());
    } else if (live[e.buffer] != nullptr) {
      model.release(live[e.buffer]);
    }
  }
  return true;
}

}  // namespace

std::size_t caching_allocator_peak(const trace& t) {
  std::size_t peak = 0;
  replay(t, SIZE_MAX, &peak);
  return peak;
}

std::size_t caching_allocator_capacity(const trace& t) {
  std::size_t hi = caching_allocator_peak(t);  // works: nothing is ever released
  std::size_t lo = 0;                          // fails (unless the trace is empty)
  std::size_t peak = 0;
  if (hi == 0) return 0;
  constexpr std::size_t step = kRoundLargeBytes;  // segments are multiples of 2 MiB
  while (hi - lo > step) {
    const std::size_t mid = lo + (hi - lo) / 2 / step * step;
    if (replay(t, mid, &peak)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

}  // namespace oversub::bench
