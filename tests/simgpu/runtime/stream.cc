// simgpu's libcudart.so.13: streams, events, stream capture and graphs. The
// runtime's handles are the driver's (cudaStream_t is CUstream, cudaEvent_t is
// CUevent, cudaGraph_t is CUgraph), so every call here is a forward; the _ptsz
// forms read stream 0 as the per-thread default stream.
#include "runtime_state.h"

using simgpu::rt::ctx;
using simgpu::rt::ctx_pt;
using simgpu::rt::per_thread_stream;

static_assert(static_cast<int>(cudaStreamNonBlocking) == CU_STREAM_NON_BLOCKING);
static_assert(static_cast<int>(cudaEventDisableTiming) == CU_EVENT_DISABLE_TIMING);
static_assert(static_cast<int>(cudaStreamCaptureModeRelaxed) == CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(static_cast<int>(cudaStreamCaptureStatusActive) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData));

namespace {

cudaError_t capture_info(const simgpu::rt::driver_table& d, cudaStream_t stream,
                         cudaStreamCaptureStatus* status, unsigned long long* id,
                         cudaGraph_t* graph, const cudaGraphNode_t** deps,
                         const cudaGraphEdgeData** edges, size_t* count) {
  return simgpu::rt::to_cuda_error(
      SIMGPU_CU(d, cuStreamGetCaptureInfo, stream, reinterpret_cast<CUstreamCaptureStatus*>(status),
                reinterpret_cast<cuuint64_t*>(id), graph, deps,
                reinterpret_cast<const CUgraphEdgeData**>(edges), count));
}

}  // namespace

extern "C" {

// ---- Streams -------------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  SIMGPU_RT_CALL(ctx, cudaStreamCreate_v3020, pStream);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamCreate, pStream, 0u));
}

SIMGPU_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaStreamCreateWithFlags_v5000, pStream, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamCreate, pStream, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                                       int priority) {
  SIMGPU_RT_CALL(ctx, cudaStreamCreateWithPriority_v5050, pStream, flags, priority);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamCreateWithPriority, pStream, flags, priority));
}

SIMGPU_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaStreamDestroy_v5050, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamDestroy, stream));
}

SIMGPU_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaStreamSynchronize_v3020, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamSynchronize, stream));
}

SIMGPU_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamSynchronize_ptsz_v7000, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamSynchronize, per_thread_stream(stream)));
}

SIMGPU_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaStreamQuery_v3020, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamQuery, stream));
}

SIMGPU_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamQuery_ptsz_v7000, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamQuery, per_thread_stream(stream)));
}

SIMGPU_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                              unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaStreamWaitEvent_v3020, stream, event, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamWaitEvent, stream, event, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                   unsigned int flags) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamWaitEvent_ptsz_v7000, stream, event, flags);
  return api.finish(
      SIMGPU_CU(api.drv(), cuStreamWaitEvent, per_thread_stream(stream), event, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  SIMGPU_RT_CALL(ctx, cudaStreamGetFlags_v5050, hStream, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamGetFlags, hStream, flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int* flags) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamGetFlags_ptsz_v7000, hStream, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamGetFlags, per_thread_stream(hStream), flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  SIMGPU_RT_CALL(ctx, cudaStreamGetPriority_v5050, hStream, priority);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamGetPriority, hStream, priority));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int* priority) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamGetPriority_ptsz_v7000, hStream, priority);
  return api.finish(
      SIMGPU_CU(api.drv(), cuStreamGetPriority, per_thread_stream(hStream), priority));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  SIMGPU_RT_CALL(ctx, cudaStreamGetId_v12000, hStream, streamId);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamGetId, hStream, streamId));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long* streamId) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamGetId_ptsz_v12000, hStream, streamId);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamGetId, per_thread_stream(hStream), streamId));
}

// ---- Events --------------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) {
  SIMGPU_RT_CALL(ctx, cudaEventCreate_v3020, event);
  return api.finish(SIMGPU_CU(api.drv(), cuEventCreate, event, 0u));
}

SIMGPU_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaEventCreateWithFlags_v3020, event, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuEventCreate, event, flags));
}

SIMGPU_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaEventRecord_v3020, event, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuEventRecord, event, stream));
}

SIMGPU_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaEventRecord_ptsz_v7000, event, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuEventRecord, event, per_thread_stream(stream)));
}

SIMGPU_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                   unsigned int flags) {
  SIMGPU_RT_CALL(ctx, cudaEventRecordWithFlags_v11010, event, stream, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuEventRecordWithFlags, event, stream, flags));
}

SIMGPU_EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                                        unsigned int flags) {
  SIMGPU_RT_CALL(ctx_pt, cudaEventRecordWithFlags_ptsz_v11010, event, stream, flags);
  return api.finish(
      SIMGPU_CU(api.drv(), cuEventRecordWithFlags, event, per_thread_stream(stream), flags));
}

