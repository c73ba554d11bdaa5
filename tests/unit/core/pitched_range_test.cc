// The byte range of a pitched (2D) copy or memset (core/pitched_range.h).
#include "core/pitched_range.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace oversub {
namespace {

constexpr std::uintptr_t base = 0x7f0000000000;

TEST(PitchedRange, RowsPitchApartEndAtTheLastRowsWidth) {
  // 3 rows of 100 bytes, 128 apart: 128 + 128 + 100.
  EXPECT_EQ(pitched_range(base, 128, 100, 3), (pitched_bytes{base, 356}));
}

TEST(PitchedRange, OneRowIsItsWidth) {
  EXPECT_EQ(pitched_range(base, 4096, 100, 1), (pitched_bytes{base, 100}));
  // The pitch does not matter for one row, even one below the width.
  EXPECT_EQ(pitched_range(base, 0, 100, 1), (pitched_bytes{base, 100}));
}

TEST(PitchedRange, PitchEqualToWidthIsContiguous) {
  EXPECT_EQ(pitched_range(base, 64, 64, 10), (pitched_bytes{base, 640}));
}

TEST(PitchedRange, NoRowsOrNoColumnsReachNothing) {
  EXPECT_EQ(pitched_range(base, 128, 100, 0).bytes, 0u);
  EXPECT_EQ(pitched_range(base, 128, 0, 5).bytes, 0u);
  EXPECT_EQ(pitched_range(base, 0, 0, 0).bytes, 0u);
}

TEST(PitchedRange, AnOffsetMovesTheStart) {
  // The driver's srcXInBytes / srcY: 8 bytes into row 2.
  EXPECT_EQ(pitched_range(base, 128, 100, 3, 8, 2), (pitched_bytes{base + 264, 356}));
}

TEST(PitchedRange, ASpanPastTheAddressSpaceIsNoRange) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(pitched_range(base, max / 2, 16, 4).bytes, 0u);
  EXPECT_EQ(pitched_range(base, max / 2, 16, 2, 0, 4).bytes, 0u);
  EXPECT_EQ(pitched_range(std::numeric_limits<std::uintptr_t>::max() - 8, 16, 16, 1, 0, 1).bytes,
            0u);
  // The largest that fits is kept.
  EXPECT_EQ(pitched_range(0, 1, max, 1), (pitched_bytes{0, max}));
}

}  // namespace
}  // namespace oversub
