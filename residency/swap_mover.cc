// The swap engine's mover: the thread that finishes evictions off the launching
// thread, and the hand-offs through which the launching thread uses what it did (Note
// [The mover] in residency/swap_engine.h).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "pool/driver_api.h"
#include "residency/page_runs.h"
#include "residency/swap_engine.h"

namespace oversub::residency {

namespace {

constexpr std::size_t kHandoffEvents = 64;
// Pages per batch (one hand-off event each); see the sort in mover_main.
constexpr std::size_t kBatchPages = 1;

// Every engine whose mover runs, for the exit handler.
std::mutex g_movers_mutex;
std::vector<swap_engine*>& movers() {
  static auto* v = new std::vector<swap_engine*>();
  return *v;
}

}  // namespace

// See Note [The mover] in residency/swap_engine.h: the thread never outlives the exit
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
  std::lock_guard<std::mutex> lock(g_movers_mutex);
  static const bool registered = std::atexit(stop_movers_at_exit) == 0;
  (void)registered;
  movers().push_back(this);
}

void swap_engine::stop_mover() {
  // In a forked child the thread does not exist: nothing to stop or wait for.
  if (mover_pid_ != static_cast<int>(::getpid())) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!mover_.joinable()) return;
    stop_ = true;
  }
  moved_.notify_all();
  if (mover_.joinable()) mover_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  mover_on_ = false;
  moved_.notify_all();  // anyone waiting for a batch: none comes, go on inline
}

// The launching thread uses what batch `batch` did: it asks about that batch's hand-off
// event first (Note [The mover] in residency/swap_engine.h). One question per batch at
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

