// profile_model: profile to iteration model (policy/profile_model.h).
#include "policy/profile_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace oversub::policy {

std::uint64_t modeled_duration_ns(std::uint64_t bytes_used, const device_model& device) {
  const double stream_ns = std::ceil(static_cast<double>(bytes_used) * 1e9 / device.memory_bandwidth);
  return std::max<std::uint64_t>(device.costs.launch_latency_ns,
                                 static_cast<std::uint64_t>(stream_ns));
}

profile_model model_from_profile(const profiler::profile& p, const device_model& device,
                                 duration_source durations) {
  profile_model r;
  const std::size_t n = p.launches.size();
  if (n == 0) {
    r.error = "the profile has no launches";
    return r;
  }
  const auto last = static_cast<std::uint32_t>(n - 1);
  iteration_model& m = r.model;
  m.buffers.reserve(p.allocations.size());
  for (const profiler::allocation_record& a : p.allocations) {
    model_buffer b;
    b.bytes = a.bytes;
    b.long_lived = a.long_lived || a.free_at == profiler::no_index;
    // Freed before any launch could use it: a long-lived one freed at position 0, a
    // per-iteration one freed before the next launch (or allocated after the last).
    const bool live_at_no_launch =
        a.free_at != profiler::no_index &&
        (a.long_lived ? a.free_at == 0 : (a.free_at <= a.alloc_at || a.alloc_at >= n));
    if (live_at_no_launch) {
      b.bytes = 0;
      ++r.live_at_no_launch;
    }
    if (b.long_lived) {
      ++r.long_lived;
      if (!a.long_lived) ++r.unfreed;
    } else {
      b.alloc_launch = std::min(a.alloc_at, last);
      const std::uint32_t last_live = a.free_at > a.alloc_at ? a.free_at - 1 : a.alloc_at;
      b.free_launch = std::clamp(last_live, b.alloc_launch, last);
    }
    m.buffers.push_back(b);
  }
  // A buffer holding memory at launch i (for a launch whose buffers are not known).
  auto live_at = [&](std::uint32_t b, std::uint32_t i) {
    const profiler::allocation_record& a = p.allocations[b];
    if (a.long_lived) return a.free_at == profiler::no_index || i < a.free_at;
    if (a.free_at == profiler::no_index) return true;  // taken as long-lived
    return a.alloc_at <= i && i < a.free_at;
  };
  m.launches.reserve(n);
  std::vector<std::uint32_t> every_live;
  for (std::uint32_t i = 0; i < n; ++i) {
    const profiler::launch_record& l = p.launches[i];
    model_launch ml;
    std::uint64_t bytes_used = 0;
    // See Note [A launch whose buffers are not known] in profiler/profile_format.h.
    const bool unknown = l.unreadable();
    if (unknown) {
      ++r.unreadable_launches;
      every_live = l.buffers;
      for (std::uint32_t b = 0; b < m.buffers.size(); ++b) {
        if (live_at(b, i)) every_live.push_back(b);
      }
      std::sort(every_live.begin(), every_live.end());
      every_live.erase(std::unique(every_live.begin(), every_live.end()), every_live.end());
    }
    for (std::uint32_t b : unknown ? every_live : l.buffers) {
      if (b >= m.buffers.size()) {
        r.error = "launch " + std::to_string(i) + " uses allocation " + std::to_string(b) +
                  " of " + std::to_string(m.buffers.size());
        return r;
      }
      if (!unknown && std::find(ml.uses.begin(), ml.uses.end(), b) != ml.uses.end()) continue;
      if (m.buffers[b].bytes == 0 && p.allocations[b].bytes != 0) {
        m.buffers[b].bytes = p.allocations[b].bytes;  // used after all: it holds memory
        --r.live_at_no_launch;
      }
      ml.uses.push_back(b);
      bytes_used += m.buffers[b].bytes;
      model_buffer& buf = m.buffers[b];
      if (!buf.long_lived) {
        buf.alloc_launch = std::min(buf.alloc_launch, i);
        buf.free_launch = std::max(buf.free_launch, i);
      }
    }
    if (durations == duration_source::automatic && l.duration_ns > 0) {
      ml.duration_ns = l.duration_ns;
      ++r.durations_measured;
    } else {
      ml.duration_ns = modeled_duration_ns(bytes_used, device);
      ++r.durations_modeled;
    }
    m.launches.push_back(std::move(ml));
  }
  r.error = validate_model(m);
  return r;
}

}  // namespace oversub::policy
