// The device address space: one large PROT_NONE, MAP_NORESERVE host mapping in
// which every device allocation, managed allocation and VMM reservation lives.
//
// Note [Device VA is never reused]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Addresses are handed out by a bump pointer and each region starts on its own page
// with a guard page after it, so protection (page-granular) separates regions and a
// pointer into freed memory can never alias a newer allocation: every use after
// free faults and is described precisely. 1 TiB of VA lasts far longer than any test.
#ifndef SIMGPU_DRIVER_ADDRESS_SPACE_H
#define SIMGPU_DRIVER_ADDRESS_SPACE_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device.h"

namespace simgpu {

constexpr uint64_t kVaBytes = 1ull << 40;
extern uint64_t g_host_page_bytes;

// Reserves the address space (once).
bool reserve_address_space();
bool in_device_va(uintptr_t p);

// Hands out VA for a new region of `bytes`, aligned to `align` (>= page). Returns 0
// when the address space is exhausted.
uintptr_t allocate_va(uint64_t bytes, uint64_t align, uint64_t* span_bytes);

// Makes [lo,hi) PROT_NONE anonymous memory again, dropping its contents.
void discard_pages(uintptr_t lo, uint64_t bytes);
void protect(uintptr_t lo, uint64_t bytes, int prot);

// The region whose VA span contains p (live or freed), or nullptr.
region* find_region(uintptr_t p);
// The region that starts exactly at p, or nullptr.
region* region_at(uintptr_t p);
// The pinned block containing p, or nullptr.
pinned_block* find_pinned(uintptr_t p);
// The mapping of a VMM reservation containing p, or nullptr.
vmm_mapping* find_mapping(region* r, uintptr_t p);

// Writes a description of what is at p ("freed 4096-byte allocation at [a,b)").
void describe_address(uintptr_t p, char* out, size_t out_bytes);

// Whether the device may access [p, p+bytes) (writes when `write`): a live device or
// managed allocation, VMM mappings with access set, or pinned host memory. On
// failure writes the first bad address and why.
bool device_range_ok(uintptr_t p, uint64_t bytes, bool write, uintptr_t* bad, char* why,
                     size_t why_bytes);

// Where [p, p+bytes) lives, for cost and copy-kind decisions.
enum class mem_place { device, managed, host_mapping, pinned, pageable };
mem_place classify(uintptr_t p);

// The bytes of [p, p+bytes) that a kernel reaches in host memory: pinned memory and
// host-located VMM mappings, each mapping counted on its own (See Note [A range
// across mappings] in address_space.cc).
uint64_t host_bytes_in(uintptr_t p, uint64_t bytes);

// The parts of [p, p+bytes) in host-located VMM mappings, as [begin, end) offsets from
// p in address order, appended to `out` (nothing for any other kind of memory).
struct byte_span {
  uint64_t begin, end;
};
void host_located_parts(uintptr_t p, uint64_t bytes, std::vector<byte_span>* out);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_ADDRESS_SPACE_H
