// oversub logging: the one funnel every message goes through.
//
// A message is formatted with fmt into a fixed per-thread buffer (1 KiB, longer
// messages are cut and end in "..."), prefixed with "oversub: " and the level for
// warnings and errors, and written with one write(2) to stderr or OVERSUB_LOG_FILE.
// Nothing allocates, nothing locks, so the funnel is safe in hooks, in a child
// after fork and during exit. A message logged while another is being formatted on
// the same thread (a formatter that calls back into a hook) is dropped.
//
// Levels are set once from OVERSUB_LOG; level checks are one relaxed atomic load.
#ifndef OVERSUB_COMMON_LOG_H
#define OVERSUB_COMMON_LOG_H

#include <fmt/core.h>

#include <atomic>
#include <cstdint>
#include <string_view>

namespace oversub::log {

enum class level : std::uint8_t { error, warn, info, debug, trace };

std::string_view to_string(level l);

namespace detail {
extern std::atomic<std::uint8_t> threshold;
void vwrite(level l, fmt::string_view format, fmt::format_args args) noexcept;
}  // namespace detail

inline bool enabled(level l) {
  return static_cast<std::uint8_t>(l) <=
         detail::threshold.load(std::memory_order_relaxed);
}

void set_level(level l);

// Sends messages to fd (not closed by the funnel); -1 returns to stderr.
void set_fd(int fd);
int fd();

// Writes text as is (no prefix) to the log's destination.
void write_raw(std::string_view text) noexcept;

template <typename... T>
void emit(level l, fmt::format_string<T...> format, const T&... args) noexcept {
  if (enabled(l)) detail::vwrite(l, format, fmt::make_format_args(args...));
}
template <typename... T>
void error(fmt::format_string<T...> format, const T&... args) noexcept {
  emit(level::error, format, args...);
}
template <typename... T>
void warn(fmt::format_string<T...> format, const T&... args) noexcept {
  emit(level::warn, format, args...);
}
template <typename... T>
void info(fmt::format_string<T...> format, const T&... args) noexcept {
  emit(level::info, format, args...);
}
template <typename... T>
void debug(fmt::format_string<T...> format, const T&... args) noexcept {
  emit(level::debug, format, args...);
}
template <typename... T>
void trace(fmt::format_string<T...> format, const T&... args) noexcept {
  emit(level::trace, format, args...);
}

}  // namespace oversub::log

#endif  // OVERSUB_COMMON_LOG_H
