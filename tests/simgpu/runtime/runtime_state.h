// simgpu's libcudart.so.13: what every runtime entry point shares.
//
// The runtime is a thin layer over the driver API, as the real cudart is: it opens
// libcuda.so.1 with dlopen (libcuda_link.h), takes every driver function through
// cuGetProcAddress (driver_api.def lists them), keeps the per-thread current device
// and last error, maps CUresult to cudaError_t, and brackets each call with the
// CUPTI runtime-domain callbacks that libcuda forwards to libcupti.
//
// An entry point is written as
//
//   SIMGPU_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
//     SIMGPU_RT_CALL(ctx, cudaMalloc_v3020, devPtr, size);
//     return api.finish(SIMGPU_CU(api.drv(), cuMemAlloc, ...));
//   }
//
// SIMGPU_RT_CALL builds the CUPTI params struct named by the callback id from the
// arguments, fires the entry callback, makes sure the runtime is initialised to the
// level asked for, and returns early with the initialisation (or sticky) error;
// api.finish records the result as the thread's last error and the guard's
// destructor fires the exit callback with it.
#ifndef SIMGPU_RUNTIME_RUNTIME_STATE_H
#define SIMGPU_RUNTIME_RUNTIME_STATE_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_callbacks.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>

#include <cstdint>

#include "simgpu/ext.h"

#define SIMGPU_EXPORT __attribute__((visibility("default")))

namespace simgpu::rt {

// Typed pointers to the driver functions in driver_api.def. A member is nullptr
// when the driver does not export that function.
struct driver_table {
#define SIMGPU_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "driver_api.def"
#undef SIMGPU_DRIVER_FN
};

// The simgpu extension functions (ext.h), taken with dlsym.
struct libcuda_ext {
  decltype(&::simgpuRegisterKernel) register_kernel = nullptr;
  decltype(&::simgpuFunctionFromHost) function_from_host = nullptr;
  decltype(&::simgpuApiEnter) api_enter = nullptr;
  decltype(&::simgpuApiExit) api_exit = nullptr;
};

// libcuda.so.1 opened and its extension functions resolved, without cuInit (safe
// from static initialisers). nullptr when libcuda.so.1 cannot be loaded.
const libcuda_ext* library() noexcept;

// cuInit done and both driver tables filled, once per process. cudaSuccess, or
// what the real runtime returns: cudaErrorInsufficientDriver when there is no
// usable libcuda, otherwise cuInit's error mapped.
cudaError_t driver_init() noexcept;

// The driver functions with legacy (per_thread false) or per-thread default stream
// semantics. Valid after driver_init() succeeded.
const driver_table& driver(bool per_thread) noexcept;

// libcuda's cuGetProcAddress (_v2 ABI), or nullptr; valid after library().
decltype(&::cuGetProcAddress) get_proc_address() noexcept;

// Calls fn when the driver has it; CUDA_ERROR_NOT_SUPPORTED (and one line on
// stderr naming the function) when it does not.
void report_missing(const char* name) noexcept;
template <typename Fn, typename... A>
CUresult call(Fn fn, const char* name, A... args) noexcept {
  if (fn == nullptr) {
    report_missing(name);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return fn(args...);
}
#define SIMGPU_CU(table, fn, ...) ::simgpu::rt::call((table).fn, #fn __VA_OPT__(, ) __VA_ARGS__)

// CUresult -> cudaError_t as the real runtime maps them.
cudaError_t to_cuda_error(CUresult r) noexcept;

// The primary context of the thread's current device made current on this thread
// when no context is (the real runtime's lazy context creation).
cudaError_t ensure_context() noexcept;

// The primary context of device ordinal `device`, retained once per process (again
// after forget_primary_context, which cudaDeviceReset calls).
CUresult primary_context(int device, CUcontext* ctx) noexcept;
void forget_primary_context(int device) noexcept;

// The thread's current device (cudaSetDevice), 0 until set.
int& thread_device() noexcept;

// Records a call's result: the thread's last error, and the process-wide sticky
// error for the codes that corrupt a context. Returns e.
cudaError_t record_error(cudaError_t e) noexcept;
// The sticky error (cudaSuccess when none); cleared by a successful cudaDeviceReset.
cudaError_t sticky_error() noexcept;
void clear_sticky_error() noexcept;
// The thread's last error; take() resets it to cudaSuccess unless sticky.
cudaError_t last_error(bool take) noexcept;

// What an entry point needs before it can run.
enum class needs {
  library,  // nothing (error strings, versions): no cuInit, not stopped by sticky errors
  driver,   // cuInit (device queries)
  context,  // a current context (everything that allocates, copies or launches)
};

struct api_options {
  needs level;
  bool per_thread;               // a _ptsz/_ptds entry point
  const char* symbol = nullptr;  // kernel name for launches
};
inline constexpr api_options lib{needs::library, false};
inline constexpr api_options drv{needs::driver, false};
inline constexpr api_options ctx{needs::context, false};
inline constexpr api_options ctx_pt{needs::context, true};

// RAII bracket of one runtime entry point (see the top of this file).
class api_call {
 public:
  api_call(api_options options, int cbid, const char* name, const void* params) noexcept;
  ~api_call();
  api_call(const api_call&) = delete;
  api_call& operator=(const api_call&) = delete;

  // Initialisation or sticky error that stops the call before it runs.
  cudaError_t early() const noexcept { return early_; }
  // The driver functions with this entry point's default-stream semantics.
  const driver_table& drv() const noexcept { return driver(options_.per_thread); }
  // Records e as the call's result (last error, exit callback) and returns it.
  cudaError_t finish(cudaError_t e) noexcept;
  cudaError_t finish(CUresult r) noexcept { return finish(to_cuda_error(r)); }
  // For entry points that return something other than cudaError_t.
  void set_result(cudaError_t e) noexcept { result_ = e; }

 private:
  api_options options_;
  int cbid_;
  const char* name_;
  const void* params_;
  const libcuda_ext* ext_ = nullptr;
  cudaError_t early_ = cudaSuccess;
  cudaError_t result_ = cudaSuccess;
  uint32_t correlation_id_ = 0;
  uint64_t correlation_data_ = 0;
};

// The stream a _ptsz entry point means by 0.
inline cudaStream_t per_thread_stream(cudaStream_t s) noexcept {
  return s == nullptr ? cudaStreamPerThread : s;
}

}  // namespace simgpu::rt

// Note [One line per entry point]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The params struct is aggregate-initialised from the arguments in declaration
// order, which is the order of the generated *_params structs; the callback id and
// the function name CUPTI reports ("cudaMalloc_v3020") come from the same token.
#define SIMGPU_RT_CALL(options, cbid, ...)                                                        \
  cbid##_params simgpu_params_{__VA_ARGS__};                                                      \
  ::simgpu::rt::api_call api((options), CUPTI_RUNTIME_TRACE_CBID_##cbid, #cbid, &simgpu_params_); \
  if (api.early() != cudaSuccess) return api.finish(api.early())

// The same for the entry points whose callback has no params struct.
#define SIMGPU_RT_CALL0(options, cbid)                                                    \
  ::simgpu::rt::api_call api((options), CUPTI_RUNTIME_TRACE_CBID_##cbid, #cbid, nullptr); \
  if (api.early() != cudaSuccess) return api.finish(api.early())

#endif  // SIMGPU_RUNTIME_RUNTIME_STATE_H
