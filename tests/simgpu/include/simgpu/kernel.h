// Writing kernels for simgpu: CUDA C++ kernel source compiled by a host compiler.
//
// A kernel is written as for nvcc (a __global__ function using threadIdx, blockIdx,
// blockDim and gridDim, no shared memory or __syncthreads) and registered once at
// namespace scope:
//
//   __global__ void axpy(float* y, const float* x, float a, int n) {
//     int i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i < n) y[i] += a * x[i];
//   }
//   SIMGPU_KERNEL(axpy);                       // footprint derived from the args
//   // or, with an exact footprint for the race detector and the virtual clock:
//   SIMGPU_KERNEL_FOOTPRINT(axpy, [](simgpu::footprint& fp, float* y,
//                                    const float* x, float, int n) {
//     fp.readwrite(y, n); fp.read(x, n); fp.flops(2.0 * n);
//   });
//
// Registration records the parameter layout (offsets and sizes as CUDA lays them
// out, so cudaFuncGetParamInfo answers as on a GPU) and a runner that executes the
// whole grid on the calling thread, one call per CUDA thread, in (block, thread)
// order. Launch with cudaLaunchKernel((const void*)axpy, ...) or through
// __cudaGetKernel/__cudaLaunchKernel as nvcc-generated code does.
//
// A kernel that reaches memory through a pointer it loaded from device memory (its
// footprint can only name the pointer table) declares each such access just before
// making it, so the race detector sees exactly what it touches, not whole pages:
//
//   __global__ void scale_indirect(float* const* table, int slot, int n) {
//     int i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i >= n) return;
//     float* w = table[slot];
//     simgpu::reach_readwrite(w + i, 1);
//     w[i] *= 2.0f;
//   }
//
// (simgpuReach in simgpu/ext.h; Note [Accesses a kernel really makes] in
// tests/simgpu/driver/fault.h).
//
// Only for host-compiled sources run on simgpu; never included by oversub.
#ifndef SIMGPU_KERNEL_H
#define SIMGPU_KERNEL_H

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <type_traits>
#include <utility>

#include "simgpu/ext.h"

// The CUDA built-in index variables of the CUDA thread the calling host thread is
// executing. Real variables (not macros), so struct fields and parameters with the
// same names, like cudaLaunchConfig_t::gridDim, keep working; under nvcc
// device_launch_parameters.h declares them instead and this header is not used.
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

namespace simgpu {

// Typed builder for a simgpuFootprint.
class footprint {
 public:
  explicit footprint(simgpuFootprint* fp) : fp_(fp) {}
  template <typename T>
  void read(const T* p, std::size_t count) { add(p, count * sizeof(T), SIMGPU_READ); }
  template <typename T>
  void write(T* p, std::size_t count) { add(p, count * sizeof(T), SIMGPU_WRITE); }
  template <typename T>
  void readwrite(T* p, std::size_t count) { add(p, count * sizeof(T), SIMGPU_READWRITE); }
  void flops(double n) { fp_->flops += n; }

