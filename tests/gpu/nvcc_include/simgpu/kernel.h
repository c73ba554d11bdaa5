// Stand-in for simgpu's kernel.h when a simgpu test program is built with nvcc for a
// real GPU (scripts/gpu-validate step 2 puts this folder first on the include path).
// Under nvcc a __global__ function is a real kernel: there is nothing to register,
// so SIMGPU_KERNEL and SIMGPU_KERNEL_FOOTPRINT expand to nothing.
#ifndef OVERSUB_GPU_NVCC_SIMGPU_KERNEL_H
#define OVERSUB_GPU_NVCC_SIMGPU_KERNEL_H

#include <cuda_runtime.h>

#define SIMGPU_KERNEL(fn) static_assert(true, #fn)
#define SIMGPU_KERNEL_FOOTPRINT(fn, ...) static_assert(true, #fn)

#endif  // OVERSUB_GPU_NVCC_SIMGPU_KERNEL_H
