// Device allocations, pinned host memory and pointer queries (see memory.h).
#include "memory.h"

#include <sys/mman.h>

#include <cstring>

#include "address_space.h"
#include "capture.h"
#include "device.h"
#include "fault_injection.h"
#include "managed.h"

namespace simgpu {

namespace {
int g_default_pool_tag = 0;
}

CUmemoryPool default_pool() { return reinterpret_cast<CUmemoryPool>(&g_default_pool_tag); }

CUresult mem_alloc(CUdeviceptr* dptr, size_t bytes, const char* origin, bool from_pool) {
  charge_host_call();
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult f = inject_failure(fail_kind::alloc); f != CUDA_SUCCESS) return f;
  device_state& d = dev();
  uint64_t charged = round_up(bytes, 512);
  if (!charge_device_allocation(charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t span = 0;
  uintptr_t base = allocate_va(charged, 256, &span);
  if (base == 0) {
    uncharge_device_bytes(charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto r = std::make_unique<region>();
  r->base = base;
  r->bytes = bytes;
  r->span_bytes = span;
  r->charged_bytes = charged;
  r->kind = region_kind::device;
  r->origin = origin;
  r->from_pool = from_pool;
  r->buffer_id = d.next_buffer_id++;
  d.regions[base] = std::move(r);
  *dptr = base;
  return CUDA_SUCCESS;
}

namespace {
void release_region(region* r) {
  if (r->kind == region_kind::managed) managed_release(r);
  uncharge_device_bytes(r->charged_bytes);
  r->charged_bytes = 0;
  discard_pages(r->base, r->span_bytes);
  r->live = false;
}
}  // namespace

CUresult mem_free(CUdeviceptr p) {
  charge_host_call();
  if (p == 0) return CUDA_SUCCESS;
  region* r = region_at(p);
  if (r == nullptr || !r->live || r->kind == region_kind::vmm_reservation)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) return c;
  host_wait_all();
  race_forget(r->base);
  release_region(r);
  return CUDA_SUCCESS;
}

CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytes, stream_obj* s) {
  CUresult r = mem_alloc(dptr, bytes, "cuMemAllocAsync", true);
  if (r != CUDA_SUCCESS) return r;
  op_end(s, engine::none, op_begin(s, engine::none, 0));
  return CUDA_SUCCESS;
}

CUresult mem_free_async(CUdeviceptr p, stream_obj* s) {
  if (p == 0) return CUDA_SUCCESS;
  region* r = region_at(p);
  if (r == nullptr || !r->live || r->kind != region_kind::device)
    return CUDA_ERROR_INVALID_VALUE;
  double t = op_begin(s, engine::none, 0);
  op_end(s, engine::none, t);
  auto desc = std::make_shared<const std::string>("cuMemFreeAsync on " + stream_name(s));
  race_access(s, r->base, r->bytes, true, desc);
  race_forget(r->base);  // later uses are use-after-free, caught by protection
  release_region(r);
  return CUDA_SUCCESS;
}

CUresult host_alloc(void** pp, size_t bytes, unsigned flags) {
  charge_host_call();
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult f = inject_failure(fail_kind::host_alloc); f != CUDA_SUCCESS) return f;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  pinned_block b;
  b.base = reinterpret_cast<uintptr_t>(p);
  b.bytes = bytes;
  b.flags = flags;
  dev().pinned[b.base] = b;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult host_free(void* p) {
  charge_host_call();
  auto& pinned = dev().pinned;
  auto it = pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == pinned.end() || it->second.registered) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) return c;
  host_wait_all();
  race_forget(it->first);
  munmap(p, it->second.bytes);
  pinned.erase(it);
  return CUDA_SUCCESS;
}

CUresult host_register(void* p, size_t bytes, unsigned flags) {
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  if (in_device_va(lo)) return CUDA_ERROR_INVALID_VALUE;
  auto& pinned = dev().pinned;
  auto it = pinned.lower_bound(lo);
  if (it != pinned.end() && it->first < lo + bytes) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (pinned_block* b = find_pinned(lo); b != nullptr)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  pinned_block b;
  b.base = lo;
  b.bytes = bytes;
  b.registered = true;
  b.flags = flags;
  pinned[lo] = b;
  return CUDA_SUCCESS;
}

CUresult host_unregister(void* p) {
  auto& pinned = dev().pinned;
  auto it = pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == pinned.end() || !it->second.registered)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  race_forget(it->first);
  pinned.erase(it);
  return CUDA_SUCCESS;
}

CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  if (in_device_va(p)) {
    region* r = find_region(p);
    if (r == nullptr || !r->live || p >= r->base + r->bytes) return CUDA_ERROR_NOT_FOUND;
    if (r->kind == region_kind::vmm_reservation) {
      vmm_mapping* m = find_mapping(r, p);
      if (m == nullptr) return CUDA_ERROR_NOT_FOUND;
      if (base) *base = m->lo;
      if (size) *size = m->hi - m->lo;
      return CUDA_SUCCESS;
    }
    if (base) *base = r->base;
    if (size) *size = r->bytes;
    return CUDA_SUCCESS;
  }
  if (pinned_block* b = find_pinned(p)) {
    if (base) *base = b->base;
    if (size) *size = b->bytes;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  region* r = in_device_va(p) ? find_region(p) : nullptr;
  if (r != nullptr && !r->live) r = nullptr;
  vmm_mapping* m = (r && r->kind == region_kind::vmm_reservation) ? find_mapping(r, p) : nullptr;
  if (r && r->kind == region_kind::vmm_reservation && m == nullptr) r = nullptr;
  pinned_block* b = r ? nullptr : find_pinned(p);
  bool known = r != nullptr || b != nullptr;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (known) address_range(&base, &size, p);
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUcontext*>(data) = primary_context();
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      // Managed memory reads as device memory here; CU_POINTER_ATTRIBUTE_IS_MANAGED
      // tells it apart.
      *static_cast<unsigned*>(data) = r ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = p;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!known || (r && r->kind != region_kind::managed)) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(p);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(data) = 1;
      return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<unsigned long long*>(data) = r ? r->buffer_id : b->base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = r && r->kind == region_kind::managed;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = known;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = m ? m->access : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUmemoryPool*>(data) = (r && r->from_pool) ? default_pool() : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<unsigned long long*>(data) = m ? m->handle_id : (r ? r->buffer_id : b->base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace simgpu