 private:
  void add(const void* p, std::size_t bytes, int mode) {
    if (p == nullptr || bytes == 0) return;
    if (fp_->count >= SIMGPU_MAX_ACCESSES) {
      // A range dropped here would be an access the race detector never sees.
      std::fprintf(stderr, "simgpu: a kernel footprint declares more than %d ranges\n",
                   SIMGPU_MAX_ACCESSES);
      std::abort();
    }
    fp_->accesses[fp_->count++] = simgpuAccess{p, bytes, mode};
  }
  simgpuFootprint* fp_;
};

namespace detail {

using reach_fn = void (*)(const void*, size_t, int);

// simgpuReach of the libcuda.so.1 this process runs on (kernel sources link against
// the runtime only), or nullptr when none is loaded: then no kernel runs here.
inline reach_fn reach_entry() {
  static const reach_fn entry = []() -> reach_fn {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h != nullptr ? reinterpret_cast<reach_fn>(dlsym(h, "simgpuReach")) : nullptr;
  }();
  return entry;
}

}  // namespace detail

// Declares that the calling kernel body is about to access count elements at p,
// which it found through a pointer stored in device memory.
inline void reach(const void* p, std::size_t bytes, bool writes) {
  if (detail::reach_fn f = detail::reach_entry()) f(p, bytes, writes ? 1 : 0);
}
template <typename T>
void reach_read(const T* p, std::size_t count) { reach(p, count * sizeof(T), false); }
template <typename T>
void reach_write(T* p, std::size_t count) { reach(p, count * sizeof(T), true); }
template <typename T>
void reach_readwrite(T* p, std::size_t count) { reach(p, count * sizeof(T), true); }

namespace detail {

template <typename T>
constexpr int param_flags() {
  if constexpr (std::is_pointer_v<T>) {
    return std::is_const_v<std::remove_pointer_t<T>> ? SIMGPU_PARAM_CONST_POINTER
                                                     : SIMGPU_PARAM_POINTER;
  } else {
    return 0;
  }
}

template <typename... A>
struct param_layout {
  static constexpr std::size_t count = sizeof...(A);
  simgpuParamInfo info[count == 0 ? 1 : count]{};
  constexpr param_layout() {
    std::size_t offset = 0;
    std::size_t i = 0;
    ((offset = (offset + alignof(A) - 1) / alignof(A) * alignof(A),
      info[i] = simgpuParamInfo{offset, sizeof(A), param_flags<A>()},
      offset += sizeof(A), ++i),
     ...);
  }
};

template <typename... A, std::size_t... I>
std::tuple<A...> unpack(void** args, std::index_sequence<I...>) {
  return std::tuple<A...>(*static_cast<std::remove_reference_t<A>*>(args[I])...);
}

template <auto Fn>
struct kernel_traits;

template <typename... A, void (*Fn)(A...)>
struct kernel_traits<Fn> {
  using footprint_fn = void (*)(footprint&, A...);
  static inline footprint_fn user_footprint = nullptr;

  static void run(void** args, dim3 grid, dim3 block) {
    auto values = unpack<A...>(args, std::index_sequence_for<A...>{});
    ::gridDim = grid;
    ::blockDim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx)
          for (unsigned tz = 0; tz < block.z; ++tz)
            for (unsigned ty = 0; ty < block.y; ++ty)
              for (unsigned tx = 0; tx < block.x; ++tx) {
                ::blockIdx = uint3{bx, by, bz};
                ::threadIdx = uint3{tx, ty, tz};
                std::apply(Fn, values);
              }
  }

  static void run_footprint(void** args, dim3, dim3, simgpuFootprint* fp) {
    auto values = unpack<A...>(args, std::index_sequence_for<A...>{});
    footprint builder(fp);
    std::apply([&](auto&&... v) { user_footprint(builder, v...); }, values);
  }

  static void do_register(const char* fallback_name, footprint_fn fp) {
    static constexpr param_layout<A...> layout{};
    user_footprint = fp;
    // Prefer the mangled symbol name, as CUPTI reports it on a GPU; fall back to
    // the source name when the symbol is not in the dynamic table.
    const char* name = fallback_name;
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(Fn), &info) != 0 && info.dli_sname != nullptr &&
        info.dli_saddr == reinterpret_cast<void*>(Fn)) {
      name = info.dli_sname;
    }
    __simgpuRegisterKernel(reinterpret_cast<const void*>(Fn), name, layout.info,
                           layout.count, &run, fp ? &run_footprint : nullptr);
  }
};

template <auto Fn>
struct registrar {
  explicit registrar(const char* name,
                     typename kernel_traits<Fn>::footprint_fn fp = nullptr) {
    kernel_traits<Fn>::do_register(name, fp);
  }
};

}  // namespace detail
}  // namespace simgpu

#define SIMGPU_KERNEL(fn) \
  static const ::simgpu::detail::registrar<&fn> simgpu_registrar_##fn{#fn}
#define SIMGPU_KERNEL_FOOTPRINT(fn, ...) \
  static const ::simgpu::detail::registrar<&fn> simgpu_registrar_##fn{#fn, __VA_ARGS__}

#endif  // SIMGPU_KERNEL_H
