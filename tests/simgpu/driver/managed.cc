// Managed memory (see Note [Managed pages] in managed.h).
#include "managed.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "address_space.h"
#include "clock.h"
#include "fault.h"
#include "fault_injection.h"

namespace simgpu {

namespace {

// LRU of device-resident pages: stamp -> (region, page index).
std::map<uint64_t, std::pair<region*, size_t>> g_lru;
uint64_t g_stamp = 0;

uint64_t page_bytes() { return dev().model.managed_page_bytes; }

uintptr_t page_addr(region* r, size_t i) { return r->base + i * page_bytes(); }

void touch_lru(region* r, size_t i) {
  if (r->page_stamp[i] != 0) g_lru.erase(r->page_stamp[i]);
  r->page_stamp[i] = ++g_stamp;
  g_lru[g_stamp] = {r, i};
}

void set_page_host(region* r, size_t i, int prot) {
  r->page_on_device[i] = 0;
  if (r->page_stamp[i] != 0) g_lru.erase(r->page_stamp[i]);
  r->page_stamp[i] = 0;
  uncharge_device_bytes(page_bytes());
  protect(page_addr(r, i), page_bytes(), prot);
}

// Room given back by prefetches to the host still in flight, in the order they end
// (one copy engine per direction: Note [Room from migrations to the host] in
// tests/simgpu/driver/managed.h).
struct release {
  double end_ns;
  uint64_t bytes;
};
std::deque<release> g_releases;

// Makes room for one page by evicting the least recently used device page.
bool make_room(double* cost_ns) {
  while (!charge_device_bytes(page_bytes())) {
    if (g_lru.empty()) return false;
    auto [r, i] = g_lru.begin()->second;
    set_page_host(r, i, PROT_READ | PROT_WRITE);
    dev().st.managed_evicted_bytes += page_bytes();
    dev().st.managed_to_host_bytes += page_bytes();
    if (cost_ns) *cost_ns += page_bytes() / dev().model.managed_d2h_bytes_per_s * 1e9;
  }
  return true;
}

// Moves page i to the device; answers false when the device has no room.
bool page_to_device(region* r, size_t i, double* cost_ns) {
  if (r->page_on_device[i]) {
    touch_lru(r, i);
    return true;
  }
  if (!make_room(cost_ns)) return false;
  r->page_on_device[i] = 1;
  touch_lru(r, i);
  dev().st.managed_to_device_bytes += page_bytes();
  return true;
}

void add_touched(device_window& w, region* r) {
  if (std::find(w.managed_touched.begin(), w.managed_touched.end(), r) ==
      w.managed_touched.end())
    w.managed_touched.push_back(r);
}

// ---- hints by range (region::hints) --------------------------------------------------

using hint_map = std::map<uint64_t, managed_hints>;

// The offsets [lo, hi) of the host pages of r that [p, p+bytes) touches.
std::pair<uint64_t, uint64_t> hint_span(const region* r, uintptr_t p, uint64_t bytes) {
  uint64_t lo = round_down(p - r->base, g_host_page_bytes);
  uint64_t hi = std::min(round_up(p + bytes - r->base, g_host_page_bytes), r->span_bytes);
  return {lo, hi};
}

// Makes off (< span) a key of m; answers its entry.
hint_map::iterator split_hints(hint_map& m, uint64_t off) {
  auto it = std::prev(m.upper_bound(off));
  if (it->first == off) return it;
  return m.emplace_hint(std::next(it), off, it->second);
}

// Applies change to the hints of [p, p+bytes), keeping neighbours distinct.
template <typename F>
void update_hints(region* r, uintptr_t p, uint64_t bytes, F change) {
  auto [lo, hi] = hint_span(r, p, bytes);
  hint_map& m = r->hints;
  if (m.empty()) m.emplace(0, managed_hints{});
  auto first = split_hints(m, lo);
  if (hi < r->span_bytes) split_hints(m, hi);
  for (auto it = first; it != m.end() && it->first < hi; ++it) change(it->second);
  auto it = first == m.begin() ? first : std::prev(first);
  for (auto next = std::next(it); next != m.end() && next->first <= hi; next = std::next(it)) {
    if (next->second == it->second) m.erase(next);
    else it = next;
  }
}

// The hints of every stretch that [p, p+bytes) touches.
std::vector<const managed_hints*> hints_of(region* r, uintptr_t p, uint64_t bytes) {
  if (r->hints.empty()) r->hints.emplace(0, managed_hints{});
  auto [lo, hi] = hint_span(r, p, bytes);
  std::vector<const managed_hints*> out;
  for (auto it = std::prev(r->hints.upper_bound(lo)); it != r->hints.end() && it->first < hi; ++it)
    out.push_back(&it->second);
  return out;
}

// The location all of hs have in field, or none when they differ.
managed_location common_location(const std::vector<const managed_hints*>& hs,
                                 managed_location managed_hints::*field) {
  managed_location l = hs.front()->*field;
  for (const managed_hints* h : hs)
    if (!(h->*field == l)) return {};
  return l;
}

// The legacy int form of a location: a device ordinal, CU_DEVICE_CPU or CU_DEVICE_INVALID.
int legacy_location(managed_location l) {
  switch (l.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return l.id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return CU_DEVICE_CPU;
    default: return CU_DEVICE_INVALID;
  }
}

int location_id(managed_location l) {
  return l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? l.id : legacy_location(l);
}

// A location as recorded: the host has no NUMA nodes (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID
// is -1), so the calling thread's node is the host.
managed_location recorded_location(CUmemLocation loc) {
  switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return {loc.type, loc.id};
    default: return {CU_MEM_LOCATION_TYPE_HOST, 0};
  }
}

}  // namespace

