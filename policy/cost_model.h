// cost_model: what moving bytes costs on one device, for the schedule and the
// simulator. Built from plain numbers; the device model files of simgpu
// (tests/simgpu/devices/*.model) and a real device's measured figures both fit it.
// policy/ never reads those files itself (a test, the bench or the CLI does).
#ifndef OVERSUB_POLICY_COST_MODEL_H
#define OVERSUB_POLICY_COST_MODEL_H

#include <cstddef>
#include <cstdint>

namespace oversub::policy {

struct cost_model {
  // Pinned-memory link bandwidth per direction (bytes/s).
  double h2d_bytes_per_s = 0;
  double d2h_bytes_per_s = 0;
  // Fixed cost of each copy (setup, DMA start), ns; added to bytes / bandwidth.
  std::uint64_t copy_setup_ns = 0;
  // From issue to a kernel starting on an idle device, ns (once per iteration in the
  // simulator: afterwards the host runs ahead and launches queue).
  std::uint64_t launch_latency_ns = 0;
  // Managed memory: cost of one serviced fault (ns) and the migration unit (bytes).
  std::uint64_t managed_fault_ns = 0;
  std::size_t managed_page_bytes = 64 * 1024;
  // True when the device pages managed memory on demand (Pascal and later). False
  // (Maxwell, Kepler): a launch migrates all of a managed buffer at once, for one
  // fault cost plus the transfer.
  bool demand_paging = true;

  // The time of one copy of `bytes` host to device / device to host, ns.
  std::uint64_t h2d_ns(std::size_t bytes) const { return copy_ns(bytes, h2d_bytes_per_s); }
  std::uint64_t d2h_ns(std::size_t bytes) const { return copy_ns(bytes, d2h_bytes_per_s); }
  // The time a kernel spends faulting `bytes` of managed memory onto the device, ns
  // (page faults and migration; Note [Demand paging cost] in simulate.h).
  std::uint64_t fault_in_ns(std::size_t bytes) const {
    const std::uint64_t faults =
        demand_paging ? (bytes + managed_page_bytes - 1) / managed_page_bytes : 1;
    return faults * managed_fault_ns + transfer_ns(bytes, h2d_bytes_per_s);
  }
  // Migration of `bytes` of managed memory back to the host to make room, ns.
  std::uint64_t fault_out_ns(std::size_t bytes) const {
    return transfer_ns(bytes, d2h_bytes_per_s);
  }

 private:
  static std::uint64_t transfer_ns(std::size_t bytes, double bytes_per_s) {
    if (bytes_per_s <= 0) return 0;
    return static_cast<std::uint64_t>(static_cast<double>(bytes) * 1e9 / bytes_per_s + 0.5);
  }
  std::uint64_t copy_ns(std::size_t bytes, double bytes_per_s) const {
    return copy_setup_ns + transfer_ns(bytes, bytes_per_s);
  }
};

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_COST_MODEL_H
