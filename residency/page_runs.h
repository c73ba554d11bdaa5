// page_runs: runs of adjacent pages, for the swap engine's batched driver calls.
#ifndef OVERSUB_RESIDENCY_PAGE_RUNS_H
#define OVERSUB_RESIDENCY_PAGE_RUNS_H

#include <cstddef>
#include <cstdint>
#include <span>

namespace oversub::residency {

// Calls f(first, count) for each run of pages in vas that are adjacent in vas and at
// their addresses (vas sorted: every such run).
template <typename F>
void for_runs(std::span<const std::uintptr_t> vas, std::size_t page_bytes, F&& f) {
  for (std::size_t i = 0; i < vas.size();) {
    std::size_t j = i + 1;
    while (j < vas.size() && vas[j] == vas[j - 1] + page_bytes) ++j;
    f(i, j - i);
    i = j;
  }
}

}  // namespace oversub::residency

#endif  // OVERSUB_RESIDENCY_PAGE_RUNS_H
