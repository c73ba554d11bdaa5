// Swap mode's learned schedule (see swap_schedule.h).
#include "core/schedule.h"

#include <algorithm>
#include <bit>
#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "core/device_pool.h"
#include "policy/schedule.h"
#include "policy/simulate.h"
#include "profiler/cupti_source.h"
#include "profiler/launch_timing.h"
#include "core/schedule_internal.h"
#include "profiler/period.h"
#include "residency/um_engine.h"

namespace oversub::core {

namespace schedule_internal {

learner& state() {
  static learner* l = new learner;  // never destroyed: hooks may run during exit
  return *l;
}

}  // namespace schedule_internal

namespace {

using namespace schedule_internal;

constexpr std::size_t max_trace = std::size_t{1} << 16;         // launches kept while learning
constexpr std::size_t check_every = 16;                         // launches between searches, at least

// Note [Searching for the period less often as the trace grows]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// find_period is linear in the trace. Run every check_every launches on a trace that
// keeps growing (a job whose iteration does not form, or one launch over the same
// pages again and again, which Note [No one-page iteration] refuses), it made the
// launch path quadratic: a third of an empty kernel's launch time in swap mode. The
// search runs instead when the trace's length is a multiple of an eighth of the power
// of two below it (16 at least): a constant amount of search per launch, and an
// iteration found at most an eighth of the trace later.
bool search_now(std::size_t trace_size) {
  const std::size_t step = std::max(check_every, std::bit_floor(trace_size) / 8);
  return trace_size % step == 0;
}

// Note [A launch's token]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The learner sees a launch as its token: the set of pages (um: buffers) it uses and
// the function it runs. The pages alone did not tell kernels apart: at a tight memory
// small buffers share pages, and a logging step's sums over each layer's weights
// (simtrain --log-every) had the very page sets of the forward pass's launches, so two
// of them in a row were taken for the schedule's next two launches (Note [Launches
// the iteration did not have]). A function is the same pointer at every launch of a
// kernel through one entry point, so an iteration repeats token for token as before.
std::uint32_t intern(learner& l, const std::vector<unit>& pages, const void* kernel) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the addresses and sizes
  h = (h ^ reinterpret_cast<std::uintptr_t>(kernel)) * 1099511628211ull;
  for (const unit& p : pages) {
    h = (h ^ p.addr) * 1099511628211ull;
    h = (h ^ p.bytes) * 1099511628211ull;
  }
  std::vector<std::uint32_t>& bucket = l.tokens_by_hash[h];
  for (std::uint32_t t : bucket) {
    if (l.kernel_of_token[t] == kernel && l.pages_of_token[t] == pages) return t;
  }
  const auto t = static_cast<std::uint32_t>(l.pages_of_token.size());
  l.pages_of_token.push_back(pages);
  l.kernel_of_token.push_back(kernel);
  bucket.push_back(t);
  return t;
}

policy::policy_kind kind_of(swap_policy p) {
  return p == swap_policy::vdnn_all ? policy::policy_kind::vdnn_all : policy::policy_kind::cost;
}

void clear_trace(learner& l) {
  l.trace_first += l.trace.size();
  l.trace.clear();
  l.vacancies.clear();
}

// See Note [Long-lived layout from a profile] (policy/placement.h): once an iteration is
// learned every long-lived buffer has been allocated; the blocks laid out for none go
// back to the arena, and the log says how many were claimed.
void end_layout(int device) {
  const core::layout_result r = core::device_end_long_lived_layout(device);
  if (r.expected == 0) return;
  const std::string line = fmt::format(
      "pool: the profile's layout placed {} of its {} long-lived buffers ({} laid out for "
      "none given back)",
      r.claimed, r.expected, r.returned);
  say(line);
}

// Note [No one-page iteration]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a GPU, PyTorch's first launches (a model's initialisation: many small
// parameters filled in place, their pages shared) gave the same page set sixteen
// times in a row, and the first search took that as an iteration of one launch over
// one page. The schedule planned from it moved nothing, and what followed ran on
// demand. A training step launches a forward, a backward and an update over more
// than one page set, so a period shorter than min_period launches, or one whose
// launches all touch the same pages, is not taken for the iteration.
constexpr std::size_t min_period = 4;
constexpr const char* learned_search = "learned";  // Note [Why no iteration was learned]

bool could_be_iteration(const std::vector<std::uint32_t>& trace,
                        const profiler::periodic_stretch& s) {
  if (s.period < min_period) return false;
  const auto last = trace.begin() + static_cast<std::ptrdiff_t>(s.end);
  const auto first = last - static_cast<std::ptrdiff_t>(s.period);
  return std::any_of(first, last, [&](std::uint32_t t) { return t != *first; });
}

// See Note [A stretch that did not last]: the launches seen before the trace began
// repeat a longer stretch, of another period, up to the present.
bool inside_longer_repeat(const learner& l, const profiler::periodic_stretch& s) {
  if (l.history.size() <= l.trace.size()) return false;
  const std::optional<profiler::periodic_stretch> h = profiler::find_period(l.history);
  return h && h->end == l.history.size() && h->repetitions() >= 2 &&
         h->period != s.period && h->end - h->begin > s.end - s.begin &&
         could_be_iteration(l.history, *h);
}

// The last period of the trace, planned; the schedule is followed from the next
// launch (the period's first position).
bool learn(learner& l, int device) {
  const std::optional<profiler::periodic_stretch> s = profiler::find_period(l.trace);
  // The repeating stretch must reach the present and cover at least half of what
  // was seen since learning (re)started: two identical launches in a row repeat
  // too, but they are not the training iteration. See Note [No one-page iteration].
  // See Note [Why no iteration was learned] for l.search.
  l.search_period = s ? s->period : 0;
  l.search_repetitions = s ? s->repetitions() : 0;
  l.search = !s                                   ? "nothing repeats"
             : s->end != l.trace.size()           ? "the repeat ended"
             : s->repetitions() < 2               ? "repeated once"
             : 2 * (s->end - s->begin) < l.trace.size() ? "under half the trace"
             : !could_be_iteration(l.trace, *s)   ? "one page set"
             : s->end - s->begin <= l.stretch_to_pass ? "no longer than one that did not last"
             : inside_longer_repeat(l, *s)        ? "inside a longer repeat"
                                                  : learned_search;
  if (l.search != learned_search) return false;
  l.learned.assign(l.trace.end() - static_cast<std::ptrdiff_t>(s->period), l.trace.end());
  l.learned_stretch = s->end - s->begin;  // Note [A stretch that did not last]
  l.followed_at_learn = l.stats.followed;
  const std::uint64_t first = l.trace_first + l.trace.size() - s->period;
  l.learned_vacancies.clear();
  for (const auto& v : l.vacancies) {
    if (v.at >= first) l.learned_vacancies.push_back({v.at - first, v.what});
  }
  l.device = device;  // measure gives this device's engine the link's rates
  measure(l, *s);
  // See Note [Choosing among schedules by measured time] in core/tuning.cc: the same
  // iteration again keeps the variant chosen for it.
  const bool again = !l.tuned_for.empty() && l.tuned_for == l.learned;
  const config& cfg = current_config();
  variant v = again ? l.tuned : variant{};
  if (!plan_variant(l, device, v)) {
    if (v == variant{} || !plan_variant(l, device, v = variant{})) {
      clear_trace(l);
      return false;
    }
  }
  const bool tune = cfg.tune && cfg.policy == swap_policy::cost && l.learned.size() > 1;
  // See Note [Timing on the device] in core/tuning.cc: without CUPTI's kernel records the
  // plan as learned is kept.
  const bool kernel_times = profiler::timing::current() == profiler::timing::source::cupti;
  l.tuning = tune && !again && kernel_times;
  l.status = !tune          ? tune_status::off
             : again        ? tune_status::reused
             : kernel_times ? tune_status::timing
                            : tune_status::no_kernel_times;
  if (l.status == tune_status::no_kernel_times && !l.no_times_logged) {
    l.no_times_logged = true;
    const std::string line = fmt::format(
        "swap: not timing variants of the schedule: no kernel times from CUPTI ({}); the "
        "plan as learned is kept",
        profiler::timing::to_string(profiler::timing::current()));
    say(line);
  }
  l.trials.clear();
  l.record_waits = 0;
  l.lend_tried = false;
  l.wrap_seen = false;
  l.timed.clear();
  l.awaiting = false;
  l.waited = 0;
  l.settle = 1;  // the first scheduled iterations still carry the on-demand ones' state
  l.stats.tuned = again ? 1 : 0;
  l.following = true;
  l.iteration_mark_ns = 0;  // Note [Which part differs] in core/schedule_costs.cc
  const std::size_t n = l.learned.size();
  l.cursor = (n - v.rotation % n) % n;  // the next launch is the learned period's first
  l.period_first = l.trace_first + l.trace.size() - l.period.size();
  profiler::timing::forget_before(l.trace_first + l.trace.size());
  ++l.stats.learned;
  if (cfg.mode == run_mode::swap) end_layout(device);
  l.stats.period = l.period.size();
  l.stats.pages = l.page_of_id.size();
  log::info("swap: learned an iteration of {} launches over {} pages after {} launches; "
            "{} schedule planned (planned peak {} bytes){}",
            l.period.size(), l.page_of_id.size(), l.trace.size(),
            policy::policy_name(l.plan.policy), l.plan.planned_peak_bytes,
            again ? fmt::format(", the variant chosen before (loop start {}, {} pages free)",
                                v.rotation, v.free_pages)
                  : std::string());
  // See Note [No frees seen].
  if (l.stats.learned == 1 && stats::global().frees.total() == 0) {
    log::info("{}: no allocation has been freed since start, so every block a caching "
              "allocator has freed (PyTorch's default) still counts as data and is copied "
              "when it moves; with PyTorch, PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync "
              "shows oversub each tensor's free (docs/guide/running.md)",
              to_string(cfg.mode));
  }
  clear_trace(l);
  return true;
}

// Note [No frees seen]
// ~~~~~~~~~~~~~~~~~~~~
// Under PyTorch's default caching allocator oversub sees segments and never a free, and
// swap then copies dead blocks and fetches segments whole: ResNet-50 at 1/8, a third of
// the cache's memory, 1.28x T_unl against 1.03x with backend:cudaMallocAsync
// (docs/results.md, "PyTorch's cudaMallocAsync backend"). When the first iteration is
// learned with no free seen at all, the log says so once, at info: a program that
// allocates everything at start frees nothing either.

template <typename Action>
void add_ranges(const learner& l, const std::vector<Action>& actions,
                std::vector<residency::byte_range>& out) {
  for (const Action& a : actions) {
    out.push_back(residency::byte_range{l.page_of_id[a.buffer].addr, l.page_of_id[a.buffer].bytes});
  }
}

// Note [Prefetch keeps what is needed sooner]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A scheduled prefetch that finds no room
// begins evictions of its own (the least recently used pages). It must not take a page
// the schedule needs before a page it fetches: that page would leave and be wanted
// back before the fetch pays off. So it keeps every page whose next use from launch i
// comes no later than the latest next use among the pages it fetches. Keeping only
// those up to the soonest such use (7d3e7d4) was as fast or slower at every simtrain
// point and trace measured: Titan X activation-heavy 3x 8.84 -> 8.48 ms per
// iteration, weight-heavy 3x 14.41 -> 14.22 (H100-PCIe 10x 6.92 -> 6.88), GPT-2 at
// 1/8 and 3x 2450 -> 2430 MiB in per iteration, the rest unchanged. Of the pages it
// may take, those used furthest off leave first (Belady), not the least recently used:
// H100-PCIe activation-heavy 3x 2.301 -> 2.143 ms per iteration (Titan X 8.480 ->
// 7.922), weight-heavy 3x 4.116 -> 3.969, 10x 6.884 -> 6.778; Titan X weight-heavy 3x
// 14.219 -> 14.237; the 1.5x points, the traces at 1/8 and full-size ResNet-50's
// steady iteration unchanged. The engine asks only when room is short, and only of its
// eviction candidates: a binary search each.

// Launches from i to the next use of the page at va in the period (wrapping), or none.
std::optional<std::size_t> next_use(const learner& l, std::size_t i, std::uintptr_t va) {
  auto it = l.id_of_page.find(va);
  if (it == l.id_of_page.end()) return std::nullopt;
  const std::vector<std::uint32_t>& uses = l.uses_of_id[it->second];
  if (uses.empty()) return std::nullopt;
  auto next = std::lower_bound(uses.begin(), uses.end(), static_cast<std::uint32_t>(i));
  return next != uses.end() ? *next - i : uses.front() + l.period.size() - i;
}

// Note [Deferred fetches fall due]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A scheduled fetch that finds no room is tried
// again before the next launch (Note [Prefetch without waiting] in residency/swap_engine.h),
// but only until the launch that uses its page: from then on the on-demand step has
// made the page resident, used it, and the schedule may have evicted it again. A
// retry after that brought the page back while its eviction's copy was still
// running: the engine then keeps the page (Note [Batched moves] in
// residency/swap_engine.h), so the copy out was wasted and the room the plan counted on
// never came, and the next prefetches evicted pages of their own to make it, which came
// back the same way. simtrain --depth 8 --width 2048 --batch 16 at 3x on the H100-PCIe
// model (16 MiB weights, adam steps of 32 pages against 80): 344 evictions against 234
// fetches per iteration, 688 MiB out for the plan's 472, 19.71 ms; with each deferred
// fetch dropped once its launch has come, 236 and 236, exactly the plan's bytes each way,
// 15.01 ms. The small simtrain points: weight-heavy 3x 3.969 -> 3.951 ms (Titan X
// 14.237 -> 13.973), 10x 6.778 -> 6.760, activation-heavy 3x on the Titan X 7.922 ->
// 7.756, on the H100-PCIe 2.1425 -> 2.1445; the rest, the traces at 1/8 and full-size
// ResNet-50 unchanged. l.later_due holds the launch number of each deferred page's
// next use.

// The schedule's moves before launch i of the iteration (launch number now).
void carry_out(learner& l, std::size_t i, std::uint64_t now) {
  std::vector<residency::byte_range> evict;
  std::vector<residency::byte_range> fetch;
  if (i == 0) {
    // Between iterations: the last launch's evictions, the loop's end state, and the
    // start's evictions (Note [Steady state] in policy/schedule.h).
    add_ranges(l, l.plan.launches.back().evict_after, evict);
    add_ranges(l, l.plan.evict_at_start, evict);
    add_ranges(l, l.plan.end_fetches, fetch);
  } else {
    add_ranges(l, l.plan.launches[i - 1].evict_after, evict);
  }
  add_ranges(l, l.plan.launches[i].fetch_before, fetch);
  if (!evict.empty()) core::device_evict(l.device, evict);
  // See Note [Prefetch without waiting] (residency/swap_engine.h): fetches start only where room
  // is free already; the rest is tried again before the next launch, and the
  // on-demand step still waits when a launch's own pages are not there in time.
  // See Note [Deferred fetches fall due]: only those whose use is still ahead.
  // The engine's mover holds the deferred pages until the next request replaces them
  // (Note [The mover] in residency/swap_mover.cc): a request is made, empty if need be,
  // whenever some were deferred.
  const bool had_later = !l.later.empty();
  std::size_t due = 0;
  for (std::size_t k = 0; k < l.later.size(); ++k) {
    if (l.later_due[k] >= now) l.later[due++] = l.later[k];
  }
  fetch.insert(fetch.begin(), l.later.begin(), l.later.begin() + static_cast<std::ptrdiff_t>(due));
  l.later.clear();
  l.later_due.clear();
  if (!fetch.empty() || had_later) {
    // See Note [Prefetch keeps what is needed sooner]. The window is found at the engine's
    // first question (most prefetches find room and ask none), and the predicate holds
    // one reference, so building it allocates nothing on the launch path.
    struct window {
      const learner& l;
      std::size_t i;
      std::span<const residency::byte_range> fetch;
      bool found = false;
      std::optional<std::size_t> last;  // the latest next use among the fetched pages
      std::uint64_t rank(std::uintptr_t va) {
        if (!found) {
          found = true;
          for (const residency::byte_range& r : fetch) {
            if (const std::optional<std::size_t> d = next_use(l, i, r.addr)) {
              last = std::max(last.value_or(0), *d);
            }
          }
        }
        const std::optional<std::size_t> d = next_use(l, i, va);
        if (!d) return std::numeric_limits<std::uint64_t>::max();
        if (last && *d <= *last) return 0;
        return *d;
      }
    } w{l, i, fetch, false, std::nullopt};
    core::device_prefetch_now(l.device, fetch, l.later,
                              [&w](std::uintptr_t va) { return w.rank(va); });
    for (const residency::byte_range& r : l.later) {
      l.later_due.push_back(now + next_use(l, i, r.addr).value_or(0));
    }
  }
}

}  // namespace

