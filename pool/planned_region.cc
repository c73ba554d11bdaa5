// The planned placement's server (see planned_region.h).
#include "pool/planned_region.h"

#include <algorithm>

#include "common/log.h"
#include "common/stats.h"
#include "common/units.h"

namespace oversub::pool {

planned_region::planned_region(vmm_arena& online, stream_fences& f)
    : online_(online), fences_(f) {}

void planned_region::make_plan_locked(CUstream stream) {
  const policy::learned_iteration& it = *learner_.learned();
  policy::placement p = policy::plan_placement(it.buffers, alignment_bytes);
  if (!policy::placement_is_valid(it.buffers, p, alignment_bytes) || p.region_bytes == 0) {
    log::error("pool: the planned placement for an iteration of {} allocations is not valid; "
               "staying with the online arena", it.buffers.size());
    plan_failed_ = true;
    return;
  }
  allocation_result region = online_.allocate(p.region_bytes, stream);
  if (!region) {
    log::warn("pool: cannot map the planned region of {}; staying with the online arena",
              format_bytes(p.region_bytes));
    plan_failed_ = true;
    return;
  }
  base_ = reinterpret_cast<std::uintptr_t>(region.ptr);
  stats_.planned = true;
  stats_.iteration_allocations = it.buffers.size();
  stats_.region_bytes = p.region_bytes;
  stats_.lower_bound_bytes = p.lower_bound_bytes;
  log::info("pool: learned an iteration of {} allocations ({} events) after {} events; planned "
            "region {} (lower bound {}, heuristic {})",
            it.buffers.size(), it.events.size(), it.learned_at_event,
            format_bytes(p.region_bytes), format_bytes(p.lower_bound_bytes), p.heuristic);
  iteration_ = it;
  plan_ = std::move(p);
  next_ = 0;
  deviated_ = false;
  plan_starts_ = 1;
  size_deviations_ = 0;
  allocs_since_start_ = 0;
  // The learning iterations' blocks are free now: give their chunks back.
  online_.trim();
  layout_generation_.fetch_add(1, std::memory_order_acq_rel);
}

bool planned_region::can_serve_locked(std::size_t offset, std::size_t size, int consumer,
                                      CUstream stream) {
  const std::size_t end = offset + size;
  // A live planned block over these bytes (freed later than planned)?
  auto it = live_.lower_bound(offset);
  if (it != live_.end() && it->first < end) return false;
  if (it != live_.begin() && std::prev(it)->second.end > offset) return false;
  // Earlier users not done for this stream?
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool ok = true;
    for (auto f = freed_.begin(); f != freed_.end() && f->first < end; ++f) {
      if (f->second.end > offset && !fences_.reusable(f->second.tickets, consumer)) {
        ok = false;
        break;
      }
    }
    if (ok) return true;
    // See Note [No event calls during capture] in vmm_arena.cc.
    if (attempt == 0 && (stream_fences::capturing(stream) || fences_.poll() == 0)) return false;
  }
  return false;
}

void planned_region::deviate_locked(std::size_t bytes, const char* why, bool in_size) {
  deviated_ = true;
  ++stats_.deviations;
  stats::global().pool_deviations.count();
  const std::uint64_t n = stats_.deviations;
  log::emit(n == 1 ? log::level::warn : log::level::debug,
            "pool: planned placement: iteration deviated at allocation {} of {} ({} requested, "
            "{}); the rest of this iteration comes from the online arena{}",
            next_, iteration_->buffers.size(), format_bytes(bytes), why,
            n == 1 ? " (logged once)" : "");
  if (in_size) ++size_deviations_;
  if (plan_starts_ >= retire_after_starts && 2 * size_deviations_ >= plan_starts_ &&
      relearns_ < max_relearns) {
    retire_plan_locked();
  }
}

// See Note [A plan that keeps deviating] in planned_region.h.
void planned_region::retire_plan_locked() {
  const std::size_t failed_events = iteration_->events.size();
  log::info("pool: the planned iteration of {} allocations ({} events) deviated in size at {} of "
            "its {} starts: not the training iteration; learning again with a period of more "
            "than {} events",
            iteration_->buffers.size(), failed_events, size_deviations_, plan_starts_,
            failed_events);
  retired_region r{base_, plan_->region_bytes, std::move(live_)};
  if (r.live.empty()) {
    // A synchronous free: every stream that worked since the region was mapped is
    // waited for before its bytes are reused (the freed ranges' tickets are a subset).
    online_.deallocate(reinterpret_cast<void*>(r.base), r.bytes, no_stream);
  } else {
    retired_.push_back(std::move(r));
  }
  live_.clear();
  freed_.clear();
  plan_.reset();
  iteration_.reset();
  layout_generation_.fetch_add(1, std::memory_order_acq_rel);
  base_ = 0;
  next_ = 0;
  deviated_ = false;
  plan_starts_ = 0;
  size_deviations_ = 0;
  stats_.planned = false;
  ++stats_.retired;
  ++relearns_;
  learner_ = policy::allocation_iteration_learner(
      policy::allocation_iteration_learner::default_max_period, failed_events + 1);
}

