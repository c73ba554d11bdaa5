// Device windows and the SIGSEGV handler that enforces device-memory protection.
//
// Note [Device windows]
// Device memory is PROT_NONE to host code at all times. Code that acts as the
// device (a kernel's host function, the device side of a copy or memset) runs in a
// window on the calling thread: a fault inside the window on memory the device may
// legitimately use unprotects that whole allocation or mapping (a managed page is
// first migrated to the device) and remembers it; the window's end protects it all
// again. A fault on anything else (freed, unmapped, never allocated, no access set)
// prints `simgpu: kernel '<name>' accessed <addr>: <why>`, makes the error sticky
// (CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU does) and siglongjmps out of the window.
// Outside a window a fault on device memory is host code touching the device: a
// device-resident managed page migrates to the host; anything else is reported and
// the process dies of the SIGSEGV.
#ifndef SIMGPU_DRIVER_FAULT_H
#define SIMGPU_DRIVER_FAULT_H

#include <csetjmp>
#include <cstdint>
#include <utility>
#include <vector>

#include "device.h"

namespace simgpu {

struct device_window {
  const char* what = "";   // "kernel 'axpy'", "memcpy HtoD"
  sigjmp_buf jump;
  std::vector<std::pair<uintptr_t, uint64_t>> opened;  // re-protect at the end
  std::vector<region*> managed_touched;                // restore page protection
  double fault_ns = 0;           // managed faults charged to this operation
  uint64_t faults = 0;
};

void install_fault_handler();

// Runs fn(arg) inside window w. Answers false when the body made an illegal access
// (already reported; the sticky error is set).
bool run_in_window(device_window& w, void (*fn)(void*), void* arg);

// Opens [lo, lo+bytes) for the window with prot (explicitly, without a fault).
void window_open(device_window& w, uintptr_t lo, uint64_t bytes, int prot);

// The window of the calling thread, or nullptr.
device_window* current_window();

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_FAULT_H
