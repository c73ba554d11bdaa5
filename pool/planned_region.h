// planned_region: OVERSUB_POOL=planned. Learns the iteration from the allocation
// stream (policy/allocation_iteration.h), asks policy/placement.h for an offset per
// buffer in one region, maps the region once (a block of the online arena) and
// serves the k-th allocation of every later iteration at offsets[k].
//
// Note [Serving a plan safely]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The plan is only a prediction. An allocation is
// served at its planned offset when
//   - its size is the planned size of the k-th buffer (else the iteration deviated);
//   - no planned block still live overlaps the offset's bytes (a buffer freed later
//     than planned, or one from an iteration that deviated);
//   - every earlier user of those bytes is done for the allocation's stream: freed
//     planned blocks keep their tickets (Note [Stream-ordered reuse] in
//     stream_fences.h) until the events complete.
// Otherwise the allocation, and the rest of that iteration, goes to the online arena
// (logged once). A new iteration starts at the next allocation of buffer 0's size
// made while no planned block is live, which is what a closed iteration boundary
// looks like (Note [Finding the period] in policy/allocation_iteration.h).
//
// Note [A plan that keeps deviating]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The learner can take a short stretch inside
// the iteration for the iteration (a temporary allocated and freed twice in a row).
// Such a plan deviates in size almost every time it starts over, where a real
// iteration's plan, once served, keeps being served. So once a plan has started
// retire_after_starts times, if at least half of those starts ended in a size
// deviation, the plan is retired: its region stays mapped, serving no new blocks,
// until its live blocks are freed (then it goes back to the online arena as a
// synchronous free would), and learning starts again with a minimum period past the
// one that failed. A plan that deviated and, over more allocations than two of its
// iterations, never found a point to start over (buffer 0's size with nothing planned
// live) is retired the same way. At most max_relearns times; then the online arena
// serves for good.
// Deviations because planned bytes are still in use (another stream's work) do not
// count: learning again would find the same period.
#ifndef OVERSUB_POOL_PLANNED_REGION_H
#define OVERSUB_POOL_PLANNED_REGION_H

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "policy/allocation_iteration.h"
#include "policy/placement.h"
#include "pool/memory_resource.h"
#include "pool/stream_fences.h"
#include "pool/vmm_arena.h"

namespace oversub::pool {

struct planned_stats {
  bool planned = false;
  std::uint64_t iteration_allocations = 0;
  std::uint64_t region_bytes = 0;
  std::uint64_t lower_bound_bytes = 0;
  std::uint64_t served = 0;      // allocations served at a planned offset
  std::uint64_t deviations = 0;  // iterations that fell back
  std::uint64_t online = 0;      // allocations served by the online arena
  std::uint64_t retired = 0;     // plans retired (Note [A plan that keeps deviating])
};

class planned_region final : public memory_resource {
 public:
  planned_region(vmm_arena& online, stream_fences& f = fences());

  allocation_result allocate(std::size_t bytes, CUstream stream) override;
  void deallocate(void* ptr, std::size_t bytes, CUstream stream) override;
  resource_stats stats() const override;
  std::uint64_t trim() override { return online_.trim(); }

  // True when ptr is a live block of the region or of the online arena.
  bool owns(const void* ptr) const;
  // Region bytes no live planned block uses (cudaMemGetInfo counts them free).
  std::uint64_t slack_bytes() const;

  planned_stats plan_stats() const;
  // The plan in use (tests check its offsets); empty before one is made.
  std::optional<policy::placement> current_plan() const;
  std::uintptr_t region_base() const;
  // See Note [The pool's layout changed] (core/schedule.cc): counts the plans
  // made and retired, each a new layout of the iteration's buffers.
  std::uint64_t layout_generation() const noexcept {
    return layout_generation_.load(std::memory_order_acquire);
  }

 private:
  struct live_block {
    std::size_t end = 0;  // offset past the block
    std::uint64_t alloc_epoch = 0;
    ticket_set inherited;  // tickets of earlier users (Note [Tickets outlive a reuse] in pool/vmm_arena.cc)
  };
  struct freed_range {
    std::size_t end = 0;
    ticket_set tickets;
  };
  void make_plan_locked(CUstream stream);
  bool can_serve_locked(std::size_t offset, std::size_t size, int consumer, CUstream stream);
  void deviate_locked(std::size_t bytes, const char* why, bool in_size);

  vmm_arena& online_;
  stream_fences& fences_;
  mutable std::mutex mutex_;
  policy::allocation_iteration_learner learner_;
  std::atomic<std::uint64_t> layout_generation_{0};
  std::optional<policy::learned_iteration> iteration_;
  std::optional<policy::placement> plan_;
  std::uintptr_t base_ = 0;
  std::size_t next_ = 0;      // k: the next buffer of the current iteration
  bool deviated_ = false;     // the current iteration fell back to online
  bool plan_failed_ = false;  // no plan could be made or mapped: online for good
  bool trimmed_after_plan_ = false;
  std::map<std::size_t, live_block> live_;     // offset -> live planned block
  std::multimap<std::size_t, freed_range> freed_;  // offset -> freed bytes still fenced
  planned_stats stats_;

  // See Note [A plan that keeps deviating].
  static constexpr std::uint64_t retire_after_starts = 8;
  static constexpr int max_relearns = 4;
  struct retired_region {
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    std::map<std::size_t, live_block> live;
  };
  void retire_plan_locked();
  std::vector<retired_region> retired_;
  std::uint64_t plan_starts_ = 0;      // iterations the current plan started
  std::uint64_t size_deviations_ = 0;  // of those, how many deviated in size
  std::uint64_t allocs_since_start_ = 0;
  int relearns_ = 0;
};

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_PLANNED_REGION_H
