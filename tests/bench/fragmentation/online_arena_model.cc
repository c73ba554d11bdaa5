// The online arena as a model (see allocator_models.h): pool/'s block_index over one
// range, chunks counted when first touched, dedicated mappings for large requests.
#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "allocator_models.h"
#include "pool/block_index.h"

namespace oversub::bench {

online_arena_peaks online_arena_peak(const trace& t, const online_arena_config& cfg) {
  constexpr std::uintptr_t kBase = std::uintptr_t{1} << 40;  // any chunk-aligned address
  pool::block_index index;
  index.add_range(kBase, cfg.range_bytes, 0);
  std::vector<bool> mapped(cfg.range_bytes / cfg.chunk_bytes, false);
  std::vector<std::uint32_t> users(cfg.range_bytes / cfg.chunk_bytes, 0);  // live blocks
  std::size_t mapped_bytes = 0;  // chunks ever touched
  std::size_t used_chunk_bytes = 0;  // chunks under live blocks

  struct live_buffer {
    pool::block* block = nullptr;  // in the range, or
    std::size_t dedicated_bytes = 0;  // a mapping of its own
  };
  std::vector<live_buffer> live;
  std::size_t dedicated_bytes = 0;                  // live and cached mappings
  std::size_t dedicated_live_bytes = 0;
  std::multimap<std::size_t, bool> dedicated_cache;  // freed mappings by size (all work done)
  online_arena_peaks peak;
  auto everything = [](const pool::block&) { return true; };
  auto chunks_of = [&](const pool::block* b) {
    return std::pair<std::size_t, std::size_t>{(b->addr - kBase) / cfg.chunk_bytes,
                                               (b->addr + b->size - 1 - kBase) / cfg.chunk_bytes};
  };

  for (const trace_event& e : t.events) {
    if (!e.alloc) {
      live_buffer& b = live[e.buffer];
      if (b.block != nullptr) {
        const auto [first, last] = chunks_of(b.block);
        for (std::size_t c = first; c <= last; ++c) {
          if (--users[c] == 0) used_chunk_bytes -= cfg.chunk_bytes;
        }
        index.release(b.block);
      } else {
        dedicated_cache.emplace(b.dedicated_bytes, true);
        dedicated_live_bytes -= b.dedicated_bytes;
      }
      continue;
    }
    const std::size_t size = pool::block_index::round(e.bytes);
    live_buffer b;
    if (size >= cfg.dedicated_threshold_bytes) {
      const std::size_t bytes = (size + cfg.chunk_bytes - 1) / cfg.chunk_bytes * cfg.chunk_bytes;
      b.dedicated_bytes = bytes;
      auto it = dedicated_cache.find(bytes);
      if (it != dedicated_cache.end()) {
        dedicated_cache.erase(it);
      } else {
        for (const auto& cached : dedicated_cache) dedicated_bytes -= cached.first;
        dedicated_cache.clear();
        dedicated_bytes += bytes;
      }
      dedicated_live_bytes += bytes;
    } else {
      b.block = index.take(size, everything);
      if (b.block == nullptr) b.block = index.take(size, everything, 1 << 20);
      if (b.block == nullptr) return {SIZE_MAX, SIZE_MAX};  // the range is full
      const auto [first, last] = chunks_of(b.block);
      for (std::size_t c = first; c <= last; ++c) {
        if (!mapped[c]) {
          mapped[c] = true;
          mapped_bytes += cfg.chunk_bytes;
        }
        if (users[c]++ == 0) used_chunk_bytes += cfg.chunk_bytes;
      }
    }
    live.push_back(b);
    peak.plentiful = std::max(peak.plentiful, mapped_bytes + dedicated_bytes);
    peak.trimmed = std::max(peak.trimmed, used_chunk_bytes + dedicated_live_bytes);
  }
  return peak;
}

}  // namespace oversub::bench