namespace {

CUmemAccessDesc device_access(int device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

}  // namespace

// One batch of evictions finished, if room is wanted and a copy out can be waited for
// (Note [The mover] in residency/swap_engine.h).
swap_engine::move swap_engine::mover_finish_locked(std::unique_lock<std::mutex>& lock) {
  const pool::driver_table& d = pool::driver();
  // The oldest copy out that an eviction the mover may take waits for.
  // Only while room is wanted.
  const auto wanted = [&](const page& p) { return claimable(p) && room_wanted_ != 0; };
  int oldest = -1;
  for (auto& [va, p] : pages_) {
    if (wanted(p) && (oldest < 0 || copies_[p.copy].seq < copies_[oldest].seq)) {
      oldest = p.copy;
    }
  }
  if (oldest < 0) return move::idle;
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
  // The oldest copies first, and a few pages per batch: launching work that waits for
  // room waits for one batch's remaps, not for every eviction done so far.
  std::sort(vas.begin(), vas.end(), [&](std::uintptr_t a, std::uintptr_t b) {
    const std::uint64_t sa = copies_[pages_[a].copy].seq, sb = copies_[pages_[b].copy].seq;
    return sa != sb ? sa < sb : a < b;
  });
  vas.resize(std::min({vas.size(), kBatchPages, room_wanted_}));
  if (vas.empty()) return move::worked;
  room_wanted_ -= std::min(room_wanted_, vas.size());
  std::sort(vas.begin(), vas.end());
  struct item {
    CUmemGenericAllocationHandle device, host;
  };
  std::vector<item> items;
  items.reserve(vas.size());
  for (std::uintptr_t va : vas) {
    page& p = pages_[va];
    release_copy_locked(p);
    p.where = state::finishing;
    items.push_back(item{p.device, p.host});
  }
  finishing_ += vas.size();
  const std::uint64_t batch = ++next_batch_;
  lock.unlock();

  // The remaps, without the lock (the pages are the mover's).
  std::uint64_t calls = 0;
  CUresult error = CUDA_SUCCESS;
  std::vector<char> ok(vas.size(), 0);
  std::vector<std::uintptr_t> mapped;
  std::vector<std::size_t> mapped_index;
  for (std::size_t k = 0; k < vas.size() && error == CUDA_SUCCESS; ++k) {
    ++calls;
    if (CUresult r = d.cuMemUnmap(vas[k], cfg_.page_bytes); r != CUDA_SUCCESS) {
      error = r;
      break;
    }
    ++calls;
    if (CUresult r = d.cuMemMap(vas[k], cfg_.page_bytes, 0, items[k].host, 0); r != CUDA_SUCCESS) {
      error = r;
      // Put the device memory back: the bytes must stay reachable.
      d.cuMemMap(vas[k], cfg_.page_bytes, 0, items[k].device, 0);
      break;
    }
    mapped.push_back(vas[k]);
    mapped_index.push_back(k);
    ok[k] = 1;
  }
  const CUmemAccessDesc access = device_access(cfg_.device);
  for_runs(mapped, cfg_.page_bytes, [&](std::size_t first, std::size_t count) {
    ++calls;
    if (CUresult r = d.cuMemSetAccess(mapped[first], count * cfg_.page_bytes, &access, 1);
        r != CUDA_SUCCESS) {
      for (std::size_t m = first; m < first + count; ++m) {
        const std::size_t k = mapped_index[m];
        d.cuMemUnmap(vas[k], cfg_.page_bytes);
        d.cuMemMap(vas[k], cfg_.page_bytes, 0, items[k].device, 0);
        ok[k] = 0;
      }
      if (error == CUDA_SUCCESS) error = r;
    }
  });
  // A page that went back to its device memory needs access to it again.
  for (std::size_t k = 0; k < vas.size(); ++k) {
    if (!ok[k] && error != CUDA_SUCCESS) {
      d.cuMemSetAccess(vas[k], cfg_.page_bytes, &access, 1);
    }
  }
  // A hand-off that could not be recorded is a driver error like any other: the
  // application hears it at its next call (the pages are committed all the same).
  const CUresult handed = d.cuEventRecord(handoff_[batch % handoff_.size()], mover_stream_);

  lock.lock();
  stats_.mapping_calls += calls;
  ++stats_.mover_batches;
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
    give_device_locked(p.device, batch);
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
  moved_.notify_all();
  return error != CUDA_SUCCESS ? move::failed : move::worked;
}

// The first of the schedule's latest fetches that the mover may make, once a spare and
// the room are there (Note [The mover] in residency/swap_engine.h).
swap_engine::move swap_engine::mover_fetch_locked(std::unique_lock<std::mutex>& lock) {
  const pool::driver_table& d = pool::driver();
  // On the host, nothing but the engine used it there (no unannounced users to wait
  // for), not wanted by the application's thread right now, no lending either way.
  const auto eligible = [&](const page& p) {
    return p.where == state::on_host && p.users.empty() && touch_all_users_.empty() &&
           p.lender == 0 && p.lent_to == 0 && p.pinned != epoch_ && p.host != 0;
  };
  std::size_t next = 0;
  while (next < mover_fetch_.size()) {
    auto it = pages_.find(mover_fetch_[next]);
    if (it != pages_.end() && eligible(it->second)) break;
    ++next;
  }
  mover_fetch_.erase(mover_fetch_.begin(), mover_fetch_.begin() + static_cast<std::ptrdiff_t>(next));
  // An application thread waiting for room comes first.
  if (mover_fetch_.empty() || room_waiters_ != 0) return move::idle;
  trim_spares_locked();
  if (stats_.resident_bytes + cfg_.page_bytes > capacity_bytes()) {
    // Room first: evictions the mover finishes (mover_finish_locked).
    room_wanted_ = std::max<std::size_t>(room_wanted_, 1);
    return move::idle;
  }
  const std::uintptr_t va = mover_fetch_.front();
  mover_fetch_.erase(mover_fetch_.begin());
  page& p = pages_[va];
  // The oldest batch's spare, as take_device_locked (the mover's own hand-offs need no
  // question); with none, new device memory, made below without the lock.
  CUmemGenericAllocationHandle h = 0;
  if (std::uint64_t batch_of_spare = 0; !spare_.empty()) h = take_spare_locked(batch_of_spare);
  stats_.resident_bytes += cfg_.page_bytes;  // the room is this page's from now
  p.where = state::fetching;
  ++fetching_;
  const std::uint64_t epoch = write_epoch_;
  const bool copy = !content_dead(p, epoch);
  int c = -1;
  CUevent copy_event = nullptr;
  if (copy) {
    c = new_copy_locked();
    if (c >= 0) {
      copy_event = copies_[c].event;
      copies_[c].stream = mover_stream_;
      ++copies_[c].refs;  // the page's, from the commit
    }
  }
  const std::uintptr_t shadow = p.shadow;
  const CUmemGenericAllocationHandle host = p.host;
  const std::uint64_t batch = ++next_batch_;
  lock.unlock();

  // The remap and the copy in, without the lock (the page is the mover's).
  std::uint64_t calls = 0;
  CUresult error = copy && c < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  bool mapped = false;
  const CUmemAccessDesc access = device_access(cfg_.device);
  if (error == CUDA_SUCCESS && h == 0) {
    ++calls;
    const CUmemAllocationProp prop = pool::vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, cfg_.device);
    error = d.cuMemCreate(&h, cfg_.page_bytes, &prop, 0);
    if (error != CUDA_SUCCESS) h = 0;
  }
  if (error == CUDA_SUCCESS) {
    ++calls;
    error = d.cuMemUnmap(va, cfg_.page_bytes);
  }
  if (error == CUDA_SUCCESS) {
    ++calls;
    error = d.cuMemMap(va, cfg_.page_bytes, 0, h, 0);
    if (error != CUDA_SUCCESS) {
      d.cuMemMap(va, cfg_.page_bytes, 0, host, 0);
      d.cuMemSetAccess(va, cfg_.page_bytes, &access, 1);
    } else {
      mapped = true;
      ++calls;
      error = d.cuMemSetAccess(va, cfg_.page_bytes, &access, 1);
    }
  }
  if (error == CUDA_SUCCESS && copy) {
    error = d.cuMemcpyAsync(va, shadow, cfg_.page_bytes, mover_stream_);
    if (error == CUDA_SUCCESS) error = d.cuEventRecord(copy_event, mover_stream_);
  }
  if (error != CUDA_SUCCESS && mapped) {
    // Back to the host copy, whose bytes are current, once any copy queued into the
    // device memory is done.
    d.cuStreamSynchronize(mover_stream_);
    d.cuMemUnmap(va, cfg_.page_bytes);
    d.cuMemMap(va, cfg_.page_bytes, 0, host, 0);
    d.cuMemSetAccess(va, cfg_.page_bytes, &access, 1);
  }
  // As in mover_finish_locked: a hand-off not recorded is heard at the next call.
  const CUresult handed = d.cuEventRecord(handoff_[batch % handoff_.size()], mover_stream_);

