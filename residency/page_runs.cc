// page_runs: remapping runs of adjacent pages with one unmap and one access grant
// each (Note [Remapping runs] in residency/swap_engine.h).
#include "residency/page_runs.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "common/log.h"
#include "pool/driver_api.h"

namespace oversub::residency {

// Note [A driver that unmaps one mapping at a time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run's pages are separate mappings (one 2 MiB handle each), and remap_runs unmaps
// the run with one cuMemUnmap over its span, as NVIDIA's vectorAddMMAP sample unmaps
// its per-device mappings (Note [Remapping runs] in residency/swap_engine.h). But
// cuMemUnmap's documentation reads "the range must be the entire contiguous address
// range that was mapped to", PyTorch's expandable segments unmap handle by handle, and
// no GPU has yet run oversub (gpu_facts `run16_handles_ranged` measures it); a driver
// that took the sentence strictly would fail every run of two pages or more, and the
// application's launch with it (simgpu's strict reading, SIMGPU_VMM_UNMAP_SPANS=0,
// showed that). So a run whose span unmap fails, with nothing unmapped, is unmapped
// page by page; if its first page's unmap succeeds, the driver takes one mapping a
// call, and every later run of the process is unmapped page by page from the start
// (the run cost fit then sees the unmaps' cost per page, and the batches follow:
// see Note [Remapping runs] in residency/swap_engine.h). A page's own unmap that fails
// is an error like any other.
namespace {
std::atomic<bool> g_unmap_by_page{false};
// A run of two pages or more was unmapped with one call: the driver spans mappings.
std::atomic<bool> g_unmap_spans_seen{false};
}  // namespace

bool runs_may_group() {
  return g_unmap_spans_seen.load(std::memory_order_relaxed) &&
         !g_unmap_by_page.load(std::memory_order_relaxed);
}

CUmemAccessDesc device_access(int device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

// Note [Timing calls that may wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine times its remaps to learn what a run costs (Note [Remapping runs] in
// residency/swap_engine.h), and the batch of room it gathers follows from that cost.
// Where VMM calls wait for the device's queued work (the pessimistic reading of
// PyTorch's note that simgpu models: Note [VMM calls that wait] in
// tests/simgpu/driver/vmm.cc), a call's time is its cost plus a wait that has nothing
// to do with the calls themselves, and that is longer where the host is further ahead,
// which is also where runs are longer. Fitted by least squares over every run, the
// waits (on the unmap, and on the first of the maps) made the part per run 0 and the
// part per page 131-155 us at GPT-2 at 1/8, 1.5x, on the H200's measured model:
// batches of one page, hence runs of one page, each with its own waits (1201 runs an
// iteration where the same plan made 201 without waits; 543 ms an iteration against
// 254). A wait only adds, so each length's lower quartile of its last 32 timings (and
// of the maps' time per page) stands for the calls themselves: robust while fewer than
// three in four runs of a length wait, and, unlike the minimum, not taken from the rare
// call made while the device is idle (the H200 measured cuMemSetAccess at 27 us idle
// against 124 us beside a running kernel: docs/gpu-results.md). But where the longer
// runs all wait, their quartile holds the wait too and the fit tilts the same way:
// ResNet-152 at 1/8, 1.5x, went from 75 runs to 523 and from 127 to 212 ms.
// The line through the lengths' quartiles is not least squares but the median of the
// slopes between every two lengths and of what each leaves per run (Theil and Sen),
// over the lengths timed at least 8 times: one length whose every run waited, or a
// long one timed twice, tilted the least-squares line. At Llama 3.2 1B at 1/8, 1.5x,
// with the waits, it gave 3 us a run and 31 a page, every run's fit 89 and 8; the
// batches shrank, the runs with them, and two replays in ten settled on runs of a
// page or two (about 2420 an iteration against 340, 2000 ms against 1725:
// docs/results.md, "Swap: why the replays under the VMM waits did not repeat"). A wait
// also comes once a run, so it is part of what a run costs and of what a batch saves;
// the fit with the larger part per run is kept, the quartiles' or every run's. With
// the waits: GPT-2 1.5x 184-189 runs and 350 ms an iteration, every other point as with
// every run's fit; without them, every run of a length costs the same on simgpu and both
// fits agree: the benchmark's points are unchanged (docs/results.md, "Swap: timing
// calls that may wait").
namespace {

void keep(std::vector<double>& v, double x, std::size_t most) {
  if (v.size() >= most) v.erase(v.begin());
  v.push_back(x);
}

double lower_quartile(std::vector<double> v) {
  const auto q = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 4);
  std::nth_element(v.begin(), q, v.end());
  return *q;
}

double median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double m = *mid;
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), mid)) / 2;
  return m;
}

