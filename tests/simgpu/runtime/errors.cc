// simgpu's libcudart.so.13: error codes. CUresult -> cudaError_t, the per-thread
// last error with CUDA's sticky-error rule, and cudaGetErrorName/String with the
// real runtime's texts (error_table.inc, read from the CUDA 13.0 libcudart's own
// answers for every code it knows).
#include <cstddef>

#include "runtime_state.h"

namespace simgpu::rt {
namespace {

struct error_text {
  int code;
  const char* name;
  const char* text;
};

constexpr error_text kErrors[] = {
#define SIMGPU_ERROR(code, name, text) {code, name, text},
#include "error_table.inc"
#undef SIMGPU_ERROR
};

const error_text* find_error(int code) noexcept {
  for (const error_text& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace

// Note [CUresult to cudaError_t]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Since CUDA 10 the runtime and driver share numbers for every condition both can
// report (OUT_OF_MEMORY 2 = cudaErrorMemoryAllocation 2, INVALID_VALUE 1 =
// cudaErrorInvalidValue 1, NOT_INITIALIZED 3 = cudaErrorInitializationError 3, which
// is what a forked child sees, ILLEGAL_ADDRESS 700 = cudaErrorIllegalAddress 700,
// ...). The static_asserts pin the ones oversub's tests depend on; any driver code
// the runtime has no name for becomes cudaErrorUnknown, as in the real runtime.
static_assert(static_cast<int>(CUDA_ERROR_OUT_OF_MEMORY) == cudaErrorMemoryAllocation);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_VALUE) == cudaErrorInvalidValue);
static_assert(static_cast<int>(CUDA_ERROR_NOT_INITIALIZED) == cudaErrorInitializationError);
static_assert(static_cast<int>(CUDA_ERROR_ILLEGAL_ADDRESS) == cudaErrorIllegalAddress);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_HANDLE) == cudaErrorInvalidResourceHandle);
static_assert(static_cast<int>(CUDA_ERROR_NOT_READY) == cudaErrorNotReady);
static_assert(static_cast<int>(CUDA_ERROR_NO_DEVICE) == cudaErrorNoDevice);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_DEVICE) == cudaErrorInvalidDevice);
static_assert(static_cast<int>(CUDA_ERROR_LAUNCH_FAILED) == cudaErrorLaunchFailure);
static_assert(static_cast<int>(CUDA_ERROR_NOT_SUPPORTED) == cudaErrorNotSupported);
static_assert(static_cast<int>(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) ==
              cudaErrorStreamCaptureUnsupported);
static_assert(static_cast<int>(CUDA_ERROR_NOT_FOUND) == cudaErrorSymbolNotFound);
static_assert(static_cast<int>(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) ==
              cudaErrorHostMemoryAlreadyRegistered);

cudaError_t to_cuda_error(CUresult r) noexcept {
  switch (r) {
    case CUDA_SUCCESS:
      return cudaSuccess;
    case CUDA_ERROR_DEINITIALIZED:
      return cudaErrorCudartUnloading;
    case CUDA_ERROR_INVALID_CONTEXT:
      return cudaErrorDeviceUninitialized;
    default:
      break;
  }
  return find_error(static_cast<int>(r)) != nullptr ? static_cast<cudaError_t>(r)
                                                    : cudaErrorUnknown;
}

}  // namespace simgpu::rt

using simgpu::rt::api_call;
using simgpu::rt::lib;

extern "C" {

SIMGPU_EXPORT const char* cudaGetErrorName(cudaError_t error) {
  cudaGetErrorName_v6050_params params{error};
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID_cudaGetErrorName_v6050, "cudaGetErrorName_v6050",
               &params);
  const simgpu::rt::error_text* e = simgpu::rt::find_error(error);
  return e != nullptr ? e->name : "unrecognized error code";
}

SIMGPU_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  cudaGetErrorString_v3020_params params{error};
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID_cudaGetErrorString_v3020, "cudaGetErrorString_v3020",
               &params);
  const simgpu::rt::error_text* e = simgpu::rt::find_error(error);
  return e != nullptr ? e->text : "unrecognized error code";
}

// Note [Last error]
// ~~~~~~~~~~~~~~~~~
// Every entry point that fails stores its code as the calling thread's last error.
// cudaGetLastError returns it and resets it; cudaPeekAtLastError only returns it.
// A sticky error (the context is corrupted: illegal address, launch failure,
// device assert...) is process-wide: every later call that needs the driver returns
// it and cudaGetLastError cannot clear it. simgpu lets a successful cudaDeviceReset
// clear it, so one test process can continue after provoking one.
SIMGPU_EXPORT cudaError_t cudaGetLastError(void) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, "cudaGetLastError_v3020",
               nullptr);
  cudaError_t e = simgpu::rt::last_error(true);
  api.set_result(e);
  return e;
}

SIMGPU_EXPORT cudaError_t cudaPeekAtLastError(void) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020, "cudaPeekAtLastError_v3020",
               nullptr);
  cudaError_t e = simgpu::rt::last_error(false);
  api.set_result(e);
  return e;
}

}  // extern "C"
