// iteration_model: validation and the figures derived from a model (peak live
// bytes, the largest launch, the forward/backward boundary).
#include "policy/iteration_model.h"

#include <algorithm>

namespace oversub::policy {

std::string validate_model(const iteration_model& model) {
  const std::size_t n = model.launches.size();
  for (std::size_t b = 0; b < model.buffers.size(); ++b) {
    const model_buffer& buf = model.buffers[b];
    if (buf.long_lived) continue;
    if (buf.alloc_launch > buf.free_launch || buf.free_launch >= n) {
      return "buffer " + std::to_string(b) + ": alloc_launch " +
             std::to_string(buf.alloc_launch) + ", free_launch " +
             std::to_string(buf.free_launch) + " with " + std::to_string(n) + " launches";
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const model_launch& l = model.launches[i];
    for (buffer_id b : l.uses) {
      if (b >= model.buffers.size()) {
        return "launch " + std::to_string(i) + " uses buffer " + std::to_string(b) +
               " of " + std::to_string(model.buffers.size());
      }
      const model_buffer& buf = model.buffers[b];
      if (!buf.long_lived && (i < buf.alloc_launch || i > buf.free_launch)) {
        return "launch " + std::to_string(i) + " uses buffer " + std::to_string(b) +
               " outside its lifetime [" + std::to_string(buf.alloc_launch) + ", " +
               std::to_string(buf.free_launch) + "]";
      }
    }
    for (buffer_id b : l.writes) {
      if (std::find(l.uses.begin(), l.uses.end(), b) == l.uses.end()) {
        return "launch " + std::to_string(i) + " writes buffer " + std::to_string(b) +
               " that it does not use";
      }
    }
  }
  for (const dead_window& w : model.dead_windows) {
    if (w.buffer >= model.buffers.size() || !model.buffers[w.buffer].long_lived ||
        w.from >= n || w.until >= n) {
      return "dead window of buffer " + std::to_string(w.buffer) + " [" +
             std::to_string(w.from) + ", " + std::to_string(w.until) +
             "]: not a long-lived buffer, or past the " + std::to_string(n) + " launches";
    }
  }
  if (model.backward_begin && *model.backward_begin > n) {
    return "backward_begin " + std::to_string(*model.backward_begin) + " past " +
           std::to_string(n) + " launches";
  }
  return {};
}

bool dead_window_holds(const dead_window& w, std::size_t q, std::size_t launches, bool fetch) {
  if (launches != 0) q %= launches;
  if (fetch && q == w.until) return false;
  return w.from <= w.until ? w.from <= q && q <= w.until : q >= w.from || q <= w.until;
}

void add_dead_windows(buffer_id b, std::span<const std::pair<std::uint64_t, bool>> events,
                      std::span<const std::uint32_t> uses, std::size_t launches,
                      std::vector<dead_window>& out) {
  const std::size_t n = launches;
  if (n == 0 || uses.empty()) return;
  for (std::size_t j = 0; j < events.size(); ++j) {
    if (!events[j].second) continue;
    const std::uint64_t from = events[j].first;
    std::uint64_t block = from + n - 1;  // positions past the end count on from n
    for (std::size_t k = 1; k < events.size(); ++k) {
      const auto& [at, vacated] = events[(j + k) % events.size()];
      if (vacated) continue;
      block = std::min(block, at + (j + k >= events.size() ? n : 0));
      break;
    }
    const auto next = std::lower_bound(uses.begin(), uses.end(), from);
    const std::uint64_t use = next != uses.end() ? *next : uses.front() + n;
    const std::uint64_t until = std::min(block, use);
    out.push_back({b, static_cast<std::uint32_t>(from % n), static_cast<std::uint32_t>(until % n)});
  }
}

bool launch_writes(const model_launch& launch, buffer_id buffer) {
  if (!launch.writes_known) return true;
  return std::find(launch.writes.begin(), launch.writes.end(), buffer) != launch.writes.end();
}

namespace {

// Per-iteration live bytes at each launch (difference array over lifetimes).
std::vector<std::int64_t> per_iteration_live(const iteration_model& model) {
  std::vector<std::int64_t> delta(model.launches.size() + 1, 0);
  for (const model_buffer& buf : model.buffers) {
    if (buf.long_lived || buf.free_launch >= model.launches.size()) continue;
    delta[buf.alloc_launch] += static_cast<std::int64_t>(buf.bytes);
    delta[buf.free_launch + 1] -= static_cast<std::int64_t>(buf.bytes);
  }
  std::vector<std::int64_t> live(model.launches.size(), 0);
  std::int64_t running = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    running += delta[i];
    live[i] = running;
  }
  return live;
}

}  // namespace

std::uint32_t backward_begin_of(const iteration_model& model) {
  if (model.backward_begin) return *model.backward_begin;
  const auto live = per_iteration_live(model);
  if (live.empty()) return 0;
  // The last launch at the peak: the loss and first backward kernels often share it.
  std::size_t best = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (live[i] >= live[best]) best = i;
  }
  return static_cast<std::uint32_t>(best);
}

