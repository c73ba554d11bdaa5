// Lifetime-planned placement (see placement.h): offsets for one iteration's buffers
// in one region, as small as several heuristics and a local improvement can make it.
//
// The algorithm, in brief:
//   - sizes are rounded up to the alignment; times are compressed to the distinct
//     alloc/free positions; a buffer is live on [alloc, max(free, alloc + 1));
//   - every heuristic is an order of the buffers plus a rule for choosing a gap:
//     each buffer in turn goes into a gap between the already placed buffers whose
//     lifetimes overlap its own (best fit: the smallest gap it fits; first fit: the
//     lowest), or on top of them when no gap fits;
//   - the orders are greedy by size, greedy by breadth, lifetime (allocation) order,
//     size x lifetime, and longest lifetime first (Note [The heuristics]);
//   - each result is improved by compaction passes (Note [Local improvement]);
//   - the smallest region wins; ties go to the heuristic listed first, so the output
//     depends only on the input;
//   - with a page size (placement_options), buffers are also kept off the pages of
//     buffers of another lifetime class where that takes no more pages (Note
//     [Grouping by lifetime into pages]).
#include "policy/placement.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "policy/placement_scan.h"

namespace oversub::policy {
namespace {

// Note [The heuristics]
// ~~~~~~~~~~~~~~~~~~~~~
// Offset assignment for a known set of lifetimes is dynamic storage allocation,
// NP-hard, so we run cheap greedy rules and keep the best, as TFLite's planner
// (Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net Inference")
// and the lifetime-aware pool of seed 004 do:
//   - greedy by size: biggest first; the big buffers decide the region, the small
//     ones fill the holes they leave;
//   - greedy by breadth: the time step with the most bytes live first, inside it the
//     biggest buffer first. A buffer is placed when the widest step it is live in
//     comes up, so the order is (widest step's bytes desc, that step, size desc);
//   - lifetime order: allocation order with best fit, what an online best-fit
//     allocator with perfect coalescing would do; good on stack-like (LIFO)
//     traces such as forward/backward;
//   - size x lifetime and longest lifetime first: long-lived buffers at the bottom
//     keep the rest of the region free of pillars.
// All are O(n^2) in the worst case (each buffer scans the placed ones in offset
// order); on 10,000 buffers one pass is a few tens of milliseconds.

// Note [Local improvement]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Compaction re-places every buffer in increasing order of its current offset at
// the lowest offset where it fits among those already re-placed. It never moves a
// buffer up: the buffers re-placed before it started at or below it and could
// only move down, so its old position is still free (those overlapping it in time
// ended at or below its offset). Mirroring the placement (offset -> region - end)
// and compacting again is a compaction from the top, which closes holes the first
// pass left. Every heuristic's result gets such rounds in turn (round robin, best
// result first) while they shrink it: the heuristic that starts best is often not
// the one that compacts best. Then, from the best result, the buffers that touch
// the top move to the front of its heuristic's order and it is rerun and compacted
// (promotion). All of it stops at the lower bound or when the budget is spent
// (Note [Work budget]).

using detail::gap_rule;
using detail::item;
using detail::offset_t;
using detail::placed_set;

struct candidate {
  std::vector<offset_t> offsets;
  offset_t region = 0;
  std::uint64_t work = 0;  // placed buffers scanned to build it (Note [Work budget])
};

candidate place_in_order(const std::vector<item>& items, std::uint32_t steps,
                         const std::vector<std::uint32_t>& order, gap_rule rule) {
  candidate c;
  c.offsets.assign(items.size(), 0);
  placed_set placed(steps);
  for (std::uint32_t k : order) {
    const item& it = items[k];
    if (it.size == 0) continue;  // takes no room, overlaps nothing
    offset_t off = placed.find(it.size, it.begin, it.end, rule);
    c.offsets[k] = off;
    c.region = std::max(c.region, off + it.size);
    placed.insert(off, it.size, it.begin, it.end);
  }
  c.work = placed.work();
  return c;
}

// Indices sorted by key (ascending), ties by index: deterministic.
template <typename Key>
std::vector<std::uint32_t> order_by(std::size_t n, Key key) {
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return key(a) < key(b); });
  return order;
}

