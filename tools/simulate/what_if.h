// what_if: the simulator's runs. For one iteration model on one device, each
// (capacity, policy) point is planned (policy::plan_schedule), checked
// (policy::check_schedule) and replayed in virtual time (policy::simulate); the
// figures `oversub simulate` and `oversub tune-batch` report come from here.
#ifndef OVERSUB_TOOLS_SIMULATE_WHAT_IF_H
#define OVERSUB_TOOLS_SIMULATE_WHAT_IF_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/iteration_model.h"
#include "policy/schedule.h"
#include "policy/simulate.h"

namespace oversub::tools {

// One (capacity, policy) point.
struct what_if_point {
  policy::policy_kind policy = policy::policy_kind::cost;
  std::size_t capacity_bytes = 0;
  // Empty: simulated. Otherwise why there is no schedule (a launch needs more than
  // the capacity: plan_schedule's message) or, never expected, what the checker or
  // the replay found wrong.
  std::string error;
  policy::simulation sim;                // valid when error is empty
  std::uint64_t unlimited_ns = 0;        // launch latency plus every duration
  std::uint64_t transfer_bound_ns = 0;   // policy::transfer_bound_ns
  std::uint64_t window_bound_ns = 0;     // policy::window_bound_ns
  // iteration_ns / unlimited_ns - 1 (0.25: 25% slower than with enough memory).
  double overhead = 0;
  bool fits = false;  // peak live bytes <= capacity: nothing needs to move
  // The launches over the room, planned with part of their buffers in host memory (Note
  // [Launches over the room] in policy/iteration_model.h; um-naive: none, refused).
  policy::trimmed_launches over_room;
};

// The figures of the model that do not depend on the point.
struct model_summary {
  std::size_t peak_live_bytes = 0;
  policy::largest_launch largest;
  std::uint64_t unlimited_ns = 0;
  std::size_t launches = 0;
  std::size_t buffers = 0;
};

model_summary summarize(const policy::iteration_model& model, const policy::cost_model& costs);

// over_room: plan the launches over the capacity as swap mode does (Note [Launches over
// the room] in policy/iteration_model.h; not um-naive): for plans over the library's
// pages. Otherwise such a launch is an error naming it.
what_if_point run_point(const policy::iteration_model& model, std::size_t capacity_bytes,
                        const policy::cost_model& costs, policy::policy_kind kind,
                        bool over_room = false);

// `points` capacities evenly spaced from peak_live_bytes down to the largest
// launch's footprint, both included, descending; one point (peak live) when
// points == 1 or the two are equal.
std::vector<std::size_t> sweep_capacities(const model_summary& summary, unsigned points);

// All four policies in the order cost, vdnn-all, lru, um-naive.
std::vector<policy::policy_kind> all_policies();

// "cost", "vdnn-all", "lru", "um-naive", or false.
bool parse_policy(const std::string& text, policy::policy_kind& out);

}  // namespace oversub::tools

#endif  // OVERSUB_TOOLS_SIMULATE_WHAT_IF_H
