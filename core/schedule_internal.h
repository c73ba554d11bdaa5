// The learned schedule's learner as its files share it (schedule.cc learns and follows
// the iteration; schedule_costs.cc measures what its plan is made with; tuning.cc
// chooses among variants of its schedule by measured time). Internal to core/.
#ifndef OVERSUB_CORE_SCHEDULE_INTERNAL_H
#define OVERSUB_CORE_SCHEDULE_INTERNAL_H

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/stats.h"
#include "core/schedule.h"
#include "policy/cost_model.h"
#include "policy/iteration_model.h"
#include "policy/schedule.h"
#include "profiler/cupti_source.h"
#include "profiler/period.h"
#include "residency/swap_engine.h"

namespace oversub::core::schedule_internal {

constexpr std::uintptr_t page_bytes = std::uintptr_t{2} << 20;  // the arena's granularity
// See Note [Choosing among schedules by measured time] (core/tuning.cc).
constexpr std::size_t timed_iterations = 2;  // per variant
constexpr int max_record_wait = 8;  // loop starts to wait for the kernels' records
constexpr std::size_t rotations = 8;  // loop starts tried

// Note [What the learner moves]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In swap mode the unit is the arena's 2 MiB page
// (what the engine moves); in um mode a whole managed buffer (what cuMemPrefetchAsync
// moves there), its address and size as the launch's range gave them.
struct unit {
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
  bool operator==(const unit&) const = default;
  bool operator<(const unit& o) const { return addr < o.addr || (addr == o.addr && bytes < o.bytes); }
};

// A variant of the learned iteration's schedule.
struct variant {
  std::size_t rotation = 0;    // the loop body starts this many launches into the period
  std::size_t free_pages = 0;  // pages left out of the plan's capacity past Note [Headroom] in policy/schedule.h
  bool lend = false;           // Note [Lending an evicting page's memory] (residency/swap_engine.h)
  bool operator==(const variant&) const = default;
};

// See Note [Timing on the device] (core/tuning.cc): an iteration of a variant, from the
// last launch of one loop body to the last launch of the next (their launch numbers,
// which tag their kernels' records).
struct interval {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
};

struct trial {
  variant v;
  std::vector<interval> timed;  // empty: no plan at that capacity
  std::uint64_t ns = 0;         // its measured iteration (the faster of two); 0: no plan
};

// Where the choice among variants stands (the stats' "tune_status").
enum class tune_status : std::uint8_t {
  off,              // OVERSUB_TUNE=0, a policy other than cost, or nothing learned yet
  timing,           // variants being timed
  chosen,           // the fastest kept
  reused,           // the same iteration learned again keeps the choice made for it
  no_kernel_times,  // CUPTI gave no kernel records: the plan as learned kept
};

const char* status_name(tune_status s);

struct learner {
  std::mutex mutex;
  // Interned page sets: a token per distinct set.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> tokens_by_hash;
  std::vector<std::vector<unit>> pages_of_token;
  std::vector<const void*> kernel_of_token;  // Note [A launch's token] in core/schedule.cc
  std::vector<std::uint32_t> trace;
  std::uint64_t trace_first = 0;  // launch number (tag) of trace[0]
  // Every launch's token, followed ones too, kept past the trace's restarts (Note [A
  // stretch that did not last] in core/schedule.cc).
  std::vector<std::uint32_t> history;
  // See Note [Dead gaps] in core/dead_gaps.cc: what the engine said happened to the
  // pages' blocks before each launch of the trace (its launch number), and over the
  // learned period (its position), in order.
  struct page_vacancy {
    std::uint64_t at = 0;
    residency::residency_backend::vacancy what;
  };
  std::vector<page_vacancy> vacancies, learned_vacancies;
  std::uint64_t launches = 0;     // launches seen: the next launch's number
  // See Note [The pool's layout changed] (core/schedule.cc): the planned pool's layout
  // generation the trace was taken under.
  std::uint64_t layout_generation = 0;
  bool layout_change_logged = false;
  // The schedule being followed.
  bool following = false;
  int device = 0;
  std::vector<std::uint32_t> learned;      // the period as found (tokens)
  variant current;                         // what is followed
  std::vector<std::uint32_t> period;       // expected tokens: learned, rotated
  std::vector<unit> page_of_id;  // model buffer id -> page (or um buffer)
  policy::schedule plan;
  std::size_t cursor = 0;
  std::vector<residency::byte_range> later;  // fetches that found no room yet
  std::vector<std::uint64_t> later_due;  // the launch number each one's page is used at
  // See Note [Prefetch keeps what is needed sooner] in core/schedule.cc: each page's
  // positions of use in the period (sorted), by model id, and the ids by address.
  std::vector<std::vector<std::uint32_t>> uses_of_id;
  std::unordered_map<std::uintptr_t, policy::buffer_id> id_of_page;
  swap_schedule_stats stats;
  bool deviation_logged = false;
  // See Note [Launches the iteration did not have] in core/schedule.cc: launches that
  // matched no expected one, in a row and in the window of launches (window_launches
  // of them so far).
  std::size_t astray_in_row = 0;
  std::size_t astray_in_window = 0;
  std::size_t window_launches = 0;
  std::uint32_t astray_token = 0;  // the last of them
  bool skip_logged = false;
  bool astray_logged = false;
  // See Note [A stretch that did not last] in core/schedule.cc: the repeating stretch
  // the schedule was learned from, the launches followed then, and the length a new
  // stretch must pass (0: any).
  std::size_t learned_stretch = 0;
  std::uint64_t followed_at_learn = 0;
  std::size_t stretch_to_pass = 0;
  // See Note [Why no iteration was learned] in core/schedule.cc: the last period search.
  const char* search = "none";
  std::size_t search_period = 0;
  std::size_t search_repetitions = 0;
  // What the current schedule was planned from (Note [Launch durations] in
  // core/schedule_costs.cc).
  bool durations_measured = false;
  bool link_measured = false;
  // The link's rates are the driver's migrations' (um mode; Note [um plans at the
  // driver's rates] in core/device_pool.cc).
  bool link_managed = false;
  // No records, the rates of the pinned copies timed at start (Note [Pinned rates at
  // start] in core/device_pool.cc).
  bool link_probed = false;
  // The engine's remaps' host costs were measured and are in costs.mover (Note
  // [Predicting the remaps] in core/schedule_costs.cc).
  bool remap_measured = false;
  // The mover's costs are its batches' (Note [The mover's costs as followed] in
  // core/schedule_costs.cc).
  bool remap_batches = false;
  // The current schedule's model (plan_variant's), to predict it again with those.
  policy::iteration_model model;
  // See Note [A clock without CUPTI] in core/schedule_costs.cc: null until chosen.
  profiler::cupti::clock_fn clock = nullptr;
  // Devices whose engine has the clock (Note [A clock for the first moves] in
  // core/schedule.cc).
  std::vector<bool> clock_given;
  bool source_logged = false;
  std::uint64_t period_first = 0;            // launch number of the period's first launch
  std::uint64_t measured_launches = 0;       // positions with a measured duration
  std::vector<std::uint64_t> durations_ns;   // per position of the learned period
  // See Note [Which part differs] in core/schedule_costs.cc: CUPTI's clock and the backend's
  // totals at the start of the iteration being followed (clock 0: none yet).
  std::uint64_t iteration_mark_ns = 0;
  residency::residency_backend::remap_totals iteration_mark;
  policy::cost_model costs;
  // See Note [Choosing among schedules by measured time] in core/tuning.cc.
  bool tuning = false;
  std::vector<trial> trials;         // tried so far, in order
  tune_status status = tune_status::off;
  bool wrap_seen = false;            // the current variant's loop start has been passed
  std::uint64_t wrap_tag = 0;        // the launch before it
  std::vector<interval> timed;       // the current variant's iterations timed so far
  int settle = 0;                    // iterations to pass untimed first
  bool awaiting = false;             // all timed; the kernels' records are still to come
  int waited = 0;                    // loop starts passed awaiting them
  int record_waits = 0;              // the same, over the whole tuning (stats)
  bool no_times_logged = false;
  bool lend_tried = false;           // Note [Lending as a variant] in core/tuning.cc
  std::vector<std::uint32_t> tuned_for;  // the learned period the choice below is for
  variant tuned;
};

// The process's learner (never destroyed: hooks may run during exit).
learner& state();

// See Note [Launch durations] in core/schedule_costs.cc: l.durations_ns and l.costs for
// the period ending the trace, from what CUPTI measured over the stretch s, else the
// stand-ins; the engine's clock and rates set to match.
void measure(learner& l, const profiler::periodic_stretch& s);
// device_set_copy_clock with l.clock, noting in l.clock_given whether the device's
// engine has it (Note [A clock for the first moves] in core/schedule.cc).
bool give_copy_clock(learner& l, int device, double h2d_bytes_per_s, double d2h_bytes_per_s,
                     bool rates_measured);
// Whether give_copy_clock reached the device's engine.
inline bool clock_given_to(const learner& l, int device) {
  return device >= 0 && static_cast<std::size_t>(device) < l.clock_given.size() &&
         l.clock_given[static_cast<std::size_t>(device)];
}
// See Note [Which part differs] in core/schedule_costs.cc: at the period's first
// launch, the iteration just ended measured part by part.
void note_iteration(learner& l);
// The mover's costs in l.costs from the engine's timings (Note [The mover's costs as
// followed] in core/schedule_costs.cc).
void set_mover_costs(learner& l, const residency::residency_backend::remap_costs& remaps);
// The followed schedule (l.model, l.plan) predicted with l.costs, into l.stats.
void predict(learner& l);

// l.stats with the figures that follow from the learner's state (core/schedule_report.cc).
swap_schedule_stats snapshot(const learner& l);
// The stats' "schedule" section; at exit, and gives up when the learner is busy.
bool report_section(stats::section& out);

// The learned period rotated by v.rotation as a model over its pages, planned at the
// engine's capacity less v.free_pages pages; on success it becomes what is followed
// (l.period, the page ids, l.plan, the prediction), and l.current is v.
bool plan_variant(learner& l, int device, variant v);

// See Note [Dead gaps] in core/dead_gaps.cc: the dead windows of the learned period's
// pages, rotated by v.rotation (ids and uses as plan_variant numbers them).
std::vector<policy::dead_window> dead_windows(
    const learner& l, variant v,
    const std::unordered_map<std::uintptr_t, policy::buffer_id>& id_of_page,
    const std::vector<std::vector<std::uint32_t>>& uses_of_id);

// See Note [Choosing among schedules by measured time] (core/tuning.cc): follow v from
// here on; the launch about to be carried out stays the same launch of the iteration.
bool switch_to(learner& l, int device, variant v);

// At each start of the followed loop body (cursor 0) while tuning, before its moves;
// number is the launch about to run.
void tune_step(learner& l, int device, std::uint64_t number);

}  // namespace oversub::core::schedule_internal

#endif  // OVERSUB_CORE_SCHEDULE_INTERNAL_H
