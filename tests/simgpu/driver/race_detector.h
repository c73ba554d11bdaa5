// The race detector: vector clocks over timelines (the host, and one per stream)
// and a compact per-region history of device accesses. Pure: no CUDA, no device
// state, so it is unit-testable on its own.
//
// Note [Happens-before in simgpu]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each timeline t has a clock C_t (one counter per timeline). An operation on t
// first increments C_t[t] (its epoch) and is recorded with (t, epoch). Operation X
// (t, e) happens before whatever runs on timeline u once C_u[t] >= e. Edges are
// joins: event record copies C_s, a wait joins it into the waiter; a host sync of a
// stream joins C_s into the host; every enqueue joins the host into the stream
// (program order); legacy-stream ordering joins the blocking streams and the
// legacy stream both ways. Two accesses to overlapping bytes, at least one a write,
// neither ordered before the other, are a race.
//
// Note [Host threads share one race timeline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// All host threads are one timeline here, although each has its own clock in time
// (Note [A clock per host thread] in clock.h): threads order their own work with
// mutexes, which the detector cannot see, and treating them as unordered would
// report every hand-off. So a host release (an unmap, a free) is checked against all
// that any host thread has waited for. A thread that frees memory another thread's
// queued work still uses, ordered after it only by a wait made on the other thread,
// is not caught, so a program checked here keeps every wait that orders a release on
// the thread that releases.
//
// Note [Compact history]
// ~~~~~~~~~~~~~~~~~~~~~~
// Per region, the detector keeps only accesses that may still race: a record that
// the host has joined (C_host[t] >= e) is ordered before every future operation
// (each enqueue joins the host) and is dropped; a record is also dropped when a
// newer access of the same timeline covers its bytes and is a write or the old one
// was a read (anything unordered with the old access is unordered with the new).
#ifndef SIMGPU_DRIVER_RACE_DETECTOR_H
#define SIMGPU_DRIVER_RACE_DETECTOR_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace simgpu {

using vclock = std::vector<uint32_t>;

// Joins b into a (element-wise max).
void vclock_join(vclock& a, const vclock& b);

struct race_report {
  uintptr_t lo, hi;            // overlapping bytes
  std::string first, second;   // "write by kernel 'k' on stream 2"
};

class race_detector {
 public:
  static constexpr int kHost = 0;

  race_detector();
  // A new timeline (a stream); answers its index.
  int add_timeline();
  // Starts a new operation on timeline t (increments its epoch).
  void begin_op(int t);
  // dst joins src's clock.
  void join(int dst, int src);
  void join_clock(int dst, const vclock& c);
  const vclock& clock(int t) const { return clocks_[t]; }

  // An access of [lo,hi) under history key `key` by the current operation of
  // timeline t. `what` describes the operation ("kernel 'k' on stream 2"). Races
  // found are appended to out.
  void access(int t, uint64_t key, uintptr_t lo, uintptr_t hi, bool write,
              const std::shared_ptr<const std::string>& what, std::vector<race_report>& out);

  // The host releases [lo,hi) (unmap, address free): every recorded access there
  // must be ordered before the host. Unordered ones are appended to out; the
  // history of those bytes ends.
  void host_release(uint64_t key, uintptr_t lo, uintptr_t hi, const std::string& what,
                    std::vector<race_report>& out);

  // The host takes device access to [lo,hi) away: recorded writes there (and reads
  // too when forbid_reads) must be ordered before the host. Unordered ones are
  // appended to out and dropped; the rest of the history stays.
  void host_restrict(uint64_t key, uintptr_t lo, uintptr_t hi, bool forbid_reads,
                     const std::string& what, std::vector<race_report>& out);

  // Drops the whole history of key (the region is gone, after its checks).
  void forget(uint64_t key);

  size_t records() const;

 private:
  struct record {
    uintptr_t lo, hi;
    int timeline;
    uint32_t epoch;
    bool write;
    std::shared_ptr<const std::string> what;
  };
  bool ordered_before(const record& r, int t) const;
  static std::string describe(const record& r);

  std::vector<vclock> clocks_;
  std::map<uint64_t, std::vector<record>> history_;
};

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_RACE_DETECTOR_H
