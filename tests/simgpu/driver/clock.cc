// Streams, events and the virtual clock (see the Notes in clock.h).
#include "clock.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <set>

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "address_space.h"
#include "capture.h"
#include "config.h"
#include "device.h"
#include "timeline.h"

namespace simgpu {

namespace {

// See Note [A clock per host thread] in tests/simgpu/driver/clock.h: each thread's clock lives in its
// host_thread_stats (never freed: the exit report reads them); g_host_max_ns is the
// latest any thread has reached, where a new thread starts.
double g_host_max_ns = 0;
std::vector<host_thread_stats*> g_threads;
thread_local host_thread_stats* t_host = nullptr;

host_thread_stats& me() {
  if (t_host == nullptr) {
    t_host = new host_thread_stats();
    t_host->ordinal = static_cast<int>(g_threads.size()) + 1;
    t_host->clock_ns = g_host_max_ns;
    t_host->tid = static_cast<long>(syscall(SYS_gettid));
    g_threads.push_back(t_host);
  }
  return *t_host;
}

// The calling thread's clock moves to at least t (a wait: counted as waited).
void host_reach(double t, host_thread_stats& h = me()) {
  if (t > h.clock_ns) {
    h.waited_ns += t - h.clock_ns;
    h.clock_ns = t;
    g_host_max_ns = std::max(g_host_max_ns, t);
  }
}

// ---- Note [Host threads in lockstep] in tests/simgpu/driver/clock.h ----------------

uint64_t real_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// The scheduler state of thread tid of this process ('R', 'S', 'D', ...), or 0 when
// it no longer exists.
char task_state(long tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* paren = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

constexpr uint64_t kComputingAfterNs = 100'000'000;  // no call for 100 ms: computing

// The host time of h's next call: its clock, or later if others called while it slept.
double next_call_ns(const host_thread_stats& h) { return std::max(h.clock_ns, h.wake_floor_ns); }

// Whether another thread must go before `self`, which is about to call or to return at
// its clock: one at an entry point that comes first in host time (an earlier next
// call, or the same one and an earlier first call: a total order, so two threads at
// entry points never wait for each other), or one running its own code (woken, or
// given its turn) whose next call is no later than self's clock. One seen asleep gets
// self's host time as its wake floor.
bool another_turn_first(const host_thread_stats& self) {
  uint64_t now = 0;
  for (host_thread_stats* h : g_threads) {
    if (h == &self || h->gone) continue;
    const double t = next_call_ns(*h);
    if (t > self.clock_ns) continue;
    bool at_entry = h->entering.load(std::memory_order_acquire);
    if (!at_entry) {
      char state = task_state(h->tid);
      if (state == 0) {
        h->gone = true;
        continue;
      }
      // Asleep: 'S' (a futex, a condition variable, a sleep). 'D' is a wait inside the
      // kernel (a page fault, the address space's lock) that ends by itself: running.
      if (state != 'R' && state != 'D') {
        // It may have reached an entry point since `entering` was read, and be asleep
        // on the device lock this thread holds: at an entry point, not asleep (Note
        // [Host threads in lockstep] in tests/simgpu/driver/clock.h).
        at_entry = h->entering.load(std::memory_order_acquire);
        if (!at_entry) {
          h->wake_floor_ns = std::max(h->wake_floor_ns, self.clock_ns);
          continue;
        }
      }
    }
    if (at_entry) {
      if (t < self.clock_ns || h->ordinal < self.ordinal) return true;
      continue;
    }
    if (now == 0) now = real_now_ns();
    if (h->last_return_real_ns != 0 && now - h->last_return_real_ns > kComputingAfterNs)
      continue;
    return true;
  }
  return false;
}

// Waits (the device lock let go meanwhile, self marked as at an entry point) until no
// thread comes before self, counting the wait in turn_waits.
void take_turn(host_thread_stats& self) {
  self.entering.store(true);
  if (another_turn_first(self)) {
    ++self.turn_waits;
    for (int spins = 0; another_turn_first(self); ++spins) {
      device_lock().unlock();
      if (spins < 64) {
        sched_yield();
      } else {
        timespec pause{0, 20000};
        nanosleep(&pause, nullptr);
      }
      device_lock().lock();
    }
  }
  self.entering.store(false);
}

thread_local int t_guard_depth = 0;

}  // namespace

void lockstep_arrive() {
  if (t_guard_depth == 0 && t_host != nullptr) t_host->entering.store(true, std::memory_order_release);
}

void lockstep_enter() {
  if (++t_guard_depth != 1 || !get_config().lockstep) {
    if (t_guard_depth == 1 && t_host != nullptr) t_host->entering.store(false);
    return;
  }
  host_thread_stats& self = me();
  host_reach(self.wake_floor_ns, self);
  take_turn(self);
}

// The return takes its turn as the call did: the caller's own code after it runs at
// the host time the call returned, so it waits for the threads before that time.
void lockstep_leave() {
  if (--t_guard_depth != 0 || !get_config().lockstep) return;
  host_thread_stats& self = me();
  take_turn(self);
  self.last_return_real_ns = real_now_ns();
}

namespace {

// See Note [A clock per host thread] in tests/simgpu/driver/clock.h: a record another thread issued is seen no
// earlier than it was issued.
void observe(const event_obj* e) {
  if (e->recorded) host_reach(e->issued_ns);
}
double g_compute_free_ns = 0;  // kernels one at a time, in issue order
// A copy engine's busy spans, start -> end, and the latest end (Note [Copy engines
// serve ready copies] in tests/simgpu/driver/clock.h).
struct copy_engine {
  std::map<double, double> busy;
  double last_end_ns = 0;
};
copy_engine g_copy_engines[2];  // engine::h2d, engine::d2h

// The spans no operation can be placed before any more: each starts at or after its
// issuing thread's clock, which only moves forward. Past kMaxSpans (a thread that
// stopped calling holds the floor) the two oldest spans merge, their gap taken as
// busy: later than a GPU, never earlier.
void prune(copy_engine& c) {
  constexpr size_t kMaxSpans = 4096;
  double floor = std::numeric_limits<double>::infinity();
  for (const host_thread_stats* h : g_threads) {
    if (!h->gone) floor = std::min(floor, h->clock_ns);
  }
  while (!c.busy.empty() && c.busy.begin()->second <= floor) c.busy.erase(c.busy.begin());
  while (c.busy.size() > kMaxSpans) {
    auto first = c.busy.begin();
    const double start = first->first;
    auto next = c.busy.erase(first);
    const double end = next->second;
    c.busy.erase(next);
    c.busy.emplace(start, end);
  }
}

// When every engine has finished what it was given.
double engines_idle_ns() {
  double t = g_compute_free_ns;
  for (const copy_engine& c : g_copy_engines) t = std::max(t, c.last_end_ns);
  return t;
}
uint64_t g_next_stream_id = 1;
std::set<stream_obj*> g_streams;   // every live stream incl. legacy and per-thread
std::set<event_obj*> g_events;
stream_obj* g_legacy = nullptr;
thread_local stream_obj* t_per_thread = nullptr;

race_detector& det() {
  static race_detector* d = new race_detector();
  return *d;
}

stream_obj* new_stream(unsigned flags, int priority) {
  auto* s = new stream_obj();
  s->id = g_next_stream_id++;
  s->flags = flags;
  s->priority = priority;
  s->timeline = det().add_timeline();
  s->tail_ns = me().clock_ns;
  g_streams.insert(s);
  return s;
}

}  // namespace

race_detector& detector() { return det(); }

stream_obj* resolve_stream(CUstream h, bool ptds) {
  if (g_legacy == nullptr) {
    g_legacy = new_stream(0, 0);
    g_legacy->legacy = true;
  }
  if (h == nullptr) h = ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY) return g_legacy;
  if (h == CU_STREAM_PER_THREAD) {
    if (t_per_thread == nullptr) {
      t_per_thread = new_stream(0, 0);
      t_per_thread->per_thread = true;
    }
    return t_per_thread;
  }
  auto* s = reinterpret_cast<stream_obj*>(h);
  return g_streams.count(s) && !s->destroyed ? s : nullptr;
}

stream_obj* create_stream(unsigned flags, int priority) {
  resolve_stream(nullptr, false);
  return new_stream(flags, priority);
}

bool is_user_stream(const stream_obj* s) { return !s->legacy && !s->per_thread; }

bool destroy_stream(stream_obj* s) {
  if (!g_streams.count(s) || !is_user_stream(s) || s->destroyed) return false;
  // Its handle dies now, but work already enqueued still runs: the legacy stream
  // must keep waiting for it, so the stream stays listed until the host has
  // synchronised with everything (host_wait_all).
  s->destroyed = true;
  return true;
}

event_obj* create_event(unsigned flags) {
  auto* e = new event_obj();
  e->flags = flags;
  g_events.insert(e);
  return e;
}

bool valid_event(CUevent e) { return g_events.count(reinterpret_cast<event_obj*>(e)) != 0; }

void destroy_event(event_obj* e) {
  g_events.erase(e);
  delete e;
}

double clock_host_ns() { return me().clock_ns; }
int host_thread_ordinal() { return me().ordinal; }

const char* host_family_name(host_family f) {
  static const char* const names[] = {
      "launch", "copy", "event_record", "event_query", "event_sync", "stream_wait",
      "stream_query", "vmm_create", "vmm_map", "vmm_unmap", "vmm_set_access", "vmm_release",
      "managed", "other"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<int>(host_family::count_));
  return names[static_cast<int>(f)];
}

void clock_host_advance(double ns, host_family f) {
  host_thread_stats& h = me();
  h.clock_ns += ns;
  ++h.calls[static_cast<int>(f)];
  h.call_ns[static_cast<int>(f)] += ns;
  g_host_max_ns = std::max(g_host_max_ns, h.clock_ns);
}
void charge_host_call() { clock_host_advance(dev().model.api_overhead_ns); }

std::vector<const host_thread_stats*> host_threads() {
  return {g_threads.begin(), g_threads.end()};
}

namespace {
host_family family_of(call_cost c) {
  switch (c) {
    case call_cost::launch: return host_family::launch;
    case call_cost::copy: return host_family::copy;
    case call_cost::event_record: return host_family::event_record;
    case call_cost::api: break;
  }
  return host_family::other;
}

double cost_ns(call_cost c) {
  const device_model& m = dev().model;
  switch (c) {
    case call_cost::launch: return m.launch_enqueue_ns;
    case call_cost::copy: return m.copy_enqueue_ns;
    case call_cost::event_record: return m.event_record_ns;
    case call_cost::api: break;
  }
  return m.api_overhead_ns;
}
}  // namespace

double op_begin(stream_obj* s, engine e, double delay_ns, call_cost cost) {
  race_detector& d = det();
  double issue_ns = me().clock_ns;  // see Note [Issue time] in tests/simgpu/driver/clock.h
  if (!in_graph_replay()) clock_host_advance(cost_ns(cost), family_of(cost));
  double ready = std::max(s->tail_ns, issue_ns + delay_ns);
  if (e == engine::compute) ready = std::max(ready, g_compute_free_ns);
  if (s->legacy) {
    for (stream_obj* o : g_streams) {
      if (o->blocking()) {
        ready = std::max(ready, o->tail_ns);
        d.join(s->timeline, o->timeline);
      }
    }
  } else if (s->blocking() && g_legacy != nullptr) {
    ready = std::max(ready, g_legacy->tail_ns);
    d.join(s->timeline, g_legacy->timeline);
  }
  d.join(s->timeline, race_detector::kHost);
  d.begin_op(s->timeline);
  return ready;
}

double engine_take(engine e, double ready_ns, double ns) {
  if (e != engine::h2d && e != engine::d2h) return ready_ns;
  copy_engine& c = g_copy_engines[e == engine::h2d ? 0 : 1];
  if (!dev().model.copy_engines_serve_ready) {  // in issue order
    const double start = std::max(ready_ns, c.last_end_ns);
    c.last_end_ns = std::max(c.last_end_ns, start + ns);
    return start;
  }
  prune(c);
  double start = ready_ns;
  auto it = c.busy.upper_bound(start);
  if (it != c.busy.begin()) start = std::max(start, std::prev(it)->second);
  for (; it != c.busy.end() && it->first < start + ns; ++it) start = std::max(start, it->second);
  if (ns > 0) {
    c.busy.emplace(start, start + ns);
    c.last_end_ns = std::max(c.last_end_ns, start + ns);
  }
  return start;
}

void op_end(stream_obj* s, engine e, double end_ns) {
  s->tail_ns = std::max(s->tail_ns, end_ns);
  if (e == engine::compute) g_compute_free_ns = std::max(g_compute_free_ns, end_ns);
}

void engine_delay(engine e, double ns) {
  if (e == engine::compute && ns > 0) g_compute_free_ns += ns;
}

void host_wait_stream(stream_obj* s) {
  timeline_host_wait("stream synchronize", me().clock_ns, s->tail_ns);
  host_reach(s->tail_ns);
  det().join(race_detector::kHost, s->timeline);
}

void host_wait_all() {
  for (stream_obj* s : g_streams) host_wait_stream(s);
  const double idle = engines_idle_ns();
  timeline_host_wait("device synchronize", me().clock_ns, idle);
  host_reach(idle);
  for (auto it = g_streams.begin(); it != g_streams.end();) {
    if ((*it)->destroyed) {
      delete *it;
      it = g_streams.erase(it);
    } else {
      ++it;
    }
  }
}

void host_wait_until(double t_ns, const char* why) {
  timeline_host_wait(why, me().clock_ns, t_ns);
  host_reach(t_ns);
}

void host_wait_device_time(const char* why) {
  double idle = 0;
  for (stream_obj* s : g_streams) idle = std::max(idle, s->tail_ns);
  idle = std::max(idle, engines_idle_ns());
  timeline_host_wait(why, me().clock_ns, idle);
  host_reach(idle);
}

void host_wait_legacy() {
  for (stream_obj* s : g_streams)
    if (s->legacy || s->blocking()) host_wait_stream(s);
}

void host_wait_event(event_obj* e) {
  if (!e->recorded) return;
  observe(e);
  timeline_host_wait("event synchronize", me().clock_ns, e->time_ns);
  host_reach(e->time_ns);
  det().join_clock(race_detector::kHost, e->vc);
}

bool stream_done(stream_obj* s) {
  if (s->tail_ns > me().clock_ns) return false;
  det().join(race_detector::kHost, s->timeline);
  return true;
}

bool event_done(event_obj* e) {
  if (!e->recorded) return true;
  observe(e);
  if (e->time_ns > me().clock_ns) return false;
  det().join_clock(race_detector::kHost, e->vc);
  return true;
}

void event_record(event_obj* e, stream_obj* s) {
  const double issued = me().clock_ns;
  double t = op_begin(s, engine::none, 0, call_cost::event_record);
  e->recorded = true;
  e->issued_ns = issued;
  e->time_ns = t;
  e->vc = det().clock(s->timeline);
}

void stream_wait_event(stream_obj* s, event_obj* e) {
  if (!e->recorded) return;  // waiting on a never-recorded event is a no-op
  observe(e);
  s->tail_ns = std::max(s->tail_ns, e->time_ns);
  det().join_clock(s->timeline, e->vc);
}

double clock_end_ns() {
  double t = g_host_max_ns;
  for (stream_obj* s : g_streams) t = std::max(t, s->tail_ns);
  t = std::max(t, engines_idle_ns());
  return t;
}

std::string stream_name(const stream_obj* s) {
  if (s->legacy) return "the legacy default stream";
  if (s->per_thread) return "per-thread default stream " + std::to_string(s->id);
  return "stream " + std::to_string(s->id);
}

// ---- race glue ---------------------------------------------------------------------

namespace {

std::atomic<uint64_t> g_races{0};

void emit(std::vector<race_report>& found) {
  const config& cfg = get_config();
  for (const race_report& r : found) {
    uint64_t n = ++g_races;
    dev().st.races = n;
    if (n <= 20)
      log_line("race on [0x%" PRIxPTR ",0x%" PRIxPTR "): <%s> is unordered with <%s>", r.lo,
               r.hi, r.first.c_str(), r.second.c_str());
    else if (n == 21)
      log_line("more races follow; only the first 20 are printed in full");
    if (cfg.race == race_mode::abort) {
      log_line("SIMGPU_RACE=abort: aborting at the first race");
      std::abort();
    }
  }
  found.clear();
}

// Splits [lo,hi) into the history keys it touches: device regions by base, pinned
// blocks by base; pageable host memory is not tracked.
template <typename F>
void for_each_key(uintptr_t lo, uintptr_t hi, F&& f) {
  uintptr_t at = lo;
  while (at < hi) {
    if (in_device_va(at)) {
      region* r = find_region(at);
      if (r == nullptr) return;
      uintptr_t end = std::min<uintptr_t>(hi, r->end());
      f(static_cast<uint64_t>(r->base), at, end);
      at = end;
    } else if (pinned_block* b = find_pinned(at)) {
      uintptr_t end = std::min<uintptr_t>(hi, b->base + b->bytes);
      f(static_cast<uint64_t>(b->base), at, end);
      at = end;
    } else {
      return;
    }
  }
}

}  // namespace

void race_access(stream_obj* s, uintptr_t lo, uint64_t bytes, bool write,
                 const std::shared_ptr<const std::string>& what) {
  if (get_config().race == race_mode::off || bytes == 0) return;
  std::vector<race_report> found;
  for_each_key(lo, lo + bytes, [&](uint64_t key, uintptr_t a, uintptr_t b) {
    det().access(s->timeline, key, a, b, write, what, found);
  });
  emit(found);
}

void race_host_release(uintptr_t lo, uint64_t bytes, const char* what) {
  if (get_config().race == race_mode::off || bytes == 0) return;
  std::vector<race_report> found;
  for_each_key(lo, lo + bytes, [&](uint64_t key, uintptr_t a, uintptr_t b) {
    det().host_release(key, a, b, what, found);
  });
  emit(found);
}

void race_host_restrict(uintptr_t lo, uint64_t bytes, bool forbid_reads, const char* what) {
  if (get_config().race == race_mode::off || bytes == 0) return;
  std::vector<race_report> found;
  for_each_key(lo, lo + bytes, [&](uint64_t key, uintptr_t a, uintptr_t b) {
    det().host_restrict(key, a, b, forbid_reads, what, found);
  });
  emit(found);
}

void race_forget(uint64_t key) { det().forget(key); }

bool races_seen() { return g_races.load() != 0; }

}  // namespace simgpu
