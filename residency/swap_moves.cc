// The swap engine's moves: evicting pages (ordered after their users, copied to their
// host handles, finished once the copies are done) and fetching them (room made
// first, then the copies in); see Notes [Ordering], [Batched moves], [Making room]
// in residency/swap_engine.h. The driver calls they make are in swap_driver_calls.cc,
// lending an evicting page's memory to a fetch in swap_lending.cc.
#include "residency/swap_engine.h"
#include "residency/page_runs.h"

#include <algorithm>

#include "common/log.h"
#include "pool/driver_api.h"
#include "pool/stream_fences.h"

namespace oversub::residency {

CUevent swap_engine::stream_event_locked(CUstream s) {
  auto it = stream_events_.find(s);
  if (it != stream_events_.end()) return it->second;
  CUevent e = nullptr;
  if (pool::driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  stream_events_.emplace(s, e);
  return e;
}

// The copy stream waits for everything the pages' users enqueued so far and for the
// pages' copies under way: each stream and each copy once (Note [Batched moves] in
// residency/swap_engine.h); and for everything every other stream enqueued so far (Note
// [Moves after all work] in residency/swap_engine.h).
CUresult swap_engine::order_after_locked(std::span<page* const> ps, CUstream copy_stream,
                                         out_job* job) {
  const pool::driver_table& d = pool::driver();
  std::vector<CUstream> users;
  std::vector<int> pending;
  for (page* p : ps) {
    for (CUstream u : p->users) {
      const CUstream c = pool::canonical_stream(u);
      if (std::find(users.begin(), users.end(), c) == users.end()) users.push_back(c);
    }
    if (p->copy >= 0 && !copies_[p->copy].done &&
        std::find(pending.begin(), pending.end(), p->copy) == pending.end()) {
      pending.push_back(p->copy);
    }
  }
  for (int c : pending) {
    if (job != nullptr) {
      if (copies_[c].stream == copy_stream) continue;  // in order on it already
      ++copies_[c].refs;  // until the job is enqueued
      job->after_copies.push_back(c);
    } else if (CUresult r = order_after_copy_locked(c, copy_stream); r != CUDA_SUCCESS) {
      return r;
    }
  }
  // The streams that may have work the copy stream is not ordered after yet: the
  // users always, every other stream with work since the copy stream last waited for it.
  std::vector<std::pair<CUstream, std::uint64_t>> others;
  pool::fences().for_each_stream([&](CUstream s, std::uint64_t work) {
    if (s == nullptr || s == copy_stream) return;
    if (std::find(users.begin(), users.end(), s) != users.end()) return;
    const auto it = covered_.find({copy_stream, s});
    if (it != covered_.end() && it->second >= work) return;
    others.emplace_back(s, work);
  });
  const auto order_after_stream = [&](CUstream u, std::uint64_t work) -> CUresult {
    CUevent e = nullptr;
    if (job == nullptr) {
      e = stream_event_locked(u);
    } else if (!order_events_.empty()) {
      e = order_events_.back();
      order_events_.pop_back();
    } else if (d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      e = nullptr;
    }
    if (e == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    if (CUresult r = d.cuEventRecord(e, u); r != CUDA_SUCCESS) {
      if (job != nullptr) order_events_.push_back(e);
      return r;
    }
    if (job != nullptr) {
      job->after_streams.push_back(e);
    } else if (CUresult r = d.cuStreamWaitEvent(copy_stream, e, 0); r != CUDA_SUCCESS) {
      return r;
    }
    if (work != 0) covered_[{copy_stream, u}] = work;
    return CUDA_SUCCESS;
  };
  for (CUstream u : users) {
    // See Note [No moves while a user captures] in residency/swap_engine.h: an event
    // recorded on a capturing stream is a node of its graph, and a copy stream waiting on
    // it would join the capture.
    if (pool::stream_is_capturing(u)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (CUresult r = order_after_stream(u, 0); r != CUDA_SUCCESS) return r;
  }
  for (const auto& [s, work] : others) {
    // A capturing stream's new work is a graph, not queued work; what it queued before
    // the capture began cannot be fenced without joining the capture: that stream is
    // asked again at the next move. A stream the application destroyed (no event can
    // be recorded on it) may still have work queued: wait for the device once.
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing(s, &status) == CUDA_SUCCESS) {
      if (status != CU_STREAM_CAPTURE_STATUS_NONE) continue;
      if (order_after_stream(s, work) == CUDA_SUCCESS) continue;
    }
    if (CUresult r = d.cuCtxSynchronize(); r != CUDA_SUCCESS) return r;
    covered_[{copy_stream, s}] = work;
  }
  return CUDA_SUCCESS;
}

// ---- Evictions ----

// Begins evicting vas (sorted resident pages): ordered after their users, copied to
// their host handles unless their content is dead or clean, one event for all. Stops
// at the first error; the pages before it are evicting, the rest stay resident.
CUresult swap_engine::evict_begin_locked(std::span<const std::uintptr_t> vas) {
  if (vas.empty()) return CUDA_SUCCESS;
  CUresult first_error = CUDA_SUCCESS;
  std::vector<page*> ps;
  ps.reserve(vas.size());
  for (std::uintptr_t va : vas) {
    page& p = pages_[va];
    if (CUresult r = ensure_host_handle_locked(p); r != CUDA_SUCCESS) {
      first_error = r;
      break;
    }
    ps.push_back(&p);
  }
  const std::size_t n = ps.size();
  if (n == 0) return first_error;
  // See Note [Copies out on the mover] in residency/swap_copies_out.cc and Note [The
  // probe's answer before the timings] in residency/swap_engine.h.
  const bool defer = mover_on_ && !timings_say_calls_wait_locked();
  out_job job;
  const auto drop_job = [&] {
    order_events_.insert(order_events_.end(), job.after_streams.begin(),
                         job.after_streams.end());
    for (int c : job.after_copies) {
      if (--copies_[c].refs == 0) free_copies_.push_back(c);
    }
  };
  if (CUresult r = order_after_locked(ps, to_host_, defer ? &job : nullptr);
      r != CUDA_SUCCESS) {
    drop_job();
    return r;
  }
  std::vector<char> dead(n), copy(n);
  for (std::size_t i = 0; i < n; ++i) {
    const page& p = *ps[i];
    dead[i] = content_dead(p, write_epoch_);
    copy[i] = !dead[i] && (!cfg_.clean_evictions || !p.host_current ||
                           p.clean_epoch != write_epoch_);
  }
  // Pages that leave without a copy are out once their users are done: one event now.
  // Then one copy per run of pages adjacent at both ends (the page's own address still
  // maps its device memory), each with its own event, so that waiting for one page
  // never waits for the copies queued after it.
  std::vector<int> ev(n, -1);
  if (defer) {
    // The events now, their calls when the mover enqueues the job.
    const auto begun = [&] {
      const int c = new_copy_locked();
      if (c >= 0) {
        copies_[c].pending = true;
        copies_[c].stream = to_host_;
      }
      return c;
    };
    if (std::find(copy.begin(), copy.end(), 0) != copy.end()) {
      job.clean = begun();
      if (job.clean < 0) {
        drop_job();
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      for (std::size_t i = 0; i < n; ++i) {
        if (!copy[i]) {
          ev[i] = job.clean;
          job.clean_pages.push_back(vas[i]);
        }
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!copy[i]) continue;
      const int c = begun();
      if (c < 0) {
        first_error = CUDA_ERROR_OUT_OF_MEMORY;  // this page and the later ones stay
        break;
      }
      job.runs.push_back({vas[i], ps[i]->shadow, cfg_.page_bytes, c});
      ev[i] = c;
    }
  } else if (std::find(copy.begin(), copy.end(), 0) != copy.end()) {
    int c0 = -1;
    if (CUresult r = record_copy_locked(to_host_, c0); r != CUDA_SUCCESS) return r;
    for (std::size_t i = 0; i < n; ++i) {
      if (!copy[i]) ev[i] = c0;
    }
  }
  // On an error the run that failed and the ones after it stay resident (no event).
  if (!defer) copy_runs_locked(vas, ps, copy, to_host_, ev, first_error);
  std::vector<int> recorded;
  for (std::size_t i = 0; i < n; ++i) {
    if (ev[i] < 0) continue;
    page& p = *ps[i];
    hold_copy_locked(p, ev[i]);
    if (std::find(recorded.begin(), recorded.end(), ev[i]) == recorded.end()) {
      recorded.push_back(ev[i]);
    }
    p.where = state::evicting;
    p.planned = false;
    ++stats_.evictions;
    if (!copy[i]) {
      ++stats_.clean_evictions;
      if (dead[i]) ++stats_.dead_evictions;
    }
  }
  for (int c : recorded) recycle_copy_locked(c);
  if (defer) {
    out_jobs_.push_back(std::move(job));
    copies_begun_.notify_all();
  }
  if (mover_on_) moved_.notify_all();  // Note [The mover] in residency/swap_mover.cc
  return first_error;
}

// vas: sorted evicting pages whose copies are complete. Maps each one's host handle
// where its device memory was and keeps the device memory as a spare.
CUresult swap_engine::evict_finish_locked(std::span<const std::uintptr_t> vas) {
  CUresult first_error = CUDA_SUCCESS;
  // See Note [Lending an evicting page's memory] in residency/swap_engine.h: a page's
  // device memory goes to the spares only once no lender's address maps it too. The
  // lender's copy out is complete: this page's copy in waited for it, and this page's
  // copy out for its copy in.
  for (std::uintptr_t va : vas) {
    if (const std::uintptr_t l = pages_[va].lender; l != 0) {
      if (CUresult r = finish_lender_locked(l); r != CUDA_SUCCESS) return r;
    }
  }
  // Per run of adjacent pages, one unmap and one access grant (Note [Remapping runs] in
  // residency/swap_engine.h).
  std::vector<std::uintptr_t> mapped;
  std::vector<CUmemGenericAllocationHandle> from, to;
  for (std::uintptr_t va : vas) {
    page& p = pages_[va];
    if (p.where != state::evicting) continue;  // a lender of another, finished just now
    release_copy_locked(p);
    mapped.push_back(va);
    from.push_back(p.device);
    to.push_back(p.host);
  }
  std::vector<char> ok;
  std::uint64_t calls = 0;
  run_cost_fit fit;
  first_error = remap_runs(mapped, from, to, cfg_.page_bytes, cfg_.device, ok, calls, clock_,
                           &fit);
  stats_.mapping_calls += calls;
  count_remaps_locked(fit, false);
  for (std::size_t k = 0; k < mapped.size(); ++k) {
    if (!ok[k]) continue;
    page& p = pages_[mapped[k]];
    if (p.lent_to != 0) {
      // Its bytes went to the borrower when it lent them (still held there).
      if (page* b = find_locked(p.lent_to); b != nullptr && b->lender == mapped[k]) b->lender = 0;
      p.lent_to = 0;
      --lent_pages_;
    } else {
      stats_.resident_bytes -= cfg_.page_bytes;
      give_device_locked(p.device);
    }
    p.device = 0;
    p.where = state::on_host;
    p.host_current = true;
    p.clean_epoch = write_epoch_;
    p.users.clear();  // the copy's completion ordered the host after all of them
  }
  return first_error;
}

// Finishes every eviction whose copy is known complete (each event asked once).
CUresult swap_engine::finish_completed_locked() {
  // See Note [The mover] in residency/swap_mover.cc: the evictions it may take are its
  // own to finish.
  const auto mine = [&](const page& p) { return !(mover_on_ && claimable(p)); };
  std::vector<std::uintptr_t> done;
  for (auto& [va, p] : pages_) {
    if (p.where == state::evicting && mine(p) && (p.copy < 0 || copies_[p.copy].done)) {
      done.push_back(va);
    }
  }
  // See Note [Asking the driver once] in residency/swap_engine.h: copies complete in
  // their stream's order, so the driver is asked about the oldest on each stream first,
  // and about no later one on a stream once one there is not done.
  std::vector<int> asked;
  for (auto& [va, p] : pages_) {
    if (p.where != state::evicting || !mine(p) || p.copy < 0 || copies_[p.copy].done) continue;
    if (std::find(asked.begin(), asked.end(), p.copy) != asked.end()) continue;
    asked.push_back(p.copy);
  }
  std::sort(asked.begin(), asked.end(),
            [&](int a, int b) { return copies_[a].seq < copies_[b].seq; });
  std::vector<CUstream> busy;
  const std::uint64_t now = clock_ != nullptr && !asked.empty() ? clock_() : 0;
  for (int c : asked) {
    if (copies_[c].done) continue;  // an older one's completion said so
    if (std::find(busy.begin(), busy.end(), copies_[c].stream) != busy.end()) continue;
    // A pending copy is not enqueued yet (Note [Copies out on the mover] in
    // residency/swap_copies_out.cc); see Note [Not asking too early] in residency/swap_engine.h.
    if (copies_[c].pending || (now != 0 && now < copies_[c].not_before_ns)) {
      busy.push_back(copies_[c].stream);
    } else if (pool::driver().cuEventQuery(copies_[c].event) == CUDA_SUCCESS) {
      copy_done_locked(c);
    } else {
      busy.push_back(copies_[c].stream);
    }
  }
  for (auto& [va, p] : pages_) {
    if (p.where == state::evicting && mine(p) && p.copy >= 0 && copies_[p.copy].done &&
        std::find(asked.begin(), asked.end(), p.copy) != asked.end()) {
      done.push_back(va);
    }
  }
  if (done.empty()) return CUDA_SUCCESS;
  std::sort(done.begin(), done.end());
  done.erase(std::unique(done.begin(), done.end()), done.end());
  return evict_finish_locked(done);
}

// Up to n resident pages not pinned, sorted by address: dead ones first (Note [Dead
// pages] in residency/swap_engine.h; they leave without a copy), then the least recently
// used.
std::vector<std::uintptr_t> swap_engine::victims_locked(std::size_t n,
                                                             const victim_rank& rank) {
  struct candidate {
    bool live;
    std::uint64_t rank;
    std::uint64_t last_use;
    std::uintptr_t va;
  };
  std::vector<candidate> all;
  for (auto& [va, p] : pages_) {
    if (p.where != state::resident || p.pinned == epoch_) continue;
    const std::uint64_t r = rank ? rank(va) : 1;
    if (r == 0) continue;
    all.push_back(candidate{!content_dead(p, write_epoch_), r, p.last_use, va});
  }
  // Dead pages first, then by rank (highest first), then the least recently used.
  const auto before = [](const candidate& a, const candidate& b) {
    if (a.live != b.live) return !a.live;
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.last_use < b.last_use;
  };
  n = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), before);
  std::vector<std::uintptr_t> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(all[i].va);
  std::sort(out.begin(), out.end());
  return out;
}

// See Note [Making room] in residency/swap_engine.h: room for bytes more of resident
// pages. Without wait: evictions known complete are finished, new ones begun, and
// CUDA_ERROR_NOT_READY when the room is not there yet.
CUresult swap_engine::make_room_locked(std::uint64_t bytes, bool wait,
                                            const victim_rank& rank) {
  trim_spares_locked();
  if (stats_.resident_bytes + bytes <= capacity_bytes()) return CUDA_SUCCESS;
  if (mover_on_) {
    // See Note [The mover] in residency/swap_mover.cc: the room asked for, beyond what
    // it is finishing already.
    const std::size_t short_pages = static_cast<std::size_t>(
        (stats_.resident_bytes + bytes - capacity_bytes() + cfg_.page_bytes - 1) / cfg_.page_bytes);
    if (short_pages > finishing_) {
      room_wanted_ = std::max(room_wanted_, short_pages - finishing_);
      moved_.notify_all();
    }
  }
  if (CUresult r = finish_completed_locked(); r != CUDA_SUCCESS) return r;
  const auto pages_short = [&](std::uint64_t leaving) -> std::size_t {
    const std::uint64_t cap = capacity_bytes();
    const std::uint64_t have = stats_.resident_bytes - leaving;
    return have + bytes <= cap ? 0 : (have + bytes - cap + cfg_.page_bytes - 1) / cfg_.page_bytes;
  };
  const auto leaving_bytes = [&] {
    std::uint64_t leaving = 0;
    for (auto& [va, p] : pages_) {
      if ((p.where == state::evicting && p.lent_to == 0) || p.where == state::finishing) {
        leaving += cfg_.page_bytes;
      }
    }
    return leaving;
  };
  if (!wait) {
    if (const std::size_t n = pages_short(leaving_bytes()); n != 0) {
      const std::vector<std::uintptr_t> victims = victims_locked(n, rank);
      if (CUresult r = evict_begin_locked(victims); r != CUDA_SUCCESS) return r;
    }
    return stats_.resident_bytes + bytes > capacity_bytes() ? CUDA_ERROR_NOT_READY
                                                               : CUDA_SUCCESS;
  }
  while (stats_.resident_bytes + bytes > capacity_bytes()) {
    // Enough evictions under way: wait for the oldest, then finish all that are done.
    if (const std::size_t n = pages_short(leaving_bytes()); n != 0) {
      const std::vector<std::uintptr_t> victims = victims_locked(n);
      if (victims.empty() && leaving_bytes() == 0) return CUDA_ERROR_OUT_OF_MEMORY;
      if (CUresult r = evict_begin_locked(victims); r != CUDA_SUCCESS) return r;
    }
    // See Note [Remapping runs] in residency/swap_engine.h: the evictions of a batch's
    // room finished at once.
    const std::size_t nth = std::min(pages_short(0), batch_pages_locked());
    if (CUresult r = wait_eviction_locked(nth); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// Waits for the nth oldest eviction under way (or the newest, with fewer), then
// finishes every one that is done. CUDA_ERROR_OUT_OF_MEMORY when none is under way.
CUresult swap_engine::wait_eviction_locked(std::size_t nth) {
  // See Note [The mover] in residency/swap_mover.cc: while it has evictions to finish,
  // wait for its next batch, and use the room after its hand-off.
  if (mover_on_) {
    const bool coming = fetching_ != 0 || std::any_of(pages_.begin(), pages_.end(), [&](const auto& e) {
      return e.second.where == state::finishing || claimable(e.second);
    });
    if (coming) {
      ++stats_.waits;
      ++stats_.mover_waits;
      if (finishing_ == 0) {
        room_wanted_ = std::max<std::size_t>(room_wanted_, std::max<std::size_t>(nth, 1));
        moved_.notify_all();
      }
      const std::uint64_t before = batches_;
      ++room_waiters_;  // the mover begins no fetch of its own meanwhile
      while (mover_on_ && batches_ == before) moved_.wait(mutex_);
      --room_waiters_;
      observe_locked(batches_);
      return CUDA_SUCCESS;
    }
  }
  // Copies run in the order their events were taken: the smallest seq is the first
  // to complete. An evicting page without a copy under way is done already.
  std::vector<int> under_way;
  bool any = false;
  for (auto& [va, p] : pages_) {
    // A lender's memory is its borrower's already: waiting for it frees nothing.
    if (p.where != state::evicting || p.lent_to != 0) continue;
    any = true;
    if (p.copy >= 0 && !copies_[p.copy].done) under_way.push_back(p.copy);
  }
  if (!any) return CUDA_ERROR_OUT_OF_MEMORY;
  const int oldest = nth_copy_locked(std::move(under_way), nth);
  if (oldest >= 0) {
    ++stats_.waits;
    if (CUresult r = issued_locked(oldest); r != CUDA_SUCCESS) return r;
    if (CUresult r = pool::driver().cuEventSynchronize(copies_[oldest].event); r != CUDA_SUCCESS) {
      return r;
    }
    copy_done_locked(oldest);
  }
  return finish_completed_locked();
}

// ---- Fetches ----

// Makes vas (not resident; sorted, or in the order the schedule wants them: the first
// room goes to the first) resident (Note [Batched moves] in residency/swap_engine.h). A
// page still being evicted keeps its device memory. The others are fetched as room
// appears, so the first copies in overlap the evictions still going out. Without wait,
// pages that find no room yet go to deferred.
CUresult swap_engine::fetch_locked(std::vector<std::uintptr_t> vas, bool wait,
                                        std::vector<std::uintptr_t>* deferred,
                                        const victim_rank& rank) {
  // See Note [The mover] in residency/swap_mover.cc: a page it is finishing is fetched
  // once it is on the host, and a page it put there after its hand-off.
  for (std::uintptr_t va : vas) await_page_locked(va);
  std::erase_if(vas, [&](std::uintptr_t va) { return pages_[va].where == state::resident; });
  // See Note [Lending an evicting page's memory] in residency/swap_engine.h: a lender
  // wanted again has no device memory of its own any more: it finishes its eviction and
  // is fetched like any page.
  for (std::uintptr_t va : vas) {
    if (pages_[va].lent_to == 0) continue;
    if (CUresult r = finish_lender_locked(va); r != CUDA_SUCCESS) return r;
  }
  std::erase_if(vas, [&](std::uintptr_t va) {
    page& p = pages_[va];
    if (p.where != state::evicting) return false;
    // Not released yet: the device memory still holds the bytes. Keep it; its users
    // wait on the eviction's copy (p.copy), which came after its earlier users.
    p.where = state::resident;
    return true;
  });
  if (mover_on_ && wait && !vas.empty()) {
    if (CUresult r = hand_to_mover_locked(vas, rank); r != CUDA_SUCCESS) return r;
  }
  if (mover_on_ && !wait && !vas.empty()) {
    // See Note [The mover] in residency/swap_mover.cc: evictions for all of them begin
    // now; the mover fetches them as room comes.
    if (CUresult r = make_room_locked(vas.size() * cfg_.page_bytes, false, rank);
        r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
      return r;
    }
    deferred->insert(deferred->end(), vas.begin(), vas.end());
    return CUDA_SUCCESS;
  }
  while (!vas.empty()) {
    // Evictions for all of them begin now; the pages that fit already are fetched.
    if (CUresult r = make_room_locked(vas.size() * cfg_.page_bytes, false, rank);
        r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
      return r;
    }
    const std::uint64_t cap = capacity_bytes();
    const std::size_t fit = std::min(
        vas.size(),
        stats_.resident_bytes >= cap ? 0 : (cap - stats_.resident_bytes) / cfg_.page_bytes);
    // See Note [Remapping runs] in residency/swap_engine.h: where a run's calls cost more
    // than the copies of a few pages, room for that many first, remapped at once.
    const std::size_t batch = std::min(vas.size(), batch_pages_locked());
    if (fit < batch && fit != 0) {
      if (!wait) {
        deferred->insert(deferred->end(), vas.begin(), vas.end());
        return CUDA_SUCCESS;
      }
      if (CUresult r = wait_eviction_locked(batch - fit); r != CUDA_SUCCESS) return r;
      continue;
    }
    if (fit == 0) {
      // See Note [Lending an evicting page's memory] in residency/swap_engine.h: the
      // memory of evictions under way. A scheduled prefetch (no wait) borrows only from
      // the schedule's own evictions.
      if (const std::vector<std::uintptr_t> from =
              lending_ ? lenders_locked(vas.size(), rank, !wait) : std::vector<std::uintptr_t>{};
          !from.empty()) {
        std::vector<std::uintptr_t> now(vas.begin(),
                                        vas.begin() + static_cast<std::ptrdiff_t>(from.size()));
        vas.erase(vas.begin(), vas.begin() + static_cast<std::ptrdiff_t>(from.size()));
        if (CUresult r = fetch_batch_locked(std::move(now), from); r != CUDA_SUCCESS) return r;
        continue;
      }
      if (!wait) {
        deferred->insert(deferred->end(), vas.begin(), vas.end());
        return CUDA_SUCCESS;
      }
      if (CUresult r = wait_eviction_locked(batch); r != CUDA_SUCCESS) return r;
      continue;
    }
    std::vector<std::uintptr_t> now(vas.begin(), vas.begin() + static_cast<std::ptrdiff_t>(fit));
    vas.erase(vas.begin(), vas.begin() + static_cast<std::ptrdiff_t>(fit));
    if (CUresult r = fetch_batch_locked(std::move(now)); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// See Note [A launch hands its fetch to the mover] in residency/swap_mover.cc: vas
// (pages on the host) first in the mover's queue, their evictions begun; returns once
// the mover has fetched them, or has stopped or has nothing it can do, with the pages
// still on the host left in vas for the caller to fetch.
CUresult swap_engine::hand_to_mover_locked(std::vector<std::uintptr_t>& vas,
                                           const victim_rank& rank) {
  if (CUresult r = make_room_locked(vas.size() * cfg_.page_bytes, false, rank);
      r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
    return r;
  }
  const auto handed = [&](std::uintptr_t va) {
    return std::find(vas.begin(), vas.end(), va) != vas.end();
  };
  std::erase_if(mover_fetch_, handed);
  mover_fetch_.insert(mover_fetch_.begin(), vas.begin(), vas.end());
  handoff_epoch_ = epoch_;
  mover_idle_ = false;
  moved_.notify_all();
  ++stats_.mover_waits;
  const auto coming = [&] {
    return std::any_of(vas.begin(), vas.end(), [&](std::uintptr_t va) {
      auto it = pages_.find(va);
      return it != pages_.end() && it->second.where != state::resident;
    });
  };
  while (mover_on_ && !mover_idle_ && coming()) moved_.wait(mutex_);
  handoff_epoch_ = 0;
  // The mover's batches are used after their hand-offs (Note [The mover] in
  // residency/swap_mover.cc).
  for (std::uintptr_t va : vas) await_page_locked(va);
  std::erase_if(vas, [&](std::uintptr_t va) { return pages_[va].where == state::resident; });
  if (!vas.empty()) {
    ++stats_.mover_handbacks;
    std::erase_if(mover_fetch_, handed);
  }
  return CUDA_SUCCESS;
}

// Fetches vas (pages on the host, in fetch_locked's order, room made for all of them).
// The first lenders.size() of them take the device memory of those evicting pages
// instead (Note [Lending an evicting page's memory] in residency/swap_engine.h).
CUresult swap_engine::fetch_batch_locked(std::vector<std::uintptr_t> vas,
                                              std::span<const std::uintptr_t> lenders) {
  const pool::driver_table& d = pool::driver();
  std::vector<page*> ps;
  ps.reserve(vas.size());
  for (std::uintptr_t va : vas) ps.push_back(&pages_[va]);
  // Unpredicted users of the host mapping (work we did not see use it) must be done
  // before the address changes backing.
  std::vector<page*> used;
  for (page* p : ps) {
    if (!p->users.empty() || !touch_all_users_.empty()) used.push_back(p);
  }
  if (!used.empty()) {
    // See Note [A launch that may touch anything] in residency/swap_engine.h: such
    // streams used every page.
    for (page* p : used) {
      for (CUstream u : touch_all_users_) {
        if (std::find(p->users.begin(), p->users.end(), u) == p->users.end()) {
          p->users.push_back(u);
        }
      }
    }
    touch_all_users_.clear();
    if (CUresult r = order_after_locked(used, to_device_); r != CUDA_SUCCESS) return r;
    if (CUresult r = d.cuStreamSynchronize(to_device_); r != CUDA_SUCCESS) return r;
    for (page* p : used) p->users.clear();
  }
  // Device memory for each page (a spare, new memory, or its lender's), then the
  // remaps: per run of adjacent pages, one unmap and one access grant (Note [Remapping
  // runs] in residency/swap_engine.h).
  CUresult first_error = CUDA_SUCCESS;
  std::vector<CUmemGenericAllocationHandle> from, to;
  for (std::size_t k = 0; k < vas.size(); ++k) {
    CUmemGenericAllocationHandle h = 0;
    if (k < lenders.size()) {
      h = pages_[lenders[k]].device;
    } else if (CUresult r = take_device_locked(h); r != CUDA_SUCCESS) {
      first_error = r;
      break;
    }
    from.push_back(ps[k]->host);
    to.push_back(h);
  }
  std::vector<char> remapped;
  std::uint64_t calls = 0;
  run_cost_fit fit;
  const CUresult remap_error =
      remap_runs(std::span(vas).first(to.size()), from, to, cfg_.page_bytes, cfg_.device,
                 remapped, calls, clock_, &fit);
  stats_.mapping_calls += calls;
  count_remaps_locked(fit, false);
  if (first_error == CUDA_SUCCESS) first_error = remap_error;
  // The pages remapped are a prefix (remap_runs stops at its first error); the others
  // keep their host memory, and their device memory goes back.
  std::size_t mapped = 0;
  while (mapped < remapped.size() && remapped[mapped]) ++mapped;
  for (std::size_t k = 0; k < to.size(); ++k) {
    if (k < mapped) {
      ps[k]->device = to[k];
    } else if (k >= lenders.size()) {
      give_device_locked(to[k]);
    }
  }
  vas.resize(mapped);
  ps.resize(mapped);
  // The lent memory is the borrower's from here: it leaves the lender's count.
  const std::size_t borrowed = std::min(mapped, lenders.size());
  for (std::size_t k = 0; k < borrowed; ++k) {
    pages_[lenders[k]].lent_to = vas[k];
    ps[k]->lender = lenders[k];
    ++lent_pages_;
    ++stats_.lends;
    stats_.resident_bytes -= cfg_.page_bytes;
  }
  std::vector<char> ok(vas.size(), 1);
  // Copies in, one per run adjacent at both ends; dead content needs none.
  const std::size_t n = vas.size();
  std::vector<char> copy(n);
  for (std::size_t i = 0; i < n; ++i) copy[i] = ok[i] && !content_dead(*ps[i], fetch_epoch_);
  std::vector<int> ev(n, -1);
  // Borrowed memory is written only after its lender's copy out (each event once).
  // Each copy waits only for the lenders of its own pages, so that a page whose lender
  // is out already is copied in while the next lender is still going out: a run of
  // copies in ends at each page with a new lender (whether or not its copy is known
  // done, so that the copies do not depend on when the host looked).
  std::vector<int> lender_copies;  // of the pages so far
  std::vector<int> waited;
  const auto new_lender = [&](std::size_t k) {
    if (k >= borrowed || !ok[k]) return -1;
    const int c = pages_[lenders[k]].copy;
    return c >= 0 && std::find(lender_copies.begin(), lender_copies.end(), c) ==
                         lender_copies.end()
               ? c
               : -1;
  };
  std::size_t done = 0;
  while (done < n) {
    if (const int c = new_lender(done); c >= 0) {
      lender_copies.push_back(c);
      if (!copies_[c].done) {
        if (CUresult r = issued_locked(c); r != CUDA_SUCCESS) {
          if (first_error == CUDA_SUCCESS) first_error = r;
          break;
        }
        if (CUresult r = d.cuStreamWaitEvent(to_device_, copies_[c].event, 0);
            r != CUDA_SUCCESS) {
          if (first_error == CUDA_SUCCESS) first_error = r;
          break;
        }
        waited.push_back(c);
      }
    }
    std::size_t end = done + 1;
    while (end < n && new_lender(end) < 0) ++end;
    const std::size_t m = end - done;
    const std::size_t copied =
        copy_runs_locked(std::span(vas).subspan(done, m), std::span(ps).subspan(done, m),
                         std::span(copy).subspan(done, m), to_device_,
                         std::span(ev).subspan(done, m), first_error);
    done += copied;
    if (copied < m) break;
  }
  // A borrowed page with no copy in (dead content) is still not written before then.
  if (done == n && !waited.empty()) {
    int after = -1;
    for (std::size_t k = 0; k < borrowed; ++k) {
      if (!ok[k] || copy[k]) continue;
      if (after < 0) {
        if (CUresult r = record_copy_locked(to_device_, after); r != CUDA_SUCCESS) {
          if (first_error == CUDA_SUCCESS) first_error = r;
          done = k;
          break;
        }
      }
      ev[k] = after;
    }
  }
  if (done < n) {
    // The copies of pages from done on never started (or cannot be waited for): put
    // the host memory back at their addresses, so their bytes stay where their state
    // says they are.
    d.cuStreamSynchronize(to_device_);
    for (std::size_t k = done; k < n; ++k) {
      if (!ok[k]) continue;
      back_to_host_locked(vas[k], *ps[k]);
      ok[k] = 0;
    }
  }
  std::vector<int> recorded;
  for (std::size_t k = 0; k < n; ++k) {
    if (ev[k] >= 0 && (recorded.empty() || recorded.back() != ev[k])) recorded.push_back(ev[k]);
    if (!ok[k]) continue;
    page& p = *ps[k];
    stats_.resident_bytes += cfg_.page_bytes;
    if (ev[k] >= 0) hold_copy_locked(p, ev[k]);
    p.where = state::resident;
    p.host_current = true;
    p.clean_epoch = write_epoch_;
    ++stats_.fetches;
    if (copy[k]) {
      stats_.bytes_to_device += cfg_.page_bytes;
    } else {
      ++stats_.dead_fetches;
    }
  }
  for (int c : recorded) recycle_copy_locked(c);
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  return first_error;
}

}  // namespace oversub::residency