// Declared in swap_learner.h.
bool schedule_internal::plan_variant(learner& l, int device, variant v) {
  const std::size_t n = l.learned.size();
  std::vector<std::uint32_t> period(n);
  for (std::size_t i = 0; i < n; ++i) period[i] = l.learned[(i + v.rotation) % n];
  std::unordered_map<std::uintptr_t, policy::buffer_id> id_of_page;
  std::vector<unit> page_of_id;
  std::vector<std::vector<std::uint32_t>> uses_of_id;
  policy::iteration_model model;
  for (std::size_t i = 0; i < n; ++i) {
    policy::model_launch launch;
    // A kernel measured at 0 ns (simgpu's smallest) still takes its place in time.
    launch.duration_ns = std::max<std::uint64_t>(l.durations_ns[(i + v.rotation) % n], 1);
    for (const unit& page : l.pages_of_token[period[i]]) {
      auto [it, added] =
          id_of_page.emplace(page.addr, static_cast<policy::buffer_id>(page_of_id.size()));
      if (added) {
        page_of_id.push_back(page);
        uses_of_id.emplace_back();
        // Its address: pages moved together that touch are one run (Note [Predicting
        // the remaps] in core/schedule_costs.cc).
        // See Note [Managed buffers hold whole pages] in residency/um_engine.h.
        const std::size_t bytes = current_config().mode == run_mode::um
                                      ? residency::managed_held_bytes(page.bytes)
                                      : page.bytes;
        model.buffers.push_back(policy::model_buffer{bytes, true, 0, 0, page.addr});
      }
      launch.uses.push_back(it->second);
      uses_of_id[it->second].push_back(static_cast<std::uint32_t>(i));
    }
    model.launches.push_back(std::move(launch));
  }
  // Of every use, the trimmed ones too: they still read the pages where they are.
  model.dead_windows = schedule_internal::dead_windows(l, v, id_of_page, uses_of_id);
  const config& cfg = current_config();
  // See Note [Launches over the room] in policy/iteration_model.h. The learner's costs
  // count no host access: the durations it measured hold it.
  if (cfg.mode == run_mode::swap &&
      policy::trim_launches_over_room(model, core::device_residency_capacity(device)).uses != 0) {
    for (std::vector<std::uint32_t>& uses : uses_of_id) uses.clear();
    for (std::size_t i = 0; i < n; ++i) {
      for (policy::buffer_id b : model.launches[i].uses) {
        uses_of_id[b].push_back(static_cast<std::uint32_t>(i));
      }
    }
  }
  // See Note [Headroom] in policy/schedule.h.
  const std::uint64_t capacity = policy::planning_capacity(
      core::device_residency_capacity(device), page_bytes, core::device_batch_pages(device),
      policy::largest_launch_footprint(model).bytes);
  const std::uint64_t less = v.free_pages * page_bytes;
  if (less >= capacity) return false;
  policy::schedule_result r =
      policy::plan_schedule(model, capacity - less, l.costs, kind_of(cfg.policy),
                            static_cast<std::uint32_t>(cfg.prefetch_launches));
  if (!r.ok()) {
    if (v == variant{}) {
      ++l.stats.plan_failures;
      log::info("swap: no schedule for the learned iteration ({}); on-demand residency goes on",
                r.error);
    }
    return false;
  }
  l.period = std::move(period);
  l.id_of_page = std::move(id_of_page);
  l.page_of_id = std::move(page_of_id);
  l.uses_of_id = std::move(uses_of_id);
  l.plan = std::move(r.value);
  l.current = v;
  if (current_config().mode == run_mode::swap) core::device_set_lending(device, v.lend);
  l.model = std::move(model);
  predict(l);
  l.stats.predicted_unlimited_ns = policy::unlimited_iteration_ns(l.model, l.costs);
  l.stats.planned_ns = l.stats.predicted_ns;
  return true;
}

