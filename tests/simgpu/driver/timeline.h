// Note [The timeline]
// ~~~~~~~~~~~~~~~~~~~
// SIMGPU_TIMELINE=path writes what ran when on the virtual clock
// as a Chrome trace (JSON array of complete events; opens in Perfetto and
// chrome://tracing): one track per stream with its kernels, copies and memsets, and a
// "host" track with the spans the host spent waiting for the device (stream, event
// and device synchronisation), and a track per host thread with its VMM calls
// (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease: the calls whose
// host time a residency engine's mover spends). The question it answers is the one
// virtual times alone cannot: which engine or wait an iteration's time went to.
#ifndef SIMGPU_DRIVER_TIMELINE_H
#define SIMGPU_DRIVER_TIMELINE_H

#include <cstdint>

namespace simgpu {

bool timeline_on();
// A device operation on stream `stream` over [start_ns, end_ns). name is copied.
void timeline_op(const char* category, const char* name, uint64_t stream, double start_ns,
                 double end_ns, uint64_t bytes);
// The host waited from from_ns to to_ns (nothing is written when it did not wait).
void timeline_host_wait(const char* what, double from_ns, double to_ns);
// Host thread `ordinal` (1: the first that called) spent [from_ns, to_ns) in call
// `what` over `bytes` at address `va` (0: none); `memory` ("device", "host" or
// nullptr) is what a map maps.
void timeline_host_call(int ordinal, const char* what, double from_ns, double to_ns,
                        uint64_t bytes, uintptr_t va, const char* memory);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_TIMELINE_H
