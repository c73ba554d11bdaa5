// simgpu's libcudart.so.13: loading the driver, the driver tables, the thread's
// device and context, and the CUPTI bracket around each entry point.
#include "runtime_state.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include "libcuda_link.h"

namespace simgpu::rt {
namespace {

struct library_state {
  void* handle = nullptr;
  link::get_proc_address_fn get_proc = nullptr;
  libcuda_ext ext;
};

library_state& lib_state() noexcept {
  static library_state state;
  return state;
}

struct driver_state {
  cudaError_t init_error = cudaErrorInitializationError;
  driver_table tables[2];  // [0] legacy default stream, [1] per-thread
  int device_count = 0;
};

driver_state& drv_state() noexcept {
  static driver_state state;
  return state;
}

// Note [Two initialisation levels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Kernel sources register their kernels from static initialisers, possibly before
// main and before anything else of the runtime ran; registration only needs
// libcuda's extension functions, so library() stops at dlopen + dlsym. cuInit and
// the driver tables come on the first real API call (driver_init). Both use
// call_once, so concurrent first calls are safe.
std::once_flag library_once;
std::once_flag driver_once;

void load_library() noexcept {
  library_state& s = lib_state();
  s.handle = link::open_libcuda();
  if (s.handle == nullptr) return;
  s.get_proc = reinterpret_cast<link::get_proc_address_fn>(dlsym(s.handle, "cuGetProcAddress_v2"));
  s.ext.register_kernel =
      reinterpret_cast<decltype(s.ext.register_kernel)>(dlsym(s.handle, "simgpuRegisterKernel"));
  s.ext.function_from_host = reinterpret_cast<decltype(s.ext.function_from_host)>(
      dlsym(s.handle, "simgpuFunctionFromHost"));
  s.ext.api_enter = reinterpret_cast<decltype(s.ext.api_enter)>(dlsym(s.handle, "simgpuApiEnter"));
  s.ext.api_exit = reinterpret_cast<decltype(s.ext.api_exit)>(dlsym(s.handle, "simgpuApiExit"));
}

void fill_table(driver_table& t, link::get_proc_address_fn gpa, cuuint64_t flags) noexcept {
#define SIMGPU_DRIVER_FN(name) t.name = link::driver_proc<decltype(&::name)>(gpa, #name, flags);
#include "driver_api.def"
#undef SIMGPU_DRIVER_FN
}

void init_driver() noexcept {
  driver_state& d = drv_state();
  const library_state& s = lib_state();
  if (library() == nullptr || s.get_proc == nullptr) {
    d.init_error = cudaErrorInsufficientDriver;
    return;
  }
  fill_table(d.tables[0], s.get_proc, CU_GET_PROC_ADDRESS_DEFAULT);
  fill_table(d.tables[1], s.get_proc, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  if (d.tables[0].cuInit == nullptr) {
    d.init_error = cudaErrorInsufficientDriver;
    return;
  }
  CUresult r = d.tables[0].cuInit(0);
  d.init_error = r == CUDA_SUCCESS ? cudaSuccess : to_cuda_error(r);
}

std::atomic<int> sticky{cudaSuccess};
thread_local cudaError_t thread_last_error = cudaSuccess;
thread_local int current_device = 0;

bool is_sticky(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
      return true;
    default:
      return false;
  }
}

}  // namespace

const libcuda_ext* library() noexcept {
  std::call_once(library_once, load_library);
  return lib_state().handle != nullptr ? &lib_state().ext : nullptr;
}

cudaError_t driver_init() noexcept {
  std::call_once(driver_once, init_driver);
  return drv_state().init_error;
}

const driver_table& driver(bool per_thread) noexcept {
  return drv_state().tables[per_thread ? 1 : 0];
}

decltype(&::cuGetProcAddress) get_proc_address() noexcept { return lib_state().get_proc; }

void report_missing(const char* name) noexcept {
  std::fprintf(stderr, "simgpu: libcudart: libcuda.so.1 does not provide %s\n", name);
}

int& thread_device() noexcept { return current_device; }

// Note [Lazy primary context]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// As in the real runtime, a thread that has no current context gets the primary
// context of its current device (cudaSetDevice, else 0) on its first call that
// needs one; a context made current through the driver API is used as it is. The
// runtime retains each device's primary context once and keeps it until
// cudaDeviceReset, as cudart does.
namespace {
constexpr int kMaxDevices = 64;
std::mutex primary_mutex;  // guards primary[]; held only around one retain
CUcontext primary[kMaxDevices] = {};
}  // namespace

CUresult primary_context(int device, CUcontext* ctx) noexcept {
  const driver_table& d = driver(false);
  CUdevice dev = 0;
  CUresult r = SIMGPU_CU(d, cuDeviceGet, &dev, device);
  if (r != CUDA_SUCCESS) return r;
  if (device < 0 || device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(primary_mutex);
  if (primary[device] == nullptr) {
    r = SIMGPU_CU(d, cuDevicePrimaryCtxRetain, &primary[device], dev);
    if (r != CUDA_SUCCESS) {
      primary[device] = nullptr;
      return r;
    }
  }
  *ctx = primary[device];
  return CUDA_SUCCESS;
}

void forget_primary_context(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(primary_mutex);
  primary[device] = nullptr;
}

cudaError_t ensure_context() noexcept {
  const driver_table& d = driver(false);
  CUcontext current = nullptr;
  CUresult r = SIMGPU_CU(d, cuCtxGetCurrent, &current);
  if (r != CUDA_SUCCESS) return to_cuda_error(r);
  if (current != nullptr) return cudaSuccess;
  r = primary_context(current_device, &current);
  if (r != CUDA_SUCCESS) return to_cuda_error(r);
  return to_cuda_error(SIMGPU_CU(d, cuCtxSetCurrent, current));
}

cudaError_t record_error(cudaError_t e) noexcept {
  if (e == cudaSuccess) return e;
  thread_last_error = e;
  if (is_sticky(e)) {
    int expected = cudaSuccess;
    sticky.compare_exchange_strong(expected, e);
  }
  return e;
}

cudaError_t sticky_error() noexcept { return static_cast<cudaError_t>(sticky.load()); }

void clear_sticky_error() noexcept {
  sticky.store(cudaSuccess);
  thread_last_error = cudaSuccess;
}

cudaError_t last_error(bool take) noexcept {
  cudaError_t s = sticky_error();
  if (s != cudaSuccess) return s;
  cudaError_t e = thread_last_error;
  if (take) thread_last_error = cudaSuccess;
  return e;
}

api_call::api_call(api_options options, int cbid, const char* name, const void* params) noexcept
    : options_(options), cbid_(cbid), name_(name), params_(params) {
  ext_ = library();
  if (ext_ != nullptr && ext_->api_enter != nullptr) {
    correlation_id_ = ext_->api_enter(CUPTI_CB_DOMAIN_RUNTIME_API, cbid_, name_, options_.symbol,
                                      params_, &correlation_data_);
  }
  if (options_.level == needs::library) return;
  early_ = driver_init();
  if (early_ == cudaSuccess) early_ = sticky_error();
  if (early_ == cudaSuccess && options_.level == needs::context) early_ = ensure_context();
}

api_call::~api_call() {
  if (ext_ != nullptr && ext_->api_exit != nullptr) {
    ext_->api_exit(CUPTI_CB_DOMAIN_RUNTIME_API, cbid_, name_, options_.symbol, params_, &result_,
                   correlation_id_, &correlation_data_);
  }
}

cudaError_t api_call::finish(cudaError_t e) noexcept {
  result_ = e;
  return record_error(e);
}

}  // namespace simgpu::rt
