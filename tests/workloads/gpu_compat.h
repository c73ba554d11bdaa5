// gpu_compat.h: what lets one CUDA C++ source build both with nvcc for a real GPU
// and with g++ for simgpu, plus the error checking every CUDA call goes through.
//
// - CUDA_CHECK(call): on any error prints
//     simtrain: CUDA error <name> (<string>) at <file>:<line> in <call>
//   on stderr and exits with status 1.
// - LAUNCH(kernel, grid, block, stream, args...): launches a kernel by the path
//   chosen with gpu::set_launch_path():
//     launch_path::nvcc     what nvcc-generated code does: `<<<>>>` under nvcc; under
//                           g++ the same calls CUDA 13's generated stub makes
//                           (__cudaGetKernel once per kernel, then __cudaLaunchKernel);
//     launch_path::runtime  cudaLaunchKernel((const void*)kernel, ...);
//     launch_path::ex       cudaLaunchKernelExC with a cudaLaunchConfig_t;
//   or, with a driver API path (driver_api.h, gpu::use_api), cuLaunchKernel.
//   The launch is checked, then cudaGetLastError() is checked.
// - KERNEL_FOOTPRINT(kernel, lambda): under g++ registers the kernel with simgpu
//   together with its exact footprint (SIMGPU_KERNEL_FOOTPRINT); under nvcc nothing.
// - REACH_READ(p, count), REACH_READWRITE(p, count): in a kernel body, just before
//   it accesses count elements at p, a pointer it loaded from device memory: under
//   g++ declares the exact access to simgpu (simgpu::reach_read / reach_readwrite,
//   simgpu/kernel.h); under nvcc nothing.
#ifndef SIMTRAIN_GPU_COMPAT_H
#define SIMTRAIN_GPU_COMPAT_H

#ifdef __CUDACC__
#include <cuda_runtime.h>
#else
#include "simgpu/kernel.h"
#endif

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "driver_api.h"

#ifndef __CUDACC__
// Declared by crt/device_functions.h only for nvcc; the runtime exports them.
extern "C" cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t*, const void*);
extern "C" cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**,
                                                    size_t, cudaStream_t);
#endif

namespace gpu {

enum class launch_path { nvcc, runtime, ex };

inline launch_path current_launch_path = launch_path::nvcc;

inline void set_launch_path(launch_path path) { current_launch_path = path; }

inline const char* launch_path_name(launch_path path) {
  switch (path) {
    case launch_path::nvcc: return "nvcc";
    case launch_path::runtime: return "runtime";
    case launch_path::ex: return "ex";
  }
  return "?";
}

// Reports a failed CUDA call and ends the program with status 1.
[[noreturn]] inline void fail(cudaError_t err, const char* what, const char* file,
                              int line) {
  const char* slash = std::strrchr(file, '/');
  std::fflush(stdout);
  std::fprintf(stderr, "simtrain: CUDA error %s (%s) at %s:%d in %s\n",
               cudaGetErrorName(err), cudaGetErrorString(err),
               slash != nullptr ? slash + 1 : file, line, what);
  std::fflush(stderr);
  std::exit(1);
}

inline void check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess) fail(err, what, file, line);
}

namespace detail {

template <typename Tuple, std::size_t... I>
void fill_args(Tuple& values, void** out, std::index_sequence<I...>) {
  ((out[I] = static_cast<void*>(&std::get<I>(values))), ...);
}

inline void check_launch(cudaError_t err, const char* kernel, const char* how,
                         const char* file, int line) {
  char what[160];
  std::snprintf(what, sizeof what, "%s(%s)", how, kernel);
  check(err, what, file, line);
  std::snprintf(what, sizeof what, "cudaGetLastError() after %s", kernel);
  check(cudaGetLastError(), what, file, line);
}

}  // namespace detail

