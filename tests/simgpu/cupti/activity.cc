// simgpu's libcupti.so.13: the activity API for kernels, copies and sets.
//
// Records arrive from libcuda's activity sink (ext.h) with virtual timestamps and
// correlation ids, on the thread that enqueued the operation. They are written as
// the structs CUPTI 13 emits (CUpti_ActivityKernel10 for KERNEL and
// CONCURRENT_KERNEL, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4) into buffers
// that the client hands out through its bufferRequested callback; a full buffer,
// and on cuptiActivityFlushAll every buffer with records, goes back through
// bufferCompleted. Other activity kinds are refused with CUPTI_ERROR_NOT_SUPPORTED:
// simgpu does not produce them, and saying so beats an empty trace.
//
// Note [Records when done]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// simgpu knows each operation's virtual start and end when
// it is enqueued, and by default writes its record then. A real GPU's record exists
// only once the operation has finished, so a forced flush right after a launch gives
// no record for it. SIMGPU_CUPTI_RECORDS=when-done does the same here: records wait
// in `pending` until a flush finds the virtual clock (the host's, cuptiGetTimestamp)
// past their end; cuptiFinalize hands back all. A client that must see a kernel's
// record (oversub's learner timing its schedule's variants) is then tested against the
// lag a GPU has.
#include <atomic>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <vector>

#include "cupti_state.h"

namespace simgpu::cupti {
namespace {

// Records start on 8-byte boundaries, as in CUPTI's own buffers.
constexpr size_t kRecordAlignBytes = 8;

size_t align_up(size_t n) {
  return (n + kRecordAlignBytes - 1) / kRecordAlignBytes * kRecordAlignBytes;
}

size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    default:
      return 0;
  }
}

struct buffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  size_t used = 0;
};

struct activity_state {
  std::mutex mutex;          // the fields below
  std::mutex request_mutex;  // one buffer hand-over at a time
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  buffer current;
  size_t dropped = 0;
  int64_t next_grid_id = 1;
  std::deque<simgpuActivity> pending;  // Note [Records when done]
};

activity_state& state() {
  static activity_state* s = new activity_state;  // used from atexit flushes
  return *s;
}

std::atomic<bool> g_kernel{false};
std::atomic<bool> g_concurrent_kernel{false};
std::atomic<bool> g_memcpy{false};
std::atomic<bool> g_memset{false};

std::atomic<bool>* kind_flag(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
      return &g_kernel;
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return &g_concurrent_kernel;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return &g_memcpy;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return &g_memset;
    default:
      return nullptr;
  }
}

bool any_enabled() { return g_kernel || g_concurrent_kernel || g_memcpy || g_memset; }

void fill_kernel(const simgpuActivity& a, CUpti_ActivityKind kind, int64_t grid_id,
                 CUpti_ActivityKernel10& r) {
  r.kind = kind;
  r.start = a.start_ns;
  r.end = a.end_ns;
  r.completed = a.end_ns;
  r.deviceId = a.deviceId;
  r.contextId = a.contextId;
  r.streamId = a.streamId;
  r.gridX = static_cast<int32_t>(a.grid.x);
  r.gridY = static_cast<int32_t>(a.grid.y);
  r.gridZ = static_cast<int32_t>(a.grid.z);
  r.blockX = static_cast<int32_t>(a.block.x);
  r.blockY = static_cast<int32_t>(a.block.y);
  r.blockZ = static_cast<int32_t>(a.block.z);
  r.dynamicSharedMemory = static_cast<int32_t>(a.sharedMem);
  r.correlationId = a.correlationId;
  r.gridId = grid_id;
  r.name = a.name;
  r.queued = CUPTI_TIMESTAMP_UNKNOWN;
  r.submitted = CUPTI_TIMESTAMP_UNKNOWN;
  r.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
  r.shmemLimitConfig = CUPTI_FUNC_SHMEM_LIMIT_DEFAULT;
  r.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
}

