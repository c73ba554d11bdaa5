// Replays of a trace through two online allocators, for their peak reserved bytes
// (device memory taken from CUDA, the number that decides out-of-memory):
//
//   online_arena_peak: oversub's own online arena (pool/vmm_arena) as a model. Its
//     sub-allocator is pool/'s real block_index (TLSF best fit with coalescing), run
//     over one reserved range; 2 MiB chunks count as reserved once a block touches
//     them (the arena maps chunks on demand and unmaps only when trimmed, which the
//     model never does); requests of at least dedicated_threshold_bytes get a mapping
//     of their own, kept after free for a later request of the same size and released
//     when a new mapping must be created (Note [Dedicated mappings] in
//     pool/vmm_arena.cc). One stream, all work done at free: every free block is
//     reusable.
//     Two peaks: `plentiful`, with nothing ever given back (a device with room to
//     spare), and `trimmed`, the capacity the arena needs when it trims (unmaps every
//     chunk no live block touches, drops its cached mappings) whenever it is short:
//     the peak of the chunks under live blocks plus live dedicated mappings. A trim
//     changes no placement decision, so one replay gives both.
//
//   caching_allocator_peak: a baseline of PyTorch's CUDACachingAllocator design,
//     written for the comparison (Note [Baseline caching allocator] in
// tests/bench/fragmentation/caching_allocator_model.cc).
#ifndef OVERSUB_BENCH_FRAGMENTATION_ALLOCATOR_MODELS_H
#define OVERSUB_BENCH_FRAGMENTATION_ALLOCATOR_MODELS_H

#include <cstddef>

#include "trace.h"

namespace oversub::bench {

struct online_arena_config {
  std::size_t chunk_bytes = 2u << 20;                 // VMM granularity: 2 MiB
  std::size_t range_bytes = std::size_t{80} << 30;    // one range: an 80 GiB device
  std::size_t dedicated_threshold_bytes = 32u << 20;  // vmm_arena_config's default
};

struct online_arena_peaks {
  std::size_t plentiful = 0;  // bytes mapped, never trimmed
  std::size_t trimmed = 0;    // bytes needed with trimming on shortage
};

online_arena_peaks online_arena_peak(const trace& t, const online_arena_config& cfg = {});

// Bytes reserved at the end (segments are never released).
std::size_t caching_allocator_peak(const trace& t);

// The smallest device capacity (2 MiB steps) within which the baseline replays t
// when it returns its wholly free segments on a failed cudaMalloc, as PyTorch does.
std::size_t caching_allocator_capacity(const trace& t);

}  // namespace oversub::bench

#endif  // OVERSUB_BENCH_FRAGMENTATION_ALLOCATOR_MODELS_H
