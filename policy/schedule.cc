// schedule: the planner behind plan_schedule (policy/schedule.h).
//
// One pass walks the launches in order with the residency of every buffer, the
// device bytes in use, and the policy's victim order (a std::set keyed per policy).
// At launch i it (1) makes the launch's own buffers resident, evicting victims as
// needed (demand), (2) lets the policy prefetch, (3) records the launch's uses and
// writes, (4) releases per-iteration buffers after their last use (dead, no copy)
// and applies forced offloads (vdnn_all). Passes make the steady state
// (Note [Steady state] in schedule.h): the first starts with nothing resident, the
// second starts where the first ended and restores that state at its end (for cost,
// maybe a third from a smaller start state; the simulator picks). cost runs this for
// four plans (the cursor plan, and demand plans whose fetches are then hoisted:
// See Note [Plan then hoist]) and keeps the fastest in the simulator.
#include "policy/schedule.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "policy/simulate.h"

namespace oversub::policy {

std::string_view policy_name(policy_kind kind) {
  switch (kind) {
    case policy_kind::cost: return "cost";
    case policy_kind::vdnn_all: return "vdnn-all";
    case policy_kind::lru: return "lru";
    case policy_kind::um_naive: return "um-naive";
  }
  return "?";
}

namespace {

// The peak of device bytes in the schedule's order (a planner's running count
// overstates it: cost places evictions back at the buffer's last use).
std::size_t schedule_peak(const iteration_model& model, const schedule& plan) {
  std::size_t used = 0, peak = 0;
  auto apply = [&](buffer_id b, bool in) {
    const std::size_t bytes = model.buffers[b].bytes;
    used = in ? used + bytes : used - bytes;
    peak = std::max(peak, used);
  };
  for (buffer_id b : plan.resident_at_start) apply(b, true);
  for (const evict_action& e : plan.evict_at_start) apply(e.buffer, false);
  for (const launch_actions& l : plan.launches) {
    for (const fetch_action& f : l.fetch_before) apply(f.buffer, true);
    for (const evict_action& e : l.evict_after) apply(e.buffer, false);
  }
  for (const fetch_action& f : plan.end_fetches) apply(f.buffer, true);
  return peak;
}

constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max() / 4;

std::string gib(std::size_t bytes) {
  const double g = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  std::string s = std::to_string(g);
  return s.substr(0, s.find('.') + 4) + " GiB (" + std::to_string(bytes) + " bytes)";
}

// The model's uses, indexed both ways, and the ideal (stall-free) timeline.
struct use_index {
  std::vector<std::vector<buffer_id>> launch_uses;     // deduplicated, per launch
  std::vector<std::vector<std::uint32_t>> positions;   // per buffer, ascending launches
  std::vector<std::uint64_t> start_ns;                 // ideal start of launch i
  std::uint64_t total_ns = 0;

  explicit use_index(const iteration_model& model)
      : launch_uses(model.launches.size()), positions(model.buffers.size()),
        start_ns(model.launches.size()) {
    for (std::size_t i = 0; i < model.launches.size(); ++i) {
      auto& u = launch_uses[i];
      u = model.launches[i].uses;
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      for (buffer_id b : u) positions[b].push_back(static_cast<std::uint32_t>(i));
      start_ns[i] = total_ns;
      total_ns += model.launches[i].duration_ns;
    }
  }
  // Ideal time of an absolute position (>= n: the next iteration).
  std::uint64_t time_of(std::uint64_t pos) const {
    const std::uint64_t n = start_ns.size();
    if (pos >= never || n == 0) return never;
    return pos < n ? start_ns[pos] : total_ns + start_ns[pos - n];
  }
};

struct buffer_state {
  bool resident = false;
  bool host_current = true;   // the host copy holds the content
  bool has_content = false;   // content exists (per-iteration: after first use)
  bool awaiting_use = false;  // fetched ahead, not yet used
  std::int64_t last_use = -1;
  std::int64_t fetched_at = -1;
  std::uint32_t next_index = 0;  // into positions: the next use at or after now
  std::int64_t key = 0;          // position in the victim set
};

class planner {
 public:
  planner(const iteration_model& model, const use_index& uses, std::size_t capacity,
          const cost_model& costs, policy_kind kind, std::uint32_t prefetch_distance)
      : model_(model), uses_(uses), capacity_(capacity), costs_(costs), kind_(kind),
        prefetch_distance_(prefetch_distance) {
    for (const dead_window& w : model.dead_windows) {
      if (dead_.empty()) dead_.resize(model.buffers.size());
      dead_[w.buffer].push_back(w);
    }
    if (kind_ == policy_kind::vdnn_all) plan_vdnn();
    if (kind_ == policy_kind::cost) plan_headroom();
  }

