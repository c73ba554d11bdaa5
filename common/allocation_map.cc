// The interval map of live allocations (see allocation_map.h).
#include "common/allocation_map.h"

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

void allocation_map::insert(const allocation& a, std::vector<allocation>* displaced) {
  const std::uintptr_t end = a.base + (a.bytes == 0 ? 1 : a.bytes);
  auto it = by_base_.upper_bound(a.base);
  if (it != by_base_.begin()) {
    auto before = std::prev(it);
    if (before->first == a.base || before->second.contains(a.base)) it = before;
  }
  while (it != by_base_.end() && it->first < end) {
    if (displaced != nullptr) displaced->push_back(it->second);
    it = by_base_.erase(it);
  }
  by_base_.emplace(a.base, a);
  ++generation_;
}

std::optional<allocation> allocation_map::erase(std::uintptr_t base) {
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return std::nullopt;
  allocation a = it->second;
  by_base_.erase(it);
  ++generation_;
  return a;
}

const allocation* allocation_map::find(std::uintptr_t address) const {
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return nullptr;
  --it;
  return it->second.contains(address) ? &it->second : nullptr;
}

std::size_t allocation_map::scan(const std::uint64_t* words, std::size_t count,
                                 std::uint64_t* bases) const {
  if (by_base_.empty()) return 0;
  const std::uintptr_t lo = by_base_.begin()->first;
  const allocation& last = by_base_.rbegin()->second;
  const std::uintptr_t hi = last.base + last.bytes;
  std::size_t found = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t w = words[i];
    if (w < lo || w >= hi) continue;
    scan_slot& slot =
        scan_cache_[((w >> 8) * 0x9E3779B97F4A7C15ull) >> 54 & (scan_slots - 1)];
    std::uintptr_t base = 0;
    if (slot.generation == generation_ && w >= slot.base && w < slot.end) {
      base = slot.base;
    } else {
      const allocation* a = find(w);
      if (a == nullptr) continue;
      slot = scan_slot{generation_, a->base, a->base + a->bytes};
      base = a->base;
    }
    bool seen = found != 0 && bases[found - 1] == base;  // often the same as the last
    for (std::size_t j = 0; j + 1 < found && !seen; ++j) seen = bases[j] == base;
    if (!seen) bases[found++] = base;
  }
  return found;
}

}  // namespace oversub
