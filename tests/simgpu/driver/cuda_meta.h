// Includes CUPTI's generated_cuda_meta.h (the *_params structs of the driver API).
// That header names the CUDA 3.x-era _v1 types, which cuda.h declares only for
// NVIDIA's own build; simgpu never uses those entry points, so incomplete
// declarations are enough.
#ifndef SIMGPU_DRIVER_CUDA_META_H
#define SIMGPU_DRIVER_CUDA_META_H

#include <cuda.h>

typedef unsigned int CUdeviceptr_v1;
typedef struct CUDA_MEMCPY2D_v1_st CUDA_MEMCPY2D_v1;
typedef struct CUDA_MEMCPY3D_v1_st CUDA_MEMCPY3D_v1;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st CUDA_ARRAY3D_DESCRIPTOR_v1;

#include <cupti_driver_cbid.h>
#include <generated_cuda_meta.h>

#endif  // SIMGPU_DRIVER_CUDA_META_H
