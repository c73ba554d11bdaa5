// Learning the iteration's period from the allocation stream (see
// allocation_iteration.h).
#include "policy/allocation_iteration.h"

#include <algorithm>

namespace oversub::policy {

namespace {

constexpr std::uint64_t alloc_token(std::size_t size) { return (std::uint64_t{size} << 1) | 0; }
constexpr std::uint64_t free_token(std::uint64_t distance) { return (distance << 1) | 1; }

}  // namespace

void allocation_iteration_learner::on_alloc(std::uint64_t id, std::size_t size_bytes) {
  if (learned_ || gave_up_) return;
  live_.emplace_back(id, tokens_.size());
  push(event_record{alloc_token(size_bytes), true, size_bytes, 0});
}

void allocation_iteration_learner::on_free(std::uint64_t id) {
  if (learned_ || gave_up_) return;
  const std::uint64_t now = tokens_.size();
  auto it = std::find_if(live_.rbegin(), live_.rend(), [&](const auto& e) { return e.first == id; });
  if (it == live_.rend()) {
    // Freed but never seen allocated: a token no period can repeat exactly.
    push(event_record{free_token(now + 1), false, 0, 0});
    return;
  }
  const std::uint64_t at = it->second;
  live_.erase(std::next(it).base());
  tokens_[at].partner = now;
  push(event_record{free_token(now - at), false, 0, at + 1});
}

void allocation_iteration_learner::push(event_record e) {
  if (tokens_.size() >= max_events) {
    gave_up_ = true;
    tokens_ = {};
    run_ = {};
    live_ = {};
    return;
  }
  tokens_.push_back(e);
  const std::size_t n = tokens_.size();
  const std::size_t i = n - 1;
  const std::size_t limit = std::min(max_period_, i);
  if (run_.size() < limit + 1) run_.resize(limit + 1, 0);
  for (std::size_t p = 1; p <= limit; ++p) {
    run_[p] = tokens_[i].token == tokens_[i - p].token ? run_[p] + 1 : 0;
  }
  for (std::size_t p = min_period_; p <= limit && 2 * p <= n; ++p) {
    // The repeating stretch (run_[p] + p events) must also cover half of what was
    // seen: a temporary allocated and freed twice in a row inside the iteration
    // repeats, but explains almost nothing of the stream.
    if (run_[p] >= p && 2 * (run_[p] + p) >= n && closed(p)) {
      build(p);
      return;
    }
  }
}

// The last p events: every allocation among them freed among them, every free of
// an allocation among them.
bool allocation_iteration_learner::closed(std::size_t p) const {
  const std::size_t n = tokens_.size();
  const std::size_t start = n - p;
  bool any_alloc = false;
  for (std::size_t i = start; i < n; ++i) {
    const event_record& e = tokens_[i];
    if (e.is_alloc) {
      any_alloc = true;
      if (e.partner == 0 || e.partner >= n) return false;
    } else if (e.partner == 0 || e.partner - 1 < start) {
      return false;
    }
  }
  return any_alloc;
}

void allocation_iteration_learner::build(std::size_t p) {
  const std::size_t n = tokens_.size();
  const std::size_t start = n - p;
  learned_iteration it;
  it.learned_at_event = n;
  std::vector<std::uint32_t> buffer_of(p, 0);
  for (std::size_t i = start; i < n; ++i) {
    const event_record& e = tokens_[i];
    iteration_event ev;
    ev.is_alloc = e.is_alloc;
    if (e.is_alloc) {
      ev.size_bytes = e.size;
      ev.buffer = static_cast<std::uint32_t>(it.buffers.size());
      buffer_of[i - start] = ev.buffer;
      it.buffers.push_back(buffer_lifetime{e.size, static_cast<std::uint32_t>(i - start),
                                           static_cast<std::uint32_t>(e.partner - start)});
    } else {
      ev.buffer = buffer_of[e.partner - 1 - start];
    }
    it.events.push_back(ev);
  }
  learned_ = std::move(it);
  tokens_.clear();
  tokens_.shrink_to_fit();
  run_.clear();
  run_.shrink_to_fit();
  live_.clear();
}

}  // namespace oversub::policy
