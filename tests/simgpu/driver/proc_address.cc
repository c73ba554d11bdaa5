// cuGetProcAddress: answers from one table of (base symbol name, CUDA version that
// introduced this ABI, legacy-stream export, per-thread-stream export). Every
// entry point libcuda.so.1 exports is listed here, so the runtime (which, like the
// real cudart, reaches the driver only through cuGetProcAddress) finds them all.
//
// Note [Symbol versions]
// ~~~~~~~~~~~~~~~~~~~~~~
// A query names the base symbol ("cuMemAlloc") and the CUDA version the caller was
// built for. The answer is the newest entry whose version is <= the request
// (cuMemAlloc at 3020 is cuMemAlloc_v2); a request older than every entry is
// VERSION_NOT_SUFFICIENT; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the
// _ptsz/_ptds export is chosen where one exists. Older ABIs whose signature differs
// from the one simgpu implements (cuMemAdvise before 12.2, cuStreamBeginCapture
// before 10.1) are absent, so such requests are VERSION_NOT_SUFFICIENT.
#include <cstring>

#include "api.h"

#define SIMGPU_PT(base, pt) extern "C" decltype(base) pt;
SIMGPU_PT(cuMemcpy, cuMemcpy_ptds)
SIMGPU_PT(cuMemcpyAsync, cuMemcpyAsync_ptsz)
SIMGPU_PT(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds)
SIMGPU_PT(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds)
SIMGPU_PT(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds)
SIMGPU_PT(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz)
SIMGPU_PT(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz)
SIMGPU_PT(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz)
SIMGPU_PT(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds)
SIMGPU_PT(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz)
SIMGPU_PT(cuMemsetD8_v2, cuMemsetD8_v2_ptds)
SIMGPU_PT(cuMemsetD16_v2, cuMemsetD16_v2_ptds)
SIMGPU_PT(cuMemsetD32_v2, cuMemsetD32_v2_ptds)
SIMGPU_PT(cuMemsetD8Async, cuMemsetD8Async_ptsz)
SIMGPU_PT(cuMemsetD16Async, cuMemsetD16Async_ptsz)
SIMGPU_PT(cuMemsetD32Async, cuMemsetD32Async_ptsz)
SIMGPU_PT(cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz)
SIMGPU_PT(cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz)
SIMGPU_PT(cuMemAllocAsync, cuMemAllocAsync_ptsz)
SIMGPU_PT(cuMemFreeAsync, cuMemFreeAsync_ptsz)
SIMGPU_PT(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz)
SIMGPU_PT(cuStreamSynchronize, cuStreamSynchronize_ptsz)
SIMGPU_PT(cuStreamQuery, cuStreamQuery_ptsz)
SIMGPU_PT(cuStreamWaitEvent, cuStreamWaitEvent_ptsz)
SIMGPU_PT(cuStreamGetId, cuStreamGetId_ptsz)
SIMGPU_PT(cuStreamGetFlags, cuStreamGetFlags_ptsz)
SIMGPU_PT(cuStreamGetPriority, cuStreamGetPriority_ptsz)
SIMGPU_PT(cuStreamGetCtx, cuStreamGetCtx_ptsz)
SIMGPU_PT(cuEventRecord, cuEventRecord_ptsz)
SIMGPU_PT(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz)
SIMGPU_PT(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz)
SIMGPU_PT(cuStreamEndCapture, cuStreamEndCapture_ptsz)
SIMGPU_PT(cuStreamIsCapturing, cuStreamIsCapturing_ptsz)
SIMGPU_PT(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz)
SIMGPU_PT(cuGraphLaunch, cuGraphLaunch_ptsz)
SIMGPU_PT(cuLaunchKernel, cuLaunchKernel_ptsz)
SIMGPU_PT(cuLaunchKernelEx, cuLaunchKernelEx_ptsz)
SIMGPU_PT(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz)
#undef SIMGPU_PT

// Exports whose C name cuda.h #defines to a newer ABI (see the definitions).
extern "C" CUresult simgpu_cuGetProcAddress_v1(const char*, void**, int, cuuint64_t)
    __asm__("cuGetProcAddress");
extern "C" CUresult simgpu_cuEventElapsedTime_v1(float*, CUevent, CUevent)
    __asm__("cuEventElapsedTime");
