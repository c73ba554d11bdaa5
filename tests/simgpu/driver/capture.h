// Stream capture and graphs. While a stream captures, its launches, copies and
// memsets are recorded as graph nodes (not run); cuGraphLaunch replays them in
// capture order on a stream. Synchronising calls that CUDA forbids during capture
// fail and invalidate the capture as CUDA does.
//
// Note [Captured graphs are linear]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A real graph keeps the fork/join edges of the captured streams; simgpu records
// one sequence in capture order and replays it on the launch stream. That is a
// valid schedule of the real graph (its topological order), so results are the
// same and ordering is at least as strong; the virtual time of a replay is that of
// a serial execution.
#ifndef SIMGPU_DRIVER_CAPTURE_H
#define SIMGPU_DRIVER_CAPTURE_H

#include <cuda.h>
#include <pthread.h>

#include <functional>
#include <string>
#include <vector>

#include "clock.h"

namespace simgpu {

struct graph_node {
  std::string what;
  std::function<CUresult(stream_obj*)> replay;
};

struct graph_obj {
  uint32_t magic = 0x47525048;  // "GRPH"
  std::vector<graph_node> nodes;
};

struct graph_exec_obj {
  uint32_t magic = 0x47455845;  // "GEXE"
  std::vector<graph_node> nodes;
};

struct capture_seq {
  uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  stream_obj* origin = nullptr;
  graph_obj* graph = nullptr;
  bool invalidated = false;
  pthread_t thread{};
  std::vector<stream_obj*> members;
};

// Before enqueueing work on s: answers CUDA_SUCCESS, or the capture error to return
// (the legacy stream used while a blocking stream captures, an invalidated capture).
// Sets *record when the work must be recorded into s->capture instead of run.
CUresult capture_gate(stream_obj* s, bool* record);
void capture_add(stream_obj* s, std::string what, std::function<CUresult(stream_obj*)> replay);

// A call CUDA deems unsafe during capture (synchronisation, cuMemAlloc, ...):
// answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and invalidates the capture) when a
// capture whose mode forbids it is active, else CUDA_SUCCESS.
CUresult capture_unsafe_call();
// Synchronising on s itself while it captures.
CUresult capture_sync_gate(stream_obj* s);

CUresult capture_begin(stream_obj* s, CUstreamCaptureMode mode);
CUresult capture_end(stream_obj* s, CUgraph* graph);
CUstreamCaptureStatus capture_status(stream_obj* s, uint64_t* id);
// An event recorded in a capturing stream carries the capture; a stream waiting on
// it joins the capture (fork); a capturing stream waiting on an outside event is
// an isolation error.
CUresult capture_event_wait(stream_obj* s, event_obj* e, bool* handled);
void capture_event_record(stream_obj* s, event_obj* e);
// Whether e was recorded into a capture that is still going on.
bool event_in_live_capture(const event_obj* e);

// cuThreadExchangeStreamCaptureMode: swaps the calling thread's interaction mode.
CUresult exchange_capture_mode(CUstreamCaptureMode* mode);

bool valid_graph(CUgraph g);
bool valid_graph_exec(CUgraphExec g);
CUresult graph_instantiate(CUgraphExec* out, CUgraph g);
CUresult graph_launch(CUgraphExec g, stream_obj* s);
// Whether the calling thread is replaying a graph (its nodes cost no host time:
// one cuGraphLaunch is one enqueue).
bool in_graph_replay();
void graph_destroy(CUgraph g);
void graph_exec_destroy(CUgraphExec g);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_CAPTURE_H
