// Declarations of CUDA runtime entry points that CUDA's headers keep from host
// compilers.
//
// __cudaLaunchKernel and __cudaLaunchKernel_ptsz are what nvcc-generated code calls
// for every <<<...>>> launch in CUDA 13; crt/device_functions.h declares them only
// when compiling with nvcc. The signatures below are those of that header, and the
// file is marked a system header like the rest of CUDA's (Note [Redeclaring CUDA's
// functions] in hooks.cc).
#ifndef OVERSUB_INTERPOSE_CUDA_DECLS_H
#define OVERSUB_INTERPOSE_CUDA_DECLS_H
#pragma GCC system_header

#include <cuda_runtime_api.h>

extern "C" {
cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void** args, size_t sharedMem, cudaStream_t stream);
cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
                                              dim3 blockDim, void** args, size_t sharedMem,
                                              cudaStream_t stream);
}

#endif  // OVERSUB_INTERPOSE_CUDA_DECLS_H