// The live managed region holding all of [p, p+bytes), or nullptr.
region* managed_region(uintptr_t p, uint64_t bytes) {
  region* r = find_region(p);
  if (r == nullptr || !r->live || r->kind != region_kind::managed || bytes == 0 ||
      p + bytes > r->base + r->span_bytes)
    return nullptr;
  return r;
}

void managed_note_release(double end_ns, uint64_t bytes) {
  if (bytes != 0) g_releases.push_back({end_ns, bytes});
}

double managed_room_ready(double start_ns, uint64_t bytes, uint64_t free_before) {
  while (!g_releases.empty() && g_releases.front().end_ns <= start_ns) g_releases.pop_front();
  uint64_t pending = 0;
  for (const release& r : g_releases) pending += r.bytes;
  const uint64_t truly_free = free_before > pending ? free_before - pending : 0;
  // Beyond free_before the driver evicts pages itself (charged by the caller).
  uint64_t need = std::min(bytes, free_before);
  need = need > truly_free ? need - truly_free : 0;
  double ready = start_ns;
  while (need != 0 && !g_releases.empty()) {
    release& r = g_releases.front();
    ready = std::max(ready, r.end_ns);
    const uint64_t take = std::min(need, r.bytes);
    need -= take;
    r.bytes -= take;
    if (r.bytes == 0) g_releases.pop_front();
  }
  return ready;
}

bool managed_make_room(uint64_t bytes) {
  device_state& d = dev();
  double cost_ns = 0;
  while (d.used_bytes + bytes > d.capacity_bytes && !g_lru.empty()) {
    auto [r, i] = g_lru.begin()->second;
    set_page_host(r, i, PROT_READ | PROT_WRITE);
    d.st.managed_evicted_bytes += page_bytes();
    d.st.managed_to_host_bytes += page_bytes();
    cost_ns += page_bytes() / d.model.managed_d2h_bytes_per_s * 1e9;
  }
  clock_host_advance(cost_ns, host_family::managed);
  return d.used_bytes + bytes <= d.capacity_bytes;
}

CUresult managed_alloc(CUdeviceptr* dptr, size_t bytes, unsigned flags) {
  charge_host_call();
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult f = inject_failure(fail_kind::alloc); f != CUDA_SUCCESS) return f;
  device_state& d = dev();
  uint64_t span = 0;
  uint64_t rounded = round_up(bytes, page_bytes());
  uintptr_t base = allocate_va(rounded, page_bytes(), &span);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto r = std::make_unique<region>();
  r->base = base;
  r->bytes = bytes;
  r->span_bytes = span;
  r->kind = region_kind::managed;
  r->origin = "cuMemAllocManaged";
  r->buffer_id = d.next_buffer_id++;
  size_t pages = rounded / page_bytes();
  r->page_on_device.assign(pages, 0);
  r->page_stamp.assign(pages, 0);
  r->page_busy_until.assign(pages, 0);
  r->hints.emplace(0, managed_hints{});
  protect(base, span, PROT_READ | PROT_WRITE);  // all pages start on the host
  *dptr = base;
  d.regions[base] = std::move(r);
  return CUDA_SUCCESS;
}

void managed_release(region* r) {
  for (size_t i = 0; i < r->page_on_device.size(); ++i)
    if (r->page_on_device[i]) set_page_host(r, i, PROT_NONE);
}

bool managed_device_touch(region* r, uintptr_t p, device_window* w) {
  size_t i = (p - r->base) / page_bytes();
  if (i >= r->page_on_device.size()) return false;
  if (!r->page_on_device[i]) {
    double cost = dev().model.managed_fault_ns +
                  page_bytes() / dev().model.managed_h2d_bytes_per_s * 1e9;
    page_to_device(r, i, &cost);  // when full of pinned allocations: used remotely
    w->fault_ns += cost;
    ++w->faults;
    ++dev().st.managed_faults;
  } else {
    touch_lru(r, i);
  }
  add_touched(*w, r);
  protect(page_addr(r, i), page_bytes(), PROT_READ | PROT_WRITE);
  return true;
}