extern "C" CUresult simgpu_cuDeviceGetUuid_v1(CUuuid*, CUdevice) __asm__("cuDeviceGetUuid");

namespace simgpu {
namespace {

struct proc_entry {
  const char* name;
  int version;
  void* legacy;
  void* per_thread;  // nullptr: the same as legacy
};

#define E(name, version, fn) {name, version, reinterpret_cast<void*>(&fn), nullptr}
#define P(name, version, fn, pt) \
  {name, version, reinterpret_cast<void*>(&fn), reinterpret_cast<void*>(&pt)}

const proc_entry kTable[] = {
    // initialisation, errors, device, context
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetProcAddress", 11030, simgpu_cuGetProcAddress_v1),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceGetUuid", 9020, simgpu_cuDeviceGetUuid_v1),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxGetFlags", 7000, cuCtxGetFlags),
    E("cuCtxGetId", 12000, cuCtxGetId),
    E("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    // memory
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostRegister", 4000, cuMemHostRegister_v2),  // v1 has the same signature
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuMemAdvise", 12020, cuMemAdvise_v2),
    E("cuMemRangeGetAttribute", 8000, cuMemRangeGetAttribute),
    E("cuMemRangeGetAttributes", 8000, cuMemRangeGetAttributes),
    P("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz),
    P("cuMemDiscardBatchAsync", 13000, cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    // virtual memory management
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemGetAccess", 10020, cuMemGetAccess),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    // copies and memsets
    P("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    P("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    P("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    P("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    P("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    P("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
    P("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
    P("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    P("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
    P("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    P("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    P("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
    P("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    // streams and events
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    P("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    P("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    P("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz),
    P("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    P("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    P("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    P("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    P("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventElapsedTime", 2000, simgpu_cuEventElapsedTime_v1),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    // capture and graphs
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    P("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    E("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    // launches and functions
    P("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    E("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    E("cuFuncGetName", 12030, cuFuncGetName),
    E("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    E("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    E("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig),
    // libraries and context-independent kernels (CUDA 12+)
    E("cuLibraryLoadData", 12000, cuLibraryLoadData),
    E("cuLibraryLoadFromFile", 12000, cuLibraryLoadFromFile),
    E("cuLibraryUnload", 12000, cuLibraryUnload),
    E("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    E("cuLibraryGetKernelCount", 12040, cuLibraryGetKernelCount),
    E("cuLibraryEnumerateKernels", 12040, cuLibraryEnumerateKernels),
    E("cuKernelGetFunction", 12000, cuKernelGetFunction),
    E("cuKernelGetLibrary", 12050, cuKernelGetLibrary),
    E("cuKernelGetName", 12030, cuKernelGetName),
    E("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    E("cuKernelGetAttribute", 12000, cuKernelGetAttribute),
    E("cuKernelSetAttribute", 12000, cuKernelSetAttribute),
    E("cuKernelSetCacheConfig", 12000, cuKernelSetCacheConfig),
};
#undef E
#undef P

CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~cuuint64_t{CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM})
    return CUDA_ERROR_INVALID_VALUE;
  bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const proc_entry* best = nullptr;
  bool found = false;
  for (const proc_entry& e : kTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    found = true;
    if (e.version <= version && (best == nullptr || e.version > best->version)) best = &e;
  }
  *pfn = nullptr;
  if (best == nullptr) {
    // A real driver (580, CUDA 13.0) answers a symbol it lacks, or one too new for
    // the version asked, with success and a null pointer; only the status says why
    // (cuGetProcAddress in the driver API reference, "Driver Entry Point Access").
    if (status) *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  *pfn = (per_thread && best->per_thread) ? best->per_thread : best->legacy;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

SIMGPU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbolStatus) {
  SIMGPU_API(none, cuGetProcAddress_v2, symbol, pfn, cudaVersion, flags, symbolStatus);
  SIMGPU_RETURN(lookup(symbol, pfn, cudaVersion, flags, symbolStatus));
}

extern "C" __attribute__((visibility("default"))) CUresult simgpu_cuGetProcAddress_v1(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  SIMGPU_API(none, cuGetProcAddress, symbol, pfn, cudaVersion, flags);
  SIMGPU_RETURN(lookup(symbol, pfn, cudaVersion, flags, nullptr));
}
