// reuse_bound: Belady over unrolled iterations for the copies in, interval packing
// for the copies out (Note [Reuse bound] in policy/reuse_bound.h).
#include "policy/reuse_bound.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "policy/simulate.h"

namespace oversub::policy {
namespace {

constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint32_t none = ~std::uint32_t{0};

// Each launch's distinct buffers, and for each of them whether the launch writes it
// and the next launch (this iteration) that uses it and that writes it.
struct use_site {
  buffer_id buffer = 0;
  bool writes = false;
  std::uint32_t next_use = none;    // later launch of this iteration, or none
  std::uint32_t next_write = none;  // later launch of this iteration writing it, or none
};

struct unrolled {
  std::size_t n = 0;
  std::vector<std::vector<use_site>> sites;   // per launch
  std::vector<std::uint32_t> first, last;     // per buffer, first/last launch using it
  std::vector<std::uint32_t> first_write;     // per buffer, first launch writing it
};

unrolled index_uses(const iteration_model& model) {
  unrolled u;
  u.n = model.launches.size();
  const std::size_t nb = model.buffers.size();
  u.sites.resize(u.n);
  u.last.assign(nb, none);
  std::vector<std::uint32_t> stamp(nb, none);
  for (std::uint32_t i = 0; i < u.n; ++i) {
    const model_launch& l = model.launches[i];
    for (buffer_id b : l.uses) {
      if (stamp[b] == i) continue;
      stamp[b] = i;
      u.sites[i].push_back({b, launch_writes(l, b)});
      u.last[b] = i;
    }
  }
  std::vector<std::uint32_t> next(nb, none), next_write(nb, none);
  for (std::size_t i = u.n; i-- > 0;) {
    for (use_site& s : u.sites[i]) {
      s.next_use = next[s.buffer];
      s.next_write = next_write[s.buffer];
      next[s.buffer] = static_cast<std::uint32_t>(i);
      if (s.writes) next_write[s.buffer] = static_cast<std::uint32_t>(i);
    }
  }
  // Walked back to launch 0, the next use and write are the first ones.
  u.first = std::move(next);
  u.first_write = std::move(next_write);
  return u;
}

// Belady over k iterations from an empty device: the bytes of content copied in.
// False when a launch's own buffers do not fit.
bool belady_copies_in(const iteration_model& model, const unrolled& u, std::size_t capacity,
                      std::uint32_t k, std::uint64_t& copied) {
  const std::size_t nb = model.buffers.size();
  std::vector<std::size_t> resident(nb, 0);
  std::vector<std::uint64_t> key(nb, never);  // next use while in `order`
  std::set<std::pair<std::uint64_t, buffer_id>> order;  // resident, not in use now
  std::size_t held = 0;
  copied = 0;
  const std::uint64_t horizon = static_cast<std::uint64_t>(k) * u.n;
  for (std::uint32_t it = 0; it < k; ++it) {
    const std::uint64_t base = static_cast<std::uint64_t>(it) * u.n;
    for (std::uint32_t i = 0; i < u.n; ++i) {
      const auto& sites = u.sites[i];
      for (const use_site& s : sites) {
        const buffer_id b = s.buffer;
        if (resident[b] > 0) order.erase({key[b], b});
        const std::size_t bytes = model.buffers[b].bytes;
        const bool has_content = model.buffers[b].long_lived || u.first[b] < i;
        if (has_content) copied += bytes - resident[b];
        held += bytes - resident[b];
        resident[b] = bytes;
      }
      while (held > capacity) {
        if (order.empty()) return false;
        auto victim = std::prev(order.end());
        const buffer_id v = victim->second;
        const std::size_t drop = std::min(resident[v], held - capacity);
        resident[v] -= drop;
        held -= drop;
        if (resident[v] == 0) order.erase(victim);
      }
      for (const use_site& s : sites) {
        const buffer_id b = s.buffer;
        const model_buffer& buf = model.buffers[b];
        std::uint64_t next = never;
        if (s.next_use != none) {
          next = base + s.next_use;
        } else if (buf.long_lived && base + u.n < horizon) {
          next = base + u.n + u.first[b];
        }
        if (next == never && !buf.long_lived) {  // dead: its memory goes now
          held -= resident[b];
          resident[b] = 0;
          continue;
        }
        key[b] = next;
        order.insert({next, b});
      }
    }
  }
  return true;
}

// Interval packing over k iterations: the content bytes that cannot stay resident
// from a write to its last need and so are copied out.
std::uint64_t packing_copies_out(const iteration_model& model, const unrolled& u,
                                 std::size_t capacity, std::uint32_t k) {
  const std::size_t nb = model.buffers.size();
  struct active {
    std::uint64_t end;  // the interval (start, end), both launches excluded
    buffer_id buffer;
    bool operator<(const active& o) const {
      return end != o.end ? end < o.end : buffer < o.buffer;
    }
  };
  std::set<active> open;                            // by end
  std::vector<std::size_t> kept(nb, 0);             // of the buffer's open interval
  std::vector<std::uint64_t> open_end(nb, never);   // end of its latest interval (never: none)
  std::size_t kept_total = 0;
  std::uint64_t dropped = 0;
  const std::uint64_t horizon = static_cast<std::uint64_t>(k) * u.n;
  std::vector<active> starting;  // intervals opened by the previous launch
  for (std::uint64_t t = 0; t < horizon; ++t) {
    const auto i = static_cast<std::uint32_t>(t % u.n);
    const std::uint64_t base = t - i;
    while (!open.empty() && open.begin()->end <= t) {  // (start, end) is past
      const buffer_id b = open.begin()->buffer;
      kept_total -= kept[b];
      kept[b] = 0;
      open_end[b] = never;
      open.erase(open.begin());
    }
    for (const active& a : starting) {
      kept[a.buffer] = model.buffers[a.buffer].bytes;
      kept_total += kept[a.buffer];
      open_end[a.buffer] = a.end;
      open.insert(a);
    }
    starting.clear();
    std::size_t need = kept_total;
    for (const use_site& s : u.sites[i]) {
      const std::uint64_t e = open_end[s.buffer];
      if (e == never || e <= t) need += model.buffers[s.buffer].bytes;
    }
    while (need > capacity && !open.empty()) {
      auto last = std::prev(open.end());
      const buffer_id b = last->buffer;
      const std::size_t drop = std::min(kept[b], need - capacity);
      kept[b] -= drop;
      kept_total -= drop;
      need -= drop;
      dropped += drop;
      // All of it copied out: nothing left to keep (the interval still spans its
      // launches: open_end stays).
      if (kept[b] == 0) open.erase(last);
    }
    // Writes at t open an interval (t, end): its inside is t + 1 .. end - 1.
    for (const use_site& s : u.sites[i]) {
      if (!s.writes) continue;
      const model_buffer& buf = model.buffers[s.buffer];
      std::uint64_t end = t;
      if (s.next_write != none) {
        end = base + s.next_write;
      } else if (!buf.long_lived) {
        end = base + u.last[s.buffer];
      } else if (base + u.n < horizon && u.first_write[s.buffer] != none) {
        end = base + u.n + u.first_write[s.buffer];
      } else {
        end = horizon;  // needed past the horizon
      }
      if (end > t + 1) starting.push_back({end, s.buffer});
    }
  }
  return dropped;
}

std::uint64_t whole_pages(std::uint64_t bytes, std::size_t page_bytes) {
  if (page_bytes == 0) return bytes;
  return (bytes + page_bytes - 1) / page_bytes * page_bytes;
}

std::uint64_t link_ns(std::uint64_t bytes, double per_s) {
  if (per_s <= 0) return 0;
  return static_cast<std::uint64_t>(static_cast<double>(bytes) * 1e9 / per_s);  // truncated
}

}  // namespace

reuse_floor reuse_bound(const iteration_model& model, std::size_t capacity_bytes,
                        const cost_model& costs, std::size_t page_bytes) {
  reuse_floor f;
  f.ns = unlimited_iteration_ns(model, costs);
  if (model.launches.empty()) return f;
  const unrolled u = index_uses(model);
  std::uint64_t uses = 0;
  for (const auto& s : u.sites) uses += s.size();
  constexpr std::uint64_t budget = 4'000'000;
  const auto k = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(budget / std::max<std::uint64_t>(uses, 1), 4, 64));
  std::uint64_t copied_in = 0;
  if (!belady_copies_in(model, u, capacity_bytes, k, copied_in)) return f;
  const std::uint64_t in =
      copied_in > capacity_bytes ? (copied_in - capacity_bytes + k - 1) / k : 0;
  const std::uint64_t out = (packing_copies_out(model, u, capacity_bytes, k) + k - 1) / k;
  f.iterations = k;
  f.h2d_bytes = whole_pages(in, page_bytes);
  f.d2h_bytes = whole_pages(out, page_bytes);
  f.ns = std::max({f.ns, link_ns(f.h2d_bytes, costs.h2d_bytes_per_s),
                   link_ns(f.d2h_bytes, costs.d2h_bytes_per_s)});
  return f;
}

}  // namespace oversub::policy
