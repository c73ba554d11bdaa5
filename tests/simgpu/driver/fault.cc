// The SIGSEGV handler and device windows (see Note [Device windows] in fault.h).
#include "fault.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
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

// Whether the faulting access was a write, as far as the fault itself tells
// (x86-64: bit 1 of the page-fault error code). Elsewhere answers false and a
// write is seen as a second fault on a page already readable.
bool fault_is_write(void* uc) {
#if defined(__x86_64__) && defined(REG_ERR)
  return (static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
  (void)uc;
  return false;
#endif
}

const device_window::declared_range* declared_at(const device_window& w, uintptr_t page) {
  const device_window::declared_range* found = nullptr;
  for (const auto& d : w.declared) {
    if (page >= d.lo && page < d.hi) {
      if (d.writable) return &d;
      found = &d;
    }
  }
  return found;
}

// Whether the host page at `page` is already open read-write in w.
bool page_writable(const device_window& w, uintptr_t page) {
  const device_window::declared_range* d = declared_at(w, page);
  if (d != nullptr && d->writable) return true;
  auto seen = w.faulted.find(page);
  return seen != w.faulted.end() && seen->second;
}

// Opens the host pages [a, b) PROT_READ, except those already writable.
void open_for_read(device_window& w, uintptr_t a, uintptr_t b) {
  uintptr_t at = a;
  while (at < b) {
    const bool writable = page_writable(w, at);
    uintptr_t end = at + g_host_page_bytes;
    while (end < b && page_writable(w, end) == writable) end += g_host_page_bytes;
    if (!writable) window_open(w, at, end - at, PROT_READ);
    at = end;
  }
}

// The end of the memory around [.., hi) the device may use as device_range_ok
// allowed it: the allocation's end (rounded as device_range_ok rounds it), the VMM
// mapping's or the pinned block's.
uintptr_t legal_end(uintptr_t hi) {
  const uintptr_t last = hi - 1;
  if (!in_device_va(last)) {
    pinned_block* b = find_pinned(last);
    return b != nullptr ? b->base + b->bytes : hi;
  }
  region* r = find_region(last);
  if (r == nullptr) return hi;
  if (r->kind != region_kind::vmm_reservation) return r->base + round_up(r->bytes, 512);
  vmm_mapping* m = find_mapping(r, last);
  return m != nullptr ? m->hi : hi;
}

// Declarations that extend one of this many most recent reached ranges merge into it.
constexpr size_t kRecentReached = 8;

// In a window: answers true when the fault was resolved (Note [Accesses a kernel
// really makes] in tests/simgpu/driver/fault.h).
bool resolve_device_fault(device_window& w, uintptr_t p, bool write) {
  region* r = find_region(p);
  if (r == nullptr || !r->live) return false;
  const uintptr_t page = round_down(p, g_host_page_bytes);
  const device_window::declared_range* decl = declared_at(w, page);
  if (r->kind == region_kind::managed) {  // migrated (or re-migrated) read-write
    if (!managed_device_touch(r, p, &w)) return false;
    if (decl == nullptr) w.faulted.try_emplace(page, write).first->second |= write;
    return true;
  }
  auto seen = w.faulted.find(page);
  // A page already readable faults only for a write.
  if (decl != nullptr || seen != w.faulted.end()) {
    if ((decl != nullptr && decl->writable) || (seen != w.faulted.end() && seen->second))
      return false;  // writable already: nothing a fault could fix
    write = true;
  }
  switch (r->kind) {
    case region_kind::device:
      if (p >= r->base + r->span_bytes) return false;
      break;
    case region_kind::managed:
      return false;
    case region_kind::vmm_reservation: {
      vmm_mapping* m = find_mapping(r, p);
      if (m == nullptr || m->access == 0) return false;
      if (write && m->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return false;
      break;
    }
  }
  window_open(w, page, g_host_page_bytes, write ? PROT_READ | PROT_WRITE : PROT_READ);
  w.faulted[page] = write;
  return true;
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
    if (resolve_device_fault(*w, p, fault_is_write(uc))) {
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

void window_declare(device_window& w, uintptr_t lo, uint64_t bytes, bool write) {
  if (bytes == 0 || !in_device_va(lo)) return;  // pinned host memory is always open
  const uintptr_t a = round_down(lo, g_host_page_bytes);
  const uintptr_t b = round_up(lo + bytes, g_host_page_bytes);
  w.declared.push_back(device_window::declared_range{a, b, write});
  region* r = find_region(lo);
  if (r == nullptr || !r->live || r->kind == region_kind::managed) return;
  if (write) {
    window_open(w, a, b - a, PROT_READ | PROT_WRITE);
    return;
  }
  // A read: pages another declared access writes stay writable.
  open_for_read(w, a, b);
}

void window_reach(device_window& w, uintptr_t lo, uint64_t bytes, bool write) {
  if (bytes == 0) return;
  const uintptr_t hi = lo + bytes;
  device_window::reached_range* into = nullptr;
  const size_t n = w.reached.size();
  for (size_t k = n; k > 0 && k + kRecentReached > n; --k) {
    device_window::reached_range& e = w.reached[k - 1];
    if (e.write == write && lo >= e.lo && lo <= e.hi) {
      into = &e;
      break;
    }
  }
  if (into != nullptr && hi <= into->open_hi) {  // pages open and checked already
    if (hi > into->hi) into->hi = hi;
    return;
  }
  device_lock().lock();
  uintptr_t bad = 0;
  char why[256];
  if (hi < lo || !device_range_ok(lo, bytes, write, &bad, why, sizeof why)) {
    if (hi < lo) {
      bad = lo;
      std::snprintf(why, sizeof why, "a range of %" PRIu64 " bytes past the address space",
                    bytes);
    }
    log_line("%s accessed 0x%" PRIxPTR ": %s", w.what, bad, why);
    g_sticky_error.store(CUDA_ERROR_ILLEGAL_ADDRESS);
    device_lock().unlock();
    siglongjmp(w.jump, 1);
  }
  const uintptr_t a = round_down(lo, g_host_page_bytes);
  const uintptr_t b = round_up(hi, g_host_page_bytes);
  size_t pages = into != nullptr ? into->pages : SIZE_MAX;
  if (in_device_va(lo)) {  // pinned host memory is always open
    region* r = find_region(lo);
    if (r->kind == region_kind::managed) {
      // Its pages migrate at their fault, as for a footprint range; a region the
      // window has not prepared yet (host-resident pages are open to host code) is
      // protected first, so the kernel's access migrates what it touches.
      if (std::find(w.managed_touched.begin(), w.managed_touched.end(), r) ==
          w.managed_touched.end())
        managed_prepare_for_kernel(r, w);
    } else {
      if (write)
        window_open(w, a, b - a, PROT_READ | PROT_WRITE);
      else
        open_for_read(w, a, b);
    }
    if (pages != SIZE_MAX && a <= w.declared[pages].hi) {
      if (b > w.declared[pages].hi) w.declared[pages].hi = b;
    } else {
      pages = w.declared.size();
      w.declared.push_back(device_window::declared_range{a, b, write});
    }
  }
  const uintptr_t open_hi = std::min<uintptr_t>(b, legal_end(hi));
  if (into != nullptr) {
    if (hi > into->hi) into->hi = hi;
    into->open_hi = std::max(into->open_hi, open_hi);
    into->pages = pages;
  } else {
    w.reached.push_back(device_window::reached_range{lo, hi, open_hi, pages, write});
  }
  device_lock().unlock();
}

std::vector<reached_run> window_reached(const device_window& w) {
  std::vector<reached_run> runs;
  runs.reserve(w.reached.size());
  for (const auto& e : w.reached) runs.push_back(reached_run{e.lo, e.hi, e.write});
  const size_t first_page_run = runs.size();
  for (const auto& [page, write] : w.faulted) {
    if (runs.size() > first_page_run && runs.back().hi == page && runs.back().write == write)
      runs.back().hi = page + g_host_page_bytes;
    else
      runs.push_back(reached_run{page, page + g_host_page_bytes, write});
  }
  return runs;
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

// See Note [Accesses a kernel really makes] in fault.h.
SIMGPU_EXPORT void simgpuReach(const void* ptr, size_t bytes, int writes) {
  simgpu::device_window* w = simgpu::current_window();
  if (w == nullptr) return;
  simgpu::window_reach(*w, reinterpret_cast<uintptr_t>(ptr), bytes, writes != 0);
}