namespace {
// Back to on-demand residency: the schedule is no longer followed, its deferred
// fetches dropped.
void stop_following(learner& l) {
  l.following = false;
  l.iteration_mark_ns = 0;  // Note [Which part differs] in core/schedule_costs.cc
  l.tuning = false;
  l.later.clear();
  l.later_due.clear();
  l.astray_in_row = 0;
  l.astray_in_window = 0;
  l.window_launches = 0;
}

// Note [Launches the iteration did not have]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A training loop is not the same launch for launch at every step: every few steps
// it logs a metric (a norm, an accuracy: a few kernels more), and a step may do
// without some work. Dropping the schedule at the first launch it did not expect put
// the job on demand for the iterations the period search needs to find it again, two
// at least, each several times slower at a tight memory. So while a schedule is
// followed, a launch other than the one expected:
//   - is taken as a launch the iteration did not have: it runs on demand, its pages
//     made resident as any launch's are, while the schedule waits for the launch it
//     expects (stats: unplanned_launches);
//   - unless it and the launch before it (off the schedule too) are the expected
//     launches of two positions in a row among the next max_skipped: the launches
//     before those were skipped, their moves are made and the schedule goes on from
//     there (skipped_launches). One launch alone is not enough: a token is not unique
//     within an iteration (an elementwise kernel over the same pages twice), and a
//     launch the iteration did not have may match a position a little ahead.
// More than max_astray such launches in a row, or more than an eighth of the launches
// in a window of a period's length (8 max_astray at least: a schedule of a few
// launches, a run of layers taken for the iteration, counted over one wrap went on
// for ever with three launches in four off it; Note [A stretch that did not last]),
// and the iteration itself has changed (a validation pass, the allocator's new
// layout): that launch is a deviation, and the learner goes back to on-demand
// residency and learns again. What a launch needs
// resident, and whether a page's content is dead, never come from the schedule (Note
// [Dead pages] in residency/swap_engine.h), so a launch the schedule did not expect
// costs time, never data. While the variants of a schedule are timed (Note [Choosing
// among schedules by measured time] in core/tuning.cc), a launch the iteration did not
// have is timed with it, and the loop body's first and last launches, whose kernels
// are timed, are never passed over: a launch that would pass them is a deviation.
constexpr std::size_t max_skipped = 8;
constexpr std::size_t max_astray = 64;

// See Note [Launches the iteration did not have]: one more launch in the window over
// which launches off the schedule are counted.
void count_in_window(learner& l) {
  if (++l.window_launches < std::max(l.period.size(), 8 * max_astray)) return;
  l.window_launches = 0;
  l.astray_in_window = 0;
}

// See Note [Launches the iteration did not have]: true where the launch runs off the
// schedule; false where the schedule goes on from it (the skipped launches' moves
// made) or is to be dropped.
bool off_schedule(learner& l, std::uint32_t token, std::uint64_t number) {
  const std::size_t n = l.period.size();
  // A skip is taken only where the launch before, off the schedule too, was the
  // expected launch of the position before (see the Note).
  for (std::size_t j = 2; l.astray_in_row != 0 && j <= std::min(max_skipped, n - 1); ++j) {
    if (l.period[(l.cursor + j) % n] != token ||
        l.period[(l.cursor + j - 1) % n] != l.astray_token) {
      continue;
    }
    // While timing, the loop body's first and last launches are timed: not passed over.
    if (l.tuning && (l.cursor == 0 || l.cursor + j >= n)) return false;
    for (std::size_t k = 0; k < j; ++k) {
      // See Note [Which part differs] in core/schedule_costs.cc.
      if (l.cursor == 0) note_iteration(l);
      carry_out(l, l.cursor, number);
      l.cursor = (l.cursor + 1) % n;
    }
    l.stats.skipped += j - 1;
    l.stats.unplanned -= 1;  // it was the launch of the position before, late
    if (!l.skip_logged) {
      l.skip_logged = true;
      log::info("swap: the iteration did without {} launch(es) of the learned one before "
                "launch {}; the schedule goes on from there",
                j - 1, l.cursor - 1);
    }
    return false;
  }
  ++l.astray_in_row;
  ++l.astray_in_window;
  l.astray_token = token;
  count_in_window(l);
  if (l.astray_in_row > max_astray || l.astray_in_window > std::max(max_astray, n / 8)) {
    return false;
  }
  ++l.stats.unplanned;
  if (!l.astray_logged) {
    l.astray_logged = true;
    log::info("swap: a launch the learned iteration does not have came before its launch "
              "{}; it runs on demand and the schedule goes on",
              l.cursor);
  }
  return true;
}

// The deviation's figures in the stats, and the log's line once.
// See Note [CUPTI at rest] in profiler/cupti_source.h: resting while a schedule is
// followed and not tuned (no launch is tagged then), awake otherwise.
void rest_cupti(learner& l, bool resting) {
  if (l.stats.cupti_resting == resting || (resting && !l.durations_measured)) return;
  const bool now = profiler::timing::rest(resting);
  if (now && !l.stats.cupti_resting) ++l.stats.cupti_rests;
  l.stats.cupti_resting = now;
}

void note_deviation(learner& l, int device, std::uint32_t token) {
  const std::vector<unit>& want = l.pages_of_token[l.period[l.cursor]];
  const std::vector<unit>& got = l.pages_of_token[token];
  std::size_t common = 0;
  for (auto a = want.begin(), b = got.begin(); a != want.end() && b != got.end();) {
    if (*a < *b) {
      ++a;
    } else if (*b < *a) {
      ++b;
    } else {
      ++common, ++a, ++b;
    }
  }
  l.stats.deviation_position = l.cursor;
  l.stats.deviation_expected_pages = want.size();
  l.stats.deviation_pages = got.size();
  l.stats.deviation_common_pages = common;
  if (l.deviation_logged) return;
  l.deviation_logged = true;
  const bool same_kernel = l.kernel_of_token[l.period[l.cursor]] == l.kernel_of_token[token];
  log::info("swap: launch {} of the learned iteration ({} pages, on device {}) came as {} "
            "with {} pages on device {}, {} of them the expected ones, after {} launches "
            "off the schedule; back to on-demand residency and learning again",
            l.cursor, want.size(), l.device, same_kernel ? "its kernel" : "another kernel",
            got.size(), device, common, l.astray_in_row);
}
}  // namespace

