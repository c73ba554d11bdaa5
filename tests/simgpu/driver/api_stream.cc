// Driver entry points: streams and events (see Note [Virtual clock] in
// tests/simgpu/driver/clock.h and Note [Legacy default stream] in clock.h), with their
// _ptsz exports.
#include "api.h"
#include "capture.h"
#include "clock.h"
#include "fault_injection.h"

using namespace simgpu;

namespace {

stream_obj* S(CUstream h, bool ptds) { return resolve_stream(h, ptds); }
event_obj* E(CUevent e) { return valid_event(e) ? reinterpret_cast<event_obj*>(e) : nullptr; }

CUresult stream_sync(CUstream h, bool ptds) {
  stream_obj* s = S(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult c = capture_sync_gate(s); c != CUDA_SUCCESS) return c;
  if (s->legacy) host_wait_legacy();  // it is ordered after every blocking stream
  else host_wait_stream(s);
  return CUDA_SUCCESS;
}

CUresult stream_query(CUstream h, bool ptds) {
  stream_obj* s = S(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  clock_host_advance(dev().model.api_overhead_ns, host_family::stream_query);  // polling takes host time
  return stream_done(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult wait_event(CUstream h, CUevent ev, unsigned flags, bool ptds) {
  stream_obj* s = S(h, ptds);
  event_obj* e = E(ev);
  if (s == nullptr || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~unsigned{CU_EVENT_WAIT_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  clock_host_advance(dev().model.stream_wait_event_ns, host_family::stream_wait);
  bool handled = false;
  CUresult r = capture_event_wait(s, e, &handled);
  if (handled) return r;
  stream_wait_event(s, e);
  return CUDA_SUCCESS;
}

CUresult record(CUevent ev, CUstream h, unsigned flags, bool ptds) {
  stream_obj* s = S(h, ptds);
  event_obj* e = E(ev);
  if (s == nullptr || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  bool in_capture = false;
  if (CUresult g = capture_gate(s, &in_capture); g != CUDA_SUCCESS) return g;
  if (in_capture) {
    capture_event_record(s, e);
    return CUDA_SUCCESS;
  }
  if (CUresult f = inject_failure(fail_kind::event); f != CUDA_SUCCESS) return f;
  e->capture = nullptr;
  event_record(e, s);
  return CUDA_SUCCESS;
}

CUresult get_id(CUstream h, unsigned long long* id, bool ptds) {
  stream_obj* s = S(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *id = s->id;
  return CUDA_SUCCESS;
}

CUresult get_flags(CUstream h, unsigned* flags, bool ptds) {
  stream_obj* s = S(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

CUresult get_priority(CUstream h, int* priority, bool ptds) {
  stream_obj* s = S(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

CUresult get_ctx(CUstream h, CUcontext* ctx, bool ptds) {
  stream_obj* s = S(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = primary_context();
  return CUDA_SUCCESS;
}

CUresult elapsed(float* ms, CUevent a, CUevent b) {
  event_obj* s = E(a);
  event_obj* e = E(b);
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s == nullptr || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!s->recorded || !e->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!event_done(s) || !event_done(e)) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>((e->time_ns - s->time_ns) / 1e6);
  return CUDA_SUCCESS;
}

}  // namespace

// ---- streams ---------------------------------------------------------------------------

SIMGPU_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  SIMGPU_API(context, cuStreamCreate, phStream, Flags);
  if (phStream == nullptr || (Flags & ~unsigned{CU_STREAM_NON_BLOCKING}))
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *phStream = reinterpret_cast<CUstream>(create_stream(Flags, 0));
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                                  int priority) {
  SIMGPU_API(context, cuStreamCreateWithPriority, phStream, flags, priority);
  if (phStream == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}))
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (priority > 0) priority = 0;     // clamped to [greatest, least] = [-5, 0]
  if (priority < -5) priority = -5;
  *phStream = reinterpret_cast<CUstream>(create_stream(flags, priority));
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  SIMGPU_API(context, cuCtxGetStreamPriorityRange, leastPriority, greatestPriority);
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuStreamDestroy(CUstream hStream) {
  SIMGPU_API(context, cuStreamDestroy_v2, hStream);
  stream_obj* s = S(hStream, false);
  if (s == nullptr || !is_user_stream(s)) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (s->capture != nullptr) SIMGPU_RETURN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  destroy_stream(s);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  SIMGPU_API(context, cuStreamSynchronize, hStream);
  SIMGPU_RETURN(stream_sync(hStream, false));
}
SIMGPU_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  SIMGPU_API(context, cuStreamSynchronize_ptsz, hStream);
  SIMGPU_RETURN(stream_sync(hStream, true));
}
SIMGPU_EXPORT CUresult cuStreamQuery(CUstream hStream) {
  SIMGPU_API(context, cuStreamQuery, hStream);
  SIMGPU_RETURN(stream_query(hStream, false));
}
SIMGPU_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) {
  SIMGPU_API(context, cuStreamQuery_ptsz, hStream);
  SIMGPU_RETURN(stream_query(hStream, true));
}
SIMGPU_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  SIMGPU_API(context, cuStreamWaitEvent, hStream, hEvent, Flags);
  SIMGPU_RETURN(wait_event(hStream, hEvent, Flags, false));
}
SIMGPU_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                              unsigned int Flags) {
  SIMGPU_API(context, cuStreamWaitEvent_ptsz, hStream, hEvent, Flags);
  SIMGPU_RETURN(wait_event(hStream, hEvent, Flags, true));
}
SIMGPU_EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  SIMGPU_API(context, cuStreamGetId, hStream, streamId);
  SIMGPU_RETURN(get_id(hStream, streamId, false));
}
SIMGPU_EXPORT CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long* streamId) {
  SIMGPU_API(context, cuStreamGetId_ptsz, hStream, streamId);
  SIMGPU_RETURN(get_id(hStream, streamId, true));
}
SIMGPU_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  SIMGPU_API(context, cuStreamGetFlags, hStream, flags);
  SIMGPU_RETURN(get_flags(hStream, flags, false));
}
SIMGPU_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  SIMGPU_API(context, cuStreamGetFlags_ptsz, hStream, flags);
  SIMGPU_RETURN(get_flags(hStream, flags, true));
}
SIMGPU_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
  SIMGPU_API(context, cuStreamGetPriority, hStream, priority);
  SIMGPU_RETURN(get_priority(hStream, priority, false));
}
SIMGPU_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  SIMGPU_API(context, cuStreamGetPriority_ptsz, hStream, priority);
  SIMGPU_RETURN(get_priority(hStream, priority, true));
}
SIMGPU_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  SIMGPU_API(context, cuStreamGetCtx, hStream, pctx);
  SIMGPU_RETURN(get_ctx(hStream, pctx, false));
}
SIMGPU_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  SIMGPU_API(context, cuStreamGetCtx_ptsz, hStream, pctx);
  SIMGPU_RETURN(get_ctx(hStream, pctx, true));
}

