// TLSF classes, splitting, coalescing and the address map (see block_index.h).
#include "pool/block_index.h"

#include <algorithm>
#include <bit>

namespace oversub::pool {

namespace {

block* const tombstone = reinterpret_cast<block*>(std::uintptr_t{1});

std::size_t hash_address(std::uintptr_t a) {
  // Blocks are 256-byte aligned: drop those bits, then mix (Fibonacci hashing).
  return static_cast<std::size_t>((a >> 8) * 0x9E3779B97F4A7C15ULL);
}

}  // namespace

block_index::block_index() { map_.assign(1024, nullptr); }

block_index::~block_index() = default;

void block_index::mapping(std::size_t units, int& fl, int& sl) {
  if (units < sl_count) {
    fl = 0;
    sl = static_cast<int>(units);
    return;
  }
  const int f = 63 - std::countl_zero(static_cast<std::uint64_t>(units));
  fl = f - sl_bits + 1;
  sl = static_cast<int>((units >> (f - sl_bits)) & (sl_count - 1));
}

bool block_index::find_class(int& fl, int& sl) const {
  std::uint32_t sl_map = sl_bitmap_[fl] & (~0u << sl);
  if (sl_map == 0) {
    if (fl + 1 >= fl_count) return false;
    const std::uint64_t fl_map = fl_bitmap_ & (~std::uint64_t{0} << (fl + 1));
    if (fl_map == 0) return false;
    fl = std::countr_zero(fl_map);
    sl_map = sl_bitmap_[fl];
  }
  sl = std::countr_zero(sl_map);
  return true;
}

void block_index::insert_free(block* b) {
  int fl = 0;
  int sl = 0;
  mapping(b->size / unit_bytes, fl, sl);
  b->free = true;
  b->prev_free = nullptr;
  b->next_free = heads_[fl][sl];
  if (b->next_free != nullptr) b->next_free->prev_free = b;
  heads_[fl][sl] = b;
  fl_bitmap_ |= std::uint64_t{1} << fl;
  sl_bitmap_[fl] |= 1u << sl;
  free_bytes_ += b->size;
}

void block_index::remove_free(block* b) {
  int fl = 0;
  int sl = 0;
  mapping(b->size / unit_bytes, fl, sl);
  if (b->prev_free != nullptr) {
    b->prev_free->next_free = b->next_free;
  } else {
    heads_[fl][sl] = b->next_free;
    if (heads_[fl][sl] == nullptr) {
      sl_bitmap_[fl] &= ~(1u << sl);
      if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(std::uint64_t{1} << fl);
    }
  }
  if (b->next_free != nullptr) b->next_free->prev_free = b->prev_free;
  b->prev_free = b->next_free = nullptr;
  b->free = false;
  free_bytes_ -= b->size;
}

block* block_index::new_node() {
  if (spare_nodes_ == nullptr) {
    constexpr std::size_t per_chunk = 256;
    node_chunks_.push_back(std::make_unique<block[]>(per_chunk));
    block* nodes = node_chunks_.back().get();
    for (std::size_t i = 0; i < per_chunk; ++i) {
      nodes[i].next_free = spare_nodes_;
      spare_nodes_ = &nodes[i];
    }
  }
  block* b = spare_nodes_;
  spare_nodes_ = b->next_free;
  *b = block{};
  return b;
}

void block_index::delete_node(block* b) {
  b->next_free = spare_nodes_;
  spare_nodes_ = b;
}

void block_index::add_range(std::uintptr_t base, std::size_t bytes, std::uint32_t range_id) {
  block* b = new_node();
  b->addr = base;
  b->size = bytes / unit_bytes * unit_bytes;
  b->range = range_id;
  insert_free(b);
}

block* block_index::split(block* b, std::size_t bytes) {
  remove_free(b);
  if (b->size - bytes >= unit_bytes) {
    block* rest = new_node();
    rest->addr = b->addr + bytes;
    rest->size = b->size - bytes;
    rest->range = b->range;
    rest->tickets = b->tickets;
    rest->free_epoch = b->free_epoch;
    rest->prev_phys = b;
    rest->next_phys = b->next_phys;
    if (b->next_phys != nullptr) b->next_phys->prev_phys = rest;
    b->next_phys = rest;
    b->size = bytes;
    insert_free(rest);
  }
  live_bytes_ += b->size;
  ++live_count_;
  map_put(b);
  return b;
}

block* block_index::release(block* b) {
  map_erase(b->addr);
  live_bytes_ -= b->size;
  --live_count_;
  if (block* p = b->prev_phys; p != nullptr && p->free && p->tickets.same_as(b->tickets)) {
    remove_free(p);
    absorb(p, b);
    b = p;
  }
  if (block* n = b->next_phys; n != nullptr && n->free && n->tickets.same_as(b->tickets)) {
    remove_free(n);
    absorb(b, n);
  }
  insert_free(b);
  return b;
}

void block_index::absorb(block* first, block* second) {
  first->size += second->size;
  first->free_epoch = std::max(first->free_epoch, second->free_epoch);
  first->next_phys = second->next_phys;
  if (second->next_phys != nullptr) second->next_phys->prev_phys = first;
  second->free = false;
  second->size = 0;
  delete_node(second);
}

void block_index::merge_settled() {
  std::vector<block*> starts;
  for_each_free([&](block& b) {
    if (b.tickets.empty() && b.next_phys != nullptr && b.next_phys->free &&
        b.next_phys->tickets.empty() &&
        (b.prev_phys == nullptr || !b.prev_phys->free || !b.prev_phys->tickets.empty())) {
      starts.push_back(&b);
    }
  });
  for (block* b : starts) {
    remove_free(b);
    while (block* n = b->next_phys) {
      if (!n->free || !n->tickets.empty()) break;
      remove_free(n);
      absorb(b, n);
    }
    insert_free(b);
  }
}

void block_index::retire(block* b) {
  remove_free(b);
  delete_node(b);
}

std::size_t block_index::largest_free() const {
  for (int fl = fl_count - 1; fl >= 0; --fl) {
    if ((fl_bitmap_ >> fl & 1) == 0) continue;
    const int sl = 31 - std::countl_zero(sl_bitmap_[fl]);
    std::size_t best = 0;
    for (const block* b = heads_[fl][sl]; b != nullptr; b = b->next_free) {
      if (b->size > best) best = b->size;
    }
    return best;
  }
  return 0;
}

// ---- address map ---------------------------------------------------------------------

void block_index::map_put(block* b) {
  if ((map_used_ + 1) * 2 > map_.size()) map_grow();
  const std::size_t mask = map_.size() - 1;
  std::size_t i = hash_address(b->addr) & mask;
  while (map_[i] != nullptr && map_[i] != tombstone) i = (i + 1) & mask;
  if (map_[i] == nullptr) ++map_used_;
  map_[i] = b;
}

block* block_index::find_live(std::uintptr_t addr) const {
  const std::size_t mask = map_.size() - 1;
  for (std::size_t i = hash_address(addr) & mask;; i = (i + 1) & mask) {
    block* b = map_[i];
    if (b == nullptr) return nullptr;
    if (b != tombstone && b->addr == addr) return b;
  }
}

void block_index::map_erase(std::uintptr_t addr) {
  const std::size_t mask = map_.size() - 1;
  for (std::size_t i = hash_address(addr) & mask;; i = (i + 1) & mask) {
    block* b = map_[i];
    if (b == nullptr) return;
    if (b != tombstone && b->addr == addr) {
      // A tombstone is needed only when the next slot continues a probe chain.
      map_[i] = map_[(i + 1) & mask] == nullptr ? nullptr : tombstone;
      if (map_[i] == nullptr) --map_used_;
      return;
    }
  }
}

void block_index::map_grow() {
  std::vector<block*> old;
  old.swap(map_);
  const std::size_t live = live_count_;
  std::size_t size = 1024;
  while (size < (live + 1) * 4) size *= 2;
  map_.assign(size, nullptr);
  map_used_ = 0;
  for (block* b : old) {
    if (b != nullptr && b != tombstone) map_put(b);
  }
}

}  // namespace oversub::pool
