// One checked translation between the driver's CUresult and the runtime's
// cudaError_t, for the paths the two APIs share (interpose/memory_core.h, the swap
// glue, the driver hooks).
//
// Note [Error codes across the APIs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Since CUDA 11 the runtime gives each driver
// error it passes on the same number as the driver's code (CUDA_ERROR_OUT_OF_MEMORY
// and cudaErrorMemoryAllocation are both 2, CUDA_ERROR_LAUNCH_FAILED and
// cudaErrorLaunchFailure both 719), but the enums are not the same set: the runtime
// has codes of its own (cudaErrorInvalidPitchValue, cudaErrorInvalidDevicePointer,
// ...) and the driver a few the runtime never returns (CUDA_ERROR_CONTEXT_ALREADY_
// CURRENT). So a code crosses from one API to the other only through the table
// below, which names each pair once (the compiler checks both names and that their
// numbers agree); a code the table does not hold becomes CUDA_ERROR_UNKNOWN /
// cudaErrorUnknown, never a number that means something else on the other side.
#ifndef OVERSUB_CORE_ERROR_CODES_H
#define OVERSUB_CORE_ERROR_CODES_H

#include <cuda.h>
#include <driver_types.h>

namespace oversub {

// Every (driver, runtime) pair of codes with one meaning, from cuda.h and
// driver_types.h of CUDA 13.
#define OVERSUB_ERROR_PAIRS(X) \
  X(CUDA_SUCCESS, cudaSuccess) \
  X(CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue) \
  X(CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation) \
  X(CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError) \
  X(CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading) \
  X(CUDA_ERROR_PROFILER_DISABLED, cudaErrorProfilerDisabled) \
  X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, cudaErrorProfilerNotInitialized) \
  X(CUDA_ERROR_PROFILER_ALREADY_STARTED, cudaErrorProfilerAlreadyStarted) \
  X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, cudaErrorProfilerAlreadyStopped) \
  X(CUDA_ERROR_STUB_LIBRARY, cudaErrorStubLibrary) \
  X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, cudaErrorCallRequiresNewerDriver) \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, cudaErrorDevicesUnavailable) \
  X(CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice) \
  X(CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice) \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, cudaErrorDeviceNotLicensed) \
  X(CUDA_ERROR_INVALID_IMAGE, cudaErrorInvalidKernelImage) \
  X(CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized) \
  X(CUDA_ERROR_MAP_FAILED, cudaErrorMapBufferObjectFailed) \
  X(CUDA_ERROR_UNMAP_FAILED, cudaErrorUnmapBufferObjectFailed) \
  X(CUDA_ERROR_ARRAY_IS_MAPPED, cudaErrorArrayIsMapped) \
  X(CUDA_ERROR_ALREADY_MAPPED, cudaErrorAlreadyMapped) \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, cudaErrorNoKernelImageForDevice) \
  X(CUDA_ERROR_ALREADY_ACQUIRED, cudaErrorAlreadyAcquired) \
  X(CUDA_ERROR_NOT_MAPPED, cudaErrorNotMapped) \
  X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, cudaErrorNotMappedAsArray) \
  X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, cudaErrorNotMappedAsPointer) \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, cudaErrorECCUncorrectable) \
  X(CUDA_ERROR_UNSUPPORTED_LIMIT, cudaErrorUnsupportedLimit) \
  X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, cudaErrorDeviceAlreadyInUse) \
  X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cudaErrorPeerAccessUnsupported) \
  X(CUDA_ERROR_INVALID_PTX, cudaErrorInvalidPtx) \
  X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, cudaErrorInvalidGraphicsContext) \
  X(CUDA_ERROR_NVLINK_UNCORRECTABLE, cudaErrorNvlinkUncorrectable) \
  X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, cudaErrorJitCompilerNotFound) \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, cudaErrorUnsupportedPtxVersion) \
  X(CUDA_ERROR_JIT_COMPILATION_DISABLED, cudaErrorJitCompilationDisabled) \
  X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, cudaErrorUnsupportedExecAffinity) \
  X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, cudaErrorUnsupportedDevSideSync) \
  X(CUDA_ERROR_CONTAINED, cudaErrorContained) \
  X(CUDA_ERROR_INVALID_SOURCE, cudaErrorInvalidSource) \
  X(CUDA_ERROR_FILE_NOT_FOUND, cudaErrorFileNotFound) \
  X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, cudaErrorSharedObjectSymbolNotFound) \
  X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, cudaErrorSharedObjectInitFailed) \
  X(CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem) \
  X(CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle) \
  X(CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState) \
  X(CUDA_ERROR_LOSSY_QUERY, cudaErrorLossyQuery) \
  X(CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound) \
  X(CUDA_ERROR_NOT_READY, cudaErrorNotReady) \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress) \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cudaErrorLaunchOutOfResources) \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, cudaErrorLaunchTimeout) \
  X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, cudaErrorLaunchIncompatibleTexturing) \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cudaErrorPeerAccessAlreadyEnabled) \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cudaErrorPeerAccessNotEnabled) \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, cudaErrorSetOnActiveProcess) \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed) \
  X(CUDA_ERROR_ASSERT, cudaErrorAssert) \
  X(CUDA_ERROR_TOO_MANY_PEERS, cudaErrorTooManyPeers) \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cudaErrorHostMemoryAlreadyRegistered) \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cudaErrorHostMemoryNotRegistered) \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, cudaErrorHardwareStackError) \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, cudaErrorIllegalInstruction) \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, cudaErrorMisalignedAddress) \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, cudaErrorInvalidAddressSpace) \
  X(CUDA_ERROR_INVALID_PC, cudaErrorInvalidPc) \
  X(CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure) \
  X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, cudaErrorCooperativeLaunchTooLarge) \
  X(CUDA_ERROR_TENSOR_MEMORY_LEAK, cudaErrorTensorMemoryLeak) \
  X(CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted) \
  X(CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported) \
  X(CUDA_ERROR_SYSTEM_NOT_READY, cudaErrorSystemNotReady) \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch) \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, cudaErrorCompatNotSupportedOnDevice) \
  X(CUDA_ERROR_MPS_CONNECTION_FAILED, cudaErrorMpsConnectionFailed) \
  X(CUDA_ERROR_MPS_RPC_FAILURE, cudaErrorMpsRpcFailure) \
  X(CUDA_ERROR_MPS_SERVER_NOT_READY, cudaErrorMpsServerNotReady) \
  X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, cudaErrorMpsMaxClientsReached) \
  X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, cudaErrorMpsMaxConnectionsReached) \
  X(CUDA_ERROR_MPS_CLIENT_TERMINATED, cudaErrorMpsClientTerminated) \
  X(CUDA_ERROR_CDP_NOT_SUPPORTED, cudaErrorCdpNotSupported) \
  X(CUDA_ERROR_CDP_VERSION_MISMATCH, cudaErrorCdpVersionMismatch) \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported) \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaErrorStreamCaptureInvalidated) \
  X(CUDA_ERROR_STREAM_CAPTURE_MERGE, cudaErrorStreamCaptureMerge) \
  X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cudaErrorStreamCaptureUnmatched) \
  X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cudaErrorStreamCaptureUnjoined) \
  X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cudaErrorStreamCaptureIsolation) \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cudaErrorStreamCaptureImplicit) \
  X(CUDA_ERROR_CAPTURED_EVENT, cudaErrorCapturedEvent) \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, cudaErrorStreamCaptureWrongThread) \
  X(CUDA_ERROR_TIMEOUT, cudaErrorTimeout) \
  X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cudaErrorGraphExecUpdateFailure) \
  X(CUDA_ERROR_EXTERNAL_DEVICE, cudaErrorExternalDevice) \
  X(CUDA_ERROR_INVALID_CLUSTER_SIZE, cudaErrorInvalidClusterSize) \
  X(CUDA_ERROR_FUNCTION_NOT_LOADED, cudaErrorFunctionNotLoaded) \
  X(CUDA_ERROR_INVALID_RESOURCE_TYPE, cudaErrorInvalidResourceType) \
  X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, cudaErrorInvalidResourceConfiguration) \
  X(CUDA_ERROR_UNKNOWN, cudaErrorUnknown)

