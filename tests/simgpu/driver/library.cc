// Driver entry points of the library API (CUDA 12+): cuLibraryLoadData /
// LoadFromFile / Unload, cuLibraryGetKernel / GetKernelCount / EnumerateKernels,
// cuKernelGetFunction / GetLibrary / GetName / GetAttribute / SetAttribute /
// SetCacheConfig / GetParamInfo. Images are simgpu's own (Note [simgpu library
// images] in tests/simgpu/include/simgpu/ext.h).
//
// Note [Kernels and functions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CUkernel is a library's handle, a CUfunction a context's: on simgpu a CUkernel is
// a kernel_handle (below) and cuKernelGetFunction answers the kernel_obj that
// simgpuRegisterKernel made for the same host function. The two handle kinds are
// told apart, as on a GPU where the runtime's cudaKernel_t is a CUkernel: launches
// take either (launchable()), the cuKernel* queries take only a CUkernel, and
// cuFuncGetParamInfo / cuFuncGetName / cuFuncGetAttribute given a CUkernel answer
// CUDA_ERROR_INVALID_HANDLE (the hostile reading of the documentation, which lets
// only launches mix them), so a tool must ask cuKernelGetParamInfo. A library's
// handles stay allocated after cuLibraryUnload (never reused, as device VA): a
// launch or query through one answers CUDA_ERROR_INVALID_HANDLE.
#include "library.h"

#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "api.h"
#include "fault_injection.h"

