// What the two residency backends share (see backend.h): the capacity less the
// memory of other libraries (Note [Memory that is not ours] in backend.h).
#include "residency/backend.h"

namespace oversub::residency {

bool residency_backend::reserve_foreign(std::int64_t bytes) {
  if (bytes < 0) {
    foreign_bytes_.fetch_sub(static_cast<std::uint64_t>(-bytes), std::memory_order_relaxed);
    return true;
  }
  std::uint64_t have = foreign_bytes_.load(std::memory_order_relaxed);
  do {
    if (have + static_cast<std::uint64_t>(bytes) >= configured_bytes_) return false;
  } while (!foreign_bytes_.compare_exchange_weak(have, have + static_cast<std::uint64_t>(bytes),
                                                  std::memory_order_relaxed));
  return true;
}

}  // namespace oversub::residency
