// Device allocations (cuMemAlloc family, stream-ordered allocations, the default
// pool), pinned host memory and pointer queries.
//
// Note [Capacity]
// ~~~~~~~~~~~~~~~
// cuMemAlloc rounds a request up to 512 bytes and aligns it to 256 (each allocation
// in fact starts on its own page, Note [Device VA is never reused] in
// tests/simgpu/driver/address_space.h). The capacity (SIMGPU_MEMORY, default the model's
// memory) counts device allocations, device- located VMM handles and device-resident
// managed pages; past it, allocation fails with CUDA_ERROR_OUT_OF_MEMORY. cuMemGetInfo
// answers free = capacity - used.
#ifndef SIMGPU_DRIVER_MEMORY_H
#define SIMGPU_DRIVER_MEMORY_H

#include <cuda.h>

#include "clock.h"

namespace simgpu {

CUresult mem_alloc(CUdeviceptr* dptr, size_t bytes, const char* origin, bool from_pool);
// Frees a device or managed allocation; synchronises the device first (as CUDA).
CUresult mem_free(CUdeviceptr p);
// Stream-ordered free: an operation on s that writes (ends the life of) the block.
CUresult mem_free_async(CUdeviceptr p, stream_obj* s);
CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytes, stream_obj* s);
CUmemoryPool default_pool();

CUresult host_alloc(void** pp, size_t bytes, unsigned flags);
CUresult host_free(void* p);
CUresult host_register(void* p, size_t bytes, unsigned flags);
CUresult host_unregister(void* p);

CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr p);
CUresult pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr p);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_MEMORY_H
