// The logging funnel (see log.h).
#include "common/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace oversub::log {

namespace detail {
std::atomic<std::uint8_t> threshold{static_cast<std::uint8_t>(level::warn)};
}  // namespace detail

namespace {

std::atomic<int> g_fd{-1};

constexpr std::size_t line_capacity = 1024;  // bytes, including prefix and newline

struct line_state {
  char buffer[line_capacity];
  bool busy;
};
// The line buffer uses the default TLS model: at 1 KiB it would not fit the small
// static-TLS surplus glibc keeps for a library loaded with dlopen, and logging is
// not on a hot path (see Note [Initial-exec TLS] in interpose/real.h).
thread_local line_state t_line{};

void write_all(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

int destination() noexcept {
  int fd = g_fd.load(std::memory_order_relaxed);
  return fd >= 0 ? fd : STDERR_FILENO;
}

std::string_view tag(level l) {
  switch (l) {
    case level::error: return "error: ";
    case level::warn: return "warning: ";
    default: return "";
  }
}

}  // namespace

std::string_view to_string(level l) {
  switch (l) {
    case level::error: return "error";
    case level::warn: return "warn";
    case level::info: return "info";
    case level::debug: return "debug";
    case level::trace: return "trace";
  }
  return "?";
}

void set_level(level l) {
  detail::threshold.store(static_cast<std::uint8_t>(l), std::memory_order_relaxed);
}

void set_fd(int fd) { g_fd.store(fd, std::memory_order_relaxed); }

int fd() { return destination(); }

void write_raw(std::string_view text) noexcept {
  write_all(destination(), text.data(), text.size());
}

void detail::vwrite(level l, fmt::string_view format, fmt::format_args args) noexcept {
  line_state& line = t_line;
  if (line.busy) return;
  line.busy = true;
  constexpr std::string_view prefix = "oversub: ";
  char* out = line.buffer;
  std::memcpy(out, prefix.data(), prefix.size());
  std::size_t used = prefix.size();
  std::string_view t = tag(l);
  std::memcpy(out + used, t.data(), t.size());
  used += t.size();
  const std::size_t room = line_capacity - used - 1;  // keep one byte for '\n'
  std::size_t total = 0;
  try {
    total = fmt::vformat_to_n(out + used, room, format, args).size;
  } catch (...) {
    constexpr std::string_view failed = "(message could not be formatted)";
    std::memcpy(out + used, failed.data(), failed.size());
    total = failed.size();
  }
  if (total > room) {
    used += room;
    std::memcpy(out + used - 3, "...", 3);
  } else {
    used += total;
  }
  out[used++] = '\n';
  write_all(destination(), out, used);
  line.busy = false;
}

}  // namespace oversub::log
