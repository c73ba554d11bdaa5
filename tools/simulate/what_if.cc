// what_if: planning, checking and replaying one point (tools/simulate/what_if.h).
#include "tools/simulate/what_if.h"

#include "policy/schedule_check.h"

namespace oversub::tools {

model_summary summarize(const policy::iteration_model& model, const policy::cost_model& costs) {
  model_summary s;
  s.peak_live_bytes = policy::peak_live_bytes(model);
  s.largest = policy::largest_launch_footprint(model);
  s.unlimited_ns = policy::unlimited_iteration_ns(model, costs);
  s.launches = model.launches.size();
  s.buffers = model.buffers.size();
  return s;
}

what_if_point run_point(const policy::iteration_model& model, std::size_t capacity_bytes,
                        const policy::cost_model& costs, policy::policy_kind kind,
                        bool over_room) {
  what_if_point p;
  p.policy = kind;
  p.capacity_bytes = capacity_bytes;
  p.unlimited_ns = policy::unlimited_iteration_ns(model, costs);
  p.transfer_bound_ns = policy::transfer_bound_ns(model, capacity_bytes, costs);
  p.window_bound_ns = policy::window_bound_ns(model, capacity_bytes, costs);
  p.fits = policy::peak_live_bytes(model) <= capacity_bytes;
  // As the library plans (Note [Headroom] in policy/schedule.h, its 2 MiB pages): its
  // learner compares the candidate plans in virtual time with the mover's remaps,
  // where its engine has timed them (Note [Planned with the mover's costs] in
  // policy/schedule.h).
  // See Note [Launches over the room] in policy/iteration_model.h: swap's plans only.
  // The bounds above stay those of every use (what the trimmed launches read on the host
  // crosses the link too).
  const bool over = policy::largest_launch_footprint(model).bytes > capacity_bytes;
  policy::iteration_model trimmed;
  const policy::iteration_model* planned = &model;
  if (over && over_room && kind != policy::policy_kind::um_naive) {
    planned = &policy::fitted_to_room(model, capacity_bytes, trimmed, &p.over_room);
  }
  policy::schedule_result plan = policy::plan_schedule(
      *planned,
      policy::planning_capacity(capacity_bytes, std::size_t{2} << 20,
                                costs.mover_batch_pages(capacity_bytes / (std::size_t{2} << 20)),
                                policy::largest_launch_footprint(*planned).bytes),
      costs, kind);
  if (!plan.ok()) {
    p.error = plan.error;
    if (over && kind != policy::policy_kind::um_naive) {
      p.error += " (swap mode runs such a launch with part of its memory read in host memory "
                 "over the link: --granularity page plans it so)";
    }
    return p;
  }
  if (std::string bad = policy::check_schedule(*planned, plan.value); !bad.empty()) {
    p.error = "internal error: the " + std::string(policy::policy_name(kind)) +
              " schedule fails its check: " + bad;
    return p;
  }
  p.sim = policy::simulate(*planned, plan.value, costs);
  if (!p.sim.error.empty()) {
    p.error = "internal error: the replay of the " + std::string(policy::policy_name(kind)) +
              " schedule: " + p.sim.error;
    return p;
  }
  p.overhead = p.unlimited_ns == 0 ? 0.0
                                   : static_cast<double>(p.sim.iteration_ns) /
                                             static_cast<double>(p.unlimited_ns) - 1.0;
  return p;
}

std::vector<std::size_t> sweep_capacities(const model_summary& summary, unsigned points) {
  const std::size_t hi = summary.peak_live_bytes;
  const std::size_t lo = std::min(summary.largest.bytes, hi);
  if (points <= 1 || hi == lo) return {hi};
  std::vector<std::size_t> caps;
  for (unsigned k = 0; k < points; ++k) {
    // hi - (hi - lo) * k / (points - 1), exact at both ends.
    const auto span = static_cast<unsigned __int128>(hi - lo);
    caps.push_back(hi - static_cast<std::size_t>(span * k / (points - 1)));
  }
  return caps;
}

std::vector<policy::policy_kind> all_policies() {
  return {policy::policy_kind::cost, policy::policy_kind::vdnn_all, policy::policy_kind::lru,
          policy::policy_kind::um_naive};
}

bool parse_policy(const std::string& text, policy::policy_kind& out) {
  for (policy::policy_kind k : all_policies()) {
    if (text == policy::policy_name(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

}  // namespace oversub::tools
