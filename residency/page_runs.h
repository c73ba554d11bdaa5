// page_runs: runs of adjacent pages, for the swap engine's batched driver calls.
#ifndef OVERSUB_RESIDENCY_PAGE_RUNS_H
#define OVERSUB_RESIDENCY_PAGE_RUNS_H

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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

// What a run's own calls (its unmap and its access grant) cost the host, fitted by
// least squares as a part per run plus a part per page over the runs timed (Note
// [Remapping runs] in residency/swap_engine.h).
struct run_cost_fit {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  double maps = 0, map_ns = 0;  // the runs' cuMemMap calls (one per page) and their time
  void add(double pages, double ns) {
    n += 1;
    sx += pages;
    sy += ns;
    sxx += pages * pages;
    sxy += pages * ns;
  }
  void merge(const run_cost_fit& o) {
    maps += o.maps;
    map_ns += o.map_ns;
    n += o.n;
    sx += o.sx;
    sy += o.sy;
    sxx += o.sxx;
    sxy += o.sxy;
  }
  // The part per run, in ns. While every run timed had the same length, all of it: the
  // next longer run tells the parts apart.
  double per_run_ns() const {
    if (n == 0) return 0;
    const double denom = n * sxx - sx * sx;
    if (denom <= 1e-9 * n * sxx) return sy / n;
    const double slope = (n * sxy - sx * sy) / denom;
    const double intercept = (sy - slope * sx) / n;
    return intercept > 0 ? intercept : 0;
  }
  // The part per page: the unmap's and the grant's (what the fit leaves after the part
  // per run) and one map.
  double per_page_ns() const {
    if (n == 0 || sx == 0) return 0;
    const double shared = (sy - per_run_ns() * n) / sx;
    return (shared > 0 ? shared : 0) + (maps > 0 ? map_ns / maps : 0);
  }
};

// Read-write access for the device, as every swap page is mapped.
CUmemAccessDesc device_access(int device);

// See Note [Remapping runs] in residency/swap_engine.h. Remaps vas (sorted, each a
// page_bytes mapping of from[k]) to to[k]: per run of adjacent pages one cuMemUnmap
// over the run, one cuMemMap per page, one cuMemSetAccess over the run. Afterwards
// ok[k] is 1 for each page that maps to[k] with access; every other page maps from[k]
// again (best effort on a failure's way back), so its bytes stay where they were. It
// stops at the first error (later runs are not touched) and returns it. Every call is
// counted in calls; with a clock, each run's unmap and access grant are timed into fit.
// No lock: the caller owns the pages for the duration.
CUresult remap_runs(std::span<const std::uintptr_t> vas,
                    std::span<const CUmemGenericAllocationHandle> from,
                    std::span<const CUmemGenericAllocationHandle> to, std::size_t page_bytes,
                    int device, std::vector<char>& ok, std::uint64_t& calls,
                    std::uint64_t (*clock)() noexcept = nullptr, run_cost_fit* fit = nullptr);

}  // namespace oversub::residency

#endif  // OVERSUB_RESIDENCY_PAGE_RUNS_H
