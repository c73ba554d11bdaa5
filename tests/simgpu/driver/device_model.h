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
  double api_overhead_ns = 0;       // host time per enqueue
  double managed_fault_ns = 0;      // per faulted managed page
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
