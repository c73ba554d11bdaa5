// Counters and the exit report (see stats.h).
#include "common/stats.h"

#include <unistd.h>

#include <utility>

#include <fmt/format.h>

#include "common/log.h"
#include "common/options.h"
#include "common/units.h"

namespace oversub::stats {

namespace {

// Constant-initialised and trivially destructible: valid before liboversub's
// constructors run and after its destructors (hooks can run in both windows).
constinit counters g_counters{};

std::atomic<std::uint64_t> g_calls[max_entry_points];
std::atomic<std::uint64_t> g_call_ns[max_entry_points];
const char* const* g_entry_names = nullptr;
std::size_t g_entry_count = 0;

constexpr kind counter_kind(std::string_view k) { return k == "gauge" ? kind::gauge : kind::event; }

}  // namespace

void counter::add(std::uint64_t n) noexcept {
  total_.fetch_add(n, std::memory_order_relaxed);
  std::uint64_t now = current_.fetch_add(n, std::memory_order_relaxed) + n;
  std::uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void counter::sub(std::uint64_t n) noexcept { current_.fetch_sub(n, std::memory_order_relaxed); }

void counter::reset() noexcept {
  current_.store(0, std::memory_order_relaxed);
  peak_.store(0, std::memory_order_relaxed);
  total_.store(0, std::memory_order_relaxed);
}

counters& global() { return g_counters; }

void set_entry_points(const char* const* names, std::size_t count) noexcept {
  g_entry_names = names;
  g_entry_count = count < max_entry_points ? count : max_entry_points;
}

void count_call(std::size_t entry_point) noexcept {
  if (entry_point < max_entry_points) g_calls[entry_point].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t calls(std::size_t entry_point) noexcept {
  return entry_point < max_entry_points ? g_calls[entry_point].load(std::memory_order_relaxed) : 0;
}

void add_call_time(std::size_t entry_point, std::uint64_t ns) noexcept {
  if (entry_point < max_entry_points) g_call_ns[entry_point].fetch_add(ns, std::memory_order_relaxed);
}

std::uint64_t call_time(std::size_t entry_point) noexcept {
  return entry_point < max_entry_points ? g_call_ns[entry_point].load(std::memory_order_relaxed) : 0;
}

namespace {
std::atomic<section_fn> g_pool_section{nullptr};
std::atomic<section_fn> g_schedule_section{nullptr};
}  // namespace

void set_pool_section(section_fn fn) noexcept {
  g_pool_section.store(fn, std::memory_order_release);
}

void set_schedule_section(section_fn fn) noexcept {
  g_schedule_section.store(fn, std::memory_order_release);
}

std::string label_of(std::string_view key) {
  for (std::string_view unit : {"_bytes", "_ns", "_gbps"}) {
    if (key.size() > unit.size() && key.ends_with(unit)) {
      key.remove_suffix(unit.size());
      break;
    }
  }
  std::string out(key);
  for (char& c : out) {
    if (c == '_') c = ' ';
  }
  return out;
}

namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      continue;
    }
    out += c;
  }
  return out + '"';
}

}  // namespace

std::string text_value(const field& f) {
  switch (f.kind) {
    case field_kind::count: return fmt::format("{}", f.number);
    case field_kind::bytes: return format_bytes(f.number);
    case field_kind::nanoseconds:
      // Below a millisecond the count itself (a copy's setup: 2000 ns), above it
      // milliseconds to the microsecond (an iteration: 8.011 ms).
      if (f.number < 1000000) return fmt::format("{} ns", f.number);
      return fmt::format("{:.3f} ms", static_cast<double>(f.number) / 1e6);
    case field_kind::gbps: return fmt::format("{:.3f} GB/s", f.real);
    case field_kind::flag: return f.number != 0 ? "yes" : "no";
    case field_kind::word: return f.text;
    case field_kind::limit:
      if (f.text == "bytes") return format_bytes(f.number);
      if (f.text == "fraction") return format_fraction(f.real) + " of the device";
      return "none";
    case field_kind::list: return fmt::format("{} {}", f.number, f.number == 1 ? "entry" : "entries");
  }
  return "?";
}

