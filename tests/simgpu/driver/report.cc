// The exit report (see report.h and docs/simgpu.md for its fields).
#include "report.h"

#include <cinttypes>
#include <cstdio>
#include <string>

#include "clock.h"
#include "config.h"
#include "device.h"

namespace simgpu {

void print_report_if_asked() {
  if (!get_config().report || !device_ready()) return;
  const device_state& d = dev();
  const stats& s = d.st;
  log_line("device %s, virtual time %.3f ms, peak device memory %" PRIu64 " bytes (%.3f GiB), "
           "kernels %" PRIu64 ", copies %" PRIu64 " (bytes H2D/D2H/D2D %" PRIu64 "/%" PRIu64
           "/%" PRIu64 "), managed faults %" PRIu64 ", races %" PRIu64,
           d.model.id.c_str(), clock_end_ns() / 1e6, d.peak_bytes,
           static_cast<double>(d.peak_bytes) / (1024.0 * 1024.0 * 1024.0), s.kernels, s.copies,
           s.h2d_bytes, s.d2h_bytes, s.d2d_bytes, s.managed_faults, s.races);
  log_line("memsets %" PRIu64 ", managed pages migrated to device %" PRIu64 " bytes, to host %"
           PRIu64 " bytes, evicted %" PRIu64 " bytes, moved while in use %" PRIu64
           " bytes, discarded %" PRIu64 " bytes; capacity %" PRIu64
           " bytes, in use at exit %" PRIu64 " bytes; kernel bytes in host-located mappings %"
           PRIu64,
           s.memsets, s.managed_to_device_bytes, s.managed_to_host_bytes,
           s.managed_evicted_bytes, s.managed_in_use_bytes, s.managed_discarded_bytes,
           d.capacity_bytes, d.used_bytes,
           s.kernel_host_mapped_bytes);
  // One line per host thread (Note [A clock per host thread] in clock.h): its clock, the
  // time it waited, and its calls by family (count and host ms), families it never
  // called left out.
  for (const host_thread_stats* h : host_threads()) {
    std::string calls;
    double busy = 0;
    for (int f = 0; f < static_cast<int>(host_family::count_); ++f) {
      busy += h->call_ns[f];
      if (h->calls[f] == 0) continue;
      char one[96];
      std::snprintf(one, sizeof one, "%s%s %" PRIu64 " %.3f", calls.empty() ? "" : ", ",
                    host_family_name(static_cast<host_family>(f)), h->calls[f],
                    h->call_ns[f] / 1e6);
      calls += one;
    }
    log_line("host thread %d: clock %.3f ms, busy %.3f ms, waited %.3f ms; calls (count ms): %s",
             h->ordinal, h->clock_ns / 1e6, busy / 1e6, h->waited_ns / 1e6, calls.c_str());
  }
}

}  // namespace simgpu
