// page_model: a profile's iteration as the library's swap mode sees it, for the
// what-if simulator's `--granularity page`.
//
// Note [Page model]
// ~~~~~~~~~~~~~~~~~
// The residency engine moves 2 MiB pages of oversub's arena, not buffers, and the
// swap learner plans and simulates those pages (Note [A schedule over pages] in
// core/schedule.h): each page is a long-lived buffer of a page's bytes and
// each launch uses the pages its buffers lie on. A page shared by buffers of different
// lifetimes moves with all of them, so the library moves more bytes than a plan over
// buffers. To predict that, this model places the profile's buffers as the pool
// does under `oversub-replay`, then builds the learner's model over the pages:
//   1. long-lived allocations (weights, optimizer state) are allocated first, in the
//      profile's order, each at the end of the one before (the arena's TLSF index
//      splits the start off its one free block), 256-byte aligned, from offset 0 (or
//      in the order given: Note [Long-lived layout from a profile] in
//      policy/placement.h);
//   2. the per-iteration ones are placed by plan_placement over the
//      iteration's allocation and free events in the replay's order (at each launch
//      position: the frees there, then the allocations), as pool/planned_region does
//      once it has learned the iteration, in a region that follows the long-lived
//      ones (rounded up to region_alignment);
//   3. pages are numbered in order of first use, as the learner interns them; the
//      launches keep their durations;
//   4. each page of the region is dead where the placement leaves no block on it, as
//      the learner finds from the engine (Note [Dead gaps] in core/dead_gaps.cc).
// What it cannot know: where the planned region's base falls within a page in a real
// run (it is a block the online arena hands out after the first iterations, which
// depends on their fragmentation).
#ifndef OVERSUB_POLICY_PAGE_MODEL_H
#define OVERSUB_POLICY_PAGE_MODEL_H

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policy/iteration_model.h"
#include "profiler/profile_format.h"

namespace oversub::policy {

struct page_model {
  std::string error;  // empty: model is valid
  iteration_model model;
  std::size_t long_lived_bytes = 0;  // the long-lived zone, aligned
  std::size_t region_bytes = 0;      // the planned region of the per-iteration buffers
  std::size_t page_bytes = 0;
  std::size_t pages = 0;             // pages some launch uses
};

// See Note [Page model]. buffers: the profile's model (policy/profile_model.h), whose
// launches' durations and widened lifetimes it keeps.
// long_lived: where the long-lived allocations lie, as long_lived_order gives it
// (indices among the profile's long-lived allocations of nonzero size, in its order,
// in address order); empty: in the profile's order, as a fresh arena allocates them.
page_model pages_of_profile(const profiler::profile& p, const iteration_model& buffers,
                            std::size_t page_bytes = std::size_t{2} << 20,
                            std::size_t region_alignment = 256,
                            std::span<const std::uint32_t> long_lived = {});

// See Note [Long-lived layout from a profile] (policy/placement.h): which layout of the
// long-lived buffers to take in swap mode at capacity_bytes. The profile's page model
// is planned (plan_schedule, cost, at planning_capacity) and simulated
// in allocation order, by first use and by last use, its kernels at the profile's
// durations (Note [Duration model] in policy/profile_model.h where 0, with
// memory_bandwidth) and its link at the profile's measured rates (else link_bytes_per_s);
// the layout predicted fastest is taken where it is predicted at least min_layout_gain
// (5%) faster than allocation order.
//
// A layout whose largest launch spans more pages than in allocation order is taken
// like any other: the engine overlaps copies out and in (Note [Evictions copy page by
// page] in residency/swap_engine.h) as the plan assumes.
//
// min_layout_gain: the engine does not run every plan as well as the simulator, so a
// small predicted gain is no gain; a layout must be predicted clearly faster.
inline constexpr double min_layout_gain = 0.05;
enum class layout_kind : std::uint8_t { allocation, first_use, last_use };
const char* to_string(layout_kind k);
struct layout_choice {
  std::string error;                 // empty: every layout was planned
  layout_kind kind = layout_kind::allocation;  // the one taken
  std::vector<std::uint32_t> order;  // its long_lived_order (empty: allocation)
  std::uint64_t predicted_ns[3] = {};  // the predicted iteration, by layout_kind
};
// The profile's long-lived allocations of nonzero size (what a layout places), as
// indices into p.allocations in the profile's order.
std::vector<std::size_t> long_lived_zone(const profiler::profile& p);
// The order of layout k (long_lived_order by the launch of the profile's
// iteration that first or last uses each long-lived allocation); empty for allocation.
std::vector<std::uint32_t> long_lived_layout_order(const profiler::profile& p, layout_kind k);
layout_choice choose_long_lived_layout(const profiler::profile& p, std::size_t capacity_bytes,
                                       double link_bytes_per_s, std::uint64_t copy_setup_ns,
                                       double memory_bandwidth);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_PAGE_MODEL_H
