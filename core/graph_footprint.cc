// What a CUDA graph's replay will touch (see Note [A graph's footprint] in
// core/graph_footprint.h).
#include "core/graph_footprint.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/log.h"
#include "common/options.h"
#include "pool/driver_api.h"

namespace oversub::core {

namespace {

// A footprint larger than this many ranges (a graph of a million launches) is not
// kept: replays of it fetch nothing, as before footprints existed.
constexpr std::size_t max_ranges = std::size_t{1} << 20;

struct range_key_hash {
  std::size_t operator()(const std::pair<std::uintptr_t, std::size_t>& k) const noexcept {
    return std::hash<std::uintptr_t>{}(k.first) ^ (std::hash<std::size_t>{}(k.second) << 1);
  }
};

struct footprint {
  std::vector<residency::byte_range> ranges;  // first seen first
  std::unordered_set<std::pair<std::uintptr_t, std::size_t>, range_key_hash> seen;
  bool overflowed = false;
};

// An executable graph's footprint as sorted, merged byte intervals, for the rank.
using intervals = std::vector<std::pair<std::uintptr_t, std::uintptr_t>>;  // [begin, end)

intervals merged(const std::vector<residency::byte_range>& ranges) {
  intervals out;
  out.reserve(ranges.size());
  for (const residency::byte_range& r : ranges) out.emplace_back(r.addr, r.addr + r.bytes);
  std::sort(out.begin(), out.end());
  intervals m;
  for (const auto& iv : out) {
    if (!m.empty() && iv.first <= m.back().second) {
      m.back().second = std::max(m.back().second, iv.second);
    } else {
      m.push_back(iv);
    }
  }
  return m;
}

bool overlaps(const intervals& m, std::uintptr_t begin, std::uintptr_t end) {
  auto it = std::upper_bound(m.begin(), m.end(), std::make_pair(begin, UINTPTR_MAX));
  if (it != m.begin() && std::prev(it)->second > begin) return true;
  return it != m.end() && it->first < end;
}

struct exec_entry {
  graph_ranges ranges;
  std::shared_ptr<const intervals> merged;
};

// See Note [Fetch or reach, by measurement] in core/graph_footprint.h.
constexpr std::uint64_t trial_cycles = 9;  // cycles 0..8; the way is chosen from cycle 9

// Whether cycle c, before a way is chosen, fetches, and whether its time counts.
bool trial_fetches(std::uint64_t c) { return c == 0 || ((c - 1) / 2) % 2 == 0; }
bool trial_counts(std::uint64_t c) { return c >= 1 && c < trial_cycles && (c - 1) % 2 == 1; }

struct cycle_timer {
  CUgraphExec head = nullptr;
  std::uint64_t cycle = 0;  // the head's replays so far
  struct mark {
    CUevent event;
    std::uint64_t cycle;  // the cycle it begins
  };
  std::deque<mark> marks;  // recorded, the cycle they begin not timed yet
  double ms[2] = {0, 0};   // counted cycles' device time: [0] reaching, [1] fetching
  int counted[2] = {0, 0};
  int chosen = -1;         // -1: not yet; else 0 reach, 1 fetch
  bool fetching = true;    // the current cycle's way
  bool broken = false;     // an event could not be made or read: fetch, untimed
};

struct registry {
  std::mutex mutex;
  cycle_timer timer;
  // Graphs being captured, or captured and not destroyed.
  std::unordered_map<CUgraph, std::shared_ptr<footprint>> graphs;
  // Executable graphs: the footprint of the graph they came from, as it was then.
  std::unordered_map<CUgraphExec, exec_entry> execs;
  // Executable graphs with a footprint by their last replay, longest ago first (Note
  // [Replays come round in turn] in core/graph_footprint.h).
  std::vector<CUgraphExec> replayed;
};

registry& the_registry() {
  static registry* r = new registry;  // never destroyed: hooks may run during exit
  return *r;
}

// The graph stream's capture is building, or null.
CUgraph capturing_graph(CUstream stream) noexcept {
  const pool::driver_table& d = pool::driver();
  if (!d.complete) return nullptr;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  if (d.cuStreamGetCaptureInfo(stream, &status, &id, &graph, nullptr, nullptr, nullptr) !=
          CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    return nullptr;
  }
  return graph;
}

}  // namespace

void graph_capture_ranges(CUstream stream, std::span<const residency::byte_range> ranges) noexcept {
  const CUgraph graph = capturing_graph(stream);
  if (graph == nullptr) return;
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  try {
    std::shared_ptr<footprint>& f = r.graphs[graph];
    if (!f) f = std::make_shared<footprint>();
    if (f->overflowed) return;
    for (const residency::byte_range& b : ranges) {
      if (b.reach || b.bytes == 0) continue;
      if (!f->seen.emplace(b.addr, b.bytes).second) continue;
      if (f->ranges.size() >= max_ranges) {
        f->overflowed = true;
        f->ranges.clear();
        f->ranges.shrink_to_fit();
        f->seen.clear();
        log::info("a CUDA graph being captured touches more than {} ranges; its replays are "
                  "not prefetched",
                  max_ranges);
        return;
      }
      f->ranges.push_back(residency::byte_range{b.addr, b.bytes});
    }
  } catch (...) {  // out of memory: this graph's replays fetch nothing
    r.graphs.erase(graph);
  }
}

void graph_instantiated(CUgraphExec exec, CUgraph graph) noexcept {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  try {
    r.execs.erase(exec);  // a handle the driver hands out again
    std::erase(r.replayed, exec);
    const auto it = r.graphs.find(graph);
    if (it == r.graphs.end() || it->second->overflowed || it->second->ranges.empty()) return;
    r.execs.emplace(exec, exec_entry{std::make_shared<const std::vector<residency::byte_range>>(
                                         it->second->ranges),
                                     std::make_shared<const intervals>(merged(it->second->ranges))});
  } catch (...) {
  }
}

void graph_destroyed(CUgraph graph) noexcept {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.graphs.erase(graph);
}

void graph_exec_destroyed(CUgraphExec exec) noexcept {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.execs.erase(exec);
  std::erase(r.replayed, exec);
  if (r.timer.head == exec) {  // time the cycle anew, from the next head
    const pool::driver_table& d = pool::driver();
    for (const cycle_timer::mark& m : r.timer.marks) d.cuEventDestroy(m.event);
    r.timer = cycle_timer{};
  }
}

namespace {

// The head's replay: times the cycles that ended (their marks both complete), chooses
// once enough are in, and begins the next cycle. Under the registry's lock.
void head_replayed(cycle_timer& t, CUstream stream) noexcept {
  const pool::driver_table& d = pool::driver();
  while (!t.broken && t.marks.size() >= 2) {
    const cycle_timer::mark& a = t.marks[0];
    const cycle_timer::mark& b = t.marks[1];
    const CUresult qa = d.cuEventQuery(a.event);
    const CUresult qb = qa == CUDA_SUCCESS ? d.cuEventQuery(b.event) : qa;
    if (qb == CUDA_ERROR_NOT_READY) break;
    float ms = 0;
    if (qb != CUDA_SUCCESS || d.cuEventElapsedTime(&ms, a.event, b.event) != CUDA_SUCCESS) {
      t.broken = true;
      break;
    }
    if (trial_counts(a.cycle)) {
      const int way = trial_fetches(a.cycle) ? 1 : 0;
      t.ms[way] += ms;
      ++t.counted[way];
    }
    d.cuEventDestroy(a.event);
    t.marks.pop_front();
  }
  if (t.chosen < 0 && t.counted[0] >= 2 && t.counted[1] >= 2) {
    const double fetch = t.ms[1] / t.counted[1];
    const double reach = t.ms[0] / t.counted[0];
    t.chosen = fetch <= reach ? 1 : 0;
    const bool um = current_config().mode == run_mode::um;
    const std::string line = fmt::format(
        "graph replays: a cycle of them took {:.3f} ms on the device fetching each "
        "footprint first and {:.3f} ms {}; from now on they {}",
        fetch, reach, um ? "leaving it to demand paging" : "reaching it on the host",
        t.chosen == 1 ? "fetch it" : um ? "leave it to demand paging" : "reach it on the host");
    say(line);
  }
  if (t.broken || t.chosen >= 0) {
    for (const cycle_timer::mark& m : t.marks) d.cuEventDestroy(m.event);
    t.marks.clear();
  } else if (t.cycle <= trial_cycles && !pool::stream_is_capturing(stream)) {
    CUevent e = nullptr;
    if (d.cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      t.broken = true;
    } else if (d.cuEventRecord(e, stream) != CUDA_SUCCESS) {
      d.cuEventDestroy(e);
      t.broken = true;
    } else {
      t.marks.push_back(cycle_timer::mark{e, t.cycle});
    }
  }
  t.fetching = t.broken || (t.chosen >= 0 ? t.chosen == 1 : trial_fetches(t.cycle));
  ++t.cycle;
}

}  // namespace

bool graph_fetch_now(CUgraphExec exec, CUstream stream) noexcept {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  cycle_timer& t = r.timer;
  const pool::driver_table& d = pool::driver();
  if (!d.complete) return true;
  if (t.head == nullptr) t.head = exec;
  if (exec == t.head) head_replayed(t, stream);
  return t.fetching;
}

graph_ranges graph_footprint(CUgraphExec exec) {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.execs.find(exec);
  return it == r.execs.end() ? nullptr : it->second.ranges;
}

residency::victim_rank graph_replay_rank(CUgraphExec exec, std::uintptr_t page_bytes) {
  // The other graphs' footprints, the one replayed next first.
  std::vector<std::shared_ptr<const intervals>> next;
  {
    registry& r = the_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.execs.count(exec) == 0) return {};
    std::erase(r.replayed, exec);
    r.replayed.push_back(exec);
    next.reserve(r.replayed.size());
    for (CUgraphExec e : r.replayed) next.push_back(r.execs.at(e).merged);
  }
  // Ranks: 1 for the next graph's pages (they leave last), one more per graph after
  // it, and the most for a page of no graph. Never 0 (that would pin it).
  return [next = std::move(next), page_bytes](std::uintptr_t va) -> std::uint64_t {
    for (std::size_t i = 0; i < next.size(); ++i) {
      if (overlaps(*next[i], va, va + page_bytes)) return i + 1;
    }
    return next.size() + 1;
  };
}

}  // namespace oversub::core
