// simgpu's libcupti.so.13: loading libcuda.so.1, ids, results, version, clock and
// cuptiFinalize.
#include "cupti_state.h"

#include <dlfcn.h>

#include <mutex>

#include "../runtime/libcuda_link.h"

namespace simgpu::cupti {
namespace {

libcuda g_driver;
bool g_loaded = false;
std::once_flag g_once;
thread_local int t_quiet = 0;

void load() noexcept {
  void* h = link::open_libcuda();
  if (h == nullptr) return;
  auto gpa = reinterpret_cast<link::get_proc_address_fn>(dlsym(h, "cuGetProcAddress_v2"));
  g_driver.set_api_sink =
      reinterpret_cast<decltype(g_driver.set_api_sink)>(dlsym(h, "simgpuSetApiSink"));
  g_driver.set_activity_sink =
      reinterpret_cast<decltype(g_driver.set_activity_sink)>(dlsym(h, "simgpuSetActivitySink"));
  g_driver.virtual_time_ns =
      reinterpret_cast<decltype(g_driver.virtual_time_ns)>(dlsym(h, "simgpuVirtualTimeNs"));
  g_driver.activity_when_done = reinterpret_cast<decltype(g_driver.activity_when_done)>(
      dlsym(h, "simgpuActivityWhenDone"));
  g_driver.cuCtxGetId = link::driver_proc<decltype(g_driver.cuCtxGetId)>(gpa, "cuCtxGetId");
  g_driver.cuCtxGetCurrent =
      link::driver_proc<decltype(g_driver.cuCtxGetCurrent)>(gpa, "cuCtxGetCurrent");
  g_driver.cuCtxGetDevice =
      link::driver_proc<decltype(g_driver.cuCtxGetDevice)>(gpa, "cuCtxGetDevice");
  g_driver.cuStreamGetId =
      link::driver_proc<decltype(g_driver.cuStreamGetId)>(gpa, "cuStreamGetId");
  g_driver.cuStreamGetId_ptsz = link::driver_proc<decltype(g_driver.cuStreamGetId)>(
      gpa, "cuStreamGetId", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  g_loaded = g_driver.set_api_sink != nullptr && g_driver.set_activity_sink != nullptr;
}

}  // namespace

const libcuda* driver() noexcept {
  std::call_once(g_once, load);
  return g_loaded ? &g_driver : nullptr;
}

quiet_scope::quiet_scope() noexcept { ++t_quiet; }
quiet_scope::~quiet_scope() { --t_quiet; }
bool quiet_scope::active() noexcept { return t_quiet > 0; }

uint32_t context_id(CUcontext ctx) noexcept {
  const libcuda* d = driver();
  if (ctx == nullptr || d == nullptr || d->cuCtxGetId == nullptr) return 0;
  quiet_scope quiet;
  unsigned long long id = 0;
  if (d->cuCtxGetId(ctx, &id) != CUDA_SUCCESS) return 0;
  return static_cast<uint32_t>(id);
}

}  // namespace simgpu::cupti

using namespace simgpu::cupti;

extern "C" {

SIMGPU_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (str == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
#define SIMGPU_RESULT(name) \
  case name:                \
    *str = #name;           \
    return CUPTI_SUCCESS;
#include "cupti_results.inc"
#undef SIMGPU_RESULT
    default:
      *str = nullptr;
      return CUPTI_ERROR_INVALID_PARAMETER;
  }
}

SIMGPU_EXPORT CUptiResult cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

// The virtual clock: the same ns that activity records carry.
SIMGPU_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  const libcuda* d = driver();
  if (d == nullptr || d->virtual_time_ns == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  *timestamp = d->virtual_time_ns();
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiGetContextId(CUcontext context, uint32_t* contextId) {
  if (contextId == nullptr || context == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  const libcuda* d = driver();
  if (d == nullptr || d->cuCtxGetId == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  quiet_scope quiet;
  unsigned long long id = 0;
  if (d->cuCtxGetId(context, &id) != CUDA_SUCCESS) return CUPTI_ERROR_INVALID_CONTEXT;
  *contextId = static_cast<uint32_t>(id);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiGetStreamIdEx(CUcontext context, CUstream stream,
                                             uint8_t perThreadStream, uint32_t* streamId) {
  (void)context;
  if (streamId == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  const libcuda* d = driver();
  auto get = d == nullptr ? nullptr : perThreadStream ? d->cuStreamGetId_ptsz : d->cuStreamGetId;
  if (get == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  quiet_scope quiet;
  unsigned long long id = 0;
  if (get(stream, &id) != CUDA_SUCCESS) return CUPTI_ERROR_INVALID_STREAM;
  *streamId = static_cast<uint32_t>(id);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiGetStreamId(CUcontext context, CUstream stream, uint32_t* streamId) {
  return cuptiGetStreamIdEx(context, stream, 0, streamId);
}

// simgpu has one context per device and one device model; the device of the
// context current on this thread answers for a null or current context.
SIMGPU_EXPORT CUptiResult cuptiGetDeviceId(CUcontext context, uint32_t* deviceId) {
  if (deviceId == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  const libcuda* d = driver();
  if (d == nullptr || d->cuCtxGetDevice == nullptr || d->cuCtxGetCurrent == nullptr) {
    return CUPTI_ERROR_NOT_INITIALIZED;
  }
  quiet_scope quiet;
  CUcontext current = nullptr;
  if (d->cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) {
    return CUPTI_ERROR_INVALID_CONTEXT;
  }
  if (context != nullptr && context != current) return CUPTI_ERROR_INVALID_CONTEXT;
  CUdevice dev = 0;
  if (d->cuCtxGetDevice(&dev) != CUDA_SUCCESS) return CUPTI_ERROR_INVALID_CONTEXT;
  *deviceId = static_cast<uint32_t>(dev);
  return CUPTI_SUCCESS;
}

// Flushes every activity buffer (the empty current one included, so the client
// can free it), disables activity kinds and drops the subscriber.
SIMGPU_EXPORT CUptiResult cuptiFinalize(void) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  flush_activity(true);
  disable_all_activity();
  drop_subscriber();
  return CUPTI_SUCCESS;
}

}  // extern "C"