SIMGPU_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  SIMGPU_RT_CALL(ctx, cudaEventSynchronize_v3020, event);
  return api.finish(SIMGPU_CU(api.drv(), cuEventSynchronize, event));
}

SIMGPU_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  SIMGPU_RT_CALL(ctx, cudaEventQuery_v3020, event);
  return api.finish(SIMGPU_CU(api.drv(), cuEventQuery, event));
}

SIMGPU_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  SIMGPU_RT_CALL(ctx, cudaEventElapsedTime_v12080, ms, start, end);
  return api.finish(SIMGPU_CU(api.drv(), cuEventElapsedTime, ms, start, end));
}

SIMGPU_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  SIMGPU_RT_CALL(ctx, cudaEventDestroy_v3020, event);
  return api.finish(SIMGPU_CU(api.drv(), cuEventDestroy, event));
}

// ---- Stream capture ------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  SIMGPU_RT_CALL(ctx, cudaStreamBeginCapture_v10000, stream, mode);
  return api.finish(
      SIMGPU_CU(api.drv(), cuStreamBeginCapture, stream, static_cast<CUstreamCaptureMode>(mode)));
}

SIMGPU_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                      cudaStreamCaptureMode mode) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamBeginCapture_ptsz_v10000, stream, mode);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamBeginCapture, per_thread_stream(stream),
                              static_cast<CUstreamCaptureMode>(mode)));
}

SIMGPU_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  SIMGPU_RT_CALL(ctx, cudaStreamEndCapture_v10000, stream, pGraph);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamEndCapture, stream, pGraph));
}

SIMGPU_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* pGraph) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamEndCapture_ptsz_v10000, stream, pGraph);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamEndCapture, per_thread_stream(stream), pGraph));
}

SIMGPU_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                cudaStreamCaptureStatus* pCaptureStatus) {
  SIMGPU_RT_CALL(ctx, cudaStreamIsCapturing_v10000, stream, pCaptureStatus);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamIsCapturing, stream,
                              reinterpret_cast<CUstreamCaptureStatus*>(pCaptureStatus)));
}

SIMGPU_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                     cudaStreamCaptureStatus* pCaptureStatus) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamIsCapturing_ptsz_v10000, stream, pCaptureStatus);
  return api.finish(SIMGPU_CU(api.drv(), cuStreamIsCapturing, per_thread_stream(stream),
                              reinterpret_cast<CUstreamCaptureStatus*>(pCaptureStatus)));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetCaptureInfo(
    cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out, unsigned long long* id_out,
    cudaGraph_t* graph_out, const cudaGraphNode_t** dependencies_out,
    const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  SIMGPU_RT_CALL(ctx, cudaStreamGetCaptureInfo_v12030, stream, captureStatus_out, id_out, graph_out,
                 dependencies_out, edgeData_out, numDependencies_out);
  return api.finish(capture_info(api.drv(), stream, captureStatus_out, id_out, graph_out,
                                 dependencies_out, edgeData_out, numDependencies_out));
}

SIMGPU_EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(
    cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out, unsigned long long* id_out,
    cudaGraph_t* graph_out, const cudaGraphNode_t** dependencies_out,
    const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  SIMGPU_RT_CALL(ctx_pt, cudaStreamGetCaptureInfo_ptsz_v12030, stream, captureStatus_out, id_out,
                 graph_out, dependencies_out, edgeData_out, numDependencies_out);
  return api.finish(capture_info(api.drv(), per_thread_stream(stream), captureStatus_out, id_out,
                                 graph_out, dependencies_out, edgeData_out, numDependencies_out));
}

SIMGPU_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  SIMGPU_RT_CALL(ctx, cudaThreadExchangeStreamCaptureMode_v10010, mode);
  return api.finish(SIMGPU_CU(api.drv(), cuThreadExchangeStreamCaptureMode,
                              reinterpret_cast<CUstreamCaptureMode*>(mode)));
}

// ---- Graphs --------------------------------------------------------------------------

SIMGPU_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                               unsigned long long flags) {
  SIMGPU_RT_CALL(ctx, cudaGraphInstantiate_v12000, pGraphExec, graph, flags);
  return api.finish(SIMGPU_CU(api.drv(), cuGraphInstantiateWithFlags, pGraphExec, graph, flags));
}

SIMGPU_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaGraphLaunch_v10000, graphExec, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuGraphLaunch, graphExec, stream));
}

SIMGPU_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaGraphLaunch_ptsz_v10000, graphExec, stream);
  return api.finish(SIMGPU_CU(api.drv(), cuGraphLaunch, graphExec, per_thread_stream(stream)));
}

SIMGPU_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  SIMGPU_RT_CALL(ctx, cudaGraphExecDestroy_v10000, graphExec);
  return api.finish(SIMGPU_CU(api.drv(), cuGraphExecDestroy, graphExec));
}

SIMGPU_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  SIMGPU_RT_CALL(ctx, cudaGraphDestroy_v10000, graph);
  return api.finish(SIMGPU_CU(api.drv(), cuGraphDestroy, graph));
}

}  // extern "C"