// Note [A stretch that did not last]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A stretch of an iteration can repeat on its own: a run of layers whose launches have
// the same tokens (small buffers sharing pages: simtrain --width 64 --batch 16, whose
// buffers all lie in one or two pages, repeats a 5-launch layer eight times). Where
// that stretch is most of what was seen since learning (re)started, it is taken for
// the iteration; the schedule is dropped where the layers end, learning starts over,
// and the next run of layers is learned: that simtrain was learned 40 times in 40
// iterations, 1998 of its launches off the schedule. Two rules pass such stretches over:
//   - The learner keeps every launch's token, followed ones too, past the trace's
//     restarts (l.history, as long as the trace may grow). A stretch is not learned
//     where the history repeats a longer stretch of another period up to the present:
//     by Note [Finding the launch period] in profiler/period.h, the iteration is the
//     longest repeat, and the run of layers lies inside it. Learning goes on until the
//     trace holds two iterations.
//   - The first time, the history is no longer than the trace, and a schedule dropped
//     for that reason is found by how long it held: a training iteration, once
//     learned, holds at least as long as the stretch it was learned from. Where a
//     schedule is dropped before it was followed for as many launches as its stretch
//     had, the next stretch must be longer than the one that held (the stretch and
//     the launches followed). A schedule that held resets the rule.
// A new layout of the pool (Note [The pool's layout changed]) gives new tokens: both
// start over. The stats' search says "inside a longer repeat" or "no longer than one
// that did not last" where a rule passed a stretch over.