// Launches through cudaLaunchKernel or cudaLaunchKernelExC; args are converted to
// the kernel's parameter types first, so the argument buffer has CUDA's layout.
template <typename... P, typename... A>
void launch_api(void (*kernel)(P...), const char* name, const char* file, int line,
                dim3 grid, dim3 block, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "wrong number of kernel arguments");
  std::tuple<P...> values(std::forward<A>(args)...);
  void* ptrs[sizeof...(P) == 0 ? 1 : sizeof...(P)] = {};
  detail::fill_args(values, ptrs, std::index_sequence_for<P...>{});
  const void* fn = reinterpret_cast<const void*>(kernel);
  if (current_api != api_path::runtime) {
    detail::check_launch(launch_driver(fn, grid, block, ptrs, stream), name, "cuLaunchKernel",
                         file, line);
  } else if (current_launch_path == launch_path::ex) {
    const cudaLaunchConfig_t config{grid, block, 0, stream, nullptr, 0};
    detail::check_launch(cudaLaunchKernelExC(&config, fn, ptrs), name,
                         "cudaLaunchKernelExC", file, line);
  } else {
    detail::check_launch(cudaLaunchKernel(fn, grid, block, ptrs, 0, stream), name,
                         "cudaLaunchKernel", file, line);
  }
}

#ifndef __CUDACC__
// The host side of `kernel<<<grid, block, 0, stream>>>(args...)` as CUDA 13's
// generated stub performs it (crt/host_runtime.h, __cudaLaunch).
template <auto Kernel, typename... P, typename... A>
void launch_generated(void (*)(P...), const char* name, const char* file, int line,
                      dim3 grid, dim3 block, cudaStream_t stream, A&&... args) {
  static cudaKernel_t handle = nullptr;
  if (handle == nullptr) {
    char what[160];
    std::snprintf(what, sizeof what, "__cudaGetKernel(%s)", name);
    check(__cudaGetKernel(&handle, reinterpret_cast<const void*>(Kernel)), what, file,
          line);
  }
  std::tuple<P...> values(std::forward<A>(args)...);
  void* ptrs[sizeof...(P) == 0 ? 1 : sizeof...(P)] = {};
  detail::fill_args(values, ptrs, std::index_sequence_for<P...>{});
  detail::check_launch(__cudaLaunchKernel(handle, grid, block, ptrs, 0, stream), name,
                       "__cudaLaunchKernel", file, line);
}

template <auto Kernel, typename... A>
void launch(const char* name, const char* file, int line, dim3 grid, dim3 block,
            cudaStream_t stream, A&&... args) {
  if (current_launch_path == launch_path::nvcc && current_api == api_path::runtime) {
    launch_generated<Kernel>(Kernel, name, file, line, grid, block, stream,
                             std::forward<A>(args)...);
  } else {
    launch_api(Kernel, name, file, line, grid, block, stream, std::forward<A>(args)...);
  }
}
#endif

}  // namespace gpu

#define CUDA_CHECK(call) ::gpu::check((call), #call, __FILE__, __LINE__)

#ifdef __CUDACC__
#define LAUNCH(kernel, grid, block, stream, ...)                                    \
  do {                                                                              \
    if (::gpu::current_launch_path == ::gpu::launch_path::nvcc &&                   \
        ::gpu::current_api == ::gpu::api_path::runtime) {                           \
      kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);                        \
      ::gpu::detail::check_launch(cudaSuccess, #kernel, "<<<>>>", __FILE__, __LINE__); \
    } else {                                                                        \
      ::gpu::launch_api(kernel, #kernel, __FILE__, __LINE__, (grid), (block), (stream), \
                        __VA_ARGS__);                                               \
    }                                                                               \
  } while (0)
#define KERNEL_FOOTPRINT(kernel, ...) static_assert(true, #kernel)
#define REACH_READ(p, count) ((void)0)
#define REACH_READWRITE(p, count) ((void)0)
#else
#define LAUNCH(kernel, grid, block, stream, ...)                                    \
  ::gpu::launch<&kernel>(#kernel, __FILE__, __LINE__, (grid), (block), (stream),    \
                         __VA_ARGS__)
#define KERNEL_FOOTPRINT(kernel, ...) SIMGPU_KERNEL_FOOTPRINT(kernel, __VA_ARGS__)
#define REACH_READ(p, count) ::simgpu::reach_read((p), (count))
#define REACH_READWRITE(p, count) ::simgpu::reach_readwrite((p), (count))
#endif

#endif  // SIMTRAIN_GPU_COMPAT_H
