// The simulated device's state: one device (ordinal 0), one primary context, the
// device address space with every allocation ever made in it, pinned host blocks,
// capacity accounting and the counters of the exit report. Everything here is
// guarded by device_lock() (common.h).
//
// Glossary
//   region   a range of device VA handed out by one call: a cuMemAlloc-family
//            allocation, a managed allocation or a VMM reservation. Regions are never
//            forgotten: a freed region stays in the table so that a later access can
//            be described ("freed 4096-byte allocation at [a,b)"), and its VA is
//            never handed out again.
//   handle   a VMM physical allocation (cuMemCreate), backed by a memfd.
//   pinned   host memory from cuMemAllocHost/cuMemHostAlloc or cuMemHostRegister.
//   window   a stretch of code that acts as the device (a kernel, the device side of
//            a copy): device memory it may use is unprotected on demand (fault.cc).
#ifndef SIMGPU_DRIVER_DEVICE_H
#define SIMGPU_DRIVER_DEVICE_H

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "device_model.h"

namespace simgpu {

enum class region_kind : uint8_t { device, managed, vmm_reservation };

struct vmm_mapping {
  uintptr_t lo = 0, hi = 0;
  uint64_t handle_id = 0;
  uint64_t offset_bytes = 0;   // into the handle
  int access = 0;              // CUmemAccess_flags granted to device 0
  bool host_located = false;
};

// A memory location as cuMemAdvise and cuMemPrefetchAsync record it (a
// CUmemLocation that compares); type CU_MEM_LOCATION_TYPE_INVALID: none.
struct managed_location {
  int type = CU_MEM_LOCATION_TYPE_INVALID;  // CUmemLocationType
  int id = 0;
  bool operator==(const managed_location&) const = default;
};

// What cuMemAdvise and cuMemPrefetchAsync recorded for a stretch of a managed
// allocation (the range queries answer from it).
struct managed_hints {
  bool read_mostly = false;
  bool accessed_by_device = false;  // CU_MEM_ADVISE_SET_ACCESSED_BY for device 0
  bool accessed_by_host = false;    // ... for the host
  managed_location preferred;
  managed_location last_prefetch;
  bool operator==(const managed_hints&) const = default;
};

struct region {
  uintptr_t base = 0;
  uint64_t bytes = 0;          // as requested
  uint64_t span_bytes = 0;     // VA given out (page multiple)
  uint64_t charged_bytes = 0;  // counted against capacity (device allocations)
  region_kind kind = region_kind::device;
  bool live = true;
  const char* origin = "";     // the call that made it
  uint64_t buffer_id = 0;
  bool from_pool = false;
  // Managed memory, one entry per model page.
  std::vector<uint8_t> page_on_device;
  std::vector<uint64_t> page_stamp;
  // Per page, when the last kernel that used it ends (virtual ns): Note [Migrations
  // of pages in use] in managed.h.
  std::vector<double> page_busy_until;
  // Hints by range, host-page granular (CUDA rounds advice and prefetch ranges to
  // host pages): each key is an offset into the region, its hints hold up to the
  // next key or span_bytes. Key 0 is always present; neighbours always differ.
  std::map<uint64_t, managed_hints> hints;
  // VMM reservation: mappings by start address.
  std::map<uintptr_t, vmm_mapping> mappings;
  uintptr_t end() const { return base + span_bytes; }
};

struct phys_handle {
  uint64_t id = 0;
  int fd = -1;
  uint64_t bytes = 0;
  CUmemAllocationProp prop{};
  bool on_device = true;
  int refs = 1;                // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
  int mappings = 0;
};

struct pinned_block {
  uintptr_t base = 0;
  uint64_t bytes = 0;
  bool registered = false;     // cuMemHostRegister (else allocated by us)
  unsigned flags = 0;
};

struct stats {
  uint64_t kernels = 0, copies = 0, memsets = 0;
  uint64_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0;
  uint64_t managed_faults = 0, managed_to_device_bytes = 0, managed_to_host_bytes = 0;
  uint64_t managed_evicted_bytes = 0;
  // Bytes a prefetch to the host moved while a kernel still used them, which that
  // kernel faulted back (Note [Migrations of pages in use] in managed.h).
  uint64_t managed_in_use_bytes = 0;
  // Device-resident managed bytes a discard released (Note [Discards] in managed.h).
  uint64_t managed_discarded_bytes = 0;
  uint64_t races = 0;
  // Bytes kernels read or wrote in host-located VMM mappings (a swapped-out page
  // reached over the link): Note [Kernels on host-located mappings] in kernels.cc.
  uint64_t kernel_host_mapped_bytes = 0;
};

struct device_state {
  device_model model;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uintptr_t va_base = 0;
  uint64_t va_bytes = 0;
  uintptr_t va_next = 0;
  std::map<uintptr_t, std::unique_ptr<region>> regions;
  std::map<uint64_t, std::unique_ptr<phys_handle>> handles;
  std::map<uintptr_t, pinned_block> pinned;
  uint64_t next_handle_id = 1;
  uint64_t next_buffer_id = 1;
  unsigned primary_flags = 0;
  int primary_refs = 0;
  bool primary_active = false;
  stats st;
};

// The state; valid once init_device() has succeeded.
device_state& dev();
bool device_ready();

// Loads config and model, reserves the address space, installs the fault handler
// and the fork and exit hooks. Idempotent.
CUresult init_device();

// Sticky error (an illegal address seen by a kernel), CUDA_SUCCESS when none.
extern std::atomic<int> g_sticky_error;
// Set in the child after fork(): every call answers CUDA_ERROR_NOT_INITIALIZED.
extern std::atomic<bool> g_forked;
extern std::atomic<bool> g_initialized;

// The one primary context handle (its address is the CUcontext).
CUcontext primary_context();
// The calling thread's current context, or nullptr.
CUcontext& current_context();

// Capacity: charges bytes, or answers false when they do not fit.
bool charge_device_bytes(uint64_t bytes);
// The same for a device allocation or device VMM handle: evicts managed pages to
// make room first (managed_make_room).
bool charge_device_allocation(uint64_t bytes);
void uncharge_device_bytes(uint64_t bytes);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_DEVICE_H