std::size_t peak_live_bytes(const iteration_model& model) {
  std::size_t long_lived = 0;
  for (const model_buffer& buf : model.buffers) {
    if (buf.long_lived) long_lived += buf.bytes;
  }
  const auto live = per_iteration_live(model);
  const std::int64_t peak = live.empty() ? 0 : *std::max_element(live.begin(), live.end());
  return long_lived + static_cast<std::size_t>(peak);
}

largest_launch largest_launch_footprint(const iteration_model& model) {
  largest_launch best;
  std::vector<buffer_id> ids;
  for (std::size_t i = 0; i < model.launches.size(); ++i) {
    ids = model.launches[i].uses;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::size_t bytes = 0;
    for (buffer_id b : ids) bytes += model.buffers[b].bytes;
    if (bytes > best.bytes) best = {static_cast<std::uint32_t>(i), bytes, ids.size()};
  }
  return best;
}

trimmed_launches trim_launches_over_room(iteration_model& model, std::size_t room_bytes) {
  trimmed_launches out;
  if (room_bytes == 0) return out;
  std::vector<std::uint32_t> use_count(model.buffers.size(), 0);
  for (const model_launch& l : model.launches) {
    for (buffer_id b : l.uses) ++use_count[b];
  }
  std::vector<buffer_id> ids;
  std::vector<bool> kept(model.buffers.size(), false);
  for (model_launch& l : model.launches) {
    ids = l.uses;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::size_t bytes = 0;
    for (buffer_id b : ids) bytes += model.buffers[b].bytes;
    if (bytes <= room_bytes) continue;
    std::stable_sort(ids.begin(), ids.end(), [&](buffer_id a, buffer_id b) {
      return use_count[a] > use_count[b];
    });
    std::size_t held = 0;
    for (buffer_id b : ids) {
      kept[b] = held + model.buffers[b].bytes <= room_bytes;
      if (kept[b]) {
        held += model.buffers[b].bytes;
      } else {
        l.host_bytes += model.buffers[b].bytes;
        out.host_bytes += model.buffers[b].bytes;
      }
    }
    const std::size_t before = l.uses.size();
    std::erase_if(l.uses, [&](buffer_id b) { return !kept[b]; });
    std::erase_if(l.writes, [&](buffer_id b) { return !kept[b]; });
    out.uses += before - l.uses.size();
    ++out.launches;
    for (buffer_id b : ids) kept[b] = false;
  }
  return out;
}

const iteration_model& fitted_to_room(const iteration_model& model, std::size_t room_bytes,
                                      iteration_model& scratch, trimmed_launches* taken) {
  if (largest_launch_footprint(model).bytes <= room_bytes) return model;
  scratch = model;
  const trimmed_launches t = trim_launches_over_room(scratch, room_bytes);
  if (taken != nullptr) *taken = t;
  return scratch;
}

}  // namespace oversub::policy
