// simgpu's libcupti.so.13: what its parts share. libcupti reaches libcuda.so.1 as
// the runtime does (../runtime/libcuda_link.h: the file next to this library, then
// the soname), installs the API and activity sinks of simgpu/ext.h there, and asks
// the driver for context, stream and device ids through cuGetProcAddress.
#ifndef SIMGPU_CUPTI_CUPTI_STATE_H
#define SIMGPU_CUPTI_CUPTI_STATE_H

#include <cuda.h>
#include <cupti.h>

#include <cstdint>

#include "simgpu/ext.h"

#define SIMGPU_EXPORT __attribute__((visibility("default")))

namespace simgpu::cupti {

struct libcuda {
  decltype(&::simgpuSetApiSink) set_api_sink = nullptr;
  decltype(&::simgpuSetActivitySink) set_activity_sink = nullptr;
  decltype(&::simgpuVirtualTimeNs) virtual_time_ns = nullptr;
  decltype(&::simgpuActivityWhenDone) activity_when_done = nullptr;
  decltype(&::cuCtxGetId) cuCtxGetId = nullptr;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
  decltype(&::cuStreamGetId) cuStreamGetId = nullptr;
  decltype(&::cuStreamGetId) cuStreamGetId_ptsz = nullptr;  // per-thread semantics
};

// libcuda.so.1 loaded and resolved, once; nullptr when it cannot be loaded (every
// CUPTI call then answers CUPTI_ERROR_NOT_INITIALIZED).
const libcuda* driver() noexcept;

// Note [No callbacks for CUPTI's own driver calls]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUPTI asking the driver for a context id must not show up in the subscriber's
// driver-domain callbacks. While a quiet_scope is open on a thread, the API sink
// drops what that thread's driver calls report.
class quiet_scope {
 public:
  quiet_scope() noexcept;
  ~quiet_scope();
  quiet_scope(const quiet_scope&) = delete;
  quiet_scope& operator=(const quiet_scope&) = delete;
  static bool active() noexcept;
};

// The id CUPTI reports for a context (cuCtxGetId), 0 for none.
uint32_t context_id(CUcontext ctx) noexcept;

// Activity side (activity.cc): flushes every buffer with records and, when
// finalizing, the empty current one too.
void flush_activity(bool finalizing) noexcept;
void disable_all_activity() noexcept;

// Callback side (callbacks.cc): drops the subscriber.
void drop_subscriber() noexcept;

}  // namespace simgpu::cupti

#endif  // SIMGPU_CUPTI_CUPTI_STATE_H
