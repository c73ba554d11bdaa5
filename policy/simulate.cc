// simulate: the virtual-time replay behind simulate() (policy/simulate.h).
#include "policy/simulate.h"

#include <algorithm>
#include <map>
#include <vector>

namespace oversub::policy {

std::uint64_t unlimited_iteration_ns(const iteration_model& model, const cost_model& costs) {
  std::uint64_t t = model.launches.empty() ? 0 : costs.launch_latency_ns;
  for (const model_launch& l : model.launches) t += l.duration_ns;
  return t;
}

std::uint64_t transfer_bound_ns(const iteration_model& model, std::size_t capacity_bytes,
                                const cost_model& costs) {
  const std::uint64_t unlimited = unlimited_iteration_ns(model, costs);
  const std::size_t live = peak_live_bytes(model);
  if (live <= capacity_bytes) return unlimited;
  const double bw = std::min(costs.h2d_bytes_per_s, costs.d2h_bytes_per_s);
  if (bw <= 0) return unlimited;
  const auto link = static_cast<std::uint64_t>(
      static_cast<double>(live - capacity_bytes) * 1e9 / bw + 0.5);
  return std::max(unlimited, link);
}

std::uint64_t window_bound_ns(const iteration_model& model, std::size_t capacity_bytes,
                              const cost_model& costs) {
  const std::uint64_t unlimited = unlimited_iteration_ns(model, costs);
  const std::size_t n = model.launches.size();
  if (n == 0) return unlimited;
  constexpr std::uint32_t none = ~std::uint32_t{0};
  std::vector<std::uint32_t> first(model.buffers.size(), none), last(model.buffers.size(), 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (buffer_id b : model.launches[i].uses) {
      if (first[b] == none) first[b] = i;
      last[b] = i;
    }
  }
  // A launch over the capacity reads at least its excess in host memory (Note [Window
  // bound] in policy/simulate.h), inside its own time.
  std::vector<std::uint64_t> over_ns(n, 0);
  if (costs.host_access_bytes_per_s > 0) {
    std::vector<std::uint32_t> mark(model.buffers.size(), none);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::size_t bytes = 0;
      for (buffer_id b : model.launches[i].uses) {
        if (mark[b] != i) bytes += model.buffers[b].bytes;
        mark[b] = i;
      }
      if (bytes > capacity_bytes) over_ns[i] = costs.host_access_ns(bytes - capacity_bytes);
    }
  }
  // Cut points: window k covers launches [cuts[k], cuts[k + 1]).
  std::vector<std::size_t> cuts;
  const std::size_t parts = std::min(n, window_grid);
  for (std::size_t k = 0; k <= parts; ++k) cuts.push_back(n * k / parts);
  const auto ns = [](std::size_t bytes, double per_s) {
    return per_s <= 0 ? 0.0 : static_cast<double>(bytes) * 1e9 / per_s;
  };
  // best[k]: the most time the launches before cuts[k] must take.
  std::vector<double> best(parts + 1, 0.0);
  std::vector<std::uint32_t> seen(model.buffers.size(), none), written(model.buffers.size(), none),
      counted(model.buffers.size(), none);
  for (std::size_t s = 0; s < parts; ++s) {
    const std::size_t a = cuts[s];
    const auto stamp = static_cast<std::uint32_t>(s);
    double compute = 0;
    std::size_t content = 0, dirty = 0;
    std::size_t e = s + 1;
    for (std::size_t b = a; b < n; ++b) {
      const model_launch& l = model.launches[b];
      compute += static_cast<double>(l.duration_ns + over_ns[b]);
      for (buffer_id x : l.uses) {
        const model_buffer& buf = model.buffers[x];
        if (seen[x] != stamp) {
          seen[x] = stamp;
          if (buf.long_lived || first[x] < a) content += buf.bytes;
        }
        if (written[x] != stamp && launch_writes(l, x)) {
          written[x] = stamp;
          if (buf.long_lived || last[x] > b) {
            dirty += buf.bytes;
            counted[x] = stamp;
          }
        }
        if (counted[x] == stamp && !buf.long_lived && last[x] == b) {
          dirty -= buf.bytes;  // written earlier in the window, dead after b
          counted[x] = none;
        }
      }
      if (b + 1 == cuts[e]) {
        const double in = ns(content > capacity_bytes ? content - capacity_bytes : 0,
                             costs.h2d_bytes_per_s);
        const double out = ns(dirty > capacity_bytes ? dirty - capacity_bytes : 0,
                              costs.d2h_bytes_per_s);
        best[e] = std::max(best[e], best[s] + std::max({compute, in, out}));
        ++e;
      }
    }
  }
  const auto bound = static_cast<std::uint64_t>(best[parts]) +
                     costs.launch_latency_ns;  // truncated: a bound stays below
  return std::max(unlimited, bound);
}

