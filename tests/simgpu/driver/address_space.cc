// The device address space: VA handout, protection, lookup and descriptions
// (see address_space.h).
#include "address_space.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iterator>

namespace simgpu {

uint64_t g_host_page_bytes = 4096;

bool reserve_address_space() {
  device_state& d = dev();
  if (d.va_base != 0) return true;
  g_host_page_bytes = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // Over-reserve so the base can be aligned to 2 MiB (the VMM granularity).
  void* p = mmap(nullptr, kVaBytes + 2 * kMiB, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  d.va_base = round_up(reinterpret_cast<uintptr_t>(p), 2 * kMiB);
  d.va_bytes = kVaBytes;
  d.va_next = d.va_base + 2 * kMiB;  // keep small integers and NULL-ish offsets unused
  return true;
}

bool in_device_va(uintptr_t p) {
  const device_state& d = dev();
  return p >= d.va_base && p < d.va_base + d.va_bytes;
}

uintptr_t allocate_va(uint64_t bytes, uint64_t align, uint64_t* span_bytes) {
  device_state& d = dev();
  if (align < g_host_page_bytes) align = g_host_page_bytes;
  uint64_t span = round_up(bytes == 0 ? 1 : bytes, g_host_page_bytes);
  uintptr_t base = round_up(d.va_next, align);
  if (base + span + g_host_page_bytes > d.va_base + d.va_bytes) return 0;
  d.va_next = base + span + g_host_page_bytes;  // one guard page
  *span_bytes = span;
  return base;
}

void discard_pages(uintptr_t lo, uint64_t bytes) {
  mmap(reinterpret_cast<void*>(lo), bytes, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void protect(uintptr_t lo, uint64_t bytes, int prot) {
  mprotect(reinterpret_cast<void*>(lo), bytes, prot);
}

region* find_region(uintptr_t p) {
  device_state& d = dev();
  auto it = d.regions.upper_bound(p);
  if (it == d.regions.begin()) return nullptr;
  --it;
  region* r = it->second.get();
  return p < r->end() ? r : nullptr;
}

region* region_at(uintptr_t p) {
  device_state& d = dev();
  auto it = d.regions.find(p);
  return it == d.regions.end() ? nullptr : it->second.get();
}

pinned_block* find_pinned(uintptr_t p) {
  device_state& d = dev();
  auto it = d.pinned.upper_bound(p);
  if (it == d.pinned.begin()) return nullptr;
  --it;
  return p < it->second.base + it->second.bytes ? &it->second : nullptr;
}

vmm_mapping* find_mapping(region* r, uintptr_t p) {
  auto it = r->mappings.upper_bound(p);
  if (it == r->mappings.begin()) return nullptr;
  --it;
  return p < it->second.hi ? &it->second : nullptr;
}

namespace {
const char* kind_name(const region& r) {
  switch (r.kind) {
    case region_kind::device: return "allocation";
    case region_kind::managed: return "managed allocation";
    case region_kind::vmm_reservation: return "VMM reservation";
  }
  return "allocation";
}
}  // namespace

void describe_address(uintptr_t p, char* out, size_t n) {
  if (!device_ready() || !in_device_va(p)) {
    if (pinned_block* b = device_ready() ? find_pinned(p) : nullptr)
      std::snprintf(out, n, "pinned host memory [0x%" PRIxPTR ",0x%" PRIxPTR ")", b->base,
                    b->base + b->bytes);
    else
      std::snprintf(out, n, "host memory that is not pinned or registered");
    return;
  }
  region* r = find_region(p);
  if (r == nullptr) {
    // The guard page after a region reads as "past the end" of it.
    device_state& d = dev();
    auto it = d.regions.upper_bound(p);
    if (it != d.regions.begin() && p < std::prev(it)->second->end() + g_host_page_bytes) {
      r = std::prev(it)->second.get();
    } else {
      std::snprintf(out, n, "an address that was never allocated");
      return;
    }
  }
  uintptr_t end = r->base + r->bytes;
  if (!r->live) {
    std::snprintf(out, n, "freed %" PRIu64 "-byte %s at [0x%" PRIxPTR ",0x%" PRIxPTR ") from %s",
                  r->bytes, kind_name(*r), r->base, end, r->origin);
    return;
  }
  if (r->kind == region_kind::vmm_reservation) {
    vmm_mapping* m = find_mapping(r, p);
    if (m == nullptr)
      std::snprintf(out, n, "unmapped address in %" PRIu64 "-byte VMM reservation at [0x%" PRIxPTR
                    ",0x%" PRIxPTR ")", r->bytes, r->base, end);
    else if (m->access == 0)
      std::snprintf(out, n, "VMM mapping [0x%" PRIxPTR ",0x%" PRIxPTR ") with no access set "
                    "(cuMemSetAccess)", m->lo, m->hi);
    else
      std::snprintf(out, n, "%s VMM mapping [0x%" PRIxPTR ",0x%" PRIxPTR ")",
                    m->host_located ? "host-located" : "device-located", m->lo, m->hi);
    return;
  }
  if (p >= end) {
    std::snprintf(out, n, "%s%" PRIu64 " bytes past the end of the %" PRIu64 "-byte %s at [0x%"
                  PRIxPTR ",0x%" PRIxPTR ")", r->live ? "" : "(freed) ",
                  static_cast<uint64_t>(p - end), r->bytes, kind_name(*r), r->base, end);
    return;
  }
  std::snprintf(out, n, "live %" PRIu64 "-byte %s at [0x%" PRIxPTR ",0x%" PRIxPTR ") from %s",
                r->bytes, kind_name(*r), r->base, end, r->origin);
}

bool device_range_ok(uintptr_t p, uint64_t bytes, bool write, uintptr_t* bad, char* why,
                     size_t why_bytes) {
  if (bytes == 0) return true;
  uintptr_t hi = p + bytes;
  if (!in_device_va(p)) {
    pinned_block* b = find_pinned(p);
    if (b != nullptr && hi <= b->base + b->bytes) return true;
    *bad = b ? b->base + b->bytes : p;
    describe_address(*bad, why, why_bytes);
    return false;
  }
  region* r = find_region(p);
  if (r == nullptr || !r->live) {
    *bad = p;
    describe_address(p, why, why_bytes);
    return false;
  }
  if (r->kind != region_kind::vmm_reservation) {
    uintptr_t end = r->base + round_up(r->bytes, 512);
    if (hi > end) {
      *bad = r->base + r->bytes;
      describe_address(*bad, why, why_bytes);
      return false;
    }
    return true;
  }
  uintptr_t at = p;
  while (at < hi) {
    vmm_mapping* m = find_mapping(r, at);
    if (m == nullptr || m->access == 0 ||
        (write && m->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      *bad = at;
      describe_address(at, why, why_bytes);
      if (m != nullptr && m->access != 0)
        std::snprintf(why, why_bytes, "read-only VMM mapping [0x%" PRIxPTR ",0x%" PRIxPTR ")",
                      m->lo, m->hi);
      return false;
    }
    at = m->hi;
  }
  return true;
}

// Note [A range across mappings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A swap engine maps each page of an allocation on its own, so one range a kernel
// reads may be partly in device memory and partly in host-located mappings (an
// allocation larger than the room, made resident only where it fits, the rest reached
// over the link). Classifying the range by its first byte charged the whole range as
// device memory whenever its first page was resident: VGG-16 b256 at 1/8 of its
// bytes, 1.5x, on the H200's measured model, where a 411 MB activation is more than a
// quarter of the room, had 196 of its pages read from the host by every kernel that
// used it and paid for none of them. So kernel costs split each range by mapping,
// for the footprints kernels declare. A footprint simgpu derives from a kernel's
// arguments (none declared) guesses a VMM pointer's extent as the run of mapped memory
// from its mapping on, other allocations' pages included, so its cost still follows
// its first byte (kDerivedExtent in kernels.cc).
void host_located_parts(uintptr_t p, uint64_t bytes, std::vector<byte_span>* out) {
  if (bytes == 0 || !in_device_va(p)) return;
  region* r = find_region(p);
  if (r == nullptr || r->kind != region_kind::vmm_reservation) return;
  const uintptr_t end = p + bytes;
  const size_t first = out->size();
  auto it = r->mappings.upper_bound(p);
  if (it != r->mappings.begin()) --it;
  for (; it != r->mappings.end() && it->second.lo < end; ++it) {
    const vmm_mapping& m = it->second;
    if (!m.host_located || m.hi <= p) continue;
    const uint64_t lo = std::max<uintptr_t>(m.lo, p) - p, hi = std::min<uintptr_t>(m.hi, end) - p;
    if (out->size() > first && out->back().end == lo)
      out->back().end = hi;
    else
      out->push_back({lo, hi});
  }
}

uint64_t host_bytes_in(uintptr_t p, uint64_t bytes) {
  if (bytes == 0) return 0;
  if (!in_device_va(p)) return find_pinned(p) ? bytes : 0;
  thread_local std::vector<byte_span> parts;
  parts.clear();
  host_located_parts(p, bytes, &parts);
  uint64_t host = 0;
  for (const byte_span& s : parts) host += s.end - s.begin;
  return host;
}

mem_place classify(uintptr_t p) {
  if (!in_device_va(p)) return find_pinned(p) ? mem_place::pinned : mem_place::pageable;
  region* r = find_region(p);
  if (r == nullptr) return mem_place::device;
  if (r->kind == region_kind::managed) return mem_place::managed;
  if (r->kind == region_kind::vmm_reservation) {
    vmm_mapping* m = find_mapping(r, p);
    if (m != nullptr && m->host_located) return mem_place::host_mapping;
  }
  return mem_place::device;
}

}  // namespace simgpu
