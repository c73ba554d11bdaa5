// simgpu's libcudart.so.13: kernel launches and kernel queries. Every launch entry
// point (cudaLaunchKernel, cudaLaunchKernelExC, __cudaLaunchKernel that nvcc 13
// emits, cudaLaunchCooperativeKernel, each with its _ptsz form) resolves its kernel
// before the CUPTI entry callback so the callback can name it (symbolName), then
// forwards to the driver's cuLaunchKernel(Ex) with the kernel's CUkernel cast to
// CUfunction (Note [Kernels load as libraries] in registration.cc).
#include "kernels.h"
#include "runtime_state.h"

using simgpu::rt::api_options;
using simgpu::rt::driver_table;
using simgpu::rt::kernel_ref;
using simgpu::rt::per_thread_stream;

static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(static_cast<int>(cudaLaunchAttributeCooperative) == CU_LAUNCH_ATTRIBUTE_COOPERATIVE);

namespace {

api_options launch_options(const kernel_ref& k, bool per_thread) {
  return api_options{simgpu::rt::needs::context, per_thread, k.name};
}

// Note [Launch configuration errors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The runtime rejects an empty or oversized block before the driver sees it, with
// cudaErrorInvalidConfiguration as a GPU does (1024 threads per block on every
// device simgpu models).
constexpr unsigned kMaxThreadsPerBlock = 1024;

cudaError_t check_config(dim3 grid, dim3 block) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    return cudaErrorInvalidConfiguration;
  }
  unsigned long long threads = 1ull * block.x * block.y * block.z;
  return threads > kMaxThreadsPerBlock ? cudaErrorInvalidConfiguration : cudaSuccess;
}

cudaError_t launch(const driver_table& d, const kernel_ref& k, dim3 grid, dim3 block, void** args,
                   size_t shared_mem, cudaStream_t stream, bool cooperative) {
  if (k.error != cudaSuccess) return k.error;
  if (k.function == nullptr) return cudaErrorInvalidDeviceFunction;
  cudaError_t e = check_config(grid, block);
  if (e != cudaSuccess) return e;
  unsigned smem = static_cast<unsigned>(shared_mem);
  CUresult r;
  if (cooperative && d.cuLaunchCooperativeKernel != nullptr) {
    r = d.cuLaunchCooperativeKernel(k.function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                    smem, stream, args);
  } else {
    r = SIMGPU_CU(d, cuLaunchKernel, k.function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                  smem, stream, args, static_cast<void**>(nullptr));
  }
  return simgpu::rt::to_cuda_error(r);
}

cudaError_t launch_ex(const driver_table& d, const kernel_ref& k, const cudaLaunchConfig_t* c,
                      void** args, bool per_thread) {
  if (c == nullptr) return cudaErrorInvalidValue;
  cudaStream_t stream = per_thread ? per_thread_stream(c->stream) : c->stream;
  if (k.error != cudaSuccess) return k.error;
  if (k.function == nullptr) return cudaErrorInvalidDeviceFunction;
  if (c->numAttrs == 0 && d.cuLaunchKernelEx == nullptr) {
    return launch(d, k, c->gridDim, c->blockDim, args, c->dynamicSmemBytes, stream, false);
  }
  cudaError_t e = check_config(c->gridDim, c->blockDim);
  if (e != cudaSuccess) return e;
  CUlaunchConfig config{};
  config.gridDimX = c->gridDim.x;
  config.gridDimY = c->gridDim.y;
  config.gridDimZ = c->gridDim.z;
  config.blockDimX = c->blockDim.x;
  config.blockDimY = c->blockDim.y;
  config.blockDimZ = c->blockDim.z;
  config.sharedMemBytes = static_cast<unsigned>(c->dynamicSmemBytes);
  config.hStream = stream;
  // The runtime's launch attributes are the driver's, field for field.
  config.attrs = reinterpret_cast<CUlaunchAttribute*>(c->attrs);
  config.numAttrs = c->numAttrs;
  return simgpu::rt::to_cuda_error(
      SIMGPU_CU(d, cuLaunchKernelEx, &config, k.function, args, static_cast<void**>(nullptr)));
}

}  // namespace

extern "C" {

SIMGPU_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim,
                                           void** args, size_t sharedMem, cudaStream_t stream) {
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  SIMGPU_RT_CALL(launch_options(k, false), cudaLaunchKernel_v7000, func, gridDim, blockDim, args,
                 sharedMem, stream);
  return api.finish(launch(api.drv(), k, gridDim, blockDim, args, sharedMem, stream, false));
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim,
                                                void** args, size_t sharedMem,
                                                cudaStream_t stream) {
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  SIMGPU_RT_CALL(launch_options(k, true), cudaLaunchKernel_ptsz_v7000, func, gridDim, blockDim,
                 args, sharedMem, stream);
  return api.finish(
      launch(api.drv(), k, gridDim, blockDim, args, sharedMem, per_thread_stream(stream), false));
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func,
                                              void** args) {
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  SIMGPU_RT_CALL(launch_options(k, false), cudaLaunchKernelExC_v11060, config, func, args);
  return api.finish(launch_ex(api.drv(), k, config, args, false));
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config,
                                                   const void* func, void** args) {
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  SIMGPU_RT_CALL(launch_options(k, true), cudaLaunchKernelExC_ptsz_v11060, config, func, args);
  return api.finish(launch_ex(api.drv(), k, config, args, true));
}

