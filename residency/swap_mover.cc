// The swap engine's mover: the thread that finishes evictions off the launching
// thread, and the hand-offs through which the launching thread uses what it did (Note
// [The mover]).
//
// Note [The mover]
// ~~~~~~~~~~~~~~~~
// Finishing an eviction (unmapping the page's device memory, mapping its host handle
// at its address, granting access) costs three VMM calls per page, about 64 us of host
// time on the H100 model, against 42 us of link for the page's copy: on the launching
// thread those calls, not the link, bound swap mode. With swap_config::mover_thread
// (OVERSUB_MOVER=thread) a thread of the engine's own finishes evictions, so the
// launching thread only begins them (event records; a thread of the mover's own
// enqueues their copies, see Note [Copies out on the mover] in
// residency/swap_copies_out.cc) and goes on.
// The mover waits for the oldest eviction's copy out (cuEventSynchronize: it never
// asks about work that is not done), takes every evicting page whose copy is known
// done by that wait (state finishing), and does the remaps without the engine's lock,
// so that the launching thread's prepare() never waits for its driver calls. It then
// records a hand-off event on a stream of its own, commits the pages as on the host
// and their device memory as spares tagged with that event, under the lock. It
// finishes only as many evictions as room is wanted for (make_room found it short),
// oldest first, a batch at a time (one page, or a run, Note [Remapping runs] in
// residency/swap_engine.h): an
// eviction nobody needs the room of stays
// evicting, so that a page wanted again before then is kept with no copy back, as
// when the launching thread finishes evictions itself. Finishing every eviction at
// once moved 362 MiB in per iteration against 282 for ResNet-50 at 1/8 and 3x; finishing
// the schedule's own evictions at once was slower as well (59 ms against 55 per
// iteration).
// Rules that keep this correct and its time honest:
//   - Eviction begins on the launching thread, as before, so it is ordered after all
//     work enqueued when it began (Note [Moves after all work] in
//     residency/swap_engine.h); the mover's remap
//     comes after the copy out, which came after that work.
//   - A page in finishing is the mover's: work that wants it (prepare(), a fetch, a
//     reach, destroy_page) waits for the mover's commit, then fetches it as any page
//     on the host. Pinned pages (being prepared or fetched) are never taken.
//   - Whatever the launching thread uses of the mover's work (a spare's device
//     memory, a page the mover put on the host, room it made) is used only after that
//     thread has asked about the hand-off event of the batch that made it
//     (cuEventQuery), so a simulated GPU with a clock per host thread (Note [A clock
//     per host thread] in tests/simgpu/driver/clock.h) moves the launching thread's
//     time to the mover's at that hand-off and no earlier: waits the hand-off shows,
//     none that a condition variable would hide.
//   - Only the mover's own wait orders its remap after the copy (Note [Host threads
//     share one race timeline] in tests/simgpu/driver/race_detector.h).
//   - A driver error in the mover is kept and returned by the next prepare() (the
//     application sees a CUDA error at its next call); the page goes back to
//     evicting, still mapping its device memory, never losing bytes.
//   - Work that may use any page (touch_all) is enqueued only once the mover remaps
//     no page, so it never runs on an address while its mapping changes.
//   - The thread is stopped by an exit handler, and a forked child (where it does
//     not exist) never waits for it.
// The mover also makes the schedule's fetches, and a launch's own (Note [A launch
// hands its fetch to the mover] in residency/swap_mover.cc). A scheduled prefetch
// (prefetch_now)
// begins on the launching thread the evictions its pages need, as before, and hands
// the pages, in the schedule's order, to the mover (mover_fetch_, replaced by each
// request: the pages it has not begun go back to the schedule as `later`, which asks
// for them again only while their use is ahead, Note [Deferred fetches fall due] in
// core/schedule.cc). The mover takes the first page that is on the host and that only
// the engine used there (a page with unannounced users needs the host to wait for
// them: the launching thread fetches it at its use), with the pages among the next
// 4 * kMaxRunPages of the queue, in any order, that extend its run of addresses either
// way (the schedule asks for a run's pages over several launches, and backward passes
// ask for them from the top down), as far as the room goes around the first page
// (otherwise it asks for room and finishes an eviction first), marks them fetching,
// and without the lock remaps them from their host handles to spares (Note
// [Remapping runs] in residency/swap_engine.h) and copies them in on its own stream,
// behind one copy event that the pages hold from the commit on, like any fetch's. The
// launching thread's prepare() waits for a page in fetching (its commit), asks about
// the hand-off, and orders its work after the copy's event (use_after_copy_locked), as
// for any fetched page. An application thread waiting for room comes first: the mover
// begins no fetch of its own meanwhile.
// A launch's own missing pages go to the mover too, first in its queue (Note [A launch
// hands its fetch to the mover] in residency/swap_mover.cc).
// The library runs the mover by default (OVERSUB_MOVER=thread; inline keeps every
// remap on the launching thread). On simgpu's H100 model, the traces at 1/8 of their
// bytes at 1.5x and 3x, the launching thread's host time per iteration fell 5 to 11
// times, and the iteration was shorter at every point but VGG-16 at 1.5x (5% longer:
// its launches need their pages sooner than the mover fetches them, so most of its
// fetches are still made on demand); docs/results.md, "Swap: the mover".
//
// Note [A launch's fetch takes the queue's neighbours]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A launch's own missing pages are remapped run by run (Note [Remapping runs] in
// residency/swap_engine.h); the
// pages next to them that the mover has queued and not begun would each cost the
// mover a run of their own later (its unmap and access grant, about 186 us on the
// H200's measured model, against 13 us for a page joining a run). So prepare()
// extends each run of its missing pages either way with queued
// pages the mover could take (on the host, among the queue's next 4 * kMaxRunPages,
// used by nothing else there, no lending), up to kMaxRunPages a run, and only as far
// as the room free now goes beyond its own pages: the launch never waits for room for
// pages it does not use. They are fetched as the mover would have (their copies' event
// orders their later users) and leave the queue; swap_stats::launch_run_pages counts
// them.
//
// Note [The mover fetches pages reached on the host]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A launch over the room (Note [Larger than the capacity] in core/launch_residency.cc)
// reaches some of its pages in host memory, so its stream becomes a user of those pages
// on the host, and their remap to device memory must wait for its work. The mover
// fetched no such page: the next launch that needed one took it back from the mover
// and, after waiting for that stream, remapped it itself. At ResNet-50 b32 at 1/8 of
// its bytes, 10x, on the H200's measured model, 21 such hand-backs an iteration made
// the launching thread's remaps 3.9 ms an iteration, 10.4% of T_unl. Now the mover takes
// them in its own fetch batches: under the lock its copy stream is ordered after their
// users (as the launching thread's fetch does), and before its remaps it waits for that
// stream. A batch grouped with evictions (Note [Calls grouped by family] in
// residency/page_runs.cc) takes none, so that those evictions' remaps do not wait.

