// driver_api.h: the driver-API path of the workloads (--api driver|dlsym), the way
// JAX, TensorFlow, cuBLAS and cuDNN reach the GPU: device memory, copies, memsets
// and launches through libcuda's own functions instead of the runtime's.
//
//   api_path::runtime  cudaMalloc, cudaFree, cudaMemcpyAsync, cudaMemsetAsync and the
//                      --launch path (the default);
//   api_path::driver   cuMemAlloc_v2, cuMemFree_v2, cuMemcpy{HtoD,DtoH,DtoD}Async_v2,
//                      cuMemsetD8Async and cuLaunchKernel, each found by asking
//                      libcuda's cuGetProcAddress_v2 for the base name at CUDA 13.0,
//                      as the CUDA runtime itself does (libcuda.so.1 dlopen'ed,
//                      cuGetProcAddress_v2 found with dlsym on its handle);
//   api_path::dlsym    the same functions found with dlsym(handle, "cuMemAlloc_v2")
//                      on the dlopen'ed libcuda, by their exact ABI names.
// vmm_functions (use_vmm) are the VMM calls of --caching expandable, on any path.
// Streams, events and pinned host memory stay on the runtime, which has made the
// device's primary context current on the calling thread (the driver calls need
// one). A kernel's CUfunction is the runtime's (cudaGetFuncBySymbol).
//
// Every wrapper returns a cudaError_t for CUDA_CHECK: the driver's CUresult values
// for the errors these calls return equal the runtime's (CUDA_ERROR_OUT_OF_MEMORY ==
// cudaErrorMemoryAllocation, ...).
#ifndef SIMTRAIN_DRIVER_API_H
#define SIMTRAIN_DRIVER_API_H

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace gpu {

enum class api_path { runtime, driver, dlsym };

inline api_path current_api = api_path::runtime;

inline const char* api_path_name(api_path path) {
  switch (path) {
    case api_path::runtime: return "runtime";
    case api_path::driver: return "driver";
    case api_path::dlsym: return "dlsym";
  }
  return "?";
}

struct driver_functions {
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void**, void**) = nullptr;
};

inline driver_functions driver;

namespace detail {

[[noreturn]] inline void driver_setup_failed(const char* what) {
  std::fflush(stdout);
  std::fprintf(stderr, "simtrain: driver API set-up failed: %s\n", what);
  std::exit(1);
}

template <typename F>
void resolve(F& out, void* handle, const char* abi_name, const char* base_name,
             bool by_proc_address) {
  void* p = nullptr;
  if (by_proc_address) {
    using get_proc_t = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);
    static get_proc_t get_proc = nullptr;
    if (get_proc == nullptr) {
      get_proc = reinterpret_cast<get_proc_t>(dlsym(handle, "cuGetProcAddress_v2"));
      if (get_proc == nullptr) driver_setup_failed("libcuda.so.1 has no cuGetProcAddress_v2");
    }
    CUdriverProcAddressQueryResult status{};
    if (get_proc(base_name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
      p = nullptr;
    }
  } else {
    p = dlsym(handle, abi_name);
  }
  if (p == nullptr) driver_setup_failed(abi_name);
  out = reinterpret_cast<F>(p);
}

}  // namespace detail

// Selects the path; for a driver path, resolves every function once (exits 1 with a
// message when libcuda or one of them is missing).
inline void use_api(api_path path) {
  current_api = path;
  if (path == api_path::runtime) return;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) detail::driver_setup_failed("libcuda.so.1 could not be loaded");
  const bool by_proc = path == api_path::driver;
  detail::resolve(driver.mem_alloc, handle, "cuMemAlloc_v2", "cuMemAlloc", by_proc);
  detail::resolve(driver.mem_free, handle, "cuMemFree_v2", "cuMemFree", by_proc);
  detail::resolve(driver.htod_async, handle, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync",
                  by_proc);
  detail::resolve(driver.dtoh_async, handle, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync",
                  by_proc);
  detail::resolve(driver.dtod_async, handle, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync",
                  by_proc);
  detail::resolve(driver.memset_d8_async, handle, "cuMemsetD8Async", "cuMemsetD8Async",
                  by_proc);
  detail::resolve(driver.launch, handle, "cuLaunchKernel", "cuLaunchKernel", by_proc);
}

