// simgpu's libcudart.so.13: allocation. Device, stream-ordered (pools), pinned
// host, registered host and managed memory, memory info and pointer attributes,
// each forwarded to the matching driver call so that capacity, fault injection
// and residency are enforced in one place: simgpu's driver.
#include <cstring>

#include "runtime_state.h"

using simgpu::rt::ctx;
using simgpu::rt::ctx_pt;
using simgpu::rt::per_thread_stream;

namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

static_assert(static_cast<int>(cudaMemLocationTypeDevice) == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(static_cast<int>(cudaMemLocationTypeHost) == CU_MEM_LOCATION_TYPE_HOST);
static_assert(static_cast<int>(cudaMemAdviseSetPreferredLocation) ==
              CU_MEM_ADVISE_SET_PREFERRED_LOCATION);
static_assert(static_cast<int>(cudaMemRangeAttributeLastPrefetchLocationId) ==
              CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID);
static_assert(sizeof(cudaMemRangeAttribute) == sizeof(CUmem_range_attribute));
static_assert(cudaCpuDeviceId == CU_DEVICE_CPU && cudaInvalidDeviceId == CU_DEVICE_INVALID);

CUmemLocation location(cudaMemLocation l) {
  CUmemLocation out{};
  out.type = static_cast<CUmemLocationType>(l.type);
  out.id = l.id;
  return out;
}

// Pitch of cudaMallocPitch rows, bytes: the texture pitch alignment of current GPUs.
constexpr size_t kPitchAlignmentBytes = 512;

cudaError_t malloc_async(simgpu::rt::api_call& api, void** ptr, size_t size, cudaStream_t s) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  CUdeviceptr p = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuMemAllocAsync, &p, size, s);
  if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
  return simgpu::rt::to_cuda_error(r);
}

cudaError_t malloc_from_pool(simgpu::rt::api_call& api, void** ptr, size_t size, cudaMemPool_t pool,
                             cudaStream_t s) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  CUdeviceptr p = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuMemAllocFromPoolAsync, &p, size, pool, s);
  if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
  return simgpu::rt::to_cuda_error(r);
}

}  // namespace

extern "C" {

// ---- Device memory -----------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  SIMGPU_RT_CALL(ctx, cudaMalloc_v3020, devPtr, size);
  if (devPtr == nullptr) return api.finish(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0) return api.finish(cudaSuccess);  // as CUDA: success, null pointer
  CUdeviceptr p = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuMemAlloc, &p, size);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(p);
  return api.finish(r);
}

SIMGPU_EXPORT cudaError_t cudaFree(void* devPtr) {
  SIMGPU_RT_CALL(ctx, cudaFree_v3020, devPtr);
  if (devPtr == nullptr) return api.finish(cudaSuccess);  // cudaFree(0) only initialises
  return api.finish(SIMGPU_CU(api.drv(), cuMemFree, dptr(devPtr)));
}

SIMGPU_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width,
                                          size_t height) {
  SIMGPU_RT_CALL(ctx, cudaMallocPitch_v3020, devPtr, pitch, width, height);
  if (devPtr == nullptr || pitch == nullptr) return api.finish(cudaErrorInvalidValue);
  *devPtr = nullptr;
  *pitch = (width + kPitchAlignmentBytes - 1) / kPitchAlignmentBytes * kPitchAlignmentBytes;
  if (width == 0 || height == 0) return api.finish(cudaSuccess);
  CUdeviceptr p = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuMemAlloc, &p, *pitch * height);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(p);
  return api.finish(r);
}

SIMGPU_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  SIMGPU_RT_CALL(ctx, cudaMemGetInfo_v3020, free, total);
  return api.finish(SIMGPU_CU(api.drv(), cuMemGetInfo, free, total));
}

// ---- Stream-ordered allocation -------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  SIMGPU_RT_CALL(ctx, cudaMallocAsync_v11020, devPtr, size, hStream);
  return api.finish(malloc_async(api, devPtr, size, hStream));
}

SIMGPU_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  SIMGPU_RT_CALL(ctx_pt, cudaMallocAsync_ptsz_v11020, devPtr, size, hStream);
  return api.finish(malloc_async(api, devPtr, size, per_thread_stream(hStream)));
}