offset_t align_up(std::size_t bytes, std::size_t alignment) {
  const offset_t a = alignment;
  return (static_cast<offset_t>(bytes) + a - 1) / a * a;
}

// Aligned sizes and compressed times; *steps receives the number of time steps.
std::vector<item> make_items(std::span<const buffer_lifetime> lifetimes,
                             std::size_t alignment, std::uint32_t* steps) {
  std::vector<std::uint64_t> times;
  times.reserve(lifetimes.size() * 2);
  auto end_of = [](const buffer_lifetime& b) {
    return std::max<std::uint64_t>(b.free_time, std::uint64_t{b.alloc_time} + 1);
  };
  for (const auto& b : lifetimes) {
    times.push_back(b.alloc_time);
    times.push_back(end_of(b));
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  auto index = [&](std::uint64_t t) {
    return static_cast<std::uint32_t>(std::lower_bound(times.begin(), times.end(), t) -
                                      times.begin());
  };
  std::vector<item> items;
  items.reserve(lifetimes.size());
  for (const auto& b : lifetimes) {
    items.push_back({align_up(b.size_bytes, alignment), index(b.alloc_time), index(end_of(b))});
  }
  *steps = static_cast<std::uint32_t>(times.size());
  return items;
}

// Bytes live in each compressed step [t, t + 1).
std::vector<offset_t> live_bytes_per_step(const std::vector<item>& items,
                                          std::uint32_t steps) {
  std::vector<std::int64_t> delta(steps + 1, 0);
  for (const item& it : items) {
    delta[it.begin] += static_cast<std::int64_t>(it.size);
    delta[it.end] -= static_cast<std::int64_t>(it.size);
  }
  std::vector<offset_t> live(steps, 0);
  std::int64_t running = 0;
  for (std::uint32_t t = 0; t < steps; ++t) {
    running += delta[t];
    live[t] = static_cast<offset_t>(running);
  }
  return live;
}

// For each item, the step of its lifetime with the most live bytes (the first such
// step on ties), by a sparse table of range arg-max.
std::vector<std::uint32_t> widest_step(const std::vector<item>& items,
                                       const std::vector<offset_t>& live) {
  const std::size_t m = live.size();
  std::vector<std::vector<std::uint32_t>> table(1, std::vector<std::uint32_t>(m));
  std::iota(table[0].begin(), table[0].end(), 0u);
  auto better = [&](std::uint32_t a, std::uint32_t b) {
    return live[a] > live[b] || (live[a] == live[b] && a < b) ? a : b;
  };
  for (std::size_t len = 2; len <= m; len *= 2) {
    const auto& prev = table.back();
    std::vector<std::uint32_t> next(m - len + 1);
    for (std::size_t i = 0; i + len <= m; ++i) next[i] = better(prev[i], prev[i + len / 2]);
    table.push_back(std::move(next));
  }
  std::vector<std::uint32_t> out(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) {
    const std::uint32_t lo = items[k].begin, hi = items[k].end;  // [lo, hi), hi > lo
    const std::size_t level = std::bit_width(static_cast<std::size_t>(hi - lo)) - 1;
    out[k] = better(table[level][lo], table[level][hi - (std::size_t{1} << level)]);
  }
  return out;
}

struct heuristic {
  const char* name;
  std::vector<std::uint32_t> order;
  gap_rule rule;
};

std::vector<heuristic> make_heuristics(const std::vector<item>& items, std::uint32_t steps) {
  const std::size_t n = items.size();
  auto length = [&](std::uint32_t k) { return items[k].end - items[k].begin; };
  const auto live = live_bytes_per_step(items, steps);
  const auto widest = widest_step(items, live);
  std::vector<heuristic> hs;
  hs.push_back({"greedy_by_size",
                order_by(n, [&](std::uint32_t k) {
                  return std::make_tuple(~items[k].size, ~length(k), items[k].begin);
                }),
                gap_rule::best_fit});
  hs.push_back({"greedy_by_breadth",
                order_by(n, [&](std::uint32_t k) {
                  return std::make_tuple(~live[widest[k]], widest[k], ~items[k].size,
                                         items[k].begin);
                }),
                gap_rule::best_fit});
  hs.push_back({"best_fit_lifetime_order",
                order_by(n, [&](std::uint32_t k) { return items[k].begin; }),
                gap_rule::best_fit});
  hs.push_back({"greedy_by_area",
                order_by(n, [&](std::uint32_t k) {
                  // size x lifetime, saturating (sizes fit in 48 bits in practice)
                  const unsigned __int128 area =
                      static_cast<unsigned __int128>(items[k].size) * length(k);
                  return std::make_tuple(~area, ~items[k].size, items[k].begin);
                }),
                gap_rule::best_fit});
  hs.push_back({"longest_lifetime_first",
                order_by(n, [&](std::uint32_t k) {
                  return std::make_tuple(~length(k), ~items[k].size, items[k].begin);
                }),
                gap_rule::first_fit});
  hs.push_back({"greedy_by_size_first_fit", hs[0].order, gap_rule::first_fit});
  return hs;
}

// The buffers that reach the top of c's region move to the front of order.
std::vector<std::uint32_t> promote_top(const std::vector<item>& items, const candidate& c,
                                       const std::vector<std::uint32_t>& order) {
  std::vector<std::uint32_t> front, back;
  for (std::uint32_t k : order) {
    const bool top = items[k].size != 0 && c.offsets[k] + items[k].size == c.region;
    (top ? front : back).push_back(k);
  }
  front.insert(front.end(), back.begin(), back.end());
  return front;
}

offset_t lower_bound_of(const std::vector<item>& items, std::uint32_t steps) {
  const auto live = live_bytes_per_step(items, steps);
  return live.empty() ? 0 : *std::max_element(live.begin(), live.end());
}

// Note [Work budget]
// ~~~~~~~~~~~~~~~~~~
// One pass (placing every buffer once) scans on the order of n^2 / 2 placed
// buffers in the worst case, a few tens of milliseconds at n = 10,000. The
// heuristics always run; compaction and promotion passes run while the scans
// counted so far leave room for one more pass of the largest size seen. Counting
// scans rather than reading a clock keeps the output a function of the input.
constexpr std::uint64_t kWorkBudget = 200'000'000;  // placed buffers scanned

class planner {
 public:
  planner(std::vector<item> items, std::uint32_t steps)
      : items_(std::move(items)), steps_(steps) {}

  candidate place(const std::vector<std::uint32_t>& order, gap_rule rule) {
    candidate c = place_in_order(items_, steps_, order, rule);
    used_ += c.work;
    largest_pass_ = std::max(largest_pass_, c.work);
    return c;
  }

  bool can_afford_pass() const { return used_ + largest_pass_ <= kWorkBudget; }

  // One round of compaction (Note [Local improvement]): down, then mirrored.
  // False when it did not shrink the region (or the budget ran out).
  bool compact_round(candidate& c) {
    const offset_t before = c.region;
    for (int pass = 0; pass < 2; ++pass) {
      if (!can_afford_pass()) return false;
      auto order = order_by(items_.size(), [&](std::uint32_t k) { return c.offsets[k]; });
      c = place(order, gap_rule::first_fit);
      // Mirror, so that the next pass compacts from the other end.
      for (std::size_t k = 0; k < items_.size(); ++k) {
        if (items_[k].size != 0) c.offsets[k] = c.region - (c.offsets[k] + items_[k].size);
      }
    }
    return c.region < before;
  }

  void compact(candidate& c) {
    while (compact_round(c)) {
    }
  }

  const std::vector<item>& items() const { return items_; }

 private:
  std::vector<item> items_;
  std::uint32_t steps_;
  std::uint64_t used_ = 0;
  std::uint64_t largest_pass_ = 0;
};

// The best plan the heuristics and the improvement passes find for items (times
// compressed to steps); bound is the items' lower bound. *name receives the winner.
candidate plan_items(std::vector<item> items, std::uint32_t steps, offset_t bound,
                     std::string* name_out) {
  const auto heuristics = make_heuristics(items, steps);
  planner plan(std::move(items), steps);

  // Every heuristic (unless one meets the bound), then compaction of each result,
  // best first, while the budget lasts.
  struct result_of {
    candidate c;
    std::size_t h;
    offset_t heuristic_region;  // before compaction
  };
  std::vector<result_of> results;
  for (std::size_t h = 0; h < heuristics.size(); ++h) {
    candidate c = plan.place(heuristics[h].order, heuristics[h].rule);
    const offset_t region = c.region;
    results.push_back({std::move(c), h, region});
    if (results.back().c.region == bound) break;  // optimal: nothing can beat it
  }
  std::stable_sort(results.begin(), results.end(), [](const result_of& a, const result_of& b) {
    return a.c.region < b.c.region;
  });
  // Round robin, so that a budget that runs out has compacted every result a bit.
  std::vector<bool> shrinking(results.size(), results.front().c.region > bound);
  for (bool any = true; any && plan.can_afford_pass();) {
    any = false;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (!shrinking[i]) continue;
      shrinking[i] = plan.compact_round(results[i].c);
      any = any || shrinking[i];
      if (results[i].c.region == bound) {  // optimal
        any = false;
        break;
      }
    }
  }
  std::size_t pick = 0;
  for (std::size_t i = 1; i < results.size(); ++i) {
    if (results[i].c.region < results[pick].c.region) pick = i;
  }
  candidate best = results[pick].c;
  const std::size_t best_h = results[pick].h;
  std::string name = heuristics[best_h].name;
  if (best.region < results[pick].heuristic_region) name += "+compact";

  // Promotion rounds (Note [Local improvement]) from the best heuristic's order.
  std::vector<std::uint32_t> order = heuristics[best_h].order;
  candidate current = best;
  for (int r = 0; r < 16 && best.region > bound && plan.can_afford_pass(); ++r) {
    order = promote_top(plan.items(), current, order);
    current = plan.place(order, heuristics[best_h].rule);
    plan.compact(current);
    if (current.region < best.region) {
      best = current;
      name = std::string(heuristics[best_h].name) + "+promote";
    }
  }
  *name_out = std::move(name);
  return best;
}

