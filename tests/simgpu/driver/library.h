// The cuLibrary / CUkernel half of the driver API (CUDA 12+): libraries loaded from
// simgpu library images (Note [simgpu library images] in
// tests/simgpu/include/simgpu/ext.h) and their context-independent kernel handles, which
// launches accept where a CUfunction is expected.
#ifndef SIMGPU_DRIVER_LIBRARY_H
#define SIMGPU_DRIVER_LIBRARY_H

#include <cuda.h>

#include "kernels.h"

namespace simgpu {

// The kernel a CUkernel launches, or nullptr when k is not a live library's kernel
// (unknown handle, or its library was unloaded). Device lock held.
kernel_obj* kernel_of_handle(CUkernel k);

// The kernel a launch's f names: a CUfunction, or a CUkernel cast to CUfunction
// (cuLaunchKernel's "CUkernel can be passed where CUfunction is expected").
kernel_obj* launchable(CUfunction f);

// Largest kernel parameter block a launch accepts (CUDA 12.1+ on Volta and later:
// 32764 bytes); a larger one is CUDA_ERROR_INVALID_VALUE.
inline constexpr size_t kMaxParamBytes = 32764;

// cuFuncGetAttribute's answers, shared with cuKernelGetAttribute.
int function_attribute(const kernel_obj* k, CUfunction_attribute a);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_LIBRARY_H
