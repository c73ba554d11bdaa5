// A device model: the figures of one GPU that the simulated device and its virtual
// clock use, read from a `key = value` data file in tests/simgpu/devices/.
#ifndef SIMGPU_DRIVER_DEVICE_MODEL_H
#define SIMGPU_DRIVER_DEVICE_MODEL_H

#include <cstdint>
#include <string>

namespace simgpu {

struct device_model {
  std::string name;                 // what cuDeviceGetName answers
  std::string id;                   // file stem, e.g. h100-pcie
  uint64_t memory_bytes = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  double fp32_flops_per_s = 0;      // peak
  double mem_bytes_per_s = 0;       // device memory bandwidth
  double h2d_pinned_bytes_per_s = 0, d2h_pinned_bytes_per_s = 0;
  double h2d_pageable_bytes_per_s = 0, d2h_pageable_bytes_per_s = 0;
  double copy_latency_ns = 0;
  double launch_latency_ns = 0;
  double api_overhead_ns = 0;       // host time of a call without a family cost below
  // Host time per call family (Note [Driver call costs] in device_model.cc).
  // VMM calls: a per-call part plus a part per 2 MiB page of the call's size; the
  // per-call part is repeat_ns for a call that repeats the thread's last VMM call's
  // family right after it (Note [Repeated VMM calls] in device_model.cc).
  struct vmm_cost {
    double call_ns = 0;
    double per_2mib_ns = 0;
    double repeat_ns = 0;
    double for_bytes(uint64_t bytes, bool repeat = false) const {
      return (repeat ? repeat_ns : call_ns) +
             per_2mib_ns * static_cast<double>((bytes + (2u << 20) - 1) >> 21);
    }
  };
  vmm_cost vmm_create, vmm_map, vmm_set_access, vmm_unmap, vmm_release;
  double event_record_ns = 0;       // cuEventRecord
  double event_query_ns = 0;        // cuEventQuery (each poll)
  double event_sync_ns = 0;         // cuEventSynchronize, on top of the wait
  double stream_wait_event_ns = 0;  // cuStreamWaitEvent
  double copy_enqueue_ns = 0;       // an async (or sync) copy's host part
  double launch_enqueue_ns = 0;     // a kernel launch or a cuGraphLaunch
  // cuMemMap/cuMemUnmap/cuMemSetAccess first wait (in host time only) until the
  // device has finished the work already enqueued (SIMGPU_VMM_WAIT overrides).
  int vmm_waits_for_device = 0;
  // One cuMemUnmap may unmap a range of several whole mappings (optional key
  // vmm_unmap_spans_mappings, default 1; SIMGPU_VMM_UNMAP_SPANS overrides): Note [One
  // unmap over several mappings] in tests/simgpu/driver/vmm.cc.
  int vmm_unmap_spans_mappings = 1;
  // A copy engine runs a ready copy in its idle time before one issued earlier that
  // waits on its stream (optional key copy_engines_serve_ready, default 1; 0: copies
  // in issue order; SIMGPU_COPY_GAPS overrides): Note [Copy engines serve ready
  // copies] in tests/simgpu/driver/clock.h.
  int copy_engines_serve_ready = 1;
  // The VMM calls of all host threads run one at a time (optional key
  // vmm_calls_serialized, default 1; 0: each thread's side by side; SIMGPU_VMM_SERIAL
  // overrides): Note [VMM calls one at a time] in tests/simgpu/driver/vmm.cc.
  int vmm_calls_serialized = 1;
  // A kernel's reads and writes of host memory (pinned, host-located VMM mappings),
  // bytes/s: zero-copy access over the link, below the pinned copy rate.
  double kernel_host_access_bytes_per_s = 0;
  // CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: host-located cuMemCreate.
  int host_vmm_supported = 0;
  double managed_fault_ns = 0;      // per faulted managed page, on top of its migration
  // Per managed page a discard releases from the device (Note [Discards] in managed.h).
  double managed_discard_page_ns = 0;
  // Managed memory's migrations, bytes/s: prefetches, faults and the driver's
  // evictions (Note [Managed migration rates] in device_model.cc).
  double managed_h2d_bytes_per_s = 0, managed_d2h_bytes_per_s = 0;
  uint64_t managed_page_bytes = 0;
  int concurrent_managed_access = 0;
  int clock_khz = 0, mem_clock_khz = 0, mem_bus_width_bits = 0;
  int l2_bytes = 0;
  int max_threads_per_block = 1024;
  int max_shared_per_block_bytes = 49152;
  int regs_per_block = 65536;
  int max_threads_per_sm = 2048;
  int pci_bus_id = 0;
};

// Loads the model named by SIMGPU_DEVICE (a model name looked up in the device
// folder, or a path to a file). Exits 2 with a message when missing or malformed.
device_model load_device_model();

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_DEVICE_MODEL_H