// Note [Grouping by lifetime into pages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In swap mode the region's memory moves between device and host in pages (the
// arena's 2 MiB chunks), and a page moves whole: a page holding an activation saved
// for the backward pass and a temporary used in between must come back for the
// temporary, activation and all, and go out again. The plan without pages packs
// buffers of every lifetime together wherever that saves bytes. With a page size,
// each buffer falls in one of three classes:
//   - short-lived: live for at most short_span steps of the iteration (a tenth of
//     it, at least 4): temporaries, whose pages are in use all the time anyway and
//     hold nothing while idle (dead pages move without a copy);
//   - large long-lived: at least a page and padded to whole pages for at most a
//     quarter of its size;
//   - small long-lived: the rest.
// Large ones are planned (the heuristics and passes above) with sizes rounded to
// pages in a zone from offset 0, so each starts on a page and shares none; small
// long-lived ones in the next zone, packed together, so that an activation's page
// holds other activations rather than the temporaries of the steps in between. If
// that does not fit, both in one zone. Short-lived ones then go from the top of the
// region down (first fit in a mirrored copy, biggest first; else best fit), reusing
// long-lived bytes only where they are dead at the time.
// The region is the ungrouped plan's, in whole pages: every byte added is footprint
// the swap engine must move too (stacking the three classes in zones of their own
// grows the region and the bytes moved). When the grouped plan does not fit in those
// pages, the ungrouped plan is returned (page_grouped false). The pool does not ask
// for this plan: planned_region plans without a page size, since the grouped plan
// was not faster on the shipped traces (the results log has the figures).
constexpr std::uint32_t kShortSpanDivisor = 10;
constexpr std::uint32_t kShortSpanMin = 4;