// Note [Why no iteration was learned]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where a job runs on demand throughout (under PyTorch on a GPU, the schedule of a
// CNN was never learned in 12 iterations), the stats say what the last period
// search found: "search" is "nothing repeats" (no launch sequence recurred: pages
// that differ at every step), "the repeat ended" (a stretch repeated, then the
// launches went other ways), "repeated once", "under half the trace" (the repeating
// stretch is not most of what was seen since learning began), "one page set" (Note
// [No one-page iteration]), "inside a longer repeat" or "no longer than one that did
// not last" (Note [A stretch that did not last]) or "learned"; search_period and search_repetitions give the
// stretch, trace_launches the trace's length and distinct_launches how many distinct
// tokens (Note [A launch's token]) the launches have had.

// Note [A clock for the first moves]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine times its remaps from its first moves on, so that the first plan has
// their costs (Note [Predicting the remaps] in core/schedule_costs.cc), on the clock
// of Note [A clock without CUPTI] in core/schedule_costs.cc; the link's rates come
// with the first plan (measure). The clock was handed over once, at the first launch that
// had one, and a device with nothing allocated yet has no engine to take it: a program
// that launches before it allocates (oversub-replay times a kernel first; a framework
// may fill a constant) left the engine without a clock until the first plan, so that
// plan counted no remaps (remap_source "none"), and kept counting none unless the
// iteration was learned again. With per-tensor allocations the planned pool's new
// layout made the learner learn again; under PyTorch's caching allocator, whose
// segments never move, nothing did: ResNet-50 at 1/8 replayed through the caching
// allocator (`oversub-replay --allocator caching`), 3x, on the H200's measured model,
// predicted 40.4 ms and ran 51.7. So the clock goes to each device's engine at the first
// launch that finds one (l.clock_given); the same point now predicts 55.1 ms and runs
// 48.9. With per-tensor allocations, 38.7-39.2 -> 38.1-38.2 ms.

