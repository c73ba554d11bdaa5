// Driver entry points: device, managed, pinned and stream-ordered allocation, and
// pointer queries.
#include "address_space.h"
#include "api.h"
#include "capture.h"
#include "managed.h"
#include "memory.h"

using namespace simgpu;

namespace {

CUresult alloc_async_on(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream h,
                        bool ptds) {
  if (pool != nullptr && pool != default_pool()) return CUDA_ERROR_INVALID_VALUE;
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return mem_alloc_async(dptr, bytes, s);
}

CUresult free_async_on(CUdeviceptr p, CUstream h, bool ptds) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return mem_free_async(p, s);
}

}  // namespace

SIMGPU_EXPORT CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  SIMGPU_API(context, cuMemAlloc_v2, dptr, bytesize);
  if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) SIMGPU_RETURN(c);
  SIMGPU_RETURN(mem_alloc(dptr, bytesize, "cuMemAlloc", false));
}

SIMGPU_EXPORT CUresult cuMemAllocPitch(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                       size_t Height, unsigned int ElementSizeBytes) {
  SIMGPU_API(context, cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) SIMGPU_RETURN(c);
  size_t pitch = round_up(WidthInBytes, 512);
  CUresult r = mem_alloc(dptr, pitch * Height, "cuMemAllocPitch", false);
  if (r == CUDA_SUCCESS) *pPitch = pitch;
  SIMGPU_RETURN(r);
}

SIMGPU_EXPORT CUresult cuMemFree(CUdeviceptr dptr) {
  SIMGPU_API(context, cuMemFree_v2, dptr);
  SIMGPU_RETURN(mem_free(dptr));
}

SIMGPU_EXPORT CUresult cuMemGetInfo(size_t* free, size_t* total) {
  SIMGPU_API(context, cuMemGetInfo_v2, free, total);
  if (free == nullptr || total == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *total = dev().capacity_bytes;
  *free = dev().capacity_bytes - dev().used_bytes;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  SIMGPU_API(context, cuMemGetAddressRange_v2, pbase, psize, dptr);
  SIMGPU_RETURN(address_range(pbase, psize, dptr));
}

SIMGPU_EXPORT CUresult cuMemAllocHost(void** pp, size_t bytesize) {
  SIMGPU_API(context, cuMemAllocHost_v2, pp, bytesize);
  SIMGPU_RETURN(host_alloc(pp, bytesize, 0));
}

SIMGPU_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  SIMGPU_API(context, cuMemHostAlloc, pp, bytesize, Flags);
  SIMGPU_RETURN(host_alloc(pp, bytesize, Flags));
}

SIMGPU_EXPORT CUresult cuMemFreeHost(void* p) {
  SIMGPU_API(context, cuMemFreeHost, p);
  SIMGPU_RETURN(host_free(p));
}

SIMGPU_EXPORT CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  SIMGPU_API(context, cuMemHostRegister_v2, p, bytesize, Flags);
  SIMGPU_RETURN(host_register(p, bytesize, Flags));
}

SIMGPU_EXPORT CUresult cuMemHostUnregister(void* p) {
  SIMGPU_API(context, cuMemHostUnregister, p);
  SIMGPU_RETURN(host_unregister(p));
}

SIMGPU_EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  SIMGPU_API(context, cuMemHostGetDevicePointer_v2, pdptr, p, Flags);
  if (pdptr == nullptr || Flags != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (find_pinned(reinterpret_cast<uintptr_t>(p)) == nullptr)
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  SIMGPU_API(context, cuMemHostGetFlags, pFlags, p);
  pinned_block* b = find_pinned(reinterpret_cast<uintptr_t>(p));
  if (pFlags == nullptr || b == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pFlags = b->flags;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  SIMGPU_API(context, cuMemAllocManaged, dptr, bytesize, flags);
  if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) SIMGPU_RETURN(c);
  SIMGPU_RETURN(managed_alloc(dptr, bytesize, flags));
}

SIMGPU_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                   CUmemLocation location) {
  SIMGPU_API(context, cuMemAdvise_v2, devPtr, count, advice, location);
  SIMGPU_RETURN(managed_advise(devPtr, count, advice, location));
}

