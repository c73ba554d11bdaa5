// The SIGSEGV handler and device windows (see Note [Device windows] in fault.h).
#include "fault.h"

#include <signal.h>
#include <sys/mman.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "address_space.h"
#include "managed.h"

namespace simgpu {

namespace {

struct sigaction g_previous;
thread_local device_window* t_window = nullptr;

void chain(int sig, siginfo_t* si, void* uc) {
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, si, uc);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: restore it and let the faulting instruction run again.
  signal(sig, SIG_DFL);
}

bool already_open(device_window& w, uintptr_t p) {
  for (auto& [lo, bytes] : w.opened)
    if (p >= lo && p < lo + bytes) return true;
  return false;
}

// In a window: answers true when the fault was resolved.
bool resolve_device_fault(device_window& w, uintptr_t p) {
  region* r = find_region(p);
  if (r == nullptr || !r->live) return false;
  if (already_open(w, p)) return false;  // e.g. a write to a read-only mapping
  switch (r->kind) {
    case region_kind::device:
      if (p >= r->base + r->span_bytes) return false;
      window_open(w, r->base, r->span_bytes, PROT_READ | PROT_WRITE);
      return true;
    case region_kind::managed:
      return managed_device_touch(r, p, &w);
    case region_kind::vmm_reservation: {
      vmm_mapping* m = find_mapping(r, p);
      if (m == nullptr || m->access == 0) return false;
      int prot = m->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                                                                   : PROT_READ;
      window_open(w, m->lo, m->hi - m->lo, prot);
      return true;
    }
  }
  return false;
}

void on_segv(int sig, siginfo_t* si, void* uc) {
  uintptr_t p = reinterpret_cast<uintptr_t>(si->si_addr);
  if (!device_ready() || !in_device_va(p)) {
    chain(sig, si, uc);
    return;
  }
  int saved_errno = errno;
  device_lock().lock();
  char why[256];
  if (device_window* w = t_window) {
    if (resolve_device_fault(*w, p)) {
      device_lock().unlock();
      errno = saved_errno;
      return;
    }
    describe_address(p, why, sizeof why);
    if (region* r = find_region(p); r != nullptr && r->live &&
                                    r->kind == region_kind::vmm_reservation) {
      vmm_mapping* m = find_mapping(r, p);
      if (m != nullptr && m->access == CU_MEM_ACCESS_FLAGS_PROT_READ)
        std::snprintf(why, sizeof why, "a write to read-only VMM mapping [0x%" PRIxPTR
                      ",0x%" PRIxPTR ")", m->lo, m->hi);
    }
    log_line("%s accessed 0x%" PRIxPTR ": %s", w->what, p, why);
    g_sticky_error.store(CUDA_ERROR_ILLEGAL_ADDRESS);
    device_lock().unlock();
    siglongjmp(w->jump, 1);
  }
  region* r = find_region(p);
  if (r != nullptr && r->live && r->kind == region_kind::managed && managed_host_touch(r, p)) {
    device_lock().unlock();
    errno = saved_errno;
    return;
  }
  describe_address(p, why, sizeof why);
  log_line("host code accessed device memory at 0x%" PRIxPTR " (%s)", p, why);
  device_lock().unlock();
  signal(SIGSEGV, SIG_DFL);  // the instruction faults again and the process dies
}

void close_window(device_window& w) {
  for (auto& [lo, bytes] : w.opened) protect(lo, bytes, PROT_NONE);
  w.opened.clear();
  for (region* r : w.managed_touched) managed_apply_protection(r);
  w.managed_touched.clear();
}

}  // namespace

void install_fault_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous);
}

device_window* current_window() { return t_window; }

void window_open(device_window& w, uintptr_t lo, uint64_t bytes, int prot) {
  protect(lo, bytes, prot);
  w.opened.emplace_back(lo, bytes);
}

bool run_in_window(device_window& w, void (*fn)(void*), void* arg) {
  device_window* const outer = t_window;
  t_window = &w;
  volatile bool ok = true;  // written after a siglongjmp back here
  if (sigsetjmp(w.jump, 1) == 0) {
    fn(arg);
  } else {
    ok = false;
  }
  t_window = outer;
  close_window(w);
  return ok;
}

}  // namespace simgpu
