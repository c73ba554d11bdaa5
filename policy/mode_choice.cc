// Swap against um, predicted from a profile (see mode_choice.h).
#include "policy/mode_choice.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "policy/page_model.h"
#include "policy/profile_model.h"
#include "policy/schedule.h"
#include "policy/simulate.h"

namespace oversub::policy {

namespace {

constexpr std::size_t page_bytes = std::size_t{2} << 20;  // the arena's page

// The costs both predictions use: the profile's link rates where usable, as
// choose_long_lived_layout (policy/page_model.cc) takes them, else the rates timed at
// start, else the stand-in.
device_model device_of(const profiler::profile& p, const mode_costs& c) {
  device_model device;
  device.memory_bandwidth = c.memory_bandwidth;
  double h2d = profile_link_rate(p.device.h2d_bytes_per_s);
  double d2h = profile_link_rate(p.device.d2h_bytes_per_s);
  if (h2d <= 0 && d2h <= 0) {
    h2d = c.timed_h2d_bytes_per_s;
    d2h = c.timed_d2h_bytes_per_s;
  }
  device.costs.h2d_bytes_per_s = h2d > 0 ? h2d : d2h > 0 ? d2h : c.link_bytes_per_s;
  device.costs.d2h_bytes_per_s = d2h > 0 ? d2h : h2d > 0 ? h2d : c.link_bytes_per_s;
  // See Note [Launches over the room] in policy/iteration_model.h: a kernel reads host
  // memory no faster than a pinned copy, so the copy rate gives the least time.
  device.costs.host_access_bytes_per_s = device.costs.h2d_bytes_per_s;
  device.costs.copy_setup_ns = c.copy_setup_ns;
  device.costs.managed_fault_ns = c.managed_fault_ns;
  device.costs.managed_page_bytes = c.managed_page_bytes;
  return device;
}

// Swap's prediction with the mover's remaps (Note [Predicting swap against um] in
// policy/mode_choice.h): the learner's plan over the pages in the layout order, on
// the link alone as the library plans it, replayed with each page move remapped by
// one host thread (Note [Virtual time model] in policy/simulate.h). 0 where the page
// model cannot be planned; its remaps in remaps.
std::uint64_t with_mover(const profiler::profile& p, std::size_t capacity_bytes,
                         const device_model& device, const std::vector<std::uint32_t>& order,
                         const mode_costs& c, std::uint64_t& remaps) {
  const profile_model buffers = model_from_profile(p, device, duration_source::automatic);
  if (!buffers.error.empty()) return 0;
  page_model m = pages_of_profile(p, buffers.model, page_bytes, 256, order);
  if (!m.error.empty()) return 0;
  // See Note [Launches over the room] in policy/iteration_model.h.
  trim_launches_over_room(m.model, capacity_bytes);
  cost_model costs = device.costs;
  // The three calls' sum per page, of which run_ns shared by a run's pages.
  const std::uint64_t run_ns = std::min(c.run_ns, c.remap_ns);
  costs.mover.set_run_and_page(run_ns, c.remap_ns - run_ns, page_bytes);
  // A run grouped with the one before it pays the repeat figure (set_run_and_page puts
  // a run's part in the unmap's; grouped_run_ns takes no more than that part).
  costs.mover.vmm_unmap_repeat_ns = static_cast<std::int64_t>(c.run_repeat_ns);
  // See Note [Planned with the mover's costs] in policy/schedule.h.
  const schedule_result r = plan_schedule(
      m.model,
      planning_capacity(capacity_bytes, page_bytes,
                        costs.mover_batch_pages(capacity_bytes / page_bytes),
                        largest_launch_footprint(m.model).bytes),
      costs, policy_kind::cost, 0);
  if (!r.ok()) return 0;
  const simulation sim = simulate(m.model, r.value, costs);
  remaps = sim.remaps;
  if (c.vmm_waits) {
    // Each remap drains the device's queue first, so the device has nothing to run
    // while it lasts: the remaps add their host time to the iteration.
    return sim.iteration_ns + sim.host_remap_ns;
  }
  return sim.iteration_ns;
}

}  // namespace

iteration_model managed_units(const iteration_model& m, unit_lives* lives) {
  iteration_model out;
  out.backward_begin = m.backward_begin;
  std::vector<buffer_id> unit_of(m.buffers.size());
  std::map<std::size_t, std::set<buffer_id>> free_units;  // by size, lowest first
  auto new_unit = [&](std::size_t bytes) {
    out.buffers.push_back(model_buffer{bytes, true, 0, 0, 0});
    if (lives != nullptr) lives->emplace_back();
    return static_cast<buffer_id>(out.buffers.size() - 1);
  };
  if (lives != nullptr) lives->clear();
  std::vector<std::vector<buffer_id>> born(m.launches.size()), dying(m.launches.size());
  for (std::size_t b = 0; b < m.buffers.size(); ++b) {
    const model_buffer& x = m.buffers[b];
    if (x.long_lived || x.alloc_launch >= m.launches.size()) {
      unit_of[b] = new_unit(x.bytes);
      if (lives != nullptr) lives->back().emplace_back(0, kLongLived);
    } else {
      born[x.alloc_launch].push_back(static_cast<buffer_id>(b));
      dying[std::min<std::size_t>(x.free_launch, m.launches.size() - 1)].push_back(
          static_cast<buffer_id>(b));
    }
  }
  auto mapped = [&](const std::vector<buffer_id>& ids) {
    std::vector<buffer_id> u;
    for (buffer_id b : ids) u.push_back(unit_of[b]);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    return u;
  };
  for (std::size_t i = 0; i < m.launches.size(); ++i) {
    for (buffer_id b : born[i]) {
      std::set<buffer_id>& f = free_units[m.buffers[b].bytes];
      if (f.empty()) {
        unit_of[b] = new_unit(m.buffers[b].bytes);
      } else {
        unit_of[b] = *f.begin();
        f.erase(f.begin());
      }
      if (lives != nullptr) {
        (*lives)[unit_of[b]].emplace_back(m.buffers[b].alloc_launch, m.buffers[b].free_launch);
      }
    }
    model_launch l = m.launches[i];
    l.uses = mapped(m.launches[i].uses);
    l.writes = mapped(m.launches[i].writes);
    out.launches.push_back(std::move(l));
    for (buffer_id b : dying[i]) free_units[m.buffers[b].bytes].insert(unit_of[b]);
  }
  return out;
}

// See Note [um's moves] in policy/mode_choice.h.
void um_moves(const iteration_model& units, const unit_lives& lives, std::size_t paged_above,
              bool discards, schedule& plan) {
  // Content a unit holds after launch i (before launch 0 where i is -1); a unit left to
  // demand paging is never discarded.
  const auto live_after = [&](buffer_id u, std::int64_t i) {
    if (!discards || units.buffers[u].bytes > paged_above) return true;
    for (const auto& [from, to] : lives[u]) {
      if (to == kLongLived || (from <= i && i < static_cast<std::int64_t>(to))) return true;
    }
    return false;
  };
  for (evict_action& e : plan.evict_at_start) e.copy_out = live_after(e.buffer, -1);
  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    for (fetch_action& f : plan.launches[i].fetch_before) f.copy_in = true;
    for (evict_action& e : plan.launches[i].evict_after) {
      e.copy_out = live_after(e.buffer, static_cast<std::int64_t>(i));
    }
  }
  for (fetch_action& f : plan.end_fetches) f.copy_in = true;
}

