// The SIMGPU_* environment, read once (mimalloc style): every variable is parsed
// here, and a malformed value stops the program with a message that names the
// variable, the value and the accepted forms (exit status 2).
#ifndef SIMGPU_DRIVER_CONFIG_H
#define SIMGPU_DRIVER_CONFIG_H

#include <cstdint>
#include <string>
#include <vector>

namespace simgpu {

enum class race_mode { report, abort, off };

// One SIMGPU_FAIL rule: fail the n-th call of a kind (or the n-th and every later
// one when `and_later`) with `code`.
enum class fail_kind {
  alloc, host_alloc, copy, map, launch, reserve, graph_instantiate, graph_launch,
  library_load, kernel_query, param_info, access, event, prefetch, discard, count_
};
struct fail_rule {
  fail_kind kind;
  uint64_t nth;
  bool and_later;
  int code;
};

struct config {
  uint64_t memory_bytes = 0;  // 0: the model's memory
  std::string device = "h100-pcie";
  std::string device_dir;     // empty: <dir of libcuda.so.1>/devices
  std::vector<fail_rule> fail;
  bool report = false;
  // SIMGPU_LOCKSTEP=1: host threads take turns in host time (Note [Host threads in
  // lockstep] in tests/simgpu/driver/clock.h).
  bool lockstep = false;
  race_mode race = race_mode::report;
  std::string launch_log;     // SIMGPU_LAUNCH_LOG: a path; empty: off
  std::string timeline;       // SIMGPU_TIMELINE: a path; empty: off (Note [The timeline] in tests/simgpu/driver/timeline.h)
  // SIMGPU_CUPTI_RECORDS=when-done: CUPTI's activity records are handed back only once
  // the virtual clock has passed their end, as a real GPU's (Note [Records when done]
  // in tests/simgpu/cupti/activity.cc); at-enqueue (the default): as soon as they are
  // enqueued.
  bool cupti_when_done = false;
  // SIMGPU_VMM_WAIT=0|1: overrides the model's vmm_waits_for_device; -1: unset.
  int vmm_wait = -1;
  // SIMGPU_VMM_UNMAP_SPANS=0|1: overrides the model's vmm_unmap_spans_mappings (Note
  // [One unmap over several mappings] in tests/simgpu/driver/vmm.cc); -1: unset.
  int vmm_unmap_spans = -1;
  // SIMGPU_COPY_GAPS=0|1: overrides the model's copy_engines_serve_ready (Note [Copy
  // engines serve ready copies] in tests/simgpu/driver/clock.h); -1: unset.
  int copy_gaps = -1;
  // SIMGPU_VMM_SERIAL=0|1: overrides the model's vmm_calls_serialized (Note [VMM calls
  // one at a time] in tests/simgpu/driver/vmm.cc).
  int vmm_serial = -1;
};

// Parsed on first call; exits 2 on a malformed value.
const config& get_config();

// "256MiB", "4GiB", "1.5GB", "1024", "64k": bytes, or false when malformed.
bool parse_bytes(const char* text, uint64_t* out);

// A CUresult given as a number or a name (CUDA_ERROR_OUT_OF_MEMORY, OUT_OF_MEMORY).
bool parse_curesult(const char* text, int* out);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_CONFIG_H