  lock.lock();
  stats_.mapping_calls += calls;
  page& q = pages_[va];
  --fetching_;
  if (error != CUDA_SUCCESS) {
    if (c >= 0 && --copies_[c].refs == 0) free_copies_.push_back(c);
    q.where = state::on_host;
    q.device = 0;
    stats_.resident_bytes -= cfg_.page_bytes;
    if (h != 0) give_device_locked(h, batch);
    mover_error_ = error;
  } else {
    if (c >= 0) {
      release_copy_locked(q);
      q.copy = c;  // its reference was taken above
      ++stats_.copies;
      stats_.bytes_to_device += cfg_.page_bytes;
    } else {
      ++stats_.dead_fetches;
    }
    q.where = state::resident;
    q.device = h;
    q.host_current = true;
    q.clean_epoch = epoch;
    ++stats_.fetches;
    ++stats_.mover_fetches;
    stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  }
  q.handoff = batch;
  batches_ = batch;
  if (error == CUDA_SUCCESS && handed != CUDA_SUCCESS) {
    error = handed;
    mover_error_ = handed;
  }
  moved_.notify_all();
  return error != CUDA_SUCCESS ? move::failed : move::worked;
}

void swap_engine::mover_main() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    move m = mover_fetch_locked(lock);
    if (m == move::idle) m = mover_finish_locked(lock);
    if (m == move::failed) break;
    if (m == move::idle) moved_.wait(lock);
  }
  // Stopped, or a driver error: evictions finish on the launching thread from now.
  mover_on_ = false;
  mover_fetch_.clear();
  moved_.notify_all();
}

}  // namespace oversub::residency
