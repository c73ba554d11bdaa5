// The host's memory, as OVERSUB_HOST_LIMIT reads it.
//
// Note [Host budget]
// ~~~~~~~~~~~~~~~~~~
// Swap mode keeps an evicted page's bytes in host memory the driver allocates for it
// (a host-located cuMemCreate handle per page, residency/swap_engine.h), which cannot
// be paged out: holding too much starves the host, and the OOM killer then ends the
// training job. So every page's host handle counts against a budget
// (swap_config::host_budget_bytes, from OVERSUB_HOST_LIMIT: a size, or a
// fraction of the host's physical memory, 0.5 by default), and an eviction that would
// pass it fails cleanly (residency_errc::host_budget: the work that needed the room
// gets cudaErrorMemoryAllocation, with the option to change), never a kill. The arena
// reserves no more address space for pages than the budget allows, nor more than the
// host's memory.
#ifndef OVERSUB_POOL_HOST_MEMORY_H
#define OVERSUB_POOL_HOST_MEMORY_H

#include <cstdint>

namespace oversub::pool {

// The host's physical memory in bytes (0 when it cannot be read): what a fraction in
// OVERSUB_HOST_LIMIT is a fraction of.
std::uint64_t physical_memory_bytes();

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_HOST_MEMORY_H