void fill_memcpy(const simgpuActivity& a, CUpti_ActivityMemcpy6& r) {
  r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  r.copyKind = static_cast<uint8_t>(a.copyKind);
  r.srcKind = static_cast<uint8_t>(a.srcKind);
  r.dstKind = static_cast<uint8_t>(a.dstKind);
  r.bytes = a.bytes;
  r.start = a.start_ns;
  r.end = a.end_ns;
  r.deviceId = a.deviceId;
  r.contextId = a.contextId;
  r.streamId = a.streamId;
  r.correlationId = a.correlationId;
  r.runtimeCorrelationId = a.correlationId;
  r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
  r.copyCount = 1;
}

void fill_memset(const simgpuActivity& a, CUpti_ActivityMemset4& r) {
  r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  r.value = 0;  // ext.h's record does not carry the value
  r.bytes = a.bytes;
  r.start = a.start_ns;
  r.end = a.end_ns;
  r.deviceId = a.deviceId;
  r.contextId = a.contextId;
  r.streamId = a.streamId;
  r.correlationId = a.correlationId;
  r.memoryKind =
      static_cast<uint16_t>(a.dstKind != 0 ? a.dstKind : CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
}

// Hands a buffer back to the client, outside the state lock (the client may call
// cuptiActivityGetNextRecord, or even flush, from its callback).
void complete(CUpti_BuffersCallbackCompleteFunc completed, const buffer& b) {
  if (completed != nullptr && b.data != nullptr) completed(nullptr, 0, b.data, b.size, b.used);
}

// Note [Buffer hand-over]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A record that does not fit completes the current buffer and asks the client for
// a new one. Both client callbacks run without the state lock (the client may walk
// or flush buffers from them); request_mutex makes one thread at a time do the
// hand-over, and the others find the fresh buffer when they get the mutex. A record
// is dropped (and counted) when no callbacks are registered or the client gives no
// buffer big enough for it.
template <typename Record, typename Fill>
bool try_write(activity_state& s, Fill& fill) {
  std::lock_guard<std::mutex> lock(s.mutex);
  buffer& b = s.current;
  if (b.data == nullptr || align_up(b.used) + sizeof(Record) > b.size) return false;
  Record* r = reinterpret_cast<Record*>(b.data + align_up(b.used));
  std::memset(r, 0, sizeof(Record));
  fill(*r, s.next_grid_id++);
  b.used = align_up(b.used) + sizeof(Record);
  return true;
}

template <typename Record, typename Fill>
void append(Fill fill) {
  activity_state& s = state();
  if (try_write<Record>(s, fill)) return;
  std::lock_guard<std::mutex> hand_over(s.request_mutex);
  if (try_write<Record>(s, fill)) return;
  buffer full;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.requested == nullptr) {
      ++s.dropped;
      return;
    }
    full = s.current;
    s.current = buffer{};
    completed = s.completed;
    requested = s.requested;
  }
  complete(completed, full);
  buffer fresh;
  size_t max_records = 0;
  requested(&fresh.data, &fresh.size, &max_records);
  if (fresh.data == nullptr || sizeof(Record) > fresh.size ||
      reinterpret_cast<uintptr_t>(fresh.data) % kRecordAlignBytes != 0) {
    complete(completed, fresh);  // unusable: give it straight back, empty
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.dropped;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.current = fresh;
  }
  if (!try_write<Record>(s, fill)) {
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.dropped;
  }
}

bool when_done() {
  static const bool on = [] {
    const libcuda* d = driver();
    return d != nullptr && d->activity_when_done != nullptr && d->activity_when_done() != 0;
  }();
  return on;
}

void write_record(const simgpuActivity* a);

void activity_sink(void*, const simgpuActivity* a) {
  if (when_done()) {
    activity_state& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.pending.push_back(*a);
    return;
  }
  write_record(a);
}