namespace simgpu {
namespace {

struct library_obj;

struct kernel_handle {
  uint32_t magic = 0x4e524b43;  // "CKRN"
  library_obj* library = nullptr;
  kernel_obj* function = nullptr;
};

struct library_obj {
  uint32_t magic = 0x42494c43;  // "CLIB"
  bool live = true;
  std::vector<std::unique_ptr<kernel_handle>> kernels;
};

// Every library ever loaded (never freed: Note [Kernels and functions]).
std::unordered_set<const library_obj*>& libraries() {
  static auto* s = new std::unordered_set<const library_obj*>();
  return *s;
}
std::unordered_set<const kernel_handle*>& handles() {
  static auto* s = new std::unordered_set<const kernel_handle*>();
  return *s;
}

library_obj* find_library(CUlibrary l) {
  auto* p = reinterpret_cast<library_obj*>(l);
  return libraries().count(p) != 0 && p->live ? p : nullptr;
}

kernel_handle* find_handle(CUkernel k) {
  auto* p = reinterpret_cast<kernel_handle*>(k);
  return handles().count(p) != 0 && p->library->live ? p : nullptr;
}

CUresult load(CUlibrary* out, const void* code, unsigned num_jit, void** jit_values,
              unsigned num_lib, void** lib_values) {
  if (out == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((num_jit != 0 && jit_values == nullptr) || (num_lib != 0 && lib_values == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  const auto* image = static_cast<const simgpuLibraryImage*>(code);
  if (image->magic != SIMGPU_LIBRARY_MAGIC || (image->count != 0 && image->kernels == nullptr))
    return CUDA_ERROR_INVALID_IMAGE;
  for (uint32_t i = 0; i < image->count; ++i) {
    const simgpuKernelImage& e = image->kernels[i];
    if (e.hostFun == nullptr || e.name == nullptr || e.run == nullptr ||
        (e.nparams != 0 && e.params == nullptr))
      return CUDA_ERROR_INVALID_IMAGE;
  }
  if (CUresult f = inject_failure(fail_kind::library_load); f != CUDA_SUCCESS) return f;
  auto* lib = new library_obj();
  for (uint32_t i = 0; i < image->count; ++i) {
    const simgpuKernelImage& e = image->kernels[i];
    CUfunction fn = simgpuRegisterKernel(e.hostFun, e.name, e.params, e.nparams, e.run,
                                         e.footprint);
    auto h = std::make_unique<kernel_handle>();
    h->library = lib;
    h->function = find_kernel(fn);
    handles().insert(h.get());
    lib->kernels.push_back(std::move(h));
  }
  libraries().insert(lib);
  *out = reinterpret_cast<CUlibrary>(lib);
  return CUDA_SUCCESS;
}

// Counts one kernel query for SIMGPU_FAIL=kernel_query (after argument checks).
#define SIMGPU_KERNEL_QUERY()                                                   \
  if (CUresult f_ = inject_failure(fail_kind::kernel_query); f_ != CUDA_SUCCESS) \
  SIMGPU_RETURN(f_)

}  // namespace

kernel_obj* kernel_of_handle(CUkernel k) {
  kernel_handle* h = find_handle(k);
  return h != nullptr ? h->function : nullptr;
}

kernel_obj* launchable(CUfunction f) {
  if (kernel_obj* k = find_kernel(f)) return k;
  return kernel_of_handle(reinterpret_cast<CUkernel>(f));
}

int function_attribute(const kernel_obj* k, CUfunction_attribute a) {
  (void)k;
  const device_model& m = dev().model;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return m.max_threads_per_block;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: return 32;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: return m.cc_major * 10 + m.cc_minor;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: return m.max_shared_per_block_bytes;
    default: return 0;
  }
}

}  // namespace simgpu

using namespace simgpu;

SIMGPU_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code,
                                         CUjit_option* jitOptions, void** jitOptionsValues,
                                         unsigned int numJitOptions,
                                         CUlibraryOption* libraryOptions,
                                         void** libraryOptionValues,
                                         unsigned int numLibraryOptions) {
  SIMGPU_API(device, cuLibraryLoadData, library, code, jitOptions, jitOptionsValues,
             numJitOptions, libraryOptions, libraryOptionValues, numLibraryOptions);
  SIMGPU_RETURN(load(library, code, numJitOptions, jitOptionsValues, numLibraryOptions,
                     libraryOptionValues));
}

SIMGPU_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                             CUjit_option* jitOptions, void** jitOptionsValues,
                                             unsigned int numJitOptions,
                                             CUlibraryOption* libraryOptions,
                                             void** libraryOptionValues,
                                             unsigned int numLibraryOptions) {
  SIMGPU_API(device, cuLibraryLoadFromFile, library, fileName, jitOptions, jitOptionsValues,
             numJitOptions, libraryOptions, libraryOptionValues, numLibraryOptions);
  if (library == nullptr || fileName == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  // The shared object stays loaded: its kernels' code must outlive the library.
  void* so = dlopen(fileName, RTLD_NOW | RTLD_LOCAL);
  if (so == nullptr) SIMGPU_RETURN(CUDA_ERROR_FILE_NOT_FOUND);
  const void* image = dlsym(so, "simgpu_library_image");
  if (image == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_IMAGE);
  SIMGPU_RETURN(load(library, image, numJitOptions, jitOptionsValues, numLibraryOptions,
                     libraryOptionValues));
}

SIMGPU_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  SIMGPU_API(device, cuLibraryUnload, library);
  library_obj* l = find_library(library);
  if (l == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  l->live = false;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  SIMGPU_API(device, cuLibraryGetKernel, pKernel, library, name);
  if (pKernel == nullptr || name == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  library_obj* l = find_library(library);
  if (l == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_KERNEL_QUERY();
  for (const auto& h : l->kernels) {
    if (h->function->name == name) {
      *pKernel = reinterpret_cast<CUkernel>(h.get());
      SIMGPU_RETURN(CUDA_SUCCESS);
    }
  }
  SIMGPU_RETURN(CUDA_ERROR_NOT_FOUND);
}

SIMGPU_EXPORT CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  SIMGPU_API(device, cuLibraryGetKernelCount, count, lib);
  if (count == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  library_obj* l = find_library(lib);
  if (l == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_KERNEL_QUERY();
  *count = static_cast<unsigned>(l->kernels.size());
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels,
                                                 CUlibrary lib) {
  SIMGPU_API(device, cuLibraryEnumerateKernels, kernels, numKernels, lib);
  if (kernels == nullptr || numKernels == 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  library_obj* l = find_library(lib);
  if (l == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_KERNEL_QUERY();
  // As documented: the first numKernels handles when the library has more.
  for (unsigned i = 0; i < numKernels && i < l->kernels.size(); ++i)
    kernels[i] = reinterpret_cast<CUkernel>(l->kernels[i].get());
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  SIMGPU_API(context, cuKernelGetFunction, pFunc, kernel);
  if (pFunc == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  kernel_obj* k = kernel_of_handle(kernel);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_KERNEL_QUERY();
  *pFunc = reinterpret_cast<CUfunction>(k);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  SIMGPU_API(device, cuKernelGetLibrary, pLib, kernel);
  if (pLib == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  kernel_handle* h = find_handle(kernel);
  if (h == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  *pLib = reinterpret_cast<CUlibrary>(h->library);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelGetName(const char** name, CUkernel hfunc) {
  SIMGPU_API(device, cuKernelGetName, name, hfunc);
  if (name == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  kernel_obj* k = kernel_of_handle(hfunc);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  SIMGPU_KERNEL_QUERY();
  *name = k->name.c_str();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex,
                                            size_t* paramOffset, size_t* paramSize) {
  SIMGPU_API(device, cuKernelGetParamInfo, kernel, paramIndex, paramOffset, paramSize);
  kernel_obj* k = kernel_of_handle(kernel);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (CUresult f = inject_failure(fail_kind::param_info); f != CUDA_SUCCESS) SIMGPU_RETURN(f);
  if (paramIndex >= k->params.size()) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  SIMGPU_KERNEL_QUERY();
  if (paramOffset) *paramOffset = k->params[paramIndex].offset;
  if (paramSize) *paramSize = k->params[paramIndex].size;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel,
                                            CUdevice dev) {
  SIMGPU_API(device, cuKernelGetAttribute, pi, attrib, kernel, dev);
  if (pi == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  kernel_obj* k = kernel_of_handle(kernel);
  if (k == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (dev != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  SIMGPU_KERNEL_QUERY();
  *pi = function_attribute(k, attrib);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                            CUdevice dev) {
  SIMGPU_API(device, cuKernelSetAttribute, attrib, val, kernel, dev);
  if (kernel_of_handle(kernel) == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (dev != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  SIMGPU_API(device, cuKernelSetCacheConfig, kernel, config, dev);
  if (kernel_of_handle(kernel) == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (dev != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  SIMGPU_RETURN(CUDA_SUCCESS);
}