  // One pass from `start` (long-lived buffers resident at the start); when
  // `restore` is set, end in the same state. Returns the schedule.
  schedule run(const std::vector<buffer_id>& start, bool restore);
  // cost: false plans on demand only (Note [Plan then hoist]); true walks the
  // prefetch cursor while planning (Note [Prefetch cursor]).
  void set_cursor_prefetch(bool on) { cursor_prefetch_ = on; }
  // cost on demand: true keys victims by Note [Cost victim], false by Note [Gap key].
  void set_round_trip_key(bool on) { round_trip_key_ = on; }
  // The device bytes the next passes may use (Note [Pipeline room]).
  void set_capacity(std::size_t bytes) { capacity_ = bytes; }
  std::vector<buffer_id> resident_long_lived() const;

 private:
  std::uint64_t next_use(buffer_id b) const;
  // See Note [Dead gaps] in core/dead_gaps.cc: b's content is dead for the moves before
  // launch q (an eviction, or a fetch).
  bool dead_at(buffer_id b, std::int64_t q, bool fetch) const {
    if (dead_.empty() || q < 0) return false;
    return std::any_of(dead_[b].begin(), dead_[b].end(), [&](const dead_window& w) {
      return dead_window_holds(w, static_cast<std::size_t>(q), model_.launches.size(), fetch);
    });
  }
  std::int64_t victim_key(buffer_id b) const;
  void set_key(buffer_id b);
  void unset_key(buffer_id b);
  bool make_room(std::size_t need, std::int64_t now, std::uint64_t limit, bool demand);
  void evict(buffer_id b, std::int64_t now, bool force_copy);
  void fetch(buffer_id b, std::int64_t now, bool copy_in);
  void prefetch_cost(std::int64_t now);
  void plan_vdnn();
  void plan_headroom();
  std::int64_t headroom(std::int64_t now, std::int64_t upto) const;

  const iteration_model& model_;
  std::vector<std::vector<dead_window>> dead_;  // per buffer (empty: none known)
  const use_index& uses_;
  std::size_t capacity_;
  const cost_model& costs_;
  policy_kind kind_;
  std::uint32_t prefetch_distance_;  // 0: as far as capacity allows
  bool cursor_prefetch_ = true;
  bool round_trip_key_ = true;

