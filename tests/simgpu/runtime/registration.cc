// simgpu's libcudart.so.13: kernel registration and launch configuration.
//
// Two ways in: kernel.h's SIMGPU_KERNEL calls __simgpuRegisterKernel (our private
// export) with a host implementation, which we record and load through the driver's
// library API on first use (Note [Kernels load as libraries]); nvcc output calls
// __cudaRegisterFatBinary/__cudaRegisterFunction, which we accept and record by name
// only (simgpu cannot run device code), so such a kernel launches with
// cudaErrorInvalidDeviceFunction. Both happen from static initialisers, so nothing
// here may need more than the library level of initialisation.
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels.h"
#include "runtime_state.h"

namespace simgpu::rt {
namespace {

// Note [Kernels load as libraries]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CUDA 12+ runtime loads its fatbinaries with the driver's context-independent
// library API (cuLibraryLoadData) and its kernel handles are the driver's: the
// headers declare cudaKernel_t and CUkernel as the same struct CUkern_st*. So here a
// registered kernel becomes, on its first use after cuInit, a one-kernel simgpu
// library image (Note [simgpu library images] in tests/simgpu/include/simgpu/ext.h)
// loaded with cuLibraryLoadData and found with cuLibraryGetKernel; its cudaKernel_t is
// that CUkernel, and every launch hands the CUkernel to cuLaunchKernel(Ex) cast to
// CUfunction, as the driver API allows. cudaGetFuncBySymbol answers
// cuKernelGetFunction's CUfunction, and cudaFuncGetParamInfo asks
// cuKernelGetParamInfo. A failed load is answered to the launch or query that needed
// it (mapped as every driver error) and tried again at the next use. Loading happens
// outside the registry's lock: the driver's CUPTI callbacks may call back into the
// runtime.
struct kernel_entry {
  const void* host_fun = nullptr;
  CUfunction function = nullptr;  // what launches pass: a CUfunction, or the CUkernel
  bool library_kernel = false;    // function is a CUkernel (cuKernel* queries)
  std::string name;
  // A kernel.h registration not loaded yet (run != nullptr, function == nullptr).
  std::vector<simgpuParamInfo> params;
  simgpuKernelRun run = nullptr;
  simgpuKernelFootprint footprint = nullptr;
};

// Note [Kernel registry]
// ~~~~~~~~~~~~~~~~~~~~~~
// Entries live in a deque (stable addresses) and are never removed: names handed
// to CUPTI must stay valid for the process. An nvcc-only entry's address doubles as
// its cudaKernel_t, so __cudaLaunchKernel can still name the kernel it refuses.
// The registry is leaked on purpose: __cudaUnregisterFatBinary runs from atexit.
struct kernel_registry {
  std::mutex mutex;
  std::deque<kernel_entry> entries;
  std::unordered_map<const void*, kernel_entry*> by_host;
  std::unordered_map<const void*, kernel_entry*> by_handle;