std::string json_value(const field& f) {
  switch (f.kind) {
    case field_kind::count:
    case field_kind::bytes:
    case field_kind::nanoseconds: return fmt::format("{}", f.number);
    case field_kind::gbps: return fmt::format("{:.3f}", f.real);
    case field_kind::flag: return f.number != 0 ? "true" : "false";
    case field_kind::word: return json_string(f.text);
    case field_kind::limit:
      if (f.text == "bytes") return fmt::format("\"{}\"", f.number);
      if (f.text == "fraction") return json_string(format_fraction(f.real));
      return "\"none\"";
    case field_kind::list: return "[" + f.text + "]";
  }
  return "null";
}

section& section::begin(std::string title, const std::vector<std::string>& path) {
  line l;
  l.title = std::move(title);
  l.path.push_back(root_);
  l.path.insert(l.path.end(), path.begin(), path.end());
  lines_.push_back(std::move(l));
  return *this;
}

section& section::add(field f) {
  if (lines_.empty()) begin(root_);
  f.label = label_of(f.key);
  lines_.back().fields.push_back(std::move(f));
  return *this;
}

section& section::count(std::string_view key, std::uint64_t v) {
  return add({std::string(key), {}, field_kind::count, v, 0.0, {}});
}
section& section::bytes(std::string_view key, std::uint64_t v) {
  return add({std::string(key), {}, field_kind::bytes, v, 0.0, {}});
}
section& section::nanoseconds(std::string_view key, std::uint64_t v) {
  return add({std::string(key), {}, field_kind::nanoseconds, v, 0.0, {}});
}
section& section::gbps(std::string_view key, double bytes_per_s) {
  return add({std::string(key), {}, field_kind::gbps, 0, bytes_per_s / 1e9, {}});
}
section& section::flag(std::string_view key, bool v) {
  return add({std::string(key), {}, field_kind::flag, v ? 1u : 0u, 0.0, {}});
}
section& section::word(std::string_view key, std::string_view v) {
  return add({std::string(key), {}, field_kind::word, 0, 0.0, std::string(v)});
}
section& section::list(std::string_view key, std::size_t entries, std::string items) {
  return add({std::string(key), {}, field_kind::list, entries, 0.0, std::move(items)});
}