  std::vector<buffer_state> st_;
  std::set<std::pair<std::int64_t, buffer_id>> victims_;  // ascending key
  std::vector<std::int64_t> pinned_at_;                   // launch that needs it now
  std::size_t used_bytes_ = 0;
  std::int64_t cursor_ = -1;  // See Note [Prefetch cursor]
  schedule out_;
  // cost: growth_[k][q] = max of growth over [q, q + 2^k) (Note [Prefetch headroom]).
  std::vector<std::vector<std::int64_t>> growth_;
  // vdnn_all: offload after launch i, fetch before launch i.
  std::vector<std::vector<buffer_id>> vdnn_offload_, vdnn_fetch_;
};

// Note [Cost victim]
// ~~~~~~~~~~~~~~~~~~
// The future is known, so the victim is the buffer that can stay away longest: the
// ideal time of its next use minus its round trip (copy out when the host copy is
// stale, plus the copy back in). Without the round trip this is Belady's rule; with
// it, a clean buffer beats a dirty one of the same distance, and a large buffer
// needed soon is not sent on a trip it cannot finish. A prefetch may evict only
// buffers whose next use is later than the one being fetched (evicting an earlier
// use to fetch a later one can only add stalls).
//
// Note [Gap key]
// ~~~~~~~~~~~~~~
// The second victim key of the demand plans: the ideal time of the next use minus
// half the time since the last use, so that of two buffers needed equally late the
// one idle longer goes. A buffer idle since the previous iteration (optimizer state
// written by the last step, a gradient) then leaves rather than an activation just
// written: its copy out follows its last use in the previous iteration's backward
// pass, where the device-to-host link is idle, instead of adding to the forward
// pass's copies out, the half that is link-bound. The weight 1/2 is the one that
// measured best on simtrain and the traces' sweeps (weights 1 and 1/4 each lost
// somewhere); the figures are in docs/results/notes-history.md.
//
// Note [Prefetch cursor]
// ~~~~~~~~~~~~~~~~~~~~~~
// cursor_ is the last absolute launch position (one iteration of lookahead,
// wrapping into the next iteration for long-lived buffers) whose buffers are all
// resident or about to be fetched. Each launch extends it as far as capacity
// allows; an eviction of a buffer used at or before it moves it back. The cursor
// only advances past a position once, so planning costs O(uses log buffers) plus
// the re-scans after evictions.
std::uint64_t planner::next_use(buffer_id b) const {
  const auto& pos = uses_.positions[b];
  if (st_[b].next_index < pos.size()) return pos[st_[b].next_index];
  if (model_.buffers[b].long_lived && !pos.empty()) return uses_.start_ns.size() + pos[0];
  return never;
}

std::int64_t planner::victim_key(buffer_id b) const {
  const buffer_state& s = st_[b];
  if (kind_ == policy_kind::cost) {
    const std::size_t bytes = model_.buffers[b].bytes;
    const std::uint64_t trip = costs_.h2d_ns(bytes) + (s.host_current ? 0 : costs_.d2h_ns(bytes));
    // Larger slack = better victim; the set is ascending, so negate.
    // See Note [Gap key]: the other key of Note [Plan then hoist].
    if (!cursor_prefetch_ && !round_trip_key_) {
      const auto& pos = uses_.positions[b];
      std::int64_t last_ns = 0;  // ideal time of the last use (< 0: the last iteration)
      if (s.last_use >= 0) {
        last_ns = static_cast<std::int64_t>(uses_.start_ns[static_cast<std::size_t>(s.last_use)]);
      } else if (model_.buffers[b].long_lived && !pos.empty()) {
        last_ns = static_cast<std::int64_t>(uses_.start_ns[pos.back()]) -
                  static_cast<std::int64_t>(uses_.total_ns);
      }
      return -(static_cast<std::int64_t>(uses_.time_of(next_use(b))) - last_ns / 2);
    }
    return -(static_cast<std::int64_t>(uses_.time_of(next_use(b))) -
             static_cast<std::int64_t>(trip));
  }
  return s.last_use;  // least recently used first
}

void planner::set_key(buffer_id b) {
  st_[b].key = victim_key(b);
  victims_.insert({st_[b].key, b});
}

void planner::unset_key(buffer_id b) { victims_.erase({st_[b].key, b}); }

// Frees `need` bytes by evicting victims whose next use is after `limit`
// (all-or-nothing). Demand calls must succeed (the launch fits, see plan_schedule).
bool planner::make_room(std::size_t need, std::int64_t now, std::uint64_t limit,
                        bool demand) {
  std::vector<buffer_id> chosen;
  std::size_t freed = 0;
  int skipped = 0;
  for (auto it = victims_.begin(); it != victims_.end() && freed < need; ++it) {
    const buffer_id b = it->second;
    const bool usable = pinned_at_[b] != now && next_use(b) > limit &&
                        st_[b].fetched_at != now &&
                        (kind_ == policy_kind::cost || demand || !st_[b].awaiting_use);
    if (!usable) {
      if (!demand && ++skipped > 16) return false;
      continue;
    }
    chosen.push_back(b);
    freed += model_.buffers[b].bytes;
  }
  if (freed < need) return false;
  for (buffer_id b : chosen) evict(b, now, kind_ == policy_kind::um_naive);
  return true;
}

// Evicts a resident buffer at launch position `now` (before launch now).
void planner::evict(buffer_id b, std::int64_t now, bool force_copy) {
  buffer_state& s = st_[b];
  unset_key(b);
  // cost places the eviction right after the buffer's last use (its copy out then
  // overlaps compute); on-demand policies evict where the need arises.
  std::int64_t after = now - 1;
  if (kind_ == policy_kind::cost) after = std::max(s.last_use, s.fetched_at);
  after = std::min(after, now - 1);
  // A buffer whose content is dead there leaves without a copy; its host copy is as
  // good as any then (Note [Dead gaps] in core/dead_gaps.cc).
  const bool dead = (!model_.buffers[b].long_lived && next_use(b) == never) ||
                    dead_at(b, std::max<std::int64_t>(after + 1, 0), false);
  if (dead && model_.buffers[b].long_lived) s.host_current = true;
  const bool copy = !dead && (force_copy || !s.host_current);
  if (after < 0) {
    out_.evict_at_start.push_back({b, copy});
  } else {
    out_.launches[static_cast<std::size_t>(after)].evict_after.push_back({b, copy});
  }
  if (copy) s.host_current = true;
  s.resident = false;
  s.awaiting_use = false;
  used_bytes_ -= model_.buffers[b].bytes;
  const std::uint64_t nu = next_use(b);
  if (nu < never && static_cast<std::int64_t>(nu) <= cursor_) {
    cursor_ = static_cast<std::int64_t>(nu) - 1;
  }
}

void planner::fetch(buffer_id b, std::int64_t now, bool copy_in) {
  buffer_state& s = st_[b];
  copy_in = copy_in && !dead_at(b, now, true);
  if (now >= static_cast<std::int64_t>(out_.launches.size())) {
    out_.end_fetches.push_back({b, copy_in});
  } else {
    out_.launches[static_cast<std::size_t>(now)].fetch_before.push_back({b, copy_in});
  }
  s.resident = true;
  s.fetched_at = now;
  s.awaiting_use = true;
  used_bytes_ += model_.buffers[b].bytes;
  out_.planned_peak_bytes = std::max(out_.planned_peak_bytes, used_bytes_);
  set_key(b);
}

// Note [Prefetch headroom]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Per-iteration buffers appear (first use) and die (after last use) at fixed
// launches whatever the schedule does. A prefetch that fills memory now would be
// evicted again by the first-use mappings of the launches before its use, so a
// prefetch for position p keeps free, besides its own bytes, the most that
// first uses minus deaths add between now and p: growth(q) = sum of first-use
// bytes at launches <= q minus dead bytes after launches < q, over two iterations
// (the lookahead wraps), and headroom(now, p) = max over q in (now, p] of
// growth(q) - growth(now). A sparse table answers the range maximum in O(1).
void planner::plan_headroom() {
  const std::size_t n = uses_.launch_uses.size();
  std::vector<std::int64_t> born(n, 0), dies(n, 0);
  for (buffer_id b = 0; b < model_.buffers.size(); ++b) {
    const auto& pos = uses_.positions[b];
    if (model_.buffers[b].long_lived || pos.empty()) continue;
    born[pos.front()] += static_cast<std::int64_t>(model_.buffers[b].bytes);
    dies[pos.back()] += static_cast<std::int64_t>(model_.buffers[b].bytes);
  }
  std::vector<std::int64_t> growth(2 * n);
  std::int64_t running = 0;
  for (std::size_t q = 0; q < 2 * n; ++q) {
    if (q > 0) running -= dies[(q - 1) % n];
    running += born[q % n];
    growth[q] = running;
  }
  growth_.assign(1, std::move(growth));
  for (std::size_t k = 1; (std::size_t{1} << k) <= 2 * n; ++k) {
    const auto& prev = growth_[k - 1];
    std::vector<std::int64_t> level(2 * n - (std::size_t{1} << k) + 1);
    for (std::size_t q = 0; q < level.size(); ++q) {
      level[q] = std::max(prev[q], prev[q + (std::size_t{1} << (k - 1))]);
    }
    growth_.push_back(std::move(level));
  }
}

std::int64_t planner::headroom(std::int64_t now, std::int64_t upto) const {
  if (upto <= now) return 0;
  const auto lo = static_cast<std::size_t>(now + 1), hi = static_cast<std::size_t>(upto);
  std::size_t k = 0;
  while ((std::size_t{2} << k) <= hi - lo + 1) ++k;
  const std::int64_t most =
      std::max(growth_[k][lo], growth_[k][hi + 1 - (std::size_t{1} << k)]);
  return std::max<std::int64_t>(0, most - growth_[0][static_cast<std::size_t>(now)]);
}

void planner::prefetch_cost(std::int64_t now) {
  const std::int64_t n = static_cast<std::int64_t>(uses_.launch_uses.size());
  cursor_ = std::max(cursor_, now);
  std::int64_t horizon = now + n - 1;
  if (prefetch_distance_ > 0) horizon = std::min<std::int64_t>(horizon, now + prefetch_distance_);
  while (cursor_ < horizon) {
    const std::int64_t p = cursor_ + 1;
    const bool next_iteration = p >= n;
    for (buffer_id b : uses_.launch_uses[static_cast<std::size_t>(p % n)]) {
      if (next_iteration && !model_.buffers[b].long_lived) continue;
      if (st_[b].resident || !st_[b].has_content) continue;
      const std::size_t need = model_.buffers[b].bytes +
                               static_cast<std::size_t>(headroom(now, p));
      if (used_bytes_ + need > capacity_ &&
          !make_room(used_bytes_ + need - capacity_, now, static_cast<std::uint64_t>(p),
                     false)) {
        return;
      }
      fetch(b, now, true);
    }
    cursor_ = p;
  }
}

// vDNN: activations (per-iteration, used before and after the boundary) leave
// after their last forward use and come back one activation ahead of their first
// backward use, in backward order.
void planner::plan_vdnn() {
  const std::size_t n = uses_.launch_uses.size();
  vdnn_offload_.assign(n, {});
  vdnn_fetch_.assign(n, {});
  const std::uint32_t boundary = backward_begin_of(model_);
  std::vector<std::pair<std::uint32_t, buffer_id>> back;  // (first backward use, id)
  for (buffer_id b = 0; b < model_.buffers.size(); ++b) {
    const auto& pos = uses_.positions[b];
    if (model_.buffers[b].long_lived || pos.empty()) continue;
    const auto first_back = std::lower_bound(pos.begin(), pos.end(), boundary);
    if (first_back == pos.begin() || first_back == pos.end()) continue;
    vdnn_offload_[*(first_back - 1)].push_back(b);
    back.push_back({*first_back, b});
  }
  std::sort(back.begin(), back.end());
  std::uint32_t issue = boundary;
  for (const auto& [use, b] : back) {
    vdnn_fetch_[std::min(issue, use)].push_back(b);
    issue = use;
  }
}

std::vector<buffer_id> planner::resident_long_lived() const {
  std::vector<buffer_id> ids;
  for (buffer_id b = 0; b < st_.size(); ++b) {
    if (st_[b].resident && model_.buffers[b].long_lived) ids.push_back(b);
  }
  return ids;
}

schedule planner::run(const std::vector<buffer_id>& start, bool restore) {
  const std::size_t n = uses_.launch_uses.size();
  out_ = schedule{};
  out_.policy = kind_;
  out_.capacity_bytes = capacity_;
  out_.demand_paged = kind_ == policy_kind::um_naive;
  out_.launches.assign(n, {});
  out_.resident_at_start = start;
  st_.assign(model_.buffers.size(), {});
  pinned_at_.assign(model_.buffers.size(), -1);
  victims_.clear();
  used_bytes_ = 0;
  cursor_ = -1;
  for (buffer_id b = 0; b < st_.size(); ++b) {
    st_[b].has_content = model_.buffers[b].long_lived;
    st_[b].host_current = model_.buffers[b].long_lived;
  }
  for (buffer_id b : start) {
    st_[b].resident = true;
    st_[b].host_current = false;
    used_bytes_ += model_.buffers[b].bytes;
    set_key(b);
  }
  out_.planned_peak_bytes = used_bytes_;

  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t now = static_cast<std::int64_t>(i);
    const auto& here = uses_.launch_uses[i];
    std::size_t need = 0;
    for (buffer_id b : here) {
      pinned_at_[b] = now;
      if (!st_[b].resident) need += model_.buffers[b].bytes;
    }
    if (used_bytes_ + need > capacity_) {
      make_room(used_bytes_ + need - capacity_, now, i, true);
    }
    for (buffer_id b : here) {
      if (!st_[b].resident) fetch(b, now, st_[b].has_content);
    }
    if (kind_ == policy_kind::cost && cursor_prefetch_) prefetch_cost(now);
    if (kind_ == policy_kind::vdnn_all) {
      for (buffer_id b : vdnn_fetch_[i]) {
        const std::size_t bytes = model_.buffers[b].bytes;
        if (st_[b].resident || !st_[b].has_content) continue;
        if (used_bytes_ + bytes <= capacity_ ||
            make_room(used_bytes_ + bytes - capacity_, now, i, false)) {
          fetch(b, now, true);
        }
      }
    }
    const model_launch& launch = model_.launches[i];
    for (buffer_id b : here) {
      // Re-keyed in place: the set's node is reused (no allocation per use).
      auto node = victims_.extract({st_[b].key, b});
      buffer_state& s = st_[b];
      s.last_use = now;
      s.awaiting_use = false;
      s.has_content = true;
      if (launch_writes(launch, b)) s.host_current = false;
      ++s.next_index;
      s.key = victim_key(b);
      node.value() = {s.key, b};
      victims_.insert(std::move(node));
    }
    // After launch i: dead per-iteration buffers, then vDNN's offloads.
    for (buffer_id b : here) {
      if (!model_.buffers[b].long_lived && next_use(b) == never) evict(b, now + 1, false);
    }
    if (kind_ == policy_kind::vdnn_all) {
      for (buffer_id b : vdnn_offload_[i]) {
        if (st_[b].resident) evict(b, now + 1, false);
      }
    }
  }
  if (restore) {
    const std::int64_t end = static_cast<std::int64_t>(n);
    std::vector<bool> wanted(model_.buffers.size(), false);
    for (buffer_id b : start) wanted[b] = true;
    for (buffer_id b : resident_long_lived()) {
      if (!wanted[b]) evict(b, end, false);
    }
    for (buffer_id b : start) {
      if (!st_[b].resident) fetch(b, end, true);
    }
  }
  out_.planned_peak_bytes = schedule_peak(model_, out_);
  return out_;
}


// Note [Plan then hoist]
// ~~~~~~~~~~~~~~~~~~~~~~
// The cost planner can also plan on demand only (Belady: every fetch at its use,
// the victim the buffer that can stay away longest), which settles which bytes
// move, and then hoist every copy-in fetch as early as memory allows, so the same
// bytes move while compute runs. The hoist takes the fetches in order of need
// (the launch that needs them); each goes to the earliest launch after the
// buffer's own eviction such that the device bytes at every launch from there to
// its use stay within the capacity, given the fetches already placed. It never
// evicts anything: it uses the room the demand plan leaves, so it cannot make a
// buffer needed sooner leave for one needed later (no thrashing of the prefetch
// window). No fetch is issued before one needed sooner: the copy stream runs them
// in order of need (letting a later fetch go first where memory allows was slower).
//
// Note [Pipeline room]
// ~~~~~~~~~~~~~~~~~~~~
// Belady's choice fills the capacity exactly: where every launch needs a buffer
// back (a ring of long-lived buffers each used once), a fetch can then start only
// when the copy out before it has released memory, and the two directions run in
// series (64 buffers of 256 KiB through 8 MiB at 1 GB/s: 16.9 ms, twice the bound).
// Planning the demand plan with 1/16 of the capacity kept free and hoisting with
// all of it moves 35 buffers each way (the other plans: 64, one per launch) with
// the directions overlapped: 9.5 ms, 1.13x the bound (test
// CostGoals.RingReachesTheTransferBound). The simulator keeps it only where faster.
// Where the buffers are large against 1/16 of the capacity (the swap engine's 2 MiB
// pages in a few tens of MiB), that room may hold no buffer at all, or one fewer
// than the capacity's own rounding leaves: one and two of the largest buffer are
// tried as well (simtrain's page model in 23.80 MiB: 0.441 ms instead of 0.608,
// test CostGoals.PagesLeaveAPageOfRoomForTheHoist).
// (Measured while developing: 1/32 or 1/8 instead, or both, changed the shipped
// traces' sweeps by under 0.1% on average; sharing one start set among the
// candidates to save passes made some points 7% slower.)

// Device bytes per launch position for the hoist: range add and "the last position
// in a range above a limit", both O(log launches) (a segment tree with lazy adds).
class bytes_by_launch {
 public:
  explicit bytes_by_launch(const std::vector<std::int64_t>& values) {
    size_ = 1;
    while (size_ < values.size()) size_ *= 2;
    max_.assign(2 * size_, std::numeric_limits<std::int64_t>::min() / 4);
    add_.assign(2 * size_, 0);
    for (std::size_t i = 0; i < values.size(); ++i) max_[size_ + i] = values[i];
    for (std::size_t i = size_ - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }
  // Adds v to every position in [lo, hi).
  void add(std::size_t lo, std::size_t hi, std::int64_t v) { add(1, 0, size_, lo, hi, v); }
  // The last position in [lo, hi) whose value exceeds `limit`, or -1.
  std::int64_t last_above(std::size_t lo, std::size_t hi, std::int64_t limit) const {
    return last_above(1, 0, size_, lo, hi, limit, 0);
  }

 private:
  void add(std::size_t node, std::size_t nlo, std::size_t nhi, std::size_t lo, std::size_t hi,
           std::int64_t v) {
    if (hi <= nlo || nhi <= lo) return;
    if (lo <= nlo && nhi <= hi) {
      max_[node] += v;
      add_[node] += v;
      return;
    }
    const std::size_t mid = (nlo + nhi) / 2;
    add(2 * node, nlo, mid, lo, hi, v);
    add(2 * node + 1, mid, nhi, lo, hi, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }
  std::int64_t last_above(std::size_t node, std::size_t nlo, std::size_t nhi, std::size_t lo,
                          std::size_t hi, std::int64_t limit, std::int64_t above) const {
    if (hi <= nlo || nhi <= lo || max_[node] + above <= limit) return -1;
    if (nhi - nlo == 1) return static_cast<std::int64_t>(nlo);
    const std::size_t mid = (nlo + nhi) / 2;
    const std::int64_t down = above + add_[node];
    const std::int64_t right = last_above(2 * node + 1, mid, nhi, lo, hi, limit, down);
    return right >= 0 ? right : last_above(2 * node, nlo, mid, lo, hi, limit, down);
  }

  std::size_t size_ = 1;
  std::vector<std::int64_t> max_, add_;  // max of the subtree (its own adds included)
};


// See Note [Plan then hoist]. distance > 0: no fetch more than `distance` launches
// before its use.
void hoist_fetches(const iteration_model& model, schedule& plan, std::uint32_t distance) {
  const std::size_t n = plan.launches.size();
  struct moving {
    std::size_t use;    // launch that needs it (n: end_fetches)
    std::size_t lower;  // earliest launch (after its own eviction)
    std::size_t seq;    // schedule order
    buffer_id buffer;
  };
  std::vector<moving> fetches;
  std::vector<std::int64_t> bytes_at(n + 1, 0);  // device bytes during launch q (n: the end)
  std::vector<std::size_t> lower(model.buffers.size(), 0);
  std::int64_t used = 0;
  for (buffer_id b : plan.resident_at_start) {
    used += static_cast<std::int64_t>(model.buffers[b].bytes);
  }
  for (const evict_action& e : plan.evict_at_start) {
    used -= static_cast<std::int64_t>(model.buffers[e.buffer].bytes);
  }
  auto take = [&](std::vector<fetch_action>& list, std::size_t q) {
    std::vector<fetch_action> kept;
    for (const fetch_action& f : list) {
      used += static_cast<std::int64_t>(model.buffers[f.buffer].bytes);
      if (f.copy_in) {
        fetches.push_back({q, lower[f.buffer], fetches.size(), f.buffer});
      } else {
        kept.push_back(f);
      }
    }
    list = std::move(kept);
  };
  for (std::size_t q = 0; q < n; ++q) {
    take(plan.launches[q].fetch_before, q);
    bytes_at[q] = used;
    for (const evict_action& e : plan.launches[q].evict_after) {
      used -= static_cast<std::int64_t>(model.buffers[e.buffer].bytes);
      lower[e.buffer] = q + 1;
    }
  }
  take(plan.end_fetches, n);
  bytes_at[n] = used;

  std::sort(fetches.begin(), fetches.end(), [](const moving& a, const moving& b) {
    return a.use != b.use ? a.use < b.use : a.seq < b.seq;
  });
  bytes_by_launch room(bytes_at);
  const auto capacity = static_cast<std::int64_t>(plan.capacity_bytes);
  std::vector<std::vector<std::pair<std::size_t, fetch_action>>> placed(n + 1);
  std::size_t floor = 0;
  for (const moving& f : fetches) {
    const auto bytes = static_cast<std::int64_t>(model.buffers[f.buffer].bytes);
    std::size_t p = std::max(f.lower, floor);
    if (distance > 0 && f.use > distance) p = std::max<std::size_t>(p, f.use - distance);
    p = std::min(p, f.use);
    if (p < f.use) {
      const std::int64_t last = room.last_above(p, f.use, capacity - bytes);
      if (last >= 0) p = static_cast<std::size_t>(last) + 1;
      room.add(p, f.use, bytes);
    }
    floor = p;
    placed[p].push_back({f.use, {f.buffer, true}});
  }
  for (std::size_t q = 0; q <= n; ++q) {
    auto& list = q < n ? plan.launches[q].fetch_before : plan.end_fetches;
    for (const auto& [use, f] : placed[q]) list.push_back(f);
  }
  plan.planned_peak_bytes = schedule_peak(model, plan);
}

}  // namespace

std::size_t planning_capacity(std::size_t capacity_bytes, std::size_t page_bytes,
                              std::size_t batch_pages, std::size_t launch_bytes) {
  if (page_bytes == 0) return capacity_bytes;
  const std::size_t pages = capacity_bytes / page_bytes;
  // A batch of room is at most half the room (batch_pages_locked in the swap engine).
  const std::size_t batch = batch_pages <= 1 ? 0 : std::min(batch_pages, pages / 2);
  const std::size_t planned =
      capacity_bytes - std::max(capacity_bytes / 32 / page_bytes, batch) * page_bytes;
  return std::max(planned, std::min(capacity_bytes, launch_bytes));
}

schedule_result plan_schedule(const iteration_model& model, std::size_t capacity_bytes,
                              const cost_model& costs, policy_kind kind,
                              std::uint32_t prefetch_distance_launches) {
  schedule_result result;
  result.error = validate_model(model);
  if (!result.ok()) return result;
  const largest_launch big = largest_launch_footprint(model);
  if (big.bytes > capacity_bytes) {
    result.error = "launch " + std::to_string(big.launch) + " alone needs " +
                   gib(big.bytes) + " in " + std::to_string(big.buffer_count) +
                   " buffers, more than the device capacity of " + gib(capacity_bytes) +
                   ": no schedule can make it fit";
    return result;
  }
  const use_index uses(model);
  planner plan(model, uses, capacity_bytes, costs, kind, prefetch_distance_launches);
  // Plans the steady state (Note [Steady state] in schedule.h) with the planner as
  // it is set; `finish` turns each candidate into its final form.
  struct timed {
    schedule plan;
    // Simulated (cost only): an iteration among others (Note [The next iteration] in
    // policy/simulate.h), and on a tie the bytes moved: of two plans that hide their
    // copies equally, the one that moves less.
    std::uint64_t ns = 0, moved = 0;
    void time(const iteration_model& m, const cost_model& c) {
      const simulation sim = simulate(m, plan, c);
      ns = sim.iteration_ns;
      moved = sim.h2d_bytes + sim.d2h_bytes;
    }
    bool faster(const timed& o) const { return ns != o.ns ? ns < o.ns : moved < o.moved; }
  };
  auto steady = [&](auto finish) {
    plan.run({}, false);
    std::vector<buffer_id> start = plan.resident_long_lived();
    timed best{finish(plan.run(start, true))};
    if (kind != policy_kind::cost) return best;
    best.time(model, costs);
    if (!best.plan.evict_at_start.empty()) {
      // A buffer the loop body evicts before its first launch may be better left
      // on the host at the end of the previous iteration (its copy out then follows
      // its last use there, instead of taking the link at the start). Which is
      // better depends on where the link is idle: the simulator decides.
      std::vector<bool> leaves(model.buffers.size(), false);
      for (const evict_action& e : best.plan.evict_at_start) leaves[e.buffer] = true;
      std::erase_if(start, [&](buffer_id b) { return leaves[b]; });
      timed smaller{finish(plan.run(start, true))};
      smaller.time(model, costs);
      if (smaller.faster(best)) best = std::move(smaller);
    }
    return best;
  };
  auto as_is = [](schedule s) { return s; };
  if (kind != policy_kind::cost) {
    result.value = std::move(steady(as_is).plan);
  } else {
    // See Note [Plan then hoist]: the cursor planner, and the demand plan hoisted with
    // each victim rule; the simulator keeps the fastest (the first on a tie).
    timed best = steady(as_is);
    plan.set_cursor_prefetch(false);
    // See Note [Pipeline room]: the gap key again with 1/16 of the capacity kept free
    // for the hoist, and with one and two of the largest buffer where that is more.
    const std::size_t spare = capacity_bytes - big.bytes;
    std::size_t largest = 0;
    for (const model_buffer& b : model.buffers) largest = std::max(largest, b.bytes);
    std::vector<std::pair<std::size_t, bool>> tries = {
        {0, true}, {0, false}, {std::min(spare, capacity_bytes / 16), false}};
    for (const std::size_t room : {largest, 2 * largest}) {
      if (room > capacity_bytes / 16 && room <= spare) tries.emplace_back(room, false);
    }
    for (const auto& [reserve, round_trip] : tries) {
      plan.set_capacity(capacity_bytes - reserve);
      plan.set_round_trip_key(round_trip);
      timed hoisted = steady([&](schedule s) {
        s.capacity_bytes = capacity_bytes;
        hoist_fetches(model, s, prefetch_distance_launches);
        return s;
      });
      if (hoisted.faster(best)) best = std::move(hoisted);
    }
    result.value = std::move(best.plan);
  }
  if (result.value.planned_peak_bytes > capacity_bytes) {
    // Cannot happen when every launch fits (demand can always evict the rest); kept
    // so that a planner bug is an error, never a schedule past the capacity.
    result.error = "internal: planned " + gib(result.value.planned_peak_bytes) +
                   " over the capacity of " + gib(capacity_bytes);
  }
  return result;
}

}  // namespace oversub::policy
