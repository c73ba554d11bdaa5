// The figures the learned schedule is planned with (see schedule_internal.h): each
// launch's duration and the link's rates, measured or stood in for (Note [Launch
// durations]), the engine's remap costs (Note [Predicting the remaps]), the clock they
// are timed on (Note [A clock without CUPTI]), and the iteration measured part by part
// against the plan's prediction (Note [Which part differs]).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/options.h"
#include "core/device_pool.h"
#include "core/schedule_internal.h"
#include "policy/simulate.h"
#include "profiler/launch_timing.h"

namespace oversub::core::schedule_internal {

namespace {

// Note [Launch durations]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Each launch of the learned iteration is given its kernel's
// measured duration, the median over the iterations in the trace
// (Note [Tagging launches] in profiler/launch_timing.h); the
// link figures are fitted from the engine's own copies, per direction (Note [Link figures
// from the engine's copies] in profiler/launch_timing.h). Where CUPTI cannot be had
// (no libcupti, another tool holds it) or gave no record, the constants below stand in:
// every launch counts the same, so the cost policy ranks by launch distance, and the link
// is, in swap mode, the rates of pinned copies timed at start (Note [Pinned rates at
// start] in core/device_pool.cc), else a PCIe 4/5 x16 link's pinned rate. The verbose
// log says which once, and the stats'
// "schedule" section always. The durations are learned at the launch hook, from CUPTI's
// forced flush: that is once per learned schedule, not per launch.
constexpr std::uint64_t launch_ns = 20'000;
constexpr double link_bytes_per_s = 25e9;
constexpr std::uint64_t copy_setup_ns = 10'000;

std::uint64_t median(std::vector<std::uint64_t>& v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

// Note [Predicting the remaps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where mapping calls are dear, the mover's remaps, not the link, can bound an
// iteration (Note [Remapping runs] in residency/swap_engine.h), and a prediction
// without them misses by as much: ResNet-50 at 1/8 of its bytes, 3x, on the H200's
// measured model, 37.1 ms predicted against 48.5 measured. So the learner's cost model
// takes the engine's own timing of its remaps (run_cost_fit in residency/page_runs.h: a
// part per run and a part per page, from eight runs timed on) as the mover's costs,
// and policy::simulate counts each move's remap on the mover (Note [Virtual time
// model] in policy/simulate.h): predicted_ns then holds them, and the stats
// give the costs used (remap_run_ns, remap_page_ns) and the mover's predicted time per
// iteration (predicted_remap_ns). Before the engine has timed enough runs (the first
// plan of a job that has hardly moved yet), none are counted (remap_source "none"). The
// event and copy enqueues a move also costs are left out: a microsecond or less each.

// Note [A clock without CUPTI]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine times its remaps (Note [Remapping runs] in residency/swap_engine.h) and the
// learner its iterations on one host clock, chosen once (profiler::cupti::host_clock):
// CUPTI's where the library loaded, subscribed or held by another tool (a profiler,
// torch.profiler), from the first launch at which it answers; else, from the first
// launch, the host's monotonic clock. Both count host time in ns, so on a real GPU
// either times the calls; CUPTI's comes first because it is the clock of the copies'
// activity records, on which the link's rates are measured, and because on simgpu it is
// the device's virtual time. Without a clock the engine timed nothing, so its batches
// stayed at one page (Llama 3.2 1B at 1/8, 1.5x, VMM calls that wait, CUPTI held: 2003
// ms an iteration; with the clock 1774, and 1727 with CUPTI ours). The batches also want
// the link's rate: without CUPTI's records, the rates of the pinned copies timed at
// start (Note [Pinned rates at start] in core/device_pool.cc; the same point 1728 ms),
// and where even those could not be timed the constant the plan assumes (Note [Launch
// durations]), 25 GB/s against the H200's 55 there, which halves the batches (1774 ms,
// 711 runs an iteration against 354). An assumed rate sizes batches only: a rate below
// the real one would keep the engine from asking about copies already done (Note [Not
// asking too early] in residency/swap_engine.h), so only measured ones bound a copy's
// end.

// Note [Which part differs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The plan's prediction (predicted_ns) is a model of the library, not the library: its
// mover makes every remap, as soon as it can, its runs formed within windows of moves
// (Note [Virtual time model] in policy/simulate.h), while the engine's mover finishes
// evictions in batches as room is
// wanted and the launching thread fetches a page itself when the mover has not begun
// it by the launch that uses it. Where the prediction misses, the stats say which
// part: for the last whole iteration followed, the learner keeps its measured time
// (the launching thread's clock from one period start to the next, CUPTI's clock), and
// the engine's own accounts over it (residency_backend::moved_totals): the host time
// of the mapping calls made by the mover and by the launching thread, the pages
// remapped and the runs they formed, and the bytes each way. Beside them the
// prediction's remap time (all the mover's), remaps and runs, and bytes. Taken once
// per iteration, at the period's first launch.

// Note [The mover's costs as followed]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The first plan has only the lone runs' costs (the mover's moves before it are a page
// at a time), which count every run of a grouped batch at a family's first calls (Note
// [What a batch costs] in residency/page_runs.cc). Once the schedule's own batches are
// timed (the engine's batch fit is known), the learner takes them as the mover's costs:
// a lone run pays the batch's part and its own, a grouped run its own (mover_costs::
// set_batch_parts; the simulator groups runs as Note [Grouped runs in the simulator] in
// policy/simulate.h says), and predicts the schedule it follows again with them, at the
// start of the first iteration that finds them known: predicted_ns then holds that
// prediction, planned_ns the plan's own, and remap_source says "batches": ResNet-50
// at 1/8 through the caching allocator, 3x, on the H200's measured model, 55.1 ms
// planned, 51.0 predicted so, 47.7 measured. The schedule is not planned again for it
// (planned again there, it ran 47.6 ms against 47.7-47.9: no gain for a switch of
// schedules mid-run); plans made later (a tuning trial, the iteration learned again)
// take them. Where the mapping calls wait for the device, each batch's time holds its
// waits, and the lone runs' fit (Note [Timing calls that may wait] in
// residency/page_runs.cc) stays.
void set_mover_costs(learner& l, const residency::residency_backend::remap_costs& remaps) {
  l.remap_batches = remaps.batch_known && !remaps.calls_wait;
  if (l.remap_batches) {
    l.costs.mover.set_batch_parts(remaps.batch_ns, remaps.batch_run_ns, remaps.batch_page_ns,
                                  remaps.page_bytes);
  } else {
    l.costs.mover.set_run_and_page(remaps.run_ns, remaps.page_ns, remaps.page_bytes);
  }
}

bool give_copy_clock(learner& l, int device, double h2d_bytes_per_s, double d2h_bytes_per_s,
                     bool rates_measured) {
  if (device < 0 ||
      !core::device_set_copy_clock(device, l.clock, h2d_bytes_per_s, d2h_bytes_per_s,
                                   rates_measured)) {
    return false;
  }
  const auto d = static_cast<std::size_t>(device);
  if (d >= l.clock_given.size()) l.clock_given.resize(d + 1, false);
  l.clock_given[d] = true;
  return true;
}

void note_iteration(learner& l) {
  const std::uint64_t now = l.clock != nullptr ? l.clock() : 0;
  if (now == 0) return;
  const residency::residency_backend::remap_totals t = core::device_moved_totals(l.device);
  if (l.iteration_mark_ns != 0 && now > l.iteration_mark_ns) {
    const residency::residency_backend::remap_totals& m = l.iteration_mark;
    l.stats.measured_ns = now - l.iteration_mark_ns;
    l.stats.measured_mover_remap_ns = t.mover_remap_ns - m.mover_remap_ns;
    l.stats.measured_launch_thread_remap_ns = t.launch_remap_ns - m.launch_remap_ns;
    l.stats.measured_remaps = t.pages - m.pages;
    l.stats.measured_runs = t.runs - m.runs;
    l.stats.measured_h2d_bytes = t.bytes_to_device - m.bytes_to_device;
    l.stats.measured_d2h_bytes = t.bytes_to_host - m.bytes_to_host;
  }
  l.iteration_mark_ns = now;
  l.iteration_mark = t;
  // See Note [The mover's costs as followed].
  if (!l.following || !l.remap_measured || l.remap_batches || l.costs.mover.calls_wait) return;
  const residency::residency_backend::remap_costs remaps = core::device_remap_costs(l.device);
  if (!remaps.batch_known || remaps.calls_wait) return;
  set_mover_costs(l, remaps);
  predict(l);
}

void predict(learner& l) {
  const policy::simulation predicted = policy::simulate(l.model, l.plan, l.costs);
  l.stats.predicted_ns = predicted.iteration_ns;
  l.stats.predicted_remap_ns = predicted.host_remap_ns;
  l.stats.predicted_remaps = predicted.remaps;
  l.stats.predicted_runs = predicted.runs;
  l.stats.predicted_h2d_bytes = predicted.h2d_bytes;
  l.stats.predicted_d2h_bytes = predicted.d2h_bytes;
}

namespace {

// Where the link's rates in l.costs come from, for the verbose log.
const char* link_origin(const learner& l) {
  return l.link_managed    ? "the driver's managed migrations, measured at start"
         : l.link_measured ? "from the engine's copies"
         : l.link_probed   ? "pinned copies timed at start"
                           : "constant";
}

}  // namespace

void measure(learner& l, const profiler::periodic_stretch& s) {
  const std::size_t n = s.end - s.begin;
  std::vector<std::uint64_t> seen(n, profiler::timing::unknown);
  profiler::timing::durations(l.trace_first + s.begin, n, seen.data());
  l.durations_ns.assign(s.period, launch_ns);
  l.measured_launches = 0;
  std::vector<std::uint64_t> samples;
  for (std::size_t p = 0; p < s.period; ++p) {
    samples.clear();
    // Position p of the period is trace position end - period + p, and every period
    // before it in the stretch.
    for (std::size_t i = n - s.period + p;; i -= s.period) {
      if (seen[i] != profiler::timing::unknown) samples.push_back(seen[i]);
      if (i < s.period) break;
    }
    if (samples.empty()) continue;
    l.durations_ns[p] = median(samples);
    ++l.measured_launches;
  }
  l.durations_measured = l.measured_launches != 0;

  l.costs = policy::cost_model{};
  l.costs.h2d_bytes_per_s = link_bytes_per_s;
  l.costs.d2h_bytes_per_s = link_bytes_per_s;
  l.costs.copy_setup_ns = copy_setup_ns;
  const profiler::timing::link_estimate link = profiler::timing::link();
  l.link_measured = link.h2d.bytes_per_s > 0 || link.d2h.bytes_per_s > 0;
  l.link_probed = false;
  if (l.link_measured) {
    // A direction with no copy yet takes the other's figure.
    const double h2d = link.h2d.bytes_per_s > 0 ? link.h2d.bytes_per_s : link.d2h.bytes_per_s;
    const double d2h = link.d2h.bytes_per_s > 0 ? link.d2h.bytes_per_s : link.h2d.bytes_per_s;
    l.costs.h2d_bytes_per_s = h2d;
    l.costs.d2h_bytes_per_s = d2h;
    // The fit's setup where there is one; an effective rate already holds it.
    const int fitted = int{link.h2d.fitted} + int{link.d2h.fitted};
    l.costs.copy_setup_ns =
        fitted == 0 ? 0
                    : (link.h2d.setup_ns + link.d2h.setup_ns) / static_cast<std::uint64_t>(fitted);
    // See Note [Not asking too early] (residency/swap_engine.h): CUPTI's clock is the clock the
    // rates were measured on.
    give_copy_clock(l, l.device, h2d, d2h, /*rates_measured=*/true);
  } else if (const core::link_rates pinned = current_config().mode == run_mode::swap
                                                ? core::pinned_copy_rates(l.device)
                                                : core::link_rates{};
             pinned.to_device > 0 && pinned.to_host > 0) {
    // See Note [Pinned rates at start] in core/device_pool.cc.
    l.link_probed = true;
    l.costs.h2d_bytes_per_s = pinned.to_device;
    l.costs.d2h_bytes_per_s = pinned.to_host;
    give_copy_clock(l, l.device, pinned.to_device, pinned.to_host, /*rates_measured=*/true);
  } else {
    // See Note [A clock without CUPTI]: the constant sizes the engine's batches only.
    give_copy_clock(l, l.device, link_bytes_per_s, link_bytes_per_s, /*rates_measured=*/false);
  }
  // See Note [um plans at the driver's rates] in core/device_pool.cc: um moves by
  // migrations, whatever the copies ran at.
  if (const core::managed_rates m = core::device_migration_rates(l.device); m.to_device > 0) {
    l.costs.h2d_bytes_per_s = m.to_device;
    l.costs.d2h_bytes_per_s = m.to_host;
    l.link_managed = true;
  }
  // See Note [Predicting the remaps].
  const residency::residency_backend::remap_costs remaps = core::device_remap_costs(l.device);
  l.remap_measured = remaps.run_ns + remaps.page_ns != 0;
  l.remap_batches = false;
  if (l.remap_measured) {
    set_mover_costs(l, remaps);
    // The simulator gathers what the engine gathers (Note [Batches that keep up] in
    // residency/swap_engine.h).
    l.costs.mover.batch_pages = core::device_batch_pages(l.device);
    // See Note [Mapping calls that wait] in policy/simulate.h.
    l.costs.mover.calls_wait = remaps.calls_wait;
  }
  if (!l.source_logged) {
    // Once, in the OVERSUB_VERBOSE=1 output (and at OVERSUB_LOG=info).
    l.source_logged = true;
    std::string why;
    const profiler::timing::source src = profiler::timing::start(&why);
    std::string line;
    if (l.durations_measured) {
      line = fmt::format("swap: the schedule is planned from measured figures: kernel durations "
                         "from CUPTI ({} of {} launches), link {:.1f} GB/s h2d, {:.1f} GB/s d2h "
                         "({})",
                         l.measured_launches, s.period, l.costs.h2d_bytes_per_s / 1e9,
                         l.costs.d2h_bytes_per_s / 1e9,
                         link_origin(l));
    } else {
      line = fmt::format("swap: no kernel durations from CUPTI ({}); the schedule is planned "
                         "with {} us per launch and a link of {:.1f} GB/s h2d, {:.1f} GB/s d2h "
                         "({})",
                         src == profiler::timing::source::cupti ? "no activity records"
                         : src == profiler::timing::source::held ? "CUPTI is held by " + why
                                                                 : why,
                         launch_ns / 1000, l.costs.h2d_bytes_per_s / 1e9,
                         l.costs.d2h_bytes_per_s / 1e9, link_origin(l));
    }
    say(line);
  }
}


}  // namespace oversub::core::schedule_internal
