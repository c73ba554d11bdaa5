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
// OVERSUB_STATS_FILE, both from one list of fields (see Note [One field list for
// text and JSON] below). JSON shape, keys in this order:
//   {"oversub_stats":1,"pid":N,"mode":"track","device_limit":"none"|"<bytes>"|"<fraction>",
//    "counters":{"allocations":{"current":0,"peak":3,"total":10},"frees":{"total":10},...},
//    "calls":{"cudaMalloc":10,...},            (only entry points called at least once)
//    "call_ns":{"cudaMalloc":52000,...},       (time inside those hooks, CUDA's call included)
//    "pool":{...},"schedule":{...}}            (sections, when their layer registered one)
#ifndef OVERSUB_COMMON_STATS_H
#define OVERSUB_COMMON_STATS_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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
  X(graph_replays_prefetched, event, "swap and um modes: graph launches whose footprint seen at capture was made resident first") \
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
// Wall time spent inside an entry point's hook, CUDA's own call included (reported as
// "call_ns", only for entry points with time recorded).
void add_call_time(std::size_t entry_point, std::uint64_t ns) noexcept;
std::uint64_t call_time(std::size_t entry_point) noexcept;

// Note [One field list for text and JSON]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The report is built once, as lines of fields (report_lines), and both forms are
// written from that list: a field's key is its JSON member, and its text is its
// label (the key with '_' as spaces, less a unit suffix: _bytes, _ns, _gbps) and
// its value in the unit its kind gives. So whatever one form prints the other
// prints too, from the same value; the sections layers above common/ add (the
// pool's arenas, the swap and um backends' lines, the learned schedule) are
// written through the same list. Text lines are uniform: "title: label value  label
// value", the counters in columns. tests/unit/common/report_test.cc reads both forms
// of a real run back and fails on a text field without its JSON twin, or the reverse.
enum class field_kind : std::uint8_t {
  count,        // text 12, JSON 12
  bytes,        // text 1.50 MiB, JSON 1572864
  nanoseconds,  // text 2000 ns / 1.250 ms (from 1 ms up), JSON 2000 / 1250000
  gbps,         // a rate in GB/s, three decimals in both
  flag,         // text yes/no, JSON true/false
  word,         // text as is, JSON a string
  limit,        // OVERSUB_DEVICE_LIMIT: text none / 1.00 GiB / 0.75 of the device,
                // JSON "none" / "1073741824" / "0.75"
  list,         // JSON an array (items kept as JSON text); text its length: 24 entries
};

struct field {
  std::string key;
  std::string label;       // empty: the text shows the value alone
  field_kind kind = field_kind::count;
  std::uint64_t number = 0;
  double real = 0.0;
  std::string text;        // word; limit: none, bytes or fraction; list: the items
};

// One line of the text report, and the JSON object its fields go into.
struct line {
  enum class style : std::uint8_t {
    header,    // oversub: stats (label value, label value)
    column,    // oversub:   title            value  value   (the counters)
    labelled,  // oversub:   title: label value  label value
  };
  style how = style::labelled;
  std::string title;
  std::vector<std::string> path;  // the JSON objects, outermost first ({} : top level)
  std::vector<field> fields;      // a line without fields prints no text
};

// The field's text value and JSON value (see field_kind).
std::string text_value(const field& f);
std::string json_value(const field& f);
// The label a key gets: "peak_mapped_bytes" -> "peak mapped".
std::string label_of(std::string_view key);

// What a section function fills: lines whose JSON objects lie under the section's
// own ("pool", "schedule").
class section {
 public:
  section(std::vector<line>& lines, std::string root) : lines_(lines), root_(std::move(root)) {}
  // Starts a line "oversub:   <title>: ..." whose fields go into the object at
  // root/path; later lines continue an object only when they name the same path.
  section& begin(std::string title, const std::vector<std::string>& path = {});
  section& count(std::string_view key, std::uint64_t v);
  section& bytes(std::string_view key, std::uint64_t v);
  section& nanoseconds(std::string_view key, std::uint64_t v);
  section& gbps(std::string_view key, double bytes_per_s);
  section& flag(std::string_view key, bool v);
  section& word(std::string_view key, std::string_view v);
  // A JSON array of entries items, written as JSON text (items: "1,2,3").
  section& list(std::string_view key, std::size_t entries, std::string items);

 private:
  section& add(field f);
  std::vector<line>& lines_;
  std::string root_;
};

// A section a layer above common/ adds to the report (the pool's arena figures):
// called once per report at exit, it must not block (try a lock, give up if held)
// and returns false to add nothing.
using section_fn = bool (*)(section& out);
void set_pool_section(section_fn fn) noexcept;
// The same for the swap and um learners' schedule (core/schedule.h), after "pool".
void set_schedule_section(section_fn fn) noexcept;

// The report as lines of fields, and the two forms written from them.
std::vector<line> report_lines(const config& cfg, int pid);
std::string render_text(const std::vector<line>& lines);
std::string render_json(const std::vector<line>& lines);  // one line, '\n' ended

// The report for cfg.stats == json / text.
std::string format_json(const config& cfg, int pid);
std::string format_text(const config& cfg, int pid);

// Prints the report cfg asks for (nothing for stats_format::none). Call once.
void report(const config& cfg) noexcept;

// Zeroes every counter (tests only).
void reset_all() noexcept;

}  // namespace oversub::stats

#endif  // OVERSUB_COMMON_STATS_H
