// The VMM API (see Note [VMM in simgpu] in vmm.h).
#include "vmm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "address_space.h"
#include "device_model.h"
#include "clock.h"
#include "device.h"
#include "fault_injection.h"
#include "timeline.h"

namespace simgpu {

namespace {

phys_handle* find_handle(CUmemGenericAllocationHandle h) {
  auto& hs = dev().handles;
  auto it = hs.find(h);
  return it == hs.end() ? nullptr : it->second.get();
}

void maybe_destroy(phys_handle* h) {
  if (h->refs > 0 || h->mappings > 0) return;
  if (h->on_device) uncharge_device_bytes(h->bytes);
  close(h->fd);
  dev().handles.erase(h->id);
}

bool valid_prop(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return false;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return prop->location.id == 0;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return true;
    default: return false;
  }
}

// The live reservation containing all of [p, p+size), or nullptr.
region* reservation_for(uintptr_t p, size_t size) {
  if (!in_device_va(p)) return nullptr;
  region* r = find_region(p);
  if (r == nullptr || !r->live || r->kind != region_kind::vmm_reservation) return nullptr;
  if (p + size > r->base + r->bytes) return nullptr;
  return r;
}

// Note [VMM calls that wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// With vmm_waits_for_device (model key; SIMGPU_VMM_WAIT overrides), cuMemMap,
// cuMemUnmap and cuMemSetAccess first move host time to the moment the device has
// finished the work already enqueued: the pessimistic reading of PyTorch's note
// that changing mappings "appears to involve at least some synchronous actions with
// the GPU". It is a wait in time only. It is not a synchronisation for the race
// detector: CUDA documents no such ordering (cuMemUnmap's own documentation says
// nothing of pending work, and a driver that happens to wait today may not
// tomorrow), so an unmap still has to be ordered after the work that uses the
// range by an event or stream synchronisation, and one that is not is reported
// whatever this switch says.
// For the timeline: `va`, the address mapped, unmapped or granted (0: none) and
// `memory`, what a map maps ("device" or "host"; nullptr otherwise).
// See Note [Repeated VMM calls] in tests/simgpu/driver/device_model.cc.
constexpr double kVmmRepeatGapNs = 5000;
thread_local host_family t_last_vmm_family = host_family::count_;
thread_local double t_last_vmm_end_ns = 0;

// Note [VMM calls one at a time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A VMM call changes the device's page tables through the kernel driver, and NVIDIA's
// driver takes locks there that other threads' calls share: whether two host threads'
// cuMemMap/cuMemUnmap/cuMemSetAccess calls run side by side on a GPU is unknown until
// gpu_facts measures it (vmm_calls.two_threads: 32 remaps on one thread against 16 on
// each of two at once). The hostile reading is the default: with vmm_calls_serialized
// (model key, default 1; SIMGPU_VMM_SERIAL overrides) a VMM call starts no earlier
// than the last VMM call of any thread has ended, its thread waiting (in host time)
// for it. So a library that remaps on two threads, swap's mover beside the launching
// thread, gains nothing from the second unless the device lets it. In lockstep
// (SIMGPU_LOCKSTEP=1) the calls are taken in host-time order, so the order of the
// waits repeats from run to run. A call that repeats its thread's family (Note
// [Repeated VMM calls] in tests/simgpu/driver/device_model.cc) still pays the repeat
// figure after such a wait.
double g_vmm_free_ns = 0;  // when the last VMM call of any thread ended

void vmm_call_cost(const device_model::vmm_cost& c, uint64_t bytes, const char* wait_why,
                   host_family f, uintptr_t va = 0, const char* memory = nullptr) {
  const device_model& m = dev().model;
  if (wait_why != nullptr && m.vmm_waits_for_device) host_wait_device_time(wait_why);
  if (m.vmm_calls_serialized && g_vmm_free_ns > clock_host_ns()) {
    host_wait_until(g_vmm_free_ns, "another thread's VMM call");
  }
  const double from = clock_host_ns();
  const bool repeat = t_last_vmm_family == f && from - t_last_vmm_end_ns <= kVmmRepeatGapNs;
  clock_host_advance(c.for_bytes(bytes, repeat), f);
  t_last_vmm_family = f;
  t_last_vmm_end_ns = clock_host_ns();
  g_vmm_free_ns = std::max(g_vmm_free_ns, clock_host_ns());
  timeline_host_call(host_thread_ordinal(), host_family_name(f), from, clock_host_ns(), bytes, va,
                     memory);
}

void unmap_one(region* r, std::map<uintptr_t, vmm_mapping>::iterator it) {
  vmm_mapping m = it->second;
  r->mappings.erase(it);
  discard_pages(m.lo, m.hi - m.lo);
  if (phys_handle* h = find_handle(m.handle_id)) {
    --h->mappings;
    maybe_destroy(h);
  }
}

}  // namespace

