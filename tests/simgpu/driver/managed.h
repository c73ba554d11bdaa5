// Managed (unified) memory: page-granular residency with demand migration, LRU
// eviction to the host when the device is full, prefetch and advice.
//
// Note [Managed pages]
// ~~~~~~~~~~~~~~~~~~~~
// Each managed allocation has one location per model page (managed_page_size).
// Host-resident pages are readable and writable by host code; device-resident
// pages are PROT_NONE to the host (a host touch migrates the page back, charging a
// fault and the transfer to host time) and count against device capacity. When a
// kernel starts, the host-resident pages of the managed allocations it uses are
// protected so that its first touch of each page faults and migrates it (a fault
// cost plus the page's transfer time is added to the kernel's duration). On devices
// without concurrentManagedAccess (Maxwell, Kepler) there is no demand paging: a
// launch migrates every page of the managed allocations it uses up front.
//
// Note [Prefetches are migrations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a device with concurrentManagedAccess, cuMemPrefetchAsync is a migration the
// Unified Memory driver makes coherently with every other access: a kernel that
// touches a page while it moves, on any stream, faults and finds its bytes where they
// went (the page moves again), whatever the order; the prefetch only hints where the
// data should be, and a wrong or racing hint costs faults, never bytes. So on such
// models a prefetch is not an access for the race detector: a kernel reaching a
// buffer through a pointer table, unordered with a prefetch of that buffer on another
// stream, is slow on a GPU, not wrong. simgpu keeps one copy of a managed page's bytes
// and moves only its residency, so it cannot lose them either. Frees stay checked by
// their own rules (cuMemFree of managed memory waits for the device). Without
// concurrentManagedAccess (Maxwell, Kepler) the device and the host may not touch
// managed memory at the same time, and a prefetch to the host unordered with a
// kernel is recorded as a read and reported as a race.
//
// Note [Migrations of pages in use]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// simgpu runs a kernel when it is enqueued, so a prefetch to the host enqueued after
// it found the pages where the kernel left them and moved them, even when, in virtual
// time, the kernel had not finished (nothing ordered the prefetch after it). On a GPU
// that kernel is still running and touches the pages after they left: it faults each
// back (Note [Prefetches are migrations]). So a prefetch to the host that starts
// before the end of the last kernel to use a page (page_busy_until, every kernel's
// footprint and reached pages) moves the page out and the kernel's fault brings it
// back: the page ends on the device, the transfer out is paid on the prefetch's
// stream as before, and the fault and the transfer back (managed_fault_ns plus the
// page at the managed rate to the device, and any page the driver evicts to make
// room) are added to the compute engine, which runs every later kernel that much
// later (the hostile reading: the faulting kernel ends late). The bytes are counted
// (stats::managed_in_use_bytes, the report's "moved while in use"): a program that
// orders each prefetch to the host after the work that uses its pages moves none.
#ifndef SIMGPU_DRIVER_MANAGED_H
#define SIMGPU_DRIVER_MANAGED_H

#include <cuda.h>

#include <cstdint>

#include "device.h"

