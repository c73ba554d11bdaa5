// Managed memory (see Note [Managed pages] in managed.h).
#include "managed.h"

#include <sys/mman.h>

#include <algorithm>
#include <map>

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

// Makes room for one page by evicting the least recently used device page.
bool make_room(double* cost_ns) {
  while (!charge_device_bytes(page_bytes())) {
    if (g_lru.empty()) return false;
    auto [r, i] = g_lru.begin()->second;
    set_page_host(r, i, PROT_READ | PROT_WRITE);
    dev().st.managed_evicted_bytes += page_bytes();
    dev().st.managed_to_host_bytes += page_bytes();
    if (cost_ns) *cost_ns += page_bytes() / dev().model.d2h_pinned_bytes_per_s * 1e9;
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

}  // namespace

bool managed_make_room(uint64_t bytes) {
  device_state& d = dev();
  double cost_ns = 0;
  while (d.used_bytes + bytes > d.capacity_bytes && !g_lru.empty()) {
    auto [r, i] = g_lru.begin()->second;
    set_page_host(r, i, PROT_READ | PROT_WRITE);
    d.st.managed_evicted_bytes += page_bytes();
    d.st.managed_to_host_bytes += page_bytes();
    cost_ns += page_bytes() / d.model.d2h_pinned_bytes_per_s * 1e9;
  }
  clock_host_advance(cost_ns);
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
                  page_bytes() / dev().model.h2d_pinned_bytes_per_s * 1e9;
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
                       page_bytes() / dev().model.d2h_pinned_bytes_per_s * 1e9);
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
      w.fault_ns += cost + moved / dev().model.h2d_pinned_bytes_per_s * 1e9;
      ++w.faults;
      ++dev().st.managed_faults;
    }
    window_open(w, r->base, r->span_bytes, PROT_READ | PROT_WRITE);
    return;
  }
  protect(r->base, r->span_bytes, PROT_NONE);
}

uint64_t managed_migrate_range(uintptr_t p, uint64_t bytes, bool to_device) {
  region* r = find_region(p);
  if (r == nullptr || !r->live || r->kind != region_kind::managed || bytes == 0) return 0;
  size_t first = (p - r->base) / page_bytes();
  size_t last = std::min(r->page_on_device.size(), (p + bytes - 1 - r->base) / page_bytes() + 1);
  uint64_t moved = 0;
  for (size_t i = first; i < last; ++i) {
    if (to_device && !r->page_on_device[i]) {
      if (!page_to_device(r, i, nullptr)) break;
      moved += page_bytes();
    } else if (!to_device && r->page_on_device[i]) {
      set_page_host(r, i, PROT_READ | PROT_WRITE);
      dev().st.managed_to_host_bytes += page_bytes();
      moved += page_bytes();
    }
  }
  managed_apply_protection(r);
  return moved;
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
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY: r->advice_read_mostly = true; break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY: r->advice_read_mostly = false; break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: r->advice_preferred = loc.type; break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: r->advice_preferred = -1; break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY: break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace simgpu