// Note [A launch hands its fetch to the mover]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A launch that reaches pages the mover has not fetched yet does not remap them
// itself: prepare() begins the evictions that make their room, puts the pages first in
// the mover's queue (the mover may fetch them though they are pinned: handoff_epoch_)
// and waits on the condition variable until they are resident, then uses them after
// their batches' hand-offs, as any work of the mover's (Note [The mover] in
// residency/swap_mover.cc). So the
// launching thread makes no mapping call in the steady state: it waits only where its
// launch needs pages that are not there, the wait a launch queue that is full would
// make too. The launching thread remapped them itself before, beside the mover: two
// threads of calls, but the host time added to the application's thread was 9%-44% of
// T_unl on the H200 model's trace points. Handing them over (ResNet-50, GPT-2 and
// VGG-16 at 1/8, docs/results.md "Swap: a launch hands its fetch to the mover"): host
// time added 0.9% and 1.5% of T_unl at ResNet-50; the iteration 0.5% faster at
// ResNet-50 1.5x and GPT-2 3x, 3.4% slower at ResNet-50 3x and 2.6% at VGG-16, where
// one thread of calls is busier; with VMM calls that wait for the device
// (SIMGPU_VMM_WAIT=1), GPT-2 3x 592.5 -> 445.6 ms, where the launching thread's own
// calls had waited for the device's queue. If the mover stops, or waits with nothing
// it can do (the room it needs cannot come from evictions it can finish, or the pages
// are not its to fetch), the launching thread takes the pages back and fetches them
// itself (swap_stats::mover_handbacks).

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "policy/cost_model.h"
#include "pool/driver_api.h"
#include "residency/page_runs.h"
#include "residency/swap_engine.h"