namespace simgpu {

struct device_window;

CUresult managed_alloc(CUdeviceptr* dptr, size_t bytes, unsigned flags);
// The live managed region holding all of [p, p+bytes) (bytes > 0), or nullptr.
region* managed_region(uintptr_t p, uint64_t bytes);
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

// Note [A kernel touches its footprint]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// simgpu runs a kernel's body on the host, and a body may touch only some words of
// what its footprint declares (oversub-replay's kernels check a sample of each
// buffer; a kernel whose body is cheap states a large transfer). A GPU kernel reads
// and writes every byte it declares, so every page of a managed range it declares
// that is on the host faults and migrates, each at managed_fault_ns plus the page at
// the managed rate to the device, as a touched page does. Charging only the pages the
// body touched made demand paging almost free: VGG-16 b256 at 1/8 of its bytes, 1.5x,
// on the H200's measured model, um with its 411 MB activations left to demand paging
// ran at the unlimited iteration. Footprints simgpu derives from the arguments (none
// declared) guess their extent and stay charged by what the body touches.
void managed_fault_declared(uintptr_t p, uint64_t bytes, device_window& w);

// Moves the pages of [p, p+bytes) to the device (to_device) or the host; answers
// the bytes moved, and adds to *evict_ns the time of the pages the driver evicted to
// make room (at the managed rate to the host). Used by cuMemPrefetchAsync, which
// charges both on the stream.
// To the host, pages still in use at start_ns come back (Note [Migrations of pages in
// use]): their faults' time is added to *pulled_ns.
uint64_t managed_migrate_range(uintptr_t p, uint64_t bytes, bool to_device, double* evict_ns,
                               double start_ns = 0, double* pulled_ns = nullptr);
// A kernel that ends at end_ns used [p, p+bytes) (any memory; managed pages are noted).
void managed_note_device_use(uintptr_t p, uint64_t bytes, double end_ns);

// Note [Discards]
// ~~~~~~~~~~~~~~~
// cuMemDiscardBatchAsync (CUDA 13.0) tells the driver that the contents of managed
// ranges are no longer useful: in stream order it may give back the device pages they
// hold without migrating them, and a read that no write or prefetch preceded returns
// indeterminate bytes; an access or prefetch running at the same time is undefined.
// simgpu takes the hostile reading of each:
//   - every byte of the range is overwritten with kDiscardPoison when the discard runs,
//     so a program that reads discarded memory gets wrong bits, not the old right ones;
//   - the device pages the range covers whole (up to its allocation's end) are given
//     back with nothing migrated, their room free from the discard's end (as Note [Room
//     from migrations to the host]); a page it covers in part stays where it is;
//   - a discarded page that comes back (a fault, a prefetch) migrates as any host page
//     does, its transfer paid: the driver may skip it, but nothing says it must;
//   - a discard costs copy_latency_ns a call plus managed_discard_page_ns per page it
//     gives back (the model's key; where not measured, managed_fault_ns, the driver's
//     own part of a fault, or the page's migration to the host where that is less: a
//     driver could always migrate instead), in its stream's order, on no copy engine;
//   - for the race detector it writes the whole range: a kernel, copy or memset
//     unordered with it is reported. A prefetch unordered with it is not (prefetches
//     are no accesses on models with concurrent managed access: Note [Prefetches are
//     migrations]), which is kinder than the documentation.
// Answers the bytes of device pages given back.
inline constexpr unsigned char kDiscardPoison = 0xDB;
uint64_t managed_discard_range(uintptr_t p, uint64_t bytes);

// Note [Room from migrations to the host]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// simgpu moves a managed page's residency when its prefetch is enqueued, so the
// device memory a prefetch to the host gives back looks free at once. On a GPU it is
// free only when the migration has copied the page out, at the driver's rate to the
// host (a sixth of the copy rate on an H200: Note [Managed migration rates] in
// tests/simgpu/driver/device_model.cc). So the room a prefetch to the host gives back
// is free from that prefetch's end (managed_note_release), and a prefetch to the
// device that needs more room than is truly free when it starts begins only when
// enough of those migrations have ended (managed_room_ready): the hostile reading,
// where nothing enters the device faster than the pages leave it.
void managed_note_release(double end_ns, uint64_t bytes);
// When a prefetch to the device ready at start_ns may begin, its `bytes` of room
// taken from free_before bytes free by the capacity's count (which includes room given
// back by migrations still in flight); takes that room.
double managed_room_ready(double start_ns, uint64_t bytes, uint64_t free_before);

// Evicts device-resident managed pages (least recently used first) until `bytes`
// more fit in the capacity, charging the transfers to host time. As on a GPU, where
// the UVM driver gives way to the physical allocator, device allocations call this
// before failing with CUDA_ERROR_OUT_OF_MEMORY. Answers whether they fit now.
bool managed_make_room(uint64_t bytes);

// cuMemAdvise: validates the advice and records it for [p, p+bytes) rounded out to
// host pages (see region::hints); placement is not changed.
CUresult managed_advise(CUdeviceptr p, size_t bytes, CUmem_advise advice, CUmemLocation loc);
// Records loc as the last prefetch location of [p, p+bytes) (a range cuMemPrefetchAsync
// validated), when the prefetch is enqueued.
void managed_note_prefetch(uintptr_t p, uint64_t bytes, CUmemLocation loc);

// Note [Range attributes]
// ~~~~~~~~~~~~~~~~~~~~~~~
// cuMemRangeGetAttribute answers from the recorded hints of every host page of the
// range, as the CUDA documentation describes: read-mostly is 1 only when every page
// has it; a preferred or last-prefetch location is answered only when every page has
// the same one, else CU_DEVICE_INVALID (-2) or CU_MEM_LOCATION_TYPE_INVALID; the
// legacy int forms answer a device ordinal or CU_DEVICE_CPU (-1) for host locations;
// the _ID forms answer the device ordinal or host NUMA node and otherwise what the
// legacy form would (the documentation says to ignore it); ACCESSED_BY lists the
// processors advised for the whole range (device 0, then CU_DEVICE_CPU) and pads with
// CU_DEVICE_INVALID. The range must lie in one live managed allocation, else
// CUDA_ERROR_INVALID_VALUE; so must the data size (4, or a non-zero multiple of 4 for
// ACCESSED_BY).
CUresult managed_range_attribute(void* data, size_t data_bytes, CUmem_range_attribute attribute,
                                 CUdeviceptr p, size_t bytes);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_MANAGED_H