// Note [The pool's layout changed]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The pages a launch uses depend on where the pool
// placed its buffers, and the planned pool (pool/planned_region.h) lays them out anew
// when it makes a plan from the iterations it watched, or retires one. A schedule
// learned before that would deviate at the first launch whose buffers moved. So the
// learner watches the pool's layout generation: when it changes, the schedule is
// dropped and the trace cleared without counting a deviation, and learning starts over
// on the new layout. Because the frees of a one-stream program carry no tickets (Note
// [One stream needs no events] in pool/stream_fences.h), the online arena's layout
// repeats in the first two iterations, before the planned pool takes over: without
// this the learner learned from it at launch 144 and deviated at launch 20 of the
// next iteration.
void schedule_before_launch(int device, std::span<const residency::byte_range> ranges,
                            const void* kernel) {
  // swap and um follow the learned schedule (Note [um follows the schedule] in
  // residency/um_engine.h); lru and naive are on demand only.
  const swap_policy policy = current_config().policy;
  if (policy == swap_policy::lru || policy == swap_policy::naive) return;
  // See Note [What the learner moves] in core/schedule_internal.h.
  const bool whole_buffers = current_config().mode == run_mode::um;
  std::vector<unit> pages;
  for (const residency::byte_range& r : ranges) {
    if (r.bytes == 0) continue;
    if (whole_buffers) {
      if (!r.optional && !r.reach) pages.push_back(unit{r.addr, r.bytes});
      continue;
    }
    for (std::uintptr_t a = r.addr & ~(page_bytes - 1); a < r.addr + r.bytes; a += page_bytes) {
      pages.push_back(unit{a, page_bytes});
    }
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());

  // See Note [Launch durations] in core/schedule_costs.cc: CUPTI is asked once, outside
  // the learner's lock.
  static std::atomic<bool> timing_asked{false};
  if (!timing_asked.exchange(true, std::memory_order_acq_rel)) {
    std::string ignored;
    profiler::timing::start(&ignored);
    stats::set_schedule_section(&report_section);
  }

  learner& l = state();
  std::lock_guard<std::mutex> lock(l.mutex);
  // See Note [A clock for the first moves].
  if (l.clock == nullptr) l.clock = profiler::cupti::host_clock();
  if (l.clock != nullptr && current_config().mode == run_mode::swap &&
      !clock_given_to(l, device)) {
    give_copy_clock(l, device, 0, 0, /*rates_measured=*/false);
  }
  const std::uint32_t token = intern(l, pages, kernel);
  const std::uint64_t number = l.launches++;
  // See Note [The pool's layout changed].
  if (const std::uint64_t generation = core::device_layout_generation(device);
      generation != l.layout_generation) {
    l.layout_generation = generation;
    if (l.following && !l.layout_change_logged) {
      l.layout_change_logged = true;
      log::info("swap: the pool laid out the iteration's buffers anew; back to on-demand "
                "residency and learning again");
    }
    stop_following(l);
    clear_trace(l);
    l.stretch_to_pass = 0;  // other pages, other tokens: Note [A stretch that did not last]
    l.history.clear();
  }
  // See Note [A stretch that did not last].
  if (l.history.size() == max_trace) {
    l.history.erase(l.history.begin(),
                    l.history.begin() + static_cast<std::ptrdiff_t>(max_trace / 2));
  }
  l.history.push_back(token);
  // See Note [Launches the iteration did not have].
  if (l.following && device == l.device && token != l.period[l.cursor] &&
      off_schedule(l, token, number)) {
    profiler::timing::tag_next_launch(profiler::timing::no_tag);
    return;
  }
  if (l.following) {
    if (device == l.device && token == l.period[l.cursor]) {
      profiler::timing::tag_next_launch(profiler::timing::no_tag);
      l.astray_in_row = 0;
      count_in_window(l);
      // See Note [Which part differs] in core/schedule_costs.cc.
      if (l.cursor == 0) note_iteration(l);
      if (l.tuning && l.cursor == 0) tune_step(l, device, number);
      // See Note [Timing on the device] in core/tuning.cc: the kernel of each loop body's
      // last launch.
      if (l.tuning && !l.awaiting && l.cursor + 1 == l.period.size()) {
        profiler::timing::tag_next_launch(number);
      }
      carry_out(l, l.cursor, number);
      l.cursor = (l.cursor + 1) % l.period.size();
      rest_cupti(l, !l.tuning);
      ++l.stats.followed;
      stats::global().swap_scheduled.count();
      return;
    }
    ++l.stats.deviations;
    stats::global().swap_deviations.count();
    note_deviation(l, device, token);
    // See Note [A stretch that did not last].
    const std::uint64_t held = l.stats.followed - l.followed_at_learn;
    l.stretch_to_pass = held < l.learned_stretch ? l.learned_stretch + held : 0;
    stop_following(l);
  }
  // See Note [Dead gaps] in core/dead_gaps.cc: a new trace's first launch takes what
  // the engine kept while nobody asked, and keeps none of it.
  static thread_local std::vector<residency::residency_backend::vacancy> vacancies;
  vacancies.clear();
  core::device_take_vacancies(device, vacancies);
  if (l.trace.empty()) {
    l.trace_first = number;
    vacancies.clear();
  }
  for (const auto& v : vacancies) l.vacancies.push_back({number, v});
  l.trace.push_back(token);
  rest_cupti(l, false);
  profiler::timing::tag_next_launch(number);
  if (l.trace.size() > max_trace) {
    l.trace.erase(l.trace.begin(), l.trace.begin() + static_cast<std::ptrdiff_t>(max_trace / 2));
    l.trace_first += max_trace / 2;
    std::erase_if(l.vacancies, [&](const auto& v) { return v.at < l.trace_first; });
    profiler::timing::forget_before(l.trace_first);
  }
  if (search_now(l.trace.size())) learn(l, device);
}

swap_schedule_stats schedule_stats() noexcept {
  learner& l = state();
  std::lock_guard<std::mutex> lock(l.mutex);
  return snapshot(l);
}

}  // namespace oversub::core
