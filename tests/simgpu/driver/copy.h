// Copies, memsets and prefetches: validation, the device side run in a window,
// the copy engines on the virtual clock, race accesses and activity records.
//
// Note [Copy cost]
// ~~~~~~~~~~~~~~~~
// duration = copy_latency_ns + bytes / bandwidth, where the bandwidth is the
// model's pinned or pageable host-link rate for the direction (pinned when the host
// side lies in cuMemAllocHost/cuMemHostAlloc/cuMemHostRegister memory), or for
// device-to-device 2 x bytes / memory bandwidth (read and write) on the compute
// engine. H2D and D2H run on their own copy engines. A copy whose host side is
// pageable, or a copy through a synchronous entry point, returns only when it is
// complete (host time jumps to its end). A memset runs on the compute engine, after
// the launch latency, for bytes / memory bandwidth.
#ifndef SIMGPU_DRIVER_COPY_H
#define SIMGPU_DRIVER_COPY_H

#include <cuda.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "clock.h"

namespace simgpu {

CUresult do_copy(stream_obj* s, uintptr_t dst, uintptr_t src, uint64_t bytes, bool sync);
// `height` rows of `width` bytes, rows `dpitch`/`spitch` bytes apart; one operation.
CUresult do_copy_2d(stream_obj* s, uintptr_t dst, uint64_t dpitch, uintptr_t src,
                    uint64_t spitch, uint64_t width, uint64_t height, bool sync);
CUresult do_memset(stream_obj* s, uintptr_t dst, uint32_t value, unsigned elem_bytes,
                   uint64_t count, bool sync);
CUresult do_prefetch(stream_obj* s, uintptr_t p, uint64_t bytes, CUmemLocation loc);
// cuMemDiscardBatchAsync's ranges, checked (Note [Discards] in managed.h).
CUresult do_discard(stream_obj* s, std::vector<std::pair<uintptr_t, uint64_t>> ranges);

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_COPY_H