  kernel_entry* add(const void* host_fun, CUfunction fn, std::string name) {
    entries.push_back(kernel_entry{host_fun, fn, false, std::move(name), {}, nullptr, nullptr});
    kernel_entry* e = &entries.back();
    if (host_fun != nullptr) by_host[host_fun] = e;
    by_handle[fn != nullptr ? static_cast<const void*>(fn) : static_cast<const void*>(e)] = e;
    return e;
  }
};

kernel_registry& registry() {
  static kernel_registry* r = new kernel_registry;
  return *r;
}

kernel_ref ref(const kernel_entry* e) {
  return kernel_ref{e->function, e->name.empty() ? nullptr : e->name.c_str(),
                    e->library_kernel};
}

// Loads a pending kernel.h registration (Note [Kernels load as libraries]); the
// registry lock is not held. cudaSuccess once e->function is set.
cudaError_t load(kernel_entry* e) {
  kernel_registry& r = registry();
  simgpuKernelImage k{};
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (e->function != nullptr) return cudaSuccess;
    if (e->run == nullptr) return cudaErrorInvalidDeviceFunction;  // nvcc-only
    k = simgpuKernelImage{e->host_fun, e->name.c_str(), e->params.data(), e->params.size(),
                          e->run, e->footprint};
  }
  if (cudaError_t i = driver_init(); i != cudaSuccess) return i;
  const driver_table& d = driver(false);
  const simgpuLibraryImage image{SIMGPU_LIBRARY_MAGIC, 1, &k};
  CUlibrary lib = nullptr;
  CUresult res = SIMGPU_CU(d, cuLibraryLoadData, &lib, static_cast<const void*>(&image),
                           static_cast<CUjit_option*>(nullptr), static_cast<void**>(nullptr), 0u,
                           static_cast<CUlibraryOption*>(nullptr), static_cast<void**>(nullptr),
                           0u);
  CUkernel kernel = nullptr;
  if (res == CUDA_SUCCESS) res = SIMGPU_CU(d, cuLibraryGetKernel, &kernel, lib, k.name);
  if (res != CUDA_SUCCESS) return to_cuda_error(res);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (e->function == nullptr) {  // else another thread loaded it first
    e->function = reinterpret_cast<CUfunction>(kernel);
    e->library_kernel = true;
    r.by_handle[kernel] = e;
  }
  return cudaSuccess;
}

// The entry's reference, loading it first when it is a pending registration.
kernel_ref resolve(kernel_entry* e) {
  if (e->function == nullptr && e->run != nullptr) {
    if (cudaError_t err = load(e); err != cudaSuccess) {
      kernel_ref k = ref(e);
      k.error = err;
      return k;
    }
  }
  std::lock_guard<std::mutex> lock(registry().mutex);
  return ref(e);
}

std::string driver_name(CUfunction fn) {
  if (driver_init() != cudaSuccess) return {};
  const char* name = nullptr;
  if (SIMGPU_CU(driver(false), cuFuncGetName, &name, fn) != CUDA_SUCCESS || name == nullptr) {
    return {};
  }
  return name;
}

// A CUkernel the runtime never handed out (the program's own cuLibraryLoadData).
std::string kernel_name(CUkernel k) {
  if (driver_init() != cudaSuccess) return {};
  const char* name = nullptr;
  if (SIMGPU_CU(driver(false), cuKernelGetName, &name, k) != CUDA_SUCCESS || name == nullptr) {
    return {};
  }
  return name;
}

// A host function registered with the driver by someone else than us.
kernel_entry* learn_host(const void* host_fun) {
  const libcuda_ext* ext = library();
  if (ext == nullptr || ext->function_from_host == nullptr) return nullptr;
  CUfunction fn = ext->function_from_host(host_fun);
  if (fn == nullptr) return nullptr;
  std::string name = driver_name(fn);
  kernel_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_host.find(host_fun);
  return it != r.by_host.end() ? it->second : r.add(host_fun, fn, std::move(name));
}

// A __managed__ variable nvcc registered: backed by managed memory on the module's
// first use (__cudaInitModule), zero-filled (simgpu has no device image to copy its
// initial value from).
struct managed_var {
  void** fat_cubin = nullptr;
  void** host_pointer = nullptr;  // where nvcc's host code reads the variable's address
  size_t size = 0;
  bool allocated = false;
};
std::mutex managed_mutex;
std::vector<managed_var>& managed_vars() {
  static auto* v = new std::vector<managed_var>;
  return *v;
}

struct call_configuration {
  dim3 grid;
  dim3 block;
  size_t shared_mem;
  cudaStream_t stream;
};
thread_local std::vector<call_configuration> call_stack;

}  // namespace

kernel_ref kernel_from_host(const void* host_fun) noexcept {
  if (host_fun == nullptr) return {};
  kernel_registry& r = registry();
  kernel_entry* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.by_host.find(host_fun);
    if (it != r.by_host.end()) e = it->second;
  }
  if (e == nullptr) e = learn_host(host_fun);
  return e != nullptr ? resolve(e) : kernel_ref{};
}

