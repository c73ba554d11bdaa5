// OVERSUB_MODE=auto: swap or um, decided once at start from the profile loaded then.
//
// Note [Choosing the mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// OVERSUB_MODE=auto is resolved once, before the pool and its engines are built (the
// first call that needs the pool: interpose/pool_hooks.cc), into swap or um, the
// effective mode from then on (the exit statistics report it):
// - a device that cannot map host memory runs um (pool without managed memory either),
//   as OVERSUB_MODE=swap falls back (Note [Swap needs host-located VMM] in
//   core/device_pool.cc);
// - with a profile loaded at start (OVERSUB_PROFILE_IN, or OVERSUB_PROFILE where the file
//   exists), its iteration is predicted in both modes at the capacity swap mode would
//   have (OVERSUB_DEVICE_LIMIT, else the device's free memory less a headroom) with the
//   stand-in costs the learner and the layout use before they measure (Note [Launch
//   durations] in core/schedule_costs.cc) and the profile's measured link rates, and the mode
//   predicted faster is taken (Note [Predicting swap against um] in
//   policy/mode_choice.h);
// - without one (a job that never repeats, a first run, a profile refused): um where
//   the device has concurrent managed access, else swap (Note [Without a profile, um]
//   in core/mode_choice.cc).
// The choice and its figures are one line with OVERSUB_VERBOSE=1 (else at
// OVERSUB_LOG=info). Deciding later, once the iteration is learned, would mean moving
// every allocation between the arena and managed memory mid-run; at start nothing
// is allocated yet.
#ifndef OVERSUB_CORE_MODE_CHOICE_H
#define OVERSUB_CORE_MODE_CHOICE_H

#include <cstdint>

#include "common/options.h"
#include "core/pool_setup.h"

namespace oversub {

// See Note [Choosing the mode]. limit_bytes: OVERSUB_DEVICE_LIMIT resolved (0: none, the
// device's memory from ask). Sets the effective mode (set_effective_mode) and returns
// it. Called once, with OVERSUB_MODE=auto.
run_mode resolve_auto_mode(std::uint64_t limit_bytes, memory_query ask);

}  // namespace oversub

#endif  // OVERSUB_CORE_MODE_CHOICE_H