SIMGPU_EXPORT CUresult cuMemRangeGetAttribute(void* data, size_t dataSize,
                                              CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                              size_t count) {
  SIMGPU_API(context, cuMemRangeGetAttribute, data, dataSize, attribute, devPtr, count);
  SIMGPU_RETURN(managed_range_attribute(data, dataSize, attribute, devPtr, count));
}

SIMGPU_EXPORT CUresult cuMemRangeGetAttributes(void** data, size_t* dataSizes,
                                               CUmem_range_attribute* attributes,
                                               size_t numAttributes, CUdeviceptr devPtr,
                                               size_t count) {
  SIMGPU_API(context, cuMemRangeGetAttributes, data, dataSizes, attributes, numAttributes, devPtr,
             count);
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0)
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  for (size_t i = 0; i < numAttributes; ++i) {
    CUresult r = managed_range_attribute(data[i], dataSizes[i], attributes[i], devPtr, count);
    if (r != CUDA_SUCCESS) SIMGPU_RETURN(r);
  }
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  SIMGPU_API(context, cuMemAllocAsync, dptr, bytesize, hStream);
  SIMGPU_RETURN(alloc_async_on(dptr, bytesize, nullptr, hStream, false));
}
SIMGPU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  SIMGPU_API(context, cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
  SIMGPU_RETURN(alloc_async_on(dptr, bytesize, nullptr, hStream, true));
}
SIMGPU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream hStream) {
  SIMGPU_API(context, cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
  if (pool == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  SIMGPU_RETURN(alloc_async_on(dptr, bytesize, pool, hStream, false));
}
SIMGPU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream hStream) {
  SIMGPU_API(context, cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
  if (pool == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  SIMGPU_RETURN(alloc_async_on(dptr, bytesize, pool, hStream, true));
}
SIMGPU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  SIMGPU_API(context, cuMemFreeAsync, dptr, hStream);
  SIMGPU_RETURN(free_async_on(dptr, hStream, false));
}
SIMGPU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  SIMGPU_API(context, cuMemFreeAsync_ptsz, dptr, hStream);
  SIMGPU_RETURN(free_async_on(dptr, hStream, true));
}

SIMGPU_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetDefaultMemPool, pool_out, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (pool_out == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pool_out = default_pool();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetMemPool, pool, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (pool == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pool = default_pool();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  SIMGPU_API(context, cuMemPoolTrimTo, pool, minBytesToKeep);
  // Freed pool memory is returned at once (release threshold 0), so there is
  // nothing to trim.
  SIMGPU_RETURN(pool == default_pool() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SIMGPU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                             void* value) {
  SIMGPU_API(context, cuMemPoolSetAttribute, pool, attr, value);
  if (pool != default_pool() || value == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                             void* value) {
  SIMGPU_API(context, cuMemPoolGetAttribute, pool, attr, value);
  if (pool != default_pool() || value == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = 0;
      break;
    default:
      *static_cast<int*>(value) = 0;
  }
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                             CUdeviceptr ptr) {
  SIMGPU_API(context, cuPointerGetAttribute, data, attribute, ptr);
  SIMGPU_RETURN(pointer_attribute(data, attribute, ptr));
}

SIMGPU_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                              CUpointer_attribute* attributes, void** data,
                                              CUdeviceptr ptr) {
  SIMGPU_API(context, cuPointerGetAttributes, numAttributes, attributes, data, ptr);
  if (attributes == nullptr || data == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  for (unsigned i = 0; i < numAttributes; ++i) {
    // Unlike cuPointerGetAttribute, an unknown pointer is not an error here: the
    // attributes of an unregistered host pointer read as "not CUDA memory".
    CUresult r = pointer_attribute(data[i], attributes[i], ptr);
    if (r != CUDA_SUCCESS && data[i] != nullptr) {
      switch (attributes[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data[i]) = 0; break;
        case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data[i]) = nullptr; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = -2; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
          *static_cast<void**>(data[i]) = nullptr;
          break;
        default: break;
      }
    }
  }
  SIMGPU_RETURN(CUDA_SUCCESS);
}
