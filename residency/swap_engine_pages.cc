// The residency engine's page sets: the pages a request's ranges cover (required,
// and the optional windows' pages in the order they are taken), and the live bytes on
// each page that tell a dead page (Note [Dead pages] in residency/swap_engine.h).
// Split from residency.cc, which moves the pages.
#include <algorithm>

#include "residency/swap_engine.h"

namespace oversub::pool {

// The engine's pages under the required (or, with optional, the optional) ranges,
// sorted, each once.
std::vector<std::uintptr_t> residency_engine::pages_of(std::span<const byte_range> ranges,
                                                       bool optional) const {
  std::vector<std::uintptr_t> out;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.reach || r.optional != optional) continue;
    for (std::uintptr_t a = r.addr & mask; a < r.addr + r.bytes; a += cfg_.page_bytes) {
      if (pages_.count(a) != 0) out.push_back(a);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The pages under the optional ranges, each once: every range's first page (sorted),
// then the others (sorted). When the room runs out part way, the pages the argument
// words point at are the ones made resident.
std::vector<std::uintptr_t> residency_engine::optional_pages_of(
    std::span<const byte_range> ranges) const {
  std::vector<std::uintptr_t> all = pages_of(ranges, true);
  std::vector<std::uintptr_t> out;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.reach || !r.optional || pages_.count(r.addr & mask) == 0) continue;
    out.push_back(r.addr & mask);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  const std::size_t firsts = out.size();
  for (std::uintptr_t va : all) {
    if (!std::binary_search(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(firsts), va)) {
      out.push_back(va);
    }
  }
  return out;
}

template <typename F>
void residency_engine::for_pages_locked(std::uintptr_t addr, std::size_t bytes, F&& f) {
  if (bytes == 0) return;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (std::uintptr_t a = addr & mask; a < addr + bytes; a += cfg_.page_bytes) {
    if (page* p = find_locked(a)) f(*p);
  }
}

void residency_engine::occupy(std::uintptr_t addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes == 0 || !occupied_.emplace(addr, bytes).second) return;
  for_pages_locked(addr, bytes, [&](page& p) {
    if (p.occupants++ == 0) p.fresh_epoch = write_epoch_;
  });
}

void residency_engine::vacate(std::uintptr_t addr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = occupied_.find(addr);
  if (it == occupied_.end()) return;
  const std::size_t bytes = it->second;
  occupied_.erase(it);
  for_pages_locked(addr, bytes, [&](page& p) {
    if (p.occupants > 0 && --p.occupants == 0) p.dead = true;
  });
}

}  // namespace oversub::pool
