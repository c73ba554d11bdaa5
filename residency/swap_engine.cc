// The swap engine's entry points (swap_engine, residency/swap_engine.h): its
// start and end, what a launch's preparation and a schedule's evictions and
// prefetches ask of it, and its section of the exit report. Each takes the engine's
// lock and drives the moves of swap_moves.cc over the page table of
// swap_page_table.cc.
#include "residency/swap_engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
#include "policy/cost_model.h"
#include "pool/driver_api.h"
#include "pool/stream_fences.h"

namespace oversub::residency {

swap_engine::swap_engine(swap_config cfg)
    : backend_with_stats(cfg.capacity_bytes), cfg_(cfg) {}

swap_engine::~swap_engine() {
  stop_mover();  // Note [The mover] in residency/swap_mover.cc
  if (!ready_) return;
  const pool::driver_table& d = pool::driver();
  // Unmapping memory queued work still uses would be a use after free: wait for
  // the work of every stream that used a page (errors ignored: a stream the
  // application destroyed has nothing queued).
  for (auto& [va, p] : pages_) {
    for (CUstream u : p.users) {
      if (CUevent e = stream_event_locked(u); e != nullptr && d.cuEventRecord(e, u) == CUDA_SUCCESS) {
        d.cuEventSynchronize(e);
      }
    }
    p.users.clear();
  }
  for (auto& [va, p] : pages_) {
    wait_copy_locked(p);
    d.cuMemUnmap(va, cfg_.page_bytes);
    // A lender's device memory is its borrower's (Note [Lending an evicting page's
    // memory] in residency/swap_engine.h).
    if (p.device != 0 && p.lent_to == 0) d.cuMemRelease(p.device);
    if (p.host != 0) {
      d.cuMemUnmap(p.shadow, cfg_.page_bytes);
      d.cuMemRelease(p.host);
    }
  }
  for (CUmemGenericAllocationHandle h : spare_) d.cuMemRelease(h);
  for (copy_event& c : copies_) d.cuEventDestroy(c.event);
  for (auto& [s, e] : stream_events_) d.cuEventDestroy(e);
  for (const out_job& job : out_jobs_) {
    for (CUevent e : job.after_streams) d.cuEventDestroy(e);
  }
  for (CUevent e : order_events_) d.cuEventDestroy(e);
  if (shadow_base_ != 0) d.cuMemAddressFree(shadow_base_, shadow_bytes_);
  d.cuStreamDestroy(to_host_);
  d.cuStreamDestroy(to_device_);
}

bool swap_engine::ensure_ready_locked() {
  if (ready_) return true;
  if (broken_) return false;
  const pool::driver_table& d = pool::driver();
  if (!d.complete || d.cuStreamCreate(&to_host_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.cuStreamCreate(&to_device_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    log::error("pool: the residency engine could not create its copy streams");
    broken_ = true;
    return false;
  }
  ready_ = true;
  start_mover_locked();  // Note [The mover] in residency/swap_mover.cc
  return true;
}

// ---- Preparing work and the schedule's moves ----

namespace {

// Pages marked with the current epoch are pinned; a new epoch starts on entry and
// another on exit, so nothing stays pinned once prepare() or prefetch() returns.
struct unpin_at_exit {
  std::uint64_t& epoch;
  explicit unpin_at_exit(std::uint64_t& e) : epoch(++e) {}
  ~unpin_at_exit() { ++epoch; }
};

}  // namespace

prepare_result swap_engine::prepare(std::span<const byte_range> ranges, CUstream stream,
                                         bool writes, const victim_rank& rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  prepare_result result;
  fetch_epoch_ = write_epoch_;  // this work's own writes come after its fetches
  if (writes) ++write_epoch_;
  if (!ready_ || pages_.empty()) return result;
  std::vector<std::uintptr_t> wanted = pages_of(ranges);
  result.needed_bytes = wanted.size() * cfg_.page_bytes;
  if (result.needed_bytes > capacity_bytes()) {
    result.code = residency_errc::too_large;
    return result;
  }
  // See Note [Windows into large allocations] in residency/swap_engine.h: optional pages
  // while they fit, each window's first page (where its argument word points) before the
  // rest.
  const std::size_t room = capacity_bytes() / cfg_.page_bytes;
  std::vector<std::uintptr_t> optional = optional_pages_of(ranges);
  if (!optional.empty() &&
      std::any_of(ranges.begin(), ranges.end(),
                  [](const byte_range& r) { return r.optional && r.resident_first; })) {
    std::stable_partition(optional.begin(), optional.end(), [&](std::uintptr_t va) {
      const page* p = find_locked(va);
      return p != nullptr && (p->where == state::resident || p->where == state::fetching);
    });
  }
  for (std::uintptr_t va : optional) {
    if (wanted.size() >= room) break;
    if (!std::binary_search(wanted.begin(), wanted.begin() + static_cast<std::ptrdiff_t>(
                                                                  result.needed_bytes / cfg_.page_bytes),
                            va)) {
      wanted.push_back(va);
    }
  }
  const bool reaches = std::any_of(ranges.begin(), ranges.end(),
                                   [](const byte_range& r) { return r.reach && r.bytes != 0; });
  if (wanted.empty() && !reaches) return result;
  if (pool::stream_is_capturing(stream)) {  // nothing may be enqueued for us now
    result.capturing = true;
    return result;
  }
  // See Note [The mover] in residency/swap_mover.cc: its driver error, heard once here.
  if (mover_error_ != CUDA_SUCCESS) {
    result.driver = mover_error_;
    result.code = residency_errc::driver_error;
    mover_error_ = CUDA_SUCCESS;
    return result;
  }
  // See Note [Lending an evicting page's memory] in residency/swap_engine.h: lenders
  // whose copies are done map their host handles again (best effort: a failure leaves
  // them for later).
  if (lent_pages_ != 0) finish_completed_locked();
  const unpin_at_exit unpin{epoch_};
  std::vector<std::uintptr_t> missing;
  for (std::uintptr_t va : wanted) {
    page& p = pages_[va];
    p.pinned = epoch_;
    p.last_use = ++tick_;
    if (p.where != state::resident) missing.push_back(va);
  }
  if (!missing.empty()) {
    std::sort(missing.begin(), missing.end());
    if (mover_on_) extend_with_queued_locked(missing);
    if (CUresult r = fetch_locked(std::move(missing), true, nullptr, rank); r != CUDA_SUCCESS) {
      ++stats_.failures;
      result.driver = r;
      result.code = r == CUDA_ERROR_OUT_OF_MEMORY ? residency_errc::no_room
                                                  : residency_errc::driver_error;
      return result;
    }
  }
  // The work waits for the copies its pages may still be under (each event once per
  // stream: Note [Asking the driver once] in residency/swap_engine.h).
  const auto order_and_use = [&](page& p) -> CUresult {
    if (CUresult r = use_after_copy_locked(p, stream); r != CUDA_SUCCESS) return r;
    if (std::find(p.users.begin(), p.users.end(), stream) == p.users.end()) {
      p.users.push_back(stream);
    }
    return CUDA_SUCCESS;
  };
  for (std::uintptr_t va : wanted) {
    if (CUresult r = order_and_use(pages_[va]); r != CUDA_SUCCESS) {
      result.driver = r;
      result.code = residency_errc::driver_error;
      return result;
    }
  }
  // Reachable pages: users only. One whose eviction is under way stays resident (it
  // still has its device memory) and the work waits for the eviction's copy.
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (!r.reach || r.bytes == 0) continue;
    for (std::uintptr_t a = r.addr & mask; a < r.addr + r.bytes; a += cfg_.page_bytes) {
      auto it = pages_.find(a);
      if (it == pages_.end()) continue;
      await_page_locked(a);  // Note [The mover] in residency/swap_mover.cc
      page& p = it->second;
      CUresult rc = CUDA_SUCCESS;
      if (p.lent_to != 0) {
        rc = finish_lender_locked(a);  // reached through its host mapping from now
      } else if (p.where == state::evicting) {
        p.where = state::resident;
      }
      if (rc == CUDA_SUCCESS) rc = order_and_use(p);
      if (rc != CUDA_SUCCESS) {
        result.driver = rc;
        result.code = residency_errc::driver_error;
        return result;
      }
    }
  }
  return result;
}

// See Note [A launch's fetch takes the queue's neighbours] in residency/swap_mover.cc.
void swap_engine::extend_with_queued_locked(std::vector<std::uintptr_t>& missing) {
  if (mover_fetch_.empty()) return;
  const std::uint64_t cap = capacity_bytes();
  const std::size_t free_pages =
      stats_.resident_bytes >= cap ? 0 : (cap - stats_.resident_bytes) / cfg_.page_bytes;
  if (free_pages <= missing.size()) return;
  std::size_t spare = free_pages - missing.size();
  const std::size_t look = std::min(mover_fetch_.size(), policy::run_window_moves);
  const auto queue_end = mover_fetch_.begin() + static_cast<std::ptrdiff_t>(look);
  // As the mover's own run (mover_fetch_locked): queued, and a page it may fetch.
  const auto takeable = [&](std::uintptr_t va) {
    if (std::find(mover_fetch_.begin(), queue_end, va) == queue_end) return false;
    auto it = pages_.find(va);
    return it != pages_.end() && mover_may_fetch(it->second);
  };
  std::vector<std::uintptr_t> taken;
  // Takes the queued pages from va on, a page apart in the direction of `step` (one
  // page's bytes, either sign), while the run and the room allow.
  const auto take_from = [&](std::uintptr_t va, std::ptrdiff_t step, std::size_t& run) {
    for (; spare != 0 && run < kMaxRunPages && takeable(va); va += step) {
      taken.push_back(va);
      pages_[va].pinned = epoch_;
      --spare;
      ++run;
    }
  };
  const auto page = static_cast<std::ptrdiff_t>(cfg_.page_bytes);
  for (std::size_t i = 0; i < missing.size() && spare != 0;) {
    std::size_t j = i + 1;
    while (j < missing.size() && missing[j] == missing[j - 1] + cfg_.page_bytes) ++j;
    std::size_t run = j - i;
    take_from(missing[j - 1] + cfg_.page_bytes, page, run);
    take_from(missing[i] - cfg_.page_bytes, -page, run);
    i = j;
  }
  if (taken.empty()) return;
  std::erase_if(mover_fetch_, [&](std::uintptr_t va) {
    return std::find(taken.begin(), taken.end(), va) != taken.end();
  });
  stats_.launch_run_pages += taken.size();
  missing.insert(missing.end(), taken.begin(), taken.end());
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
}

void swap_engine::touch_all(CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  // See Note [The mover] in residency/swap_mover.cc: work that may use any page is
  // enqueued only once the mover remaps none.
  if (finishing_ != 0 || fetching_ != 0) {
    ++stats_.mover_waits;
    while (finishing_ != 0 || fetching_ != 0) moved_.wait(mutex_);
    observe_locked(batches_);
  }
  const CUstream s = pool::canonical_stream(stream);
  if (std::find(touch_all_users_.begin(), touch_all_users_.end(), s) == touch_all_users_.end()) {
    touch_all_users_.push_back(s);
  }
}

bool swap_engine::evict(std::span<const byte_range> ranges) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ready_) return false;
  std::vector<std::uintptr_t> vas = pages_of(ranges);
  std::erase_if(vas, [&](std::uintptr_t va) { return pages_[va].where != state::resident; });
  const CUresult r = evict_begin_locked(vas);
  // See Note [No moves while a user captures] in residency/swap_engine.h: nothing moves
  // now, and nothing failed.
  const bool ok = r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  for (std::uintptr_t va : vas) {
    if (pages_[va].where == state::evicting) pages_[va].planned = true;
  }
  return ok;
}

