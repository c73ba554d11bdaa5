// cupti_source: launches, copies and memsets as CUPTI reports them, and their
// durations from CUPTI's activity records.
//
// libcupti.so.13 is opened with dlopen by soname (never linked: a preload that
// needs it would break processes that never touch CUDA). The subscriber follows
// the CUPTI samples: one callback switched on domain, then callback id, then
// enter/exit; typed parameter structs; activity buffers handed out and walked by
// two callbacks; one forced flush (flush()) at the end. Errors are never fatal: a
// CUPTI that cannot be had is reported to the caller, which falls back to the
// interposer's own hooks.
//
// Note [One launch, two domains]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The runtime reaches the driver, so a
// cudaLaunchKernel is also a cuLaunchKernel on the same thread. A launch is taken
// at the runtime-domain enter (it carries the function and the argument pointers);
// a driver-domain launch is taken only when no runtime launch is open on that
// thread (cuBLAS, cuDNN and other driver-level callers), or when the open one gave
// no params (Note [Launches without params]). The same holds for copies
// and memsets (runtime domain only: the driver-level ones of libraries are counted
// by the activity records, not placed in the launch order).
//
// Note [Launches without params]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUPTI 13 defines callback ids for
// __cudaLaunchKernel(_ptsz), what nvcc 13's <<<...>>> calls, but no params struct,
// so their callbacks carry functionParams == NULL (as simgpu gives them; any runtime
// launch callback without params is treated the same). Such a launch is taken from
// the driver-level cuLaunchKernel(Ex) callback the runtime makes underneath on the
// same thread, with the same correlation id, so the kernel's activity record still
// finds it: the function is then the runtime's CUkernel (cudaKernel_t is CUkernel)
// passed as a CUfunction, its layout read with cuKernelGetParamInfo when
// cuFuncGetParamInfo refuses it (session.h). Only the first driver launch under such
// a runtime launch is taken.
//
// That relies on the driver callback sharing the runtime call's correlation id (as
// simgpu gives it). CUPTI's documentation gives every API call its own id and a
// runtime-launched kernel's record the runtime call's, so a launch that came through
// oversub's own runtime hook is taken from the hook instead: the hook names the
// function and arguments it is about to pass (note_hook_launch) and the runtime
// callback without params takes them with its own correlation id. The driver-level
// path remains for callers oversub's hooks do not see (a runtime reached through
// its own handle, a statically linked one).
//
// Note [More than one sink]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// CUPTI allows one subscriber per process on older
// drivers, and two parts of oversub want what it reports: the profiling session
// (session.h) and the swap and um learners' launch timing (launch_timing.h). So
// oversub subscribes once and hands every callback and record to each sink that
// asked (at most max_sinks); the second subscribe() adds its sink and gets the first
// one's outcome. A sink added later sees only what happens after it was added.
#ifndef OVERSUB_PROFILER_CUPTI_SOURCE_H
#define OVERSUB_PROFILER_CUPTI_SOURCE_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "profiler/profile_format.h"

namespace oversub::profiler::cupti {

// What the source reports to (the session).
class sink {
 public:
  virtual void runtime_launch(const void* func, void** args, std::uint32_t correlation_id) = 0;
  virtual void driver_launch(void* func, void** params, void** extra, const char* symbol,
                             std::uint32_t correlation_id) = 0;
  // kind other: infer from the addresses (cudaMemcpyDefault).
  virtual void copy(copy_kind kind, std::uint64_t bytes, const void* dst, const void* src,
                    std::uint32_t correlation_id) = 0;
  // start_ns: when the kernel began, on CUPTI's clock (only differences mean
  // anything); ns: how long it ran.
  virtual void kernel_time(std::uint32_t correlation_id, std::uint64_t start_ns,
                           std::uint64_t ns) = 0;
  // host_pageable: the host side of an h2d or d2h copy is pageable memory, staged
  // by the CPU (a program's plain copies); the residency engine's host copies are
  // pinned or host-located VMM memory, and cross the link at its rate.
  virtual void copy_time(std::uint32_t correlation_id, copy_kind kind, std::uint64_t bytes,
                         std::uint64_t ns, bool host_pageable) = 0;

 protected:
  ~sink() = default;
};

enum class outcome { subscribed, held, unavailable };

constexpr std::size_t max_sinks = 4;

// Subscribes (once per process) and enables the callbacks and activity kinds, then
// adds `to` to the sinks (Note [More than one sink]); a later call only adds its
// sink and returns the first call's outcome and detail. held: another subscriber has
// CUPTI, *detail names it; unavailable: no libcupti, a CUPTI error or no room for
// another sink, *detail says which.
outcome subscribe(sink* to, std::string* detail) noexcept;

// See Note [CUPTI at rest]: `s` needs no callback or record for now (resting) or
// needs them again; returns whether CUPTI is at rest after the call (every sink
// resting). Never from inside a CUPTI callback.
bool rest(sink* s, bool resting) noexcept;

// Note [CUPTI at rest]
// ~~~~~~~~~~~~~~~~~~~~
// While oversub listens, CUPTI calls it at the enter and exit of every launch and copy
// (the callbacks above), on the application's thread. The learners need those calls
// only to bind a launch they time to its kernel record, while they learn or tune an
// iteration (Note [Tagging launches] in profiler/launch_timing.h); a learned schedule
// followed untuned tags nothing. So a sink says when it rests, and while every sink
// rests (the profiling session never does) oversub disables its subscriber's callbacks,
// and enables them again when one wants them: the swap and um learners rest while they
// follow a schedule they are not tuning, and wake at the first launch they trace again
// (a deviation, a new layout). The activity kinds stay enabled: they are the
// process's, not the subscriber's, and a profiler the application runs (torch.profiler)
// may have enabled them too; records nobody tagged are dropped as they come. On simgpu,
// where the callbacks are simgpu's own code, they cost an empty kernel's launch under
// swap about 0.6 us (docs/results.md, "CUPTI at rest").

// The launch the calling thread's runtime launch hook is about to make, for a
// runtime callback without params (Note [Launches without params]); cleared after
// the call. Thread-local stores only.
void note_hook_launch(const void* func, void** args) noexcept;
void clear_hook_launch() noexcept;

// Delivers every activity record still buffered (forced flush).
void flush() noexcept;

// See Note [A clock without CUPTI] in core/schedule_costs.cc: a host clock in ns for timing
// the engine's own calls and copies, chosen once by the caller: CUPTI's
// (cuptiGetTimestamp) wherever the library loaded, subscribed or held by another tool,
// else the host's monotonic clock. Null while CUPTI's clock does not answer yet (0 or
// an error): ask again later. The clock returned answers 0 only where CUPTI's, having
// answered when chosen, fails later.
using clock_fn = std::uint64_t (*)() noexcept;
clock_fn host_clock() noexcept;

}  // namespace oversub::profiler::cupti

#endif  // OVERSUB_PROFILER_CUPTI_SOURCE_H
