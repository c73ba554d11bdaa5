// CUresult names and strings: what cuGetErrorName / cuGetErrorString answer, and
// what SIMGPU_FAIL accepts as a code name.
#ifndef SIMGPU_DRIVER_ERRORS_H
#define SIMGPU_DRIVER_ERRORS_H

#include <cuda.h>

namespace simgpu {

// "CUDA_ERROR_OUT_OF_MEMORY", or nullptr for a value that is not a CUresult.
const char* error_name(CUresult r);
// A one-line description, or nullptr for a value that is not a CUresult.
const char* error_string(CUresult r);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_ERRORS_H
