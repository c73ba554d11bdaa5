// How the pool is set up from the options: the settings core::configure() takes, the
// long-lived layout a saved profile asks for, and the fallback from swap mode on a
// device that cannot map host memory. Decided once, at the first call that needs the
// pool (interpose/pool_hooks.cc); the device's memory comes from the caller, which
// asks CUDA the way its entry point does.
#ifndef OVERSUB_CORE_POOL_SETUP_H
#define OVERSUB_CORE_POOL_SETUP_H

#include <cstddef>

#include "common/options.h"
#include "core/device_pool.h"

namespace oversub {

struct device_memory {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
// The device's free and total memory (the real cudaMemGetInfo).
using memory_query = device_memory (*)();

// See Note [Swap needs host-located VMM] in core/device_pool.cc: swap mode on a device
// that cannot map host memory runs as um, or, without managed memory, as pool (the
// effective mode is changed and the reason printed).
void fall_back_without_host_vmm();

// The pool's settings for cfg (OVERSUB_MODE=pool and above). In swap mode with a saved
// profile (OVERSUB_PROFILE_IN) the long-lived buffers' layout is chosen and handed to
// the pool too (Note [Long-lived layout from a profile] in policy/placement.h). ask is
// called only where a limit or the layout needs the device's memory.
core::pool_settings pool_settings_for(const config& cfg, memory_query ask);

}  // namespace oversub

#endif  // OVERSUB_CORE_POOL_SETUP_H
