// simgpu's libcudart.so.13: which kernel a launch means. A launch names its kernel
// by host function (cudaLaunchKernel) or by handle (__cudaLaunchKernel with what
// __cudaGetKernel returned); both resolve here to the driver's CUfunction and the
// kernel's name, which CUPTI reports as symbolName.
#ifndef SIMGPU_RUNTIME_KERNELS_H
#define SIMGPU_RUNTIME_KERNELS_H

#include <cuda.h>
#include <driver_types.h>

namespace simgpu::rt {

struct kernel_ref {
  // What a launch passes to cuLaunchKernel(Ex): the library's CUkernel cast to
  // CUfunction (library_kernel), or a CUfunction; nullptr: no simgpu implementation,
  // or loading it failed (error).
  CUfunction function = nullptr;
  const char* name = nullptr;     // valid for the process lifetime; nullptr if unknown
  bool library_kernel = false;    // function is a CUkernel: ask the cuKernel* queries
  cudaError_t error = cudaSuccess;  // why a registered kernel could not be loaded
};

// By host function (the address nvcc code and kernel.h register), loading the
// kernel through the driver's library API on first use (Note [Kernels load as
// libraries] in registration.cc). Kernels registered with the driver directly are
// found through simgpuFunctionFromHost.
kernel_ref kernel_from_host(const void* host_fun) noexcept;

// By cudaKernel_t (the CUkernel), by CUfunction, or, as the real runtime accepts for
// its const void* func parameters, by host function.
kernel_ref kernel_from_handle(const void* handle) noexcept;

// The cudaKernel_t for a host function (in function): its CUkernel, or for a
// function that nvcc code registered (__cudaRegisterFunction) but simgpu cannot run,
// a handle that launches with cudaErrorInvalidDeviceFunction; nullptr when unknown.
kernel_ref kernel_handle(const void* host_fun) noexcept;

}  // namespace simgpu::rt

#endif  // SIMGPU_RUNTIME_KERNELS_H