bool swap_engine::prefetch(std::span<const byte_range> ranges) {
  return prefetch_pages(ranges, nullptr, {});
}

bool swap_engine::prefetch_now(std::span<const byte_range> ranges,
                                    std::vector<byte_range>& later,
                                    const victim_rank& rank) {
  return prefetch_pages(ranges, &later, rank);
}

// later null: fetch, waiting for room as needed; otherwise pages that find no room yet
// go to later (Note [Prefetch without waiting] in residency/swap_engine.h).
bool swap_engine::prefetch_pages(std::span<const byte_range> ranges,
                                      std::vector<byte_range>* later,
                                      const victim_rank& rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ready_) return false;
  fetch_epoch_ = write_epoch_;
  const unpin_at_exit unpin{epoch_};
  std::vector<std::uintptr_t> missing;
  for (std::uintptr_t va : pages_of(ranges)) {
    page& p = pages_[va];
    if (p.where == state::fetching) continue;  // the mover's already
    p.pinned = epoch_;
    p.last_use = ++tick_;
    if (p.where != state::resident) missing.push_back(va);
  }
  if (missing.empty()) {
    // See Note [The mover] in residency/swap_mover.cc.
    if (mover_on_ && later != nullptr) mover_fetch_.clear();
    return true;
  }
  // In the order asked for (a schedule asks for the page needed soonest first), so
  // that the first room, or the first lender's, goes to it (Note [Lending an evicting
  // page's memory] in residency/swap_engine.h).
  if (missing.size() > 1) {
    const auto asked = [&](std::uintptr_t va) {
      for (std::size_t i = 0; i < ranges.size(); ++i) {
        if (ranges[i].bytes != 0 && va + cfg_.page_bytes > ranges[i].addr &&
            va < ranges[i].addr + ranges[i].bytes) {
          return i;
        }
      }
      return ranges.size();
    };
    std::vector<std::pair<std::size_t, std::uintptr_t>> order;
    order.reserve(missing.size());
    for (std::uintptr_t va : missing) order.emplace_back(asked(va), va);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < order.size(); ++i) missing[i] = order[i].second;
  }
  std::vector<std::uintptr_t> deferred;
  const CUresult r =
      fetch_locked(std::move(missing), later == nullptr, later != nullptr ? &deferred : nullptr,
                   rank);
  for (std::uintptr_t va : deferred) later->push_back(byte_range{va, cfg_.page_bytes});
  if (mover_on_ && later != nullptr) {
    // See Note [The mover] in residency/swap_mover.cc: the latest request's pages, in
    // its order, replace the ones it has not begun.
    mover_fetch_ = std::move(deferred);
    if (!mover_fetch_.empty()) moved_.notify_all();
  }
  // See Note [No moves while a user captures] in residency/swap_engine.h: not now, and
  // nothing failed.
  return r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

