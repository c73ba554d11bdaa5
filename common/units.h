// Human-readable byte counts for messages ("1.50 GiB (1610612736 bytes)" style).
#ifndef OVERSUB_COMMON_UNITS_H
#define OVERSUB_COMMON_UNITS_H

#include <cstdint>
#include <string>

namespace oversub {

// "512 B", "4.00 KiB", "1.50 GiB": binary units, two decimals past bytes.
std::string format_bytes(std::uint64_t bytes);

// A fraction as a user writes it, with its decimal point: "0.75", "16.0" (the
// shortest form that reads back as the same double, ".0" added to a whole number,
// since OVERSUB_DEVICE_LIMIT=16 and =16.0 mean different things; Note [Fraction or
// bytes] in common/options.cc).
std::string format_fraction(double value);

}  // namespace oversub

#endif  // OVERSUB_COMMON_UNITS_H
