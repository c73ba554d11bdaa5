// Streams, events, engines and the virtual clock.
//
// Note [Virtual clock]
// ~~~~~~~~~~~~~~~~~~~~
// Work runs eagerly, in issue order, on the calling thread (results are
// deterministic); time is modelled separately. The host has a time (host_ns) that
// advances by the model's cost of each call (Note [Issue time]) and jumps forward to the
// completion time on every synchronising call. Each stream has a tail (when its
// last operation ends) and each engine (compute: kernels, memsets, device-to-device
// copies; the H2D and D2H copy engines) is busy while its operations run. An
// operation is ready at max(stream tail, host_ns [+ launch latency for kernels and
// memsets], legacy-stream dependencies); on the compute engine it starts once that
// engine's last operation has ended (kernels run one at a time, in issue order), on a
// copy engine at the first idle span of its length (Note [Copy engines serve ready
// copies]). It ends after its modelled duration. Events carry the time at which their
// stream reaches them.
//
// Note [Copy engines serve ready copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A copy waiting on its stream (an event from a kernel not yet done, a managed
// prefetch waiting for room on the device) does not hold its copy engine: a copy
// issued later on another stream that is ready runs in the idle time before it, as a
// GPU's host interface serves the channel whose work is ready while another waits on
// a semaphore (and a managed prefetch runs on the UVM driver's own channels). A copy
// that does not fit whole into such a gap runs after the work placed there: harsher
// than a GPU, which would share the link between the two. Kept for the copy engines
// only: kernels on several streams still run one at a time, in issue order. The GPU
// kit's gpu_facts measures it (copy_beside_blocked); a model's
// `copy_engines_serve_ready = 0` (or SIMGPU_COPY_GAPS=0) runs copies in issue order.
//
// Note [Issue time]
// ~~~~~~~~~~~~~~~~~
// An operation (event records included) is issued at the host time when its call
// begins, and the host returns its call family's cost later (launch_enqueue_ns,
// copy_enqueue_ns, event_record_ns, else api_overhead_ns: Note [Driver call costs]
// in device_model.cc). So on an idle stream an event recorded at host time t is
// reached at t, and a kernel enqueued next is issued at t + event_record_ns and
// starts launch_latency_ns after that; an event recorded right after a synchronous
// copy carries the copy's end time. Allocation calls cost host time too
// (api_overhead_ns; the VMM calls their own per-call and per-page figures).
//
// Note [A clock per host thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each host thread has its own host time: a thread's calls cost its own time, and its
// waits move only its own clock. A second thread (a page mover, a data loader) works
// in parallel with the first, as on a real machine, and what it costs shows where it
// is paid. Threads meet in time only where simgpu can see it, and there the later
// one waits, which is the hostile reading:
//   - a thread starts (its first call) at the latest host time any thread has
//     reached, since simgpu cannot see when it was created;
//   - a thread that observes an event another thread recorded (cuStreamWaitEvent,
//     cuEventQuery, cuEventSynchronize, cuEventElapsedTime) is first moved to the
//     host time at which that record was issued: it cannot have seen it earlier.
// Hand-offs that simgpu cannot see (a mutex, a condition variable) move no clock, so
// a program whose threads wait for each other that way must also hand over through
// an event for its time to be right. The race detector keeps one host timeline for all threads
// (Note [Host threads share one race timeline] in race_detector.h).
//
// Note [Host threads in lockstep]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without it, which thread's call comes first is up to the host's scheduler, not to
// host time: a page mover descheduled by a loaded machine falls behind the launching
// thread in real time while ahead of it in host time, and the launching thread then
// finds less of the mover's work done than a real machine with a core per thread
// would show. Figures that depend on two threads then vary with the machine's load
// (the mover's share of a benchmark's iteration by 10% between an idle and a loaded
// 2-core machine). With SIMGPU_LOCKSTEP=1 a thread's own code runs in host-time order:
// an entry point (its outermost device lock) waits, in real time and without the
// lock, both before its call and before returning to its caller, while another thread
// comes first, as follows. Each thread's next call is at its clock, or later if others
// called while it slept (below). A thread waiting at an entry point or a return comes
// first if its next call is earlier, or equal and its first call was (a total order:
// two waiting threads never wait for each other). A thread running its own code
// (runnable, state R or D in /proc/self/task/<tid>/stat: it was woken, or given its
// turn, and has not reached its next call) comes first if its next call is no later:
// what it does before that call, a mutex it takes, happens at that host time. So the
// library's mutex is taken in host-time order too, and a thread woken by another runs
// before the waker goes on. One that has made no call for 100 ms of real time while
// runnable is taken to be computing (a data loader that called once) and holds no one
// back. A thread that sleeps (a condition variable, a mutex) cannot call before it is
// woken, and simgpu cannot see who wakes it; the hostile reading: a thread seen
// asleep by a call made at host time t makes its own next call no earlier than t (its
// clock moves there, counted as waited; one seen asleep that is at an entry point by
// the time its state is read, blocked on the device lock the caller holds, is at an
// entry point: read the other way round, a launching thread about to remap was moved
// to the mover's clock, milliseconds ahead, in one of four GPT-2 iterations at 3x). A
// page mover woken by a request therefore
// starts no earlier than the request, where without this it would start at the host
// time it fell asleep. A thread that has exited is dropped. The wait itself costs no
// host time: it changes the order of the calls and what each thread finds done when
// it looks. What is left to the host's scheduler: whether a thread woken while the
// waker holds a mutex is seen before it blocks on it again, and which of two threads
// running their own code at the same host time takes a mutex first (simgpu sees no
// mutex). So two runs of a program with a mover are the same call for call only up
// to such a meeting (ResNet-50 at 1/8, 1.5x, with the VMM waits: 289.9 ms of host
// time), and a program whose steady state depends on early timings can settle
// differently (docs/results.md, "Swap: why the replays under the VMM waits did not
// repeat"). ResNet-50 at 1/8, 3x, on
// the H200 model, iterations 5-8 of three runs: 47.0-50.6 ms idle, 47.3-48.7 with two
// busy loops, where waiting only before calls gave 47.3-53.9 and 46.9-51.4 on the same
// machine, and 52-59 idle on another (docs/results.md).
//
// Note [Legacy default stream]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An operation on the legacy stream (stream 0 / CU_STREAM_LEGACY) waits for all
// earlier work of every blocking stream, and an operation on a blocking stream
// waits for earlier legacy-stream work; CU_STREAM_NON_BLOCKING streams take part in
// neither. The per-thread default stream (CU_STREAM_PER_THREAD, or stream 0 through
// a _ptsz/_ptds entry point) is a blocking stream of its own per thread.
#ifndef SIMGPU_DRIVER_CLOCK_H
#define SIMGPU_DRIVER_CLOCK_H

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "race_detector.h"

