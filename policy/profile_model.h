// profile_model: a profile (profiler/profile_format.h) turned into the policy's
// input (policy/iteration_model.h), for the what-if simulator.
//
// Note [Profile to iteration model]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// - Every allocation is a buffer of its bytes. A long-lived allocation is
//   long-lived. A per-iteration one lives over launches [alloc_at, free_at - 1]
//   (positions count the launches issued before the event), widened to cover every
//   launch that uses it.
// - An allocation live at no launch (a long-lived one freed before the first launch:
//   the previous iteration's, its free rotated into this one; a per-iteration one
//   freed before the next launch) is a buffer of 0 bytes: it holds no memory while
//   a launch runs. So peak live bytes are those of `oversub report`.
// - A per-iteration allocation not freed within the iteration (free_at none: the
//   profile's iteration was rotated, so it is freed in the next one) is taken as
//   long-lived: it counts as live over the whole iteration and its content is kept
//   across, which can only overstate memory and copies.
// - A launch uses the allocations its arguments point into; which of them it
//   writes is not in the profile, so every use counts as a write (the policy's safe
//   reading: an eviction copies out).
// - A launch marked unreadable (its parameter layout could not be read: Note [A
//   launch whose buffers are not known] in profiler/profile_format.h) uses every
//   buffer holding memory at it: every long-lived one not yet freed and every
//   per-iteration one over [alloc_at, free_at).
// - The profile's copies and memsets (the application's own, e.g. the input batch)
//   are not replayed: they are the same with or without oversub.
//
// Note [Duration model]
// ~~~~~~~~~~~~~~~~~~~~~
// A launch's duration is the profile's measured duration_ns. Where it is 0 (the
// profile was taken without CUPTI kernel activity), or when every duration is to be
// modeled for another device, it is the time to stream every byte of the buffers
// the launch uses once through device memory on the device model, and at least the
// device's launch latency:
//     duration_ns = max(launch_latency_ns, ceil(bytes_used * 1e9 / memory_bandwidth))
// A profile knows bytes, not FLOPs, so this is a memory-bound (roofline floor)
// estimate: compute-bound kernels (large GEMMs, convolutions) run longer on a real
// device, which makes the modeled iteration shorter and the estimated overhead of
// swapping larger (pessimistic for oversub).
#ifndef OVERSUB_POLICY_PROFILE_MODEL_H
#define OVERSUB_POLICY_PROFILE_MODEL_H

#include <cstdint>
#include <string>

#include "policy/iteration_model.h"
#include "profiler/profile_format.h"
#include "policy/device_model.h"

namespace oversub::policy {

enum class duration_source {
  automatic,  // measured where the profile has it, modeled where it is 0
  model,      // every launch modeled on the device (Note [Duration model])
};

struct profile_model {
  std::string error;  // empty: model is valid
  iteration_model model;
  std::uint32_t durations_measured = 0;  // launches with the profile's duration
  std::uint32_t durations_modeled = 0;   // launches with a modeled duration
  std::uint32_t long_lived = 0;          // long-lived buffers, the unfreed included
  std::uint32_t unfreed = 0;             // per-iteration allocations taken as long-lived
  std::uint32_t live_at_no_launch = 0;   // allocations taken as 0 bytes
  std::uint32_t unreadable_launches = 0; // launches taken to use every live buffer
};

// The modeled duration of a launch using `bytes_used` bytes (Note [Duration model]).
std::uint64_t modeled_duration_ns(std::uint64_t bytes_used, const device_model& device);

// A profile's link rate (bytes/s) where usable, else 0: a rate under 1 GB/s comes from
// copies of a few bytes (a loss read back), not the link.
inline double profile_link_rate(std::uint64_t bytes_per_s) {
  return bytes_per_s >= 1'000'000'000 ? static_cast<double>(bytes_per_s) : 0.0;
}

// See Note [Profile to iteration model]. An error for a profile with no launches or a
// model that does not validate (validate_model's message).
profile_model model_from_profile(const profiler::profile& p, const device_model& device,
                                 duration_source durations);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_PROFILE_MODEL_H
