// Byte-count formatting (see units.h).
#include "common/units.h"

#include <fmt/format.h>

namespace oversub {

std::string format_bytes(std::uint64_t bytes) {
  constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, names[unit]);
}

std::string format_fraction(double value) {
  std::string out = fmt::format("{}", value);
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";
  return out;
}

}  // namespace oversub