namespace simgpu {

enum class engine { compute = 0, h2d = 1, d2h = 2, none = 3 };

struct capture_seq;

struct stream_obj {
  uint32_t magic = 0x5354524d;  // "STRM"
  uint64_t id = 0;
  unsigned flags = 0;
  int priority = 0;
  int timeline = 0;              // race detector timeline
  double tail_ns = 0;
  bool legacy = false;
  bool per_thread = false;
  bool destroyed = false;        // kept until its work is known complete
  capture_seq* capture = nullptr;
  bool blocking() const { return !legacy && !(flags & CU_STREAM_NON_BLOCKING); }
};

struct event_obj {
  uint32_t magic = 0x45564e54;  // "EVNT"
  unsigned flags = 0;
  bool recorded = false;
  double time_ns = 0;
  double issued_ns = 0;  // the recording thread's host time (Note [A clock per host thread])
  vclock vc;
  capture_seq* capture = nullptr;
};

race_detector& detector();

// Resolves a stream handle: nullptr is the legacy stream, or the calling thread's
// per-thread stream when `ptds` (the entry point was a _ptsz/_ptds one);
// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name those; anything else must be a
// live stream. Answers nullptr for an invalid handle.
stream_obj* resolve_stream(CUstream h, bool ptds);
stream_obj* create_stream(unsigned flags, int priority);
bool destroy_stream(stream_obj* s);
bool is_user_stream(const stream_obj* s);
event_obj* create_event(unsigned flags);
bool valid_event(CUevent e);
void destroy_event(event_obj* e);

// The calling thread's host time (Note [A clock per host thread]).
double clock_host_ns();
int host_thread_ordinal();  // 1: the first thread that called

// The families of host cost, counted per thread for the exit report.
enum class host_family {
  launch, copy, event_record, event_query, event_sync, stream_wait, stream_query,
  vmm_create, vmm_map, vmm_unmap, vmm_set_access, vmm_release, managed, other, count_
};
const char* host_family_name(host_family f);
void clock_host_advance(double ns, host_family f = host_family::other);
// Host time spent by an allocation-family call (api_overhead_ns).
void charge_host_call();

// Per host thread, for the exit report: calls and host time by family, and the time
// spent waiting for the device (synchronising calls, VMM calls that wait, and moves
// to another thread's record: Note [A clock per host thread]).
struct host_thread_stats {
  int ordinal = 0;  // 1: the first thread that called
  double clock_ns = 0;
  double waited_ns = 0;
  // See Note [Host threads in lockstep]: the kernel's id of the thread, whether it is
  // entering an entry point now (set before it takes the device lock), the real time
  // its last entry point returned (0: in its first), whether it has exited, the host
  // time it cannot call before (others called while it slept), and how many of its
  // calls waited for their turn.
  long tid = 0;
  std::atomic<bool> entering{false};
  uint64_t last_return_real_ns = 0;
  bool gone = false;
  double wake_floor_ns = 0;
  uint64_t turn_waits = 0;
  uint64_t calls[static_cast<int>(host_family::count_)] = {};
  double call_ns[static_cast<int>(host_family::count_)] = {};
};
// Every thread that has called so far, in order of first call.
std::vector<const host_thread_stats*> host_threads();

// Which of the model's host costs an enqueue pays (Note [Driver call costs] in
// device_model.cc): api_overhead_ns, launch_enqueue_ns, copy_enqueue_ns,
// event_record_ns.
enum class call_cost { api, launch, copy, event_record };

// Orders a new operation on s (legacy rules, host program order, race epoch) and
// answers its earliest start (on a copy engine, before engine_take places it);
// `delay_ns` is added to the issue time (launch latency). The host then spends the
// model's cost for `cost` (see Note [Issue time]), except inside a graph replay (one
// cuGraphLaunch is one enqueue).
double op_begin(stream_obj* s, engine e, double delay_ns, call_cost cost = call_cost::api);

// Host time advances to the moment the device has finished every operation
// enqueued so far (vmm_waits_for_device). A wait in time only: it orders nothing
// for the race detector (Note [VMM calls that wait] in vmm.cc).
void host_wait_device_time(const char* why);
// Host time advances to t_ns, a wait for `why` (Note [VMM calls one at a time] in vmm.cc).
void host_wait_until(double t_ns, const char* why);
// A copy engine's start for an operation of ns ready at ready_ns: the first idle span
// of that length at or after it, now taken (Note [Copy engines serve ready copies]).
// The compute engine and engine::none answer ready_ns (op_begin ordered compute).
double engine_take(engine e, double ready_ns, double ns);
// Records that the operation ends at end_ns.
void op_end(stream_obj* s, engine e, double end_ns);
// Work already on the compute engine runs ns longer: whatever starts on it later starts
// that much later (Note [Migrations of pages in use] in managed.h).
void engine_delay(engine e, double ns);

void host_wait_stream(stream_obj* s);
void host_wait_all();
// Synchronising the legacy stream: it and every blocking stream (not the
// non-blocking ones).
void host_wait_legacy();
void host_wait_event(event_obj* e);
// Whether the host has reached the end of s / e (no wait, no host jump beyond).
bool stream_done(stream_obj* s);
bool event_done(event_obj* e);

void event_record(event_obj* e, stream_obj* s);
void stream_wait_event(stream_obj* s, event_obj* e);

// The latest time anything ends (for the report).
double clock_end_ns();
// A short "stream 3" description.
std::string stream_name(const stream_obj* s);

// Race glue: device accesses by the current operation of s.
void race_access(stream_obj* s, uintptr_t lo, uint64_t bytes, bool write,
                 const std::shared_ptr<const std::string>& what);
// The host releases [lo, lo+bytes) (unmap, address free).
void race_host_release(uintptr_t lo, uint64_t bytes, const char* what);
// The host takes device access away from [lo, lo+bytes) (cuMemSetAccess): every
// recorded write there, and every read too when `forbid_reads`, must be ordered
// before the host.
void race_host_restrict(uintptr_t lo, uint64_t bytes, bool forbid_reads, const char* what);
void race_forget(uint64_t key);
// Called at exit: the exit status becomes 3 when races were reported.
bool races_seen();

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_CLOCK_H