// See Note [Records when done]: writes the pending records that ended by `now`.
void release_pending(uint64_t now) {
  activity_state& s = state();
  std::vector<simgpuActivity> due;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (auto it = s.pending.begin(); it != s.pending.end();) {
      if (it->end_ns <= now) {
        due.push_back(*it);
        it = s.pending.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const simgpuActivity& a : due) write_record(&a);
}

void write_record(const simgpuActivity* a) {
  switch (a->kind) {
    case SIMGPU_ACTIVITY_KERNEL: {
      CUpti_ActivityKind kind;
      if (g_concurrent_kernel) {
        kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      } else if (g_kernel) {
        kind = CUPTI_ACTIVITY_KIND_KERNEL;
      } else {
        return;
      }
      append<CUpti_ActivityKernel10>(
          [&](CUpti_ActivityKernel10& r, int64_t grid_id) { fill_kernel(*a, kind, grid_id, r); });
      return;
    }
    case SIMGPU_ACTIVITY_MEMCPY:
      if (!g_memcpy) return;
      append<CUpti_ActivityMemcpy6>([&](CUpti_ActivityMemcpy6& r, int64_t) { fill_memcpy(*a, r); });
      return;
    case SIMGPU_ACTIVITY_MEMSET:
      if (!g_memset) return;
      append<CUpti_ActivityMemset4>([&](CUpti_ActivityMemset4& r, int64_t) { fill_memset(*a, r); });
      return;
    default:
      return;
  }
}

void update_sink() {
  const libcuda* d = driver();
  if (d == nullptr) return;
  d->set_activity_sink(any_enabled() ? &activity_sink : nullptr, nullptr);
}

}  // namespace

void flush_activity(bool finalizing) noexcept {
  if (when_done()) {
    const libcuda* d = driver();
    release_pending(finalizing || d == nullptr || d->virtual_time_ns == nullptr
                        ? std::numeric_limits<uint64_t>::max()
                        : d->virtual_time_ns());
  }
  activity_state& s = state();
  buffer b;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.current.data == nullptr || (s.current.used == 0 && !finalizing)) return;
    b = s.current;
    s.current = buffer{};
    completed = s.completed;
  }
  complete(completed, b);
}

void disable_all_activity() noexcept {
  g_kernel = g_concurrent_kernel = g_memcpy = g_memset = false;
  update_sink();
}

}  // namespace simgpu::cupti

using namespace simgpu::cupti;

extern "C" {

SIMGPU_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  std::atomic<bool>* f = kind_flag(kind);
  if (f == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  f->store(true);
  update_sink();
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  std::atomic<bool>* f = kind_flag(kind);
  if (f == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  f->store(false);
  update_sink();
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult
cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                               CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  if (funcBufferRequested == nullptr || funcBufferCompleted == nullptr) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  activity_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.requested = funcBufferRequested;
  s.completed = funcBufferCompleted;
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes,
                                                     CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t offset = 0;
  if (*record != nullptr) {
    auto* at = reinterpret_cast<uint8_t*>(*record);
    if (at < buffer || at >= buffer + validBufferSizeBytes) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t size = record_size((*record)->kind);
    if (size == 0) return CUPTI_ERROR_INVALID_KIND;
    offset = align_up(static_cast<size_t>(at - buffer) + size);
  }
  if (offset + sizeof(CUpti_Activity) > validBufferSizeBytes) {
    *record = nullptr;
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  size_t size = record_size(next->kind);
  if (size == 0) return CUPTI_ERROR_INVALID_KIND;
  if (offset + size > validBufferSizeBytes) {
    *record = nullptr;
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  *record = next;
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;  // records are complete when written: forced or not, all go back
               // (those of finished operations: Note [Records when done])
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  flush_activity(false);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                            size_t* dropped) {
  (void)context, (void)streamId;  // one global buffer queue, as CUPTI since CUDA 11
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  activity_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *dropped = s.dropped;
  s.dropped = 0;
  return CUPTI_SUCCESS;
}

}  // extern "C"