// The table holds pairs of equal numbers, so translating a code the other API also
// has never changes it.
#define OVERSUB_SAME_NUMBER(driver, runtime)                              \
  static_assert(static_cast<int>(driver) == static_cast<int>(runtime), \
                #driver " and " #runtime " differ");
OVERSUB_ERROR_PAIRS(OVERSUB_SAME_NUMBER)
#undef OVERSUB_SAME_NUMBER

// The runtime's code for the driver's rc (cudaErrorUnknown for a code it has no
// equivalent of).
constexpr cudaError_t to_runtime_error(CUresult rc) noexcept {
  switch (rc) {
#define OVERSUB_TO_RUNTIME(driver, runtime) \
  case driver: return runtime;
    OVERSUB_ERROR_PAIRS(OVERSUB_TO_RUNTIME)
#undef OVERSUB_TO_RUNTIME
    default: return cudaErrorUnknown;
  }
}

// The driver's code for the runtime's rc (CUDA_ERROR_UNKNOWN for a runtime-only code).
constexpr CUresult to_driver_error(cudaError_t rc) noexcept {
  switch (rc) {
#define OVERSUB_TO_DRIVER(driver, runtime) \
  case runtime: return driver;
    OVERSUB_ERROR_PAIRS(OVERSUB_TO_DRIVER)
#undef OVERSUB_TO_DRIVER
    default: return CUDA_ERROR_UNKNOWN;
  }
}

}  // namespace oversub

#endif  // OVERSUB_CORE_ERROR_CODES_H