// A part per run and a part per page through points (x pages, y ns), m of them, by
// least squares; while every x is the same, all of it per run.
void line(double m, double sx, double sy, double sxx, double sxy, double& per_run,
          double& per_page) {
  per_run = per_page = 0;
  if (m == 0) return;
  const double denom = m * sxx - sx * sx;
  if (denom <= 1e-9 * m * sxx) {
    per_run = sy / m;
    return;
  }
  const double slope = (m * sxy - sx * sy) / denom;
  const double intercept = (sy - slope * sx) / m;
  per_run = intercept > 0 ? intercept : 0;
  per_page = std::max(0.0, (sy - per_run * m) / sx);
}

// The same, robust to a few lengths whose timings all waited: the median of the
// slopes between every two points (Theil and Sen), and the median of what each point
// leaves per run.
void robust_line(const std::vector<std::pair<double, double>>& pts, double& per_run,
                 double& per_page) {
  per_run = per_page = 0;
  if (pts.empty()) return;
  std::vector<double> slopes, rest;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    for (std::size_t j = i + 1; j < pts.size(); ++j) {
      slopes.push_back((pts[j].second - pts[i].second) / (pts[j].first - pts[i].first));
    }
  }
  const double slope = slopes.empty() ? 0 : std::max(0.0, median(slopes));
  for (const auto& [x, y] : pts) rest.push_back(y - slope * x);
  per_run = std::max(0.0, median(rest));
  per_page = slope;
}

}  // namespace

void run_cost_fit::add(double pages, double ns) {
  fitted_ = false;
  n += 1;
  sy += ns;
  sx_ += pages;
  sxx_ += pages * pages;
  sxy_ += pages * ns;
  const auto k = static_cast<std::size_t>(pages);
  if (k == 0 || k > kLengths) return;
  if (by_length_.size() < k) by_length_.resize(k);
  keep(by_length_[k - 1], ns, kKept);
}

void run_cost_fit::add_maps(double pages, double ns) {
  fitted_ = false;
  maps += pages;
  map_ns += ns;
  if (pages > 0) keep(map_page_ns_, ns / pages, 2 * kKept);
}

// Note [What a batch costs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A run's part (per_run_ns) comes from runs timed one by one, and before the first plan
// the mover moves a page at a time, so each run is a batch of its own and pays each
// family's first call: on the H200's measured model 188 us a run and 11 a page (the
// map's first call). Once a plan is followed, the mover's batches group their runs'
// calls by family (Note [Calls grouped by family]), and a batch of r runs and p pages
// costs about 142 + 54 r + 3.4 p us: the first calls once a batch, the repeats per run
// and per page. A plan predicted with the lone runs' figures counts every run at 188 us
// and every page at 11: ResNet-50 at 1/8 of its bytes through the caching allocator
// (`oversub-replay --allocator caching`), 3x, predicted 39.0 ms of remaps an iteration
// where the mover took 28.9, and the iteration 55.1 ms where it ran 47.4. So each batch
// is also timed whole, and a line through the last 256 batches by least squares gives
// a part per batch, per run and per page (batch()); it is known once there are batches
// of more than one run and the three parts can be told apart, which is after the
// first plan's batches. The learner takes it as the mover's costs for the lone runs
// and for the grouped ones (Note [The mover's costs as followed] in
// core/schedule_costs.cc).
void run_cost_fit::add_batch(double runs, double pages, double ns) {
  if (runs <= 0 || pages <= 0) return;
  if (batches_.size() >= kBatchesKept) batches_.erase(batches_.begin());
  batches_.push_back({runs, pages, ns});
}

