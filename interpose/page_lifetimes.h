// page_lifetimes: swap mode's learned iteration as a policy model whose buffers are
// the lifetimes of its pages, not the pages themselves.
//
// Note [Pages that die]: the residency engine counts, per page, how many times its
// content died (its last live block was freed: Note [Dead pages] in
// pool/residency.h). The learner records that count for every page of every launch.
// Between two uses of a page whose counts differ the page died: what the first use
// left is never read again, and what the second finds is undefined. So each stretch
// of uses with one count is its own buffer in the model, a per-iteration buffer from
// its first use to its last (the policy then knows it needs no copy out after its
// last use and no fetch before its first, which is what the engine does for dead
// pages). A page that never dies stays one long-lived buffer, as before.
//
// The iteration is the last period of the trace, and where it starts is arbitrary:
// a stretch can run across its end into the next iteration. Whether the page died
// across that boundary is read from the period before (the count at the page's last
// use there against the count at its first use in this one). If not, the stretch at
// the end and the one at the start are one lifetime, whose content must survive
// from one iteration to the next: they become one long-lived buffer (over-counting
// its memory in between, where the page holds other lifetimes: a safe mistake for
// the plan, since correctness never depends on it).
#ifndef OVERSUB_INTERPOSE_PAGE_LIFETIMES_H
#define OVERSUB_INTERPOSE_PAGE_LIFETIMES_H

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "policy/iteration_model.h"

namespace oversub::interpose {

struct page_use {
  std::uintptr_t page = 0;
  std::uint32_t deaths = 0;  // the page's death count when the launch was seen
  bool operator==(const page_use&) const = default;
};

struct page_model {
  // buffers, and each launch's uses (durations are left to the caller).
  policy::iteration_model model;
  // model buffer id -> page address
  std::vector<std::uintptr_t> page_of_id;
};

// previous: the launches of the period before (may be empty: then no page is taken
// to die across the boundary); current: the period to model. Each launch lists its
// pages, each once.
page_model model_page_lifetimes(std::span<const std::vector<page_use>> previous,
                                std::span<const std::vector<page_use>> current,
                                std::size_t page_bytes);

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_PAGE_LIFETIMES_H
