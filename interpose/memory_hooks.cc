// The runtime's allocation, free and memory-information hooks, on the paths they
// share with the driver's (interpose/memory_core.h), and those paths' non-template
// parts. In pool mode the pool replaces the real allocator behind the same
// reserve/record steps (pool_hooks.h). A pointer the core does not know is
// forwarded untouched and CUDA's answer returned.
//
// Note [Refusing an allocation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A refused allocation returns
// cudaErrorMemoryAllocation without calling CUDA, so nothing is allocated and the
// runtime's last-error slot is not set (cudaGetLastError() after it returns
// cudaSuccess). Frameworks read the returned code, and PyTorch clears the slot
// after an out-of-memory anyway; faking the slot would need a second, failing
// real allocation.
#include "interpose/memory_core.h"

#include <algorithm>
#include <cstdint>

#include "common/log.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "core/refusal.h"
#include "interpose/driver_hooks.h"
#include "interpose/handlers.h"
#include "interpose/pool_hooks.h"

namespace oversub::interpose {

void resolve_limit(call_site at, int device) {
  tracker& t = core();
  if (!t.needs_device_total(device)) return;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const bool known =
      at.runtime ? call_real<hook_id::cudaMemGetInfo>(hook_id::cudaMemGetInfo, &free_bytes,
                                                      &total_bytes) == cudaSuccess
                 : driver_mem_info(&free_bytes, &total_bytes);
  if (known) t.set_device_total(device, total_bytes);
}

cudaError_t refuse_allocation(call_site at, int device, std::uint64_t bytes) {
  const tracker& t = core();
  return refuse(refusal{refusal_kind::device_limit, at.name, device, bytes, !at.runtime,
                        t.limit(device), t.used(device)});
}

void virtual_mem_info(int device, size_t* free_bytes, size_t* total_bytes) {
  tracker& t = core();
  t.set_device_total(device, *total_bytes);
  // Chunks the pool maps but the application does not hold are free to it.
  *free_bytes = std::min<size_t>(*total_bytes, *free_bytes + pool_cached_bytes(device));
  const tracker::memory_info v = t.virtual_info(device, {*free_bytes, *total_bytes});
  *free_bytes = v.free_bytes;
  *total_bytes = v.total_bytes;
}

cudaError_t handle(hook_tag<hook_id::cudaMalloc>, hook_id id, void** devPtr,
                   size_t size) {
  if (devPtr == nullptr) return call_real<hook_id::cudaMalloc>(id, devPtr, size);
  return tracked_alloc(site_of(id), current_device(), devPtr, size, alloc_kind::device, nullptr,
                       [&] { return call_real<hook_id::cudaMalloc>(id, devPtr, size); });
}

cudaError_t handle(hook_tag<hook_id::cudaMallocAsync>, hook_id id, void** devPtr,
                   size_t size, cudaStream_t stream) {
  if (devPtr == nullptr) return call_real<hook_id::cudaMallocAsync>(id, devPtr, size, stream);
  return tracked_alloc(site_of(id), current_device(), devPtr, size, alloc_kind::async, stream,
                       [&] { return call_real<hook_id::cudaMallocAsync>(id, devPtr, size, stream); });
}

cudaError_t handle(hook_tag<hook_id::cudaMallocFromPoolAsync>, hook_id id, void** ptr,
                   size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  auto forward = [&] {
    return call_real<hook_id::cudaMallocFromPoolAsync>(id, ptr, size, pool, stream);
  };
  // A null pool is CUDA's cudaErrorInvalidValue (a real runtime 13.0 says so), not a
  // request for the pool mode's arena: CUDA answers it.
  if (ptr == nullptr || pool == nullptr) return forward();
  return tracked_alloc(site_of(id), current_device(), ptr, size, alloc_kind::async, stream,
                       forward);
}

cudaError_t handle(hook_tag<hook_id::cudaMallocPitch>, hook_id id, void** devPtr,
                   size_t* pitch, size_t width, size_t height) {
  auto forward = [&] {
    return call_real<hook_id::cudaMallocPitch>(id, devPtr, pitch, width, height);
  };
  if (devPtr == nullptr || pitch == nullptr || (height != 0 && width > SIZE_MAX / height)) {
    return forward();
  }
  return tracked_pitch_alloc(site_of(id), current_device(), devPtr, pitch, width, height,
                             forward, [&] {
                               call_real<hook_id::cudaFree>(hook_id::cudaFree, *devPtr);
                             });
}

cudaError_t handle(hook_tag<hook_id::cudaMallocManaged>, hook_id id, void** devPtr,
                   size_t size, unsigned int flags) {
  if (devPtr == nullptr) return call_real<hook_id::cudaMallocManaged>(id, devPtr, size, flags);
  return tracked_alloc(site_of(id), current_device(), devPtr, size, alloc_kind::managed,
                       nullptr, [&] {
                         return call_real<hook_id::cudaMallocManaged>(id, devPtr, size, flags);
                       });
}

cudaError_t handle(hook_tag<hook_id::cudaFree>, hook_id id, void* devPtr) {
  return tracked_free(site_of(id), devPtr, false, nullptr,
                      [&] { return call_real<hook_id::cudaFree>(id, devPtr); });
}

cudaError_t handle(hook_tag<hook_id::cudaFreeAsync>, hook_id id, void* devPtr,
                   cudaStream_t stream) {
  return tracked_free(site_of(id), devPtr, true, stream,
                      [&] { return call_real<hook_id::cudaFreeAsync>(id, devPtr, stream); });
}

cudaError_t handle(hook_tag<hook_id::cudaMemGetInfo>, hook_id id, size_t* free_bytes,
                   size_t* total_bytes) {
  const cudaError_t rc = call_real<hook_id::cudaMemGetInfo>(id, free_bytes, total_bytes);
  if (rc != cudaSuccess || free_bytes == nullptr || total_bytes == nullptr) return rc;
  virtual_mem_info(current_device(), free_bytes, total_bytes);
  return rc;
}

}  // namespace oversub::interpose