void swap_engine::set_copy_clock(std::uint64_t (*now_ns)() noexcept,
                                      double h2d_bytes_per_s, double d2h_bytes_per_s,
                                      bool rates_measured) {
  std::lock_guard<std::mutex> lock(mutex_);
  clock_ = now_ns;
  // See Note [Batches before the plan] in residency/swap_engine.h: no rates, the ones
  // it has (timed at start) kept.
  if (h2d_bytes_per_s <= 0 || d2h_bytes_per_s <= 0) return;
  h2d_rate_ = h2d_bytes_per_s;
  d2h_rate_ = d2h_bytes_per_s;
  rates_measured_ = rates_measured;
}

std::size_t swap_engine::batch_pages() {
  std::lock_guard<std::mutex> lock(mutex_);
  return batch_pages_locked();
}

// As batch_pages_locked, from eight runs timed on the copy clock on.
residency_backend::remap_costs swap_engine::measured_remap_costs() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (clock_ == nullptr || run_fit_.n < 8) return {};
  const run_cost_fit::batch_parts b = run_fit_.batch();
  return {static_cast<std::uint64_t>(run_fit_.per_run_ns()),
          static_cast<std::uint64_t>(run_fit_.per_page_ns()),
          cfg_.page_bytes,
          cfg_.calls_wait,
          static_cast<std::uint64_t>(b.batch_ns),
          static_cast<std::uint64_t>(b.run_ns),
          static_cast<std::uint64_t>(b.page_ns),
          b.known};
}

