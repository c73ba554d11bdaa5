// Counters and the exit report (see stats.h).
#include "common/stats.h"

#include <unistd.h>

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
const char* const* g_entry_names = nullptr;
std::size_t g_entry_count = 0;

constexpr kind counter_kind(std::string_view k) { return k == "gauge" ? kind::gauge : kind::event; }

std::string limit_text(const config& cfg) {
  switch (cfg.limit.how) {
    case device_limit::kind::none: return "none";
    case device_limit::kind::bytes: return format_bytes(cfg.limit.bytes);
    case device_limit::kind::fraction:
      return fmt::format("{} of the device", format_fraction(cfg.limit.fraction));
  }
  return "?";
}

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

std::string format_json(const config& cfg, int pid) {
  const counters& c = global();
  std::string out = fmt::format(R"({{"oversub_stats":1,"pid":{},"mode":"{}","device_limit":)",
                                pid, to_string(cfg.mode));
  switch (cfg.limit.how) {
    case device_limit::kind::none: out += R"("none")"; break;
    case device_limit::kind::bytes: out += fmt::format(R"("{}")", cfg.limit.bytes); break;
    case device_limit::kind::fraction:
      out += fmt::format(R"("{}")", format_fraction(cfg.limit.fraction));
      break;
  }
  out += R"(,"counters":{)";
  bool first = true;
#define OVERSUB_COUNTER_JSON(name, k, doc)                                                   \
  if (!first) out += ',';                                                                   \
  first = false;                                                                            \
  if (counter_kind(#k) == kind::gauge)                                                      \
    out += fmt::format(R"("{}":{{"current":{},"peak":{},"total":{}}})", #name,              \
                       c.name.current(), c.name.peak(), c.name.total());                    \
  else                                                                                      \
    out += fmt::format(R"("{}":{{"total":{}}})", #name, c.name.total());
  OVERSUB_COUNTERS(OVERSUB_COUNTER_JSON)
#undef OVERSUB_COUNTER_JSON
  out += R"(},"calls":{)";
  first = true;
  for (std::size_t i = 0; i < g_entry_count; ++i) {
    std::uint64_t n = calls(i);
    if (n == 0) continue;
    if (!first) out += ',';
    first = false;
    out += fmt::format(R"("{}":{})", g_entry_names[i], n);
  }
  out += '}';
  std::string section_json;
  std::string section_text;
  if (section_fn fn = g_pool_section.load(std::memory_order_acquire);
      fn != nullptr && fn(section_json, section_text)) {
    out += R"(,"pool":{)" + section_json + '}';
  }
  section_json.clear();
  section_text.clear();
  if (section_fn fn = g_schedule_section.load(std::memory_order_acquire);
      fn != nullptr && fn(section_json, section_text)) {
    out += R"(,"schedule":{)" + section_json + '}';
  }
  out += "}\n";
  return out;
}

std::string format_text(const config& cfg) {
  const counters& c = global();
  std::string out = fmt::format("oversub: stats (mode {}, device limit {})\n",
                                to_string(cfg.mode), limit_text(cfg));
  auto is_bytes = [](std::string_view name) { return name.ends_with("_bytes"); };
#define OVERSUB_COUNTER_TEXT(name, k, doc)                                                    \
  if (counter_kind(#k) == kind::gauge && is_bytes(#name))                                    \
    out += fmt::format("oversub:   {:<16} current {}  peak {}  total {}\n", #name,           \
                       format_bytes(c.name.current()), format_bytes(c.name.peak()),          \
                       format_bytes(c.name.total()));                                        \
  else if (counter_kind(#k) == kind::gauge)                                                  \
    out += fmt::format("oversub:   {:<16} current {}  peak {}  total {}\n", #name,           \
                       c.name.current(), c.name.peak(), c.name.total());                     \
  else                                                                                       \
    out += fmt::format("oversub:   {:<16} {}\n", #name, c.name.total());
  OVERSUB_COUNTERS(OVERSUB_COUNTER_TEXT)
#undef OVERSUB_COUNTER_TEXT
  std::string per_call;
  for (std::size_t i = 0; i < g_entry_count; ++i) {
    std::uint64_t n = calls(i);
    if (n == 0) continue;
    per_call += fmt::format("{}{} {}", per_call.empty() ? "" : ", ", g_entry_names[i], n);
  }
  if (!per_call.empty()) out += fmt::format("oversub:   calls: {}\n", per_call);
  std::string section_json;
  std::string section_text;
  if (section_fn fn = g_pool_section.load(std::memory_order_acquire);
      fn != nullptr && fn(section_json, section_text)) {
    out += section_text;
  }
  section_json.clear();
  section_text.clear();
  if (section_fn fn = g_schedule_section.load(std::memory_order_acquire);
      fn != nullptr && fn(section_json, section_text)) {
    out += section_text;
  }
  return out;
}

void report(const config& cfg) noexcept {
  if (cfg.stats == stats_format::none) return;
  try {
    std::string text = cfg.stats == stats_format::json ? format_json(cfg, ::getpid())
                                                       : format_text(cfg);
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
}

}  // namespace oversub::stats