namespace {

// Releases the schedule counted on that may not have happened yet in real time.
// Kept as sorted blocks of (time, bytes) with each block's byte sum, so that a
// query skips whole blocks: O(sqrt(pending)) per call instead of a walk over every
// pending release (which made long schedules quadratic to simulate).
class pending_releases {
 public:
  void add(std::uint64_t at_ns, std::size_t bytes) {
    total_ += bytes;
    std::size_t k = 0;
    while (k + 1 < blocks_.size() && blocks_[k + 1].items.front().first <= at_ns) ++k;
    if (blocks_.empty()) blocks_.emplace_back();
    block& b = blocks_[k];
    const std::pair<std::uint64_t, std::size_t> item{at_ns, bytes};
    const auto pos = std::upper_bound(
        b.items.begin(), b.items.end(), item,
        [](const auto& x, const auto& y) { return x.first < y.first; });
    b.items.insert(pos, item);
    b.bytes += bytes;
    if (b.items.size() > 2 * block_items) split(k);
  }
  // Forget releases done by `ns` (all later queries start at or after it).
  void prune(std::uint64_t ns) {
    while (!blocks_.empty()) {
      block& b = blocks_.front();
      std::size_t drop = 0;
      while (drop < b.items.size() && b.items[drop].first <= ns) {
        b.bytes -= b.items[drop].second;
        total_ -= b.items[drop].second;
        ++drop;
      }
      b.items.erase(b.items.begin(), b.items.begin() + static_cast<std::ptrdiff_t>(drop));
      if (!b.items.empty()) return;
      blocks_.erase(blocks_.begin());
    }
  }
  // The earliest time >= from_ns at which the bytes still pending are <= slack:
  // from_ns, or the first release time by which all but `slack` bytes are done.
  std::uint64_t when_at_most(std::uint64_t from_ns, std::size_t slack) const {
    if (total_ <= slack) return from_ns;
    const std::size_t need = total_ - slack;  // bytes that must be released
    std::size_t done = 0;
    for (const block& b : blocks_) {
      if (done + b.bytes < need) {
        done += b.bytes;
        continue;
      }
      for (const auto& [at, bytes] : b.items) {
        done += bytes;
        if (done >= need) return std::max(from_ns, at);
      }
    }
    return from_ns;  // not reached: the blocks hold total_ bytes
  }

 private:
  static constexpr std::size_t block_items = 64;
  struct block {
    std::vector<std::pair<std::uint64_t, std::size_t>> items;  // ascending time
    std::size_t bytes = 0;
  };
  void split(std::size_t k) {
    block tail;
    auto& items = blocks_[k].items;
    tail.items.assign(items.begin() + static_cast<std::ptrdiff_t>(block_items), items.end());
    items.resize(block_items);
    for (const auto& item : tail.items) tail.bytes += item.second;
    blocks_[k].bytes -= tail.bytes;
    blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(k) + 1, std::move(tail));
  }
  std::vector<block> blocks_;
  std::size_t total_ = 0;
};

class replay {
 public:
  replay(const iteration_model& model, const schedule& plan, const cost_model& costs)
      : model_(model), plan_(plan), costs_(costs), ready_(model.buffers.size(), 0),
        out_done_(model.buffers.size(), 0), taken_at_(model.buffers.size(), 0),
        resident_(model.buffers.size(), false) {}

