// session: the profiler of one process, as the interposer sees it.
//
// Profiling is on when OVERSUB_PROFILE_OUT names a file and the mode is not off.
// The interposer starts the session at its first hooked call (start()), tells it
// about allocations and frees, and, where CUPTI could not be had, about launches,
// copies and memsets from its own hooks. The session:
//
//   - subscribes to CUPTI (cupti_source.h); when another tool holds it, it logs
//     which one and falls back to the interposer's launch hooks (what is then not
//     seen is logged too);
//   - scans each launch's argument words against the live allocations (the
//     tracker's interval map) into the launch's buffer set;
//   - takes a call site per allocation (libunwind, opened with dlopen; glibc's
//     backtrace when it is missing) and symbolizes it with dladdr when the profile
//     is written;
//   - writes the profile (profile_format.h) once: at exit, or as soon as
//     OVERSUB_PROFILE_ITERATIONS iterations have been seen; reports progress
//     (`oversub: profile: ...` lines at info level) as iterations complete.
//
// Every entry point is noexcept and never lets an exception or an error escape
// into the application: a profiler that fails logs once and stops profiling.
#ifndef OVERSUB_PROFILER_SESSION_H
#define OVERSUB_PROFILER_SESSION_H

#include <cstddef>
#include <cstdint>
#include <vector>
#include <string>

#include "profiler/launch_scan.h"
#include "profiler/profile_format.h"

namespace oversub {
class tracker;
struct config;
}  // namespace oversub

namespace oversub::profiler {

// CUDA queries the session needs, resolved by interpose/ (the only code that
// looks CUDA symbols up). Each returns 0 (cudaSuccess / CUDA_SUCCESS) on success;
// a null member is a query that is not available.
struct cuda_queries {
  int (*runtime_param_info)(const void* func, std::size_t index, std::size_t* offset,
                            std::size_t* size) = nullptr;       // cudaFuncGetParamInfo
  int (*runtime_name)(const char** name, const void* func) = nullptr;  // cudaFuncGetName
  int (*driver_param_info)(void* func, std::size_t index, std::size_t* offset,
                           std::size_t* size) = nullptr;        // cuFuncGetParamInfo
  int (*driver_name)(const char** name, void* func) = nullptr;  // cuFuncGetName
  int (*kernel_param_info)(void* kernel, std::size_t index, std::size_t* offset,
                           std::size_t* size) = nullptr;        // cuKernelGetParamInfo
  int (*kernel_name)(const char** name, void* kernel) = nullptr;  // cuKernelGetName
  int (*runtime_peek_error)() = nullptr;   // cudaPeekAtLastError
  int (*runtime_take_error)() = nullptr;   // cudaGetLastError
};

// Note [Probing leaves no error behind]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A runtime function's parameter count is
// found by asking for parameters until the runtime says there is no such one, which
// sets the runtime's last-error slot the application reads with cudaGetLastError().
// So the probe runs only when no error is pending, and clears the slot after it;
// with one pending it answers false (out untouched), and the caller probes again at
// a later launch.
// unreadable (optional): set when the runtime could not say (no query, or parameter 0
// refused with another error than cudaErrorInvalidValue, "no such parameter").
bool probe_runtime_params(const cuda_queries& q, const void* func,
                          std::vector<param_slot>& out, bool* unreadable = nullptr) noexcept;
// The parameter layout of a driver function (cuFuncGetParamInfo until it says
// there is no such parameter; the driver keeps no error slot to clean). A launch's
// function may be a CUkernel passed as a CUfunction (the CUDA 12+ runtime's and
// libraries' launches): when cuFuncGetParamInfo refuses the first parameter,
// cuKernelGetParamInfo is asked instead. Empty when the driver cannot say: the
// launch is then recorded and prepared with no buffers (its argument words unread).
// Returns false in that case: no query answered, or none said that the function has
// no parameter 0 (CUDA_ERROR_INVALID_VALUE), so the layout is unknown, not empty
// (swap mode takes such a launch to touch any page: Note [A launch that may touch
// anything] in residency/swap_engine.h).
bool probe_driver_params(const cuda_queries& q, void* func,
                         std::vector<param_slot>& out) noexcept;

// True when the configuration asks for profiling.
bool wanted(const config& cfg) noexcept;

// Starts the session once (later calls return at once): CUPTI, the exit handler.
// capacity_bytes: the device's (virtual) total memory, for the profile.
void start(tracker& live, const cuda_queries& queries, std::uint64_t capacity_bytes) noexcept;

// True once started; true for launches only when CUPTI does not deliver them.
bool running() noexcept;
bool hooks_feed_launches() noexcept;

void on_alloc(std::uint64_t base, std::uint64_t bytes) noexcept;
void on_free(std::uint64_t base) noexcept;

// A launch seen by a runtime hook: func is a function or cudaKernel_t handle, args
// the argument pointers (cudaLaunchKernel's void** args).
void on_hook_launch(const void* func, void** args) noexcept;
// A copy or memset seen by a hook (memset: src null); kind other: inferred from
// which side is a live allocation.
void on_hook_copy(copy_kind kind, std::uint64_t bytes, const void* dst,
                  const void* src) noexcept;

// The program says an iteration begins (oversub_iteration_begin()).
void iteration_begin() noexcept;

// After a hooked call returned: reports progress, and writes the profile when the
// requested iterations have been seen (never from inside a CUPTI callback).
void after_call() noexcept;

// Reads and validates a profile (OVERSUB_PROFILE_IN); a refused one is a warning
// naming the file and the reason, and the run goes on without it.
void load_input(const std::string& path) noexcept;
// The profile load_input accepted, or null (none given, or refused). Set before any
// hook runs (the library's constructor) and never changed after.
const profile* loaded_input() noexcept;

// Writes the profile if not yet written (the exit handler calls it).
void finish() noexcept;

}  // namespace oversub::profiler

#endif  // OVERSUB_PROFILER_SESSION_H
