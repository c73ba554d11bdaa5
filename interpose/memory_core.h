// The allocation, free and memory-information paths every allocating entry point
// shares, runtime (cudaMalloc, memory_hooks.cc) and driver (cuMemAlloc_v2,
// driver_hooks.cc) alike: reserve the bytes on the device, serve them from the pool
// or the real allocator, record the allocation or give the bytes back; forget before
// a real free; rewrite the real free/total into the virtual ones.
//
// The real call comes in as a callable returning cudaError_t (a driver caller
// translates its CUresult and keeps it, driver_hooks.cc's driver_result; see Note
// [Error codes across the APIs] in core/error_codes.h), so one pointer allocated
// through one API and freed through the other meets the same tracker and the same
// pool (Note [One core for both APIs]).
//
// Note [One core for both APIs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The tracker is keyed by address, not by the entry
// point that made the allocation, and pool_free looks the pointer up there, so
// cudaFree of a cuMemAlloc_v2 pointer, or cuMemFree_v2 of a cudaMalloc one, gives
// the pool its block back. A pointer the tracker does not know (another context's,
// another device's, made before oversub was loaded) goes to the real free of the
// entry point that was called, and CUDA's answer is returned.
#ifndef OVERSUB_INTERPOSE_MEMORY_CORE_H
#define OVERSUB_INTERPOSE_MEMORY_CORE_H

#include <algorithm>
#include <cstdint>

#include "common/allocation_map.h"
#include "common/log.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "interpose/hook_table.h"
#include "interpose/pool_hooks.h"
#include "interpose/profile_hooks.h"
#include "interpose/real.h"

namespace oversub::interpose {

// Reads the device's total memory into the tracker once (for a fractional limit):
// through the runtime for a runtime caller, the driver for a driver one (a program
// that only uses the driver may have no runtime loaded).
void resolve_limit(call_site at, int device);
// A refusal against the virtual capacity (OVERSUB_DEVICE_LIMIT in track and pool
// modes), with the tracker's figures: see Note [One refusal message] in
// core/refusal.h. Returns cudaErrorMemoryAllocation.
cudaError_t refuse_allocation(call_site at, int device, std::uint64_t bytes);

// What the tracker records as an allocation's stream: the per-thread stream for a
// twin's null stream.
inline void* stream_label(call_site at, cudaStream_t stream) {
  if (stream == nullptr && at.per_thread) return cudaStreamPerThread;
  return stream;
}

// Reserve, allocate (the pool, or real_call), then record or give back.
template <typename RealCall>
cudaError_t tracked_alloc(call_site at, int device, void** out, std::uint64_t bytes,
                          alloc_kind kind, cudaStream_t stream, RealCall real_call) {
  tracker& t = core();
  const bool counted = tracker::counts_against_limit(kind);
  if (counted) {
    resolve_limit(at, device);
    if (!t.reserve(device, bytes)) return refuse_allocation(at, device, bytes);
  }
  const bool pooled = kind != alloc_kind::managed && bytes != 0 && pool_mode();
  const cudaError_t rc = pooled ? pool_serve(at, device, out, bytes, stream) : real_call();
  if (rc != cudaSuccess || *out == nullptr) {
    if (counted) t.release(device, bytes);
    return rc;
  }
  t.record(allocation{reinterpret_cast<std::uintptr_t>(*out), bytes, kind,
                      stream_label(at, stream), device});
  profile_alloc(*out, bytes);
  return rc;
}

// Forget (or give back to the pool), else forward to real_free.
template <typename RealFree>
cudaError_t tracked_free(call_site at, void* ptr, bool async, cudaStream_t stream,
                         RealFree real_free) {
  profile_free(ptr);
  switch (pool_free(at, ptr, stream, async)) {
    case pool_free_result::freed: return cudaSuccess;
    case pool_free_result::forgotten: return real_free();
    case pool_free_result::not_tracked: break;
  }
  if (ptr != nullptr && !core().forget(reinterpret_cast<std::uintptr_t>(ptr))) {
    stats::global().untracked_frees.count();
    log::debug("{}({}) of a pointer oversub does not track: forwarded", at.name, ptr);
  }
  return real_free();
}

// A pitched allocation (cudaMallocPitch, cuMemAllocPitch_v2). In pool mode the pool
// picks the pitch, so the whole size is known up front; otherwise width * height is
// reserved first and settled to pitch * height after the real call, refusing (and
// freeing through real_free_new) if the padding passes the limit.
template <typename RealCall, typename RealFreeNew>
cudaError_t tracked_pitch_alloc(call_site at, int device, void** out, size_t* pitch,
                                size_t width, size_t height, RealCall real_call,
                                RealFreeNew real_free_new) {
  if (pool_mode() && width != 0 && height != 0) {
    const size_t row = pool_pitch(width);
    if (row != 0 && height <= SIZE_MAX / row) {
      const cudaError_t rc = tracked_alloc(at, device, out, std::uint64_t{row} * height,
                                           alloc_kind::pitched, nullptr, real_call);
      if (rc == cudaSuccess) *pitch = row;
      return rc;
    }
  }
  tracker& t = core();
  const std::uint64_t estimate = std::uint64_t{width} * height;
  resolve_limit(at, device);
  if (!t.reserve(device, estimate)) return refuse_allocation(at, device, estimate);
  const cudaError_t rc = real_call();
  if (rc != cudaSuccess || *out == nullptr) {
    t.release(device, estimate);
    return rc;
  }
  const std::uint64_t actual = std::uint64_t{*pitch} * height;
  if (actual > estimate && !t.reserve(device, actual - estimate)) {
    real_free_new();
    *out = nullptr;
    t.release(device, estimate);
    return refuse_allocation(at, device, actual);
  }
  if (actual < estimate) t.release(device, estimate - actual);
  t.record(allocation{reinterpret_cast<std::uintptr_t>(*out), actual, alloc_kind::pitched,
                      nullptr, device});
  profile_alloc(*out, actual);
  return rc;
}

// The real free/total (already filled by the caller's real call) rewritten into the
// virtual ones for device.
void virtual_mem_info(int device, size_t* free_bytes, size_t* total_bytes);

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_MEMORY_CORE_H
