// simgpu's libcudart.so.13: devices and versions. Device queries go to the
// driver's attributes, so cudaGetDeviceProperties describes whatever device model
// simgpu's driver loaded (SIMGPU_DEVICE).
#include <cstring>

#include "runtime_state.h"

using simgpu::rt::ctx;
using simgpu::rt::drv;
using simgpu::rt::lib;

namespace {

struct int_field {
  int cudaDeviceProp::*field;
  CUdevice_attribute attribute;
};

#define SIMGPU_PROP(field, attr) \
  { &cudaDeviceProp::field, CU_DEVICE_ATTRIBUTE_##attr }
constexpr int_field kIntFields[] = {
    SIMGPU_PROP(regsPerBlock, MAX_REGISTERS_PER_BLOCK),
    SIMGPU_PROP(warpSize, WARP_SIZE),
    SIMGPU_PROP(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK),
    SIMGPU_PROP(major, COMPUTE_CAPABILITY_MAJOR),
    SIMGPU_PROP(minor, COMPUTE_CAPABILITY_MINOR),
    SIMGPU_PROP(multiProcessorCount, MULTIPROCESSOR_COUNT),
    SIMGPU_PROP(integrated, INTEGRATED),
    SIMGPU_PROP(canMapHostMemory, CAN_MAP_HOST_MEMORY),
    SIMGPU_PROP(concurrentKernels, CONCURRENT_KERNELS),
    SIMGPU_PROP(ECCEnabled, ECC_ENABLED),
    SIMGPU_PROP(pciBusID, PCI_BUS_ID),
    SIMGPU_PROP(pciDeviceID, PCI_DEVICE_ID),
    SIMGPU_PROP(pciDomainID, PCI_DOMAIN_ID),
    SIMGPU_PROP(tccDriver, TCC_DRIVER),
    SIMGPU_PROP(asyncEngineCount, ASYNC_ENGINE_COUNT),
    SIMGPU_PROP(unifiedAddressing, UNIFIED_ADDRESSING),
    SIMGPU_PROP(memoryBusWidth, GLOBAL_MEMORY_BUS_WIDTH),
    SIMGPU_PROP(l2CacheSize, L2_CACHE_SIZE),
    SIMGPU_PROP(persistingL2CacheMaxSize, MAX_PERSISTING_L2_CACHE_SIZE),
    SIMGPU_PROP(maxThreadsPerMultiProcessor, MAX_THREADS_PER_MULTIPROCESSOR),
    SIMGPU_PROP(streamPrioritiesSupported, STREAM_PRIORITIES_SUPPORTED),
    SIMGPU_PROP(globalL1CacheSupported, GLOBAL_L1_CACHE_SUPPORTED),
    SIMGPU_PROP(localL1CacheSupported, LOCAL_L1_CACHE_SUPPORTED),
    SIMGPU_PROP(regsPerMultiprocessor, MAX_REGISTERS_PER_MULTIPROCESSOR),
    SIMGPU_PROP(managedMemory, MANAGED_MEMORY),
    SIMGPU_PROP(isMultiGpuBoard, MULTI_GPU_BOARD),
    SIMGPU_PROP(multiGpuBoardGroupID, MULTI_GPU_BOARD_GROUP_ID),
    SIMGPU_PROP(hostNativeAtomicSupported, HOST_NATIVE_ATOMIC_SUPPORTED),
    SIMGPU_PROP(pageableMemoryAccess, PAGEABLE_MEMORY_ACCESS),
    SIMGPU_PROP(concurrentManagedAccess, CONCURRENT_MANAGED_ACCESS),
    SIMGPU_PROP(computePreemptionSupported, COMPUTE_PREEMPTION_SUPPORTED),
    SIMGPU_PROP(canUseHostPointerForRegisteredMem, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
    SIMGPU_PROP(cooperativeLaunch, COOPERATIVE_LAUNCH),
    SIMGPU_PROP(pageableMemoryAccessUsesHostPageTables,
                PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
    SIMGPU_PROP(directManagedMemAccessFromHost, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST),
    SIMGPU_PROP(maxBlocksPerMultiProcessor, MAX_BLOCKS_PER_MULTIPROCESSOR),
    SIMGPU_PROP(accessPolicyMaxWindowSize, MAX_ACCESS_POLICY_WINDOW_SIZE),
    SIMGPU_PROP(hostRegisterSupported, HOST_REGISTER_SUPPORTED),
    SIMGPU_PROP(sparseCudaArraySupported, SPARSE_CUDA_ARRAY_SUPPORTED),
    SIMGPU_PROP(hostRegisterReadOnlySupported, READ_ONLY_HOST_REGISTER_SUPPORTED),
    SIMGPU_PROP(timelineSemaphoreInteropSupported, TIMELINE_SEMAPHORE_INTEROP_SUPPORTED),
    SIMGPU_PROP(memoryPoolsSupported, MEMORY_POOLS_SUPPORTED),
    SIMGPU_PROP(gpuDirectRDMASupported, GPU_DIRECT_RDMA_SUPPORTED),
    SIMGPU_PROP(gpuDirectRDMAWritesOrdering, GPU_DIRECT_RDMA_WRITES_ORDERING),
    SIMGPU_PROP(deferredMappingCudaArraySupported, DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED),
    SIMGPU_PROP(ipcEventSupported, IPC_EVENT_SUPPORTED),
    SIMGPU_PROP(clusterLaunch, CLUSTER_LAUNCH),
    SIMGPU_PROP(unifiedFunctionPointers, UNIFIED_FUNCTION_POINTERS),
    SIMGPU_PROP(deviceNumaConfig, NUMA_CONFIG),
    SIMGPU_PROP(deviceNumaId, NUMA_ID),
    SIMGPU_PROP(mpsEnabled, MPS_ENABLED),
    SIMGPU_PROP(hostNumaId, HOST_NUMA_ID),
    SIMGPU_PROP(hostNumaMultinodeIpcSupported, HOST_NUMA_MULTINODE_IPC_SUPPORTED),
};
#undef SIMGPU_PROP

// One attribute, 0 when the driver does not know it (the field then reads 0, as
// for a device without the feature).
int attribute(const simgpu::rt::driver_table& d, CUdevice dev, CUdevice_attribute a) {
  int value = 0;
  if (SIMGPU_CU(d, cuDeviceGetAttribute, &value, a, dev) != CUDA_SUCCESS) return 0;
  return value;
}

cudaError_t fill_properties(const simgpu::rt::driver_table& d, cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  CUdevice dev = 0;
  CUresult r = SIMGPU_CU(d, cuDeviceGet, &dev, device);
  if (r != CUDA_SUCCESS) return simgpu::rt::to_cuda_error(r);
  std::memset(prop, 0, sizeof(*prop));
  r = SIMGPU_CU(d, cuDeviceGetName, prop->name, static_cast<int>(sizeof(prop->name)), dev);
  if (r != CUDA_SUCCESS) return simgpu::rt::to_cuda_error(r);
  CUuuid uuid{};
  if (SIMGPU_CU(d, cuDeviceGetUuid, &uuid, dev) == CUDA_SUCCESS) {
    static_assert(sizeof(uuid) == sizeof(prop->uuid));
    std::memcpy(&prop->uuid, &uuid, sizeof(uuid));
  }
  size_t total = 0;
  r = SIMGPU_CU(d, cuDeviceTotalMem, &total, dev);
  if (r != CUDA_SUCCESS) return simgpu::rt::to_cuda_error(r);
  prop->totalGlobalMem = total;
  for (const int_field& f : kIntFields) prop->*f.field = attribute(d, dev, f.attribute);
  auto sz = [&](CUdevice_attribute a) { return static_cast<size_t>(attribute(d, dev, a)); };
  prop->sharedMemPerBlock = sz(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->memPitch = sz(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->totalConstMem = sz(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->textureAlignment = sz(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  prop->texturePitchAlignment = sz(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT);
  prop->surfaceAlignment = sz(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT);
  prop->sharedMemPerMultiprocessor = sz(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  prop->sharedMemPerBlockOptin = sz(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  prop->reservedSharedMemPerBlock = sz(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
  prop->maxThreadsDim[0] = attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->gpuDirectRDMAFlushWritesOptions = static_cast<unsigned>(
      attribute(d, dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS));
  prop->memoryPoolSupportedHandleTypes =
      static_cast<unsigned>(attribute(d, dev, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES));
  prop->gpuPciDeviceID =
      static_cast<unsigned>(attribute(d, dev, CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID));
  prop->gpuPciSubsystemID =
      static_cast<unsigned>(attribute(d, dev, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID));
  return cudaSuccess;
}

}  // namespace

extern "C" {

SIMGPU_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (count != nullptr) *count = 0;
  SIMGPU_RT_CALL(drv, cudaGetDeviceCount_v3020, count);
  if (count == nullptr) return api.finish(cudaErrorInvalidValue);
  return api.finish(SIMGPU_CU(api.drv(), cuDeviceGetCount, count));
}

SIMGPU_EXPORT cudaError_t cudaGetDevice(int* device) {
  SIMGPU_RT_CALL(drv, cudaGetDevice_v3020, device);
  if (device == nullptr) return api.finish(cudaErrorInvalidValue);
  CUcontext current = nullptr;
  CUdevice dev = 0;
  if (SIMGPU_CU(api.drv(), cuCtxGetCurrent, &current) == CUDA_SUCCESS && current != nullptr &&
      SIMGPU_CU(api.drv(), cuCtxGetDevice, &dev) == CUDA_SUCCESS) {
    *device = static_cast<int>(dev);
  } else {
    *device = simgpu::rt::thread_device();
  }
  return api.finish(cudaSuccess);
}

SIMGPU_EXPORT cudaError_t cudaSetDevice(int device) {
  SIMGPU_RT_CALL(drv, cudaSetDevice_v3020, device);
  const simgpu::rt::driver_table& d = api.drv();
  CUcontext primary = nullptr;
  CUresult r = simgpu::rt::primary_context(device, &primary);
  if (r == CUDA_ERROR_INVALID_DEVICE || r == CUDA_ERROR_INVALID_VALUE) {
    return api.finish(cudaErrorInvalidDevice);
  }
  if (r == CUDA_SUCCESS) r = SIMGPU_CU(d, cuCtxSetCurrent, primary);
  if (r == CUDA_SUCCESS) simgpu::rt::thread_device() = device;
  return api.finish(r);
}

SIMGPU_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  SIMGPU_RT_CALL(drv, cudaGetDeviceProperties_v12000, prop, device);
  return api.finish(fill_properties(api.drv(), prop, device));
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  SIMGPU_RT_CALL(drv, cudaDeviceGetAttribute_v5000, value, attr, device);
  CUdevice dev = 0;
  CUresult r = SIMGPU_CU(api.drv(), cuDeviceGet, &dev, device);
  if (r != CUDA_SUCCESS) return api.finish(cudaErrorInvalidDevice);
  return api.finish(SIMGPU_CU(api.drv(), cuDeviceGetAttribute, value,
                              static_cast<CUdevice_attribute>(attr), dev));
}

SIMGPU_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  SIMGPU_RT_CALL0(ctx, cudaDeviceSynchronize_v3020);
  return api.finish(SIMGPU_CU(api.drv(), cuCtxSynchronize));
}

// Not stopped by a sticky error: resetting the device is how a test recovers.
SIMGPU_EXPORT cudaError_t cudaDeviceReset(void) {
  SIMGPU_RT_CALL0(lib, cudaDeviceReset_v3020);
  cudaError_t e = simgpu::rt::driver_init();
  if (e != cudaSuccess) return api.finish(e);
  const simgpu::rt::driver_table& d = api.drv();
  CUdevice dev = 0;
  CUresult r = SIMGPU_CU(d, cuDeviceGet, &dev, simgpu::rt::thread_device());
  if (r == CUDA_SUCCESS) r = SIMGPU_CU(d, cuDevicePrimaryCtxReset, dev);
  if (r != CUDA_SUCCESS) return api.finish(r);
  // The next call that needs a context retains the primary context afresh.
  simgpu::rt::forget_primary_context(simgpu::rt::thread_device());
  SIMGPU_CU(d, cuCtxSetCurrent, static_cast<CUcontext>(nullptr));
  simgpu::rt::clear_sticky_error();
  return api.finish(cudaSuccess);
}

SIMGPU_EXPORT cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  SIMGPU_RT_CALL(lib, cudaRuntimeGetVersion_v3020, runtimeVersion);
  if (runtimeVersion == nullptr) return api.finish(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return api.finish(cudaSuccess);
}

// As the real runtime: 0 and success when there is no usable driver.
SIMGPU_EXPORT cudaError_t cudaDriverGetVersion(int* driverVersion) {
  SIMGPU_RT_CALL(lib, cudaDriverGetVersion_v3020, driverVersion);
  if (driverVersion == nullptr) return api.finish(cudaErrorInvalidValue);
  *driverVersion = 0;
  if (simgpu::rt::driver_init() == cudaErrorInsufficientDriver) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuDriverGetVersion, driverVersion));
}

}  // extern "C"

// ---- Driver entry points -------------------------------------------------------

namespace {

cudaError_t entry_point(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                        unsigned long long flags, cudaDriverEntryPointQueryResult* status,
                        bool per_thread) {
  if (per_thread && flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  auto gpa = simgpu::rt::get_proc_address();
  if (gpa == nullptr) return cudaErrorInsufficientDriver;
  if (symbol == nullptr || funcPtr == nullptr) return cudaErrorInvalidValue;
  CUdriverProcAddressQueryResult s = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = gpa(symbol, funcPtr, static_cast<int>(cudaVersion), flags, &s);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(s);
  return simgpu::rt::to_cuda_error(r);
}

}  // namespace

extern "C" {

SIMGPU_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  SIMGPU_RT_CALL(drv, cudaGetDriverEntryPoint_v11030, symbol, funcPtr, flags, driverStatus);
  return api.finish(entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false));
}

SIMGPU_EXPORT cudaError_t
cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                             cudaDriverEntryPointQueryResult* driverStatus) {
  SIMGPU_RT_CALL(drv, cudaGetDriverEntryPoint_ptsz_v11030, symbol, funcPtr, flags, driverStatus);
  return api.finish(entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true));
}

SIMGPU_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  SIMGPU_RT_CALL(drv, cudaGetDriverEntryPointByVersion_v12050, symbol, funcPtr, cudaVersion, flags,
                 driverStatus);
  return api.finish(entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, false));
}

SIMGPU_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  SIMGPU_RT_CALL(drv, cudaGetDriverEntryPointByVersion_ptsz_v12050, symbol, funcPtr, cudaVersion,
                 flags, driverStatus);
  return api.finish(entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, true));
}

}  // extern "C"
