// Shared basics of simgpu's libcuda.so.1: the export macro, the one logging funnel
// (fixed buffer, no allocation, usable from the SIGSEGV handler), and the one device
// lock that guards every piece of simulated device state.
//
// Note [One recursive device lock]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every entry point takes device_lock() for its whole body, kernels run while it is
// held, and the SIGSEGV handler takes it too. A fault raised by a kernel (or by our
// own copy code) arrives on a thread that already holds the lock, so the lock is
// recursive; a fault on another thread simply waits until the kernel is done, after
// which the page it wanted is in its final state. pthread_atfork takes the lock
// before fork() and releases it on both sides, so no thread's hold survives into
// the child.
#ifndef SIMGPU_DRIVER_COMMON_H
#define SIMGPU_DRIVER_COMMON_H

#include <pthread.h>

#include <cstdarg>
#include <cstdint>

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace simgpu {

// Writes "simgpu: <formatted>\n" to stderr with one write(2). Never allocates.
void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// For malformed SIMGPU_* values: prints the message and exits with status 2.
[[noreturn]] void config_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

class device_mutex {
 public:
  void lock();
  void unlock();
  void reinit_after_fork();

 private:
  pthread_mutex_t m_;
  bool ready_ = false;
};

device_mutex& device_lock();

// Host threads take turns in host time at each entry point when SIMGPU_LOCKSTEP is on
// (Note [Host threads in lockstep] in tests/simgpu/driver/clock.h); defined there.
void lockstep_arrive();
void lockstep_enter();
void lockstep_leave();

// An entry point's hold of the device lock.
struct lock_guard {
  lock_guard() {
    lockstep_arrive();
    device_lock().lock();
    lockstep_enter();
  }
  ~lock_guard() {
    lockstep_leave();
    device_lock().unlock();
  }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;
};

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline uint64_t round_down(uint64_t v, uint64_t a) { return v / a * a; }

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_COMMON_H
