// Driver entry points: kernel launches (with _ptsz exports) and function queries.
// The CUPTI symbolName of a launch is the kernel's registered name. A launch's f is
// a CUfunction or a CUkernel cast to one (library.h); the cuFunc* queries take only
// a CUfunction (Note [Kernels and functions] in library.cc).
#include <cstring>

#include "api.h"
#include "fault_injection.h"
#include "kernels.h"
#include "library.h"

using namespace simgpu;

namespace {

const char* name_of(CUfunction f) {
  lock_guard lock;
  kernel_obj* k = launchable(f);
  return k ? k->name.c_str() : nullptr;
}

CUresult launch(CUfunction f, dim3 grid, dim3 block, unsigned shmem, CUstream h, void** params,
                void** extra, bool ptds) {
  kernel_obj* k = launchable(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // CUDA 12.1+ takes up to 32764 bytes of kernel parameters; a larger block (a kernel registered with one) is refused here, before
  // anything is copied or scanned.
  if (k->param_bytes > kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch_kernel(k, grid, block, shmem, s, params, extra);
}

CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool ptds) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (c->numAttrs != 0 && c->attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, dim3(c->gridDimX, c->gridDimY, c->gridDimZ),
                dim3(c->blockDimX, c->blockDimY, c->blockDimZ), c->sharedMemBytes, c->hStream,
                params, extra, ptds);
}

}  // namespace

SIMGPU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX,
                                      unsigned int blockDimY, unsigned int blockDimZ,
                                      unsigned int sharedMemBytes, CUstream hStream,
                                      void** kernelParams, void** extra) {
  SIMGPU_API_SYM(context, cuLaunchKernel, name_of(f), f, gridDimX, gridDimY, gridDimZ, blockDimX,
                 blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
  SIMGPU_RETURN(launch(f, dim3(gridDimX, gridDimY, gridDimZ), dim3(blockDimX, blockDimY, blockDimZ),
                       sharedMemBytes, hStream, kernelParams, extra, false));
}

SIMGPU_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void** kernelParams, void** extra) {
  SIMGPU_API_SYM(context, cuLaunchKernel_ptsz, name_of(f), f, gridDimX, gridDimY, gridDimZ,
                 blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
  SIMGPU_RETURN(launch(f, dim3(gridDimX, gridDimY, gridDimZ), dim3(blockDimX, blockDimY, blockDimZ),
                       sharedMemBytes, hStream, kernelParams, extra, true));
}

SIMGPU_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                        void** kernelParams, void** extra) {
  SIMGPU_API_SYM(context, cuLaunchKernelEx, name_of(f), config, f, kernelParams, extra);
  SIMGPU_RETURN(launch_ex(config, f, kernelParams, extra, false));
}

SIMGPU_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                             void** kernelParams, void** extra) {
  SIMGPU_API_SYM(context, cuLaunchKernelEx_ptsz, name_of(f), config, f, kernelParams, extra);
  SIMGPU_RETURN(launch_ex(config, f, kernelParams, extra, true));
}

SIMGPU_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                                 unsigned int gridDimY, unsigned int gridDimZ,
                                                 unsigned int blockDimX, unsigned int blockDimY,
                                                 unsigned int blockDimZ,
                                                 unsigned int sharedMemBytes, CUstream hStream,
                                                 void** kernelParams) {
  SIMGPU_API_SYM(context, cuLaunchCooperativeKernel, name_of(f), f, gridDimX, gridDimY, gridDimZ,
                 blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
  SIMGPU_RETURN(launch(f, dim3(gridDimX, gridDimY, gridDimZ), dim3(blockDimX, blockDimY, blockDimZ),
                       sharedMemBytes, hStream, kernelParams, nullptr, false));
}

SIMGPU_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  SIMGPU_API_SYM(context, cuLaunchCooperativeKernel_ptsz, name_of(f), f, gridDimX, gridDimY,
                 gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                 kernelParams);
  SIMGPU_RETURN(launch(f, dim3(gridDimX, gridDimY, gridDimZ), dim3(blockDimX, blockDimY, blockDimZ),
                       sharedMemBytes, hStream, kernelParams, nullptr, true));
}

SIMGPU_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                          size_t* paramSize) {
  SIMGPU_API(device, cuFuncGetParamInfo, func, paramIndex, paramOffset, paramSize);
  kernel_obj* k = find_kernel(func);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (CUresult f = inject_failure(fail_kind::param_info); f != CUDA_SUCCESS) SIMGPU_RETURN(f);
  if (paramIndex >= k->params.size()) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (paramOffset) *paramOffset = k->params[paramIndex].offset;
  if (paramSize) *paramSize = k->params[paramIndex].size;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  SIMGPU_API(device, cuFuncGetName, name, hfunc);
  kernel_obj* k = find_kernel(hfunc);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (name == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *name = k->name.c_str();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  SIMGPU_API(device, cuFuncGetAttribute, pi, attrib, hfunc);
  kernel_obj* k = find_kernel(hfunc);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (pi == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pi = function_attribute(k, attrib);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  SIMGPU_API(device, cuFuncSetAttribute, hfunc, attrib, value);
  if (find_kernel(hfunc) == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  SIMGPU_API(device, cuFuncSetCacheConfig, hfunc, config);
  if (find_kernel(hfunc) == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_RETURN(CUDA_SUCCESS);
}
