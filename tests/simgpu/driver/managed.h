// Managed (unified) memory: page-granular residency with demand migration, LRU
// eviction to the host when the device is full, prefetch and advice.
//
// Note [Managed pages]
// Each managed allocation has one location per model page (managed_page_size).
// Host-resident pages are readable and writable by host code; device-resident
// pages are PROT_NONE to the host (a host touch migrates the page back, charging a
// fault and the transfer to host time) and count against device capacity. When a
// kernel starts, the host-resident pages of the managed allocations it uses are
// protected so that its first touch of each page faults and migrates it (a fault
// cost plus the page's transfer time is added to the kernel's duration). On devices
// without concurrentManagedAccess (Maxwell, Kepler) there is no demand paging: a
// launch migrates every page of the managed allocations it uses up front.
#ifndef SIMGPU_DRIVER_MANAGED_H
#define SIMGPU_DRIVER_MANAGED_H

#include <cuda.h>

#include <cstdint>

#include "device.h"

namespace simgpu {

struct device_window;

CUresult managed_alloc(CUdeviceptr* dptr, size_t bytes, unsigned flags);
// Forgets the device pages of a managed region being freed (uncharges them).
void managed_release(region* r);

// A device access in window w to managed address p; answers true when resolved.
bool managed_device_touch(region* r, uintptr_t p, device_window* w);
// A host access to managed address p; answers true when resolved.
bool managed_host_touch(region* r, uintptr_t p);
// Applies the outside-window protection of every page of r.
void managed_apply_protection(region* r);
// Prepares r for a kernel in window w (see Note [Managed pages]).
void managed_prepare_for_kernel(region* r, device_window& w);

// Moves the pages of [p, p+bytes) to the device (to_device) or the host; answers
// the bytes moved. Used by cuMemPrefetchAsync, which charges them on the stream.
uint64_t managed_migrate_range(uintptr_t p, uint64_t bytes, bool to_device);

// Evicts device-resident managed pages (least recently used first) until `bytes`
// more fit in the capacity, charging the transfers to host time. As on a GPU, where
// the UVM driver gives way to the physical allocator, device allocations call this
// before failing with CUDA_ERROR_OUT_OF_MEMORY. Answers whether they fit now.
bool managed_make_room(uint64_t bytes);

CUresult managed_advise(CUdeviceptr p, size_t bytes, CUmem_advise advice, CUmemLocation loc);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_MANAGED_H
