// SIMGPU_FAIL: make the n-th call of a kind fail with a chosen code, for tests of
// error paths (see docs/simgpu.md for the grammar).
#ifndef SIMGPU_DRIVER_FAULT_INJECTION_H
#define SIMGPU_DRIVER_FAULT_INJECTION_H

#include <cuda.h>

#include "config.h"

namespace simgpu {

// Counts one call of `kind` and answers the code it must fail with, or
// CUDA_SUCCESS. Call it once per call of that kind, before doing the work.
CUresult inject_failure(fail_kind kind);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_FAULT_INJECTION_H