namespace oversub::residency {

namespace {

constexpr std::size_t kHandoffEvents = 64;

// Every engine whose mover runs, for the exit handler.
std::mutex g_movers_mutex;
std::vector<swap_engine*>& movers() {
  static auto* v = new std::vector<swap_engine*>();
  return *v;
}

}  // namespace

// A fetch run the mover has taken: chosen under the lock (plan_fetch_locked), made
// without it, committed under it again (commit_fetch_locked).
struct swap_engine::fetch_plan {
  std::vector<std::uintptr_t> vas;
  std::vector<CUmemGenericAllocationHandle> hosts, devices;
  std::vector<std::uintptr_t> shadows;
  std::vector<char> copy;
  // The finished eviction's page whose device memory it takes (Note [Calls grouped by
  // family] in residency/page_runs.cc), or -1.
  std::vector<int> borrow;
  std::uint64_t epoch = 0, batch = 0;
  std::size_t copies = 0;
  int c = -1;
  CUevent copy_event = nullptr;
  // Work reached some of its pages in host memory: the copy stream is ordered after it,
  // and the remaps wait for the stream (Note [The mover fetches pages reached on the host]).
  bool after_users = false;
};

// See Note [The mover] in residency/swap_mover.cc: the thread never outlives the exit
// handlers.
void stop_movers_at_exit() {
  std::vector<swap_engine*> all;
  {
    std::lock_guard<std::mutex> lock(g_movers_mutex);
    all.swap(movers());
  }
  for (swap_engine* e : all) e->stop_mover();
}

void swap_engine::start_mover_locked() {
  if (!cfg_.mover_thread || mover_on_) return;
  const pool::driver_table& d = pool::driver();
  // The thread works in the context the engine's streams belong to.
  CUcontext context = nullptr;
  if (d.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) {
    log::warn("swap: no current context to start the mover in; evictions finish on the "
              "launching thread (OVERSUB_MOVER=inline)");
    return;
  }
  if (d.cuStreamCreate(&mover_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    log::warn("swap: the mover's stream could not be created; evictions finish on the "
              "launching thread (OVERSUB_MOVER=inline)");
    return;
  }
  handoff_.assign(kHandoffEvents, nullptr);
  for (CUevent& e : handoff_) {
    if (d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      log::warn("swap: the mover's events could not be created; evictions finish on the "
                "launching thread (OVERSUB_MOVER=inline)");
      return;
    }
  }
  try {
    mover_ = std::thread([this, context] {
      if (pool::driver().cuCtxSetCurrent(context) != CUDA_SUCCESS) {
        std::lock_guard<std::mutex> lock(mutex_);
        mover_on_ = false;  // evictions finish on the launching thread
        moved_.notify_all();
        return;
      }
      mover_main();
    });
  } catch (...) {
    log::warn("swap: the mover thread could not be started; evictions finish on the "
              "launching thread (OVERSUB_MOVER=inline)");
    return;
  }
  mover_pid_ = static_cast<int>(::getpid());
  mover_on_ = true;
  // See Note [Copies out on the mover] in residency/swap_copies_out.cc; without it, the
  // mover enqueues them.
  try {
    copier_ = std::thread([this, context] {
      if (pool::driver().cuCtxSetCurrent(context) != CUDA_SUCCESS) {
        std::lock_guard<std::mutex> lock(mutex_);
        copier_on_ = false;  // the mover enqueues them
        return;
      }
      copier_main();
    });
    copier_on_ = true;
  } catch (...) {
    log::warn("swap: the copier thread could not be started; the mover enqueues the "
              "evictions' copies");
  }
  std::lock_guard<std::mutex> lock(g_movers_mutex);
  static const bool registered = std::atexit(stop_movers_at_exit) == 0;
  (void)registered;
  movers().push_back(this);
}

void swap_engine::stop_mover() {
  {
    // A destroyed engine is not stopped again at exit.
    std::lock_guard<std::mutex> lock(g_movers_mutex);
    std::erase(movers(), this);
  }
  // In a forked child the thread does not exist: nothing to stop or wait for.
  if (mover_pid_ != static_cast<int>(::getpid())) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!mover_.joinable()) return;
    stop_ = true;
  }
  moved_.notify_all();
  copies_begun_.notify_all();
  if (mover_.joinable()) mover_.join();
  if (copier_.joinable()) copier_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  mover_on_ = false;
  moved_.notify_all();  // anyone waiting for a batch: none comes, go on inline
}

// The launching thread uses what batch `batch` did: it asks about that batch's hand-off
// event first (Note [The mover] in residency/swap_mover.cc). One question per batch at
// most; a later batch's answer covers the earlier ones (one thread records them, in
// order, on one stream).
void swap_engine::observe_locked(std::uint64_t batch) {
  if (batch <= observed_ || handoff_.empty()) return;
  (void)pool::driver().cuEventQuery(handoff_[batch % handoff_.size()]);
  observed_ = batch;
}

