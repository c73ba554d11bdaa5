// Stream slots, events and tickets (see stream_fences.h).
#include "pool/stream_fences.h"

#include <algorithm>

#include "common/log.h"
#include "pool/driver_api.h"

namespace oversub::pool {

int stream_fences::slot_of(CUstream stream) noexcept {
  const CUstream key = canonical_stream(stream);
  int n = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (slots_[i].stream.load(std::memory_order_relaxed) == key) return i;
  }
  std::lock_guard<std::mutex> lock(insert_mutex_);
  n = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (slots_[i].stream.load(std::memory_order_relaxed) == key) return i;
  }
  if (n == max_slots) return no_slot;
  slots_[n].stream.store(key, std::memory_order_relaxed);
  if (n == 1) {
    // See Note [One stream needs no events] in pool/stream_fences.h: the first other
    // stream; the floor before its slot is handed out.
    std::lock_guard<std::mutex> lock(mutex_);
    one_stream_ = false;
    floor_owed_ = true;
    floor_seq_.store(never_completes, std::memory_order_release);
    record_floor_locked();
  }
  used_slots_.store(n + 1, std::memory_order_release);
  return n;
}

void stream_fences::record_floor_locked() noexcept {
  if (!floor_owed_) return;
  slot& sl = slots_[0];
  const CUstream stream = sl.stream.load(std::memory_order_relaxed);
  const driver_table& d = driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUevent e = nullptr;
  if (d.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS) {
    if (status != CU_STREAM_CAPTURE_STATUS_NONE) return;  // owed still: no event now
    e = take_event();
    if (e == nullptr) return;
    if (d.cuEventRecord(e, stream) != CUDA_SUCCESS) {
      spare_events_.push_back(e);
      return;
    }
  } else {
    // The stream is gone (destroyed: its work may still be the device's). Once, the
    // whole device is waited for instead; then there is nothing left to fence.
    if (d.cuCtxSynchronize() == CUDA_SUCCESS) {
      floor_owed_ = false;
      floor_seq_.store(0, std::memory_order_release);
    }
    return;
  }
  ++events_recorded_;
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  sl.recorded_work = sl.last_work.load(std::memory_order_relaxed);
  sl.outstanding.push_back({++sl.seq, e, sl.recorded_work});
  floor_owed_ = false;
  floor_seq_.store(sl.seq, std::memory_order_release);
}

void stream_fences::note_work(CUstream stream) noexcept {
  const int s = slot_of(stream);
  const std::uint64_t e = epoch_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (s != no_slot) slots_[s].last_work.store(e, std::memory_order_relaxed);
}

