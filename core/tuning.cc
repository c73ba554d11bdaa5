// Choosing among variants of the swap schedule by measured time (swap_learner.h).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/options.h"
#include "core/schedule_internal.h"
#include "core/device_pool.h"
#include "profiler/launch_timing.h"

namespace oversub::core::schedule_internal {

// Note [Choosing among schedules by measured time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The cost planner's simulator
// (policy/simulate.h) does not rank some choices the engine's real time depends on:
// where the loop body starts (the plan is a loop body from the first launch of the
// learned period, wherever profiler::find_period aligned it, and its steady state
// differs with the start), and how much of the capacity to leave free for fetches
// to land in while evictions are still on their way out (Note [Headroom] in
// policy/schedule.h). On the simtrain points of scripts/bench-swap each is worth 5-15% at
// some points and costs as much at others, and neither the predicted time nor the
// predicted bytes picks the fastest (docs/results/archive.md, "Choosing among schedules by
// measured time"). So, with the cost policy (and OVERSUB_TUNE=1, the default), once an
// iteration is learned the learner follows 24 variants of its schedule in turn: the loop
// body starting at each eighth of the period, each with 0, 1 and 2 steps of pages left
// free (a step: one page, or 1/32 of the capacity where that is more). Each is timed
// on the device (Note [Timing on the device]) for two iterations, and its time is the
// second: the first still carries the switch, which can make it slower or faster
// (the faster of the two was taken until the engine's copies out went page by page,
// See Note [Evictions copy page by page] in residency/swap_engine.h: then, on simtrain --depth 8
// --width 512 --batch 16 at 1.5x on the H100-PCIe model, the variant kept was timed at
// 0.6078 ms and ran at 0.6452 in its steady state). The plan as learned passes
// one iteration untimed before its two: the first iterations after on-demand
// residency settle more slowly (Titan X weight-heavy 1.5x: 6.013 ms timed without it,
// 5.629 in its steady state). The fastest variant is kept (the first on a tie). A
// switch happens at a loop start of the variant left, and keeps the launch about to
// run: the new plan's moves begin there, the on-demand step makes up whatever the
// state left by the old plan lacks, and nothing depends on the schedule for
// correctness (Note [Swap before any profile] in interpose/swap_hooks.h). At about 2.1
// iterations per variant the choice is made some 53 iterations after the learning; a
// training job runs thousands. Learning the same period again (after a deviation)
// keeps the variant chosen for it without timing again. The stats' "schedule" section
// lists every variant timed ("trials"), the one kept and "tune_status".
// OVERSUB_TUNE=0 keeps the first plan: scripts/bench-swap's "swap cost untuned" rows,
// and the short replays of its trace tables and of scripts/papers-tables.
//
// Note [Lending as a variant]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Once the 24 variants are timed, the fastest is timed once
// more with the engine lending evicting pages' memory to fetches that find no room (Note
// [Lending an evicting page's memory] in residency/swap_engine.h: the copy in is ordered after
// the copy out on the GPU instead of the host waiting for it), and the faster of the
// two is kept. Measured alone, lending was 7-16% faster at some simtrain points
// and 7-13% slower at others (docs/design/swap.md); as the 25th variant (after the grid, so it
// costs about two iterations) it makes 6 of the 10 bench points faster: H100-PCIe
// activation-heavy 1.5x 0.6333 -> 0.6273 ms per iteration, 3x 1.7745 -> 1.7423,
// weight-heavy 3x 3.1277 -> 3.0915, 10x 4.6035 -> 4.2930; Titan X weight-heavy 1.5x
// 5.2398 -> 5.1790, 10x 16.4170 -> 16.0213. It is kept at H100-PCIe weight-heavy 1.5x
// too, at the same 1.631 ms; at the other three it was slower and not kept.
// Timing it on every variant of the grid would double the tuning. um mode has no
// pages to lend: 24 variants there.
//
// Note [Timing on the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An iteration of a variant is the time between the
// starts, on the device, of the last launch of one loop body and of the next, from
// CUPTI's kernel records (profiler::timing::kernel_starts; the learner tags those
// launches, Note [Tagging launches] in profiler/launch_timing.h). The host's clock at its
// loop starts, used before, is not the iteration's time wherever the host's lead on the
// device varies: on the full-size ResNet-50 replay (traces/resnet50-b32.oprof,
// 1618 MiB, H100-PCIe model) a variant timed at 56.2 ms by the host ran at 68.8 ms
// per iteration; by its kernels' starts it is timed at 68.812 and 68.790, and the
// variant kept is timed at 68.012 ms and runs at 68.012 (docs/design/swap.md). The last
// launch of the body, not the first: a switch carries out the new plan's moves
// before the launch it happens at, so the first launch's start belongs to neither
// variant (simtrain at 1.5x: the plan as learned was timed 0.682 ms by its first
// launches, 0.710 by its last, and 0.710 is its steady iteration). The records
// come when CUPTI hands its buffers back; the learner forces a flush once all
// variants are timed, and on a GPU the last kernels may still be queued then, so it
// asks again at each loop start, up to max_record_wait of them, following the last
// variant meanwhile. Where no records come (CUPTI held by another tool or missing,
// or records lost) the plan as learned is kept, the stats' "tune_status" says
// "no_kernel_times" and the log says so once: a choice on the host's clock could be
// worse than no choice.


const char* status_name(tune_status s) {
  switch (s) {
    case tune_status::timing: return "timing";
    case tune_status::chosen: return "chosen";
    case tune_status::reused: return "reused";
    case tune_status::no_kernel_times: return "no_kernel_times";
    case tune_status::off: break;
  }
  return "off";
}

// See Note [Choosing among schedules by measured time]: follow v from here on; the launch
// about to be carried out stays the same launch of the iteration.
bool switch_to(learner& l, int device, variant v) {
  const std::size_t n = l.learned.size();
  const std::size_t position = (l.cursor + l.current.rotation) % n;  // in the learned period
  if (!plan_variant(l, device, v)) return false;
  l.cursor = (position + n - v.rotation % n) % n;
  l.later.clear();
  l.later_due.clear();
  return true;
}

// The variants to try after the ones in l.trials, in order: the loop body starting
// at each eighth of the period, with 0, 1 and 2 steps of pages left free (a step: a
// page, or 1/32 of the capacity where that is more); rotations ascend within a step,
// so a switch waits at most an eighth of an iteration for the new loop start.
std::optional<variant> next_variant(const learner& l, int device) {
  const std::size_t n = l.learned.size();
  const std::size_t pages = core::device_residency_capacity(device) / page_bytes;
  const std::size_t step = std::max<std::size_t>(1, pages / 32);
  for (std::size_t f = 0; f < 3; ++f) {
    for (std::size_t q = 0; q < rotations; ++q) {
      const variant v{n * q / rotations, f * step};
      bool tried = false;
      for (const trial& t : l.trials) tried = tried || t.v == v;
      if (!tried) return v;
    }
  }
  return std::nullopt;
}

// See Note [Timing on the device]: each trial's time, once every kernel timed has its
// record; false while some are still to come. *complete: all of them came (not before
// max_record_wait loop starts have passed waiting).
bool time_trials(learner& l, bool* complete) {
  std::vector<std::uint64_t> tags;
  for (const trial& t : l.trials) {
    for (const interval& iv : t.timed) {
      tags.push_back(iv.from);
      tags.push_back(iv.to);
    }
  }
  std::vector<std::uint64_t> starts(tags.size(), profiler::timing::unknown);
  *complete = profiler::timing::kernel_starts(tags.data(), tags.size(), starts.data()) == tags.size();
  if (!*complete) {
    ++l.record_waits;
    return l.waited++ >= max_record_wait;
  }
  std::size_t k = 0;
  for (trial& t : l.trials) {
    t.ns = 0;
    for (std::size_t i = 0; i < t.timed.size(); ++i, k += 2) {
      const std::uint64_t ns = std::max<std::uint64_t>(
          starts[k + 1] > starts[k] ? starts[k + 1] - starts[k] : 0, 1);
      t.ns = ns;  // the last: Note [Choosing among schedules by measured time]
    }
  }
  return true;
}

// All variants timed: keep the fastest (the first on a tie), once their times are
// known; the first if they never come.
void choose(learner& l, int device) {
  bool complete = false;
  if (!time_trials(l, &complete)) return;  // the next loop start asks again
  const trial first = l.trials.front();
  const trial* best = &l.trials.front();
  for (const trial& t : l.trials) {
    if (complete && t.ns != 0 && t.ns < best->ns) best = &t;
  }
  const trial chosen = *best;
  // See Note [Lending as a variant]: the fastest, lending, is timed last.
  if (complete && !l.lend_tried && current_config().mode == run_mode::swap) {
    l.lend_tried = true;
    variant v = chosen.v;
    v.lend = true;
    if (switch_to(l, device, v)) {
      l.awaiting = false;
      l.waited = 0;
      l.wrap_seen = false;
      return;
    }
  }
  if (!(chosen.v == l.current) && !switch_to(l, device, chosen.v)) {
    switch_to(l, device, first.v);  // planned once already: cannot fail
  }
  l.tuning = false;
  l.awaiting = false;
  l.tuned_for = l.learned;
  l.tuned = l.current;
  l.stats.tuned = 1;
  l.status = complete ? tune_status::chosen : tune_status::no_kernel_times;
  l.stats.first_measured_ns = first.ns;
  l.stats.chosen_measured_ns = l.current == chosen.v ? chosen.ns : first.ns;
  l.stats.tune_record_waits = static_cast<std::uint64_t>(l.record_waits);
  const std::string line =
      complete
          ? fmt::format("swap: timed {} variants of the schedule on the device; kept the loop "
                        "body from launch {} of {} with {} {} free{}: {:.3f} ms per iteration "
                        "against {:.3f} ms for the first",
                        l.trials.size(), l.current.rotation, l.learned.size(),
                        l.current.free_pages, l.current.free_pages == 1 ? "page" : "pages",
                        l.current.lend ? ", lending evicting pages' memory" : "",
                        static_cast<double>(l.stats.chosen_measured_ns) / 1e6,
                        static_cast<double>(first.ns) / 1e6)
          : fmt::format("swap: no kernel times from CUPTI for the {} variants of the schedule "
                        "after {} iterations; the plan as learned is kept",
                        l.trials.size(), max_record_wait);
  say(line);
}

// See Note [Choosing among schedules by measured time]: at each start of the followed
// loop body (cursor 0), before its moves; number is the launch about to run.
void tune_step(learner& l, int device, std::uint64_t number) {
  if (l.awaiting) {
    choose(l, device);
    return;
  }
  // See Note [Timing on the device]: the loop body's last launch, the one before this.
  const std::uint64_t tag = number - 1;
  if (!l.wrap_seen) {
    l.wrap_seen = true;
    l.wrap_tag = tag;
    return;
  }
  const interval iv{l.wrap_tag, tag};
  l.wrap_tag = tag;
  if (l.settle > 0) {
    --l.settle;
    return;
  }
  l.timed.push_back(iv);
  if (l.timed.size() < timed_iterations) return;
  l.trials.push_back(trial{l.current, std::move(l.timed), 0});
  l.timed.clear();
  l.wrap_seen = false;
  while (const std::optional<variant> v = next_variant(l, device)) {
    if (switch_to(l, device, *v)) return;
    l.trials.push_back(trial{*v, {}, 0});  // no plan at that capacity
  }
  l.awaiting = true;
  l.waited = 0;
  choose(l, device);
}

}  // namespace oversub::core::schedule_internal