// Work wants the page at va: while the mover finishes its eviction or fetches it, wait
// for its commit.
void swap_engine::await_page_locked(std::uintptr_t va) {
  auto it = pages_.find(va);
  if (it == pages_.end()) return;
  const auto busy = [&] {
    return it->second.where == state::finishing || it->second.where == state::fetching;
  };
  if (busy()) {
    ++stats_.mover_waits;
    while (busy()) moved_.wait(mutex_);
  }
  observe_locked(it->second.handoff);
}


// One batch of evictions finished, if room is wanted and a copy out can be waited for
// (Note [The mover] in residency/swap_mover.cc).
swap_engine::move swap_engine::mover_finish_locked(std::unique_lock<std::mutex>& lock) {
  const pool::driver_table& d = pool::driver();
  // The oldest copy out that an eviction the mover may take waits for.
  // Only while room is wanted.
  // See Note [Remapping runs] in residency/swap_engine.h: with mapping calls dear, the
  // copy of the batch's last page, so that the batch is remapped at once.
  const auto wanted = [&](const page& p) { return claimable(p) && room_wanted_ != 0; };
  std::vector<int> waitable;
  for (auto& [va, p] : pages_) {
    if (wanted(p)) waitable.push_back(p.copy);
  }
  const int oldest =
      nth_copy_locked(std::move(waitable), std::min(room_wanted_, batch_pages_locked()));
  if (oldest < 0) return move::idle;
  if (CUresult r = issued_locked(oldest); r != CUDA_SUCCESS) {
    mover_error_ = r;
    return move::failed;
  }
  ++copies_[oldest].refs;  // kept while the lock is let go
  const CUevent event = copies_[oldest].event;
  lock.unlock();
  const CUresult waited = d.cuEventSynchronize(event);
  lock.lock();
  if (--copies_[oldest].refs == 0) free_copies_.push_back(oldest);
  if (waited != CUDA_SUCCESS) {
    // A sticky error: the application hears it at its next call; evictions finish
    // on the launching thread from now.
    mover_error_ = waited;
    return move::failed;
  }
  copy_done_locked(oldest);
  // Every eviction whose copy this wait covers: its own stream, recorded no later.
  const copy_event& c = copies_[oldest];
  std::vector<std::uintptr_t> vas;
  for (auto& [va, p] : pages_) {
    if (wanted(p) && copies_[p.copy].stream == c.stream && copies_[p.copy].seq <= c.seq) {
      vas.push_back(va);
    }
  }
  if (vas.empty()) return move::worked;
  // The oldest copy's page first, with the pages adjacent to it whose copies this wait
  // covers too: one run, remapped at about one page's cost (Note [Remapping runs] in
  // residency/swap_engine.h); where the calls group, more of the covered pages up to
  // the room wanted. Launching work that waits for room waits for one batch.
  if (room_wanted_ == 0) return move::worked;
  std::sort(vas.begin(), vas.end());
  const std::uintptr_t oldest_va = *std::min_element(
      vas.begin(), vas.end(), [&](std::uintptr_t a, std::uintptr_t b) {
        const std::uint64_t sa = copies_[pages_[a].copy].seq, sb = copies_[pages_[b].copy].seq;
        return sa != sb ? sa < sb : a < b;
      });
  const std::size_t at = static_cast<std::size_t>(
      std::lower_bound(vas.begin(), vas.end(), oldest_va) - vas.begin());
  const std::size_t cap = std::max(room_wanted_, kMaxRunPages);
  std::size_t lo = at, hi = at + 1;
  while (hi - lo < cap) {
    if (hi < vas.size() && vas[hi] == vas[hi - 1] + cfg_.page_bytes) {
      ++hi;
    } else if (lo > 0 && vas[lo - 1] + cfg_.page_bytes == vas[lo]) {
      --lo;
    } else {
      break;
    }
  }
  {
    std::vector<std::uintptr_t> taken(vas.begin() + static_cast<std::ptrdiff_t>(lo),
                                      vas.begin() + static_cast<std::ptrdiff_t>(hi));
    if (runs_may_group()) {
      // See Note [Calls grouped by family] in residency/page_runs.cc: the other pages
      // this wait covers, oldest copy first, in the same calls.
      std::vector<std::uintptr_t> rest(vas.begin(),
                                       vas.begin() + static_cast<std::ptrdiff_t>(lo));
      rest.insert(rest.end(), vas.begin() + static_cast<std::ptrdiff_t>(hi), vas.end());
      std::stable_sort(rest.begin(), rest.end(), [&](std::uintptr_t a, std::uintptr_t b) {
        return copies_[pages_[a].copy].seq < copies_[pages_[b].copy].seq;
      });
      for (std::size_t k = 0; k < rest.size() && taken.size() < room_wanted_; ++k) {
        taken.push_back(rest[k]);
      }
      std::sort(taken.begin(), taken.end());
    }
    vas = std::move(taken);
  }
  room_wanted_ -= std::min(room_wanted_, vas.size());
  std::vector<CUmemGenericAllocationHandle> from, to;  // device memory, host handles
  for (std::uintptr_t va : vas) {
    page& p = pages_[va];
    release_copy_locked(p);
    p.where = state::finishing;
    from.push_back(p.device);
    to.push_back(p.host);
  }
  finishing_ += vas.size();
  const std::uint64_t batch = ++next_batch_;
  // See Note [Calls grouped by family] in residency/page_runs.cc: the fetch this room is
  // for, remapped in the same calls, taking this eviction's device memory.
  fetch_plan f;
  const bool paired = runs_may_group() && plan_fetch_locked(f, from);
  // See Note [A fetch's copies before the evictions' grants] in residency/page_runs.cc:
  // not where the calls wait for the device's work (Note [The probe's answer before
  // the timings] in residency/swap_engine.h), the copies then among it.
  const bool copy_early = paired && !cfg_.calls_wait && !timings_say_calls_wait_locked();
  std::uint64_t (*const clock)() noexcept = clock_;
  lock.unlock();

  // The remaps, without the lock (the pages are the mover's): per run of adjacent
  // pages, one unmap and one access grant (Note [Remapping runs] in
  // residency/swap_engine.h).
  std::uint64_t calls = 0, copy_calls = 0;
  std::vector<char> ok, fok;
  run_cost_fit fit;
  CUresult error = CUDA_SUCCESS;
  CUresult ferror = paired ? create_fetch_memory(f, calls) : CUDA_SUCCESS;
  // See Note [A fetch's copies before the evictions' grants] in residency/page_runs.cc.
  bool copied = false;
  const fetched_fn copy_in = [&](const std::vector<char>& granted, CUresult e) {
    copied = true;
    return copy_fetch_in(f, granted, e, calls, copy_calls);
  };
  if (paired && ferror == CUDA_SUCCESS) {
    error = remap_grouped(vas, from, to, f.vas, f.hosts, f.devices, f.borrow, cfg_.page_bytes,
                          cfg_.device, ok, fok, ferror, calls, clock, &fit,
                          copy_early ? copy_in : fetched_fn{});
  } else {
    error = remap_runs(vas, from, to, cfg_.page_bytes, cfg_.device, ok, calls, clock, &fit);
  }
  if (paired && !copied) ferror = copy_fetch_in(f, fok, ferror, calls, copy_calls);
  // A hand-off that could not be recorded is a driver error like any other: the
  // application hears it at its next call (the pages are committed all the same).
  const CUresult handed = d.cuEventRecord(handoff_[batch % handoff_.size()], mover_stream_);
  const CUresult fhanded =
      paired ? d.cuEventRecord(handoff_[f.batch % handoff_.size()], mover_stream_) : CUDA_SUCCESS;

  lock.lock();
  stats_.mapping_calls += calls;
  count_remaps_locked(fit, true);
  ++stats_.mover_batches;
  // The device memory the fetch took: it is the fetch's to give back or keep.
  std::vector<char> lent(vas.size(), 0);
  for (int j : f.borrow) {
    if (j >= 0) lent[static_cast<std::size_t>(j)] = 1;
  }
  for (std::size_t k = 0; k < vas.size(); ++k) {
    page& p = pages_[vas[k]];
    --finishing_;
    if (!ok[k]) {
      // Still its device memory, still resident in all but name: evicting, with no
      // copy under way (the launching thread finishes or keeps it).
      p.where = state::evicting;
      continue;
    }
    ++stats_.mover_pages;
    stats_.resident_bytes -= cfg_.page_bytes;
    if (!lent[k]) give_device_locked(p.device, batch);
    p.device = 0;
    p.where = state::on_host;
    p.host_current = true;
    p.clean_epoch = write_epoch_;
    p.users.clear();  // the copy's completion ordered the host after all of them
    p.handoff = batch;
  }
  batches_ = batch;
  if (error == CUDA_SUCCESS) error = handed;
  if (error != CUDA_SUCCESS) mover_error_ = error;
  if (paired) {
    // A page whose eviction kept its device memory keeps it from the fetch too.
    std::vector<char> keep(f.vas.size(), 1);
    for (std::size_t k = 0; k < f.vas.size(); ++k) {
      if (f.borrow[k] >= 0 && !ok[static_cast<std::size_t>(f.borrow[k])]) keep[k] = 0;
    }
    commit_fetch_locked(f, ferror, fhanded, copy_calls, keep);
    if (ferror != CUDA_SUCCESS || fhanded != CUDA_SUCCESS) {
      error = error != CUDA_SUCCESS ? error : ferror != CUDA_SUCCESS ? ferror : fhanded;
    }
  }
  moved_.notify_all();
  return error != CUDA_SUCCESS ? move::failed : move::worked;
}