kernel_ref kernel_from_handle(const void* handle) noexcept {
  if (handle == nullptr) return {};
  kernel_registry& r = registry();
  kernel_entry* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (auto it = r.by_handle.find(handle); it != r.by_handle.end()) {
      e = it->second;
    } else if (auto h = r.by_host.find(handle); h != r.by_host.end()) {
      e = h->second;
    }
  }
  if (e == nullptr) e = learn_host(handle);
  if (e != nullptr) return resolve(e);
  // A handle the runtime never handed out: a CUfunction (cuModuleGetFunction,
  // cuGetProcAddress users) or a CUkernel (the program's own cuLibraryLoadData);
  // trust the driver to recognise it.
  CUfunction fn = static_cast<CUfunction>(const_cast<void*>(handle));
  bool is_kernel = false;
  std::string name = driver_name(fn);
  if (name.empty()) {
    name = kernel_name(reinterpret_cast<CUkernel>(fn));
    is_kernel = true;
  }
  if (name.empty()) return {};
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_handle.find(handle);
  if (it != r.by_handle.end()) return ref(it->second);
  kernel_entry* added = r.add(nullptr, fn, std::move(name));
  added->library_kernel = is_kernel;
  return ref(added);
}

kernel_ref kernel_handle(const void* host_fun) noexcept {
  kernel_ref k = kernel_from_host(host_fun);
  if (k.function != nullptr || k.error != cudaSuccess) return k;
  kernel_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_host.find(host_fun);
  if (it == r.by_host.end()) return k;
  kernel_ref nvcc_only = ref(it->second);
  nvcc_only.function = reinterpret_cast<CUfunction>(it->second);  // refused at launch
  return nvcc_only;
}

}  // namespace simgpu::rt

using simgpu::rt::api_call;
using simgpu::rt::lib;

extern "C" {

SIMGPU_EXPORT int __simgpuRegisterKernel(const void* hostFun, const char* name,
                                         const simgpuParamInfo* params, size_t nparams,
                                         simgpuKernelRun run, simgpuKernelFootprint footprint) {
  if (hostFun == nullptr || name == nullptr || run == nullptr || (nparams != 0 && !params))
    return cudaErrorInvalidValue;
  // Recorded now, loaded through cuLibraryLoadData at first use (Note [Kernels load
  // as libraries]).
  simgpu::rt::kernel_registry& r = simgpu::rt::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_host.find(hostFun);
  if (it != r.by_host.end() && (it->second->run != nullptr || it->second->function != nullptr))
    return cudaSuccess;
  simgpu::rt::kernel_entry* e = r.add(hostFun, nullptr, name);
  e->params.assign(params, params + nparams);
  e->run = run;
  e->footprint = footprint;
  return cudaSuccess;
}

// ---- nvcc registration (accepted and recorded) ------------------------------------------

SIMGPU_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaRegisterFatBinary_v13000,
               "__cudaRegisterFatBinary_v13000", nullptr);
  return new void*(fatCubin);  // the handle nvcc passes back; freed on unregister
}

SIMGPU_EXPORT void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaRegisterFatBinaryEnd_v13000,
               "__cudaRegisterFatBinaryEnd_v13000", nullptr);
  (void)fatCubinHandle;
}

SIMGPU_EXPORT void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaUnregisterFatBinary_v13000,
               "__cudaUnregisterFatBinary_v13000", nullptr);
  delete fatCubinHandle;
}

SIMGPU_EXPORT void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun,
                                          char* deviceFun, const char* deviceName, int thread_limit,
                                          uint3* tid, uint3* bid, dim3* bDim, dim3* gDim,
                                          int* wSize) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaRegisterFunction_v13000,
               "__cudaRegisterFunction_v13000", nullptr);
  (void)fatCubinHandle, (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim,
      (void)gDim, (void)wSize;
  if (hostFun == nullptr) return;
  simgpu::rt::kernel_registry& r = simgpu::rt::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.by_host.count(hostFun) == 0) r.add(hostFun, nullptr, deviceName ? deviceName : "");
}

SIMGPU_EXPORT void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress,
                                     const char* deviceName, int ext, size_t size, int constant,
                                     int global) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaRegisterVar_v13000, "__cudaRegisterVar_v13000",
               nullptr);
  // simgpu has no device image to place variables in; symbol copies are not
  // supported, so there is nothing to record beyond accepting the call.
  (void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext, (void)size,
      (void)constant, (void)global;
}

