// The real CUDA functions behind the hooks, and the process state that decides
// whether a hook does anything besides calling them.
//
// Real functions are looked up lazily, by the hook's own symbol name, with
// dlvsym(RTLD_NEXT, name, "libcudart.so.13") (then plain dlsym, then a libcudart
// already loaded with RTLD_LOCAL), and cached in one atomic pointer per hook: two
// threads racing on the first call both store the same answer.
//
// Note [When hooks pass through]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A hook only forwards, touching nothing of ours,
// when (a) OVERSUB_MODE=off, (b) it runs in a child created by fork() (the child
// cannot trust state copied mid-flight from the parent's other threads, and real
// CUDA does not survive fork anyway), (c) liboversub has begun unloading (stats
// printed, exit under way), or (d) it is re-entered on a thread that is already
// inside a hook (the runtime calling its own exported functions, or our core
// calling CUDA). (a)-(c) are one atomic state, (d) a thread-local flag.
#ifndef OVERSUB_INTERPOSE_REAL_H
#define OVERSUB_INTERPOSE_REAL_H

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/stats.h"
#include "interpose/hook_table.h"

namespace oversub {
class tracker;
}

namespace oversub::interpose {

enum class process_state : std::uint8_t { uninitialised, tracking, passthrough };

extern std::atomic<process_state> g_state;
extern std::atomic<void*> g_real[hook_count];

// Note [Initial-exec TLS]
// ~~~~~~~~~~~~~~~~~~~~~~~
// liboversub is loaded at start (LD_PRELOAD), so this flag
// lives in the static TLS block and reading it is one load relative to %fs: no
// __tls_get_addr call, which can allocate the first time a thread touches a
// dynamic-TLS variable. One byte also fits the static-TLS surplus glibc keeps
// should the library ever be dlopen'ed instead.
extern __attribute__((tls_model("initial-exec"))) thread_local bool t_in_hook;

// Reads the configuration (once) and sets g_state; returns it.
process_state initialise() noexcept;

// Makes every later hook pass through (fork child, unloading).
void enter_passthrough() noexcept;

inline bool hooks_active() noexcept {
  if (t_in_hook) return false;
  process_state s = g_state.load(std::memory_order_acquire);
  if (s == process_state::uninitialised) s = initialise();
  return s == process_state::tracking;
}

class reentrancy_guard {
 public:
  reentrancy_guard() noexcept { t_in_hook = true; }
  ~reentrancy_guard() { t_in_hook = false; }
  reentrancy_guard(const reentrancy_guard&) = delete;
  reentrancy_guard& operator=(const reentrancy_guard&) = delete;
};

// Looks the real function up (slow path of real_function).
void* resolve_real(hook_id id) noexcept;

// What a hook returns when no real function exists (logged once per hook).
cudaError_t missing_real(hook_id id) noexcept;

// Calls the real function of hook id, whose signature is that of Base.
template <hook_id Base, typename... A>
inline cudaError_t call_real(hook_id id, A... args) noexcept {
  void* p = g_real[index(id)].load(std::memory_order_acquire);
  if (p == nullptr) p = resolve_real(id);
  if (p == nullptr) return missing_real(id);
  return reinterpret_cast<real_t<Base>>(p)(args...);
}

// The calling thread's current device (real cudaGetDevice); 0 if that fails.
int current_device() noexcept;

// The track-mode core, created on first use, never destroyed.
tracker& core() noexcept;

// Counts a call of hook id in the per-entry-point and per-family counters.
void count_call(hook_id id) noexcept;

// Adds the wall time of the hook it lives in, CUDA's own call included, to the
// entry point's "call_ns" (common/stats.h): what a slow call costs is then in the
// stats of any run, on a GPU too. Two reads of the monotonic clock per call.
class call_clock {
 public:
  explicit call_clock(std::size_t entry_point) noexcept
      : entry_(entry_point), start_(std::chrono::steady_clock::now()) {}
  ~call_clock() {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start_).count();
    stats::add_call_time(entry_, static_cast<std::uint64_t>(ns));
  }
  call_clock(const call_clock&) = delete;
  call_clock& operator=(const call_clock&) = delete;

 private:
  std::size_t entry_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_REAL_H