// The first of the schedule's latest fetches that the mover may make, once a spare and
// the room are there (Note [The mover] in residency/swap_mover.cc): the run, its pages
// marked fetching. With `lendable` (an eviction's device memory, about to be unmapped in
// the same call) its room counts, and a page with no spare takes one of them; the run
// is then not taken unless that room is enough, and no room is asked for.
bool swap_engine::plan_fetch_locked(fetch_plan& f,
                                    std::span<const CUmemGenericAllocationHandle> lendable) {
  // See Note [The mover fetches pages reached on the host]: not in a batch grouped with
  // evictions, whose remaps do not wait.
  const bool with_users = lendable.empty();
  std::size_t next = 0;
  while (next < mover_fetch_.size()) {
    auto it = pages_.find(mover_fetch_[next]);
    if (it != pages_.end() && mover_may_fetch(it->second, with_users)) break;
    ++next;
  }
  mover_fetch_.erase(mover_fetch_.begin(), mover_fetch_.begin() + static_cast<std::ptrdiff_t>(next));
  // An application thread waiting for room comes first.
  if (mover_fetch_.empty() || room_waiters_ != 0) return false;
  if (lendable.empty()) trim_spares_locked();
  // The first page, and the pages among the queue's next ones, in any order, that
  // extend its run of adjacent addresses either way: one unmap and one access grant for
  // all of them (Note [Remapping runs] in residency/swap_engine.h; the schedule asks
  // for a run's pages over several launches, and not always in address order).
  std::vector<std::uintptr_t> vas{mover_fetch_.front()};
  {
    const std::size_t look = std::min(mover_fetch_.size(), policy::run_window_moves);
    const auto queued = [&](std::uintptr_t va) {
      const auto end = mover_fetch_.begin() + static_cast<std::ptrdiff_t>(look);
      if (std::find(mover_fetch_.begin(), end, va) == end) return false;
      auto it = pages_.find(va);
      return it != pages_.end() && mover_may_fetch(it->second, with_users);
    };
    std::uintptr_t lo = vas.front(), hi = vas.front();
    while (vas.size() < kMaxRunPages && queued(hi + cfg_.page_bytes)) {
      vas.push_back(hi += cfg_.page_bytes);
    }
    while (vas.size() < kMaxRunPages && queued(lo - cfg_.page_bytes)) {
      vas.push_back(lo -= cfg_.page_bytes);
    }
    std::sort(vas.begin(), vas.end());
  }
  // Room first, for as much of the run as a batch is worth: evictions the mover
  // finishes (mover_finish_locked). Then the run, as far as the room goes.
  const std::uint64_t cap = capacity_bytes();
  const std::size_t room_pages =
      (stats_.resident_bytes >= cap ? 0 : (cap - stats_.resident_bytes) / cfg_.page_bytes) +
      lendable.size();
  if (const std::size_t batch = std::min(vas.size(), batch_pages_locked()); room_pages < batch) {
    if (lendable.empty()) room_wanted_ = std::max(room_wanted_, batch - room_pages);
    return false;
  }
  if (vas.size() > room_pages) {
    // The part of the run around the page the schedule wants first.
    const auto at = static_cast<std::size_t>(
        std::find(vas.begin(), vas.end(), mover_fetch_.front()) - vas.begin());
    const std::size_t from = std::min(at, vas.size() - room_pages);
    vas = std::vector<std::uintptr_t>(vas.begin() + static_cast<std::ptrdiff_t>(from),
                                      vas.begin() + static_cast<std::ptrdiff_t>(from + room_pages));
  }
  std::erase_if(mover_fetch_, [&](std::uintptr_t va) {
    return std::find(vas.begin(), vas.end(), va) != vas.end();
  });
  // See Note [The mover fetches pages reached on the host]. A driver error leaves the
  // pages on the host (a launch that needs them takes them back), heard at the
  // application's next call.
  std::vector<page*> used;
  for (std::uintptr_t va : vas) {
    if (page& p = pages_[va]; !p.users.empty()) used.push_back(&p);
  }
  if (!used.empty()) {
    if (CUresult r = order_after_locked(used, to_device_); r != CUDA_SUCCESS) {
      mover_error_ = r;
      return false;
    }
    for (page* p : used) p->users.clear();
    f.after_users = true;
  }
  const std::size_t n = vas.size();
  // The oldest batch's spares, as take_device_locked (the mover's own hand-offs need no
  // question), then the eviction's memory; with neither, new device memory, made
  // without the lock.
  f.vas = std::move(vas);
  f.hosts.assign(n, 0);
  f.devices.assign(n, 0);
  f.shadows.assign(n, 0);
  f.copy.assign(n, 0);
  f.borrow.assign(n, -1);
  f.epoch = write_epoch_;
  std::size_t lent = 0;
  for (std::size_t k = 0; k < n; ++k) {
    page& p = pages_[f.vas[k]];
    if (std::uint64_t batch_of_spare = 0; !spare_.empty()) {
      f.devices[k] = take_spare_locked(batch_of_spare);
    } else if (lent < lendable.size()) {
      f.borrow[k] = static_cast<int>(lent);
      f.devices[k] = lendable[lent++];
    }
    stats_.resident_bytes += cfg_.page_bytes;  // the room is this page's from now
    p.where = state::fetching;
    ++fetching_;
    f.copy[k] = !content_dead(p, f.epoch);
    f.copies += f.copy[k];
    f.hosts[k] = p.host;
    f.shadows[k] = p.shadow;
  }
  // One copy event for the run's copies in, held by each page copied.
  if (f.copies != 0) {
    f.c = new_copy_locked();
    if (f.c >= 0) {
      f.copy_event = copies_[f.c].event;
      copies_[f.c].stream = mover_stream_;
      copies_[f.c].refs += static_cast<std::uint32_t>(f.copies);  // the pages', from the commit
    }
  }
  f.batch = ++next_batch_;
  return true;
}

