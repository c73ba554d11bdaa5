// dead_gaps: where the learned period's pages hold no live data, from what the engine
// said of their blocks while the learner learned (Note [Dead gaps]).
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/schedule_internal.h"
#include "policy/iteration_model.h"

namespace oversub::core::schedule_internal {

// Note [Dead gaps]
// ~~~~~~~~~~~~~~~~
// The engine copies no page whose content is dead (Note [Dead pages] in
// residency/swap_engine.h): at ResNet-50's full size, 1.5x, on the H200's measured
// model, 43% of its evictions and 32% of its fetches went without a copy. A plan that
// copies them all is planned and predicted on a link busier than the engine's. So
// while it learns, the learner takes from the engine, at each launch, what happened to
// the pages' blocks since the launch before (residency_backend::take_vacancies): a
// page's last live block vacated, a block handed out on it again. In the learned
// period, a page vacated before launch k is dead for the moves before launches k to
// b, where b is the first of the launch before which it next gets a block and its
// next use (policy::add_dead_windows; the model's dead windows, policy/iteration_model.h):
// the engine's content_dead holds up to b's own work. The planner evicts a page in
// such a window without a copy, and fetches it without one before b: the fetch before
// b is made after the new block came, by the mover when it gets to it, and the engine
// copies it if any work that may write came between (a memset of the block, say; it
// cannot see which work writes). Only the plan and its prediction use the windows;
// whether a move copies is still the engine's to decide, from the allocation calls (a
// wrong window costs time, never data). On the H200's measured model (iteration 8):
// full-size ResNet-50 at 1.5x predicted 82.53 ms for 66.86 measured before, 74.35 for
// 68.56 with the windows (copies out predicted exactly: 1638 MiB; in 1638 for 1416);
// at 3x 117.69 for 111.60, then 106.83 for 111.60; the 1/8 points within 0.4% where
// they were within 1% (VGG-16 -3.6% -> -3.7%).

// See Note [Dead gaps]: the dead windows of the pages of the learned period (rotated
// by v.rotation).
std::vector<policy::dead_window> dead_windows(
    const learner& l, variant v,
    const std::unordered_map<std::uintptr_t, policy::buffer_id>& id_of_page,
    const std::vector<std::vector<std::uint32_t>>& uses_of_id) {
  const std::size_t n = l.learned.size();
  std::vector<policy::dead_window> out;
  if (n == 0) return out;
  // Per page: (position, vacated), in the engine's order.
  std::map<policy::buffer_id, std::vector<std::pair<std::uint64_t, bool>>> events;
  for (const learner::page_vacancy& e : l.learned_vacancies) {
    auto it = id_of_page.find(e.what.page);
    if (it == id_of_page.end()) continue;
    events[it->second].emplace_back((e.at + n - v.rotation % n) % n, e.what.vacated);
  }
  for (auto& [id, ev] : events) {
    std::stable_sort(ev.begin(), ev.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    policy::add_dead_windows(id, ev, uses_of_id[id], n, out);
  }
  return out;
}

}  // namespace oversub::core::schedule_internal
