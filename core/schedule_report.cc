// The learned schedule's section of the exit statistics (see schedule_internal.h).
#include <algorithm>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "common/options.h"
#include "common/stats.h"
#include "core/schedule_internal.h"
#include "profiler/launch_timing.h"

namespace oversub::core::schedule_internal {

namespace {

constexpr std::size_t max_reported_durations = 4096;  // in the stats JSON

}  // namespace

// l.stats with the figures that follow from the learner's state: the variant
// followed and how many were timed.
swap_schedule_stats snapshot(const learner& l) {
  swap_schedule_stats st = l.stats;
  st.rotation = l.current.rotation;
  st.free_pages = l.current.free_pages;
  st.tune_trials = l.trials.size();
  return st;
}

// The stats' "schedule" section: what the current schedule was planned from. At exit;
// gives up when the learner is busy.
bool report_section(stats::section& out) {
  learner& l = state();
  std::unique_lock<std::mutex> lock(l.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  const swap_schedule_stats st = snapshot(l);
  const profiler::timing::source src = profiler::timing::current();
  const char* durations = st.learned == 0 ? "none" : l.durations_measured ? "cupti" : "constant";
  const char* link = st.learned == 0 ? "none"
                     : l.link_managed ? "managed"
                     : l.link_measured ? "cupti"
                     : l.link_probed   ? "probe"
                                       : "constant";
  const std::size_t n = std::min(l.durations_ns.size(), max_reported_durations);
  std::string durations_ns;
  for (std::size_t i = 0; i < n; ++i) {
    durations_ns += fmt::format("{}{}", i == 0 ? "" : ",", l.durations_ns[i]);
  }
  std::string trials;
  for (std::size_t i = 0; i < l.trials.size(); ++i) {
    trials += fmt::format(R"({}{{"rotation":{},"free_pages":{},"lend":{},"measured_ns":{}}})",
                          i == 0 ? "" : ",", l.trials[i].v.rotation, l.trials[i].v.free_pages,
                          l.trials[i].v.lend, l.trials[i].ns);
  }
  out.begin("schedule")
      .count("learned", st.learned)
      .count("period", st.period)
      .count("pages", st.pages)
      .count("followed", st.followed)
      .count("deviations", st.deviations)
      .count("skipped_launches", st.skipped)
      .count("unplanned_launches", st.unplanned)
      .count("deviation_position", st.deviation_position)
      .count("deviation_expected_pages", st.deviation_expected_pages)
      .count("deviation_pages", st.deviation_pages)
      .count("deviation_common_pages", st.deviation_common_pages)
      .count("cupti_rests", st.cupti_rests)
      .flag("cupti_resting", st.cupti_resting)
      .word("search", l.search)
      .count("search_period", l.search_period)
      .count("search_repetitions", l.search_repetitions)
      .count("trace_launches", l.trace.size())
      .count("distinct_launches", l.pages_of_token.size())
      .count("plan_failures", st.plan_failures)
      .word("cupti", profiler::timing::to_string(src))
      .word("durations_source", durations)
      .count("measured_launches", l.measured_launches)
      .word("link_source", link)
      .gbps("h2d_gbps", l.costs.h2d_bytes_per_s)
      .gbps("d2h_gbps", l.costs.d2h_bytes_per_s)
      .nanoseconds("copy_setup_ns", l.costs.copy_setup_ns)
      .count("period_first_launch", l.period_first)
      .nanoseconds("predicted_ns", st.predicted_ns)
      .nanoseconds("predicted_unlimited_ns", st.predicted_unlimited_ns)
      .word("remap_source", st.learned == 0 || !l.remap_measured ? "none"
                            : l.remap_batches                    ? "batches"
                                                                 : "measured")
      .word("mapping_calls", l.costs.mover.calls_wait ? "wait" : "return")
      .nanoseconds("remap_run_ns", l.costs.mover.vmm_unmap_ns)
      .nanoseconds("remap_page_ns", l.costs.mover.vmm_unmap_per_page_ns)
      .nanoseconds("remap_grouped_run_ns", l.costs.mover.grouped_run_ns())
      .nanoseconds("planned_ns", st.planned_ns)
      .nanoseconds("predicted_remap_ns", st.predicted_remap_ns)
      .count("predicted_remaps", st.predicted_remaps)
      .count("predicted_runs", st.predicted_runs)
      .nanoseconds("measured_ns", st.measured_ns)
      .nanoseconds("measured_mover_remap_ns", st.measured_mover_remap_ns)
      .nanoseconds("measured_launch_thread_remap_ns", st.measured_launch_thread_remap_ns)
      .count("measured_remaps", st.measured_remaps)
      .count("measured_runs", st.measured_runs)
      .bytes("measured_h2d_bytes", st.measured_h2d_bytes)
      .bytes("measured_d2h_bytes", st.measured_d2h_bytes)
      .bytes("predicted_h2d_bytes", st.predicted_h2d_bytes)
      .bytes("predicted_d2h_bytes", st.predicted_d2h_bytes)
      .flag("tune", current_config().tune)
      .count("tuned", st.tuned)
      .count("tune_trials", st.tune_trials)
      .count("rotation", st.rotation)
      .count("free_pages", st.free_pages)
      .flag("lend", l.current.lend)
      .word("tune_status", status_name(l.status))
      .nanoseconds("first_measured_ns", st.first_measured_ns)
      .nanoseconds("chosen_measured_ns", st.chosen_measured_ns)
      .count("tune_record_waits", st.tune_record_waits)
      .list("durations_ns", n, std::move(durations_ns))
      .list("trials", l.trials.size(), std::move(trials));
  return true;
}

}  // namespace oversub::core::schedule_internal
