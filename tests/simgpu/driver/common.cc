// The logging funnel and the device lock (see common.h).
#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace simgpu {

namespace {
void vlog(const char* fmt, va_list ap) {
  char buf[2048];
  int n = std::snprintf(buf, sizeof buf, "simgpu: ");
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  if (m < 0) m = 0;
  size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  ssize_t w = ::write(2, buf, len);
  (void)w;
}
}  // namespace

void log_line(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(fmt, ap);
  va_end(ap);
}

void config_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(fmt, ap);
  va_end(ap);
  std::_Exit(2);
}

void device_mutex::lock() {
  if (!ready_) reinit_after_fork();
  pthread_mutex_lock(&m_);
}
void device_mutex::unlock() { pthread_mutex_unlock(&m_); }
void device_mutex::reinit_after_fork() {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&m_, &a);
  pthread_mutexattr_destroy(&a);
  ready_ = true;
}

device_mutex& device_lock() {
  // Constructed on first use, never destroyed: entry points may run during exit.
  static device_mutex* m = [] {
    auto* p = new device_mutex();
    p->reinit_after_fork();
    return p;
  }();
  return *m;
}

}  // namespace simgpu
