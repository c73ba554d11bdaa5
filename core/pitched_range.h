// The bytes a pitched (2D) copy or memset reaches on one side: the runtime's
// cudaMemcpy2D* / cudaMemset2D* and the driver's cuMemcpy2D* / cuMemsetD2D* paths
// both ask this, so a 2D call makes the same bytes resident whichever API made it.
//
// height rows of width bytes each, pitch bytes apart, starting x bytes into row y of
// the region at base: from the first byte of the first row to the last byte of the
// last, pitch * (height - 1) + width bytes. The padding after the last row is not
// reached. A call with no rows or no columns reaches nothing; a span that does not
// fit in the address space is no range either (CUDA refuses such a call itself).
#ifndef OVERSUB_CORE_PITCHED_RANGE_H
#define OVERSUB_CORE_PITCHED_RANGE_H

#include <cstddef>
#include <cstdint>
#include <limits>

namespace oversub {

struct pitched_bytes {
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
  friend constexpr bool operator==(const pitched_bytes&, const pitched_bytes&) = default;
};

constexpr pitched_bytes pitched_range(std::uintptr_t base, std::size_t pitch, std::size_t width,
                                      std::size_t height, std::size_t x = 0,
                                      std::size_t y = 0) noexcept {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  if (width == 0 || height == 0) return {base, 0};
  if (pitch != 0 && (height - 1 > (max - width) / pitch || y > (max - x) / pitch)) {
    return {base, 0};
  }
  const std::size_t offset = y * pitch + x;
  const std::size_t bytes = pitch * (height - 1) + width;
  if (base > std::numeric_limits<std::uintptr_t>::max() - offset) return {base, 0};
  return {base + offset, bytes};
}

}  // namespace oversub

#endif  // OVERSUB_CORE_PITCHED_RANGE_H
