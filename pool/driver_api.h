// The CUDA driver functions pool/ calls, reached without linking libcuda.
//
// liboversub.so must have no NEEDED entry for libcuda (ARCHITECTURE.md), so the
// driver is opened by soname at first use — dlopen("libcuda.so.1", RTLD_NOLOAD)
// first (the runtime has normally loaded it already), then a plain dlopen — and each
// function is asked of cuGetProcAddress_v2 (the CUDA 13 ABI) by base name and CUDA
// version 13000, the way cudart itself finds them. The application's
// cuGetProcAddress is hooked (interpose/); the pool's own calls keep these real
// pointers.
//
// OVERSUB_DRIVER_FUNCTIONS is the one list: adding a function is one line.
#ifndef OVERSUB_POOL_DRIVER_API_H
#define OVERSUB_POOL_DRIVER_API_H

#include <cuda.h>

namespace oversub::pool {

#define OVERSUB_DRIVER_FUNCTIONS(X) \
  X(cuInit)                         \
  X(cuCtxGetCurrent)                \
  X(cuCtxSetCurrent)                \
  X(cuCtxSynchronize)               \
  X(cuDeviceGet)                    \
  X(cuMemGetInfo)                   \
  X(cuMemGetAllocationGranularity)  \
  X(cuMemAddressReserve)            \
  X(cuMemAddressFree)               \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemMap)                       \
  X(cuMemUnmap)                     \
  X(cuMemSetAccess)                 \
  X(cuMemHostAlloc)                 \
  X(cuMemFreeHost)                  \
  X(cuEventCreate)                  \
  X(cuEventDestroy)                 \
  X(cuEventRecord)                  \
  X(cuEventQuery)                   \
  X(cuEventSynchronize)             \
  X(cuEventElapsedTime)             \
  X(cuStreamIsCapturing)            \
  X(cuStreamGetCaptureInfo)         \
  X(cuStreamSynchronize)            \
  X(cuStreamCreate)                 \
  X(cuStreamDestroy)                \
  X(cuStreamWaitEvent)              \
  X(cuMemcpyAsync)                  \
  X(cuMemsetD8Async)                \
  X(cuMemAllocManaged)              \
  X(cuMemFree)                      \
  X(cuMemPrefetchAsync)             \
  X(cuMemAdvise)                    \
  X(cuDeviceGetAttribute)

// Functions a driver may lack (newer than the rest): null where it does, and nothing
// else changes; each caller has its own way without them.
#define OVERSUB_DRIVER_OPTIONAL_FUNCTIONS(X) \
  X(cuMemDiscardBatchAsync) /* CUDA 13.0 */

// Typed pointers, one per function of the lists (null when the driver lacks it).
struct driver_table {
#define OVERSUB_DRIVER_FIELD(name) decltype(&::name) name = nullptr;
  OVERSUB_DRIVER_FUNCTIONS(OVERSUB_DRIVER_FIELD)
  OVERSUB_DRIVER_OPTIONAL_FUNCTIONS(OVERSUB_DRIVER_FIELD)
#undef OVERSUB_DRIVER_FIELD
  bool complete = false;  // every function found and cuInit succeeded
};

// The process's driver table, loaded on first call (thread-safe, never destroyed).
// When libcuda.so.1 cannot be opened, or a function is missing, complete is false
// and the pool is not used (one error is logged).
const driver_table& driver();

// The properties of a VMM allocation (cuMemCreate) of pinned memory at a location:
// CU_MEM_LOCATION_TYPE_DEVICE with the device ordinal, or _HOST (id 0).
inline CUmemAllocationProp vmm_prop(CUmemLocationType type, int id) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  return prop;
}

// True when stream is capturing a graph; false when it is not, or its state cannot be
// read (a destroyed stream). stream_fences::capturing answers true in that case.
inline bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return driver().cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// True when r is CUDA_SUCCESS; otherwise logs (at debug) what failed.
bool driver_ok(CUresult r, const char* what);

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_DRIVER_API_H