std::vector<std::uint8_t> page_classes(const std::vector<item>& items, std::uint32_t steps,
                                       offset_t page) {
  const std::uint32_t short_span = std::max(kShortSpanMin, steps / kShortSpanDivisor);
  std::vector<std::uint8_t> cls(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) {
    const item& it = items[k];
    const offset_t padded = (it.size + page - 1) / page * page;
    if (it.end - it.begin <= short_span) {
      cls[k] = 2;
    } else if (it.size >= page && padded - it.size <= it.size / 4) {
      cls[k] = 0;
    } else {
      cls[k] = 1;
    }
  }
  return cls;
}

}  // namespace

placement plan_placement(std::span<const buffer_lifetime> lifetimes,
                         std::size_t alignment_bytes) {
  placement result;
  if (lifetimes.empty()) {
    result.heuristic = "empty";
    return result;
  }
  if (alignment_bytes == 0 || (alignment_bytes & (alignment_bytes - 1)) != 0) {
    alignment_bytes = 256;  // documented as a power of two; never fail the caller
  }
  std::uint32_t steps = 0;
  auto items = make_items(lifetimes, alignment_bytes, &steps);
  const offset_t bound = lower_bound_of(items, steps);
  std::string name;
  candidate best = plan_items(std::move(items), steps, bound, &name);
  result.offsets.assign(best.offsets.begin(), best.offsets.end());
  result.region_bytes = best.region;
  result.lower_bound_bytes = bound;
  result.heuristic = std::move(name);
  return result;
}