SIMGPU_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  SIMGPU_RT_CALL(ctx, cudaFreeAsync_v11020, devPtr, hStream);
  if (devPtr == nullptr) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemFreeAsync, dptr(devPtr), hStream));
}

SIMGPU_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  SIMGPU_RT_CALL(ctx_pt, cudaFreeAsync_ptsz_v11020, devPtr, hStream);
  if (devPtr == nullptr) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemFreeAsync, dptr(devPtr), per_thread_stream(hStream)));
}

SIMGPU_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                                  cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaMallocFromPoolAsync_v11020, ptr, size, memPool, stream);
  return api.finish(malloc_from_pool(api, ptr, size, memPool, stream));
}

SIMGPU_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size,
                                                       cudaMemPool_t memPool, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaMallocFromPoolAsync_ptsz_v11020, ptr, size, memPool, stream);
  return api.finish(malloc_from_pool(api, ptr, size, memPool, per_thread_stream(stream)));
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  SIMGPU_RT_CALL(ctx, cudaDeviceGetDefaultMemPool_v11020, memPool, device);
  CUdevice dev = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuDeviceGet, &dev, device);
  if (r != CUDA_SUCCESS) return api.finish(cudaErrorInvalidDevice);
  return api.finish(SIMGPU_CU(api.drv(), cuDeviceGetDefaultMemPool, memPool, dev));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  SIMGPU_RT_CALL(ctx, cudaMemPoolTrimTo_v11020, memPool, minBytesToKeep);
  return api.finish(SIMGPU_CU(api.drv(), cuMemPoolTrimTo, memPool, minBytesToKeep));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr,
                                                  void* value) {
  SIMGPU_RT_CALL(ctx, cudaMemPoolSetAttribute_v11020, memPool, attr, value);
  return api.finish(SIMGPU_CU(api.drv(), cuMemPoolSetAttribute, memPool,
                              static_cast<CUmemPool_attribute>(attr), value));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr,
                                                  void* value) {
  SIMGPU_RT_CALL(ctx, cudaMemPoolGetAttribute_v11020, memPool, attr, value);
  return api.finish(SIMGPU_CU(api.drv(), cuMemPoolGetAttribute, memPool,
                              static_cast<CUmemPool_attribute>(attr), value));
}

// ---- Host memory ---------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  SIMGPU_RT_CALL(ctx, cudaMallocHost_v3020, ptr, size);
  if (ptr == nullptr) return api.finish(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemAllocHost, ptr, size));
}

SIMGPU_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaHostAlloc_v3020, pHost, size, flags);
  if (pHost == nullptr) return api.finish(cudaErrorInvalidValue);
  *pHost = nullptr;
  if (size == 0) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemHostAlloc, pHost, size, flags));
}

SIMGPU_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  SIMGPU_RT_CALL(ctx, cudaFreeHost_v3020, ptr);
  if (ptr == nullptr) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemFreeHost, ptr));
}

SIMGPU_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaHostRegister_v4000, ptr, size, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuMemHostRegister, ptr, size, flags));
}

SIMGPU_EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  SIMGPU_RT_CALL(ctx, cudaHostUnregister_v4000, ptr);
  return api.finish(SIMGPU_CU(api.drv(), cuMemHostUnregister, ptr));
}

SIMGPU_EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost,
                                                   unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaHostGetDevicePointer_v3020, pDevice, pHost, flags);
  if (pDevice == nullptr) return api.finish(cudaErrorInvalidValue);
  CUdeviceptr p = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuMemHostGetDevicePointer, &p, pHost, flags);
  if (r == CUDA_SUCCESS) *pDevice = reinterpret_cast<void*>(p);
  return api.finish(r);
}

// ---- Managed memory ------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaMallocManaged_v6000, devPtr, size, flags);
  if (devPtr == nullptr) return api.finish(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0) return api.finish(cudaSuccess);
  CUdeviceptr p = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuMemAllocManaged, &p, size, flags);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(p);
  return api.finish(r);
}

SIMGPU_EXPORT cudaError_t cudaMemAdvise(const void* devPtr, size_t count, cudaMemoryAdvise advice,
                                        cudaMemLocation location) {
  SIMGPU_RT_CALL(ctx, cudaMemAdvise_v12020, devPtr, count, advice, location);
  return api.finish(SIMGPU_CU(api.drv(), cuMemAdvise, dptr(devPtr), count,
                              static_cast<CUmem_advise>(advice), ::location(location)));
}