// ---- events ----------------------------------------------------------------------------

SIMGPU_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  SIMGPU_API(context, cuEventCreate, phEvent, Flags);
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~known)) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *phEvent = reinterpret_cast<CUevent>(create_event(Flags));
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuEventDestroy(CUevent hEvent) {
  SIMGPU_API(context, cuEventDestroy_v2, hEvent);
  event_obj* e = E(hEvent);
  if (e == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  destroy_event(e);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  SIMGPU_API(context, cuEventRecord, hEvent, hStream);
  SIMGPU_RETURN(record(hEvent, hStream, 0, false));
}
SIMGPU_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  SIMGPU_API(context, cuEventRecord_ptsz, hEvent, hStream);
  SIMGPU_RETURN(record(hEvent, hStream, 0, true));
}
SIMGPU_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream,
                                              unsigned int flags) {
  SIMGPU_API(context, cuEventRecordWithFlags, hEvent, hStream, flags);
  SIMGPU_RETURN(record(hEvent, hStream, flags, false));
}
SIMGPU_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                   unsigned int flags) {
  SIMGPU_API(context, cuEventRecordWithFlags_ptsz, hEvent, hStream, flags);
  SIMGPU_RETURN(record(hEvent, hStream, flags, true));
}

SIMGPU_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  SIMGPU_API(context, cuEventSynchronize, hEvent);
  event_obj* e = E(hEvent);
  if (e == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (event_in_live_capture(e)) SIMGPU_RETURN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  host_wait_event(e);
  clock_host_advance(dev().model.event_sync_ns, host_family::event_sync);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  SIMGPU_API(context, cuEventQuery, hEvent);
  event_obj* e = E(hEvent);
  if (e == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (event_in_live_capture(e)) SIMGPU_RETURN(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  clock_host_advance(dev().model.event_query_ns, host_family::event_query);  // polling takes host time
  SIMGPU_RETURN(event_done(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

SIMGPU_EXPORT CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  SIMGPU_API(context, cuEventElapsedTime_v2, pMilliseconds, hStart, hEnd);
  SIMGPU_RETURN(elapsed(pMilliseconds, hStart, hEnd));
}

// The pre-13 export of the same function (identical signature).
extern "C" __attribute__((visibility("default"))) CUresult simgpu_cuEventElapsedTime_v1(
    float* ms, CUevent a, CUevent b) __asm__("cuEventElapsedTime");
CUresult simgpu_cuEventElapsedTime_v1(float* ms, CUevent a, CUevent b) {
  SIMGPU_API(context, cuEventElapsedTime, ms, a, b);
  SIMGPU_RETURN(elapsed(ms, a, b));
}