namespace {

// um's prediction into out (Note [Predicting swap against um] in policy/mode_choice.h).
void predict_um(const profiler::profile& p, std::size_t capacity_bytes,
                const device_model& copies, const mode_costs& c, mode_prediction& out) {
  // Every move um makes is a migration: its prefetches as its faults.
  device_model device = copies;
  if (c.managed_to_device_bytes_per_s > 0) {
    device.costs.h2d_bytes_per_s = device.costs.managed_h2d_bytes_per_s =
        c.managed_to_device_bytes_per_s;
  }
  if (c.managed_to_host_bytes_per_s > 0) {
    device.costs.d2h_bytes_per_s = device.costs.managed_d2h_bytes_per_s =
        c.managed_to_host_bytes_per_s;
  }
  const profile_model buffers = model_from_profile(p, device, duration_source::automatic);
  if (!buffers.error.empty()) {
    out.um_error = buffers.error;
    return;
  }
  unit_lives lives;
  iteration_model model = managed_units(buffers.model, &lives);
  // See Note [um's units] in policy/mode_choice.h: each unit holds whole pages of the
  // device, and the driver migrates whole pages.
  const std::size_t page = device.costs.managed_page_bytes;
  if (page != 0) {
    for (model_buffer& b : model.buffers) b.bytes = (b.bytes + page - 1) / page * page;
  }
  out.unlimited_ns = unlimited_iteration_ns(model, device.costs);
  const schedule_result r = plan_schedule(model, planning_capacity(capacity_bytes, page_bytes),
                                          device.costs, policy_kind::cost, 0);
  if (!r.ok()) {
    out.um_error = r.error;
    return;
  }
  const std::size_t paged_above = capacity_bytes / 4;
  schedule plan = r.value;
  um_moves(model, lives, paged_above, c.managed_discards, plan);
  // The replay's evictions that copy nothing are discards (Note [um's moves] in
  // policy/mode_choice.h), their cost per page of the cost model's size.
  cost_model replayed = device.costs;
  if (c.managed_discards) {
    const std::uint64_t per_64k =
        c.managed_discard_page_ns != 0 ? c.managed_discard_page_ns : c.managed_fault_ns;
    replayed.discard_page_ns =
        std::max<std::uint64_t>(per_64k * replayed.managed_page_bytes / (64 * 1024), 1);
  }
  // See Note [The room um's driver has] in policy/mode_choice.h.
  plan.capacity_bytes = std::max(plan.capacity_bytes, c.managed_room_bytes);
  std::uint64_t ns = simulate(model, plan, replayed).iteration_ns;
  // A buffer paged on demand: every move of it migrates (um_moves copies them all).
  auto fetch = [&](const fetch_action& f) {
    const std::size_t bytes = model.buffers[f.buffer].bytes;
    if (bytes <= paged_above) return;
    ns += device.costs.fault_in_ns(bytes);
    out.um_paged_bytes += bytes;
  };
  auto evict = [&](const evict_action& e) {
    const std::size_t bytes = model.buffers[e.buffer].bytes;
    if (bytes <= paged_above) return;
    ns += device.costs.fault_out_ns(bytes);
    out.um_paged_bytes += bytes;
  };
  for (const evict_action& e : plan.evict_at_start) evict(e);
  for (const launch_actions& a : plan.launches) {
    for (const fetch_action& f : a.fetch_before) fetch(f);
    for (const evict_action& e : a.evict_after) evict(e);
  }
  for (const fetch_action& f : plan.end_fetches) fetch(f);
  out.um_ns = ns;
}

}  // namespace

mode_prediction predict_modes(const profiler::profile& p, std::size_t capacity_bytes,
                              const mode_costs& costs) {
  mode_prediction out;
  const device_model device = device_of(p, costs);
  const layout_choice swap = choose_long_lived_layout(
      p, capacity_bytes, costs.link_bytes_per_s, costs.copy_setup_ns, costs.memory_bandwidth);
  if (swap.error.empty()) {
    out.swap_replay_ns = swap.predicted_ns[static_cast<int>(swap.kind)];
    out.swap_ns = std::max(out.swap_replay_ns, with_mover(p, capacity_bytes, device, swap.order,
                                                          costs, out.swap_remaps));
  } else {
    out.swap_error = swap.error;
  }
  predict_um(p, capacity_bytes, device, costs, out);
  if (out.um_error.empty()) {
    const double swap_ns = static_cast<double>(out.swap_ns);
    out.um_faster = !out.swap_error.empty() ||
                    static_cast<double>(out.um_ns) < (1.0 - um_margin) * swap_ns;
  }
  return out;
}

}  // namespace oversub::policy
