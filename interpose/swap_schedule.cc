// Swap mode's learned schedule (see swap_schedule.h).
#include "interpose/swap_schedule.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "pool/device_pool.h"
#include "policy/schedule.h"
#include "profiler/period.h"

namespace oversub::interpose {

namespace {

constexpr std::uintptr_t page_bytes = std::uintptr_t{2} << 20;  // the arena's granularity
constexpr std::size_t max_trace = std::size_t{1} << 16;         // launches kept while learning
constexpr std::size_t check_every = 16;                         // launches between searches
// Note [Launch durations]: the page trace has no kernel times (those come from CUPTI
// in the profiler); every launch counts the same, so the cost policy ranks by launch
// distance, and the link figures are a PCIe 4/5 x16 link's pinned rate.
constexpr std::uint64_t launch_ns = 20'000;
constexpr double link_bytes_per_s = 25e9;
constexpr std::uint64_t copy_setup_ns = 10'000;

// Note [What the learner moves]: in swap mode the unit is the arena's 2 MiB page
// (what the engine moves); in um mode a whole managed buffer (what cuMemPrefetchAsync
// moves there), its address and size as the launch's range gave them.
struct unit {
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
  bool operator==(const unit&) const = default;
  bool operator<(const unit& o) const { return addr < o.addr || (addr == o.addr && bytes < o.bytes); }
};

struct learner {
  std::mutex mutex;
  // Interned page sets: a token per distinct set.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> tokens_by_hash;
  std::vector<std::vector<unit>> pages_of_token;
  std::vector<std::uint32_t> trace;
  // The schedule being followed.
  bool following = false;
  int device = 0;
  std::vector<std::uint32_t> period;       // expected tokens
  std::vector<unit> page_of_id;  // model buffer id -> page (or um buffer)
  policy::schedule plan;
  std::size_t cursor = 0;
  std::vector<pool::byte_range> later;  // fetches that found no room yet
  swap_schedule_stats stats;
  bool deviation_logged = false;
};

learner& state() {
  static learner* l = new learner;  // never destroyed: hooks may run during exit
  return *l;
}

std::uint32_t intern(learner& l, const std::vector<unit>& pages) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the addresses and sizes
  for (const unit& p : pages) {
    h = (h ^ p.addr) * 1099511628211ull;
    h = (h ^ p.bytes) * 1099511628211ull;
  }
  std::vector<std::uint32_t>& bucket = l.tokens_by_hash[h];
  for (std::uint32_t t : bucket) {
    if (l.pages_of_token[t] == pages) return t;
  }
  const auto t = static_cast<std::uint32_t>(l.pages_of_token.size());
  l.pages_of_token.push_back(pages);
  bucket.push_back(t);
  return t;
}

policy::policy_kind kind_of(swap_policy p) {
  return p == swap_policy::vdnn_all ? policy::policy_kind::vdnn_all : policy::policy_kind::cost;
}

// The last period of the trace as a model over its pages, planned.
bool learn(learner& l, int device) {
  const std::optional<profiler::periodic_stretch> s = profiler::find_period(l.trace);
  // The repeating stretch must reach the present and cover at least half of what
  // was seen since learning (re)started: two identical launches in a row repeat
  // too, but they are not the training iteration.
  if (!s || s->end != l.trace.size() || s->repetitions() < 2 ||
      2 * (s->end - s->begin) < l.trace.size()) {
    return false;
  }
  l.period.assign(l.trace.end() - static_cast<std::ptrdiff_t>(s->period), l.trace.end());
  std::unordered_map<std::uintptr_t, policy::buffer_id> id_of_page;  // by address
  l.page_of_id.clear();
  policy::iteration_model model;
  for (std::uint32_t token : l.period) {
    policy::model_launch launch;
    launch.duration_ns = launch_ns;
    for (const unit& page : l.pages_of_token[token]) {
      auto [it, added] =
          id_of_page.emplace(page.addr, static_cast<policy::buffer_id>(l.page_of_id.size()));
      if (added) {
        l.page_of_id.push_back(page);
        model.buffers.push_back(policy::model_buffer{page.bytes, true, 0, 0});
      }
      launch.uses.push_back(it->second);
    }
    model.launches.push_back(std::move(launch));
  }
  policy::cost_model costs;
  costs.h2d_bytes_per_s = link_bytes_per_s;
  costs.d2h_bytes_per_s = link_bytes_per_s;
  costs.copy_setup_ns = copy_setup_ns;
  const config& cfg = current_config();
  const std::uint64_t capacity = pool::device_residency_capacity(device);
  policy::schedule_result r =
      policy::plan_schedule(model, capacity, costs, kind_of(cfg.policy),
                            static_cast<std::uint32_t>(cfg.prefetch_launches));
  if (!r.ok()) {
    ++l.stats.plan_failures;
    log::info("swap: no schedule for the learned iteration ({}); on-demand residency goes on",
              r.error);
    l.trace.clear();
    return false;
  }
  l.plan = std::move(r.value);
  l.following = true;
  l.device = device;
  l.cursor = 0;
  ++l.stats.learned;
  l.stats.period = l.period.size();
  l.stats.pages = l.page_of_id.size();
  log::info("swap: learned an iteration of {} launches over {} pages after {} launches; "
            "{} schedule planned (planned peak {} of {} bytes)",
            l.period.size(), l.page_of_id.size(), l.trace.size(),
            policy::policy_name(l.plan.policy), l.plan.planned_peak_bytes, capacity);
  l.trace.clear();
  return true;
}

template <typename Action>
void add_ranges(const learner& l, const std::vector<Action>& actions,
                std::vector<pool::byte_range>& out) {
  for (const Action& a : actions) {
    out.push_back(pool::byte_range{l.page_of_id[a.buffer].addr, l.page_of_id[a.buffer].bytes});
  }
}

// The schedule's moves before launch i of the iteration.
void carry_out(learner& l, std::size_t i) {
  std::vector<pool::byte_range> evict;
  std::vector<pool::byte_range> fetch;
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
  if (!evict.empty()) pool::device_evict(l.device, evict);
  // Note [Prefetch without waiting] (pool/residency.h): fetches start only where room
  // is free already; the rest is tried again before the next launch, and the
  // on-demand step still waits when a launch's own pages are not there in time.
  fetch.insert(fetch.begin(), l.later.begin(), l.later.end());
  l.later.clear();
  if (!fetch.empty()) pool::device_prefetch_now(l.device, fetch, l.later);
}

}  // namespace

