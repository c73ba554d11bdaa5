// Track-mode handlers of the allocation, free and memory-information hooks, and
// the pool-mode variant of each (OVERSUB_MODE=pool: the pool replaces the real
// allocator behind the same reserve/record steps, see pool_hooks.h).
//
// Each turns the CUDA call into calls on the core (common/tracker.h) with plain
// types: reserve the bytes on the current device, call the real allocator, record
// the allocation or give the bytes back; forget before a real free; rewrite the
// real cudaMemGetInfo answer into the virtual one. A pointer the core does not
// know is forwarded untouched and CUDA's answer returned.
//
// Note [Refusing an allocation]: a refused allocation returns
// cudaErrorMemoryAllocation without calling CUDA, so nothing is allocated and the
// runtime's last-error slot is not set (cudaGetLastError() after it returns
// cudaSuccess). Frameworks read the returned code, and PyTorch clears the slot
// after an out-of-memory anyway; faking the slot would need a second, failing
// real allocation.
#include <algorithm>
#include <cstdint>

#include "common/log.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "interpose/handlers.h"
#include "interpose/pool_hooks.h"

namespace oversub::interpose {

namespace {

std::atomic<bool> g_refusal_reported{false};

void resolve_limit(int device) {
  tracker& t = core();
  if (!t.needs_device_total(device)) return;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (call_real<hook_id::cudaMemGetInfo>(hook_id::cudaMemGetInfo, &free_bytes,
                                         &total_bytes) == cudaSuccess) {
    t.set_device_total(device, total_bytes);
  }
}

cudaError_t refuse(hook_id id, int device, std::uint64_t bytes) {
  const tracker& t = core();
  const bool first = !g_refusal_reported.exchange(true, std::memory_order_relaxed);
  log::emit(first ? log::level::warn : log::level::info,
            "{} of {} refused on device {}: {} of its {} virtual capacity in use "
            "(OVERSUB_DEVICE_LIMIT); returning cudaErrorMemoryAllocation. Raise "
            "OVERSUB_DEVICE_LIMIT or lower the job's footprint.",
            hook_names[index(id)], format_bytes(bytes), device, format_bytes(t.used(device)),
            format_bytes(t.limit(device)));
  return cudaErrorMemoryAllocation;
}

cudaStream_t stream_of() { return nullptr; }
cudaStream_t stream_of(cudaStream_t stream) { return stream; }

void* stream_label(hook_id id, cudaStream_t stream) {
  if (stream == nullptr && hook_per_thread[index(id)]) return cudaStreamPerThread;
  return stream;
}

// Reserve, allocate through real_call, then record or give back.
template <typename RealCall>
cudaError_t tracked_alloc(hook_id id, void** out, std::uint64_t bytes, alloc_kind kind,
                          void* stream, RealCall real_call) {
  tracker& t = core();
  const int device = current_device();
  const bool counted = tracker::counts_against_limit(kind);
  if (counted) {
    resolve_limit(device);
    if (!t.reserve(device, bytes)) return refuse(id, device, bytes);
  }
  const bool pooled = kind != alloc_kind::managed && bytes != 0 && pool_mode();
  const cudaError_t rc = pooled ? pool_serve(id, device, out, bytes, static_cast<cudaStream_t>(stream))
                                : real_call();
  if (rc != cudaSuccess || *out == nullptr) {
    if (counted) t.release(device, bytes);
    return rc;
  }
  t.record(allocation{reinterpret_cast<std::uintptr_t>(*out), bytes, kind, stream, device});
  profile_alloc(*out, bytes);
  return rc;
}

template <hook_id Base, typename... A>
cudaError_t tracked_free(hook_id id, void* ptr, A... args) {
  profile_free(ptr);
  cudaError_t pooled_rc = cudaSuccess;
  if (pool_free(id, ptr, stream_of(args...), sizeof...(A) != 0, pooled_rc)) return pooled_rc;
  if (ptr != nullptr && !core().forget(reinterpret_cast<std::uintptr_t>(ptr))) {
    stats::global().untracked_frees.count();
    log::debug("{}({}) of a pointer oversub does not track: forwarded", hook_names[index(id)],
               ptr);
  }
  return call_real<Base>(id, ptr, args...);
}

}  // namespace

cudaError_t handle(hook_tag<hook_id::cudaMalloc>, hook_id id, void** devPtr,
                   size_t size) noexcept {
  if (devPtr == nullptr) return call_real<hook_id::cudaMalloc>(id, devPtr, size);
  return tracked_alloc(id, devPtr, size, alloc_kind::device, nullptr, [&] {
    return call_real<hook_id::cudaMalloc>(id, devPtr, size);
  });
}

cudaError_t handle(hook_tag<hook_id::cudaMallocAsync>, hook_id id, void** devPtr,
                   size_t size, cudaStream_t stream) noexcept {
  if (devPtr == nullptr) return call_real<hook_id::cudaMallocAsync>(id, devPtr, size, stream);
  return tracked_alloc(id, devPtr, size, alloc_kind::async, stream_label(id, stream), [&] {
    return call_real<hook_id::cudaMallocAsync>(id, devPtr, size, stream);
  });
}

cudaError_t handle(hook_tag<hook_id::cudaMallocFromPoolAsync>, hook_id id, void** ptr,
                   size_t size, cudaMemPool_t pool, cudaStream_t stream) noexcept {
  if (ptr == nullptr) {
    return call_real<hook_id::cudaMallocFromPoolAsync>(id, ptr, size, pool, stream);
  }
  return tracked_alloc(id, ptr, size, alloc_kind::async, stream_label(id, stream), [&] {
    return call_real<hook_id::cudaMallocFromPoolAsync>(id, ptr, size, pool, stream);
  });
}

// The pitch is known only after the call: reserve width * height first, then
// settle to pitch * height, refusing (and freeing) if the padding passes the limit.
cudaError_t handle(hook_tag<hook_id::cudaMallocPitch>, hook_id id, void** devPtr,
                   size_t* pitch, size_t width, size_t height) noexcept {
  auto forward = [&] {
    return call_real<hook_id::cudaMallocPitch>(id, devPtr, pitch, width, height);
  };
  if (devPtr == nullptr || pitch == nullptr || (height != 0 && width > SIZE_MAX / height)) {
    return forward();
  }
  if (pool_mode() && width != 0 && height != 0) {
    // The pool picks the pitch itself: the whole pitched size is known up front.
    const size_t row = pool_pitch(width);
    if (row != 0 && height <= SIZE_MAX / row) {
      const cudaError_t rc = tracked_alloc(id, devPtr, std::uint64_t{row} * height,
                                           alloc_kind::pitched, nullptr, forward);
      if (rc == cudaSuccess) *pitch = row;
      return rc;
    }
  }
  tracker& t = core();
  const int device = current_device();
  const std::uint64_t estimate = std::uint64_t{width} * height;
  resolve_limit(device);
  if (!t.reserve(device, estimate)) return refuse(id, device, estimate);
  const cudaError_t rc = forward();
  if (rc != cudaSuccess || *devPtr == nullptr) {
    t.release(device, estimate);
    return rc;
  }
  const std::uint64_t actual = std::uint64_t{*pitch} * height;
  if (actual > estimate && !t.reserve(device, actual - estimate)) {
    call_real<hook_id::cudaFree>(hook_id::cudaFree, *devPtr);
    *devPtr = nullptr;
    t.release(device, estimate);
    return refuse(id, device, actual);
  }
  if (actual < estimate) t.release(device, estimate - actual);
  t.record(allocation{reinterpret_cast<std::uintptr_t>(*devPtr), actual, alloc_kind::pitched,
                      nullptr, device});
  profile_alloc(*devPtr, actual);
  return rc;
}

cudaError_t handle(hook_tag<hook_id::cudaMallocManaged>, hook_id id, void** devPtr,
                   size_t size, unsigned int flags) noexcept {
  if (devPtr == nullptr) return call_real<hook_id::cudaMallocManaged>(id, devPtr, size, flags);
  return tracked_alloc(id, devPtr, size, alloc_kind::managed, nullptr, [&] {
    return call_real<hook_id::cudaMallocManaged>(id, devPtr, size, flags);
  });
}

cudaError_t handle(hook_tag<hook_id::cudaFree>, hook_id id, void* devPtr) noexcept {
  return tracked_free<hook_id::cudaFree>(id, devPtr);
}

cudaError_t handle(hook_tag<hook_id::cudaFreeAsync>, hook_id id, void* devPtr,
                   cudaStream_t stream) noexcept {
  return tracked_free<hook_id::cudaFreeAsync>(id, devPtr, stream);
}

cudaError_t handle(hook_tag<hook_id::cudaMemGetInfo>, hook_id id, size_t* free_bytes,
                   size_t* total_bytes) noexcept {
  const cudaError_t rc = call_real<hook_id::cudaMemGetInfo>(id, free_bytes, total_bytes);
  if (rc != cudaSuccess || free_bytes == nullptr || total_bytes == nullptr) return rc;
  tracker& t = core();
  const int device = current_device();
  t.set_device_total(device, *total_bytes);
  // Chunks the pool maps but the application does not hold are free to it.
  *free_bytes = std::min<size_t>(*total_bytes, *free_bytes + pool_cached_bytes(device));
  const tracker::memory_info v = t.virtual_info(device, {*free_bytes, *total_bytes});
  *free_bytes = v.free_bytes;
  *total_bytes = v.total_bytes;
  return rc;
}

}  // namespace oversub::interpose