SIMGPU_EXPORT cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count,
                                               cudaMemLocation location, unsigned int flags,
                                               cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaMemPrefetchAsync_v12020, devPtr, count, location, flags, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuMemPrefetchAsync, dptr(devPtr), count,
                              ::location(location), flags, stream));
}

SIMGPU_EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count,
                                                    cudaMemLocation location, unsigned int flags,
                                                    cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemPrefetchAsync_ptsz_v12020, devPtr, count, location, flags, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuMemPrefetchAsync, dptr(devPtr), count,
                              ::location(location), flags, per_thread_stream(stream)));
}

// Range attributes: the driver answers from what cuMemAdvise and cuMemPrefetchAsync
// recorded (Note [Range attributes] in tests/simgpu/driver/managed.h in the driver's
// managed.h); the runtime's enum, device ids (cudaCpuDeviceId, cudaInvalidDeviceId) and
// location types are the driver's.
SIMGPU_EXPORT cudaError_t cudaMemRangeGetAttribute(void* data, size_t dataSize,
                                                   cudaMemRangeAttribute attribute,
                                                   const void* devPtr, size_t count) {
  SIMGPU_RT_CALL(ctx, cudaMemRangeGetAttribute_v8000, data, dataSize, attribute, devPtr, count);
  return api.finish(SIMGPU_CU(api.drv(), cuMemRangeGetAttribute, data, dataSize,
                              static_cast<CUmem_range_attribute>(attribute), dptr(devPtr), count));
}

SIMGPU_EXPORT cudaError_t cudaMemRangeGetAttributes(void** data, size_t* dataSizes,
                                                    cudaMemRangeAttribute* attributes,
                                                    size_t numAttributes, const void* devPtr,
                                                    size_t count) {
  SIMGPU_RT_CALL(ctx, cudaMemRangeGetAttributes_v8000, data, dataSizes, attributes, numAttributes,
                 devPtr, count);
  return api.finish(SIMGPU_CU(api.drv(), cuMemRangeGetAttributes, data, dataSizes,
                              reinterpret_cast<CUmem_range_attribute*>(attributes), numAttributes,
                              dptr(devPtr), count));
}

// ---- Pointer attributes --------------------------------------------------------------

// Note [Unregistered pointers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Since CUDA 11 a pointer the driver does not know (plain malloc memory) is not an
// error: the type is cudaMemoryTypeUnregistered with both pointers null. simgpu's
// driver may answer such a pointer with CUDA_ERROR_INVALID_VALUE or with memory
// type 0; both read as unregistered here.
SIMGPU_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes,
                                                   const void* ptr) {
  SIMGPU_RT_CALL(ctx, cudaPointerGetAttributes_v4000, attributes, ptr);
  if (attributes == nullptr) return api.finish(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  attributes->type = cudaMemoryTypeUnregistered;
  attributes->device = -2;
  if (ptr == nullptr) return api.finish(cudaSuccess);
  CUpointer_attribute which[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
      CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned int type = 0;
  int ordinal = -2;
  CUdeviceptr device_pointer = 0;
  void* host_pointer = nullptr;
  unsigned int managed = 0;
  void* data[] = {&type, &ordinal, &device_pointer, &host_pointer, &managed};
  CUresult r = SIMGPU_CU(api.drv(), cuPointerGetAttributes, 5u, which, data, dptr(ptr));
  if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && type == 0)) {
    return api.finish(cudaSuccess);
  }
  if (r != CUDA_SUCCESS) return api.finish(r);
  if (managed != 0) {
    attributes->type = cudaMemoryTypeManaged;
  } else if (type == CU_MEMORYTYPE_HOST) {
    attributes->type = cudaMemoryTypeHost;
  } else {
    attributes->type = cudaMemoryTypeDevice;
  }
  attributes->device = ordinal;
  attributes->devicePointer = reinterpret_cast<void*>(device_pointer);
  attributes->hostPointer = host_pointer;
  return api.finish(cudaSuccess);
}

}  // extern "C"