run_cost_fit::batch_parts run_cost_fit::batch() const {
  batch_parts out;
  // The normal equations of ns = a + b runs + c pages.
  double m[3][3] = {}, v[3] = {};
  std::size_t grouped = 0;
  for (const timed_batch& t : batches_) {
    const double x[3] = {1, t.runs, t.pages};
    for (int i = 0; i < 3; ++i) {
      v[i] += x[i] * t.ns;
      for (int j = 0; j < 3; ++j) m[i][j] += x[i] * x[j];
    }
    if (t.runs > 1) ++grouped;
  }
  if (grouped < kKept / 2) return out;
  // Cramer's rule; a determinant near 0 (every batch of one length, or the runs and
  // pages in step) cannot tell the parts apart.
  const auto det = [](const double a[3][3]) {
    return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) -
           a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
           a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
  };
  const double d = det(m);
  if (!(std::abs(d) > 1e-9 * m[0][0] * m[1][1] * m[2][2])) return out;
  double parts[3];
  for (int k = 0; k < 3; ++k) {
    double mk[3][3];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) mk[i][j] = j == k ? v[i] : m[i][j];
    }
    parts[k] = det(mk) / d;
  }
  if (parts[1] <= 0 || parts[0] < 0 || parts[2] < 0) return out;
  out = {parts[0], parts[1], parts[2], true};
  return out;
}

void run_cost_fit::merge(const run_cost_fit& o) {
  fitted_ = false;
  n += o.n;
  sy += o.sy;
  sx_ += o.sx_;
  sxx_ += o.sxx_;
  sxy_ += o.sxy_;
  maps += o.maps;
  map_ns += o.map_ns;
  if (by_length_.size() < o.by_length_.size()) by_length_.resize(o.by_length_.size());
  for (std::size_t k = 0; k < o.by_length_.size(); ++k) {
    for (double ns : o.by_length_[k]) keep(by_length_[k], ns, kKept);
  }
  for (double ns : o.map_page_ns_) keep(map_page_ns_, ns, 2 * kKept);
  for (const timed_batch& t : o.batches_) add_batch(t.runs, t.pages, t.ns);
}

void run_cost_fit::fit() const {
  if (fitted_) return;
  fitted_ = true;
  // Over each length's lower quartile (q) and over every run (the members). The
  // lengths timed at least kKept / 4 times, while there are two of them: a quartile of
  // one or two timings is any one of them (Note [Timing calls that may wait]).
  std::vector<std::pair<double, double>> q, well_timed;
  for (std::size_t k = 0; k < by_length_.size(); ++k) {
    if (by_length_[k].empty()) continue;
    q.emplace_back(static_cast<double>(k + 1), lower_quartile(by_length_[k]));
    if (by_length_[k].size() >= kKept / 4) well_timed.push_back(q.back());
  }
  if (well_timed.size() >= 2) q = std::move(well_timed);
  double run = 0, page = 0, all_run = 0, all_page = 0;
  robust_line(q, run, page);
  line(n, sx_, sy, sxx_, sxy_, all_run, all_page);
  const bool quartiles = run >= all_run;
  const double map_q = map_page_ns_.empty() ? 0 : lower_quartile(map_page_ns_);
  per_run_ = quartiles ? run : all_run;
  per_page_ = (quartiles ? page : all_page) +
              (map_page_ns_.empty() ? 0
               : quartiles          ? map_q
                                    : map_ns / maps);
  waits_ = n > 0 && sy + map_ns > 1.5 * (run * n + page * sx_ + map_q * maps);
}

bool run_cost_fit::calls_wait() const {
  fit();
  return waits_;
}

double run_cost_fit::per_run_ns() const {
  fit();
  return per_run_;
}

double run_cost_fit::per_page_ns() const {
  fit();
  return per_page_;
}