// The virtual memory management calls a program makes itself to grow its own
// segments (--caching expandable, as PyTorch's expandable segments do), found once
// with cuGetProcAddress_v2 on a dlopen'ed libcuda like the driver path's.
struct vmm_functions {
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                              unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
};

inline vmm_functions vmm;

// Resolves vmm's functions (exits 1 with a message when one is missing). Needs the
// runtime's context current (cudaFree(nullptr) first).
inline void use_vmm() {
  if (vmm.map != nullptr) return;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) detail::driver_setup_failed("libcuda.so.1 could not be loaded");
  detail::resolve(vmm.address_reserve, handle, "cuMemAddressReserve", "cuMemAddressReserve", true);
  detail::resolve(vmm.address_free, handle, "cuMemAddressFree", "cuMemAddressFree", true);
  detail::resolve(vmm.create, handle, "cuMemCreate", "cuMemCreate", true);
  detail::resolve(vmm.release, handle, "cuMemRelease", "cuMemRelease", true);
  detail::resolve(vmm.map, handle, "cuMemMap", "cuMemMap", true);
  detail::resolve(vmm.unmap, handle, "cuMemUnmap", "cuMemUnmap", true);
  detail::resolve(vmm.set_access, handle, "cuMemSetAccess", "cuMemSetAccess", true);
}

inline cudaError_t as_runtime(CUresult r) { return static_cast<cudaError_t>(r); }

inline cudaError_t device_malloc(void** p, size_t bytes) {
  if (current_api == api_path::runtime) return cudaMalloc(p, bytes);
  CUdeviceptr d = 0;
  const CUresult r = driver.mem_alloc(&d, bytes);
  *p = reinterpret_cast<void*>(d);
  return as_runtime(r);
}

// How device_malloc's call reads in an error message: the function it called.
inline const char* device_malloc_call() {
  return current_api == api_path::runtime ? "cudaMalloc(&p, bytes)" : "cuMemAlloc_v2(&p, bytes)";
}

inline cudaError_t device_free(void* p) {
  if (current_api == api_path::runtime) return cudaFree(p);
  return as_runtime(driver.mem_free(reinterpret_cast<CUdeviceptr>(p)));
}

inline cudaError_t memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                cudaStream_t stream) {
  if (current_api == api_path::runtime) return cudaMemcpyAsync(dst, src, bytes, kind, stream);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return as_runtime(driver.htod_async(reinterpret_cast<CUdeviceptr>(dst), src, bytes, stream));
    case cudaMemcpyDeviceToHost:
      return as_runtime(driver.dtoh_async(dst, reinterpret_cast<CUdeviceptr>(src), bytes, stream));
    default:
      return as_runtime(driver.dtod_async(reinterpret_cast<CUdeviceptr>(dst),
                                          reinterpret_cast<CUdeviceptr>(src), bytes, stream));
  }
}

inline cudaError_t memset_async(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (current_api == api_path::runtime) return cudaMemsetAsync(p, value, bytes, stream);
  return as_runtime(driver.memset_d8_async(reinterpret_cast<CUdeviceptr>(p),
                                           static_cast<unsigned char>(value), bytes, stream));
}

// cuLaunchKernel of the kernel whose host function is fn, arguments as pointers.
inline cudaError_t launch_driver(const void* fn, dim3 grid, dim3 block, void** args,
                                 cudaStream_t stream) {
  cudaFunction_t f = nullptr;
  if (const cudaError_t e = cudaGetFuncBySymbol(&f, fn); e != cudaSuccess) return e;
  return as_runtime(driver.launch(reinterpret_cast<CUfunction>(f), grid.x, grid.y, grid.z,
                                  block.x, block.y, block.z, 0, stream, args, nullptr));
}

}  // namespace gpu

#endif  // SIMTRAIN_DRIVER_API_H