void swap_engine::count_remaps_locked(const run_cost_fit& fit, bool by_mover) {
  run_fit_.merge(fit);
  const auto ns = static_cast<std::uint64_t>(fit.sy + fit.map_ns);
  (by_mover ? stats_.mover_remap_ns : stats_.launch_remap_ns) += ns;
  stats_.remap_runs += static_cast<std::uint64_t>(fit.n);
  stats_.remap_pages += static_cast<std::uint64_t>(fit.maps);
}

residency_backend::remap_totals swap_engine::moved_totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  return {stats_.mover_remap_ns, stats_.launch_remap_ns, stats_.remap_runs,
          stats_.remap_pages,    stats_.bytes_to_device, stats_.bytes_to_host};
}

// ---- The report ----

void write_report(int device, std::uint64_t capacity_bytes, const swap_stats& e,
                  stats::section& out) {
  out.begin(fmt::format("swap device {}", device), {fmt::format("device{}", device), "swap"})
      .bytes("capacity_bytes", capacity_bytes)
      .count("pages", e.pages)
      .bytes("resident_bytes", e.resident_bytes)
      .bytes("peak_resident_bytes", e.peak_resident_bytes)
      .bytes("host_bytes", e.host_bytes)
      .bytes("peak_host_bytes", e.peak_host_bytes)
      .count("evictions", e.evictions)
      .count("clean_evictions", e.clean_evictions)
      .count("dead_evictions", e.dead_evictions)
      .count("fetches", e.fetches)
      .count("dead_fetches", e.dead_fetches)
      .bytes("bytes_to_host", e.bytes_to_host)
      .bytes("bytes_to_device", e.bytes_to_device)
      .count("waits", e.waits)
      .count("failures", e.failures)
      .count("copies", e.copies)
      .count("mapping_calls", e.mapping_calls)
      .count("spare_reuses", e.spare_reuses)
      .bytes("spare_bytes", e.spare_bytes)
      .count("lends", e.lends)
      .count("born_on_host", e.born_on_host)
      .count("mover_batches", e.mover_batches)
      .count("mover_pages", e.mover_pages)
      .count("mover_waits", e.mover_waits)
      .count("mover_fetches", e.mover_fetches)
      .count("mover_copies_out", e.mover_copies_out)
      .count("launch_run_pages", e.launch_run_pages)
      .count("mover_handbacks", e.mover_handbacks)
      .nanoseconds("mover_remap_ns", e.mover_remap_ns)
      .nanoseconds("launch_remap_ns", e.launch_remap_ns)
      .count("remap_runs", e.remap_runs)
      .count("remap_pages", e.remap_pages);
}

}  // namespace oversub::residency
