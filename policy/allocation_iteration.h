// allocation_iteration: learns a training iteration from the allocation stream
// alone (no profiler yet), for the planned placement of the pool.
//
// The stream is a sequence of events: "allocate b bytes" and "free the buffer
// allocated d events ago". Each becomes a token (size or distance, and the kind).
// Note [Finding the period]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// For every candidate period p up to max_period the
// learner keeps run[p], how many trailing tokens equal the token p events earlier;
// the iteration is the shortest p with run[p] >= p (the last 2p events are two
// copies of one period), whose repeating stretch (run[p] + p events) covers at least
// half of the events seen, and whose last copy is closed: every buffer it allocates is
// freed inside it and it frees nothing allocated before it (so its buffers' whole
// lifetimes, [alloc_time, free_time) in event positions, lie within the iteration,
// and the window boundary is a point where only long-lived buffers are live). The
// next event then starts an iteration. Learning costs O(max_period) per event and
// stops once an iteration is found.
//
// A short stretch inside an iteration can pass both tests (a temporary allocated and
// freed twice in a row is a closed period of two events), and nothing seen so far
// tells it from the iteration. The pool finds out when the plan keeps deviating
// (Note [A plan that keeps deviating] in pool/planned_region.h) and learns again
// with min_period_events past the period that failed.
//
// Pure computation: no CUDA, no allocation beyond its own vectors.
#ifndef OVERSUB_POLICY_ALLOCATION_ITERATION_H
#define OVERSUB_POLICY_ALLOCATION_ITERATION_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "policy/placement.h"

namespace oversub::policy {

// One event of a learned iteration.
struct iteration_event {
  bool is_alloc = true;
  std::size_t size_bytes = 0;  // allocations
  std::uint32_t buffer = 0;    // which buffer (k-th allocation of the iteration)
};

struct learned_iteration {
  std::vector<iteration_event> events;      // the period, in order
  std::vector<buffer_lifetime> buffers;     // buffers[k]: size and [alloc, free) times
  std::uint64_t learned_at_event = 0;       // stream position where it was found
};

class allocation_iteration_learner {
 public:
  static constexpr std::size_t default_max_period = 8192;
  explicit allocation_iteration_learner(std::size_t max_period_events = default_max_period,
                                        std::size_t min_period_events = 1)
      : max_period_(max_period_events), min_period_(std::max<std::size_t>(1, min_period_events)) {}

  // Feed the stream. id identifies a buffer until it is freed (an address). A free
  // of an id never allocated (or allocated before learning began) is a token too.
  void on_alloc(std::uint64_t id, std::size_t size_bytes);
  void on_free(std::uint64_t id);

  // The iteration, once found (then further events are ignored).
  const std::optional<learned_iteration>& learned() const { return learned_; }
  std::uint64_t events_seen() const { return tokens_.size(); }
  std::size_t max_period() const { return max_period_; }
  // True once max_events passed without an iteration: learning stopped for good.
  bool gave_up() const { return gave_up_; }
  static constexpr std::size_t max_events = std::size_t{1} << 20;

 private:
  struct event_record {
    std::uint64_t token = 0;
    bool is_alloc = false;
    std::size_t size = 0;
    std::uint64_t partner = 0;  // alloc: event index of its free (0: not freed); free: of its alloc + 1
  };
  void push(event_record e);
  bool closed(std::size_t p) const;
  void build(std::size_t p);

  std::size_t max_period_;
  std::size_t min_period_;
  std::vector<event_record> tokens_;
  std::vector<std::uint32_t> run_;  // run_[p]
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live_;  // (id, alloc event), unsorted
  std::optional<learned_iteration> learned_;
  bool gave_up_ = false;
};

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_ALLOCATION_ITERATION_H
