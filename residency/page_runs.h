// page_runs: runs of adjacent pages, for the swap engine's batched driver calls.
#ifndef OVERSUB_RESIDENCY_PAGE_RUNS_H
#define OVERSUB_RESIDENCY_PAGE_RUNS_H

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
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

// What a run's own calls (its unmap and its access grant) cost the host: a part per
// run plus a part per page (Note [Remapping runs] in residency/swap_engine.h), fitted
// by least squares over every run timed and over the lower quartile of each run
// length's recent timings, the fit with the larger part per run kept (Note [Timing
// calls that may wait] in residency/page_runs.cc). n, sy, maps and map_ns are the
// plain totals (the stats' host time and counts).
struct run_cost_fit {
  double n = 0, sy = 0;
  double maps = 0, map_ns = 0;  // the runs' cuMemMap calls (one per page) and their time
  void add(double pages, double ns);
  // One run's maps: `pages` calls in `ns`.
  void add_maps(double pages, double ns);
  void merge(const run_cost_fit& o);
  // The part per run, in ns. While every run timed had the same length, all of it: the
  // next length tells the parts apart.
  double per_run_ns() const;
  // The part per page: the unmap's and the grant's (what the fit leaves after the part
  // per run) and one map.
  double per_page_ns() const;
  // Whether the calls timed took, all told, more than 1.5 times what their lower
  // quartiles give: they waited for the device's queued work (Note [Timing calls that
  // may wait] in residency/page_runs.cc).
  bool calls_wait() const;
  // See Note [What a batch costs] in residency/page_runs.cc. One batch's calls: `runs`
  // runs of `pages` pages in all, remapped together (remap_grouped; remap_runs's runs
  // are a batch each), timed at `ns` in all.
  void add_batch(double runs, double pages, double ns);
  // A batch's cost as a part per batch (what its calls' first of each family cost
  // over their repeats), a part per run and a part per page, fitted over the recent
  // batches; known once they hold batches of more than one run and lengths enough to
  // tell the three apart.
  struct batch_parts {
    double batch_ns = 0, run_ns = 0, page_ns = 0;
    bool known = false;
  };
  batch_parts batch() const;

 private:
  double sx_ = 0, sxx_ = 0, sxy_ = 0;  // least squares over every run
  // Recent timings kept per run length (1 to kLengths pages; longer runs count in the
  // least squares only), and per page of the maps; the oldest go first.
  static constexpr std::size_t kLengths = 16, kKept = 32;
  std::vector<std::vector<double>> by_length_;
  std::vector<double> map_page_ns_;
  // The recent batches (runs, pages, ns); the oldest go first.
  static constexpr std::size_t kBatchesKept = 256;
  struct timed_batch {
    double runs, pages, ns;
  };
  std::vector<timed_batch> batches_;
  // The fit, made when asked after a change (the engine asks for every batch).
  mutable bool fitted_ = false;
  mutable double per_run_ = 0, per_page_ = 0;
  mutable bool waits_ = false;
  void fit() const;
};

// Read-write access for the device, as every swap page is mapped.
CUmemAccessDesc device_access(int device);

// See Note [Remapping runs] in residency/swap_engine.h. Remaps vas (sorted, each a
// page_bytes mapping of from[k]) to to[k]: per run of adjacent pages one cuMemUnmap
// over the run (one per page where the driver takes one mapping a call: Note [A driver
// that unmaps one mapping at a time] in residency/page_runs.cc), one cuMemMap per
// page, one cuMemSetAccess over the run. Afterwards
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

// Whether remap_grouped may be used: the driver has unmapped a run of mappings in one
// call, and has not been seen to take one mapping a call.
bool runs_may_group();

// Called by remap_grouped once the fetch's runs are granted (or given back), before
// the evictions' grants, with the fetch's ok so far and its error; what it returns
// becomes the fetch's error (the swap mover queues the fetch's copies in there).
using fetched_fn = std::function<CUresult(const std::vector<char>& fok, CUresult ferror)>;

// See Note [Calls grouped by family] in residency/page_runs.cc. An eviction's pages
// (evas, efrom -> eto) and a fetch's (fvas, ffrom -> fto) remapped as remap_runs would
// remap each, the calls grouped by family; a fetch page with borrow[k] >= 0 maps the
// device memory of eviction page borrow[k] (fto[k] == efrom[borrow[k]]). eok/fok as
// remap_runs's ok; returns the evictions' first error, ferror the fetch's.
CUresult remap_grouped(std::span<const std::uintptr_t> evas,
                       std::span<const CUmemGenericAllocationHandle> efrom,
                       std::span<const CUmemGenericAllocationHandle> eto,
                       std::span<const std::uintptr_t> fvas,
                       std::span<const CUmemGenericAllocationHandle> ffrom,
                       std::span<const CUmemGenericAllocationHandle> fto,
                       std::span<const int> borrow, std::size_t page_bytes, int device,
                       std::vector<char>& eok, std::vector<char>& fok, CUresult& ferror,
                       std::uint64_t& calls, std::uint64_t (*clock)() noexcept = nullptr,
                       run_cost_fit* fit = nullptr, const fetched_fn& fetched = {});

}  // namespace oversub::residency

#endif  // OVERSUB_RESIDENCY_PAGE_RUNS_H