  simulation run() {
    if (costs_.has_mover()) find_runs();
    place_fetches();
    compute_free_ = model_.launches.empty() ? 0 : costs_.launch_latency_ns;
    for (buffer_id b : plan_.resident_at_start) {
      used_ += model_.buffers[b].bytes;
      resident_[b] = true;
    }
    result_.peak_device_bytes = used_;
    pass(true);
    const std::uint64_t first_end = compute_free_;
    result_.first_iteration_ns = std::max({compute_free_, h2d_free_, d2h_free_, mover_free_});
    for (buffer_id b = 0; b < resident_.size(); ++b) {
      if (resident_[b]) hold(b, result_.first_iteration_ns);
    }
    result_.peak_device_bytes_in_time = peak_in_time();
    // See Note [The next iteration] in policy/simulate.h: the schedule once more, from
    // where the first left every stream; only its time is kept.
    const simulation first = result_;
    const std::uint64_t busy_before[3] = {h2d_busy_, d2h_busy_, result_.host_remap_ns};
    if (!model_.launches.empty()) compute_free_ += costs_.launch_latency_ns;
    pass(false);
    const std::uint64_t busy = std::max({h2d_busy_ - busy_before[0], d2h_busy_ - busy_before[1],
                                         result_.host_remap_ns - busy_before[2]});
    result_ = first;
    result_.iteration_ns = std::max(compute_free_ - first_end, busy);
    const std::uint64_t unlimited = unlimited_iteration_ns(model_, costs_);
    result_.stall_ns = result_.iteration_ns > unlimited ? result_.iteration_ns - unlimited : 0;
    return result_;
  }

 private:
  // One iteration of the schedule, its launches from compute_free_ on (the first:
  // their end times kept).
  void pass(bool first) {
    evictions_ = 0;
    for (const evict_action& e : plan_.evict_at_start) {
      compute_free_ += evict(e, first ? 0 : compute_free_);
    }
    for (std::size_t i = 0; i < model_.launches.size(); ++i) {
      const std::uint64_t paging_ns = fetches_before(i);
      const model_launch& launch = model_.launches[i];
      std::uint64_t start = compute_free_ + paging_ns;
      for (buffer_id b : launch.uses) start = std::max(start, ready_[b]);
      compute_free_ = start + launch.duration_ns + costs_.host_access_ns(launch.host_bytes);
      if (first) result_.launch_end_ns.push_back(compute_free_);
      for (const evict_action& e : plan_.launches[i].evict_after) {
        compute_free_ += evict(e, compute_free_);
      }
    }
    compute_free_ += fetches_before(model_.launches.size());
  }

