// What every exported driver entry point opens with: the CUPTI scope (real cbid and
// params struct), the device lock and the gate (fork, cuInit, context, sticky
// error). One line per entry point:
//
//   SIMGPU_EXPORT CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
//     SIMGPU_API(context, cuMemAlloc_v2, dptr, bytesize);
//     SIMGPU_RETURN(mem_alloc(dptr, bytesize, "cuMemAlloc", false));
//   }
//
// Entry points are defined through cuda.h's names (cuMemAlloc is #defined to
// cuMemAlloc_v2), so the exported symbols are the real ABI names; _ptsz/_ptds forms
// and the old unversioned names are spelled out.
#ifndef SIMGPU_DRIVER_API_H
#define SIMGPU_DRIVER_API_H

#include <cuda.h>

#include "cuda_meta.h"

#include "callbacks.h"
#include "common.h"
#include "device.h"

namespace simgpu {

enum class gate {
  none,     // always callable (error strings, versions, cuGetProcAddress)
  init,     // cuInit: refused only in a forked child
  device,   // needs cuInit
  context,  // needs cuInit, a current active context, and no sticky error
};

CUresult api_gate(gate g);

}  // namespace simgpu

#define SIMGPU_API_SYM(gate_, fn, symbol, ...)                                        \
  fn##_params cb_params_{__VA_ARGS__};                                                \
  ::simgpu::api_scope cb_scope_(CUPTI_DRIVER_TRACE_CBID_##fn, #fn, &cb_params_, symbol); \
  ::simgpu::lock_guard cb_lock_;                                                      \
  if (CUresult cb_gate_ = ::simgpu::api_gate(::simgpu::gate::gate_);                  \
      cb_gate_ != CUDA_SUCCESS)                                                       \
  return cb_scope_.finish(cb_gate_)

// Spelled out rather than forwarded to SIMGPU_API_SYM: forwarding would macro-expand
// fn (cuda.h #defines cuGetProcAddress to cuGetProcAddress_v2).
#define SIMGPU_API(gate_, fn, ...)                                                    \
  fn##_params cb_params_{__VA_ARGS__};                                                \
  ::simgpu::api_scope cb_scope_(CUPTI_DRIVER_TRACE_CBID_##fn, #fn, &cb_params_);      \
  ::simgpu::lock_guard cb_lock_;                                                      \
  if (CUresult cb_gate_ = ::simgpu::api_gate(::simgpu::gate::gate_);                  \
      cb_gate_ != CUDA_SUCCESS)                                                       \
  return cb_scope_.finish(cb_gate_)

// For entry points without parameters (no *_params struct exists).
#define SIMGPU_API0(gate_, fn)                                                        \
  ::simgpu::api_scope cb_scope_(CUPTI_DRIVER_TRACE_CBID_##fn, #fn, nullptr);          \
  ::simgpu::lock_guard cb_lock_;                                                      \
  if (CUresult cb_gate_ = ::simgpu::api_gate(::simgpu::gate::gate_);                  \
      cb_gate_ != CUDA_SUCCESS)                                                       \
  return cb_scope_.finish(cb_gate_)

#define SIMGPU_RETURN(expr) return cb_scope_.finish(expr)

#endif  // SIMGPU_DRIVER_API_H
