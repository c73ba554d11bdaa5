// Lifetime-planned placement: given the buffers of one learned training iteration
// (the k-th allocation's size and when it was allocated and freed), choose an offset
// for each inside one region so that buffers whose lifetimes overlap never overlap in
// memory, and the region is as small as possible.
//
// Pure computation (no CUDA, no allocation of device memory): the pool asks, then
// serves the k-th allocation of every later iteration at offsets[k].
#ifndef OVERSUB_POLICY_PLACEMENT_H
#define OVERSUB_POLICY_PLACEMENT_H

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace oversub::policy {

// One buffer of an iteration. Times are positions in the iteration's sequence of
// allocation/free events (0, 1, 2, ...): the buffer is live on [alloc_time,
// free_time). A buffer never freed within the iteration has free_time equal to the
// iteration's event count.
struct buffer_lifetime {
  std::size_t size_bytes;
  std::uint32_t alloc_time;
  std::uint32_t free_time;
};

struct placement {
  std::vector<std::size_t> offsets;  // offsets[k] for lifetimes[k], each a multiple of alignment
  std::size_t region_bytes = 0;      // the region needed: max over k of offsets[k] + aligned size
  std::size_t lower_bound_bytes = 0; // the most (aligned) bytes live at any one time
  std::string heuristic;             // which heuristic produced it (for the log and the bench)
  // With placement_options::page_bytes: the region the plan without page grouping
  // needed (region_bytes is that rounded up to whole pages), and whether the grouped
  // plan was kept (false: it did not fit in those pages, and the offsets are the
  // ungrouped plan's). 0 and false without a page size.
  std::size_t ungrouped_region_bytes = 0;
  bool page_grouped = false;
};

struct placement_options {
  std::size_t alignment_bytes = 256;  // a power of two (256, like cudaMalloc)
  // The size of the pages the region's memory moves in (the swap engine's 2 MiB
  // chunks), a power of two and a multiple of alignment_bytes; 0: no pages. With a
  // page size, buffers of different lifetime classes are kept off each other's pages
  // where that takes no more pages (Note [Grouping by lifetime into pages] in
  // placement.cc), the region is a whole number of pages and is meant to start on a
  // page boundary. Not used by the pool yet (measured: docs/design/pool.md).
  std::size_t page_bytes = 0;
};

// Runs several heuristics (greedy by size, greedy by breadth, best-fit in lifetime
// order) plus a local improvement and returns the smallest valid placement.
// alignment_bytes: a power of two (256, like cudaMalloc). Finishes in well under a
// second for 10,000 buffers. Never throws for valid input (an empty span gives an
// empty placement).
placement plan_placement(std::span<const buffer_lifetime> lifetimes,
                         std::size_t alignment_bytes = 256);
// The same with options; options.page_bytes = 0 gives exactly the placement above.
placement plan_placement(std::span<const buffer_lifetime> lifetimes,
                         const placement_options& options);

// True when no two buffers whose lifetimes overlap overlap in memory and every
// offset is aligned and inside region_bytes. For tests and as a guard before use.
bool placement_is_valid(std::span<const buffer_lifetime> lifetimes, const placement& p,
                        std::size_t alignment_bytes = 256);

// Note [Long-lived layout from a profile]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In swap mode the residency engine moves 2 MiB pages, and the buffers allocated once
// (weights, gradients, optimizer state) lie on them in the order the program allocated
// them: a framework allocates a layer's weight, gradient and two Adam moments one after
// another, so a page holds parts of buffers used in the forward pass, in the backward
// pass and in the update, and moves whenever any of them must. With a saved profile
// (OVERSUB_PROFILE_IN) the pool knows, before the first of them is allocated, every
// long-lived buffer the iteration uses (its size, in allocation order) and where the
// iteration first uses it; it lays them out in order of that first use instead, so
// buffers used together share pages (measured: docs/design/swap.md, "Long-lived layout from a
// profile"). first_use[k]: the launch of the profiled iteration that first uses the
// k-th long-lived buffer, or no_first_use. Returns the k in address order: by first
// use, the allocation order among equals, the unused last.
inline constexpr std::uint32_t no_first_use = 0xffffffffu;
std::vector<std::uint32_t> long_lived_order(std::span<const std::uint32_t> first_use);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_PLACEMENT_H