CUresult remap_runs(std::span<const std::uintptr_t> vas,
                    std::span<const CUmemGenericAllocationHandle> from,
                    std::span<const CUmemGenericAllocationHandle> to, std::size_t page_bytes,
                    int device, std::vector<char>& ok, std::uint64_t& calls,
                    std::uint64_t (*clock)() noexcept, run_cost_fit* fit) {
  const pool::driver_table& d = pool::driver();
  const CUmemAccessDesc access = device_access(device);
  ok.assign(vas.size(), 0);
  CUresult first_error = CUDA_SUCCESS;
  for_runs(vas, page_bytes, [&](std::size_t first, std::size_t count) {
    if (first_error != CUDA_SUCCESS) return;
    const std::size_t end = first + count;
    const bool timed = clock != nullptr && fit != nullptr;
    std::uint64_t t0 = timed ? clock() : 0;
    // See Note [A driver that unmaps one mapping at a time].
    bool by_page = count > 1 && g_unmap_by_page.load(std::memory_order_relaxed);
    if (!by_page) {
      ++calls;
      if (CUresult r = d.cuMemUnmap(vas[first], count * page_bytes); r != CUDA_SUCCESS) {
        if (count == 1) {
          first_error = r;
          return;
        }
        by_page = true;  // nothing unmapped: the whole range must be whole mappings
      } else if (count > 1) {
        g_unmap_spans_seen.store(true, std::memory_order_relaxed);
      }
    }
    for (std::size_t k = first; by_page && k < end; ++k) {
      ++calls;
      if (CUresult r = d.cuMemUnmap(vas[k], page_bytes); r != CUDA_SUCCESS) {
        // The pages before k back on their memory, with access, as on a failed map.
        for (std::size_t j = first; j < k; ++j) {
          calls += 2;
          d.cuMemMap(vas[j], page_bytes, 0, from[j], 0);
          d.cuMemSetAccess(vas[j], page_bytes, &access, 1);
        }
        first_error = r;
        return;
      }
      if (k == first && !g_unmap_by_page.exchange(true, std::memory_order_relaxed)) {
        log::info("swap: this driver unmaps one mapping per cuMemUnmap; runs of pages are "
                  "unmapped page by page from now");
      }
    }
    const std::uint64_t unmapped = timed ? clock() : 0;
    const std::uint64_t spent = unmapped - t0;
    std::size_t moved = first;
    for (; moved < end; ++moved) {
      ++calls;
      if (CUresult r = d.cuMemMap(vas[moved], page_bytes, 0, to[moved], 0); r != CUDA_SUCCESS) {
        first_error = r;
        break;
      }
    }
    std::uint64_t map_ns = 0;
    if (timed && moved == end) {
      map_ns = clock() - unmapped;
      fit->add_maps(static_cast<double>(count), static_cast<double>(map_ns));
    }
    // The pages not moved: their memory back, so their bytes stay reachable.
    for (std::size_t k = moved; k < end; ++k) {
      ++calls;
      d.cuMemMap(vas[k], page_bytes, 0, from[k], 0);
    }
    ++calls;
    t0 = timed ? clock() : 0;
    const CUresult granted = d.cuMemSetAccess(vas[first], count * page_bytes, &access, 1);
    if (timed && granted == CUDA_SUCCESS) {
      const auto ns = static_cast<double>(spent + (clock() - t0));
      fit->add(static_cast<double>(count), ns);
      if (moved == end) {
        fit->add_batch(1, static_cast<double>(count), ns + static_cast<double>(map_ns));
      }
    }
    if (CUresult r = granted; r != CUDA_SUCCESS) {
      // Every page back on its old memory, with access page by page.
      for (std::size_t k = first; k < end; ++k) {
        if (k < moved) {
          calls += 2;
          d.cuMemUnmap(vas[k], page_bytes);
          d.cuMemMap(vas[k], page_bytes, 0, from[k], 0);
        }
        ++calls;
        d.cuMemSetAccess(vas[k], page_bytes, &access, 1);
      }
      if (first_error == CUDA_SUCCESS) first_error = r;
      return;
    }
    for (std::size_t k = first; k < moved; ++k) ok[k] = 1;
  });
  return first_error;
}

