// Human-readable byte counts for messages ("1.50 GiB (1610612736 bytes)" style).
#ifndef OVERSUB_COMMON_UNITS_H
#define OVERSUB_COMMON_UNITS_H

#include <cstdint>
#include <string>

namespace oversub {

// "512 B", "4.00 KiB", "1.50 GiB": binary units, two decimals past bytes.
std::string format_bytes(std::uint64_t bytes);

}  // namespace oversub

#endif  // OVERSUB_COMMON_UNITS_H
