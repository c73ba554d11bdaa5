// The residency side of a call in swap and um modes (OVERSUB_MODE=swap or um): before
// a launch, copy or memset is enqueued, the device memory it uses is made resident
// (residency/backend.h) and the work ordered after the moves; a launch's buffers are
// found from its argument words in the tracker, and the learned schedule
// (core/schedule.h) sees each launch first. The hooks (interpose/swap_hooks.h) find
// the words and ranges of each entry point and call these.
//
// A call whose memory cannot be made resident is refused (Note [One refusal message]
// in core/refusal.h), or, when a driver call failed, gets CUDA's code for it.
#ifndef OVERSUB_CORE_LAUNCH_RESIDENCY_H
#define OVERSUB_CORE_LAUNCH_RESIDENCY_H

#include <cuda.h>
#include <driver_types.h>

#include <cstddef>
#include <cstdint>

#include "common/tracker.h"
#include "core/device_pool.h"

namespace oversub {

// The call whose memory is made resident.
struct resident_call {
  const char* name;  // the entry point, for the log
  int device;
  CUstream stream;   // the stream its work is enqueued on
  bool runtime;      // a runtime entry point (else a driver one)
};

// ranges[0, n) made resident on the call's stream (writes: the work may write them).
cudaError_t make_resident(const resident_call& at, const residency::byte_range* ranges, std::size_t n,
                          bool writes);

// A copy's or a memset's ranges (ranges[0, n), n <= 2): as make_resident, except in um
// mode (Note [Copies in um mode] in core/launch_residency.cc).
cudaError_t make_copy_resident(const resident_call& at, const residency::byte_range* ranges,
                               std::size_t n, bool writes);

// The launch path's per-thread buffer for a launch's argument words
// (profiler::max_scan_words of them), or null when it cannot be allocated.
std::uint64_t* launch_words() noexcept;

// A launch whose n_words argument words are words: the live allocations of t they
// point into made resident, after the learned schedule has had its say (it allocates:
// this may throw, see Note [Nothing crosses the ABI edge] in interpose/abi_guard.h).
// unreadable: the parameter layout could not be read, so the words are none of the
// launch's, and it may touch any page (Note [A launch that may touch anything] in
// residency/swap_engine.h).
// kernel: the function launched (the learner's tokens tell kernels over the same
// pages apart), or null.
cudaError_t make_launch_resident(const resident_call& at, const tracker& t,
                                 const std::uint64_t* words, std::size_t n_words,
                                 bool unreadable, const void* kernel);

// A replay of exec: work that may use any page (see Note [A launch that may touch
// anything] in residency/swap_engine.h), whose footprint seen at capture is made
// resident first (Note [A graph's footprint] in core/graph_footprint.h). Allocates
// (may throw).
cudaError_t make_graph_resident(const resident_call& at, CUgraphExec exec);

}  // namespace oversub

#endif  // OVERSUB_CORE_LAUNCH_RESIDENCY_H