// Note [Calls grouped by family]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An H200 made a VMM call that repeats its thread's last family far faster than one
// after another family (busy: cuMemUnmap 20 us against 64, cuMemSetAccess 34 against
// 124, cuMemMap 1.5 against 11.2; Note [Repeated VMM calls] in
// tests/simgpu/driver/device_model.cc). A run's calls are an unmap, its maps and an
// access grant, so every run paid each family's first call; the mover's batches pair an
// eviction's runs (the room wanted, from the pages its wait covers: more than one run
// where they are not adjacent) with the fetch the room is for. remap_grouped remaps
// them with the calls grouped by family: every run's unmap, then every page's map,
// then every run's access grant, so a later run's unmap and grant and all its maps are
// repeats (full-size ResNet-50 on the H200's measured model, one eviction run a batch
// against all the room wanted: 55.46 -> 54.39 ms at 1.5x, 92.94 -> 91.54 at 3x). A
// fetch page may take the device memory of an eviction page of the same call
// (borrow): it maps it only once that page's own map to its host copy has been made,
// so the memory is never mapped at two addresses. Only where the driver is known to
// unmap a run of mappings in one call (runs_may_group): the page-by-page fallback (Note
// [A driver that unmaps one mapping at a time]) stays with remap_runs.
//
// Note [A fetch's copies before the evictions' grants]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A fetch's copies in can start once its own runs are granted; the evictions' grants
// (their host copies' access) hold nothing the fetch needs. So the fetch's runs are
// granted first, the caller queues their copies in (`fetched`), and the evictions'
// runs are granted after: the link starts that much sooner.
// ResNet-50 b32 at 1/8 of its bytes, 3x, on the H200's measured model, a batch of 14
// eviction pages in 4 runs and a 19-page fetch: the evictions' grants took 243 us
// before the fetch's copies could be queued, where the plan starts a fetch's copy
// after its own remap; the iteration 39.42 -> 39.03 ms (1.064x -> 1.053x T_unl), the
// other points within the replays' spread (docs/results.md, "Swap: a fetch's copies
// before the evictions' grants"). The cost: where an eviction's grant fails after the
// fetch kept the device memory of some of its pages, those pages cannot go back to it;
// they stay on their host copies (which hold their bytes, the copies out being done),
// granted page by page, best effort, and count as moved; the run's other pages go
// back, and the error reaches the application at its next call as any other.
// Where the mapping calls wait for the device's queued work (Note [Do VMM calls wait?]
// in core/device_pool.cc), the evictions' grants would wait for those copies: there
// the copies are queued after every grant, as before (ResNet-152 b32 1/8 10x under the
// VMM waits: 170.76 ms an iteration with the copies after, 187.75 before the
// evictions' grants; the remaps' timings had not shown the waits there).
CUresult remap_grouped(std::span<const std::uintptr_t> evas,
                       std::span<const CUmemGenericAllocationHandle> efrom,
                       std::span<const CUmemGenericAllocationHandle> eto,
                       std::span<const std::uintptr_t> fvas,
                       std::span<const CUmemGenericAllocationHandle> ffrom,
                       std::span<const CUmemGenericAllocationHandle> fto,
                       std::span<const int> borrow, std::size_t page_bytes, int device,
                       std::vector<char>& eok, std::vector<char>& fok, CUresult& ferror,
                       std::uint64_t& calls, std::uint64_t (*clock)() noexcept,
                       run_cost_fit* fit, const fetched_fn& fetched) {
  const pool::driver_table& d = pool::driver();
  const CUmemAccessDesc access = device_access(device);
  struct run {
    bool evict;
    std::size_t first, count;
    bool unmapped = false;
    std::size_t moved = 0;  // its pages [first, first + moved) map `to`
    bool done = false;      // granted, or put back
    std::uint64_t ns = 0;   // its unmap's time
    std::uint64_t map_ns = 0;
  };
  std::vector<run> runs;
  for_runs(evas, page_bytes, [&](std::size_t f, std::size_t c) { runs.push_back({true, f, c}); });
  for_runs(fvas, page_bytes, [&](std::size_t f, std::size_t c) { runs.push_back({false, f, c}); });
  const auto vas = [&](const run& r) { return r.evict ? evas : fvas; };
  const auto from = [&](const run& r) { return r.evict ? efrom : ffrom; };
  const auto to = [&](const run& r) { return r.evict ? eto : fto; };
  // eok[k]: eviction page k maps its host copy (a fetch may take its memory from then).
  eok.assign(evas.size(), 0);
  fok.assign(fvas.size(), 0);
  CUresult eerror = CUDA_SUCCESS;
  ferror = CUDA_SUCCESS;
  const auto fail = [&](const run& r, CUresult e) {
    CUresult& mine = r.evict ? eerror : ferror;
    if (mine == CUDA_SUCCESS) mine = e;
  };
  const bool timed = clock != nullptr && fit != nullptr;
  // The unmaps; after a failure no other run is touched.
  bool stopped = false;
  for (run& r : runs) {
    if (stopped) {
      fail(r, eerror != CUDA_SUCCESS ? eerror : ferror);
      continue;
    }
    const std::uint64_t t0 = timed ? clock() : 0;
    ++calls;
    if (CUresult e = d.cuMemUnmap(vas(r)[r.first], r.count * page_bytes); e != CUDA_SUCCESS) {
      fail(r, e);
      stopped = true;
      continue;
    }
    r.unmapped = true;
    r.ns = timed ? clock() - t0 : 0;
  }
  // The maps, the evictions' first; a run's pages not moved get their memory back.
  for (run& r : runs) {
    if (!r.unmapped) continue;
    const std::uint64_t t0 = timed ? clock() : 0;
    std::size_t k = r.first;
    const std::size_t end = r.first + r.count;
    for (; k < end; ++k) {
      if (!r.evict && borrow[k] >= 0 && !eok[static_cast<std::size_t>(borrow[k])]) {
        fail(r, eerror != CUDA_SUCCESS ? eerror : CUDA_ERROR_INVALID_VALUE);
        break;
      }
      ++calls;
      if (CUresult e = d.cuMemMap(vas(r)[k], page_bytes, 0, to(r)[k], 0); e != CUDA_SUCCESS) {
        fail(r, e);
        break;
      }
      if (r.evict) eok[k] = 1;
    }
    r.moved = k - r.first;
    if (timed && k == end) r.map_ns = clock() - t0;
    for (std::size_t j = k; j < end; ++j) {
      ++calls;
      d.cuMemMap(vas(r)[j], page_bytes, 0, from(r)[j], 0);
    }
  }
  // A run back on its old memory, but for the pages `stays` keeps on the new, with
  // access page by page.
  const auto put_back = [&](run& r, const std::vector<char>* stays) {
    for (std::size_t k = r.first; k < r.first + r.count; ++k) {
      if (k < r.first + r.moved && (stays == nullptr || !(*stays)[k])) {
        calls += 2;
        d.cuMemUnmap(vas(r)[k], page_bytes);
        d.cuMemMap(vas(r)[k], page_bytes, 0, from(r)[k], 0);
        if (r.evict) eok[k] = 0;
      }
      ++calls;
      d.cuMemSetAccess(vas(r)[k], page_bytes, &access, 1);
    }
    r.moved = 0;
    r.done = true;
  };
  // The access grants, the fetch's runs first (Note [A fetch's copies before the
  // evictions' grants]). Each run granted is timed at the group's mean unmap and grant:
  // the first run's calls cost a family's first call, the later ones its repeats, and
  // the fit's lower quartiles would otherwise take the repeats for what a run costs and
  // the first calls for waits on the device (Note [Timing calls that may wait]).
  std::vector<std::pair<std::size_t, std::uint64_t>> granted_runs;  // pages, ns
  const auto grant = [&](run& r) {
    const std::uint64_t t0 = timed ? clock() : 0;
    ++calls;
    const CUresult granted = d.cuMemSetAccess(vas(r)[r.first], r.count * page_bytes, &access, 1);
    if (granted == CUDA_SUCCESS) {
      r.done = true;
      if (timed) {
        granted_runs.emplace_back(r.count, r.ns + (clock() - t0));
        if (r.moved == r.count) fit->add_maps(static_cast<double>(r.count),
                                              static_cast<double>(r.map_ns));
      }
    }
    return granted;
  };
  for (run& r : runs) {
    if (r.evict || !r.unmapped || r.done) continue;
    if (CUresult granted = grant(r); granted != CUDA_SUCCESS) {
      fail(r, granted);
      put_back(r, nullptr);
    }
  }
  // The fetch's pages are where they stay.
  for (const run& r : runs) {
    if (!r.evict) std::fill_n(fok.begin() + static_cast<std::ptrdiff_t>(r.first), r.moved, 1);
  }
  if (fetched) ferror = fetched(fok, ferror);
  // An eviction page whose device memory a fetch page kept stays on its host copy,
  // which holds its bytes, where its run's grant failed; the run's other pages go back.
  std::vector<char> kept(evas.size(), 0);
  for (std::size_t k = 0; k < fvas.size(); ++k) {
    if (fok[k] && borrow[k] >= 0) kept[static_cast<std::size_t>(borrow[k])] = 1;
  }
  for (run& r : runs) {
    if (!r.evict || !r.unmapped || r.done) continue;
    if (CUresult granted = grant(r); granted != CUDA_SUCCESS) {
      fail(r, granted);
      put_back(r, &kept);
    }
  }
  if (!granted_runs.empty()) {
    double ns = 0;
    for (const auto& g : granted_runs) ns += static_cast<double>(g.second);
    ns /= static_cast<double>(granted_runs.size());
    for (const auto& g : granted_runs) fit->add(static_cast<double>(g.first), ns);
    // See Note [What a batch costs]: a batch whose every run moved whole.
    if (granted_runs.size() == runs.size() &&
        std::all_of(runs.begin(), runs.end(), [](const run& r) { return r.moved == r.count; })) {
      double pages = 0, all_ns = 0;
      for (const run& r : runs) {
        pages += static_cast<double>(r.count);
        all_ns += static_cast<double>(r.map_ns);
      }
      for (const auto& g : granted_runs) all_ns += static_cast<double>(g.second);
      fit->add_batch(static_cast<double>(runs.size()), pages, all_ns);
    }
  }
  return eerror;
}

}  // namespace oversub::residency
