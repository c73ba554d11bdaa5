// The pool-mode paths of the memory hooks (OVERSUB_MODE=pool and every mode above
// it): device allocations come from pool/ instead of the real allocator, frees go
// back to it, cudaMemGetInfo counts the pool's unused chunks as free, and every
// launch, copy, memset and graph launch tells the pool which stream got work.
//
// The track-mode handlers keep their shape (reserve against the limit, allocate,
// record): in pool mode "allocate" is pool_serve instead of the real allocator.
// pool_free returns true when it handled the free (its CUDA result in rc); false
// sends the caller down the track-mode path.
#ifndef OVERSUB_INTERPOSE_POOL_HOOKS_H
#define OVERSUB_INTERPOSE_POOL_HOOKS_H

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "common/allocation_map.h"
#include "interpose/hook_table.h"

namespace oversub::interpose {

// 1: pool mode on; 0: off; -1: not decided yet.
extern std::atomic<int> g_pool_on;
bool decide_pool_mode();
inline bool pool_mode() {
  const int on = g_pool_on.load(std::memory_order_acquire);
  return on < 0 ? decide_pool_mode() : on == 1;
}

// Serves size bytes on device for stream from the pool (bytes already reserved
// against the limit). cudaErrorMemoryAllocation (logged) when the pool has no room.
cudaError_t pool_serve(call_site at, int device, void** out, size_t size,
                       cudaStream_t stream);
// The row pitch pool mode gives cudaMallocPitch for width bytes (0 on overflow).
size_t pool_pitch(size_t width);

enum class pool_free_result : std::uint8_t {
  not_tracked,  // not a live allocation of ours: the caller forwards it to CUDA
  freed,        // the pool took it back (asynchronously on stream when async)
  forgotten,    // tracked but made by the real allocator: forgotten, CUDA must free it
};
pool_free_result pool_free(call_site at, void* ptr, cudaStream_t stream, bool async);
// The unused bytes the pool holds on device (added to the real free).
std::size_t pool_cached_bytes(int device);
// The driver stream a call on stream enqueues on (the per-thread stream for a
// _ptsz/_ptds twin's null stream).
inline CUstream driver_stream(bool per_thread, cudaStream_t stream) noexcept {
  if (stream == nullptr && per_thread) return CU_STREAM_PER_THREAD;
  return reinterpret_cast<CUstream>(stream);
}
inline CUstream driver_stream(hook_id id, cudaStream_t stream) noexcept {
  return driver_stream(hook_per_thread[index(id)], stream);
}
void pool_note_work(CUstream stream);

// The stream a launch, copy, memset or graph launch enqueues on: its cudaStream_t
// argument (the last one), a launch config's stream, or none (the synchronous
// copies and memsets: the legacy stream, or the thread's for _ptds twins).
template <typename... A>
void note_stream_work(hook_id id, A... args) {
  if (!pool_mode()) return;
  cudaStream_t stream = nullptr;
  auto pick = [&](auto a) {
    using T = decltype(a);
    if constexpr (std::is_same_v<T, cudaStream_t>) {
      stream = a;
    } else if constexpr (std::is_same_v<T, const cudaLaunchConfig_t*>) {
      if (a != nullptr) stream = a->stream;
    }
  };
  (pick(args), ...);
  pool_note_work(driver_stream(id, stream));
}

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_POOL_HOOKS_H