bool managed_host_touch(region* r, uintptr_t p) {
  size_t i = (p - r->base) / page_bytes();
  if (i >= r->page_on_device.size()) return false;
  if (r->page_on_device[i]) {
    ++dev().st.managed_faults;
    dev().st.managed_to_host_bytes += page_bytes();
    clock_host_advance(dev().model.managed_fault_ns +
                           page_bytes() / dev().model.managed_d2h_bytes_per_s * 1e9,
                       host_family::managed);
  }
  if (r->page_on_device[i]) set_page_host(r, i, PROT_READ | PROT_WRITE);
  else protect(page_addr(r, i), page_bytes(), PROT_READ | PROT_WRITE);
  return true;
}

void managed_apply_protection(region* r) {
  if (!r->live) return;
  size_t n = r->page_on_device.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && r->page_on_device[j] == r->page_on_device[i]) ++j;
    protect(page_addr(r, i), (j - i) * page_bytes(),
            r->page_on_device[i] ? PROT_NONE : PROT_READ | PROT_WRITE);
    i = j;
  }
}

void managed_prepare_for_kernel(region* r, device_window& w) {
  add_touched(w, r);
  if (!dev().model.concurrent_managed_access) {
    double cost = dev().model.managed_fault_ns;
    uint64_t moved = 0;
    for (size_t i = 0; i < r->page_on_device.size(); ++i)
      if (!r->page_on_device[i] && page_to_device(r, i, &cost)) moved += page_bytes();
    if (moved) {
      w.fault_ns += cost + moved / dev().model.managed_h2d_bytes_per_s * 1e9;
      ++w.faults;
      ++dev().st.managed_faults;
    }
    window_open(w, r->base, r->span_bytes, PROT_READ | PROT_WRITE);
    return;
  }
  protect(r->base, r->span_bytes, PROT_NONE);
}

void managed_fault_declared(uintptr_t p, uint64_t bytes, device_window& w) {
  region* r = find_region(p);
  if (r == nullptr || !r->live || r->kind != region_kind::managed || bytes == 0 ||
      !dev().model.concurrent_managed_access)
    return;  // without concurrent access the launch migrated the whole region
  const size_t first = (p - r->base) / page_bytes();
  const size_t last =
      std::min(r->page_on_device.size(), (p + bytes - 1 - r->base) / page_bytes() + 1);
  for (size_t i = first; i < last; ++i) managed_device_touch(r, page_addr(r, i), &w);
}

void managed_note_device_use(uintptr_t p, uint64_t bytes, double end_ns) {
  region* r = find_region(p);
  if (r == nullptr || !r->live || r->kind != region_kind::managed || bytes == 0) return;
  const size_t first = (p - r->base) / page_bytes();
  const size_t last =
      std::min(r->page_busy_until.size(), (p + bytes - 1 - r->base) / page_bytes() + 1);
  for (size_t i = first; i < last; ++i)
    r->page_busy_until[i] = std::max(r->page_busy_until[i], end_ns);
}

uint64_t managed_migrate_range(uintptr_t p, uint64_t bytes, bool to_device, double* evict_ns,
                               double start_ns, double* pulled_ns) {
  region* r = find_region(p);
  if (r == nullptr || !r->live || r->kind != region_kind::managed || bytes == 0) return 0;
  size_t first = (p - r->base) / page_bytes();
  size_t last = std::min(r->page_on_device.size(), (p + bytes - 1 - r->base) / page_bytes() + 1);
  uint64_t moved = 0;
  for (size_t i = first; i < last; ++i) {
    if (to_device && !r->page_on_device[i]) {
      if (!page_to_device(r, i, evict_ns)) break;
      moved += page_bytes();
    } else if (!to_device && r->page_on_device[i]) {
      set_page_host(r, i, PROT_READ | PROT_WRITE);
      dev().st.managed_to_host_bytes += page_bytes();
      moved += page_bytes();
      // See Note [Migrations of pages in use] in managed.h.
      if (pulled_ns != nullptr && r->page_busy_until[i] > start_ns &&
          page_to_device(r, i, pulled_ns)) {
        device_state& d = dev();
        d.st.managed_in_use_bytes += page_bytes();
        d.st.managed_to_device_bytes += page_bytes();
        ++d.st.managed_faults;
        *pulled_ns +=
            d.model.managed_fault_ns + page_bytes() / d.model.managed_h2d_bytes_per_s * 1e9;
      }
    }
  }
  managed_apply_protection(r);
  return moved;
}

