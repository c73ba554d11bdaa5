// simgpu's libcudart.so.13: kernel registration and launch configuration.
//
// Two ways in: kernel.h's SIMGPU_KERNEL calls __simgpuRegisterKernel (our private
// export) with a host implementation, which we forward to the driver; nvcc output
// calls __cudaRegisterFatBinary/__cudaRegisterFunction, which we accept and record
// by name only (simgpu cannot run device code), so such a kernel launches with
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

struct kernel_entry {
  const void* host_fun = nullptr;
  CUfunction function = nullptr;  // nullptr for nvcc-only registrations
  std::string name;
};

// Note [Kernel registry]
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
    entries.push_back(kernel_entry{host_fun, fn, std::move(name)});
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
  return kernel_ref{e->function, e->name.empty() ? nullptr : e->name.c_str()};
}

std::string driver_name(CUfunction fn) {
  if (driver_init() != cudaSuccess) return {};
  const char* name = nullptr;
  if (SIMGPU_CU(driver(false), cuFuncGetName, &name, fn) != CUDA_SUCCESS || name == nullptr) {
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
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.by_host.find(host_fun);
    if (it != r.by_host.end()) return ref(it->second);
  }
  kernel_entry* e = learn_host(host_fun);
  return e != nullptr ? ref(e) : kernel_ref{};
}

kernel_ref kernel_from_handle(const void* handle) noexcept {
  if (handle == nullptr) return {};
  kernel_registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.by_handle.find(handle);
    if (it != r.by_handle.end()) return ref(it->second);
    it = r.by_host.find(handle);
    if (it != r.by_host.end()) return ref(it->second);
  }
  if (kernel_entry* e = learn_host(handle)) return ref(e);
  // A CUfunction the runtime never handed out (cuModuleGetFunction, cuGetProcAddress
  // users): trust the driver to recognise it.
  CUfunction fn = static_cast<CUfunction>(const_cast<void*>(handle));
  std::string name = driver_name(fn);
  if (name.empty()) return {};
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_handle.find(handle);
  return ref(it != r.by_handle.end() ? it->second : r.add(nullptr, fn, std::move(name)));
}

const void* kernel_handle(const void* host_fun) noexcept {
  kernel_ref k = kernel_from_host(host_fun);
  if (k.function != nullptr) return k.function;
  kernel_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_host.find(host_fun);
  return it != r.by_host.end() ? static_cast<const void*>(it->second) : nullptr;
}

}  // namespace simgpu::rt

using simgpu::rt::api_call;
using simgpu::rt::lib;

extern "C" {

SIMGPU_EXPORT int __simgpuRegisterKernel(const void* hostFun, const char* name,
                                         const simgpuParamInfo* params, size_t nparams,
                                         simgpuKernelRun run, simgpuKernelFootprint footprint) {
  if (hostFun == nullptr || name == nullptr || run == nullptr) return cudaErrorInvalidValue;
  const simgpu::rt::libcuda_ext* ext = simgpu::rt::library();
  if (ext == nullptr || ext->register_kernel == nullptr) return cudaErrorInsufficientDriver;
  CUfunction fn = ext->register_kernel(hostFun, name, params, nparams, run, footprint);
  if (fn == nullptr) return cudaErrorInvalidValue;
  simgpu::rt::kernel_registry& r = simgpu::rt::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_host.find(hostFun);
  if (it == r.by_host.end() || it->second->function == nullptr) r.add(hostFun, fn, name);
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
  const void* handle = simgpu::rt::kernel_handle(hostFun);
  *kernel = static_cast<cudaKernel_t>(const_cast<void*>(handle));
  return api.finish(handle != nullptr ? cudaSuccess : cudaErrorInvalidDeviceFunction);
}

SIMGPU_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  SIMGPU_RT_CALL(simgpu::rt::drv, cudaGetFuncBySymbol_v11000, functionPtr, symbolPtr);
  if (functionPtr == nullptr) return api.finish(cudaErrorInvalidValue);
  simgpu::rt::kernel_ref k = simgpu::rt::kernel_from_host(symbolPtr);
  *functionPtr = k.function;
  return api.finish(k.function != nullptr ? cudaSuccess : cudaErrorInvalidDeviceFunction);
}

}  // extern "C"