// The fetch's new device memory, where it took neither a spare nor an eviction's;
// without the lock.
CUresult swap_engine::create_fetch_memory(fetch_plan& f, std::uint64_t& calls) {
  const pool::driver_table& d = pool::driver();
  CUresult error = f.copies != 0 && f.c < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  const CUmemAllocationProp prop = pool::vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
  for (std::size_t k = 0; k < f.vas.size() && error == CUDA_SUCCESS; ++k) {
    if (f.devices[k] != 0) continue;
    ++calls;
    if (error = d.cuMemCreate(&f.devices[k], cfg_.page_bytes, &prop, 0); error != CUDA_SUCCESS) {
      f.devices[k] = 0;
    }
  }
  return error;
}

// The fetch's copies in, once its pages are remapped (ok), and on an error its pages
// back to their host copies; without the lock.
CUresult swap_engine::copy_fetch_in(fetch_plan& f, const std::vector<char>& ok, CUresult error,
                                    std::uint64_t& calls, std::uint64_t& copy_calls) {
  const pool::driver_table& d = pool::driver();
  const std::size_t n = f.vas.size();
  // Copies in: one per run adjacent at both its addresses and its shadow addresses.
  for (std::size_t k = 0; k < n && error == CUDA_SUCCESS;) {
    if (!f.copy[k]) {
      ++k;
      continue;
    }
    std::size_t end = k + 1;
    while (end < n && f.copy[end] && f.vas[end] == f.vas[end - 1] + cfg_.page_bytes &&
           f.shadows[end] == f.shadows[end - 1] + cfg_.page_bytes) {
      ++end;
    }
    ++copy_calls;
    error = d.cuMemcpyAsync(f.vas[k], f.shadows[k], (end - k) * cfg_.page_bytes, mover_stream_);
    k = end;
  }
  if (error == CUDA_SUCCESS && f.copies != 0) error = d.cuEventRecord(f.copy_event, mover_stream_);
  if (error != CUDA_SUCCESS) {
    // Back to the host copies, whose bytes are current, once any copy queued into the
    // device memory is done.
    std::vector<std::uintptr_t> vas;
    std::vector<CUmemGenericAllocationHandle> devices, hosts;
    for (std::size_t k = 0; k < n && k < ok.size(); ++k) {
      if (!ok[k]) continue;
      vas.push_back(f.vas[k]);
      devices.push_back(f.devices[k]);
      hosts.push_back(f.hosts[k]);
    }
    if (!vas.empty()) {
      d.cuStreamSynchronize(mover_stream_);
      std::vector<char> back;
      remap_runs(vas, devices, hosts, cfg_.page_bytes, cfg_.device, back, calls);
    }
  }
  return error;
}

