// schedule_check: replays a schedule against its iteration, in the schedule's own
// order, and says what is wrong with it. The tests hold every policy to it, and the
// residency engine can run it as a guard before it trusts a schedule.
#ifndef OVERSUB_POLICY_SCHEDULE_CHECK_H
#define OVERSUB_POLICY_SCHEDULE_CHECK_H

#include <string>

#include "policy/iteration_model.h"
#include "policy/schedule.h"

namespace oversub::policy {

// Empty when the schedule is valid for the model, else the first violation:
// - a launch runs with one of its buffers not resident;
// - device bytes exceed capacity_bytes after a fetch;
// - a buffer is fetched while resident or evicted while not resident;
// - content is lost: an eviction without copy_out of a buffer whose host copy is
//   stale and whose content is needed later (a long-lived buffer, or a
//   per-iteration buffer used again), or a fetch without copy_in of a buffer that
//   has content, or a fetch with copy_in of content the host does not hold;
// - the iteration does not end in its start state (resident_at_start resident,
//   nothing else; no per-iteration buffer left resident);
// - planned_peak_bytes is below the peak the replay sees.
std::string check_schedule(const iteration_model& model, const schedule& plan);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_SCHEDULE_CHECK_H
