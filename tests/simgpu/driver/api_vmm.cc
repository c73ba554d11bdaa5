// Driver entry points: the virtual memory management API (see Note [VMM in simgpu]
// in vmm.h).
#include "api.h"
#include "vmm.h"

using namespace simgpu;

SIMGPU_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                           CUdeviceptr addr, unsigned long long flags) {
  SIMGPU_API(context, cuMemAddressReserve, ptr, size, alignment, addr, flags);
  SIMGPU_RETURN(vmm_reserve(ptr, size, alignment, addr, flags));
}

SIMGPU_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIMGPU_API(context, cuMemAddressFree, ptr, size);
  SIMGPU_RETURN(vmm_address_free(ptr, size));
}

SIMGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags) {
  SIMGPU_API(context, cuMemCreate, handle, size, prop, flags);
  SIMGPU_RETURN(vmm_create(handle, size, prop, flags));
}

SIMGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIMGPU_API(context, cuMemRelease, handle);
  SIMGPU_RETURN(vmm_release(handle));
}

SIMGPU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  SIMGPU_API(context, cuMemMap, ptr, size, offset, handle, flags);
  SIMGPU_RETURN(vmm_map(ptr, size, offset, handle, flags));
}

SIMGPU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIMGPU_API(context, cuMemUnmap, ptr, size);
  SIMGPU_RETURN(vmm_unmap(ptr, size));
}

SIMGPU_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                      size_t count) {
  SIMGPU_API(context, cuMemSetAccess, ptr, size, desc, count);
  SIMGPU_RETURN(vmm_set_access(ptr, size, desc, count));
}

SIMGPU_EXPORT CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                      CUdeviceptr ptr) {
  SIMGPU_API(context, cuMemGetAccess, flags, location, ptr);
  SIMGPU_RETURN(vmm_get_access(flags, location, ptr));
}

SIMGPU_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                     const CUmemAllocationProp* prop,
                                                     CUmemAllocationGranularity_flags option) {
  SIMGPU_API(device, cuMemGetAllocationGranularity, granularity, prop, option);
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  SIMGPU_RETURN(vmm_granularity(granularity, prop));
}

SIMGPU_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                              CUmemGenericAllocationHandle handle) {
  SIMGPU_API(context, cuMemGetAllocationPropertiesFromHandle, prop, handle);
  SIMGPU_RETURN(vmm_properties(prop, handle));
}

SIMGPU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                   void* addr) {
  SIMGPU_API(context, cuMemRetainAllocationHandle, handle, addr);
  SIMGPU_RETURN(vmm_retain(handle, addr));
}
