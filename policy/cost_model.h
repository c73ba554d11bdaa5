// cost_model: what moving bytes costs on one device, for the schedule and the
// simulator. Built from plain numbers; the device model files of simgpu
// (tests/simgpu/devices/*.model) and a real device's measured figures both fit it.
// policy/ never reads those files itself (a test, the bench or the CLI does).
#ifndef OVERSUB_POLICY_COST_MODEL_H
#define OVERSUB_POLICY_COST_MODEL_H

#include <algorithm>
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

  // Host costs, ns: what the one launching thread spends per driver call (a per-call
  // part plus a part per host_page_bytes page the call covers). All 0 (the default):
  // the host is never the bottleneck. See Note [Virtual time model] in
  // policy/simulate.h for where the simulator charges them.
  std::size_t host_page_bytes = std::size_t{2} << 20;  // the arena's VMM page
  std::uint64_t vmm_map_ns = 0, vmm_map_per_page_ns = 0;
  std::uint64_t vmm_unmap_ns = 0, vmm_unmap_per_page_ns = 0;
  std::uint64_t vmm_set_access_ns = 0, vmm_set_access_per_page_ns = 0;
  std::uint64_t launch_enqueue_ns = 0;
  std::uint64_t copy_enqueue_ns = 0;
  std::uint64_t event_record_ns = 0;
  std::uint64_t stream_wait_event_ns = 0;

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
  // The pages a move of `bytes` remaps (at least one).
  std::uint64_t host_pages(std::size_t bytes) const {
    if (host_page_bytes == 0) return 1;
    return std::max<std::uint64_t>(1, (bytes + host_page_bytes - 1) / host_page_bytes);
  }
  // The host time of remapping `bytes` (one buffer's pages, a contiguous run) from
  // one backing to the other, as swap mode does for an eviction (unmap the device
  // memory, map the host handle, grant access) and a fetch (the reverse): one unmap
  // and one map per page, one access grant for the run. Paid with or without a copy.
  std::uint64_t remap_host_ns(std::size_t bytes) const {
    const std::uint64_t pages = host_pages(bytes);
    return pages * (vmm_unmap_ns + vmm_unmap_per_page_ns + vmm_map_ns + vmm_map_per_page_ns +
                    vmm_set_access_per_page_ns) +
           vmm_set_access_ns;
  }
  // The host time of a fetch: the remap, and with a copy its enqueue, the event that
  // marks its end and the compute stream's wait on it.
  std::uint64_t fetch_host_ns(std::size_t bytes, bool copy) const {
    return remap_host_ns(bytes) +
           (copy ? copy_enqueue_ns + event_record_ns + stream_wait_event_ns : 0);
  }
  // The host time of an eviction: the remap, and with a copy out the event after the
  // launch it follows, the copy stream's wait on it, the copy's enqueue and its end event.
  std::uint64_t evict_host_ns(std::size_t bytes, bool copy) const {
    return remap_host_ns(bytes) +
           (copy ? 2 * event_record_ns + stream_wait_event_ns + copy_enqueue_ns : 0);
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