uint64_t managed_discard_range(uintptr_t p, uint64_t bytes) {
  region* r = managed_region(p, bytes);
  if (r == nullptr) return 0;
  const uint64_t pb = page_bytes();
  const uintptr_t end = p + bytes;
  const uintptr_t alloc_end = r->base + r->bytes;
  const size_t first = (p - r->base) / pb;
  const size_t last = std::min(r->page_on_device.size(), (end - 1 - r->base) / pb + 1);
  uint64_t released = 0;
  for (size_t i = first; i < last; ++i) {
    const uintptr_t lo = page_addr(r, i);
    const uintptr_t hi = std::min(lo + pb, alloc_end);
    if (r->page_on_device[i] && p <= lo && end >= hi) {
      set_page_host(r, i, PROT_READ | PROT_WRITE);
      released += pb;
    }
    // A page left on the device is closed to the host again below.
    protect(lo, pb, PROT_READ | PROT_WRITE);
    const uintptr_t from = std::max(p, lo), to = std::min(end, lo + pb);
    std::memset(reinterpret_cast<void*>(from), kDiscardPoison, to - from);
    if (r->page_on_device[i]) protect(lo, pb, PROT_NONE);
  }
  dev().st.managed_discarded_bytes += released;
  return released;
}

CUresult managed_advise(CUdeviceptr p, size_t bytes, CUmem_advise advice, CUmemLocation loc) {
  region* r = find_region(p);
  if (r == nullptr || !r->live || bytes == 0 || p + bytes > r->base + r->span_bytes)
    return CUDA_ERROR_INVALID_VALUE;
  bool needs_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                        advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                        advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (needs_location) {
    bool ok = (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id == 0) ||
              loc.type == CU_MEM_LOCATION_TYPE_HOST ||
              loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
              loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    if (!ok) return loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? CUDA_ERROR_INVALID_DEVICE
                                                             : CUDA_ERROR_INVALID_VALUE;
  }
  if (r->kind != region_kind::managed) return CUDA_ERROR_INVALID_VALUE;
  managed_location where = recorded_location(loc);
  bool device = where.type == CU_MEM_LOCATION_TYPE_DEVICE;
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
      update_hints(r, p, bytes, [](managed_hints& h) { h.read_mostly = true; });
      break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
      update_hints(r, p, bytes, [](managed_hints& h) { h.read_mostly = false; });
      break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      update_hints(r, p, bytes, [&](managed_hints& h) { h.preferred = where; });
      break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      update_hints(r, p, bytes, [](managed_hints& h) { h.preferred = {}; });
      break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY: {
      bool set = advice == CU_MEM_ADVISE_SET_ACCESSED_BY;
      update_hints(r, p, bytes, [&](managed_hints& h) {
        (device ? h.accessed_by_device : h.accessed_by_host) = set;
      });
      break;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

void managed_note_prefetch(uintptr_t p, uint64_t bytes, CUmemLocation loc) {
  region* r = managed_region(p, bytes);
  if (r == nullptr) return;
  managed_location where = recorded_location(loc);
  update_hints(r, p, bytes, [&](managed_hints& h) { h.last_prefetch = where; });
}

CUresult managed_range_attribute(void* data, size_t data_bytes, CUmem_range_attribute attribute,
                                 CUdeviceptr p, size_t bytes) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool size_ok = false;
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      size_ok = data_bytes == sizeof(int);
      break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      size_ok = data_bytes == sizeof(CUmemLocationType);
      break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY:
      size_ok = data_bytes != 0 && data_bytes % sizeof(int) == 0;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  region* r = managed_region(p, bytes);
  if (!size_ok || r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<const managed_hints*> hs = hints_of(r, p, bytes);
  auto all = [&](bool managed_hints::*flag) {
    return std::all_of(hs.begin(), hs.end(), [&](const managed_hints* h) { return h->*flag; });
  };
  managed_location preferred = common_location(hs, &managed_hints::preferred);
  managed_location prefetched = common_location(hs, &managed_hints::last_prefetch);
  int* out = static_cast<int*>(data);
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: *out = all(&managed_hints::read_mostly); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: *out = legacy_location(preferred); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: *out = legacy_location(prefetched); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: *out = location_id(preferred); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: *out = location_id(prefetched); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
      *static_cast<CUmemLocationType*>(data) = static_cast<CUmemLocationType>(preferred.type);
      break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      *static_cast<CUmemLocationType*>(data) = static_cast<CUmemLocationType>(prefetched.type);
      break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      size_t n = data_bytes / sizeof(int), i = 0;
      if (all(&managed_hints::accessed_by_device) && i < n) out[i++] = 0;
      if (all(&managed_hints::accessed_by_host) && i < n) out[i++] = CU_DEVICE_CPU;
      for (; i < n; ++i) out[i] = CU_DEVICE_INVALID;
      break;
    }
    default: break;
  }
  return CUDA_SUCCESS;
}

}  // namespace simgpu