  // See Note [Mapping calls that wait] in policy/simulate.h.
  bool calls_wait() const {
    return costs_.has_mover() && costs_.mover.calls_wait && !plan_.demand_paged;
  }
  // The fetches made before launch i (i: the launch count, those at the iteration's
  // end); the time they add to the compute stream.
  std::uint64_t fetches_before(std::size_t i) {
    std::uint64_t ns = 0;
    for (const auto& [f, seq] : fetches_at_[i]) ns += fetch(*f, seq);
    return ns;
  }
  // When a mapping call made now may start: after all the work enqueued so far.
  std::uint64_t drained(std::uint64_t from) const {
    return calls_wait() ? std::max({from, compute_free_, h2d_free_, d2h_free_}) : from;
  }
  // Each fetch, with its index in the schedule's order, before the launch the
  // schedule makes it before; with mapping calls that wait, before the launch that
  // first uses its buffer from there on (none: the schedule's). The end-of-iteration
  // fetches last.
  void place_fetches() {
    const std::size_t n = model_.launches.size();
    std::vector<std::vector<std::uint32_t>> uses(calls_wait() ? model_.buffers.size() : 0);
    for (std::uint32_t i = 0; i < n && calls_wait(); ++i) {
      for (buffer_id b : model_.launches[i].uses) uses[b].push_back(i);
    }
    const auto made_before = [&](std::size_t i, buffer_id b) -> std::size_t {
      if (!calls_wait()) return i;
      const auto next = std::lower_bound(uses[b].begin(), uses[b].end(),
                                         static_cast<std::uint32_t>(i));
      return next == uses[b].end() ? i : *next;
    };
    fetches_at_.assign(n + 1, {});
    std::size_t seq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      for (const fetch_action& f : plan_.launches[i].fetch_before) {
        fetches_at_[made_before(i, f.buffer)].emplace_back(&f, seq++);
      }
    }
    for (const fetch_action& f : plan_.end_fetches) fetches_at_[n].emplace_back(&f, seq++);
  }

  // Issues a fetch; returns the time it adds to the compute stream (demand paging).
  std::uint64_t fetch(const fetch_action& f, std::size_t seq) {
    const std::size_t bytes = model_.buffers[f.buffer].bytes;
    if (used_ + bytes > plan_.capacity_bytes && result_.error.empty()) {
      result_.error = "fetch of buffer " + std::to_string(f.buffer) + " exceeds the capacity";
    }
    const std::size_t slack =
        plan_.capacity_bytes >= used_ + bytes ? plan_.capacity_bytes - used_ - bytes : 0;
    used_ += bytes;
    result_.peak_device_bytes = std::max(result_.peak_device_bytes, used_);
    resident_[f.buffer] = true;
    if (plan_.demand_paged) {
      ready_[f.buffer] = 0;
      taken_at_[f.buffer] = compute_free_;
      if (!f.copy_in) return 0;
      result_.h2d_bytes += bytes;
      ++result_.h2d_copies;
      return costs_.fault_in_ns(bytes);
    }
    pending_.prune(std::min({h2d_free_, compute_free_, mover_free_}));
    if (costs_.has_mover()) return fetch_by_mover(f, bytes, slack, seq);
    if (!f.copy_in) {
      ready_[f.buffer] = pending_.when_at_most(compute_free_, slack);
      taken_at_[f.buffer] = ready_[f.buffer];
      return 0;
    }
    const std::uint64_t from = std::max(h2d_free_, out_done_[f.buffer]);
    const std::uint64_t start = pending_.when_at_most(from, slack);
    taken_at_[f.buffer] = start;
    h2d_free_ = start + costs_.h2d_ns(bytes);
    h2d_busy_ += costs_.h2d_ns(bytes);
    ready_[f.buffer] = h2d_free_;
    result_.h2d_bytes += bytes;
    ++result_.h2d_copies;
    return 0;
  }

  // A fetch when the mover remaps (Note [Virtual time model] in policy/simulate.h):
  // the remap starts when the mover is free, the page is on the host (its own
  // eviction's remap done) and the room is there; the copy in starts after the remap
  // and the copy's enqueue.
  std::uint64_t fetch_by_mover(const fetch_action& f, std::size_t bytes, std::size_t slack,
                               std::size_t seq) {
    const std::uint64_t from = drained(std::max(mover_free_, out_done_[f.buffer]));
    const std::uint64_t start = pending_.when_at_most(from, slack);
    const bool joins = fetch_joins_[seq] != 0;
    // See Note [Grouped runs in the simulator] in policy/simulate.h: a fetch that waited
    // for the room of the evictions the mover has just remapped.
    const bool grouped = !joins && start == mover_free_ && slack < group_bytes_;
    if (!joins) group_bytes_ = 0;
    const std::uint64_t busy = costs_.mover_fetch_ns(bytes, f.copy_in, joins, grouped);
    mover_free_ = start + busy;
    result_.host_remap_ns += busy;
    ++result_.remaps;
    result_.runs += joins ? 0 : 1;
    taken_at_[f.buffer] = start;
    const std::uint64_t remapped = start + costs_.remap_ns(bytes, joins, grouped);
    if (!f.copy_in) {
      ready_[f.buffer] = remapped;
      return 0;
    }
    const std::uint64_t copy_start = std::max(h2d_free_, remapped + costs_.mover.copy_enqueue_ns);
    // A page joining a run is copied with the run's first page: no setup of its own.
    const std::uint64_t copy = costs_.h2d_ns(bytes) - (joins ? costs_.copy_setup_ns : 0);
    h2d_free_ = copy_start + copy;
    h2d_busy_ += copy;
    ready_[f.buffer] = h2d_free_;
    result_.h2d_bytes += bytes;
    ++result_.h2d_copies;
    return 0;
  }

  // Evicts after a launch that ends at `after_ns`; returns the time it adds to the
  // compute stream (demand paging).
  std::uint64_t evict(const evict_action& e, std::uint64_t after_ns) {
    const std::size_t bytes = model_.buffers[e.buffer].bytes;
    used_ -= bytes;
    resident_[e.buffer] = false;
    if (plan_.demand_paged) {
      hold(e.buffer, after_ns);
      if (!e.copy_out) return 0;
      result_.d2h_bytes += bytes;
      ++result_.d2h_copies;
      return costs_.fault_out_ns(bytes);
    }
    std::uint64_t release = std::max(after_ns, ready_[e.buffer]);
    if (e.copy_out) {
      const std::uint64_t start = std::max(d2h_free_, release);
      d2h_free_ = start + costs_.d2h_ns(bytes);
      d2h_busy_ += costs_.d2h_ns(bytes);
      out_done_[e.buffer] = d2h_free_;
      release = d2h_free_;
      result_.d2h_bytes += bytes;
      ++result_.d2h_copies;
    } else if (costs_.discard_page_ns != 0) {
      // A discard, in the order of the stream to the host (cost_model::discard_page_ns).
      const std::uint64_t discard = costs_.discard_ns(bytes);
      d2h_free_ = std::max(d2h_free_, release) + discard;
      d2h_busy_ += discard;
      release = d2h_free_;
      result_.discarded_bytes += bytes;
    }
    if (costs_.has_mover()) {
      // The mover remaps the page once its copy out (or its last user) is done; the
      // memory is free, and the page on the host, only after that.
      const bool joins = evict_joins_[evictions_++] != 0;
      const std::uint64_t start = drained(std::max(mover_free_, release));
      // See Note [Grouped runs in the simulator] in policy/simulate.h.
      const bool grouped = !joins && group_bytes_ != 0 && start == mover_free_;
      if (!joins) {
        group_bytes_ = (grouped ? group_bytes_ : 0) + bytes;
      } else if (group_bytes_ != 0) {
        group_bytes_ += bytes;
      }
      const std::uint64_t busy = costs_.mover_evict_ns(bytes, joins, grouped);
      mover_free_ = start + busy;
      result_.host_remap_ns += busy;
      ++result_.remaps;
      result_.runs += joins ? 0 : 1;
      release = mover_free_;
      out_done_[e.buffer] = release;
    }
    pending_.add(release, bytes);
    hold(e.buffer, release);
    return 0;
  }

  // See Note [Virtual time model] in policy/simulate.h: which of the schedule's moves
  // join a run, each way, in the order run() makes them.
  void find_runs() {
    std::vector<buffer_id> in, out;
    for (const evict_action& e : plan_.evict_at_start) out.push_back(e.buffer);
    for (const launch_actions& l : plan_.launches) {
      for (const fetch_action& f : l.fetch_before) in.push_back(f.buffer);
      for (const evict_action& e : l.evict_after) out.push_back(e.buffer);
    }
    for (const fetch_action& f : plan_.end_fetches) in.push_back(f.buffer);
    fetch_joins_ = joins_of(in, max_run_pages);
    evict_joins_ = joins_of(out, 0);
  }
  // Per move: true when it joins a run that an earlier move of its window began (the
  // window's buffers that touch, most_pages pages a run at most where not 0).
  std::vector<char> joins_of(const std::vector<buffer_id>& moves, std::size_t most_pages) const {
    std::vector<char> joins(moves.size(), 0);
    const std::size_t page = std::max<std::size_t>(costs_.mover.page_bytes, 1);
    const auto pages = [&](std::size_t k) {
      return std::max<std::size_t>((model_.buffers[moves[k]].bytes + page - 1) / page, 1);
    };
    // See Note [Runs within the room] in policy/simulate.h: a window holds at most the
    // plan's capacity in pages.
    const std::size_t room = std::max<std::size_t>(plan_.capacity_bytes / page, 1);
    std::vector<std::size_t> window;
    for (std::size_t first = 0, end = 0; first < moves.size(); first = end) {
      window.clear();
      std::size_t held = 0;
      for (end = first; end < moves.size() && end - first < run_window_moves; ++end) {
        held += pages(end);
        if (end > first && held > room) break;
        if (model_.buffers[moves[end]].address != 0) window.push_back(end);  // 0: unknown
      }
      std::sort(window.begin(), window.end(), [&](std::size_t x, std::size_t y) {
        return model_.buffers[moves[x]].address < model_.buffers[moves[y]].address;
      });
      for (std::size_t a = 0, b = 0; a < window.size(); a = b) {
        std::size_t run_pages = pages(window[a]);
        for (b = a + 1; b < window.size(); ++b) {
          const model_buffer& prev = model_.buffers[moves[window[b - 1]]];
          if (prev.address + prev.bytes != model_.buffers[moves[window[b]]].address ||
              (most_pages != 0 && run_pages + pages(window[b]) > most_pages)) {
            break;
          }
          run_pages += pages(window[b]);
        }
        // The run's first move in time pays its shared part.
        const std::size_t begins = *std::min_element(window.begin() + a, window.begin() + b);
        for (std::size_t k = a; k < b; ++k) joins[window[k]] = window[k] != begins;
      }
    }
    return joins;
  }

  // Records that b held its device memory from taken_at_[b] to release_ns.
  void hold(buffer_id b, std::uint64_t release_ns) {
    const auto bytes = static_cast<std::int64_t>(model_.buffers[b].bytes);
    holds_.push_back({taken_at_[b], bytes});
    holds_.push_back({std::max(release_ns, taken_at_[b]), -bytes});
  }

  // The most bytes held at one instant (a release at t frees memory for a take at t).
  std::size_t peak_in_time() {
    std::sort(holds_.begin(), holds_.end());
    std::int64_t held = 0, peak = 0;
    for (const auto& [at, delta] : holds_) {
      held += delta;
      peak = std::max(peak, held);
    }
    return static_cast<std::size_t>(peak);
  }

  const iteration_model& model_;
  const schedule& plan_;
  const cost_model& costs_;
  std::vector<std::uint64_t> ready_;     // when the buffer's last fetch completes
  std::vector<std::uint64_t> out_done_;  // when its last copy out completes
  pending_releases pending_;
  std::uint64_t compute_free_ = 0, h2d_free_ = 0, d2h_free_ = 0;
  std::uint64_t h2d_busy_ = 0, d2h_busy_ = 0;  // the copy streams' time so far
  // Per fetch and per eviction, in run()'s order: whether it joins a run (find_runs).
  std::vector<char> fetch_joins_, evict_joins_;
  std::size_t evictions_ = 0;
  // Per launch, the fetches made before it (fetch, its index in the schedule's order;
  // place_fetches); the last entry: the end-of-iteration fetches.
  std::vector<std::vector<std::pair<const fetch_action*, std::size_t>>> fetches_at_;
  std::uint64_t mover_free_ = 0;  // when the mover is done with the remaps so far
  // The bytes the evictions' runs the mover has grouped since its last fetch's run free;
  // 0: its last run was a fetch's, and the next run begins a group.
  std::size_t group_bytes_ = 0;
  std::vector<std::uint64_t> taken_at_;  // when its device memory was last taken
  std::vector<bool> resident_;
  std::vector<std::pair<std::uint64_t, std::int64_t>> holds_;  // (time, +-bytes)
  std::size_t used_ = 0;
  simulation result_;
};

}  // namespace

simulation simulate(const iteration_model& model, const schedule& plan,
                    const cost_model& costs) {
  return replay(model, plan, costs).run();
}

}  // namespace oversub::policy