allocation_result planned_region::allocate(std::size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!plan_ && !plan_failed_ && learner_.learned()) make_plan_locked(stream);
  if (plan_) {
    const std::vector<policy::buffer_lifetime>& buffers = iteration_->buffers;
    if (deviated_ && live_.empty() && bytes == buffers[0].size_bytes) {
      deviated_ = false;  // an iteration boundary: plan again from buffer 0
      next_ = 0;
      ++plan_starts_;
      allocs_since_start_ = 0;
    } else if (deviated_ && ++allocs_since_start_ > 2 * buffers.size() + 256 &&
               relearns_ < max_relearns) {
      // Never back at buffer 0 with nothing planned live: the plan cannot start over.
      log::info("pool: the planned iteration has not started over in {} allocations",
                allocs_since_start_);
      retire_plan_locked();
    }
  }
  if (plan_) {
    const std::vector<policy::buffer_lifetime>& buffers = iteration_->buffers;
    if (!deviated_) {
      if (next_ >= buffers.size()) {
        next_ = 0;
        ++plan_starts_;
        allocs_since_start_ = 0;
        if (!trimmed_after_plan_) {
          // The first planned iteration is over: the learning iterations' blocks are
          // surely done by now, give their chunks back.
          trimmed_after_plan_ = true;
          online_.trim();
        }
      }
      const std::size_t k = next_;
      const int consumer = fences_.slot_of(stream);
      if (buffers[k].size_bytes != bytes) {
        deviate_locked(bytes, "a different size", true);
      } else if (!can_serve_locked(plan_->offsets[k], block_index::round(bytes), consumer,
                                   stream)) {
        deviate_locked(bytes, "its planned bytes still in use", false);
      } else {
        const std::size_t offset = plan_->offsets[k];
        const std::size_t end = offset + block_index::round(bytes);
        live_block b;
        b.end = end;
        b.alloc_epoch = fences_.epoch();
        for (auto f = freed_.begin(); f != freed_.end() && f->first < end;) {
          if (f->second.end > offset) b.inherited.merge(f->second.tickets);
          if (f->first >= offset && f->second.end <= end) {
            f = freed_.erase(f);
          } else {
            ++f;
          }
        }
        live_.emplace(offset, b);
        ++next_;
        ++stats_.served;
        stats::global().pool_planned.count();
        return {reinterpret_cast<void*>(base_ + offset), pool_errc::ok};
      }
    }
  }
  allocation_result r = online_.allocate(bytes, stream);
  if (r) {  // (plan_ may have been retired just now: then learning starts with this one)
    ++stats_.online;
    if (!plan_) learner_.on_alloc(reinterpret_cast<std::uintptr_t>(r.ptr), bytes);
  }
  return r;
}

void planned_region::deallocate(void* ptr, std::size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  for (auto r = retired_.begin(); r != retired_.end(); ++r) {
    if (addr < r->base || addr >= r->base + r->bytes) continue;
    r->live.erase(addr - r->base);
    if (r->live.empty()) {
      online_.deallocate(reinterpret_cast<void*>(r->base), r->bytes, no_stream);
      retired_.erase(r);
    }
    return;
  }
  if (plan_ && addr >= base_ && addr < base_ + plan_->region_bytes) {
    auto it = live_.find(addr - base_);
    if (it == live_.end()) return;
    freed_range f;
    f.end = it->second.end;
    f.tickets = it->second.inherited;
    if (stream == no_stream) {
      fences_.tickets_since(it->second.alloc_epoch, f.tickets);
    } else {
      fences_.ticket_on(stream, f.tickets);
    }
    f.tickets.prune([&](const ticket& t) { return fences_.known_complete(t); });
    const std::size_t offset = it->first;
    live_.erase(it);
    if (!f.tickets.empty()) freed_.emplace(offset, f);
    if (freed_.size() > 4 * iteration_->buffers.size() + 64 &&
        !stream_fences::capturing(stream == no_stream ? nullptr : stream)) {
      // Keep the fenced list short: forget what is done.
      fences_.poll();
      for (auto g = freed_.begin(); g != freed_.end();) {
        g->second.tickets.prune([&](const ticket& t) { return fences_.known_complete(t); });
        g = g->second.tickets.empty() ? freed_.erase(g) : std::next(g);
      }
    }
    return;
  }
  if (!plan_) learner_.on_free(addr);
  online_.deallocate(ptr, bytes, stream);
}

resource_stats planned_region::stats() const {
  resource_stats s = online_.stats();
  std::lock_guard<std::mutex> lock(mutex_);
  if (plan_) {
    std::uint64_t live_bytes = 0;
    for (const auto& [offset, b] : live_) live_bytes += b.end - offset;
    // The region is one online block: count what is live inside it instead.
    s.used_bytes = s.used_bytes - plan_->region_bytes + live_bytes;
    s.live_blocks = s.live_blocks - 1 + live_.size();
  }
  for (const retired_region& r : retired_) {
    std::uint64_t live_bytes = 0;
    for (const auto& [offset, b] : r.live) live_bytes += b.end - offset;
    s.used_bytes = s.used_bytes - r.bytes + live_bytes;
    s.live_blocks = s.live_blocks - 1 + r.live.size();
  }
  return s;
}

bool planned_region::owns(const void* ptr) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    if (plan_ && addr >= base_ && addr < base_ + plan_->region_bytes) {
      return live_.count(addr - base_) != 0;
    }
    for (const retired_region& r : retired_) {
      if (addr >= r.base && addr < r.base + r.bytes) return r.live.count(addr - r.base) != 0;
    }
  }
  return online_.owns(ptr);
}

std::uint64_t planned_region::slack_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!plan_) return 0;
  std::uint64_t live_bytes = 0;
  for (const auto& [offset, b] : live_) live_bytes += b.end - offset;
  return plan_->region_bytes - live_bytes;
}

planned_stats planned_region::plan_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::optional<policy::placement> planned_region::current_plan() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plan_;
}

std::uintptr_t planned_region::region_base() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return base_;
}

}  // namespace oversub::pool
