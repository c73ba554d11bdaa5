// Parsing of the OVERSUB_* options table (see options.h).
#include "common/options.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include <fmt/format.h>

#include "common/units.h"

extern char** environ;

namespace oversub {

namespace {

constexpr std::string_view option_prefix = "OVERSUB_";

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses a non-negative decimal number ("12", "1.5", ".5"); nullopt otherwise.
std::optional<double> parse_decimal(std::string_view s, bool& had_point) {
  had_point = false;
  bool digits = false;
  for (char c : s) {
    if (c == '.') {
      if (had_point) return std::nullopt;
      had_point = true;
    } else if (c >= '0' && c <= '9') {
      digits = true;
    } else {
      return std::nullopt;
    }
  }
  if (!digits) return std::nullopt;
  double value = 0.0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

struct unit {
  std::string_view suffix;
  double multiplier;
};
// Longest suffixes first so "MiB" is not read as "B".
constexpr unit size_units[] = {
    {"KiB", 1024.0},        {"MiB", 1024.0 * 1024},          {"GiB", 1024.0 * 1024 * 1024},
    {"TiB", 1024.0 * 1024 * 1024 * 1024},
    {"KB", 1e3},            {"MB", 1e6},                     {"GB", 1e9},
    {"TB", 1e12},
    {"K", 1024.0},          {"M", 1024.0 * 1024},            {"G", 1024.0 * 1024 * 1024},
    {"T", 1024.0 * 1024 * 1024 * 1024},
    {"B", 1.0},
};

std::string format_value(run_mode m) { return std::string(to_string(m)); }
std::string format_value(const device_limit& l) {
  switch (l.how) {
    case device_limit::kind::none: return "none";
    case device_limit::kind::bytes: return fmt::format("{}", l.bytes);
    case device_limit::kind::fraction: return format_fraction(l.fraction);
  }
  return "?";
}
std::string format_value(pool_kind k) { return std::string(to_string(k)); }
std::string format_value(swap_policy p) { return std::string(to_string(p)); }
std::string format_value(std::uint64_t bytes) { return fmt::format("{}", bytes); }
std::string format_value(const host_limit& h) { return format_value(h.value); }
std::string format_value(log::level l) { return std::string(log::to_string(l)); }
std::string format_value(const std::string& s) { return s; }
std::string format_value(bool b) { return b ? "1" : "0"; }
std::string format_value(stats_format s) { return std::string(to_string(s)); }

}  // namespace

std::string expand_pid(std::string_view path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += std::to_string(::getpid());
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

std::uint64_t device_limit::resolve(std::uint64_t total_bytes) const {
  switch (how) {
    case kind::none: return std::numeric_limits<std::uint64_t>::max();
    case kind::bytes: return bytes;
    case kind::fraction: return static_cast<std::uint64_t>(fraction * static_cast<double>(total_bytes));
  }
  return std::numeric_limits<std::uint64_t>::max();
}

std::string_view to_string(run_mode m) {
  switch (m) {
#define OVERSUB_MODE_NAME(name, word, doc) \
  case run_mode::name: return word;
    OVERSUB_MODES(OVERSUB_MODE_NAME)
#undef OVERSUB_MODE_NAME
  }
  return "?";
}

std::string_view to_string(pool_kind k) {
  return k == pool_kind::planned ? "planned" : "online";
}

std::string_view to_string(swap_policy p) {
  switch (p) {
    case swap_policy::cost: return "cost";
    case swap_policy::vdnn_all: return "vdnn-all";
    case swap_policy::lru: return "lru";
    case swap_policy::naive: return "naive";
  }
  return "?";
}

std::string_view to_string(stats_format s) {
  switch (s) {
    case stats_format::none: return "0";
    case stats_format::text: return "1";
    case stats_format::json: return "json";
  }
  return "?";
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::string_view s = trim(text);
  double multiplier = 1.0;
  for (const unit& u : size_units) {
    if (s.size() > u.suffix.size() && iequals(s.substr(s.size() - u.suffix.size()), u.suffix)) {
      multiplier = u.multiplier;
      s = trim(s.substr(0, s.size() - u.suffix.size()));
      break;
    }
  }
  bool had_point = false;
  std::optional<double> mantissa = parse_decimal(s, had_point);
  if (!mantissa) return std::nullopt;
  if (!had_point && multiplier == 1.0) {
    std::uint64_t exact = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), exact);
    if (ec != std::errc() || end != s.data() + s.size() || exact > (1ULL << 63)) return std::nullopt;
    return exact;
  }
  double bytes = std::floor(*mantissa * multiplier);
  if (!(bytes <= 9.2233720368547758e18)) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

bool parse_mode(std::string_view text, run_mode& out) {
  std::string_view s = trim(text);
#define OVERSUB_MODE_PARSE(name, word, doc) \
  if (iequals(s, word)) {                   \
    out = run_mode::name;                   \
    return true;                            \
  }
  OVERSUB_MODES(OVERSUB_MODE_PARSE)
#undef OVERSUB_MODE_PARSE
  return false;
}

// Note [Fraction or bytes]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// "0.75" and "4096" are both plain numbers. A decimal
// point makes a fraction of the device (0.5 of an 80 GiB device is 40 GiB), its
// absence makes a byte count, as in the other size options users know (PyTorch,
// mimalloc). Fractions above 1 are allowed (up to 16) for the modes that place
// more than the device holds; a byte limit below 1 MiB is a typo, not a device.
bool parse_device_limit(std::string_view text, device_limit& out) {
  std::string_view s = trim(text);
  if (s.empty() || iequals(s, "none")) {
    out = device_limit{};
    return true;
  }
  bool had_point = false;
  if (std::optional<double> f = parse_decimal(s, had_point); f && had_point) {
    if (!(*f > 0.0 && *f <= 16.0)) return false;
    out = device_limit{device_limit::kind::fraction, 0, *f};
    return true;
  }
  std::optional<std::uint64_t> bytes = parse_size(s);
  if (!bytes || *bytes < (1ULL << 20) || *bytes > (1ULL << 50)) return false;
  out = device_limit{device_limit::kind::bytes, *bytes, 0.0};
  return true;
}

bool parse_pool_kind(std::string_view text, pool_kind& out) {
  std::string_view s = trim(text);
  if (iequals(s, "online")) return out = pool_kind::online, true;
  if (iequals(s, "planned")) return out = pool_kind::planned, true;
  return false;
}

bool parse_swap_policy(std::string_view text, swap_policy& out) {
  std::string_view s = trim(text);
  if (iequals(s, "cost")) return out = swap_policy::cost, true;
  if (iequals(s, "vdnn-all")) return out = swap_policy::vdnn_all, true;
  if (iequals(s, "lru")) return out = swap_policy::lru, true;
  if (iequals(s, "naive")) return out = swap_policy::naive, true;
  return false;
}

bool parse_prefetch(std::string_view text, std::uint64_t& out) {
  std::string_view s = trim(text);
  if (iequals(s, "auto")) return out = 0, true;
  std::uint64_t n = 0;
  if (s.empty() || s.size() > 6) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (n < 1 || n > 100000) return false;
  out = n;
  return true;
}

bool parse_pool_large(std::string_view text, std::uint64_t& out) {
  std::optional<std::uint64_t> bytes = parse_size(text);
  if (!bytes || *bytes < (2ULL << 20)) return false;
  out = *bytes;
  return true;
}

bool parse_host_limit(std::string_view text, host_limit& out) {
  device_limit l;
  if (!parse_device_limit(text, l)) return false;
  if (l.how == device_limit::kind::fraction && l.fraction > 1.0) return false;
  out.value = l;
  return true;
}

bool parse_log_level(std::string_view text, log::level& out) {
  std::string_view s = trim(text);
  for (log::level l : {log::level::error, log::level::warn, log::level::info,
                       log::level::debug, log::level::trace}) {
    if (iequals(s, log::to_string(l))) {
      out = l;
      return true;
    }
  }
  if (iequals(s, "warning")) {
    out = log::level::warn;
    return true;
  }
  return false;
}

bool parse_path(std::string_view text, std::string& out) {
  out = std::string(trim(text));
  return true;
}

bool parse_bool(std::string_view text, bool& out) {
  std::string_view s = trim(text);
  for (std::string_view t : {"1", "on", "yes", "true"}) {
    if (iequals(s, t)) return out = true, true;
  }
  for (std::string_view f : {"0", "off", "no", "false", ""}) {
    if (iequals(s, f)) return out = false, true;
  }
  return false;
}

bool parse_mover(std::string_view text, bool& out) {
  std::string_view s = trim(text);
  if (iequals(s, "thread")) return out = true, true;
  if (iequals(s, "inline")) return out = false, true;
  return false;
}

bool parse_stats(std::string_view text, stats_format& out) {
  std::string_view s = trim(text);
  if (iequals(s, "json")) return out = stats_format::json, true;
  if (iequals(s, "text")) return out = stats_format::text, true;
  bool on = false;
  if (!parse_bool(s, on)) return false;
  out = on ? stats_format::text : stats_format::none;
  return true;
}

bool parse_count(std::string_view text, std::uint64_t& out) {
  std::string_view s = trim(text);
  if (s.empty() || s.size() > 7) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > 1'000'000) return false;
  out = v;
  return true;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

const std::vector<option_info>& option_table() {
  static const auto* table = new std::vector<option_info>{
#define OVERSUB_OPTION_INFO(NAME, field, parser, def, accepted, doc) \
  option_info{"OVERSUB_" #NAME, def, accepted, doc},
      OVERSUB_OPTIONS(OVERSUB_OPTION_INFO)
#undef OVERSUB_OPTION_INFO
  };
  return *table;
}

// Note [Closest name]
// ~~~~~~~~~~~~~~~~~~~
// A name whose tail contains what was typed (OVERSUB_LIMIT,
// OVERSUB_STAT) most likely meant that option, the first such in the table (the
// table lists the older, more used options first: OVERSUB_LIMIT means
// OVERSUB_DEVICE_LIMIT, not OVERSUB_HOST_LIMIT); otherwise the smallest edit
// distance wins (OVERSUB_DEVICE_LIMT, OVERSUB_LOGFILE).
std::string_view closest_option_name(std::string_view name) {
  const std::string_view typed =
      name.substr(0, option_prefix.size()) == option_prefix ? name.substr(option_prefix.size())
                                                             : name;
  std::string_view best;
  if (!typed.empty()) {
    for (const option_info& o : option_table()) {
      std::string_view tail = o.name.substr(option_prefix.size());
      if (tail.find(typed) != std::string_view::npos) {
        best = o.name;
        break;
      }
    }
    if (!best.empty()) return best;
  }
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const option_info& o : option_table()) {
    std::size_t d = edit_distance(name, o.name);
    if (d < best_distance) {
      best_distance = d;
      best = o.name;
    }
  }
  return best;
}

parse_outcome parse_options(const std::vector<std::string_view>& env) {
  parse_outcome result;
  config& cfg = result.cfg;
#define OVERSUB_OPTION_DEFAULT(NAME, field, parser, def, accepted, doc) parser(def, cfg.field);
  OVERSUB_OPTIONS(OVERSUB_OPTION_DEFAULT)
#undef OVERSUB_OPTION_DEFAULT
  bool pool_given = false;
  for (std::string_view entry : env) {
    if (entry.substr(0, option_prefix.size()) != option_prefix) continue;
    std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = entry.substr(0, eq);
    std::string_view value = entry.substr(eq + 1);
    // Not an option: see Note [A test-only fault point] in interpose/abi_guard.h.
    if (name == "OVERSUB_TEST_THROW") continue;
    pool_given = pool_given || name == "OVERSUB_POOL";
    bool known = false;
#define OVERSUB_OPTION_PARSE(NAME, field, parser, def, accepted, doc)           \
  if (!known && name == "OVERSUB_" #NAME) {                                    \
    known = true;                                                              \
    if (!parser(value, cfg.field))                                             \
      result.errors.push_back({std::string(name), std::string(value), accepted,      \
                               refusal_reason(name, value)});                       \
  }
    OVERSUB_OPTIONS(OVERSUB_OPTION_PARSE)
#undef OVERSUB_OPTION_PARSE
    if (!known) {
      result.unknown.push_back({std::string(name), std::string(closest_option_name(name))});
    }
  }
  // Note [Swap plans its pool]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Swap mode's schedule is learned from the pages each
  // launch uses, which repeat only when every iteration's buffers land at the same
  // addresses: the planned placement. So swap mode defaults to OVERSUB_POOL=planned;
  // an explicit OVERSUB_POOL still wins.
  if (cfg.mode >= run_mode::swap && !pool_given) cfg.pool = pool_kind::planned;
  return result;
}

std::string refusal_reason(std::string_view name, std::string_view value) {
  const std::string_view s = trim(value);
  const bool device = name == "OVERSUB_DEVICE_LIMIT";
  if (device || name == "OVERSUB_HOST_LIMIT") {
    bool had_point = false;
    if (std::optional<double> f = parse_decimal(s, had_point); f && had_point) {
      return fmt::format("a fraction must be above 0 and at most {}", device ? "16.0" : "1.0");
    }
    if (std::optional<std::uint64_t> bytes = parse_size(s)) {
      if (*bytes < (1ULL << 20)) {
        return fmt::format("{} is below the minimum of 1 MiB (1048576 bytes){}",
                           *bytes == 1 ? std::string("1 byte") : fmt::format("{} bytes", *bytes),
                           device ? "; a fraction of the device is written with a decimal "
                                    "point, as 0.5"
                                  : "");
      }
      if (*bytes > (1ULL << 50)) return "above the maximum of 1024 TiB";
    }
    return "neither none, a size nor a fraction";
  }
  if (name == "OVERSUB_POOL_LARGE") {
    if (std::optional<std::uint64_t> bytes = parse_size(s); bytes && *bytes < (2ULL << 20)) {
      return fmt::format("{} bytes is below the minimum of 2 MiB (2097152 bytes)", *bytes);
    }
    return "not a size";
  }
  return "not one of the accepted forms";
}

std::string describe(const option_error& e) {
  return fmt::format("{}='{}' is not valid: {}. Accepted: {}", e.name, e.value,
                     e.reason.empty() ? refusal_reason(e.name, e.value) : e.reason, e.accepted);
}

std::vector<std::string> describe_config(const config& cfg) {
  std::vector<std::string> lines;
#define OVERSUB_OPTION_DESCRIBE(NAME, field, parser, def, accepted, doc) \
  lines.push_back(fmt::format("OVERSUB_" #NAME "={}", format_value(cfg.field)));
  OVERSUB_OPTIONS(OVERSUB_OPTION_DESCRIBE)
#undef OVERSUB_OPTION_DESCRIBE
  return lines;
}

namespace {

int open_append(const std::string& pattern) {
  std::string path = expand_pid(pattern);
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

const config& load_config() {
  std::vector<std::string_view> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  parse_outcome outcome = parse_options(env);
  if (!outcome.errors.empty()) {
    for (const option_error& e : outcome.errors) {
      std::string line = fmt::format("oversub: {}\n", describe(e));
      log::write_raw(line);
    }
    ::_exit(2);
  }
  auto* cfg = new config(std::move(outcome.cfg));
  resolve_profile_path(*cfg);
  log::set_level(cfg->log_level);
  if (!cfg->log_file.empty()) {
    int fd = open_append(cfg->log_file);
    if (fd >= 0) {
      log::set_fd(fd);
    } else {
      log::warn("cannot open OVERSUB_LOG_FILE='{}' ({}); logging to stderr",
                expand_pid(cfg->log_file), std::strerror(errno));
    }
  }
  for (const unknown_option& u : outcome.unknown) {
    log::warn("unknown option {} (did you mean {}?)", u.name, u.closest);
  }
  return *cfg;
}

}  // namespace

void resolve_profile_path(config& cfg) {
  if (cfg.profile.empty()) return;
  if (::access(cfg.profile.c_str(), R_OK) == 0) {
    if (cfg.profile_in.empty()) cfg.profile_in = cfg.profile;
  } else if (cfg.profile_out.empty()) {
    cfg.profile_out = cfg.profile;
  }
}

const config& current_config() {
  static const config& cfg = load_config();
  return cfg;
}

void say(const std::string& line) noexcept {
  if (current_config().verbose) log::write_raw("oversub: " + line + "\n");
  else log::info("{}", line);
}

void set_effective_mode(run_mode m) {
  const_cast<config&>(current_config()).mode = m;
}

int open_stats_destination(const config& cfg) {
  if (cfg.stats_file.empty()) return -1;
  const int fd = open_append(cfg.stats_file);
  if (fd < 0) {
    const int why = errno;
    log::warn("cannot open OVERSUB_STATS_FILE='{}' ({}); printing the statistics to {}",
              expand_pid(cfg.stats_file), std::strerror(why),
              log::fd() == STDERR_FILENO ? "stderr" : "the log (OVERSUB_LOG_FILE)");
  }
  return fd;
}

}  // namespace oversub
