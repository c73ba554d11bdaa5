// The virtual memory management API: reservations, physical handles (memfd),
// mappings and access.
//
// Note [VMM in simgpu]
// ~~~~~~~~~~~~~~~~~~~~
// cuMemCreate makes a memfd of the handle's size; a device-located handle counts
// against capacity, a host-located (CU_MEM_LOCATION_TYPE_HOST/HOST_NUMA) one does
// not. cuMemMap maps the memfd MAP_SHARED|MAP_FIXED into a reservation, PROT_NONE:
// it is inaccessible to kernels until cuMemSetAccess and to host code always.
// cuMemUnmap puts the anonymous PROT_NONE reservation back; because the bytes live
// in the memfd, mapping the handle again (at the same or another address) shows the
// same data. A kernel reading a host-located mapping pays for its bytes at the host
// link rate. Unmapping or freeing a range that device work not yet known complete
// still uses is reported by the race detector (strict residency).
#ifndef SIMGPU_DRIVER_VMM_H
#define SIMGPU_DRIVER_VMM_H

#include <cuda.h>

namespace simgpu {

constexpr size_t kVmmGranularityBytes = 2 * 1024 * 1024;

CUresult vmm_reserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                     unsigned long long flags);
CUresult vmm_address_free(CUdeviceptr ptr, size_t size);
CUresult vmm_create(CUmemGenericAllocationHandle* handle, size_t size,
                    const CUmemAllocationProp* prop, unsigned long long flags);
CUresult vmm_release(CUmemGenericAllocationHandle handle);
CUresult vmm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                 unsigned long long flags);
CUresult vmm_unmap(CUdeviceptr ptr, size_t size);
CUresult vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);
CUresult vmm_get_access(unsigned long long* flags, const CUmemLocation* loc, CUdeviceptr ptr);
CUresult vmm_granularity(size_t* granularity, const CUmemAllocationProp* prop);
CUresult vmm_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle h);
CUresult vmm_retain(CUmemGenericAllocationHandle* h, void* addr);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_VMM_H
