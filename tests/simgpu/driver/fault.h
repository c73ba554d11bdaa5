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
//
// Page-granular records are conservative: oversub's arena packs buffers into shared
// pages, so a write through a pointer to one buffer is recorded over the tail of its
// neighbour too, and the race detector reports a race with whoever uses that
// neighbour on another stream. A kernel body that knows what it reaches says so
// first with simgpuReach(ptr, bytes, writes) (simgpu/ext.h; simgpu::reach_read,
// reach_write and reach_readwrite in simgpu/kernel.h): inside the window, the range
// is checked as a footprint range is (a range the device may not use, or a write to
// a read-only VMM mapping, takes the illegal-access path above: the message, the
// sticky error, the siglongjmp out of the window), exactly the host pages under it
// are opened (read-only unless `writes`; a page already writable stays so; managed
// memory is prepared as for a footprint range, so what the kernel touches migrates
// at its fault), and the exact byte range, not its pages, is recorded as an access of the kernel, after
// the kernel, with the footprint's ranges. Consecutive declarations that extend a
// recent one of the same kind (a grid's threads each declaring their element) merge
// into one range, without a system call while the pages are already open. Anything
// the body touches outside every declared range still faults and is recorded by
// the page as above: the backstop stays (the bytes of an opened page outside the
// declared range are the one thing neither sees). Outside a window (a kernel body
// called by host code) simgpuReach does nothing.
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
  // Exact ranges the body declared with simgpuReach ([lo, hi)), in declaration
  // order, merged. [lo, open_hi) lies in open pages of memory the device may use
  // this way, so a declaration inside it needs no check and no system call;
  // `pages` indexes the entry of `declared` that holds its pages (or SIZE_MAX).
  struct reached_range {
    uintptr_t lo, hi, open_hi;
    size_t pages;
    bool write;
  };
  std::vector<reached_range> reached;
};

// One access a window's body made outside its declared footprint: a range it
// declared with simgpuReach (exact) or a run of adjacent faulted host pages of one
// kind.
struct reached_run {
  uintptr_t lo, hi;
  bool write;
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

// Declares that the body is about to access [lo, lo+bytes) (simgpuReach): see Note
// [Accesses a kernel really makes]. Does not return when the range is illegal.
void window_reach(device_window& w, uintptr_t lo, uint64_t bytes, bool write);
// What w's body reached outside its footprint: the simgpuReach ranges, then the
// faulted pages as runs of adjacent pages of one kind.
std::vector<reached_run> window_reached(const device_window& w);

// The window of the calling thread, or nullptr.
device_window* current_window();

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_FAULT_H