bool stream_fences::capturing(CUstream stream) noexcept {
  const driver_table& d = driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d.cuStreamIsCapturing(canonical_stream(stream), &status) != CUDA_SUCCESS) return true;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUevent stream_fences::take_event() noexcept {
  if (!spare_events_.empty()) {
    CUevent e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  if (driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

ticket stream_fences::ticket_locked(int s) noexcept {
  record_floor_locked();
  slot& sl = slots_[s];
  const std::uint64_t work = sl.last_work.load(std::memory_order_relaxed);
  if (sl.seq != 0 && sl.recorded_work >= work) {
    return ticket{static_cast<std::uint16_t>(s), sl.seq};
  }
  const CUstream stream = sl.stream.load(std::memory_order_relaxed);
  if (capturing(stream)) return ticket{static_cast<std::uint16_t>(s), never_completes};
  CUevent e = take_event();
  if (e == nullptr || driver().cuEventRecord(e, stream) != CUDA_SUCCESS) {
    if (e != nullptr) spare_events_.push_back(e);
    // Cannot fence: only the same stream may reuse the block.
    return ticket{static_cast<std::uint16_t>(s), never_completes};
  }
  ++events_recorded_;
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  sl.recorded_work = work;
  sl.outstanding.push_back({++sl.seq, e, work});
  return ticket{static_cast<std::uint16_t>(s), sl.seq};
}

void stream_fences::tickets_since(std::uint64_t alloc_epoch, ticket_set& out) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (one_stream_) return;  // Note [One stream needs no events] in pool/stream_fences.h
  const int n = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (slots_[i].last_work.load(std::memory_order_relaxed) > alloc_epoch) {
      out.add(ticket_locked(i));
    }
  }
  if (n == max_slots) out.overflow = true;  // streams beyond the table: unknown users
}

void stream_fences::ticket_on(CUstream stream, ticket_set& out) noexcept {
  const int s = slot_of(stream);
  if (s == no_slot) {
    out.overflow = true;
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (one_stream_) return;  // Note [One stream needs no events] in pool/stream_fences.h
  out.add(ticket_locked(s));
}

bool stream_fences::advance_locked(slot& sl, bool wait) noexcept {
  const driver_table& d = driver();
  bool progressed = false;
  while (!sl.outstanding.empty()) {
    const auto [seq, e, work] = sl.outstanding.front();
    const CUresult r = wait ? d.cuEventSynchronize(e) : d.cuEventQuery(e);
    if (r == CUDA_ERROR_NOT_READY) break;
    if (r != CUDA_SUCCESS) {
      // A broken event (sticky context error): nothing will complete any more.
      log::debug("pool: event query failed with CUresult {}", static_cast<int>(r));
      break;
    }
    sl.outstanding.pop_front();
    outstanding_.fetch_sub(1, std::memory_order_relaxed);
    spare_events_.push_back(e);
    sl.completed.store(seq, std::memory_order_release);
    sl.completed_work.store(work, std::memory_order_release);
    progressed = true;
  }
  return progressed;
}

std::size_t stream_fences::poll() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  record_floor_locked();
  std::size_t n = 0;
  const int used = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) n += advance_locked(slots_[i], false) ? 1 : 0;
  return n;
}

bool stream_fences::wait_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  record_floor_locked();
  bool ok = !floor_owed_;
  const int used = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    ok = cover_locked(i) && ok;
    advance_locked(slots_[i], true);
    ok = ok && slots_[i].outstanding.empty();
  }
  return ok;
}

bool stream_fences::settled(std::uint64_t epoch) const noexcept {
  const int used = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    const slot& sl = slots_[i];
    const std::uint64_t need = std::min(epoch, sl.last_work.load(std::memory_order_relaxed));
    if (sl.completed_work.load(std::memory_order_acquire) < need) return false;
  }
  return true;
}

void stream_fences::synchronize_device_locked() noexcept {
  if (driver().cuCtxSynchronize() != CUDA_SUCCESS) return;
  const std::uint64_t now = epoch_.load(std::memory_order_relaxed);
  const int used = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    slot& sl = slots_[i];
    // Everything enqueued before the synchronisation is done; what is recorded stays
    // outstanding (its queries answer at once from now on).
    const std::uint64_t w = std::min(now, sl.last_work.load(std::memory_order_relaxed));
    if (sl.completed_work.load(std::memory_order_relaxed) < w) {
      sl.completed_work.store(w, std::memory_order_release);
    }
  }
}

bool stream_fences::cover_locked(int s) noexcept {
  slot& sl = slots_[s];
  const std::uint64_t work = sl.last_work.load(std::memory_order_relaxed);
  if (sl.recorded_work >= work || sl.completed_work.load(std::memory_order_relaxed) >= work) {
    return true;
  }
  const driver_table& d = driver();
  const CUstream stream = sl.stream.load(std::memory_order_relaxed);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d.cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS) {
    synchronize_device_locked();  // the stream is gone
    return sl.completed_work.load(std::memory_order_relaxed) >= work;
  }
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) return false;
  const ticket t = ticket_locked(s);
  return t.seq != never_completes;
}

void stream_fences::fence_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  record_floor_locked();
  const int used = used_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    cover_locked(i);
    advance_locked(slots_[i], false);
  }
}

stream_fences& fences() noexcept {
  static stream_fences* instance = new stream_fences;
  return *instance;
}

}  // namespace oversub::pool
