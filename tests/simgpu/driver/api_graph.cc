// Driver entry points: stream capture and graphs (see capture.h), with _ptsz
// exports for the stream-taking ones.
#include "api.h"
#include "capture.h"

using namespace simgpu;

namespace {

CUresult begin(CUstream h, CUstreamCaptureMode mode, bool ptds) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return capture_begin(s, mode);
}

CUresult end(CUstream h, CUgraph* g, bool ptds) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return capture_end(s, g);
}

CUresult is_capturing(CUstream h, CUstreamCaptureStatus* st, bool ptds) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s->legacy) {
    // Querying the legacy stream while a blocking stream captures is an error.
    bool record = false;
    if (CUresult g = capture_gate(s, &record); g != CUDA_SUCCESS) return g;
  }
  *st = capture_status(s, nullptr);
  return CUDA_SUCCESS;
}

CUresult info(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* graph,
              const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps, bool ptds) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t cid = 0;
  *st = capture_status(s, &cid);
  if (id) *id = cid;
  if (graph) *graph = s->capture ? reinterpret_cast<CUgraph>(s->capture->graph) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (ndeps) *ndeps = 0;
  return CUDA_SUCCESS;
}

CUresult launch_graph(CUgraphExec g, CUstream h, bool ptds) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return graph_launch(g, s);
}

}  // namespace

SIMGPU_EXPORT CUresult cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
  SIMGPU_API(context, cuStreamBeginCapture_v2, hStream, mode);
  SIMGPU_RETURN(begin(hStream, mode, false));
}
SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  SIMGPU_API(context, cuStreamBeginCapture_v2_ptsz, hStream, mode);
  SIMGPU_RETURN(begin(hStream, mode, true));
}
SIMGPU_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  SIMGPU_API(context, cuStreamEndCapture, hStream, phGraph);
  SIMGPU_RETURN(end(hStream, phGraph, false));
}
SIMGPU_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  SIMGPU_API(context, cuStreamEndCapture_ptsz, hStream, phGraph);
  SIMGPU_RETURN(end(hStream, phGraph, true));
}
SIMGPU_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  SIMGPU_API(context, cuStreamIsCapturing, hStream, captureStatus);
  SIMGPU_RETURN(is_capturing(hStream, captureStatus, false));
}
SIMGPU_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus* captureStatus) {
  SIMGPU_API(context, cuStreamIsCapturing_ptsz, hStream, captureStatus);
  SIMGPU_RETURN(is_capturing(hStream, captureStatus, true));
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream,
                                              CUstreamCaptureStatus* captureStatus_out,
                                              cuuint64_t* id_out, CUgraph* graph_out,
                                              const CUgraphNode** dependencies_out,
                                              const CUgraphEdgeData** edgeData_out,
                                              size_t* numDependencies_out) {
  SIMGPU_API(context, cuStreamGetCaptureInfo_v3, hStream, captureStatus_out, id_out, graph_out,
             dependencies_out, edgeData_out, numDependencies_out);
  SIMGPU_RETURN(info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                     edgeData_out, numDependencies_out, false));
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                      CUstreamCaptureStatus* captureStatus_out,
                                                      cuuint64_t* id_out, CUgraph* graph_out,
                                                      const CUgraphNode** dependencies_out,
                                                      const CUgraphEdgeData** edgeData_out,
                                                      size_t* numDependencies_out) {
  SIMGPU_API(context, cuStreamGetCaptureInfo_v3_ptsz, hStream, captureStatus_out, id_out,
             graph_out, dependencies_out, edgeData_out, numDependencies_out);
  SIMGPU_RETURN(info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                     edgeData_out, numDependencies_out, true));
}

SIMGPU_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  SIMGPU_API(device, cuThreadExchangeStreamCaptureMode, mode);
  SIMGPU_RETURN(exchange_capture_mode(mode));
}

SIMGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   unsigned long long flags) {
  SIMGPU_API(context, cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags);
  SIMGPU_RETURN(graph_instantiate(phGraphExec, hGraph));
}

SIMGPU_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  SIMGPU_API(context, cuGraphLaunch, hGraphExec, hStream);
  SIMGPU_RETURN(launch_graph(hGraphExec, hStream, false));
}
SIMGPU_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  SIMGPU_API(context, cuGraphLaunch_ptsz, hGraphExec, hStream);
  SIMGPU_RETURN(launch_graph(hGraphExec, hStream, true));
}

SIMGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  SIMGPU_API(context, cuGraphExecDestroy, hGraphExec);
  if (!valid_graph_exec(hGraphExec)) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  graph_exec_destroy(hGraphExec);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  SIMGPU_API(context, cuGraphDestroy, hGraph);
  if (!valid_graph(hGraph)) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  graph_destroy(hGraph);
  SIMGPU_RETURN(CUDA_SUCCESS);
}