CUresult vmm_granularity(size_t* granularity, const CUmemAllocationProp* prop) {
  if (granularity == nullptr || !valid_prop(prop)) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kVmmGranularityBytes;
  return CUDA_SUCCESS;
}

CUresult vmm_reserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                     unsigned long long flags) {
  (void)addr;  // a hint; simgpu never reuses VA, so it is not honoured
  if (ptr == nullptr || size == 0 || size % kVmmGranularityBytes != 0 || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult f = inject_failure(fail_kind::reserve); f != CUDA_SUCCESS) return f;
  uint64_t span = 0;
  uintptr_t base = allocate_va(size, std::max<size_t>(alignment, kVmmGranularityBytes), &span);
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto r = std::make_unique<region>();
  r->base = base;
  r->bytes = size;
  r->span_bytes = span;
  r->kind = region_kind::vmm_reservation;
  r->origin = "cuMemAddressReserve";
  r->buffer_id = dev().next_buffer_id++;
  dev().regions[base] = std::move(r);
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult vmm_address_free(CUdeviceptr ptr, size_t size) {
  charge_host_call();
  region* r = region_at(ptr);
  if (r == nullptr || !r->live || r->kind != region_kind::vmm_reservation || size != r->bytes)
    return CUDA_ERROR_INVALID_VALUE;
  race_host_release(r->base, r->bytes, "cuMemAddressFree by the host");
  while (!r->mappings.empty()) unmap_one(r, r->mappings.begin());
  race_forget(r->base);
  r->live = false;
  return CUDA_SUCCESS;
}

CUresult vmm_create(CUmemGenericAllocationHandle* handle, size_t size,
                    const CUmemAllocationProp* prop, unsigned long long flags) {
  vmm_call_cost(dev().model.vmm_create, size, nullptr, host_family::vmm_create);
  if (handle == nullptr || size == 0 || flags != 0 || !valid_prop(prop) ||
      size % kVmmGranularityBytes != 0)
    return CUDA_ERROR_INVALID_VALUE;
  bool on_device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  // A device without CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  // refuses host-located physical memory (cuMemCreate documents NOT_SUPPORTED for
  // an operation the system or device does not support).
  if (!on_device && !dev().model.host_vmm_supported) return CUDA_ERROR_NOT_SUPPORTED;
  if (on_device) {
    if (CUresult f = inject_failure(fail_kind::alloc); f != CUDA_SUCCESS) return f;
  } else {
    if (CUresult f = inject_failure(fail_kind::host_alloc); f != CUDA_SUCCESS) return f;
  }
  if (on_device && !charge_device_allocation(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    if (on_device) uncharge_device_bytes(size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto h = std::make_unique<phys_handle>();
  h->id = dev().next_handle_id++;
  h->fd = fd;
  h->bytes = size;
  h->prop = *prop;
  h->on_device = on_device;
  *handle = h->id;
  dev().handles[h->id] = std::move(h);
  return CUDA_SUCCESS;
}

CUresult vmm_release(CUmemGenericAllocationHandle handle) {
  phys_handle* h = find_handle(handle);
  vmm_call_cost(dev().model.vmm_release, h != nullptr ? h->bytes : 0, nullptr, host_family::vmm_release);
  if (h == nullptr || h->refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  --h->refs;
  maybe_destroy(h);
  return CUDA_SUCCESS;
}

CUresult vmm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle hid,
                 unsigned long long flags) {
  phys_handle* h = find_handle(hid);
  vmm_call_cost(dev().model.vmm_map, size, "cuMemMap waits for the device",
                host_family::vmm_map, ptr,
                h == nullptr ? nullptr : h->on_device ? "device" : "host");
  if (h == nullptr || flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ptr % kVmmGranularityBytes || size % kVmmGranularityBytes ||
      offset % kVmmGranularityBytes || offset + size > h->bytes)
    return CUDA_ERROR_INVALID_VALUE;
  region* r = reservation_for(ptr, size);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = r->mappings.lower_bound(ptr);
  if (it != r->mappings.end() && it->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (find_mapping(r, ptr) != nullptr) return CUDA_ERROR_ALREADY_MAPPED;
  if (CUresult f = inject_failure(fail_kind::map); f != CUDA_SUCCESS) return f;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  vmm_mapping m;
  m.lo = ptr;
  m.hi = ptr + size;
  m.handle_id = h->id;
  m.offset_bytes = offset;
  m.host_located = !h->on_device;
  r->mappings[ptr] = m;
  ++h->mappings;
  return CUDA_SUCCESS;
}

// Note [One unmap over several mappings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cuMemUnmap's documentation: "The range must be the entire contiguous address range
// that was mapped to. In other words, cuMemUnmap cannot unmap a sub-range". It says
// nothing of a range made of several whole mappings (a run of pages mapped one handle
// at a time). NVIDIA's vectorAddMMAP sample unmaps such a range with one call;
// PyTorch's expandable segments unmap it handle by handle. By default simgpu takes it
// (CUDA_SUCCESS, every mapping in it unmapped), which is what swap mode's runs of
// pages use for one call a run. A model's `vmm_unmap_spans_mappings = 0` (optional
// key; scripts/gpu/calibrate.py writes it from the GPU kit's gpu_facts
// `run16_handles_ranged`), or SIMGPU_VMM_UNMAP_SPANS=0, takes the strict reading: a
// range that is not exactly one mapping fails with CUDA_ERROR_INVALID_VALUE and unmaps
// nothing, as a driver might. A sub-range of a mapping fails either way.
CUresult vmm_unmap(CUdeviceptr ptr, size_t size) {
  vmm_call_cost(dev().model.vmm_unmap, size, "cuMemUnmap waits for the device",
                host_family::vmm_unmap, ptr);
  region* r = reservation_for(ptr, size);
  if (r == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  // The range must consist of whole mappings; see Note [One unmap over several
  // mappings] for how many.
  uintptr_t at = ptr;
  while (at < ptr + size) {
    auto it = r->mappings.find(at);
    if (it == r->mappings.end() || it->second.hi > ptr + size) return CUDA_ERROR_INVALID_VALUE;
    at = it->second.hi;
    if (at < ptr + size && !dev().model.vmm_unmap_spans_mappings) return CUDA_ERROR_INVALID_VALUE;
  }
  race_host_release(ptr, size, "cuMemUnmap by the host");
  while (true) {
    auto it = r->mappings.lower_bound(ptr);
    if (it == r->mappings.end() || it->first >= ptr + size) break;
    unmap_one(r, it);
  }
  return CUDA_SUCCESS;
}

CUresult vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                        size_t count) {
  vmm_call_cost(dev().model.vmm_set_access, size, "cuMemSetAccess waits for the device",
                host_family::vmm_set_access, ptr);
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  region* r = reservation_for(ptr, size);
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device_access = -1;
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& d = desc[i];
    if (d.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    if (d.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (d.location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
      device_access = d.flags;
    } else if (d.location.type != CU_MEM_LOCATION_TYPE_HOST &&
               d.location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA &&
               d.location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // Every byte of the range must be mapped.
  uintptr_t at = ptr;
  while (at < ptr + size) {
    vmm_mapping* m = find_mapping(r, at);
    if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
    at = m->hi;
  }
  if (CUresult f = inject_failure(fail_kind::access); f != CUDA_SUCCESS) return f;
  if (device_access < 0) return CUDA_SUCCESS;
  at = ptr;
  while (at < ptr + size) {
    vmm_mapping* m = find_mapping(r, at);
    // Note [Access changes and the race detector]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // Taking access away from bytes
    // that device work not yet known complete uses is a race (a GPU's queued
    // kernel would fault); keeping or widening it changes nothing for that work.
    bool forbid_reads = device_access == CU_MEM_ACCESS_FLAGS_PROT_NONE && m->access != 0;
    bool forbid_writes = m->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
                         device_access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (forbid_reads || forbid_writes)
      race_host_restrict(m->lo, m->hi - m->lo, forbid_reads, "cuMemSetAccess by the host");
    m->access = device_access;
    at = m->hi;
  }
  return CUDA_SUCCESS;
}

CUresult vmm_get_access(unsigned long long* flags, const CUmemLocation* loc, CUdeviceptr ptr) {
  if (flags == nullptr || loc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  region* r = reservation_for(ptr, 1);
  vmm_mapping* m = r ? find_mapping(r, ptr) : nullptr;
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (loc->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (loc->id != 0) return CUDA_ERROR_INVALID_DEVICE;
    *flags = static_cast<unsigned long long>(m->access);
  } else {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return CUDA_SUCCESS;
}

CUresult vmm_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle hid) {
  phys_handle* h = find_handle(hid);
  if (prop == nullptr || h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = h->prop;
  return CUDA_SUCCESS;
}

CUresult vmm_retain(CUmemGenericAllocationHandle* out, void* addr) {
  uintptr_t p = reinterpret_cast<uintptr_t>(addr);
  region* r = out ? reservation_for(p, 1) : nullptr;
  vmm_mapping* m = r ? find_mapping(r, p) : nullptr;
  phys_handle* h = m ? find_handle(m->handle_id) : nullptr;
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ++h->refs;
  *out = h->id;
  return CUDA_SUCCESS;
}

}  // namespace simgpu