placement plan_placement(std::span<const buffer_lifetime> lifetimes,
                         const placement_options& options) {
  std::size_t alignment = options.alignment_bytes;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) alignment = 256;
  placement plain = plan_placement(lifetimes, alignment);
  const offset_t page = options.page_bytes;
  if (lifetimes.empty() || page == 0 || (page & (page - 1)) != 0 || page % alignment != 0) {
    return plain;
  }
  auto round_page = [&](offset_t bytes) { return (bytes + page - 1) / page * page; };
  plain.ungrouped_region_bytes = plain.region_bytes;
  plain.region_bytes = round_page(plain.region_bytes);

  // See Note [Grouping by lifetime into pages].
  std::uint32_t steps = 0;
  const auto items = make_items(lifetimes, alignment, &steps);
  const auto cls = page_classes(items, steps, page);
  // Tried in turn, the first that fits in the ungrouped plan's pages is kept: large
  // buffers in a zone of their own or with the other long-lived ones; short-lived
  // ones first fit from the top or best fit.
  const offset_t region = plain.region_bytes;
  std::vector<offset_t> offsets;
  std::string names;
  bool fits = false;
  for (int separate_large = 1; separate_large >= 0 && !fits; --separate_large) {
    offsets.assign(items.size(), 0);
    names.clear();
    auto zone_of = [&](std::size_t k) { return separate_large || cls[k] == 2 ? cls[k] : 1; };
    offset_t base = 0;
    for (std::uint8_t zone = 0; zone < 2; ++zone) {
      std::vector<item> sub;
      std::vector<std::uint32_t> index;
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (zone_of(k) != zone || items[k].size == 0) continue;
        item it = items[k];
        if (zone == 0) it.size = round_page(it.size);
        sub.push_back(it);
        index.push_back(static_cast<std::uint32_t>(k));
      }
      if (sub.empty()) continue;
      const offset_t bound = lower_bound_of(sub, steps);
      std::string name;
      const candidate c = plan_items(std::move(sub), steps, bound, &name);
      for (std::size_t i = 0; i < index.size(); ++i) offsets[index[i]] = base + c.offsets[i];
      base += zone == 0 ? round_page(c.region) : c.region;
      if (!names.empty()) names += ",";
      names += std::string(zone == 0 ? "large " : "long ") + std::to_string(index.size()) + ": " +
               name;
    }
    if (base > region) continue;
    // Short-lived buffers from the top of the region down, in a mirrored copy.
    placed_set fixed(steps);
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (zone_of(k) == 2 || items[k].size == 0) continue;
      const offset_t size = zone_of(k) == 0 ? round_page(items[k].size) : items[k].size;
      fixed.insert(region - (offsets[k] + size), size, items[k].begin, items[k].end);
    }
    const auto short_order = order_by(items.size(), [&](std::uint32_t k) {
      return std::make_tuple(cls[k] != 2, ~items[k].size, items[k].begin);
    });
    for (gap_rule rule : {gap_rule::first_fit, gap_rule::best_fit}) {
      placed_set mirrored = fixed;
      std::size_t shorts = 0;
      bool ok = true;
      for (std::uint32_t k : short_order) {
        if (cls[k] != 2) break;
        if (items[k].size == 0) continue;
        const offset_t m = mirrored.find(items[k].size, items[k].begin, items[k].end, rule);
        if (m + items[k].size > region) {
          ok = false;
          break;
        }
        mirrored.insert(m, items[k].size, items[k].begin, items[k].end);
        offsets[k] = region - (m + items[k].size);
        ++shorts;
      }
      if (ok) {
        fits = true;
        names += ",short " + std::to_string(shorts) +
                 (rule == gap_rule::first_fit ? ": first fit from the top" : ": best fit");
        break;
      }
    }
  }
  if (!fits) return plain;  // more pages than without grouping
  const offset_t base = region;
  placement grouped;
  grouped.offsets.assign(offsets.begin(), offsets.end());
  grouped.region_bytes = base;
  grouped.lower_bound_bytes = plain.lower_bound_bytes;
  grouped.heuristic = "pages(" + names + ")";
  grouped.ungrouped_region_bytes = plain.ungrouped_region_bytes;
  grouped.page_grouped = true;
  return grouped;
}

