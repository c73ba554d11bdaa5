// oversub statistics: one list of counters, printed once at exit.
//
// OVERSUB_COUNTERS is the only list. A gauge has a current value, the peak it
// reached and a running total of what was added; an event has a total only. All are
// relaxed atomics, so counting never locks (safe in hooks, across fork, at exit).
// Per-entry-point call counts live beside them, indexed by the interposer's hook ids
// and named once through set_entry_points().
//
// The report never calls CUDA: it reads the atomics and writes text or one JSON
// line (OVERSUB_STATS=json, for scripts) through the log funnel or to
// OVERSUB_STATS_FILE. JSON shape, keys in this order:
//   {"oversub_stats":1,"pid":N,"mode":"track","device_limit":"none"|"<option>",
//    "counters":{"allocations":{"current":0,"peak":3,"total":10},"frees":{"total":10},...},
//    "calls":{"cudaMalloc":10,...},            (only entry points called at least once)
//    "pool":{...},"schedule":{...}}            (sections, when their layer registered one)
#ifndef OVERSUB_COMMON_STATS_H
#define OVERSUB_COMMON_STATS_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace oversub {
struct config;
}

namespace oversub::stats {

// X(name, kind, doc); kind is gauge or event.
#define OVERSUB_COUNTERS(X)                                                            \
  X(allocations, gauge, "device and managed allocations: live (current, peak), made (total)") \
  X(frees, event, "tracked allocations freed")                                        \
  X(device_bytes, gauge, "bytes of device memory allocated by the application")       \
  X(managed_bytes, gauge, "bytes of managed memory allocated by the application")     \
  X(limit_refusals, event, "allocations refused by OVERSUB_DEVICE_LIMIT")             \
  X(untracked_frees, event, "frees of pointers oversub does not track, forwarded")    \
  X(launches, event, "kernel launches, all launch entry points")                      \
  X(copies, event, "memory copies")                                                   \
  X(memsets, event, "memsets")                                                        \
  X(syncs, event, "synchronisations and queries")                                     \
  X(graph_launches, event, "CUDA graph launches")                                     \
  X(pool_allocations, event, "device allocations served by the pool (OVERSUB_MODE=pool)") \
  X(pool_planned, event, "pool allocations served at a planned offset")               \
  X(pool_deviations, event, "planned iterations that deviated and fell back to online") \
  X(pool_refusals, event, "pool allocations refused: the arena had no room")             \
  X(swap_refusals, event, "calls refused in swap mode: their memory could not be made resident") \
  X(swap_oversized, event, "swap mode: calls that needed more than the swap capacity at once and ran with part of their memory on the host") \
  X(launches_unreadable, event, "swap mode: launches whose parameter layout could not be read (taken to touch any page)") \
  X(swap_scheduled, event, "swap mode: launches that followed the learned schedule")  \
  X(swap_deviations, event, "swap mode: launches that left the learned schedule")     \
  X(driver_answers_wrapped, event, "cuGetProcAddress/dlsym answers replaced by oversub's driver hooks") \
  X(driver_answers_passed, event, "driver answers from another library, handed back untouched") \
  X(foreign_vmm_bytes, gauge, "device bytes other libraries created with cuMemCreate: counted, never moved")

enum class kind : std::uint8_t { gauge, event };

class counter {
 public:
  // Gauge: current += n, total += n, peak updated.
  void add(std::uint64_t n) noexcept;
  // Gauge: current -= n.
  void sub(std::uint64_t n) noexcept;
  // Event: total += n.
  void count(std::uint64_t n = 1) noexcept { total_.fetch_add(n, std::memory_order_relaxed); }

  std::uint64_t current() const noexcept { return current_.load(std::memory_order_relaxed); }
  std::uint64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  std::uint64_t total() const noexcept { return total_.load(std::memory_order_relaxed); }
  void reset() noexcept;

 private:
  std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> total_{0};
};

struct counters {
#define OVERSUB_COUNTER_FIELD(name, k, doc) counter name;
  OVERSUB_COUNTERS(OVERSUB_COUNTER_FIELD)
#undef OVERSUB_COUNTER_FIELD
};

// The process's counters (static storage, never destroyed).
counters& global();

// Per-entry-point call counts.
constexpr std::size_t max_entry_points = 256;
void set_entry_points(const char* const* names, std::size_t count) noexcept;
void count_call(std::size_t entry_point) noexcept;
std::uint64_t calls(std::size_t entry_point) noexcept;

// The report for cfg.stats == json / text.
std::string format_json(const config& cfg, int pid);
std::string format_text(const config& cfg);

// Prints the report cfg asks for (nothing for stats_format::none). Call once.
void report(const config& cfg) noexcept;

// A section a layer above common/ adds to the report (the pool's arena figures):
// fills json with the members of one object (printed as "pool":{...} after
// "calls") and text with whole "oversub:   ..." lines. Called once at exit; it must
// not block (try a lock, give up if held) and returns false to print nothing.
using section_fn = bool (*)(std::string& json, std::string& text);
void set_pool_section(section_fn fn) noexcept;
// The same for the swap and um learners' schedule (core/schedule.h),
// printed as "schedule":{...} after "pool".
void set_schedule_section(section_fn fn) noexcept;

// Zeroes every counter (tests only).
void reset_all() noexcept;

}  // namespace oversub::stats

#endif  // OVERSUB_COMMON_STATS_H