std::vector<line> report_lines(const config& cfg, int pid) {
  const counters& c = global();
  std::vector<line> lines;
  line header{line::style::header, "stats", {}, {}};
  header.fields.push_back({"pid", "pid", field_kind::count, static_cast<std::uint64_t>(pid), 0.0, {}});
  header.fields.push_back({"mode", "mode", field_kind::word, 0, 0.0, std::string(to_string(cfg.mode))});
  field limit{"device_limit", "device limit", field_kind::limit, cfg.limit.bytes,
              cfg.limit.fraction, "none"};
  if (cfg.limit.how == device_limit::kind::bytes) limit.text = "bytes";
  if (cfg.limit.how == device_limit::kind::fraction) limit.text = "fraction";
  header.fields.push_back(std::move(limit));
  lines.push_back(std::move(header));
#define OVERSUB_COUNTER_LINE(name, k, doc)                                                  \
  {                                                                                        \
    line l{line::style::column, #name, {"counters", #name}, {}};                          \
    const field_kind unit =                                                                \
        std::string_view(#name).ends_with("_bytes") ? field_kind::bytes : field_kind::count; \
    if (counter_kind(#k) == kind::gauge) {                                                 \
      l.fields.push_back({"current", "current", unit, c.name.current(), 0.0, {}});         \
      l.fields.push_back({"peak", "peak", unit, c.name.peak(), 0.0, {}});                  \
      l.fields.push_back({"total", "total", unit, c.name.total(), 0.0, {}});               \
    } else {                                                                               \
      l.fields.push_back({"total", "", unit, c.name.total(), 0.0, {}});                    \
    }                                                                                      \
    lines.push_back(std::move(l));                                                         \
  }
  OVERSUB_COUNTERS(OVERSUB_COUNTER_LINE)
#undef OVERSUB_COUNTER_LINE
  line calls_line{line::style::labelled, "calls", {"calls"}, {}};
  for (std::size_t i = 0; i < g_entry_count; ++i) {
    const std::uint64_t n = calls(i);
    if (n != 0) calls_line.fields.push_back({g_entry_names[i], g_entry_names[i], field_kind::count, n, 0.0, {}});
  }
  lines.push_back(std::move(calls_line));
  line time_line{line::style::labelled, "time in calls", {"call_ns"}, {}};
  for (std::size_t i = 0; i < g_entry_count; ++i) {
    const std::uint64_t ns = call_time(i);
    if (ns != 0) time_line.fields.push_back({g_entry_names[i], g_entry_names[i], field_kind::nanoseconds, ns, 0.0, {}});
  }
  if (!time_line.fields.empty()) lines.push_back(std::move(time_line));
  for (const auto& [root, fn_slot] : {std::pair{"pool", &g_pool_section},
                                      std::pair{"schedule", &g_schedule_section}}) {
    const section_fn fn = fn_slot->load(std::memory_order_acquire);
    if (fn == nullptr) continue;
    const std::size_t before = lines.size();
    section out(lines, root);
    if (!fn(out)) lines.resize(before);
  }
  return lines;
}

std::string render_text(const std::vector<line>& lines) {
  std::string out;
  for (const line& l : lines) {
    if (l.fields.empty()) continue;
    std::string fields;
    const std::string_view separator = l.how == line::style::header ? ", " : "  ";
    for (const field& f : l.fields) {
      if (!fields.empty()) fields += separator;
      fields += f.label.empty() ? text_value(f) : f.label + " " + text_value(f);
    }
    switch (l.how) {
      case line::style::header: out += fmt::format("oversub: {} ({})\n", l.title, fields); break;
      case line::style::column: out += fmt::format("oversub:   {:<16} {}\n", l.title, fields); break;
      case line::style::labelled: out += fmt::format("oversub:   {}: {}\n", l.title, fields); break;
    }
  }
  return out;
}

std::string render_json(const std::vector<line>& lines) {
  std::string out = R"({"oversub_stats":1)";
  std::vector<std::string> open;  // the objects open now, outermost first
  bool comma = true;
  for (const line& l : lines) {
    std::size_t common = 0;
    while (common < open.size() && common < l.path.size() && open[common] == l.path[common]) {
      ++common;
    }
    while (open.size() > common) {
      out += '}';
      open.pop_back();
      comma = true;
    }
    for (std::size_t i = common; i < l.path.size(); ++i) {
      out += (comma ? "," : "") + json_string(l.path[i]) + ":{";
      open.push_back(l.path[i]);
      comma = false;
    }
    for (const field& f : l.fields) {
      out += (comma ? "," : "") + json_string(f.key) + ":" + json_value(f);
      comma = true;
    }
  }
  out.append(open.size(), '}');
  out += "}\n";
  return out;
}

std::string format_json(const config& cfg, int pid) { return render_json(report_lines(cfg, pid)); }

std::string format_text(const config& cfg, int pid) { return render_text(report_lines(cfg, pid)); }

void report(const config& cfg) noexcept {
  if (cfg.stats == stats_format::none) return;
  try {
    std::string text = cfg.stats == stats_format::json ? format_json(cfg, ::getpid())
                                                       : format_text(cfg, ::getpid());
    int fd = open_stats_destination(cfg);
    if (fd >= 0) {
      std::size_t done = 0;
      while (done < text.size()) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      ::close(fd);
    } else {
      log::write_raw(text);
    }
  } catch (...) {
    log::error("could not print the statistics");
  }
}

void reset_all() noexcept {
#define OVERSUB_COUNTER_RESET(name, k, doc) global().name.reset();
  OVERSUB_COUNTERS(OVERSUB_COUNTER_RESET)
#undef OVERSUB_COUNTER_RESET
  for (auto& n : g_calls) n.store(0, std::memory_order_relaxed);
  for (auto& n : g_call_ns) n.store(0, std::memory_order_relaxed);
}

}  // namespace oversub::stats
