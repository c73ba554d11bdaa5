// Device windows and the SIGSEGV handler that enforces device-memory protection.
//
// Note [Device windows]
// ~~~~~~~~~~~~~~~~~~~~~
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
//
// Note [Accesses a kernel really makes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A kernel's declared footprint (its footprint function, or the allocations behind
// its pointer arguments) is opened before it runs, page-granular and no wider:
// read ranges PROT_READ, written ones read-write. Every other page of device memory
// stays PROT_NONE, so a kernel that reaches memory the footprint does not name
// (through a pointer stored in device memory: the pointer arrays of batched GEMMs,
// optimizer foreach kernels) faults on each such host page. A legal fault opens
// just that page, PROT_READ for a read and read-write for a write (a write fault
// on a page already readable, i.e. opened for a read, upgrades it; on x86-64 the
// fault's REG_ERR bit 1 tells a write at once), and records the page as an access
// of the kernel: after the kernel the race detector gets these pages exactly as it
// gets footprint ranges (same stream, same epoch), so a free, unmap or access
// change by the host that is not ordered after them is reported. Managed pages
// reached outside the footprint are recorded with the kind of their first fault
// (the migration opens them read-write).
#ifndef SIMGPU_DRIVER_FAULT_H
#define SIMGPU_DRIVER_FAULT_H

#include <csetjmp>
#include <cstdint>
#include <map>
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
  // Page ranges opened before the body ran ([lo, hi), writable), see Note
  // [Accesses a kernel really makes].
  struct declared_range {
    uintptr_t lo, hi;
    bool writable;
  };
  std::vector<declared_range> declared;
  // Host pages opened by faults (outside `declared`): page address -> written.
  std::map<uintptr_t, bool> faulted;
};

void install_fault_handler();

// Runs fn(arg) inside window w. Answers false when the body made an illegal access
// (already reported; the sticky error is set).
bool run_in_window(device_window& w, void (*fn)(void*), void* arg);

// Opens [lo, lo+bytes) for the window with prot (explicitly, without a fault).
void window_open(device_window& w, uintptr_t lo, uint64_t bytes, int prot);
// Opens the host pages under [lo, lo+bytes) up front as a declared access (read
// only unless `write`); managed memory is left to its own protection.
void window_declare(device_window& w, uintptr_t lo, uint64_t bytes, bool write);

// The window of the calling thread, or nullptr.
device_window* current_window();

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_FAULT_H
