// page_model: a profile's iteration over the arena's pages (policy/page_model.h).
#include "policy/page_model.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <vector>

#include "policy/placement.h"
#include "policy/schedule.h"
#include "policy/simulate.h"
#include "policy/device_model.h"
#include "policy/profile_model.h"

namespace oversub::policy {

namespace {

constexpr std::size_t arena_alignment = 256;  // pool/memory_resource.h

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

}  // namespace

page_model pages_of_profile(const profiler::profile& p, const iteration_model& buffers,
                            std::size_t page_bytes, std::size_t region_alignment,
                            std::span<const std::uint32_t> long_lived) {
  page_model r;
  r.page_bytes = page_bytes;
  const std::size_t n = buffers.launches.size();
  if (buffers.buffers.size() != p.allocations.size() || page_bytes == 0 ||
      region_alignment == 0) {
    r.error = "the buffer model does not match the profile";
    return r;
  }
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> offset(p.allocations.size(), none);
  // 1. The long-lived zone, in the profile's order or the one given.
  std::vector<std::size_t> zone = long_lived_zone(p);
  if (!long_lived.empty()) {
    if (long_lived.size() != zone.size()) {
      r.error = "the long-lived order does not match the profile";
      return r;
    }
    std::vector<std::size_t> ordered;
    for (std::uint32_t k : long_lived) {
      if (k >= zone.size()) {
        r.error = "the long-lived order does not match the profile";
        return r;
      }
      ordered.push_back(zone[k]);
    }
    zone = std::move(ordered);
  }
  std::size_t end = 0;
  for (std::size_t b : zone) {
    offset[b] = end;
    end += align_up(p.allocations[b].bytes, arena_alignment);
  }
  r.long_lived_bytes = end;
  // 2. The per-iteration buffers' events in the replay's order: at each launch
  // position, its frees, then its allocations; the unfreed are freed at the end.
  struct span {
    std::size_t alloc_pos, free_pos;
  };
  std::vector<std::size_t> members;
  std::vector<span> spans;
  for (std::size_t b = 0; b < p.allocations.size(); ++b) {
    const profiler::allocation_record& a = p.allocations[b];
    if (a.long_lived || a.bytes == 0) continue;
    const model_buffer& m = buffers.buffers[b];
    span s{};
    if (a.free_at == profiler::no_index) {
      s = {std::min<std::size_t>(a.alloc_at, n), n + 1};
      if (m.bytes != 0 && !m.long_lived) s.alloc_pos = std::min<std::size_t>(s.alloc_pos, m.alloc_launch);
    } else if (m.bytes != 0 && !m.long_lived) {
      s = {m.alloc_launch, static_cast<std::size_t>(m.free_launch) + 1};  // widened to its uses
    } else {
      s = {std::min<std::size_t>(a.alloc_at, n), std::min<std::size_t>(a.free_at, n + 1)};
      s.free_pos = std::max(s.free_pos, s.alloc_pos + 1);
    }
    members.push_back(b);
    spans.push_back(s);
  }
  std::vector<std::vector<std::size_t>> allocs_at(n + 2), frees_at(n + 2);
  for (std::size_t k = 0; k < members.size(); ++k) {
    allocs_at[spans[k].alloc_pos].push_back(k);
    frees_at[spans[k].free_pos].push_back(k);
  }
  std::vector<buffer_lifetime> lifetimes(members.size());
  std::uint32_t event = 0;
  for (std::size_t pos = 0; pos < n + 2; ++pos) {
    for (std::size_t k : frees_at[pos]) lifetimes[k].free_time = event++;
    for (std::size_t k : allocs_at[pos]) {
      lifetimes[k].size_bytes = p.allocations[members[k]].bytes;
      lifetimes[k].alloc_time = event++;
    }
  }
  const placement plan = plan_placement(lifetimes, arena_alignment);
  if (!placement_is_valid(lifetimes, plan, arena_alignment)) {
    r.error = "internal error: the planned placement of the per-iteration buffers is not valid";
    return r;
  }
  const std::size_t base = align_up(end, region_alignment);
  for (std::size_t k = 0; k < members.size(); ++k) offset[members[k]] = base + plan.offsets[k];
  r.region_bytes = plan.region_bytes;
  // 3. Each launch's pages, numbered in order of first use (sorted within a launch).
  std::unordered_map<std::size_t, buffer_id> id_of_page;
  r.model.launches.reserve(n);
  std::vector<std::size_t> pages;
  for (const model_launch& l : buffers.launches) {
    pages.clear();
    for (buffer_id b : l.uses) {
      const std::size_t bytes = buffers.buffers[b].bytes;
      if (bytes == 0 || offset[b] == none) continue;
      for (std::size_t pg = offset[b] / page_bytes; pg <= (offset[b] + bytes - 1) / page_bytes;
           ++pg) {
        pages.push_back(pg);
      }
    }
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    model_launch ml;
    ml.duration_ns = l.duration_ns;
    for (std::size_t pg : pages) {
      auto [it, added] =
          id_of_page.emplace(pg, static_cast<buffer_id>(r.model.buffers.size()));
      // Page pg lies at (pg + 1) pages: its place in the arena, never 0 (unknown).
      if (added) r.model.buffers.push_back(model_buffer{page_bytes, true, 0, 0, (pg + 1) * page_bytes});
      ml.uses.push_back(it->second);
    }
    r.model.launches.push_back(std::move(ml));
  }
  r.pages = r.model.buffers.size();
  // 4. See Note [Dead gaps] in core/dead_gaps.cc: the region's pages' dead windows, from
  // their blocks' comings and goings in the replay's order (a page that holds
  // long-lived bytes is never vacant).
  std::vector<std::vector<std::pair<std::uint64_t, bool>>> events(r.pages);
  std::unordered_map<std::size_t, std::uint32_t> occupants;
  const std::size_t first_region_page = (end + page_bytes - 1) / page_bytes;
  const auto blocks = [&](std::size_t k, bool vacating, std::size_t pos) {
    const std::size_t at = offset[members[k]], bytes = p.allocations[members[k]].bytes;
    if (bytes == 0) return;
    for (std::size_t pg = at / page_bytes; pg <= (at + bytes - 1) / page_bytes; ++pg) {
      std::uint32_t& o = occupants[pg];
      const bool changes = vacating ? --o == 0 : o++ == 0;
      auto it = id_of_page.find(pg);
      if (changes && pg >= first_region_page && it != id_of_page.end()) {
        events[it->second].emplace_back(std::min(pos, n), vacating);
      }
    }
  };
  for (std::size_t pos = 0; pos < n + 2; ++pos) {
    for (std::size_t k : frees_at[pos]) blocks(k, true, pos);
    for (std::size_t k : allocs_at[pos]) blocks(k, false, pos);
  }
  std::vector<std::vector<std::uint32_t>> uses(r.pages);
  for (std::size_t i = 0; i < n; ++i) {
    for (buffer_id b : r.model.launches[i].uses) uses[b].push_back(static_cast<std::uint32_t>(i));
  }
  for (buffer_id b = 0; b < r.pages; ++b) {
    if (!events[b].empty() && !uses[b].empty()) {
      add_dead_windows(b, events[b], uses[b], n, r.model.dead_windows);
    }
  }
  r.error = validate_model(r.model);
  return r;
}

const char* to_string(layout_kind k) {
  switch (k) {
    case layout_kind::first_use: return "first use";
    case layout_kind::last_use: return "last use";
    case layout_kind::allocation: break;
  }
  return "allocation order";
}

std::vector<std::size_t> long_lived_zone(const profiler::profile& p) {
  std::vector<std::size_t> zone;
  for (std::size_t b = 0; b < p.allocations.size(); ++b) {
    if (p.allocations[b].long_lived && p.allocations[b].bytes != 0) zone.push_back(b);
  }
  return zone;
}

std::vector<std::uint32_t> long_lived_layout_order(const profiler::profile& p, layout_kind k) {
  if (k == layout_kind::allocation) return {};
  const std::vector<std::size_t> zone = long_lived_zone(p);
  std::vector<std::size_t> index(p.allocations.size(), SIZE_MAX);
  for (std::size_t z = 0; z < zone.size(); ++z) index[zone[z]] = z;
  std::vector<std::uint32_t> key(zone.size(), no_first_use);
  const std::size_t n = p.launches.size();
  for (std::size_t j = 0; j < n; ++j) {
    // First use: the launches from the last back, the earliest one left; last use:
    // from the first on, the latest.
    const std::size_t i = k == layout_kind::first_use ? n - 1 - j : j;
    for (std::uint32_t a : p.launches[i].buffers) {
      if (a < index.size() && index[a] != SIZE_MAX) key[index[a]] = static_cast<std::uint32_t>(i);
    }
  }
  return long_lived_order(key);
}

layout_choice choose_long_lived_layout(const profiler::profile& p, std::size_t capacity_bytes,
                                       double link_bytes_per_s, std::uint64_t copy_setup_ns,
                                       double memory_bandwidth) {
  layout_choice c;
  const std::vector<std::uint32_t> orders[3] = {
      {}, long_lived_layout_order(p, layout_kind::first_use),
      long_lived_layout_order(p, layout_kind::last_use)};
  device_model device;
  device.memory_bandwidth = memory_bandwidth;
  // A direction without a usable rate (profile_link_rate) takes the other's, else the
  // stand-in.
  const double h2d = profile_link_rate(p.device.h2d_bytes_per_s);
  const double d2h = profile_link_rate(p.device.d2h_bytes_per_s);
  device.costs.h2d_bytes_per_s = h2d > 0 ? h2d : d2h > 0 ? d2h : link_bytes_per_s;
  device.costs.d2h_bytes_per_s = d2h > 0 ? d2h : h2d > 0 ? h2d : link_bytes_per_s;
  // See Note [Launches over the room] in policy/iteration_model.h: a kernel reads host
  // memory no faster than a pinned copy.
  device.costs.host_access_bytes_per_s = device.costs.h2d_bytes_per_s;
  device.costs.copy_setup_ns = copy_setup_ns;
  const profile_model buffers = model_from_profile(p, device, duration_source::automatic);
  if (!buffers.error.empty()) {
    c.error = buffers.error;
    return c;
  }
  constexpr std::size_t page = std::size_t{2} << 20;
  for (int k = 0; k < 3; ++k) {
    page_model m = pages_of_profile(p, buffers.model, page, 256, orders[k]);
    if (!m.error.empty()) {
      c.error = m.error;
      return c;
    }
    // See Note [Launches over the room] in policy/iteration_model.h: the headroom never
    // takes room a launch needs (Note [Headroom] in policy/schedule.h).
    trim_launches_over_room(m.model, capacity_bytes);
    const std::size_t capacity = planning_capacity(capacity_bytes, page, 1,
                                                   largest_launch_footprint(m.model).bytes);
    schedule_result r =
        plan_schedule(m.model, capacity, device.costs, policy_kind::cost, 0);
    if (!r.ok()) {
      c.error = r.error;
      return c;
    }
    c.predicted_ns[k] = simulate(m.model, r.value, device.costs).iteration_ns;
    if (c.predicted_ns[k] < c.predicted_ns[static_cast<int>(c.kind)]) {
      c.kind = static_cast<layout_kind>(k);
      c.order = orders[k];
    }
  }
  // Another layout only for a clear gain (min_layout_gain in page_model.h).
  if (static_cast<double>(c.predicted_ns[static_cast<int>(c.kind)]) >
      (1.0 - min_layout_gain) * static_cast<double>(c.predicted_ns[0])) {
    c.kind = layout_kind::allocation;
    c.order.clear();
  }
  return c;
}

}  // namespace oversub::policy