// The fetch's pages resident, or on an error back on the host (keep[k] false: its device
// memory is an eviction's that kept it, not to be given as a spare).
void swap_engine::commit_fetch_locked(fetch_plan& f, CUresult error, CUresult handed,
                                      std::uint64_t copy_calls, const std::vector<char>& keep) {
  if (error != CUDA_SUCCESS && f.c >= 0) {
    copies_[f.c].refs -= static_cast<std::uint32_t>(f.copies);
    if (copies_[f.c].refs == 0) free_copies_.push_back(f.c);
  }
  for (std::size_t k = 0; k < f.vas.size(); ++k) {
    page& q = pages_[f.vas[k]];
    --fetching_;
    if (error != CUDA_SUCCESS) {
      q.where = state::on_host;
      q.device = 0;
      stats_.resident_bytes -= cfg_.page_bytes;
      if (f.devices[k] != 0 && (keep.empty() || keep[k])) give_device_locked(f.devices[k], f.batch);
    } else {
      if (f.copy[k]) {
        release_copy_locked(q);
        q.copy = f.c;  // its reference was taken above
        stats_.bytes_to_device += cfg_.page_bytes;
      } else {
        ++stats_.dead_fetches;
      }
      q.where = state::resident;
      q.device = f.devices[k];
      q.host_current = true;
      q.clean_epoch = f.epoch;
      ++stats_.fetches;
      ++stats_.mover_fetches;
    }
    q.handoff = f.batch;
  }
  if (error == CUDA_SUCCESS) {
    stats_.copies += copy_calls;
    stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  } else {
    mover_error_ = error;
  }
  batches_ = f.batch;
  if (error == CUDA_SUCCESS && handed != CUDA_SUCCESS) mover_error_ = handed;
}