void schedule_before_launch(int device, std::span<const pool::byte_range> ranges) noexcept {
  // swap and um follow the learned schedule (Note [um follows the schedule] in
  // pool/managed_residency.h); lru and naive are on demand only.
  const swap_policy policy = current_config().policy;
  if (policy == swap_policy::lru || policy == swap_policy::naive) return;
  // Note [What the learner moves].
  const bool whole_buffers = current_config().mode == run_mode::um;
  std::vector<unit> pages;
  for (const pool::byte_range& r : ranges) {
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

  learner& l = state();
  std::lock_guard<std::mutex> lock(l.mutex);
  const std::uint32_t token = intern(l, pages);
  if (l.following) {
    if (device == l.device && token == l.period[l.cursor]) {
      carry_out(l, l.cursor);
      l.cursor = (l.cursor + 1) % l.period.size();
      ++l.stats.followed;
      stats::global().swap_scheduled.count();
      return;
    }
    ++l.stats.deviations;
    stats::global().swap_deviations.count();
    if (!l.deviation_logged) {
      l.deviation_logged = true;
      log::info("swap: launch {} of the learned iteration used other pages than planned; "
                "back to on-demand residency and learning again",
                l.cursor);
    }
    l.following = false;
    l.later.clear();
  }
  l.trace.push_back(token);
  if (l.trace.size() > max_trace) {
    l.trace.erase(l.trace.begin(), l.trace.begin() + static_cast<std::ptrdiff_t>(max_trace / 2));
  }
  if (l.trace.size() % check_every == 0) learn(l, device);
}

swap_schedule_stats schedule_stats() noexcept {
  learner& l = state();
  std::lock_guard<std::mutex> lock(l.mutex);
  return l.stats;
}

}  // namespace oversub::interpose
