// device_pool: the pool as the interposer sees it (OVERSUB_MODE=pool and above).
// One arena per device (online, or planned over online) and, in swap and um modes,
// one residency backend per device (residency/backend.h: in swap mode the arena maps
// the swap engine's pages, in um mode the backend serves the allocations itself); the
// stream fences, and the pool's section of the exit statistics. Plain calls with
// CUDA's driver types; the hooks translate runtime calls into these. The device_*
// calls that move memory ask the device's backend, and do nothing without one.
#ifndef OVERSUB_CORE_DEVICE_POOL_H
#define OVERSUB_CORE_DEVICE_POOL_H

#include <cstdint>
#include <span>
#include <vector>

#include "pool/memory_resource.h"
#include "residency/backend.h"

namespace oversub::core {

struct pool_settings {
  bool planned = false;                           // OVERSUB_POOL=planned
  std::uint64_t large_bytes = std::uint64_t{32} << 20;  // OVERSUB_POOL_LARGE
  std::uint64_t host_budget_bytes = 0;            // OVERSUB_HOST_LIMIT, resolved
  bool swap = false;                              // OVERSUB_MODE=swap: pages move to the host
  bool um = false;                                // OVERSUB_MODE=um: managed memory, prefetched
  bool um_naive = false;                          // ... without prefetches (OVERSUB_POLICY=naive)
  // Swap and um modes: device bytes the pages may hold (OVERSUB_DEVICE_LIMIT resolved);
  // 0: the device's free memory at first use less a headroom (Note [Swap capacity] in
  // core/device_pool.cc).
  std::uint64_t swap_capacity_bytes = 0;
  // Swap mode: every write-capable call is seen (swap_config::clean_evictions).
  bool all_writes_seen = false;
  // Swap mode: evictions finished by the engine's own thread (OVERSUB_MOVER=thread).
  bool mover_thread = false;
};

// See Note [Swap capacity] (device_pool.cc): the bytes swap mode's pages may hold, from
// OVERSUB_DEVICE_LIMIT resolved (limit_bytes), else from the device's free and total
// memory.
std::uint64_t swap_capacity_of(std::uint64_t limit_bytes, std::uint64_t free_bytes,
                               std::uint64_t total_bytes);

// Set once, before the first allocation (the interposer does it at first use).
void configure(const pool_settings& s);

// See Note [Swap needs host-located VMM] (device_pool.cc): what the device says of
// CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and
// CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY (device ordinal); false when it cannot be asked.
bool host_vmm_supported(int device);
bool managed_memory_supported(int device);
// Whether the device and the CPU can use managed memory at once, pages migrating on
// fault (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS).
bool concurrent_managed_access(int device);

// A link's rates each way, bytes/s; 0 where they could not be measured.
struct link_rates {
  double to_device = 0;
  double to_host = 0;
};

// See Note [Do VMM calls wait?] (core/device_pool.cc): whether the device's VMM calls
// waited for the work already enqueued, measured once on a page of its own.
enum class vmm_wait_answer { no_wait, waits, unknown };
vmm_wait_answer probe_vmm_waits(int device);
// The probe's answer for the device, asked once (the first call probes).
vmm_wait_answer vmm_waits_answer(int device);
// True only where the calls were found to wait.
bool vmm_calls_wait(int device);
// See Note [Pinned rates at start] (core/device_pool.cc): the rates of pinned copies to
// and from device memory, timed once a device on memory of its own (the first call
// probes).
link_rates pinned_copy_rates(int device);

// See Note [Managed migration rates, measured] (core/device_pool.cc): the rates at
// which the driver prefetches managed memory to the device and to the host, bytes/s,
// measured once on 32 MiB of its own; 0 where they could not be measured. And where
// the driver discards managed memory (discards), the time a discard took per 64 KiB.
struct managed_rates : link_rates {
  bool discards = false;
  double discard_page_ns = 0;
};
managed_rates probe_managed_rates(int device);
// See Note [um plans at the driver's rates] (core/device_pool.cc): the rates um mode's
// backend on device migrates at, measured when it started; 0 for any other backend,
// or where they could not be measured.
managed_rates device_migration_rates(int device) noexcept;

// False when the driver could not be loaded: the hooks forward to CUDA then.
bool available();

// A block for device (the current device) served in stream order on stream.
pool::allocation_result device_allocate(int device, std::size_t bytes, CUstream stream);
// Takes ptr back; false when ptr is not a live pool block (forward it to CUDA).
bool device_deallocate(int device, void* ptr, std::size_t bytes, CUstream stream);
// Mapped bytes the pool holds but the application does not (added back to free).
std::uint64_t device_cached_bytes(int device);
// The arena's figures for device (tests and the report).
pool::resource_stats device_stats(int device);

// Work enqueued on stream (launch, copy, memset, graph hooks).
void note_work(CUstream stream) noexcept;

// Swap and um modes: before work on stream that uses ranges of device's memory, make
// them resident and order the work after their fetches (residency_backend::prepare).
// In pool mode, or for memory that is not the pool's, ok and nothing moves.
residency::prepare_result device_prepare(int device, std::span<const residency::byte_range> ranges, CUstream stream,
                              bool writes, const residency::victim_rank& rank = {}) noexcept;
// Swap mode: work on stream that may use any of device's pages (Note [A launch that
// may touch anything] in residency/swap_engine.h).
void device_touch_all(int device, CUstream stream) noexcept;
// Swap and um modes: schedule-driven moves of ranges of device's memory (no stream
// waits): evictions begun, and fetches that never wait on the host (what finds no
// room yet is appended to later; residency_backend::prefetch_now).
bool device_evict(int device, std::span<const residency::byte_range> ranges) noexcept;
bool device_prefetch_now(int device, std::span<const residency::byte_range> ranges,
                         std::vector<residency::byte_range>& later,
                         const residency::victim_rank& rank = {}) noexcept;
// Swap mode: Note [Lending an evicting page's memory] in residency/swap_engine.h on or
// off (nothing otherwise).
void device_set_lending(int device, bool on) noexcept;
// Swap mode: swap_engine::set_copy_clock, the host clock the engine times its remaps on
// and the link's rates, measured or assumed (nothing otherwise). False where the
// device has no engine yet (nothing allocated on it), so nothing was set.
bool device_set_copy_clock(int device, std::uint64_t (*now_ns)() noexcept,
                           double h2d_bytes_per_s, double d2h_bytes_per_s,
                           bool rates_measured) noexcept;
// See Note [The pool's layout changed] (core/schedule.cc): how many times the
// planned pool has made or retired a plan on device (0 without one).
std::uint64_t device_layout_generation(int device) noexcept;
// Swap and um modes: the bytes the backend may hold on device (0 otherwise).
std::uint64_t device_residency_capacity(int device) noexcept;
// See Note [Remapping runs] in residency/swap_engine.h: the pages of room device's
// backend gathers before a fetch (1 without a backend, or before it has timed its calls).
std::size_t device_batch_pages(int device) noexcept;
// See Note [Dead gaps] in core/dead_gaps.cc: appends what happened to the blocks on
// device's arena's pages since the last call (nothing without a swap backend).
void device_take_vacancies(int device,
                           std::vector<residency::residency_backend::vacancy>& out) noexcept;
// The host costs of device's backend's remaps as it measured them (all 0 without a
// backend, or before it has timed enough of them).
residency::residency_backend::remap_costs device_remap_costs(int device) noexcept;
// What device's backend has moved so far and the host time of its remaps (all 0
// without a backend; Note [Which part differs] in core/schedule_costs.cc).
residency::residency_backend::remap_totals device_moved_totals(int device) noexcept;
// See Note [Memory that is not ours] (residency/backend.h): bytes another library created
// on device through the VMM API, counted against the swap/um capacity (bytes < 0 gives
// them back). False when they would leave no room; true when no residency runs.
bool device_reserve_foreign(int device, std::int64_t bytes) noexcept;

// See Note [Long-lived layout from a profile] (policy/placement.h), swap mode: expected[k]
// is the size of the k-th long-lived buffer the saved profile's iteration uses, in
// allocation order, and order the k in the address order wanted. At a device's first
// allocation the pool takes a block for each, in that order (contiguous in a fresh
// arena), and the allocation that comes when the k-th is next expected, with exactly
// its size, gets the k-th block. Any other allocation is served as always, so a
// program that allocates otherwise than the profile says only loses the layout. Only
// the first device that allocates is laid out. Set once, before the first allocation.
void set_long_lived_layout(std::vector<std::size_t> expected, std::vector<std::uint32_t> order);
struct layout_result {
  std::uint64_t expected = 0;  // blocks laid out (0: no layout on this device)
  std::uint64_t claimed = 0;   // given to the allocations expected
  std::uint64_t returned = 0;  // given back to the arena unclaimed
};
// The iteration is learned (every long-lived buffer is allocated by then): the blocks
// no allocation claimed go back to the arena. Once per device; later calls return {}.
layout_result device_end_long_lived_layout(int device) noexcept;

}  // namespace oversub::core

#endif  // OVERSUB_CORE_DEVICE_POOL_H