SIMGPU_EXPORT void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress,
                                            char* deviceAddress, const char* deviceName, int ext,
                                            size_t size, int constant, int global) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaRegisterManagedVar_v13000,
               "__cudaRegisterManagedVar_v13000", nullptr);
  (void)deviceAddress, (void)deviceName, (void)ext, (void)constant, (void)global;
  if (hostVarPtrAddress == nullptr || size == 0) return;
  std::lock_guard<std::mutex> lock(simgpu::rt::managed_mutex);
  simgpu::rt::managed_vars().push_back({fatCubinHandle, hostVarPtrAddress, size, false});
}

// Called by nvcc's host code before the first host access to a __managed__
// variable of the module; answers whether the module is usable.
SIMGPU_EXPORT char __cudaInitModule(void** fatCubinHandle) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaInitModule_v13000, "__cudaInitModule_v13000",
               nullptr);
  if (simgpu::rt::driver_init() != cudaSuccess || simgpu::rt::ensure_context() != cudaSuccess) {
    return 0;
  }
  const simgpu::rt::driver_table& d = simgpu::rt::driver(false);
  std::lock_guard<std::mutex> lock(simgpu::rt::managed_mutex);
  for (simgpu::rt::managed_var& v : simgpu::rt::managed_vars()) {
    if (v.fat_cubin != fatCubinHandle || v.allocated) continue;
    CUdeviceptr p = 0;
    if (SIMGPU_CU(d, cuMemAllocManaged, &p, v.size, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) return 0;
    SIMGPU_CU(d, cuMemsetD8, p, static_cast<unsigned char>(0), v.size);
    *v.host_pointer = reinterpret_cast<void*>(p);
    v.allocated = true;
  }
  return 1;
}

// ---- <<<...>>> configuration --------------------------------------------------------------

SIMGPU_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                   struct CUstream_st* stream) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaPushCallConfiguration_v13000,
               "__cudaPushCallConfiguration_v13000", nullptr);
  simgpu::rt::call_stack.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

SIMGPU_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim,
                                                     size_t* sharedMem, void* stream) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaPopCallConfiguration_v13000,
               "__cudaPopCallConfiguration_v13000", nullptr);
  auto& stack = simgpu::rt::call_stack;
  if (stack.empty()) return api.finish(cudaErrorMissingConfiguration);
  simgpu::rt::call_configuration c = stack.back();
  stack.pop_back();
  if (gridDim != nullptr) *gridDim = c.grid;
  if (blockDim != nullptr) *blockDim = c.block;
  if (sharedMem != nullptr) *sharedMem = c.shared_mem;
  if (stream != nullptr) *static_cast<cudaStream_t*>(stream) = c.stream;
  return api.finish(cudaSuccess);
}

// ---- Kernel handles -----------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  api_call api(lib, CUPTI_RUNTIME_TRACE_CBID___cudaGetKernel_v13000, "__cudaGetKernel_v13000",
               nullptr);
  if (kernel == nullptr) return api.finish(cudaErrorInvalidValue);
  simgpu::rt::kernel_ref k = simgpu::rt::kernel_handle(hostFun);
  if (k.error != cudaSuccess) return api.finish(k.error);
  *kernel = reinterpret_cast<cudaKernel_t>(k.function);
  return api.finish(k.function != nullptr ? cudaSuccess : cudaErrorInvalidDeviceFunction);
}

SIMGPU_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  SIMGPU_RT_CALL(simgpu::rt::drv, cudaGetFuncBySymbol_v11000, functionPtr, symbolPtr);
  if (functionPtr == nullptr) return api.finish(cudaErrorInvalidValue);
  simgpu::rt::kernel_ref k = simgpu::rt::kernel_from_host(symbolPtr);
  if (k.error != cudaSuccess) return api.finish(k.error);
  if (k.function == nullptr) return api.finish(cudaErrorInvalidDeviceFunction);
  if (!k.library_kernel) {
    *functionPtr = k.function;
    return api.finish(cudaSuccess);
  }
  if (cudaError_t c = simgpu::rt::ensure_context(); c != cudaSuccess) return api.finish(c);
  // The context's function for the library's kernel (Note [Kernels load as libraries]).
  return api.finish(SIMGPU_CU(api.drv(), cuKernelGetFunction, functionPtr,
                              reinterpret_cast<CUkernel>(k.function)));
}

}  // extern "C"
