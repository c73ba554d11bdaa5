// The CUPTI bridge: the API sink and activity sink that simgpu's libcupti installs
// (simgpu/ext.h), and the scope every driver entry point opens so that CUPTI sees
// it with its real callback id and parameter struct.
#ifndef SIMGPU_DRIVER_CALLBACKS_H
#define SIMGPU_DRIVER_CALLBACKS_H

#include <cuda.h>

#include <cstdint>

#include <vector_types.h>  // dim3, which simgpu/ext.h uses

#include "simgpu/ext.h"

namespace simgpu {

// Correlation id of the outermost API call now open on this thread (0 if none).
uint32_t current_correlation_id();

// Delivers one activity record to the sink, if any.
void emit_activity(const simgpuActivity& rec);
bool activity_sink_installed();

// Brackets one driver API call: the entry callback at construction, the exit
// callback at destruction with the result given to finish(). Declared before the
// lock guard of an entry point, so callbacks run without the device lock held.
class api_scope {
 public:
  api_scope(int cbid, const char* name, const void* params, const char* symbol = nullptr);
  ~api_scope();
  api_scope(const api_scope&) = delete;
  api_scope& operator=(const api_scope&) = delete;
  // Remembers the result for the exit callback and answers it.
  CUresult finish(CUresult r) {
    result_ = r;
    return r;
  }

 private:
  int cbid_;
  const char* name_;
  const char* symbol_;
  const void* params_;
  uint32_t correlation_id_;
  uint64_t correlation_data_ = 0;
  CUresult result_ = CUDA_ERROR_UNKNOWN;
};

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_CALLBACKS_H