SIMGPU_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim,
                                                      void** args, size_t sharedMem,
                                                      cudaStream_t stream) {
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  SIMGPU_RT_CALL(launch_options(k, false), cudaLaunchCooperativeKernel_v9000, func, gridDim,
                 blockDim, args, sharedMem, stream);
  return api.finish(launch(api.drv(), k, gridDim, blockDim, args, sharedMem, stream, true));
}

SIMGPU_EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim,
                                                           dim3 blockDim, void** args,
                                                           size_t sharedMem, cudaStream_t stream) {
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  SIMGPU_RT_CALL(launch_options(k, true), cudaLaunchCooperativeKernel_ptsz_v9000, func, gridDim,
                 blockDim, args, sharedMem, stream);
  return api.finish(
      launch(api.drv(), k, gridDim, blockDim, args, sharedMem, per_thread_stream(stream), true));
}

// Note [__cudaLaunchKernel params]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUPTI 13 defines callback ids for __cudaLaunchKernel(_ptsz)_v13000 but no params
// struct for them (generated_cuda_runtime_api_meta.h has none), so the callback's
// functionParams is NULL, as for every runtime callback without one: a subscriber
// learns such a launch's function and arguments from the driver-level
// cuLaunchKernel callback this call makes underneath (same thread, same correlation
// id), whose cuLaunchKernel_params hold the CUkernel and the argument pointers.
SIMGPU_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                             void** args, size_t sharedMem, cudaStream_t stream) {
  kernel_ref k = simgpu::rt::kernel_from_handle(kernel);
  SIMGPU_RT_CALL0(launch_options(k, false), __cudaLaunchKernel_v13000);
  return api.finish(launch(api.drv(), k, gridDim, blockDim, args, sharedMem, stream, false));
}

SIMGPU_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                  void** args, size_t sharedMem,
                                                  cudaStream_t stream) {
  kernel_ref k = simgpu::rt::kernel_from_handle(kernel);
  SIMGPU_RT_CALL0(launch_options(k, true), __cudaLaunchKernel_ptsz_v13000);
  return api.finish(
      launch(api.drv(), k, gridDim, blockDim, args, sharedMem, per_thread_stream(stream), false));
}

// ---- Kernel queries -------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex,
                                               size_t* paramOffset, size_t* paramSize) {
  SIMGPU_RT_CALL(simgpu::rt::drv, cudaFuncGetParamInfo_v12040, func, paramIndex, paramOffset,
                 paramSize);
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  if (k.error != cudaSuccess) return api.finish(k.error);
  if (k.function == nullptr) return api.finish(cudaErrorInvalidDeviceFunction);
  if (k.library_kernel) {
    return api.finish(SIMGPU_CU(api.drv(), cuKernelGetParamInfo,
                                reinterpret_cast<CUkernel>(k.function), paramIndex, paramOffset,
                                paramSize));
  }
  return api.finish(
      SIMGPU_CU(api.drv(), cuFuncGetParamInfo, k.function, paramIndex, paramOffset, paramSize));
}

SIMGPU_EXPORT cudaError_t cudaFuncGetName(const char** name, const void* func) {
  SIMGPU_RT_CALL(simgpu::rt::drv, cudaFuncGetName_v12030, name, func);
  if (name == nullptr) return api.finish(cudaErrorInvalidValue);
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  if (k.name == nullptr) return api.finish(cudaErrorInvalidDeviceFunction);
  *name = k.name;
  return api.finish(cudaSuccess);
}

SIMGPU_EXPORT cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  SIMGPU_RT_CALL(simgpu::rt::drv, cudaFuncGetAttributes_v3020, attr, func);
  if (attr == nullptr) return api.finish(cudaErrorInvalidValue);
  kernel_ref k = simgpu::rt::kernel_from_handle(func);
  if (k.error != cudaSuccess) return api.finish(k.error);
  if (k.function == nullptr) return api.finish(cudaErrorInvalidDeviceFunction);
  *attr = cudaFuncAttributes{};
  const int device = simgpu::rt::thread_device();
  auto get = [&](CUfunction_attribute a) {
    int v = 0;
    CUresult r = k.library_kernel
                     ? SIMGPU_CU(api.drv(), cuKernelGetAttribute, &v, a,
                                 reinterpret_cast<CUkernel>(k.function), CUdevice{device})
                     : SIMGPU_CU(api.drv(), cuFuncGetAttribute, &v, a, k.function);
    return r == CUDA_SUCCESS ? v : 0;
  };
  attr->sharedSizeBytes = static_cast<size_t>(get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
  attr->constSizeBytes = static_cast<size_t>(get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
  attr->localSizeBytes = static_cast<size_t>(get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
  attr->maxThreadsPerBlock = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  attr->numRegs = get(CU_FUNC_ATTRIBUTE_NUM_REGS);
  attr->ptxVersion = get(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  attr->binaryVersion = get(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  attr->cacheModeCA = get(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA);
  attr->maxDynamicSharedSizeBytes = get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  attr->preferredShmemCarveout = get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
  if (attr->maxThreadsPerBlock == 0) attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
  return api.finish(cudaSuccess);
}

}  // extern "C"