bool placement_is_valid(std::span<const buffer_lifetime> lifetimes, const placement& p,
                        std::size_t alignment_bytes) {
  if (p.offsets.size() != lifetimes.size()) return false;
  if (alignment_bytes == 0 || (alignment_bytes & (alignment_bytes - 1)) != 0) return false;
  // Sweep over time: frees before allocations at the same time (a buffer freed at t
  // is not live at t); the live buffers, by offset, must not overlap.
  struct event {
    std::uint64_t time;
    bool alloc;
    std::size_t k;
  };
  std::vector<event> events;
  events.reserve(lifetimes.size() * 2);
  for (std::size_t k = 0; k < lifetimes.size(); ++k) {
    const auto& b = lifetimes[k];
    const offset_t size = align_up(b.size_bytes, alignment_bytes);
    if (p.offsets[k] % alignment_bytes != 0) return false;
    if (p.offsets[k] + size > p.region_bytes || p.offsets[k] + size < p.offsets[k]) return false;
    if (size == 0) continue;
    const std::uint64_t end = std::max<std::uint64_t>(b.free_time, std::uint64_t{b.alloc_time} + 1);
    events.push_back({b.alloc_time, true, k});
    events.push_back({end, false, k});
  }
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) {
    return std::tie(a.time, a.alloc, a.k) < std::tie(b.time, b.alloc, b.k);
  });
  std::map<offset_t, offset_t> live;  // offset -> end
  for (const event& e : events) {
    const offset_t off = p.offsets[e.k];
    if (!e.alloc) {
      live.erase(off);
      continue;
    }
    const offset_t end = off + align_up(lifetimes[e.k].size_bytes, alignment_bytes);
    auto next = live.lower_bound(off);
    if (next != live.end() && next->first < end) return false;
    if (next != live.begin() && std::prev(next)->second > off) return false;
    live.emplace(off, end);
  }
  return true;
}

// See Note [Long-lived layout from a profile] in placement.h.
std::vector<std::uint32_t> long_lived_order(std::span<const std::uint32_t> first_use) {
  std::vector<std::uint32_t> order(first_use.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = static_cast<std::uint32_t>(k);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return first_use[a] < first_use[b];
  });
  return order;
}

}  // namespace oversub::policy
