// Stream capture and graph replay (see capture.h).
#include "capture.h"

#include <set>

#include "device.h"
#include "fault_injection.h"

namespace simgpu {

namespace {

std::set<capture_seq*> g_captures;  // active captures
std::set<graph_obj*> g_graphs;
std::set<graph_exec_obj*> g_execs;
uint64_t g_next_capture_id = 1;
thread_local int t_replaying = 0;
thread_local CUstreamCaptureMode t_interaction_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

void invalidate(capture_seq* c) { c->invalidated = true; }

// Whether capture c forbids an unsafe call from this thread, given the thread's
// interaction mode (cuThreadExchangeStreamCaptureMode): relaxed threads may make
// unsafe calls; thread-local threads are held only by their own captures; global
// threads by every global capture and by their own thread-local ones.
bool forbids(const capture_seq* c) {
  if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  if (t_interaction_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  bool mine = pthread_equal(c->thread, pthread_self()) != 0;
  if (t_interaction_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) return mine;
  return c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mine;
}

}  // namespace

CUresult capture_gate(stream_obj* s, bool* record) {
  *record = false;
  if (s->capture != nullptr) {
    if (s->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    *record = true;
    return CUDA_SUCCESS;
  }
  if (s->legacy) {
    for (capture_seq* c : g_captures) {
      bool blocking = false;
      for (stream_obj* m : c->members) blocking |= m->blocking();
      if (blocking && !c->invalidated) {
        invalidate(c);
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      }
    }
  }
  return CUDA_SUCCESS;
}

void capture_add(stream_obj* s, std::string what, std::function<CUresult(stream_obj*)> replay) {
  s->capture->graph->nodes.push_back(graph_node{std::move(what), std::move(replay)});
}

CUresult capture_unsafe_call() {
  CUresult r = CUDA_SUCCESS;
  for (capture_seq* c : g_captures) {
    if (forbids(c)) {
      invalidate(c);
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return r;
}

CUresult capture_sync_gate(stream_obj* s) {
  if (s->capture != nullptr) {
    invalidate(s->capture);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (s->legacy) return capture_unsafe_call();
  return CUDA_SUCCESS;
}

CUresult capture_begin(stream_obj* s, CUstreamCaptureMode mode) {
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  auto* c = new capture_seq();
  c->id = g_next_capture_id++;
  c->mode = mode;
  c->origin = s;
  c->graph = new graph_obj();
  c->thread = pthread_self();
  c->members.push_back(s);
  s->capture = c;
  g_captures.insert(c);
  return CUDA_SUCCESS;
}

CUresult capture_end(stream_obj* s, CUgraph* graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  capture_seq* c = s->capture;
  if (c == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (c->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      !pthread_equal(c->thread, pthread_self()))
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  for (stream_obj* m : c->members) m->capture = nullptr;
  g_captures.erase(c);
  CUresult r = CUDA_SUCCESS;
  if (c->invalidated) {
    delete c->graph;
    *graph = nullptr;
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    g_graphs.insert(c->graph);
    *graph = reinterpret_cast<CUgraph>(c->graph);
  }
  delete c;
  return r;
}

CUstreamCaptureStatus capture_status(stream_obj* s, uint64_t* id) {
  if (s->capture == nullptr) {
    if (id) *id = 0;
    return CU_STREAM_CAPTURE_STATUS_NONE;
  }
  if (id) *id = s->capture->id;
  return s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                 : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

CUresult capture_event_wait(stream_obj* s, event_obj* e, bool* handled) {
  *handled = false;
  if (e->capture != nullptr && g_captures.count(e->capture)) {
    *handled = true;
    if (s->capture == nullptr) {
      s->capture = e->capture;
      e->capture->members.push_back(s);
      return CUDA_SUCCESS;
    }
    if (s->capture != e->capture) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    return CUDA_SUCCESS;
  }
  if (s->capture != nullptr) {
    // Waiting on an event from outside the capture: CUDA rejects it.
    *handled = true;
    invalidate(s->capture);
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  return CUDA_SUCCESS;
}

void capture_event_record(stream_obj* s, event_obj* e) { e->capture = s->capture; }

bool event_in_live_capture(const event_obj* e) {
  return e->capture != nullptr && g_captures.count(e->capture) != 0;
}

CUresult exchange_capture_mode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode m = *mode;
  if (m != CU_STREAM_CAPTURE_MODE_GLOBAL && m != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      m != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  *mode = t_interaction_mode;
  t_interaction_mode = m;
  return CUDA_SUCCESS;
}

bool valid_graph(CUgraph g) { return g_graphs.count(reinterpret_cast<graph_obj*>(g)) != 0; }
bool valid_graph_exec(CUgraphExec g) {
  return g_execs.count(reinterpret_cast<graph_exec_obj*>(g)) != 0;
}

CUresult graph_instantiate(CUgraphExec* out, CUgraph g) {
  if (out == nullptr || !valid_graph(g)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult f = inject_failure(fail_kind::graph_instantiate); f != CUDA_SUCCESS) return f;
  auto* e = new graph_exec_obj();
  e->nodes = reinterpret_cast<graph_obj*>(g)->nodes;
  g_execs.insert(e);
  *out = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

CUresult graph_launch(CUgraphExec g, stream_obj* s) {
  if (!valid_graph_exec(g)) return CUDA_ERROR_INVALID_VALUE;
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult f = inject_failure(fail_kind::graph_launch); f != CUDA_SUCCESS) return f;
  // One enqueue: the replayed nodes cost no further host time (op_begin).
  clock_host_advance(dev().model.launch_enqueue_ns, host_family::launch);
  ++t_replaying;
  CUresult r = CUDA_SUCCESS;
  for (const graph_node& n : reinterpret_cast<graph_exec_obj*>(g)->nodes) {
    r = n.replay(s);
    if (r != CUDA_SUCCESS) break;
  }
  --t_replaying;
  return r;
}

bool in_graph_replay() { return t_replaying > 0; }

void graph_destroy(CUgraph g) {
  auto* p = reinterpret_cast<graph_obj*>(g);
  g_graphs.erase(p);
  delete p;
}

void graph_exec_destroy(CUgraphExec g) {
  auto* p = reinterpret_cast<graph_exec_obj*>(g);
  g_execs.erase(p);
  delete p;
}

}  // namespace simgpu