swap_engine::move swap_engine::mover_fetch_locked(std::unique_lock<std::mutex>& lock) {
  fetch_plan f;
  if (!plan_fetch_locked(f, {})) return move::idle;
  std::uint64_t (*const clock)() noexcept = clock_;
  lock.unlock();

  // The remaps and the copies in, without the lock (the pages are the mover's).
  std::uint64_t calls = 0, copy_calls = 0;
  // See Note [The mover fetches pages reached on the host].
  CUresult error = f.after_users ? pool::driver().cuStreamSynchronize(to_device_) : CUDA_SUCCESS;
  if (error == CUDA_SUCCESS) error = create_fetch_memory(f, calls);
  std::vector<char> ok;
  run_cost_fit fit;
  if (error == CUDA_SUCCESS) {
    error = remap_runs(f.vas, f.hosts, f.devices, cfg_.page_bytes, cfg_.device, ok, calls, clock,
                       &fit);
  }
  error = copy_fetch_in(f, ok, error, calls, copy_calls);
  // As in mover_finish_locked: a hand-off not recorded is heard at the next call.
  const CUresult handed =
      pool::driver().cuEventRecord(handoff_[f.batch % handoff_.size()], mover_stream_);

  lock.lock();
  stats_.mapping_calls += calls;
  count_remaps_locked(fit, true);
  commit_fetch_locked(f, error, handed, copy_calls, {});
  moved_.notify_all();
  return error != CUDA_SUCCESS || handed != CUDA_SUCCESS ? move::failed : move::worked;
}

// See Note [Copies out on the mover] in residency/swap_copies_out.cc.
void swap_engine::copier_main() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_ && mover_on_) {
    if (out_jobs_.empty()) {
      copies_begun_.wait(lock);
      continue;
    }
    if (CUresult r = issue_out_jobs_locked(); r != CUDA_SUCCESS) {
      // The application hears it at its next call; the mover enqueues the rest.
      mover_error_ = r;
      break;
    }
  }
  copier_on_ = false;
}

void swap_engine::mover_main() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    // See Note [Copies out on the mover] in residency/swap_copies_out.cc.
    if (CUresult r = copier_on_ ? CUDA_SUCCESS : issue_out_jobs_locked(); r != CUDA_SUCCESS) {
      mover_error_ = r;
      break;
    }
    move m = mover_fetch_locked(lock);
    if (m == move::idle) m = mover_finish_locked(lock);
    if (m == move::failed) break;
    if (m == move::idle) {
      mover_idle_ = true;
      moved_.notify_all();
      moved_.wait(lock);
      mover_idle_ = false;
    }
  }
  // Stopped, or a driver error: evictions finish on the launching thread from now,
  // and the copies out begun so far are enqueued now.
  if (CUresult r = issue_out_jobs_locked(); r != CUDA_SUCCESS && mover_error_ == CUDA_SUCCESS) {
    mover_error_ = r;
  }
  mover_on_ = false;
  mover_fetch_.clear();
  moved_.notify_all();
  copies_begun_.notify_all();  // the copier stops too
}

}  // namespace oversub::residency
