// The interval map of live allocations (see allocation_map.h).
#include "common/allocation_map.h"

#include <algorithm>

namespace oversub {

const char* to_string(alloc_kind k) {
  switch (k) {
    case alloc_kind::device: return "device";
    case alloc_kind::pitched: return "pitched";
    case alloc_kind::async: return "async";
    case alloc_kind::managed: return "managed";
  }
  return "?";
}

std::uint32_t allocation_map::take_entry(const allocation& a) {
  std::uint32_t index = 0;
  if (free_entries_.empty()) {
    index = static_cast<std::uint32_t>(entries_.size());
    entries_.emplace_back();
  } else {
    index = free_entries_.back();
    free_entries_.pop_back();
  }
  entry& e = entries_[index];
  e.base = a.base;
  e.bytes = a.bytes;
  return index;
}

void allocation_map::drop_entry(std::uint32_t index) {
  entry& e = entries_[index];
  e.bytes = 0;
  free_entries_.push_back(index);
}

void allocation_map::changed() {
  index_.valid = false;
  tree_lookups_ = 0;
}

void allocation_map::insert(const allocation& a, std::vector<allocation>* displaced) {
  const std::uintptr_t end = a.base + (a.bytes == 0 ? 1 : a.bytes);
  auto it = by_base_.upper_bound(a.base);
  if (it != by_base_.begin()) {
    auto before = std::prev(it);
    if (before->first == a.base || before->second.a.contains(a.base)) it = before;
  }
  while (it != by_base_.end() && it->first < end) {
    if (displaced != nullptr) displaced->push_back(it->second.a);
    drop_entry(it->second.entry);
    it = by_base_.erase(it);
    changed();
  }
  // The free list has room for every entry, so drop_entry never allocates and a failed
  // emplace below leaves the map as it was (less the displaced entries).
  free_entries_.reserve(entries_.size() + 1);
  const std::uint32_t index = take_entry(a);
  try {
    by_base_.emplace(a.base, node{a, index});
  } catch (...) {
    drop_entry(index);
    throw;
  }
  changed();
}

std::optional<allocation> allocation_map::erase(std::uintptr_t base) {
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return std::nullopt;
  allocation a = it->second.a;
  drop_entry(it->second.entry);
  by_base_.erase(it);
  changed();
  return a;
}

const allocation* allocation_map::find(std::uintptr_t address) const {
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return nullptr;
  --it;
  return it->second.a.contains(address) ? &it->second.a : nullptr;
}

// See Note [The flat index] in common/allocation_map.h.
bool allocation_map::rebuild_index() const noexcept {
  flat_index& x = index_;
  try {
    const std::size_t n = by_base_.size();
    x.bases.clear();
    x.entries.clear();
    x.bases.reserve(n);
    x.entries.reserve(n);
    for (const auto& [base, nd] : by_base_) {
      x.bases.push_back(base);
      x.entries.push_back(nd.entry);
    }
    x.lo = x.bases.front();
    const allocation& last = by_base_.rbegin()->second.a;
    const std::uint64_t span = last.base + last.bytes - x.lo;
    x.shift = 0;
    while (x.shift < 63 && (span >> x.shift) >= 2 * n) ++x.shift;
    const std::size_t buckets = static_cast<std::size_t>(span >> x.shift) + 1;
    x.buckets.assign(buckets + 1, 0);
    std::size_t i = 0;
    for (std::size_t k = 0; k <= buckets; ++k) {
      while (i < n && ((x.bases[i] - x.lo) >> x.shift) < k) ++i;
      x.buckets[k] = static_cast<std::uint32_t>(i);
    }
    x.valid = true;
  } catch (...) {  // out of memory: the tree answers
    x.valid = false;
  }
  return x.valid;
}

std::int64_t allocation_map::lookup(std::uint64_t w) const {
  if (!index_.valid && ++tree_lookups_ >= std::max<std::size_t>(64, by_base_.size() / 16)) {
    rebuild_index();
  }
  if (!index_.valid) {
    auto it = by_base_.upper_bound(w);
    if (it == by_base_.begin()) return -1;
    --it;
    return it->second.a.contains(w) ? std::int64_t{it->second.entry} : -1;
  }
  const flat_index& x = index_;
  const std::size_t k = static_cast<std::size_t>((w - x.lo) >> x.shift);
  // Bases before bucket k are below w and bases past it above, so the allocation at
  // or below w is the last base <= w in the bucket, else the one just before it.
  const std::uintptr_t* first = x.bases.data() + x.buckets[k];
  const std::uintptr_t* past = x.bases.data() + x.buckets[k + 1];
  const std::uintptr_t* at = std::upper_bound(first, past, w);
  if (at == x.bases.data()) return -1;
  const std::uint32_t index = x.entries[static_cast<std::size_t>(at - x.bases.data()) - 1];
  const entry& e = entries_[index];
  return w - e.base < e.bytes ? std::int64_t{index} : -1;
}

// See Note [Scanning argument words] in common/allocation_map.h and Note [The scan cache]
// in common/allocation_map.h.
std::size_t allocation_map::scan(const std::uint64_t* words, std::size_t count,
                                 std::uint64_t* bases, std::uint64_t* sizes) const {
  if (by_base_.empty()) return 0;
  const std::uintptr_t lo = by_base_.begin()->first;
  const allocation& last = by_base_.rbegin()->second.a;
  const std::uintptr_t span = last.base + last.bytes - lo;  // entries never overlap
  // Pass 1: the candidates, packed into bases. Never writes past bases[i].
  std::size_t candidates = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t w = words[i];
    bases[candidates] = w;
    candidates += w - lo < span ? 1 : 0;
  }
  // Pass 2: reads bases[j] before writing bases[found], found <= j.
  const std::uint64_t scan = ++scans_;
  std::size_t found = 0;
  for (std::size_t j = 0; j < candidates; ++j) {
    const std::uint64_t w = bases[j];
    std::uint32_t& slot = scan_cache_[((w >> 8) * 0x9E3779B97F4A7C15ull) >> scan_hash_shift];
    const entry* e = &entries_[slot];  // in range: entries_ is not empty and never shrinks
    if (w - e->base >= e->bytes) {
      const std::int64_t index = lookup(w);
      if (index < 0) continue;
      slot = static_cast<std::uint32_t>(index);
      e = &entries_[slot];
    }
    if (e->mark == scan) continue;
    e->mark = scan;
    bases[found] = e->base;
    if (sizes != nullptr) sizes[found] = e->bytes;
    ++found;
  }
  return found;
}

}  // namespace oversub
