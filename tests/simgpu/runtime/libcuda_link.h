// How simgpu's libcudart.so.13 and libcupti.so.13 find libcuda.so.1: the way the
// real libraries do, with dlopen and no NEEDED entry, so that a preloaded tool's
// dlsym and cuGetProcAddress hooks see the same traffic as on a GPU machine.
//
// Header-only on purpose: each library gets its own (hidden) copy, so the dladdr
// below answers with the path of the library that includes it.
#ifndef SIMGPU_RUNTIME_LIBCUDA_LINK_H
#define SIMGPU_RUNTIME_LIBCUDA_LINK_H

#include <cuda.h>
#include <dlfcn.h>

#include <string>

namespace simgpu::link {

// Note [Which libcuda.so.1]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The file next to the calling library comes first: a test run with
// LD_LIBRARY_PATH pointing at the build folder and a system that also has a real
// (or another) libcuda.so.1 must still pair our runtime with our driver. The soname
// is the fallback, as the real runtime uses it. RTLD_GLOBAL is not used: nothing
// resolves symbols through libcuda except by dlsym on this handle.
inline void* open_libcuda() noexcept {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&open_libcuda), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::string path(info.dli_fname);
    std::string::size_type slash = path.rfind('/');
    if (slash != std::string::npos) {
      path.resize(slash + 1);
      path += "libcuda.so.1";
      if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
  }
  return dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
}

using get_proc_address_fn = decltype(&::cuGetProcAddress);  // the _v2 ABI

// The CUDA version simgpu's libraries ask the driver for (CUDA 13.0).
inline constexpr int kCudaVersion = 13000;

// One driver function by base name ("cuMemAlloc"), as cuGetProcAddress answers
// it for kCudaVersion; nullptr when the driver does not have it.
template <typename Fn>
Fn driver_proc(get_proc_address_fn gpa, const char* name,
               cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) noexcept {
  if (gpa == nullptr) return nullptr;
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (gpa(name, &fn, kCudaVersion, flags, &status) != CUDA_SUCCESS ||
      status != CU_GET_PROC_ADDRESS_SUCCESS) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace simgpu::link

#endif  // SIMGPU_RUNTIME_LIBCUDA_LINK_H
