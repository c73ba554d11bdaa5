// Kernels: the registry (simgpuRegisterKernel) and launches.
//
// Note [What a launch does]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// 1. Copies the argument values into a parameter buffer laid out as registered
//    (the caller's args may die after the call; graphs keep the buffer).
// 2. Computes the footprint: the kernel's own footprint function, or else the whole
//    allocation behind every pointer-sized argument word (read-only for const
//    pointer parameters).
// 3. Checks every footprint range is accessible now; a freed, unmapped or
//    access-less range is reported with the kernel's name before anything runs and
//    the error becomes sticky (CUDA_ERROR_ILLEGAL_ADDRESS).
// 4. Opens the footprint's pages (no wider) and runs the grid in a device window
//    (fault.h) on the calling thread; pages reached outside the footprint fault
//    one by one and are recorded (Note [Accesses a kernel really makes] in
//    tests/simgpu/driver/fault.h).
// 5. Charges duration = max(flops / peak, device bytes / memory bandwidth)
//    + host bytes / kernel_host_access_bandwidth + managed-fault time on the
//    compute engine, records the footprint's and the faulted pages' accesses with
//    the race detector, and emits a KERNEL activity record.
#ifndef SIMGPU_DRIVER_KERNELS_H
#define SIMGPU_DRIVER_KERNELS_H

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "clock.h"
#include <vector_types.h>  // dim3, which simgpu/ext.h uses

#include "simgpu/ext.h"

namespace simgpu {

struct kernel_obj {
  uint32_t magic = 0x4b524e4c;  // "KRNL"
  const void* host_fun = nullptr;
  std::string name;
  std::vector<simgpuParamInfo> params;
  size_t param_bytes = 0;
  simgpuKernelRun run = nullptr;
  simgpuKernelFootprint footprint = nullptr;
};

kernel_obj* find_kernel(CUfunction f);

// Validates and launches (or records into a capture) one kernel.
CUresult launch_kernel(kernel_obj* k, dim3 grid, dim3 block, unsigned shared_bytes,
                       stream_obj* s, void** kernel_params, void** extra);

// The modelled duration of a kernel with this footprint, without managed faults
// (tests and docs use the same formula), plus the bytes it reached outside the
// footprint in device memory and in host memory (Note [Accesses a kernel really
// makes] in fault.h).
double kernel_duration_ns(const simgpuFootprint& fp, double reached_device_bytes = 0,
                          double reached_host_bytes = 0);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_KERNELS_H
