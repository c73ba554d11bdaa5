// Profiling glue of the hooks (see profile_hooks.h), and oversub's own exported
// entry point oversub_iteration_begin() (version node OVERSUB_0, exports.map.in).
#include "interpose/profile_hooks.h"

#include <dlfcn.h>

#include "common/options.h"
#include "common/tracker.h"
#include "interpose/abi_guard.h"
#include "interpose/real.h"

namespace oversub::interpose {

std::atomic<int> g_profile_on{-1};

namespace {

using runtime_param_info_t = decltype(&::cudaFuncGetParamInfo);
using runtime_name_t = decltype(&::cudaFuncGetName);
runtime_param_info_t g_runtime_param_info = nullptr;
runtime_name_t g_runtime_name = nullptr;
using driver_param_info_t = int (*)(void*, size_t, size_t*, size_t*);
using driver_name_t = int (*)(const char**, void*);
using error_t = decltype(&::cudaGetLastError);
error_t g_peek_error = nullptr;
error_t g_take_error = nullptr;
driver_param_info_t g_driver_param_info = nullptr;
driver_name_t g_driver_name = nullptr;
driver_param_info_t g_kernel_param_info = nullptr;  // cuKernelGetParamInfo (CUDA 12.4+)
driver_name_t g_kernel_name = nullptr;              // cuKernelGetName (CUDA 12.3+)

int runtime_param_info(const void* f, std::size_t i, std::size_t* off, std::size_t* size) {
  return static_cast<int>(g_runtime_param_info(f, i, off, size));
}
int runtime_name(const char** name, const void* f) {
  return static_cast<int>(g_runtime_name(name, f));
}
int driver_param_info(void* f, std::size_t i, std::size_t* off, std::size_t* size) {
  return g_driver_param_info(f, i, off, size);
}
int driver_name(const char** name, void* f) { return g_driver_name(name, f); }
int kernel_param_info(void* k, std::size_t i, std::size_t* off, std::size_t* size) {
  return g_kernel_param_info(k, i, off, size);
}
int kernel_name(const char** name, void* k) { return g_kernel_name(name, k); }
int peek_error() { return static_cast<int>(g_peek_error()); }
int take_error() { return static_cast<int>(g_take_error()); }

profiler::cuda_queries resolve_queries() {
  g_runtime_param_info =
      reinterpret_cast<runtime_param_info_t>(dlsym(RTLD_DEFAULT, "cudaFuncGetParamInfo"));
  g_runtime_name = reinterpret_cast<runtime_name_t>(dlsym(RTLD_DEFAULT, "cudaFuncGetName"));
  g_peek_error = reinterpret_cast<error_t>(dlsym(RTLD_DEFAULT, "cudaPeekAtLastError"));
  g_take_error = reinterpret_cast<error_t>(dlsym(RTLD_DEFAULT, "cudaGetLastError"));
  if (void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
    g_driver_param_info = reinterpret_cast<driver_param_info_t>(dlsym(cuda, "cuFuncGetParamInfo"));
    g_driver_name = reinterpret_cast<driver_name_t>(dlsym(cuda, "cuFuncGetName"));
    g_kernel_param_info =
        reinterpret_cast<driver_param_info_t>(dlsym(cuda, "cuKernelGetParamInfo"));
    g_kernel_name = reinterpret_cast<driver_name_t>(dlsym(cuda, "cuKernelGetName"));
    dlclose(cuda);
  }
  profiler::cuda_queries q;
  if (g_runtime_param_info) q.runtime_param_info = &runtime_param_info;
  if (g_runtime_name) q.runtime_name = &runtime_name;
  if (g_driver_param_info) q.driver_param_info = &driver_param_info;
  if (g_driver_name) q.driver_name = &driver_name;
  if (g_kernel_param_info) q.kernel_param_info = &kernel_param_info;
  if (g_kernel_name) q.kernel_name = &kernel_name;
  if (g_peek_error) q.runtime_peek_error = &peek_error;
  if (g_take_error) q.runtime_take_error = &take_error;
  return q;
}

}  // namespace

const profiler::cuda_queries& cuda_queries() noexcept {
  static const profiler::cuda_queries q = resolve_queries();
  return q;
}

bool decide_profiling() noexcept {
  const bool on = profiler::wanted(current_config());
  int expected = -1;
  if (!g_profile_on.compare_exchange_strong(expected, on ? 1 : 0)) return expected == 1;
  if (!on) return false;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  call_real<hook_id::cudaMemGetInfo>(hook_id::cudaMemGetInfo, &free_bytes, &total_bytes);
  profiler::start(core(), cuda_queries(), total_bytes);
  return true;
}

void profile_alloc(const void* base, std::uint64_t bytes) {
  if (profiling()) profiler::on_alloc(reinterpret_cast<std::uint64_t>(base), bytes);
}

void profile_free(const void* base) {
  if (base != nullptr && profiling()) profiler::on_free(reinterpret_cast<std::uint64_t>(base));
}

profiler::copy_kind profile_copy_kind(cudaMemcpyKind kind) noexcept {
  switch (kind) {
    case cudaMemcpyHostToDevice: return profiler::copy_kind::h2d;
    case cudaMemcpyDeviceToHost: return profiler::copy_kind::d2h;
    case cudaMemcpyDeviceToDevice: return profiler::copy_kind::d2d;
    default: return profiler::copy_kind::other;
  }
}

}  // namespace oversub::interpose

// See Note [Nothing crosses the ABI edge] in interpose/abi_guard.h.
extern "C" __attribute__((visibility("default"))) void oversub_iteration_begin() noexcept {
  try {
    oversub::profiler::iteration_begin();
  } catch (...) {
    oversub::interpose::drop_thrown("oversub_iteration_begin");
  }
}
