// Fault injection counters (see fault_injection.h).
#include "fault_injection.h"

#include <cstdint>

namespace simgpu {

CUresult inject_failure(fail_kind kind) {
  static uint64_t counts[static_cast<int>(fail_kind::count_)] = {};
  const config& cfg = get_config();
  if (cfg.fail.empty()) return CUDA_SUCCESS;
  uint64_t n = ++counts[static_cast<int>(kind)];
  for (const fail_rule& r : cfg.fail) {
    if (r.kind != kind) continue;
    if (n == r.nth || (r.and_later && n > r.nth)) return static_cast<CUresult>(r.code);
  }
  return CUDA_SUCCESS;
}

}  // namespace simgpu
